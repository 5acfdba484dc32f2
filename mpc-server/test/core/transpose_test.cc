// util::Transpose8 against the definition: bit j of byte i goes to bit i of
// byte j, for random matrices, and twice is the identity.
#include "util/transpose.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace kmpc::util {
namespace {

uint64_t Reference(uint64_t x) {
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if ((x >> (8 * i + j)) & 1) out |= uint64_t{1} << (8 * j + i);
  return out;
}

TEST(Transpose8, IsTheBitMatrixTranspose) {
  std::mt19937_64 rng(8);
  for (int k = 0; k < 10000; ++k) {
    const uint64_t x = rng();
    EXPECT_EQ(Transpose8(x), Reference(x)) << std::hex << x;
    EXPECT_EQ(Transpose8(Transpose8(x)), x);
  }
  EXPECT_EQ(Transpose8(0x01), 0x01u);
  EXPECT_EQ(Transpose8(0x02), 0x0100u);  // byte 0 bit 1 -> byte 1 bit 0
}

}  // namespace
}  // namespace kmpc::util
