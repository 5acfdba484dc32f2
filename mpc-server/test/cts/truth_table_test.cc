// Truth tables over six variables (src/cts/truth_table.h): known answers
// for small functions, and the normal form, the mask products and the
// variable swap against their definitions, computed bit by bit, on random
// tables.
#include "cts/truth_table.h"

#include <gtest/gtest.h>

#include <random>

namespace kmpc::cts {
namespace {

// The normal form by its definition: the coefficient of monomial T is the
// XOR of f(x) over every x inside T.
uint64_t AnfByDefinition(uint64_t table, int n) {
  uint64_t out = 0;
  for (uint32_t t = 0; t < (1u << n); ++t) {
    uint64_t c = 0;
    for (uint32_t x = 0; x < (1u << n); ++x)
      if ((x & ~t) == 0) c ^= (table >> x) & 1;
    out |= c << t;
  }
  return out;
}

TEST(TruthTable, SmallFunctionsHaveTheirKnownForms) {
  // x0 x1: one monomial, one product.
  EXPECT_EQ(Anf(0x8, 2), 0x8u);
  EXPECT_EQ(ProductSet(0x8, 2), 0x8u);
  // x0 ^ x1: linear, no product.
  EXPECT_EQ(Anf(0x6, 2), 0x6u);
  EXPECT_EQ(ProductSet(0x6, 2), 0u);
  // x0 | x1 = x0 ^ x1 ^ x0 x1.
  EXPECT_EQ(Anf(0xE, 2), 0xEu);
  EXPECT_EQ(ProductSet(0xE, 2), 0x8u);
  // Majority of three: the three pairs, not the triple.
  EXPECT_EQ(Anf(0xE8, 3), 0x68u);
  EXPECT_EQ(ProductSet(0xE8, 3), 0x68u);
  // x0 x1 x2: the triple and every pair inside it.
  EXPECT_EQ(Anf(0x80, 3), 0x80u);
  EXPECT_EQ(ProductSet(0x80, 3), 0xE8u);
  EXPECT_EQ(TableMask(2), 0xFu);
  EXPECT_EQ(TableMask(6), ~uint64_t{0});
}

TEST(TruthTable, TheNormalFormAndProductsMatchTheirDefinitions) {
  std::mt19937_64 rng(7);
  for (int n = 1; n <= kMaxLutInputs; ++n) {
    for (int k = 0; k < 200; ++k) {
      const uint64_t t = rng() & TableMask(n);
      const uint64_t anf = AnfByDefinition(t, n);
      ASSERT_EQ(Anf(t, n), anf) << n << " " << t;
      uint64_t products = 0;  // sets of >= 2 variables inside a monomial
      for (uint32_t s = 0; s < (1u << n); ++s) {
        if (__builtin_popcount(s) < 2) continue;
        for (uint32_t m = 0; m < (1u << n); ++m)
          if (((anf >> m) & 1) && (s & ~m) == 0) products |= uint64_t{1} << s;
      }
      ASSERT_EQ(ProductSet(t, n), products) << n << " " << t;
    }
  }
}

TEST(TruthTable, SwapVarsExchangesTwoVariables) {
  std::mt19937_64 rng(11);
  for (int k = 0; k < 100; ++k) {
    const uint64_t t = rng();
    for (int i = 0; i < kMaxLutInputs; ++i) {
      for (int j = i; j < kMaxLutInputs; ++j) {
        const uint64_t s = SwapVars(t, i, j);
        for (uint32_t x = 0; x < 64; ++x) {
          const uint32_t bi = (x >> i) & 1, bj = (x >> j) & 1;
          const uint32_t y = (x & ~((1u << i) | (1u << j))) | (bi << j) | (bj << i);
          ASSERT_EQ((s >> x) & 1, (t >> y) & 1) << i << " " << j << " " << x;
        }
        ASSERT_EQ(SwapVars(s, i, j), t);
      }
    }
  }
}

}  // namespace
}  // namespace kmpc::cts
