// The multiplication check's arithmetic (protocol/dzkp.h) against
// independent computations: GF(2^128) against SP 800-38D's bit-by-bit
// multiplication and GF(2^64) against shift-and-add, the lift and the
// compression steps against plain sums over every gate (the halvings and
// the last compression in both fields), and the weak shares of three
// parties against the clear value.
#include "protocol/dzkp.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "protocol/gf128.h"

namespace kmpc::protocol::dzkp {
namespace {

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(0x647a6b70);
  return rng;
}
Fe RandomFe() { return FromU64(Rng()(), Rng()()); }
F64 RandomF64() { return F64{Rng()()}; }
bool Eq(Fe a, Fe b) { return Equal(a, b); }
bool Eq(F64 a, F64 b) { return Equal(a, b); }
// Random elements and the points e_j in either field (typed tests).
template <class E>
E Random();
template <>
Fe Random<Fe>() { return RandomFe(); }
template <>
F64 Random<F64>() { return RandomF64(); }
template <class E>
E El(uint64_t j) { return Field<E>::Elem(j); }

// Shift-and-add modulo x^64 + x^4 + x^3 + x + 1 (the reference for the
// GF(2^64) Mul).
F64 SlowMul64(F64 a, F64 b) {
  uint64_t r = 0;
  for (int i = 63; i >= 0; --i) {
    r = (r << 1) ^ ((r >> 63) ? 0x1B : 0);
    if ((b.v >> i) & 1) r ^= a.v;
  }
  return F64{r};
}

// Bit-by-bit multiplication in this basis (the independent reference
// for Mul): shift-and-add modulo x^128 + x^7 + x^2 + x + 1.
Fe SlowMul(Fe a, Fe b) {
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

TEST(Dzkp, FieldMatchesTheReferences) {
  for (int t = 0; t < 2000; ++t) {
    const Fe a = RandomFe(), b = RandomFe();
    ASSERT_TRUE(Eq(Mul(a, b), SlowMul(a, b))) << t;
    ASSERT_TRUE(Eq(MulX(a), Mul(a, FromU64(2)))) << t;
    // GCM's field, with the bits of every byte reversed.
    uint8_t ga[16], gb[16];
    ToGcm(a, ga);
    ToGcm(b, gb);
    Block ba, bb;
    std::memcpy(ba.data(), ga, 16);
    std::memcpy(bb.data(), gb, 16);
    const Block ref = GfMulReference(ba, bb);
    ASSERT_TRUE(Eq(Mul(a, b), FromGcm(ref.data()))) << t;
    ASSERT_TRUE(Eq(FromGcm(ga), a));
  }
  EXPECT_TRUE(Eq(MulX(FromU64(0, 1ull << 63)), FromU64(0x87)));
  for (int t = 0; t < 20; ++t) {
    const Fe a = RandomFe();
    EXPECT_TRUE(Eq(Mul(a, Inv(a)), FromU64(1)));
  }
  EXPECT_TRUE(Eq(Inv(Zero()), Zero()));
}

TEST(Dzkp, Field64MatchesShiftAndAdd) {
  for (int t = 0; t < 5000; ++t) {
    const F64 a = RandomF64(), b = t == 0 ? F64{~0ull} : RandomF64();
    ASSERT_TRUE(Eq(Mul(a, b), SlowMul64(a, b))) << t;
    ASSERT_TRUE(Eq(MulX(a), Mul(a, F64{2}))) << t;
  }
  EXPECT_TRUE(Eq(MulX(F64{1ull << 63}), F64{0x1B}));
  // x^64 = x^4 + x^3 + x + 1, and the overflow of hi * x^64 folds again.
  Wide64 w;
  w.v = _mm_set_epi64x(-1, 0);  // (2^64 - 1) x^64
  EXPECT_TRUE(Eq(Reduce(w), SlowMul64(F64{~0ull}, SlowMul64(F64{1ull << 63}, F64{2}))));
  for (int t = 0; t < 20; ++t) {
    const F64 a = RandomF64();
    EXPECT_TRUE(Eq(Mul(a, Inv(a)), F64{1}));
  }
  EXPECT_TRUE(Eq(Inv(F64{0}), F64{0}));
}

// Lane l weighs x^l: a word lifts to itself, and the weights are distinct
// powers of x (so a nonzero error word lifts to a nonzero element).
TEST(Dzkp, LaneWeightsArePowersOfX) {
  F64 p{1};
  for (int l = 0; l < 64; ++l) {
    ASSERT_TRUE(Eq(LaneWeight(l), p)) << l;
    p = MulX(p);
  }
  for (int t = 0; t < 50; ++t) {
    const uint64_t w = t == 0 ? ~0ull : Rng()();
    F64 ref{0};
    for (int l = 0; l < 64; ++l)
      if ((w >> l) & 1) ref = Add(ref, LaneWeight(l));
    ASSERT_TRUE(Eq(F64{w}, ref));
  }
}

template <class E>
void ExpectLagrangeInterpolates() {
  for (int n : {3, 16, 17, 31, 32, 63, 64, kMaxHPoints}) {
    // A random polynomial of degree n - 1 through its values at e_j.
    std::vector<E> coef(n), val(n);
    for (auto& c : coef) c = Random<E>();
    auto eval = [&](E x) {
      E r = El<E>(0);
      for (int k = n - 1; k >= 0; --k) r = Add(Mul(r, x), coef[k]);
      return r;
    };
    for (int j = 0; j < n; ++j) val[j] = eval(El<E>(j));
    const E x = Random<E>();
    std::vector<E> lag(n);
    LagrangeAt(n, x, lag.data());
    E got = El<E>(0);
    for (int j = 0; j < n; ++j) got = Add(got, Mul(lag[j], val[j]));
    EXPECT_TRUE(Eq(got, eval(x))) << n;
    LagrangeAt(n, El<E>(1), lag.data());
    for (int j = 0; j < n; ++j) EXPECT_TRUE(Eq(lag[j], El<E>(j == 1))) << n;
  }
}

TEST(Dzkp, LagrangeInterpolates) {
  ExpectLagrangeInterpolates<Fe>();
  ExpectLagrangeInterpolates<F64>();
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
INSTANTIATE_TEST_SUITE_P(Paths, DzkpPaths,
                         ::testing::Combine(::testing::Values(false, true),
                                            ::testing::Values(16, 32, 64)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Scalar" : "Wide") +
                                  "G" + std::to_string(std::get<1>(info.param));
                         });

TEST_P(DzkpPaths, FirstCompressionMatchesThePlainSums) {
  for (size_t n : {1, 16, 37, 70, 130}) {
    const int G = Groups(), P = 2 * G - 1;
    ClearLog log(n, G);
    F64 hv[kMaxHPoints], claim[2];
    FirstLevelH(log.Shares(), *log.w, hv, claim);
    // The claim is sum w z; comp 1 of (v, 0, 0) is 0.
    EXPECT_TRUE(Eq(claim[0], log.Weighted(log.z))) << n;
    EXPECT_TRUE(Eq(claim[1], F64{0})) << n;
    // h at e_1 .. e_{P-1}, gate by gate (a few points: the sums are slow).
    for (int p : {1, 7, G - 1, G, P - 1}) {
      ASSERT_TRUE(Eq(hv[p - 1], log.H(F64{static_cast<uint64_t>(p)}))) << n << " p=" << p;
    }
    // sum_{j < G} h(e_j) = sum w x y = the claim.
    F64 sum = log.H(F64{static_cast<uint64_t>(0)});
    for (int p = 1; p < G; ++p) sum = Add(sum, hv[p - 1]);
    EXPECT_TRUE(Eq(sum, claim[0])) << n;
    // After the challenge: f(r), g(r) as the plain sums, and h(r) from the
    // P values = sum f(r) g(r) (the new claim holds).
    const F64 r = RandomF64();
    const size_t m = 64 * log.w->nu.size();
    std::vector<F64> f0(m), f1(m), g0(m), g1(m);
    FirstLevelFold(log.Shares(), *log.w, r, f0.data(), f1.data(), g0.data(), g1.data());
    F64 ip = F64{0};
    for (size_t k = 0; k < log.w->nu.size(); ++k) {
      for (int l = 0; l < 64; ++l) {
        ASSERT_TRUE(Eq(f0[64 * k + l], log.F(k, l, r))) << n << " " << k << " " << l;
        ASSERT_TRUE(Eq(g0[64 * k + l], log.G(k, l, r)));
        ASSERT_TRUE(Eq(f1[64 * k + l], F64{0}));
        ASSERT_TRUE(Eq(g1[64 * k + l], F64{0}));
        ip = Add(ip, Mul(f0[64 * k + l], g0[64 * k + l]));
      }
    }
    F64 v0[kMaxHPoints], v1[kMaxHPoints] = {};
    v0[0] = claim[0];
    for (int p = 1; p < P; ++p) {
      v0[p] = hv[p - 1];
      if (p < G) v0[0] = Add(v0[0], hv[p - 1]);
    }
    F64 hr[2];
    Interpolate(P, v0, v1, r, hr);
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
  }
}

// One additive error on any word, lane and gate makes the claim differ
// from sum_j h(e_j) (so the protocol's h(e_0) is off, and h with it).
TEST_P(DzkpPaths, AnErrorInAProductChangesTheClaim) {
  ClearLog log(70, Groups());
  F64 hv[kMaxHPoints], claim[2];
  FirstLevelH(log.Shares(), *log.w, hv, claim);
  const F64 honest = claim[0];
  for (size_t word : {0, 15, 16, 31, 32, 69}) {
    for (int lane : {0, 13, 63}) {
      log.z[word] ^= 1ull << lane;
      FirstLevelH(log.Shares(), *log.w, hv, claim);
      EXPECT_FALSE(Eq(claim[0], honest)) << word << " " << lane;
      log.z[word] ^= 1ull << lane;
    }
  }
}

// AndShares::wipe: the first compression's results are those of the same
// words read without it, and every word [0, n) of the six buffers is zero
// afterwards (words past n untouched), at sizes with partial groups and
// tails of a step of groups (1 word, G - 1, G + 1, odd counts).
TEST_P(DzkpPaths, FirstCompressionWipesTheWordsItReadLast) {
  const int G = Groups();
  for (size_t n : {size_t{1}, size_t(G - 1), size_t(G + 1), size_t(3 * G + 5), size_t{4 * 64 + 7},
                   size_t{9 * 64 + 63}}) {
    ClearLog clear(n, G);
    std::array<std::vector<uint64_t>, 6> v;
    for (int c = 0; c < 6; ++c) {
      v[c].resize(n + 3, 0x5a5a5a5a5a5a5a5aull);  // 3 sentinels past n
      for (size_t i = 0; i < n; ++i) v[c][i] = Rng()();
    }
    for (size_t i = 0; i < n; ++i) v[4][i] = v[0][i] & v[2][i];
    const auto copy = v;
    const AndShares ref{{copy[0].data(), copy[1].data()}, {copy[2].data(), copy[3].data()},
                        {copy[4].data(), copy[5].data()}, n};
    AndShares s{{v[0].data(), v[1].data()}, {v[2].data(), v[3].data()},
                {v[4].data(), v[5].data()}, n, /*wipe=*/true};
    F64 h_ref[kMaxHPoints], h[kMaxHPoints], c_ref[2], c[2];
    FirstLevelH(ref, *clear.w, h_ref, c_ref);
    FirstLevelH(s, *clear.w, h, c);
    for (int p = 0; p < 2 * G - 2; ++p) EXPECT_TRUE(Eq(h[p], h_ref[p])) << n << " " << p;
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(Eq(c[k], c_ref[k])) << n;
    const F64 r = RandomF64();
    const size_t m = 64 * clear.w->nu.size();
    std::array<std::vector<F64>, 4> fr, fw;
    for (int k = 0; k < 4; ++k) fr[k].resize(m), fw[k].resize(m);
    FirstLevelFold(ref, *clear.w, r, fr[0].data(), fr[1].data(), fr[2].data(), fr[3].data());
    FirstLevelFold(s, *clear.w, r, fw[0].data(), fw[1].data(), fw[2].data(), fw[3].data());
    for (int k = 0; k < 4; ++k)
      for (size_t q = 0; q < m; ++q) ASSERT_TRUE(Eq(fw[k][q], fr[k][q])) << n << " " << k << " " << q;
    for (int k = 0; k < 6; ++k) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[k][i], 0u) << n << " comp " << k << " word " << i;
      for (size_t i = n; i < n + 3; ++i) ASSERT_EQ(v[k][i], 0x5a5a5a5a5a5a5a5aull) << n;
    }
  }
}

// Three parties' shares: the weak shares of h add up to the clear h, and
// the claims' and folds' comps are consistent replicated shares.
TEST_P(DzkpPaths, WeakSharesOfThreePartiesAddUp) {
  const size_t n = 75;
  const int P = 2 * Groups() - 1;
  ClearLog clear(n, Groups());
  F64 hv[kMaxHPoints], cl[2];
  FirstLevelH(clear.Shares(), *clear.w, hv, cl);
  // Additive shares s_0 ^ s_1 ^ s_2 of x, y, z; party i holds (s_i, s_{i+1}).
  std::array<std::vector<uint64_t>, 3> xs, ys, zs;
  for (int i = 0; i < 3; ++i) xs[i].resize(n), ys[i].resize(n), zs[i].resize(n);
  for (size_t k = 0; k < n; ++k) {
    xs[0][k] = Rng()(), xs[1][k] = Rng()(), xs[2][k] = clear.x[k] ^ xs[0][k] ^ xs[1][k];
    ys[0][k] = Rng()(), ys[1][k] = Rng()(), ys[2][k] = clear.y[k] ^ ys[0][k] ^ ys[1][k];
    zs[0][k] = Rng()(), zs[1][k] = Rng()(), zs[2][k] = clear.z[k] ^ zs[0][k] ^ zs[1][k];
  }
  F64 sum[kMaxHPoints - 1] = {}, claims[3][2];
  const F64 r = RandomF64();
  const size_t m = 64 * clear.w->nu.size();
  std::vector<F64> ref_f(m), ref_g(m), zf(m), zg(m);
  FirstLevelFold(clear.Shares(), *clear.w, r, ref_f.data(), zf.data(), ref_g.data(), zg.data());
  std::array<std::array<std::vector<F64>, 4>, 3> folds;
  for (int i = 0; i < 3; ++i) {
    const int i1 = (i + 1) % 3;
    AndShares s{{xs[i].data(), xs[i1].data()}, {ys[i].data(), ys[i1].data()},
                {zs[i].data(), zs[i1].data()}, n};
    F64 h[kMaxHPoints];
    FirstLevelH(s, *clear.w, h, claims[i]);
    for (int p = 0; p < P - 1; ++p) sum[p] = Add(sum[p], h[p]);
    for (auto& v : folds[i]) v.resize(m);
    FirstLevelFold(s, *clear.w, r, folds[i][0].data(), folds[i][1].data(),
                   folds[i][2].data(), folds[i][3].data());
  }
  for (int p = 0; p < P - 1; ++p) EXPECT_TRUE(Eq(sum[p], hv[p])) << p;
  for (int i = 0; i < 3; ++i) {
    // comp 1 of party i = comp 0 of party i+1.
    EXPECT_TRUE(Eq(claims[i][1], claims[(i + 1) % 3][0]));
  }
  EXPECT_TRUE(Eq(Add(Add(claims[0][0], claims[1][0]), claims[2][0]), cl[0]));
  for (size_t q = 0; q < m; ++q) {
    F64 f = F64{0}, g = F64{0};
    for (int i = 0; i < 3; ++i) {
      f = Add(f, folds[i][0][q]);
      g = Add(g, folds[i][2][q]);
      ASSERT_TRUE(Eq(folds[i][1][q], folds[(i + 1) % 3][0][q]));
    }
    ASSERT_TRUE(Eq(f, ref_f[q]));
    ASSERT_TRUE(Eq(g, ref_g[q]));
  }
}

// A halving on clear vectors: h(1), h(x) as plain sums; the claim folded
// through h(r) equals the folded inner product; a wrong claim gives a
// wrong h(r) (for the test's random r).
template <class E>
void ExpectHalvingMatchesThePlainSums() {
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 64, 101, 1000}) {
    std::vector<E> f(n), g(n), zf(n), zg(n);
    for (auto& v : f) v = Random<E>();
    for (auto& v : g) v = Random<E>();
    E claim = El<E>(0);
    for (size_t k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[2];
    HalveH<E>(fv, gv, n, h);
    auto at = [&](size_t k, const std::vector<E>& v) { return k < n ? v[k] : El<E>(0); };
    E h1 = El<E>(0), h2 = El<E>(0);
    const E x = El<E>(2);
    for (size_t k = 0; 2 * k < n; ++k) {
      const E a = at(2 * k, f), b = at(2 * k + 1, f), c = at(2 * k, g), d = at(2 * k + 1, g);
      h1 = Add(h1, Mul(b, d));
      h2 = Add(h2, Mul(Add(a, Mul(x, Add(a, b))), Add(c, Mul(x, Add(c, d)))));
    }
    EXPECT_TRUE(Eq(h[0], h1)) << n;
    EXPECT_TRUE(Eq(h[1], h2)) << n;
    const E r = Random<E>();
    const E v0[3] = {Add(claim, h[0]), h[0], h[1]}, v1[3] = {El<E>(0), El<E>(0), El<E>(0)};
    E hr[2];
    Interpolate(3, v0, v1, r, hr);
    const E wrong = Add(claim, El<E>(1));
    const E w0[3] = {Add(wrong, h[0]), h[0], h[1]};
    E hw[2];
    Interpolate(3, w0, v1, r, hw);
    HalveFold(fv, gv, n, r);
    E ip = El<E>(0);
    for (size_t k = 0; k < (n + 1) / 2; ++k) ip = Add(ip, Mul(f[k], g[k]));
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
    EXPECT_FALSE(Eq(hw[0], ip)) << n;
  }
}

