// Truth tables over at most six variables in one 64-bit word (bit x is the
// function's value where variable i is bit i of x), as the LUT mapping
// (lut_map.cc) and the masked gates' products use them: the algebraic
// normal form (bit T: the coefficient of the monomial AND_{i in T} x_i),
// the mask products a gate needs (every set of two or more variables
// inside one of its monomials), and variable swaps.
#ifndef KMPC_CTS_TRUTH_TABLE_H_
#define KMPC_CTS_TRUTH_TABLE_H_

#include <cstdint>

#include "cts/lut_map.h"

namespace kmpc::cts {

// Variable i's column of a truth table over 6 variables.
inline constexpr uint64_t kVar[kMaxLutInputs] = {
    0xAAAAAAAAAAAAAAAAull, 0xCCCCCCCCCCCCCCCCull, 0xF0F0F0F0F0F0F0F0ull,
    0xFF00FF00FF00FF00ull, 0xFFFF0000FFFF0000ull, 0xFFFFFFFF00000000ull};

// The sets of two or more variables: every bit but 0 and the powers of 2.
inline constexpr uint64_t kPairsAndUp = ~0x0000000100010117ull;

inline uint64_t TableMask(int n) { return n >= 6 ? ~uint64_t{0} : (uint64_t{1} << (1u << n)) - 1; }

// Moebius transform: bit T of the result is the normal form's coefficient
// of monomial T (a table over n variables).
inline uint64_t Anf(uint64_t table, int n) {
  uint64_t f = table & TableMask(n);
  for (int i = 0; i < n; ++i) f ^= (f << (1u << i)) & kVar[i];
  return f;
}

// Bit S set iff |S| >= 2 and S lies inside some monomial: the normal form's
// down-closure by the superset-OR transform.
inline uint64_t ProductSet(uint64_t table, int n) {
  uint64_t d = Anf(table, n);
  for (int i = 0; i < n; ++i) d |= (d >> (1u << i)) & ~kVar[i];
  return d & kPairsAndUp;
}

// Exchanges variables i <= j of a table (i == j: the table unchanged).
inline uint64_t SwapVars(uint64_t t, int i, int j) {
  const int shift = (1 << j) - (1 << i);
  const uint64_t lo = kVar[i] & ~kVar[j];  // bit i set, bit j clear
  return (t & ~(lo | (lo << shift))) | ((t & lo) << shift) | ((t >> shift) & lo);
}

}  // namespace kmpc::cts

#endif  // KMPC_CTS_TRUTH_TABLE_H_
