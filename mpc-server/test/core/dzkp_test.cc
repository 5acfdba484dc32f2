// The multiplication check's field arithmetic (protocol/dzkp.h, dzkp.cc)
// against independent computations: GF(2^128) against SP 800-38D's
// bit-by-bit multiplication and GF(2^64) against shift-and-add, the lane
// weights, and the Lagrange coefficients. The compression steps are
// tested beside their sources: dzkp_first_level_test.cc and
// dzkp_rounds_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dzkp_testing.h"
#include "protocol/dzkp.h"
#include "protocol/gf128.h"

namespace kmpc::protocol::dzkp {
namespace {


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

}  // namespace
}  // namespace kmpc::protocol::dzkp
