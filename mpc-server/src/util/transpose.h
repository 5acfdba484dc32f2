// Bit-matrix helpers shared by the bitsliced code (cts/circuit.cc lane
// packing, protocol/dzkp.cc bit matrices).
#ifndef KMPC_UTIL_TRANSPOSE_H_
#define KMPC_UTIL_TRANSPOSE_H_

#include <cstdint>

namespace kmpc::util {

// The 8 x 8 bit matrix of x (row i = byte i, column j = bit j) transposed
// (Hacker's Delight, 7-3): byte j of the result holds bit j of every byte.
inline uint64_t Transpose8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x ^= t ^ (t << 28);
  return x;
}

}  // namespace kmpc::util

#endif  // KMPC_UTIL_TRANSPOSE_H_