// The fused fold and next halving: the same vectors and h(1), h(x) as
// HalveFold then HalveH, for lengths around the 512-bit path's blocks.
template <class E>
void ExpectFusedHalvingMatchesFoldThenHalve() {
  for (size_t n : {2, 3, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 1001}) {
    std::vector<E> v[2][4];
    for (auto& side : v)
      for (auto& c : side) c.resize(n);
    for (size_t i = 0; i < n; ++i)
      for (int c = 0; c < 4; ++c) v[0][c][i] = v[1][c][i] = Random<E>();
    const E r = Random<E>();
    E* f0[2] = {v[0][0].data(), v[0][1].data()};
    E* g0[2] = {v[0][2].data(), v[0][3].data()};
    E* f1[2] = {v[1][0].data(), v[1][1].data()};
    E* g1[2] = {v[1][2].data(), v[1][3].data()};
    HalveFold(f0, g0, n, r);
    E want[2], got[2];
    HalveH<E>(f0, g0, (n + 1) / 2, want);
    HalveFoldH(f1, g1, n, r, got);
    EXPECT_TRUE(Eq(got[0], want[0])) << n;
    EXPECT_TRUE(Eq(got[1], want[1])) << n;
    for (size_t i = 0; i < (n + 1) / 2; ++i)
      for (int c = 0; c < 4; ++c) ASSERT_TRUE(Eq(v[0][c][i], v[1][c][i])) << n << " " << i;
  }
}

