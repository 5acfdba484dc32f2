// What the multiplication check's first level (dzkp_first_level.cc) and
// later rounds (dzkp_rounds.cc) share: the 512-bit field arithmetic
// (VPCLMULQDQ products of four GF(2^128) or eight GF(2^64) elements per
// register, in functions compiled for AVX-512 and called only when
// Use512(): the CPU has it and ForceScalar is off) and the Lagrange rows
// of the compressions, computed once per process.
// Everything here is inline: the per-gate loops that call it compile it
// into their own bodies exactly as when it lived in one file.
#ifndef KMPC_PROTOCOL_DZKP_SIMD_H_
#define KMPC_PROTOCOL_DZKP_SIMD_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "protocol/dzkp.h"

namespace kmpc::protocol::dzkp::simd {

// ---- VPCLMULQDQ: four field elements per 512-bit register ----
#define KMPC_DZKP_512 __attribute__((target("avx512f,avx512bw,avx512dq,vpclmulqdq")))

inline bool& ForceScalarFlag() {
  static bool force = false;
  return force;
}

inline bool Use512() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("vpclmulqdq");
  return have && !ForceScalarFlag();
}

struct Wide4 {
  __m512i lo, hi;
};

KMPC_DZKP_512 inline void MulAcc512(Wide4& w, __m512i a, __m512i b) {
  const __m512i t0 = _mm512_clmulepi64_epi128(a, b, 0x00);
  const __m512i t1 = _mm512_clmulepi64_epi128(a, b, 0x11);
  const __m512i t2 = _mm512_xor_si512(_mm512_clmulepi64_epi128(a, b, 0x10),
                                      _mm512_clmulepi64_epi128(a, b, 0x01));
  w.lo = _mm512_xor_si512(w.lo, _mm512_xor_si512(t0, _mm512_bslli_epi128(t2, 8)));
  w.hi = _mm512_xor_si512(w.hi, _mm512_xor_si512(t1, _mm512_bsrli_epi128(t2, 8)));
}

KMPC_DZKP_512 inline __m512i Reduce4(const Wide4& w) {
  const __m512i p = _mm512_set1_epi64(0x87);
  const __m512i a = _mm512_clmulepi64_epi128(w.hi, p, 0x00);
  const __m512i b = _mm512_clmulepi64_epi128(w.hi, p, 0x01);
  const __m512i r = _mm512_xor_si512(w.lo, _mm512_xor_si512(a, _mm512_bslli_epi128(b, 8)));
  return _mm512_xor_si512(r, _mm512_clmulepi64_epi128(_mm512_bsrli_epi128(b, 8), p, 0x00));
}

KMPC_DZKP_512 inline __m512i Mul4(__m512i a, __m512i b) {
  Wide4 w{_mm512_setzero_si512(), _mm512_setzero_si512()};
  MulAcc512(w, a, b);
  return Reduce4(w);
}

KMPC_DZKP_512 inline __m512i MulX4(__m512i a) {
  const __m512i carry = _mm512_srli_epi64(a, 63);
  const __m512i s = _mm512_or_si512(_mm512_slli_epi64(a, 1), _mm512_bslli_epi128(carry, 8));
  const __m512i top = _mm512_bsrli_epi128(carry, 8);  // 0 or 1 in each low qword
  return _mm512_xor_si512(s, _mm512_clmulepi64_epi128(top, _mm512_set1_epi64(0x87), 0x00));
}

KMPC_DZKP_512 inline __m512i Load4(const Fe* p) { return _mm512_loadu_si512(p); }
KMPC_DZKP_512 inline void Store4(Fe* p, __m512i v) { _mm512_storeu_si512(p, v); }

// The four 128-bit lanes of w, reduced and added.
KMPC_DZKP_512 inline Fe Sum512(const Wide4& w) {
  alignas(64) Fe v[4];
  _mm512_store_si512(v, Reduce4(w));
  return Add(Add(v[0], v[1]), Add(v[2], v[3]));
}

// Elements 0, 2, 4, 6 and 1, 3, 5, 7 of p[0 .. 8).
KMPC_DZKP_512 inline void Deinterleave(const Fe* p, __m512i& even, __m512i& odd) {
  const __m512i lo = Load4(p), hi = Load4(p + 4);
  even = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), hi);
  odd = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), hi);
}

// ---- GF(2^64): eight elements per 512-bit register ----
KMPC_DZKP_512 inline __m512i Load8(const F64* p) { return _mm512_loadu_si512(p); }
KMPC_DZKP_512 inline void Store8(F64* p, __m512i v) { _mm512_storeu_si512(p, v); }

// Reduce64 on eight (lo, hi) pairs.
KMPC_DZKP_512 inline __m512i Reduce8(__m512i lo, __m512i hi) {
  constexpr int kXor3 = 0x96;  // a ^ b ^ c
  const __m512i over = _mm512_ternarylogic_epi64(
      _mm512_srli_epi64(hi, 63), _mm512_srli_epi64(hi, 61), _mm512_srli_epi64(hi, 60), kXor3);
  __m512i t = _mm512_ternarylogic_epi64(hi, _mm512_slli_epi64(hi, 1), _mm512_slli_epi64(hi, 3),
                                        kXor3);
  t = _mm512_ternarylogic_epi64(t, _mm512_slli_epi64(hi, 4), lo, kXor3);
  const __m512i o = _mm512_ternarylogic_epi64(over, _mm512_slli_epi64(over, 1),
                                              _mm512_slli_epi64(over, 3), kXor3);
  return _mm512_ternarylogic_epi64(t, o, _mm512_slli_epi64(over, 4), kXor3);
}

