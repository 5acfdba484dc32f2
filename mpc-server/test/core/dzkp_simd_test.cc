// The 512-bit field arithmetic of the multiplication check
// (protocol/dzkp_simd.h) against the scalar one of protocol/dzkp.h, lane
// by lane: products, products by x, the unreduced sums of products and the
// even/odd split, in GF(2^128) (four lanes) and GF(2^64) (eight lanes).
// Skipped where the CPU has no AVX-512 with VPCLMULQDQ (Use512 false); the
// DzkpPaths tests of the first level and the rounds run the same code
// inside the compression steps.
#include "protocol/dzkp_simd.h"

#include <gtest/gtest.h>

#include "dzkp_testing.h"
#include "protocol/dzkp.h"

namespace kmpc::protocol::dzkp {
namespace {

using namespace simd;  // NOLINT: the functions under test

KMPC_DZKP_512 void Mul4Of(const Fe* a, const Fe* b, Fe* out) {
  Store4(out, Mul4(Load4(a), Load4(b)));
}
KMPC_DZKP_512 void MulX4Of(const Fe* a, Fe* out) { Store4(out, MulX4(Load4(a))); }
KMPC_DZKP_512 Fe SumOfProducts4(const Fe* a, const Fe* b, int blocks) {
  Wide4 w{};
  for (int i = 0; i < blocks; ++i) MulAcc512(w, Load4(a + 4 * i), Load4(b + 4 * i));
  return Sum512(w);
}
KMPC_DZKP_512 void Split4(const Fe* p, Fe* even, Fe* odd) {
  __m512i e, o;
  Deinterleave(p, e, o);
  Store4(even, e);
  Store4(odd, o);
}
KMPC_DZKP_512 void Mul8Of(const F64* a, const F64* b, F64* out) {
  Store8(out, Mul8(Load8(a), Load8(b)));
}
KMPC_DZKP_512 void MulX8Of(const F64* a, F64* out) { Store8(out, MulX8(Load8(a))); }
KMPC_DZKP_512 F64 SumOfProducts8(const F64* a, const F64* b, int blocks) {
  __m512i acc = _mm512_setzero_si512();
  for (int i = 0; i < blocks; ++i) MulAcc512(acc, Load8(a + 8 * i), Load8(b + 8 * i));
  return Sum512(acc);
}
KMPC_DZKP_512 void Split8(const F64* p, F64* even, F64* odd) {
  __m512i e, o;
  Deinterleave(p, e, o);
  Store8(even, e);
  Store8(odd, o);
}

class DzkpSimd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Use512()) GTEST_SKIP() << "no AVX-512 with VPCLMULQDQ here (or ForceScalar)";
  }
};

TEST_F(DzkpSimd, FourLanesOfGf128MatchTheScalarField) {
  for (int t = 0; t < 200; ++t) {
    Fe a[16], b[16], out[4], even[4], odd[4];
    for (int i = 0; i < 16; ++i) a[i] = RandomFe(), b[i] = RandomFe();
    Mul4Of(a, b, out);
    for (int l = 0; l < 4; ++l) ASSERT_TRUE(Eq(out[l], Mul(a[l], b[l]))) << l;
    MulX4Of(a, out);
    for (int l = 0; l < 4; ++l) ASSERT_TRUE(Eq(out[l], MulX(a[l]))) << l;
    Fe sum = FromU64(0);
    for (int i = 0; i < 16; ++i) sum = Add(sum, Mul(a[i], b[i]));
    ASSERT_TRUE(Eq(SumOfProducts4(a, b, 4), sum));
    Split4(a, even, odd);
    for (int l = 0; l < 4; ++l) {
      ASSERT_TRUE(Eq(even[l], a[2 * l]) && Eq(odd[l], a[2 * l + 1])) << l;
    }
  }
}

TEST_F(DzkpSimd, EightLanesOfGf64MatchTheScalarField) {
  for (int t = 0; t < 200; ++t) {
    F64 a[32], b[32], out[8], even[8], odd[8];
    for (int i = 0; i < 32; ++i) a[i] = RandomF64(), b[i] = RandomF64();
    if (t == 0) a[0] = F64{~0ull}, b[0] = F64{~0ull};  // the reduction's worst case
    Mul8Of(a, b, out);
    for (int l = 0; l < 8; ++l) ASSERT_TRUE(Eq(out[l], Mul(a[l], b[l]))) << l;
    MulX8Of(a, out);
    for (int l = 0; l < 8; ++l) ASSERT_TRUE(Eq(out[l], MulX(a[l]))) << l;
    F64 sum{0};
    for (int i = 0; i < 32; ++i) sum = Add(sum, Mul(a[i], b[i]));
    ASSERT_TRUE(Eq(SumOfProducts8(a, b, 4), sum));
    Split8(a, even, odd);
    for (int l = 0; l < 8; ++l) {
      ASSERT_TRUE(Eq(even[l], a[2 * l]) && Eq(odd[l], a[2 * l + 1])) << l;
    }
  }
}

// ForceScalar turns the 512-bit paths off (the DzkpPaths tests' scalar
// half relies on it) and back on.
TEST_F(DzkpSimd, ForceScalarTurnsThemOff) {
  const bool prev = ForceScalar(true);
  EXPECT_FALSE(Use512());
  ForceScalar(prev);
  EXPECT_TRUE(Use512());
}

}  // namespace
}  // namespace kmpc::protocol::dzkp