// h(r) from a compression's P - 1 values h(e_1) .. h(e_{P-1}) and its
// claim (h(e_0) = claim - the sum of h(e_1) .. h(e_{k-1}), k the group
// size), into hr; the same with the claim off by one into hw.
template <class E, int P>
void InterpolateClaim(const E& claim, const E* h, int k, const E& r, E* hr, E* hw) {
  E v0[P], v1[P] = {}, w0[P];
  v0[0] = claim;
  for (int p = 1; p < P; ++p) {
    v0[p] = h[p - 1];
    if (p < k) v0[0] = Add(v0[0], h[p - 1]);
  }
  std::copy(v0, v0 + P, w0);
  w0[0] = Add(w0[0], El<E>(1));
  Interpolate(P, v0, v1, r, hr);
  Interpolate(P, w0, v1, r, hw);
}

// The last compression on clear vectors (zero-padded to kTailWords): the
// values at e_1 .. e_{T-1} and the claim give h(e_0); h(r) interpolated
// from the 2T - 1 values equals f(r) g(r) after the fold; a wrong claim
// gives a wrong h(r).
template <class E>
void ExpectTailCompressionMatchesThePlainSums() {
  constexpr int T = kTailWords, P = kTailHPoints;
  for (int n : {1, 2, 17, T}) {
    std::vector<E> f(T, El<E>(0)), g(T, El<E>(0)), zf(T, El<E>(0)), zg(T, El<E>(0));
    for (int k = 0; k < n; ++k) f[k] = Random<E>(), g[k] = Random<E>();
    E claim = El<E>(0);
    for (int k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[P - 1];
    TailH<E>(fv, gv, h);
    // h(e_p) = f(e_p) g(e_p), f(e_p) the interpolation of f_0 .. f_{T-1}.
    for (int p : {1, T - 1, T, P - 1}) {
      E lag[T];
      LagrangeAt(T, El<E>(p), lag);
      E fp = El<E>(0), gp = El<E>(0);
      for (int j = 0; j < T; ++j) fp = Add(fp, Mul(lag[j], f[j])), gp = Add(gp, Mul(lag[j], g[j]));
      EXPECT_TRUE(Eq(h[p - 1], Mul(fp, gp))) << n << " p=" << p;
    }
    const E r = Random<E>();
    E hr[2], hw[2];
    InterpolateClaim<E, P>(claim, h, T, r, hr, hw);
    TailFold(fv, gv, r);
    EXPECT_TRUE(Eq(zf[0], El<E>(0)));
    EXPECT_TRUE(Eq(hr[0], Mul(f[0], g[0]))) << n;
    EXPECT_FALSE(Eq(hw[0], Mul(f[0], g[0]))) << n;
  }
}

// A compression by kStepWords on clear vectors of n elements (n not a
// multiple of K: the last group is zero-padded): the values at e_1 ..
// e_{2K-2} and the claim give h(e_0); h(r) interpolated from the 2K - 1
// values equals the inner product of the folded vectors; a wrong claim
// gives a wrong h(r).
template <class E>
void ExpectStepMatchesThePlainSums() {
  constexpr int K = kStepWords, P = 2 * K - 1;
  for (size_t n : {size_t{1}, size_t{5}, size_t{K}, size_t{4 * K + 3}, size_t{kStepFrom}}) {
    std::vector<E> f(n), g(n), zf(n, El<E>(0)), zg(n, El<E>(0));
    for (size_t k = 0; k < n; ++k) f[k] = Random<E>(), g[k] = Random<E>();
    E claim = El<E>(0);
    for (size_t k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[P - 1];
    StepH<E>(fv, gv, n, h);
    // h(e_p) = sum over groups of f_k(e_p) g_k(e_p).
    for (int p : {1, K - 1, K, P - 1}) {
      E lag[K];
      LagrangeAt(K, El<E>(p), lag);
      E want = El<E>(0);
      for (size_t k = 0; K * k < n; ++k) {
        E fp = El<E>(0), gp = El<E>(0);
        for (size_t j = 0; j < K && K * k + j < n; ++j)
          fp = Add(fp, Mul(lag[j], f[K * k + j])), gp = Add(gp, Mul(lag[j], g[K * k + j]));
        want = Add(want, Mul(fp, gp));
      }
      EXPECT_TRUE(Eq(h[p - 1], want)) << n << " p=" << p;
    }
    const E r = Random<E>();
    E hr[2], hw[2];
    InterpolateClaim<E, P>(claim, h, K, r, hr, hw);
    StepFold(fv, gv, n, r);
    const size_t m = (n + K - 1) / K;
    E ip = El<E>(0);
    for (size_t k = 0; k < m; ++k) {
      ip = Add(ip, Mul(f[k], g[k]));
      EXPECT_TRUE(Eq(zf[k], El<E>(0)));
    }
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
    EXPECT_FALSE(Eq(hw[0], ip)) << n;
  }
}

// Three parties' replicated shares of f, g (party i holds (s_i, s_{i+1})):
// their weak shares of a step's h values add up to the plain sums of
// f_k(e_p) g_k(e_p), and their folds are consistent replicated shares of
// the plain fold, at sizes with whole blocks of eight groups, partial
// ones, and both (the 512-bit path's blocks and the scalar rest).
TEST_P(DzkpPaths, StepWeakSharesOfThreePartiesAddUp) {
  constexpr int K = kStepWords, P = 2 * K - 1;
  for (size_t n : {size_t{3}, size_t{31}, size_t{32}, size_t{33}, size_t{101}, size_t{257},
                   size_t{1000}}) {
    std::vector<F64> f(n), g(n);
    std::array<std::vector<F64>, 3> fs, gs;
    for (int i = 0; i < 3; ++i) fs[i].resize(n), gs[i].resize(n);
    for (size_t k = 0; k < n; ++k) {
      f[k] = RandomF64(), g[k] = RandomF64();
      fs[0][k] = RandomF64(), fs[1][k] = RandomF64();
      fs[2][k] = Add(Add(f[k], fs[0][k]), fs[1][k]);
      gs[0][k] = RandomF64(), gs[1][k] = RandomF64();
      gs[2][k] = Add(Add(g[k], gs[0][k]), gs[1][k]);
    }
    F64 sum[P - 1] = {};
    const F64 r = RandomF64();
    std::array<std::array<std::vector<F64>, 4>, 3> folds;
    for (int i = 0; i < 3; ++i) {
      const int i1 = (i + 1) % 3;
      folds[i] = {fs[i], fs[i1], gs[i], gs[i1]};
      F64* fv[2] = {folds[i][0].data(), folds[i][1].data()};
      F64* gv[2] = {folds[i][2].data(), folds[i][3].data()};
      F64 h[P - 1];
      StepH<F64>(fv, gv, n, h);
      for (int p = 0; p < P - 1; ++p) sum[p] = Add(sum[p], h[p]);
      StepFold<F64>(fv, gv, n, r);
    }
    F64 lagr[K];
    LagrangeAt(K, r, lagr);
    for (int p = 1; p < P; ++p) {
      F64 lag[K];
      LagrangeAt(K, F64{static_cast<uint64_t>(p)}, lag);
      F64 want{0};
      for (size_t k = 0; K * k < n; ++k) {
        F64 fp{0}, gp{0};
        for (size_t j = 0; j < K && K * k + j < n; ++j)
          fp = Add(fp, Mul(lag[j], f[K * k + j])), gp = Add(gp, Mul(lag[j], g[K * k + j]));
        want = Add(want, Mul(fp, gp));
      }
      EXPECT_TRUE(Eq(sum[p - 1], want)) << n << " p=" << p;
    }
    for (size_t k = 0; K * k < n; ++k) {
      F64 fr{0}, gr{0};
      for (size_t j = 0; j < K && K * k + j < n; ++j)
        fr = Add(fr, Mul(lagr[j], f[K * k + j])), gr = Add(gr, Mul(lagr[j], g[K * k + j]));
      F64 fsum{0}, gsum{0};
      for (int i = 0; i < 3; ++i) {
        fsum = Add(fsum, folds[i][0][k]);
        gsum = Add(gsum, folds[i][2][k]);
        ASSERT_TRUE(Eq(folds[i][1][k], folds[(i + 1) % 3][0][k])) << n << " k=" << k;
        ASSERT_TRUE(Eq(folds[i][3][k], folds[(i + 1) % 3][2][k])) << n << " k=" << k;
      }
      ASSERT_TRUE(Eq(fsum, fr)) << n << " k=" << k;
      ASSERT_TRUE(Eq(gsum, gr)) << n << " k=" << k;
    }
  }
}

TEST_P(DzkpPaths, StepByKMatchesThePlainSums) {
  ExpectStepMatchesThePlainSums<Fe>();
  ExpectStepMatchesThePlainSums<F64>();
}

TEST_P(DzkpPaths, HalvingMatchesThePlainSums) {
  ExpectHalvingMatchesThePlainSums<Fe>();
  ExpectHalvingMatchesThePlainSums<F64>();
}

TEST_P(DzkpPaths, FusedHalvingMatchesFoldThenHalve) {
  ExpectFusedHalvingMatchesFoldThenHalve<Fe>();
  ExpectFusedHalvingMatchesFoldThenHalve<F64>();
}

TEST_P(DzkpPaths, TailCompressionMatchesThePlainSums) {
  ExpectTailCompressionMatchesThePlainSums<Fe>();
  ExpectTailCompressionMatchesThePlainSums<F64>();
}

}  // namespace
}  // namespace kmpc::protocol::dzkp