// a[i] * b[i], reduced: the products of the even and odd elements, their
// low and high halves gathered back in element order.
KMPC_DZKP_512 inline __m512i Mul8(__m512i a, __m512i b) {
  const __m512i pe = _mm512_clmulepi64_epi128(a, b, 0x00);
  const __m512i po = _mm512_clmulepi64_epi128(a, b, 0x11);
  return Reduce8(_mm512_unpacklo_epi64(pe, po), _mm512_unpackhi_epi64(pe, po));
}

// acc += a[i] * b[i] unreduced: four 128-bit sums.
KMPC_DZKP_512 inline void MulAcc512(__m512i& acc, __m512i a, __m512i b) {
  acc = _mm512_ternarylogic_epi64(acc, _mm512_clmulepi64_epi128(a, b, 0x00),
                                  _mm512_clmulepi64_epi128(a, b, 0x11), 0x96);
}

// The four 128-bit sums of acc, added and reduced.
KMPC_DZKP_512 inline F64 Sum512(__m512i acc) {
  const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(acc),
                                     _mm512_extracti64x4_epi64(acc, 1));
  Wide64 w;
  w.v = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return Reduce(w);
}

KMPC_DZKP_512 inline __m512i MulX8(__m512i a) {
  return _mm512_xor_si512(_mm512_slli_epi64(a, 1),
                          _mm512_and_si512(_mm512_srai_epi64(a, 63), _mm512_set1_epi64(0x1B)));
}

// Elements 0, 2, .., 14 and 1, 3, .., 15 of p[0 .. 16).
KMPC_DZKP_512 inline void Deinterleave(const F64* p, __m512i& even, __m512i& odd) {
  const __m512i lo = Load8(p), hi = Load8(p + 8);
  even = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), hi);
  odd = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), hi);
}

// Pairs per iteration of the 512-bit halving loops: one register of
// elements (four of GF(2^128), eight of GF(2^64)).
template <class E>
inline constexpr size_t kPairs512 = 64 / sizeof(E);

// Element k's qword indices in the even and odd registers of Deinterleave
// (E: one or two qwords), for _mm512_permutex2var_epi64.
template <class E>
KMPC_DZKP_512 inline __m512i PairIndex(int64_t odd) {
  constexpr int64_t w = sizeof(E) / 8;
  const auto ix = [odd](int64_t k) { return k / w * 2 * w + k % w + odd * w; };
  return _mm512_setr_epi64(ix(0), ix(1), ix(2), ix(3), ix(4), ix(5), ix(6), ix(7));
}

// What differs between the fields in the 512-bit halving loops
// (HalveH512, HalveFold512, HalveFoldH512); the rest is overloaded.
template <class E>
struct Ops512;
template <>
struct Ops512<Fe> {
  using Acc = Wide4;  // unreduced sums, per 128-bit lane
  KMPC_DZKP_512 static __m512i Splat(Fe r) { return _mm512_broadcast_i32x4(r); }
  KMPC_DZKP_512 static __m512i Mul(__m512i a, __m512i b) { return Mul4(a, b); }
  KMPC_DZKP_512 static __m512i MulX(__m512i a) { return MulX4(a); }
};
template <>
struct Ops512<F64> {
  using Acc = __m512i;
  KMPC_DZKP_512 static __m512i Splat(F64 r) { return _mm512_set1_epi64(static_cast<int64_t>(r.v)); }
  KMPC_DZKP_512 static __m512i Mul(__m512i a, __m512i b) { return Mul8(a, b); }
  KMPC_DZKP_512 static __m512i MulX(__m512i a) { return MulX8(a); }
};

// The Lagrange values L_j(e_p) over {e_0 .. e_{G-1}} for p in [G, kHPoints),
// computed once.
template <class E, int G>
const E* LagrangeRow(int p) {
  struct Table {
    E v[G - 1][G];
    Table() {
      for (int p = G; p < 2 * G - 1; ++p)
        LagrangeAt(G, Field<E>::Elem(static_cast<uint64_t>(p)), v[p - G]);
    }
  };
  static const Table table;
  return table.v[p - G];
}

// sum_j lag[j] * row[j] over j in [j0, G) (j0 a multiple of 8).
template <int G>
KMPC_DZKP_512 F64 Dot512(const F64* lag, const F64* row, int j0) {
  __m512i w = _mm512_setzero_si512();
  for (int j = j0; j < G; j += 8) MulAcc512(w, Load8(lag + j), Load8(row + j));
  return Sum512(w);
}

}  // namespace kmpc::protocol::dzkp::simd

#endif  // KMPC_PROTOCOL_DZKP_SIMD_H_
