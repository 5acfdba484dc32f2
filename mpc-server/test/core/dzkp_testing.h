// What the tests of the multiplication check's arithmetic share
// (dzkp_test.cc, dzkp_first_level_test.cc, dzkp_rounds_test.cc,
// dzkp_simd_test.cc): a seeded generator, the slow reference products, a
// clear AND log with its weights, and the fixture that runs a test on both
// paths (VPCLMULQDQ where the CPU has it, and scalar) for each group size.
#ifndef KMPC_TEST_CORE_DZKP_TESTING_H_
#define KMPC_TEST_CORE_DZKP_TESTING_H_

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "protocol/dzkp.h"

namespace kmpc::protocol::dzkp {

inline std::mt19937_64& Rng() {
  static std::mt19937_64 rng(0x647a6b70);
  return rng;
}
inline Fe RandomFe() { return FromU64(Rng()(), Rng()()); }
inline F64 RandomF64() { return F64{Rng()()}; }
inline bool Eq(Fe a, Fe b) { return Equal(a, b); }
inline bool Eq(F64 a, F64 b) { return Equal(a, b); }
// Random elements and the points e_j in either field (typed tests).
template <class E>
E Random();
template <>
inline Fe Random<Fe>() { return RandomFe(); }
template <>
inline F64 Random<F64>() { return RandomF64(); }
template <class E>
inline E El(uint64_t j) { return Field<E>::Elem(j); }

// Shift-and-add modulo x^64 + x^4 + x^3 + x + 1 (the reference for the
// GF(2^64) Mul).
inline F64 SlowMul64(F64 a, F64 b) {
  uint64_t r = 0;
  for (int i = 63; i >= 0; --i) {
    r = (r << 1) ^ ((r >> 63) ? 0x1B : 0);
    if ((b.v >> i) & 1) r ^= a.v;
  }
  return F64{r};
}

// Bit-by-bit multiplication in this basis (the independent reference
// for Mul): shift-and-add modulo x^128 + x^7 + x^2 + x + 1.
inline Fe SlowMul(Fe a, Fe b) {
  uint64_t av[2], bv[2];
  std::memcpy(av, &a, 16);
  std::memcpy(bv, &b, 16);
  uint64_t r[2] = {0, 0};
  for (int i = 127; i >= 0; --i) {
    const uint64_t top = r[1] >> 63;  // r *= x
    r[1] = (r[1] << 1) | (r[0] >> 63);
    r[0] = (r[0] << 1) ^ (top ? 0x87 : 0);
    if ((bv[i / 64] >> (i % 64)) & 1) r[0] ^= av[0], r[1] ^= av[1];
  }
  return FromU64(r[0], r[1]);
}


// A clear AND log of n words (x, y, z = x & y ^ err) and its weights.
struct ClearLog {
  std::vector<uint64_t> x, y, z, zero;
  std::unique_ptr<AndWeights> w = std::make_unique<AndWeights>();
  int gw;  // words per group
  ClearLog(size_t n, int g) : x(n), y(n), z(n), zero(n, 0), gw(g) {
    w->g = g;
    for (size_t i = 0; i < n; ++i) {
      x[i] = Rng()(), y[i] = Rng()();
      z[i] = x[i] & y[i];
    }
    for (auto& t : w->sigma) t = RandomF64();
    w->DeriveTau();
    w->nu.resize((n + gw - 1) / gw);
    for (auto& v : w->nu) v = Rng()();
  }
  // The sharing (v, 0, 0) as party 0 sees it: comp 0 = v, comp 1 = 0.
  AndShares Shares() const {
    return {{x.data(), zero.data()}, {y.data(), zero.data()}, {z.data(), zero.data()}, x.size()};
  }
  F64 Weight(size_t word, int lane) const {
    const size_t k = word / gw;
    return Mul(Mul(F64{static_cast<uint64_t>(w->nu[k])}, w->tau[word % gw]), LaneWeight(lane));
  }
  static int Bit(uint64_t v, int l) { return static_cast<int>((v >> l) & 1); }
  // f_{k,l}(p), g_{k,l}(p) gate by gate.
  F64 F(size_t k, int l, F64 p) const {
    F64 lag[kMaxGroupWords];
    LagrangeAt(gw, p, lag);
    F64 r = F64{0};
    for (int j = 0; j < gw; ++j) {
      const size_t word = k * gw + j;
      const F64 fw = Mul(Mul(F64{static_cast<uint64_t>(w->nu[k])}, w->sigma[j]), LaneWeight(l));
      if (word < x.size() && Bit(x[word], l)) r = Add(r, Mul(lag[j], fw));
    }
    return r;
  }
  F64 G(size_t k, int l, F64 p) const {
    F64 lag[kMaxGroupWords];
    LagrangeAt(gw, p, lag);
    F64 r = F64{0};
    for (int j = 0; j < gw; ++j) {
      const size_t word = k * gw + j;
      if (word < y.size() && Bit(y[word], l)) r = Add(r, Mul(lag[j], w->sigma[j]));
    }
    return r;
  }
  F64 H(F64 p) const {
    F64 r = F64{0};
    for (size_t k = 0; k < w->nu.size(); ++k)
      for (int l = 0; l < 64; ++l) r = Add(r, Mul(F(k, l, p), G(k, l, p)));
    return r;
  }
  // sum_g w_g v_g over the words of v.
  F64 Weighted(const std::vector<uint64_t>& v) const {
    F64 r = F64{0};
    for (size_t i = 0; i < v.size(); ++i)
      for (int l = 0; l < 64; ++l)
        if (Bit(v[i], l)) r = Add(r, Weight(i, l));
    return r;
  }
};

// The compression steps on both paths: VPCLMULQDQ (where the CPU has it)
// and one PCLMULQDQ per product.
class DzkpPaths : public ::testing::TestWithParam<std::tuple<bool, int>> {
 protected:
  void SetUp() override { prev_ = ForceScalar(std::get<0>(GetParam())); }
  static int Groups() { return std::get<1>(GetParam()); }
  void TearDown() override { ForceScalar(prev_); }
  bool prev_ = false;
};

// Instantiates DzkpPaths's tests of one file: the two paths by three
// group sizes.
#define KMPC_DZKP_PATHS() \
INSTANTIATE_TEST_SUITE_P(Paths, DzkpPaths, \
                         ::testing::Combine(::testing::Values(false, true), \
                                            ::testing::Values(16, 32, 64)), \
                         [](const auto& info) { \
                           return std::string(std::get<0>(info.param) ? "Scalar" : "Wide") + \
                                  "G" + std::to_string(std::get<1>(info.param)); \
                         });


}  // namespace kmpc::protocol::dzkp

#endif  // KMPC_TEST_CORE_DZKP_TESTING_H_
