#include "protocol/dzkp.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "share/replicated.h"
#include "util/transpose.h"

namespace kmpc::protocol::dzkp {

Fe Inv(Fe a) {
  // r = a^(2^k - 1) after k - 1 steps of r = r^2 * a; then one squaring.
  Fe r = a;
  for (int i = 0; i < 126; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

F64 Inv(F64 a) {
  F64 r = a;
  for (int i = 0; i < 62; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

namespace {

uint8_t ReverseBits(uint8_t b) {
  b = static_cast<uint8_t>((b & 0xf0) >> 4 | (b & 0x0f) << 4);
  b = static_cast<uint8_t>((b & 0xcc) >> 2 | (b & 0x33) << 2);
  return static_cast<uint8_t>((b & 0xaa) >> 1 | (b & 0x55) << 1);
}

// 1 / prod_{m != j} (e_j + e_m) for j < n, computed once per n.
constexpr int kMaxPoints = kMaxProofPoints + 1;
template <class E>
const E* Denominators(int n) {
  static std::mutex mu;
  static std::array<std::vector<E>, kMaxPoints + 1> table;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<E>& t = table[n];
  if (t.empty()) {
    t.resize(n);
    for (int j = 0; j < n; ++j) {
      E d = Field<E>::Elem(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) d = Mul(d, Field<E>::Elem(static_cast<uint64_t>(j ^ m)));
      }
      t[j] = Inv(d);
    }
  }
  return t.data();
}

// The words of a group -> per lane l the kGroupWords-bit pattern whose
// bit j is lane l of word j.
template <int G>
using PatternT = std::conditional_t<G == 16, uint16_t, std::conditional_t<G == 32, uint32_t, uint64_t>>;
template <int G>
void TransposeGroup(const uint64_t* w, PatternT<G> out[64]) {
  using Pattern = PatternT<G>;
  static_assert(G == 8 * sizeof(Pattern));
  std::memset(out, 0, 64 * sizeof(Pattern));
  for (int h = 0; h < G / 8; ++h) {
    for (int k = 0; k < 8; ++k) {
      uint64_t m = 0;
      for (int j = 0; j < 8; ++j) m |= ((w[8 * h + j] >> (8 * k)) & 0xff) << (8 * j);
      m = util::Transpose8(m);
      for (int l = 0; l < 8; ++l) {
        out[8 * k + l] |= static_cast<Pattern>((m >> (8 * l)) & 0xff) << (8 * h);
      }
    }
  }
}

// Sums of coefficients over the set bits of a byte: t[b] = sum c_j, bit j
// of b set (j < 8).
void SubsetSums(const F64* c, F64* t) {
  t[0] = F64{0};
  for (int j = 0; j < 8; ++j) {
    const int half = 1 << j;
    for (int b = 0; b < half; ++b) t[half + b] = Add(t[b], c[j]);
  }
}

// The words of group k of a share array: in place when the group is
// whole, else copied into buf with zeros past n.
template <int G>
inline const uint64_t* GroupWords(const uint64_t* a, size_t n, size_t k, uint64_t* buf) {
  const size_t first = k * G;
  if (first + G <= n) return a + first;
  for (int j = 0; j < G; ++j) buf[j] = first + j < n ? a[first + j] : 0;
  return buf;
}

// Wipes the words of group k of a (AndShares::wipe: a is the caller's
// writable buffer).
template <int G>
void WipeGroup(const uint64_t* a, size_t n, size_t k) {
  const size_t first = k * G;
  if (first >= n) return;
  share::Wipe(const_cast<uint64_t*>(a) + first, 8 * std::min<size_t>(G, n - first));
}


// ---- VPCLMULQDQ: four field elements per 512-bit register ----
#define KMPC_DZKP_512 __attribute__((target("avx512f,avx512bw,avx512dq,vpclmulqdq")))

bool& ForceScalarFlag() {
  static bool force = false;
  return force;
}

bool Use512() {
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
constexpr size_t kPairs512 = 64 / sizeof(E);

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

// mu[l] = nu * x^l for l < 64 (x^l is the element 1 << l).
KMPC_DZKP_512 void LaneWeights512(uint64_t nu, F64 mu[64]) {
  const __m512i n = _mm512_set1_epi64(static_cast<int64_t>(nu));
  const __m512i one = _mm512_set1_epi64(1);
  __m512i l = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  for (int q = 0; q < 8; ++q, l = _mm512_add_epi64(l, _mm512_set1_epi64(8))) {
    Store8(mu + 8 * q, Mul8(n, _mm512_sllv_epi64(one, l)));
  }
}

// out[i] = a[i] * b[i] for i < n (n a multiple of 8).
KMPC_DZKP_512 void MulPairwise512(const F64* a, const F64* b, F64* out, int n) {
  for (int i = 0; i < n; i += 8) Store8(out + i, Mul8(Load8(a + i), Load8(b + i)));
}

// TransposeGroup with AVX-512BW: byte l of OR_j maskz_set1(word_j, 1 << j)
// holds lane l of words j < 8 (as the kernels' BitsToBytes).
template <int G>
KMPC_DZKP_512 void TransposeGroup512(const uint64_t* w, PatternT<G> out[64]) {
  using Pattern = PatternT<G>;
  alignas(64) uint8_t b[G / 8][64];
  for (int h = 0; h < G / 8; ++h) {
    __m512i v = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      v = _mm512_or_si512(v, _mm512_maskz_set1_epi8(w[8 * h + j], static_cast<char>(1 << j)));
    }
    _mm512_store_si512(b[h], v);
  }
  for (int l = 0; l < 64; ++l) {
    Pattern p = 0;
    for (int h = 0; h < G / 8; ++h) p |= static_cast<Pattern>(b[h][l]) << (8 * h);
    out[l] = p;
  }
  share::Wipe(b, sizeof b);
}

// The fold of a group's lane patterns by bit-matrix products, where the
// CPU has GFNI and VBMI: out[l] = sum_j c_j * bit l of word j is the GF(2)
// product of the 64 x G matrix of lane bits with the G x 128 matrix whose
// row j is c_j. In 8 x 8 blocks: byte b of out[l] = sum_h C_{h,b} * (byte
// h of lane l's pattern), C_{h,b} bit (i, t) = bit 8b + i of c_{8h+t};
// GF2P8AFFINEQB multiplies the 64 lanes' bytes by one block at once.
// (With VPCLMULQDQ too: FoldGfni multiplies by the lane weights before
// it stores.)
#define KMPC_DZKP_GFNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vbmi,gfni,vpclmulqdq")))

bool UseGfni() {
  static const bool have = Use512() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vbmi") &&
                           __builtin_cpu_supports("gfni");
  return have && !ForceScalarFlag();
}

// The blocks C_{h,b} of coefficients c[0 .. G) as GF2P8AFFINEQB matrices:
// its result bit i of a byte x is the parity of x & (matrix byte 7 - i),
// so matrix byte 7 - i bit t = bit i of byte b of c_{8h+t}.
template <int G>
struct BitMatrices {
  uint64_t m[G / 8][8];
  explicit BitMatrices(const F64* c) {
    alignas(16) uint8_t bytes[G][8];
    for (int j = 0; j < G; ++j) std::memcpy(bytes[j], &c[j].v, 8);
    for (int h = 0; h < G / 8; ++h) {
      for (int b = 0; b < 8; ++b) {
        uint64_t q = 0;  // byte t = byte b of c_{8h+t}
        for (int t = 0; t < 8; ++t) q |= uint64_t{bytes[8 * h + t][b]} << (8 * t);
        m[h][b] = __builtin_bswap64(util::Transpose8(q));
      }
    }
  }
};

// Interleaves u-byte units of a and b: units k, k + 1, ... of each (from
// unit 0 for the low half, 32 / u for the high one) as a0 b0 a1 b1 ...
struct UnitInterleave {
  alignas(64) uint8_t idx[4][2][64];  // u = 2^S = 1, 2, 4, 8; low, high
  constexpr UnitInterleave() : idx() {
    for (int s = 0; s < 4; ++s) {
      const int u = 1 << s;
      for (int x = 0; x < 2; ++x) {
        for (int p = 0; p < 64; ++p) {
          const int m = p / u, o = p % u;
          const int k = (m >> 1) + x * (32 / u);
          idx[s][x][p] = static_cast<uint8_t>((m & 1) * 64 + k * u + o);
        }
      }
    }
  }
};

inline constexpr UnitInterleave kUnitInterleave;

// One round of BytesToElements: pairs (R[k], R[k+1]) of u = 2^S-byte
// units -> 2u-byte units; register k holds lane block k / NB, unit k % NB
// (NB = 8 / u units per lane).
template <int S>
KMPC_DZKP_GFNI inline void InterleaveRound(__m512i R[8]) {
  constexpr int kNb = 8 >> S;
  const __m512i lo = _mm512_load_si512(kUnitInterleave.idx[S][0]);
  const __m512i hi = _mm512_load_si512(kUnitInterleave.idx[S][1]);
  __m512i next[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k += 2) {
    const int block = k / kNb, unit = (k % kNb) / 2;
    next[(2 * block) * (kNb / 2) + unit] = _mm512_permutex2var_epi8(R[k], lo, R[k + 1]);
    next[(2 * block + 1) * (kNb / 2) + unit] = _mm512_permutex2var_epi8(R[k], hi, R[k + 1]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) R[k] = next[k];
}

// R[b] byte l = byte b of out[l] -> out[0 .. 64): an 8 x 64 byte
// transpose in three rounds of pairwise interleaving (units of 1, 2, 4
// bytes); the last leaves lanes 8q .. 8q+7 in register q. With weights,
// out[l] is multiplied by weights[l] before it is stored.
KMPC_DZKP_GFNI inline void BytesToElements(__m512i R[8], F64* out, const F64* weights) {
  InterleaveRound<0>(R);
  InterleaveRound<1>(R);
  InterleaveRound<2>(R);
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    if (weights != nullptr) R[q] = Mul8(R[q], Load8(weights + 8 * q));
    _mm512_storeu_si512(out + 8 * q, R[q]);
  }
}

// LaneBytes' byte permutation: byte 8b + t of the result is byte b of
// word 7 - t.
struct LaneByteIndex {
  alignas(64) uint8_t idx[64];
  constexpr LaneByteIndex() : idx() {
    for (int b = 0; b < 8; ++b)
      for (int t = 0; t < 8; ++t) idx[8 * b + t] = static_cast<uint8_t>(8 * (7 - t) + b);
  }
};
inline constexpr LaneByteIndex kLaneByteIndex;

// Byte l of the result, bit t: lane l of w[t] (t < 8). The bytes are
// permuted so that qword b holds byte b of w[7], ..., w[0]; then each
// qword's 8 x 8 bit matrix is transposed by GF2P8AFFINEQB with the unit
// bytes 1 << j as the operand: bit i of result byte j is the parity of
// (1 << j) & (matrix byte 7 - i), i.e. bit j of byte b of w[i], lane
// 8b + j of w[i].
KMPC_DZKP_GFNI inline __m512i LaneBytes(const uint64_t* w) {
  const __m512i v = _mm512_permutexvar_epi8(_mm512_load_si512(kLaneByteIndex.idx),
                                            _mm512_loadu_si512(w));
  return _mm512_gf2p8affine_epi64_epi8(_mm512_set1_epi64(0x8040201008040201), v, 0);
}

// out[l] = sum_j c_j * bit l of w[j] for the G words of a group (times
// weights[l] where given).
template <int G>
KMPC_DZKP_GFNI void FoldGfni(const uint64_t* w, const BitMatrices<G>& c, F64 out[64],
                             const F64* weights) {
  __m512i R[8];
#pragma GCC unroll 8
  for (int h = 0; h < G / 8; ++h) {
    // Byte l of X: lane l of words 8h .. 8h+7.
    const __m512i X = LaneBytes(w + 8 * h);
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m512i p =
          _mm512_gf2p8affine_epi64_epi8(X, _mm512_set1_epi64(static_cast<int64_t>(c.m[h][b])), 0);
      R[b] = h == 0 ? p : _mm512_xor_si512(R[b], p);
    }
  }
  // X and R stay in registers (no copy in memory to wipe).
  BytesToElements(R, out, weights);
}

// The lane patterns of a group's words by the fastest transpose the CPU
// has (the fold without GFNI).
template <int G>
void TransposeFor(const uint64_t* w, PatternT<G> out[64], bool v512) {
  if (v512) {
    TransposeGroup512<G>(w, out);
  } else {
    TransposeGroup<G>(w, out);
  }
}

// HalveH over pairs [0, kPairs512<E> * q): the weak shares of h(1), h(x).
template <class E>
KMPC_DZKP_512 void HalveH512(const E* const f[2], const E* const g[2], size_t q,
                             E* h1, E* h2) {
  using O = Ops512<E>;
  constexpr size_t kIn = 2 * kPairs512<E>;  // elements read per iteration
  typename O::Acc w1{}, w2{};
  for (size_t i = 0; i < q; ++i) {
    __m512i a0, b0, a1, b1, c0, d0, c1, d1;
    Deinterleave(f[0] + kIn * i, a0, b0);
    Deinterleave(f[1] + kIn * i, a1, b1);
    Deinterleave(g[0] + kIn * i, c0, d0);
    Deinterleave(g[1] + kIn * i, c1, d1);
    MulAcc512(w1, b0, _mm512_xor_si512(d0, d1));
    MulAcc512(w1, b1, d0);
    const __m512i fa0 = _mm512_xor_si512(a0, O::MulX(_mm512_xor_si512(a0, b0)));
    const __m512i fa1 = _mm512_xor_si512(a1, O::MulX(_mm512_xor_si512(a1, b1)));
    const __m512i ga0 = _mm512_xor_si512(c0, O::MulX(_mm512_xor_si512(c0, d0)));
    const __m512i ga1 = _mm512_xor_si512(c1, O::MulX(_mm512_xor_si512(c1, d1)));
    MulAcc512(w2, fa0, _mm512_xor_si512(ga0, ga1));
    MulAcc512(w2, fa1, ga0);
  }
  *h1 = Sum512(w1);
  *h2 = Sum512(w2);
}

// HalveFold over pairs [0, kPairs512<E> * q), in place.
template <class E>
KMPC_DZKP_512 void HalveFold512(E* const v[4], size_t q, E r) {
  using O = Ops512<E>;
  constexpr size_t kOut = kPairs512<E>;  // elements written per iteration
  const __m512i rv = O::Splat(r);
  for (int c = 0; c < 4; ++c) {
    for (size_t i = 0; i < q; ++i) {
      __m512i a, b;
      Deinterleave(v[c] + 2 * kOut * i, a, b);
      _mm512_storeu_si512(v[c] + kOut * i,
                          _mm512_xor_si512(a, O::Mul(rv, _mm512_xor_si512(a, b))));
    }
  }
}

}  // namespace

bool ForceScalar(bool force) {
  const bool prev = ForceScalarFlag();
  ForceScalarFlag() = force;
  return prev;
}

Fe FromGcm(const uint8_t* b) {
  uint8_t r[16];
  for (int i = 0; i < 16; ++i) r[i] = ReverseBits(b[i]);
  const Fe v = Load(r);
  share::Wipe(r, sizeof r);
  return v;
}

void ToGcm(Fe a, uint8_t* b) {
  Store(b, a);
  for (int i = 0; i < 16; ++i) b[i] = ReverseBits(b[i]);
}

template <class E>
void LagrangeAt(int n, E x, E* out) {
  using F = Field<E>;
  const E* den = Denominators<E>(n);
  if (n <= 16) {  // n^2 products: fewer than one inversion's for small n
    for (int j = 0; j < n; ++j) {
      E num = F::Elem(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) num = Mul(num, Add(x, F::Elem(static_cast<uint64_t>(m))));
      }
      out[j] = Mul(num, den[j]);
    }
    return;
  }
  // Barycentric: L_j(x) = den_j * prod_m (x - e_m) / (x - e_j), the n
  // inverses from one (Montgomery's trick); x a node gives a unit vector.
  E d[kMaxPoints], prefix[kMaxPoints];
  E all = F::Elem(1);
  for (int j = 0; j < n; ++j) {
    d[j] = Add(x, F::Elem(static_cast<uint64_t>(j)));
    if (Equal(d[j], F::Elem(0))) {
      for (int m = 0; m < n; ++m) out[m] = F::Elem(m == j);
      return;
    }
    prefix[j] = all;  // d_0 ... d_{j-1}
    all = Mul(all, d[j]);
  }
  E inv = Inv(all);  // 1 / (d_0 ... d_{k})
  for (int j = n - 1; j >= 0; --j) {
    const E inv_dj = Mul(inv, prefix[j]);  // 1 / d_j
    inv = Mul(inv, d[j]);
    out[j] = Mul(Mul(all, inv_dj), den[j]);
  }
}
template void LagrangeAt<Fe>(int, Fe, Fe*);
template void LagrangeAt<F64>(int, F64, F64*);

namespace {

// Per-thread scratch of the first level (~60 KB), on the heap: as static
// thread_local arrays it would sit in every thread's static TLS block,
// and threads created with small stacks (civetweb's, for --metrics_addr)
// would then fail to start.
struct FirstLevelScratch {
  // For j < j': S[j][j'] = sum over groups k of nu_k * (weak share of
  // x_{k,j} & y_{k,j'} ^ x_{k,j'} & y_{k,j}); S[j][j] = sum_k nu_k * (weak
  // share of x_{k,j} & y_{k,j}); below the diagonal unused (zero in S64).
  // T[c][j] = sum_k nu_k * z_{c,k,j}: 64 x 64 carry-less products, exact
  // in 128 bits (reduced into GF(2^64) once, into S64 and T64).
  Fe S[kMaxGroupWords][kMaxGroupWords];
  Fe T[2][kMaxGroupWords];
  alignas(64) F64 S64[kMaxGroupWords][kMaxGroupWords];
  F64 T64[2][kMaxGroupWords];
  // The 512-bit path's accumulators: [.][q][0] holds the products of
  // words 8q + 0, 2, 4, 6 (one per 128-bit lane), [.][q][1] of 8q + 1, 3,
  // 5, 7.
  // acc[j][q] is used for q >= j / 8 only; dacc holds the diagonal.
  __m512i acc[kMaxGroupWords][kMaxGroupWords / 8][2];
  __m512i dacc[kMaxGroupWords / 8][2];
  __m512i zacc[2][kMaxGroupWords / 8][2];
  // The fold's subset sums (without GFNI) of the public coefficients
  // L_j(r) tau_j and L_j(r): not wiped.
  F64 ta[kMaxGroupWords / 8][256];
  // Zeroes what FirstLevelH accumulates into for groups of g words: the
  // 512-bit accumulators it reads (acc[j][q] for q >= j / 8) and T, or S
  // and T; S64 and T64 are assigned, not accumulated.
  void ZeroAccumulators(int g, bool v512) {
    if (v512) {
      for (int j = 0; j < g; ++j)
        share::Wipe(&acc[j][j / 8], static_cast<size_t>(g / 8 - j / 8) * sizeof acc[j][0]);
      share::Wipe(dacc, sizeof dacc);
      share::Wipe(zacc, sizeof zacc);
    } else {
      share::Wipe(S, sizeof S);
    }
    share::Wipe(T, sizeof T);
  }
  // Wipes everything FirstLevelH wrote for groups of g words (it all
  // holds shares); the parts it never writes stay zero.
  void Wipe(int g, bool v512) {
    ZeroAccumulators(g, v512);
    share::Wipe(S64, static_cast<size_t>(g) * sizeof S64[0]);
    share::Wipe(T64, sizeof T64);
  }
};

FirstLevelScratch& Scratch() {
  static thread_local std::unique_ptr<FirstLevelScratch> s;
  if (!s) s = std::make_unique<FirstLevelScratch>();
  return *s;
}

// a * b for a, b of degree < 64: exact, degree < 127.
inline Fe Clmul64(uint64_t a, uint64_t b) {
  return _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(a)),
                              _mm_cvtsi64_si128(static_cast<int64_t>(b)), 0x00);
}

// One group's cross products into S and its z words into T (one
// PCLMULQDQ per 64 x 64 product).
template <int G>
void CrossGroup(const uint64_t* x0, const uint64_t* x1, const uint64_t* y0,
                const uint64_t* yy, const uint64_t* const z[2], uint64_t nu,
                FirstLevelScratch& s) {
  for (int j = 0; j < G; ++j) {
    s.S[j][j] = Add(s.S[j][j], Clmul64((x0[j] & yy[j]) ^ (x1[j] & y0[j]), nu));
    for (int j2 = j + 1; j2 < G; ++j2) {
      const uint64_t w =
          (x0[j] & yy[j2]) ^ (x1[j] & y0[j2]) ^ (x0[j2] & yy[j]) ^ (x1[j2] & y0[j]);
      s.S[j][j2] = Add(s.S[j][j2], Clmul64(w, nu));
    }
  }
  for (int c = 0; c < 2; ++c)
    for (int j = 0; j < G; ++j) s.T[c][j] = Add(s.T[c][j], Clmul64(z[c][j], nu));
}

// One group's words as CrossGroup reads them: x0, x1, y0, y0 ^ y1, z0, z1
// (in place, or copied into buf when the group is partial) and nu_k.
template <int G>
struct GroupView {
  const uint64_t* x0;
  const uint64_t* x1;
  const uint64_t* y0;
  const uint64_t* z[2];
  uint64_t nu;
  alignas(64) uint64_t yy[G];  // weak share of x_j & y_j': x0 & (y0 ^ y1) ^ x1 & y0
  alignas(64) uint64_t buf[6][G];
  void Load(const AndShares& s, size_t k, uint64_t nu_k) {
    x0 = GroupWords<G>(s.x[0], s.n, k, buf[0]);
    x1 = GroupWords<G>(s.x[1], s.n, k, buf[1]);
    y0 = GroupWords<G>(s.y[0], s.n, k, buf[2]);
    const uint64_t* y1 = GroupWords<G>(s.y[1], s.n, k, buf[3]);
    z[0] = GroupWords<G>(s.z[0], s.n, k, buf[4]);
    z[1] = GroupWords<G>(s.z[1], s.n, k, buf[5]);
    for (int j = 0; j < G; ++j) yy[j] = y0[j] ^ y1[j];
    nu = nu_k;
  }
  // Load with x0, x1 and y0 always in buf[0 .. 3) (CrossGroups512 reads
  // every group's words at fixed offsets from one base).
  void LoadCopied(const AndShares& s, size_t k, uint64_t nu_k) {
    Load(s, k, nu_k);
    const uint64_t** src[3] = {&x0, &x1, &y0};
    for (int c = 0; c < 3; ++c) {
      if (*src[c] != buf[c]) std::memcpy(buf[c], *src[c], sizeof buf[c]);
      *src[c] = buf[c];
    }
  }
  // No group: zero words with weight 0.
  void LoadNone() {
    std::memset(buf, 0, sizeof buf);
    std::memset(yy, 0, sizeof yy);
    x0 = buf[0], x1 = buf[1], y0 = buf[2], z[0] = buf[4], z[1] = buf[5];
    nu = 0;
  }
  void Wipe() { share::Wipe(this, sizeof *this); }
};

// CrossGroup with VPCLMULQDQ for kCrossGroups groups at once: eight words
// j' of one block q against one word j of the rows j < 8q + 8 (the pairs
// j <= j' and, in the diagonal block, a few with j' < j that are never
// read; j' = j gives zero there and the diagonal has its own sums), the
// groups' products summed before they are added to the accumulators.
inline constexpr int kCrossGroups = 4;
// a ^ b ^ c and a ^ (b & c) as VPTERNLOGQ immediates (a = 0xF0, b = 0xCC,
// c = 0xAA). a is the instruction's destination: with the running term as
// a, no loop-invariant register is copied before each use.
inline constexpr int kXor3 = 0x96, kXorAnd = 0x78;
// The views' words are read at fixed offsets from v (GroupView::LoadCopied:
// x0, x1, y0 in buf[0 .. 3)), so the inner loop needs one base register
// instead of a pointer per group and share.
template <int G>
KMPC_DZKP_512 void CrossGroups512(const GroupView<G>* v, FirstLevelScratch& s) {
  constexpr int K = kCrossGroups;
  static_assert(K % 2 == 0);
  __m512i nv[K];
  for (int i = 0; i < K; ++i) nv[i] = _mm512_set1_epi64(static_cast<int64_t>(v[i].nu));
  for (int q = 0; q < G / 8; ++q) {
    __m512i Y[K], Y0[K], X0[K], X1[K];
    for (int i = 0; i < K; ++i) {
      Y[i] = _mm512_load_si512(v[i].yy + 8 * q);
      Y0[i] = _mm512_load_si512(v[i].buf[2] + 8 * q);
      X0[i] = _mm512_load_si512(v[i].buf[0] + 8 * q);
      X1[i] = _mm512_load_si512(v[i].buf[1] + 8 * q);
    }
    {
      __m512i lo = s.dacc[q][0], hi = s.dacc[q][1];
      for (int i = 0; i < K; ++i) {
        const __m512i p = _mm512_ternarylogic_epi64(_mm512_and_si512(X1[i], Y0[i]), X0[i],
                                                    Y[i], kXorAnd);
        lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(p, nv[i], 0x00));
        hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(p, nv[i], 0x01));
      }
      s.dacc[q][0] = lo;
      s.dacc[q][1] = hi;
    }
    for (int j = 0; j < 8 * q + 8; ++j) {
      __m512i lo = s.acc[j][q][0], hi = s.acc[j][q][1];
#pragma GCC unroll 4
      for (int i = 0; i < K; i += 2) {
        __m512i p[2];
        for (int u = 0; u < 2; ++u) {
          const GroupView<G>& g = v[i + u];
          const __m512i a0 = _mm512_set1_epi64(static_cast<int64_t>(g.buf[0][j]));
          const __m512i a1 = _mm512_set1_epi64(static_cast<int64_t>(g.buf[1][j]));
          const __m512i b = _mm512_set1_epi64(static_cast<int64_t>(g.yy[j]));
          const __m512i b0 = _mm512_set1_epi64(static_cast<int64_t>(g.buf[2][j]));
          // x0_j & yy_j' ^ x1_j & y0_j' ^ x0_j' & yy_j ^ x1_j' & y0_j.
          __m512i t = _mm512_and_si512(X1[i + u], b0);
          t = _mm512_ternarylogic_epi64(t, X0[i + u], b, kXorAnd);
          t = _mm512_ternarylogic_epi64(t, a1, Y0[i + u], kXorAnd);
          p[u] = _mm512_ternarylogic_epi64(t, a0, Y[i + u], kXorAnd);
        }
        lo = _mm512_ternarylogic_epi64(lo, _mm512_clmulepi64_epi128(p[0], nv[i], 0x00),
                                       _mm512_clmulepi64_epi128(p[1], nv[i + 1], 0x00), kXor3);
        hi = _mm512_ternarylogic_epi64(hi, _mm512_clmulepi64_epi128(p[0], nv[i], 0x01),
                                       _mm512_clmulepi64_epi128(p[1], nv[i + 1], 0x01), kXor3);
      }
      s.acc[j][q][0] = lo;
      s.acc[j][q][1] = hi;
    }
    for (int c = 0; c < 2; ++c) {
      __m512i lo = s.zacc[c][q][0], hi = s.zacc[c][q][1];
      for (int i = 0; i < K; ++i) {
        const __m512i z = _mm512_loadu_si512(v[i].z[c] + 8 * q);
        lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(z, nv[i], 0x00));
        hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(z, nv[i], 0x01));
      }
      s.zacc[c][q][0] = lo;
      s.zacc[c][q][1] = hi;
    }
  }
}

// The 512-bit accumulators of 8q + {0, 2, 4, 6} and 8q + {1, 3, 5, 7}
// -> out[8q .. 8q + 8), for q0 <= q < words / 8.
KMPC_DZKP_512 void Unpack512(const __m512i (*acc)[2], Fe* out, int q0, int words) {
  for (int q = q0; q < words / 8; ++q) {
    alignas(64) Fe e[4], o[4];
    _mm512_store_si512(e, acc[q][0]);
    _mm512_store_si512(o, acc[q][1]);
    for (int i = 0; i < 4; ++i) {
      out[8 * q + 2 * i] = Add(out[8 * q + 2 * i], e[i]);
      out[8 * q + 2 * i + 1] = Add(out[8 * q + 2 * i + 1], o[i]);
    }
    share::Wipe(e, sizeof e);
    share::Wipe(o, sizeof o);
  }
}

// The 512-bit path's sums into S64 (reduced) and T: row j's words 8q +
// {0, 2, 4, 6} are in acc[j][q][0], 8q + {1, 3, 5, 7} in acc[j][q][1], the
// diagonal's extra terms in dacc; below the diagonal S64 is zero.
template <int G>
KMPC_DZKP_512 void AccumulatorsToS64(FirstLevelScratch& sc) {
  Fe diag[G] = {};
  Unpack512(sc.dacc, diag, 0, G);
  for (int c = 0; c < 2; ++c) Unpack512(sc.zacc[c], sc.T[c], 0, G);
  for (int j = 0; j < G; ++j) {
    const int q0 = j / 8;
    for (int j2 = 0; j2 < 8 * q0; ++j2) sc.S64[j][j2] = F64{0};
    for (int q = q0; q < G / 8; ++q) {
      alignas(64) Fe e[2][4];
      _mm512_store_si512(e[0], sc.acc[j][q][0]);
      _mm512_store_si512(e[1], sc.acc[j][q][1]);
      for (int i = 0; i < 8; ++i) {
        const int j2 = 8 * q + i;
        Wide64 t;
        t.v = j2 == j ? Add(e[i & 1][i >> 1], diag[j]) : e[i & 1][i >> 1];
        sc.S64[j][j2] = j2 < j ? F64{0} : Reduce(t);
      }
      share::Wipe(e, sizeof e);
    }
  }
  share::Wipe(diag, sizeof diag);
}

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

// sum_j' lag[j'] * row[j'] (G elements).
template <int G>
F64 Dot(const F64* lag, const F64* row, int j0) {
  Wide64 acc;
  for (int j = j0; j < G; ++j) MulAcc(acc, lag[j], row[j]);
  return Reduce(acc);
}

// Dot's elements from j0 on (j0 a multiple of 8).
template <int G>
KMPC_DZKP_512 F64 Dot512(const F64* lag, const F64* row, int j0) {
  __m512i w = _mm512_setzero_si512();
  for (int j = j0; j < G; j += 8) MulAcc512(w, Load8(lag + j), Load8(row + j));
  return Sum512(w);
}


template <int G>
void FirstLevelHImpl(const AndShares& s, const AndWeights& w, F64* out, F64 claim[2]) {
  const size_t groups = (s.n + G - 1) / G;
  FirstLevelScratch& sc = Scratch();
  const bool v512 = Use512();
  sc.ZeroAccumulators(G, v512);
  auto view = std::make_unique<GroupView<G>[]>(kCrossGroups);
  const size_t step = v512 ? kCrossGroups : 1;
  for (size_t k = 0; k < groups; k += step) {
    for (size_t i = 0; i < step; ++i) {
      if (k + i < groups) {
        if (v512) {
          view[i].LoadCopied(s, k + i, w.nu[k + i]);
        } else {
          view[i].Load(s, k + i, w.nu[k + i]);
        }
      } else {
        view[i].LoadNone();
      }
    }
    if (v512) {
      CrossGroups512<G>(view.get(), sc);
    } else {
      const GroupView<G>& g = view[0];
      CrossGroup<G>(g.x0, g.x1, g.y0, g.yy, g.z, g.nu, sc);
    }
    if (s.wipe) {
      for (size_t i = 0; i < step && k + i < groups; ++i)
        for (int c = 0; c < 2; ++c) WipeGroup<G>(s.z[c], s.n, k + i);
    }
  }
  for (size_t i = 0; i < kCrossGroups; ++i) view[i].Wipe();
  // The exact sums reduced into GF(2^64) (reduction is GF(2)-linear).
  auto reduce = [](Fe v) {
    Wide64 t;
    t.v = v;
    return Reduce(t);
  };
  if (v512) {
    // S64 straight from the accumulators (S unused): row j's words
    // 8q + {0, 2, 4, 6} in acc[j][q][0], 8q + {1, 3, 5, 7} in [1].
    AccumulatorsToS64<G>(sc);
  } else {
    for (int j = 0; j < G; ++j)
      for (int j2 = 0; j2 < G; ++j2) sc.S64[j][j2] = j2 < j ? F64{0} : reduce(sc.S[j][j2]);
  }
  for (int j = 0; j < G; ++j)
    for (int c = 0; c < 2; ++c) sc.T64[c][j] = reduce(sc.T[c][j]);
  for (int c = 0; c < 2; ++c) {
    Wide64 t;
    for (int j = 0; j < G; ++j) MulAcc(t, w.tau[j], sc.T64[c][j]);
    claim[c] = Reduce(t);
  }
  // With m_j = L_j(p) sigma_j: h(p) = sum_{j,j'} m_j m_j' (lift of x_j &
  // y_j' summed with nu) = sum_j m_j^2 S_{j,j} + sum_{j<j'} m_j m_j'
  // S_{j,j'} = sum_j m_j * sum_{j' >= j} m_j' S64[j][j'];
  // L_j(e_p) = [j = p] for p < G, so h(e_p) = tau_p S_{p,p}.
  for (int p = 1; p < 2 * G - 1; ++p) {
    if (p < G) {
      out[p - 1] = Mul(w.tau[p], sc.S64[p][p]);
      continue;
    }
    const F64* lag = LagrangeRow<F64, G>(p);
    alignas(64) F64 m[G];
    for (int j = 0; j < G; ++j) m[j] = Mul(lag[j], w.sigma[j]);
    Wide64 acc;
    for (int j = 0; j < G; ++j) {
      const int j0 = j & ~7;
      const F64 inner = v512 ? Dot512<G>(m, sc.S64[j], j0) : Dot<G>(m, sc.S64[j], j0);
      MulAcc(acc, m[j], inner);
    }
    out[p - 1] = Reduce(acc);
  }
  sc.Wipe(G, v512);
}

template <int G>
void FirstLevelFoldImpl(const AndShares& s, const AndWeights& w, F64 r, F64* f0,
                        F64* f1, F64* g0, F64* g1) {
  const size_t groups = (s.n + G - 1) / G;
  // Both sides weigh word j by a_j = L_j(r) sigma_j (AndWeights).
  F64 lag[G], a[G];
  LagrangeAt(G, r, lag);
  for (int j = 0; j < G; ++j) a[j] = Mul(lag[j], w.sigma[j]);
  // With GFNI: the coefficients as bit matrices (FoldGfni); else subset
  // sums of a (x side) and of the Lagrange values (y side), per byte of
  // the lane pattern.
  constexpr int kBytes = G / 8;
  const bool v512 = Use512();
  const bool gfni = UseGfni();
  std::optional<BitMatrices<G>> ma;
  FirstLevelScratch& scratch = Scratch();
  auto& ta = scratch.ta;
  if (gfni) {
    ma.emplace(a);
  } else {
    for (int h = 0; h < kBytes; ++h) SubsetSums(a + 8 * h, ta[h]);
  }
  F64* f[2] = {f0, f1};
  F64* g[2] = {g0, g1};
  uint64_t buf[G];
  PatternT<G> pat[64];
  alignas(64) F64 mu[64];
  // out[l] = sum_j (x side: a_j, y side: lag_j) * bit l of word j of group
  // k: by bit-matrix products, or the sum of t[h][byte h of lane l's
  // pattern].
  // The GFNI path multiplies the x side by the lane weights mu as it
  // stores.
  auto fold = [&](const uint64_t* words, size_t k, bool x_side, F64* out) {
    const uint64_t* wk = GroupWords<G>(words, s.n, k, buf);
    if (gfni) return FoldGfni<G>(wk, *ma, out, x_side ? mu : nullptr);
    const F64(*t)[256] = ta;
    TransposeFor<G>(wk, pat, v512);
    for (int l = 0; l < 64; ++l) {
      F64 v = t[0][pat[l] & 0xff];
      for (int h = 1; h < kBytes; ++h) v = Add(v, t[h][(pat[l] >> (8 * h)) & 0xff]);
      out[l] = v;
    }
  };
  // The x side for every group, then the y side: one table at a time
  // stays in the L1 cache.
  for (size_t k = 0; k < groups; ++k) {
    // nu_k * x^l.
    if (v512) {
      LaneWeights512(w.nu[k], mu);
    } else {
      mu[0] = F64{w.nu[k]};
      for (int l = 1; l < 64; ++l) mu[l] = MulX(mu[l - 1]);
    }
    for (int c = 0; c < 2; ++c) {
      F64* fo = f[c] + 64 * k;
      fold(s.x[c], k, true, fo);
      if (s.wipe) WipeGroup<G>(s.x[c], s.n, k);
      if (gfni) continue;
      if (v512) {
        MulPairwise512(mu, fo, fo, 64);
      } else {
        for (int l = 0; l < 64; ++l) fo[l] = Mul(mu[l], fo[l]);
      }
    }
  }
  for (size_t k = 0; k < groups; ++k) {
    for (int c = 0; c < 2; ++c) {
      fold(s.y[c], k, false, g[c] + 64 * k);
      if (s.wipe) WipeGroup<G>(s.y[c], s.n, k);
    }
  }
  share::Wipe(buf, sizeof buf);
  share::Wipe(pat, sizeof pat);
}

}  // namespace

int GroupWordsFor(size_t and_words) {
  if (and_words < 1024) return 16;
  if (and_words < 32768) return 32;
  return 64;
}

void FirstLevelH(const AndShares& s, const AndWeights& w, F64* out, F64 claim[2]) {
  switch (w.g) {
    case 16: return FirstLevelHImpl<16>(s, w, out, claim);
    case 32: return FirstLevelHImpl<32>(s, w, out, claim);
    default: return FirstLevelHImpl<64>(s, w, out, claim);
  }
}

void FirstLevelFold(const AndShares& s, const AndWeights& w, F64 r, F64* f0,
                    F64* f1, F64* g0, F64* g1) {
  switch (w.g) {
    case 16: return FirstLevelFoldImpl<16>(s, w, r, f0, f1, g0, g1);
    case 32: return FirstLevelFoldImpl<32>(s, w, r, f0, f1, g0, g1);
    default: return FirstLevelFoldImpl<64>(s, w, r, f0, f1, g0, g1);
  }
}

template <class E>
void Interpolate(int n, const E* v0, const E* v1, E r, E out[2]) {
  E lag[kMaxPoints];
  LagrangeAt(n, r, lag);
  typename Field<E>::Wide acc[2];
  for (int j = 0; j < n; ++j) {
    MulAcc(acc[0], lag[j], v0[j]);
    MulAcc(acc[1], lag[j], v1[j]);
  }
  out[0] = Reduce(acc[0]);
  out[1] = Reduce(acc[1]);
}

namespace {

// HalveH's sums over pairs k0 .. n/2 - 1 (and the odd last element).
template <class E, class W = typename Field<E>::Wide>
void HalveHTail(const E* const f[2], const E* const g[2], size_t k0, size_t n, W& h1, W& h2) {
  // Weak share of a * b: a0 * (b0 + b1) + a1 * b0.
  auto weak = [](W& acc, E a0, E a1, E b0, E b1) {
    MulAcc(acc, a0, Add(b0, b1));
    MulAcc(acc, a1, b0);
  };
  for (size_t k = k0; k < n / 2; ++k) {
    const E a0 = f[0][2 * k], a1 = f[1][2 * k], b0 = f[0][2 * k + 1], b1 = f[1][2 * k + 1];
    const E c0 = g[0][2 * k], c1 = g[1][2 * k], d0 = g[0][2 * k + 1], d1 = g[1][2 * k + 1];
    weak(h1, b0, b1, d0, d1);
    // f(e_2) = a + x (a + b)
    weak(h2, Add(a0, MulX(Add(a0, b0))), Add(a1, MulX(Add(a1, b1))),
         Add(c0, MulX(Add(c0, d0))), Add(c1, MulX(Add(c1, d1))));
  }
  if (n % 2 == 1) {  // (a, 0): f(1) = 0, f(e_2) = (1 + x) a
    const E a0 = f[0][n - 1], a1 = f[1][n - 1], c0 = g[0][n - 1], c1 = g[1][n - 1];
    weak(h2, Add(a0, MulX(a0)), Add(a1, MulX(a1)), Add(c0, MulX(c0)), Add(c1, MulX(c1)));
  }
}

// HalveFold's pairs k0 .. n/2 - 1 (and the odd last element), in place.
template <class E>
void HalveFoldTail(E* const f[2], E* const g[2], size_t k0, size_t n, E r) {
  const size_t m = n / 2;
  for (int c = 0; c < 2; ++c) {
    for (size_t k = k0; k < m; ++k) {
      const E a = f[c][2 * k], b = f[c][2 * k + 1];
      f[c][k] = Add(a, Mul(r, Add(a, b)));
      const E u = g[c][2 * k], v = g[c][2 * k + 1];
      g[c][k] = Add(u, Mul(r, Add(u, v)));
    }
    if (n % 2 == 1) {  // b = 0: (1 + r) a
      const E a = f[c][n - 1], u = g[c][n - 1];
      const E one_r = Add(Field<E>::Elem(1), r);
      f[c][m] = Mul(one_r, a);
      g[c][m] = Mul(one_r, u);
    }
  }
}

// HalveFold512 over pairs [0, 2 * kPairs512<E> * q) and HalveH512 over the
// pairs of the folded elements [0, 2 * kPairs512<E> * q): each block of
// 4 * kPairs512<E> elements is read once.
template <class E>
KMPC_DZKP_512 void HalveFoldH512(E* const v[4], size_t q, E r, E* h1, E* h2) {
  using O = Ops512<E>;
  constexpr size_t P = kPairs512<E>;
  const __m512i rv = O::Splat(r);
  const __m512i ie = PairIndex<E>(0);
  const __m512i io = PairIndex<E>(1);
  typename O::Acc w1{}, w2{};
  for (size_t i = 0; i < q; ++i) {
    __m512i ev[4], od[4];  // the folded elements' pairs: even and odd
    for (int c = 0; c < 4; ++c) {
      __m512i a, b, a2, b2;
      Deinterleave(v[c] + 4 * P * i, a, b);
      Deinterleave(v[c] + 4 * P * i + 2 * P, a2, b2);
      const __m512i n1 = _mm512_xor_si512(a, O::Mul(rv, _mm512_xor_si512(a, b)));
      const __m512i n2 = _mm512_xor_si512(a2, O::Mul(rv, _mm512_xor_si512(a2, b2)));
      _mm512_storeu_si512(v[c] + 2 * P * i, n1);
      _mm512_storeu_si512(v[c] + 2 * P * i + P, n2);
      ev[c] = _mm512_permutex2var_epi64(n1, ie, n2);
      od[c] = _mm512_permutex2var_epi64(n1, io, n2);
    }
    // As HalveH512: f = (ev[0], ev[1]) / (od[0], od[1]), g = c = 2, 3.
    MulAcc512(w1, od[0], _mm512_xor_si512(od[2], od[3]));
    MulAcc512(w1, od[1], od[2]);
    __m512i e2[4];
    for (int c = 0; c < 4; ++c) e2[c] = _mm512_xor_si512(ev[c], O::MulX(_mm512_xor_si512(ev[c], od[c])));
    MulAcc512(w2, e2[0], _mm512_xor_si512(e2[2], e2[3]));
    MulAcc512(w2, e2[1], e2[2]);
  }
  *h1 = Sum512(w1);
  *h2 = Sum512(w2);
}

}  // namespace

template <class E>
void HalveH(const E* const f[2], const E* const g[2], size_t n, E out[2]) {
  typename Field<E>::Wide h1, h2;
  const size_t m = n / 2;
  size_t k0 = 0;
  E v1 = Field<E>::Elem(0), v2 = v1;
  if (Use512()) {
    k0 = m / kPairs512<E> * kPairs512<E>;
    HalveH512(f, g, m / kPairs512<E>, &v1, &v2);
  }
  HalveHTail(f, g, k0, n, h1, h2);
  out[0] = Add(Reduce(h1), v1);
  out[1] = Add(Reduce(h2), v2);
}

template <class E>
void HalveFoldH(E* const f[2], E* const g[2], size_t n, E r, E out[2]) {
  const size_t m = n / 2;
  if (!Use512()) {
    HalveFold(f, g, n, r);
    HalveH<E>(f, g, n - m, out);
    return;
  }
  E* const v[4] = {f[0], f[1], g[0], g[1]};
  constexpr size_t P = 2 * kPairs512<E>;  // pairs folded per iteration
  const size_t q = m / P;
  E v1, v2;
  HalveFoldH512(v, q, r, &v1, &v2);
  HalveFoldTail(f, g, P * q, n, r);
  typename Field<E>::Wide h1, h2;
  HalveHTail<E>(f, g, P / 2 * q, n - m, h1, h2);
  out[0] = Add(Reduce(h1), v1);
  out[1] = Add(Reduce(h2), v2);
}

namespace {

// sum_{j < kTailWords} lag[j] * v[j]: eight products per VPCLMULQDQ pair
// where the CPU has them (GF(2^64) only), one PCLMULQDQ each otherwise.
template <class E>
E TailDot(const E* lag, const E* v) {
  typename Field<E>::Wide acc;
  for (int j = 0; j < kTailWords; ++j) MulAcc(acc, lag[j], v[j]);
  return Reduce(acc);
}
constexpr int kTailWords8 = kTailWords / 8 * 8;
template <>
F64 TailDot<F64>(const F64* lag, const F64* v) {
  if (!Use512()) {
    Wide64 acc;
    for (int j = 0; j < kTailWords; ++j) MulAcc(acc, lag[j], v[j]);
    return Reduce(acc);
  }
  F64 s = Dot512<kTailWords8>(lag, v, 0);
  for (int j = kTailWords8; j < kTailWords; ++j) s = Add(s, Mul(lag[j], v[j]));
  return s;
}

// ---- Steps by kStepWords (K = 4) in GF(2^64), eight groups at a time ----
// Groups per block of StepH512 / StepFold512: one 512-bit register holds
// element j of eight consecutive groups.
inline constexpr size_t kStepGroups512 = 8;

// x[j] = element j of groups 0 .. 7 of p[0 .. 32) (group k: p[4k .. 4k+4)).
KMPC_DZKP_512 inline void GroupColumns8(const F64* p, __m512i x[4]) {
  const __m512i a = Load8(p), b = Load8(p + 8), c = Load8(p + 16), d = Load8(p + 24);
  for (int j = 0; j < 4; ++j) {
    const __m512i idx = _mm512_setr_epi64(j, j + 4, j + 8, j + 12, j, j + 4, j + 8, j + 12);
    x[j] = _mm512_mask_blend_epi64(0xF0, _mm512_permutex2var_epi64(a, idx, b),
                                   _mm512_permutex2var_epi64(c, idx, d));
  }
}

// StepH over groups [0, 8 q): h(X) = sum_k f_k(X) g_k(X) with f_k(e_j) =
// f[4k + j] is bilinear in (f, g), so its weak share at any point e_p is
// sum_{j,j'} L_j(e_p) L_j'(e_p) M_{j,j'}, M_{j,j'} = sum_k f0_kj (g0_kj' +
// g1_kj') + f1_kj g0_kj' (the weak share of f_kj g_kj'; Araki et al., CCS
// 2016, section 2). The 16 sums M are accumulated unreduced (two
// VPCLMULQDQ per pair and component for eight groups) and the K - 1 points
// past e_{K-1} evaluated once from them; h(e_p) = M_{p,p} for p < K.
// out[p - 1] = this party's weak share of the blocks' h(e_p), p = 1 .. 2K-2.
KMPC_DZKP_512 void StepH512(const F64* const f[2], const F64* const g[2], size_t q,
                            const F64* const rows[], F64* out) {
  constexpr int K = kStepWords;
  static_assert(K == 4, "GroupColumns8 transposes groups of four");
  __m512i m[K][K];
  for (int j = 0; j < K; ++j)
    for (int j2 = 0; j2 < K; ++j2) m[j][j2] = _mm512_setzero_si512();
  __m512i f0[K], f1[K], g0[K], gs[K];
  for (size_t i = 0; i < q; ++i) {
    const size_t at = 32 * i;
    GroupColumns8(f[0] + at, f0);
    GroupColumns8(f[1] + at, f1);
    GroupColumns8(g[0] + at, g0);
    GroupColumns8(g[1] + at, gs);
    for (int j = 0; j < K; ++j) gs[j] = _mm512_xor_si512(gs[j], g0[j]);
    for (int j = 0; j < K; ++j) {
      for (int j2 = 0; j2 < K; ++j2) {
        MulAcc512(m[j][j2], f0[j], gs[j2]);
        MulAcc512(m[j][j2], f1[j], g0[j2]);
      }
    }
  }
  share::Wipe(f0, sizeof f0);
  share::Wipe(f1, sizeof f1);
  share::Wipe(g0, sizeof g0);
  share::Wipe(gs, sizeof gs);
  F64 s[K][K];
  for (int j = 0; j < K; ++j)
    for (int j2 = 0; j2 < K; ++j2) s[j][j2] = Sum512(m[j][j2]);
  share::Wipe(m, sizeof m);
  for (int p = 1; p < K; ++p) out[p - 1] = s[p][p];
  for (int p = K; p < 2 * K - 1; ++p) {
    const F64* lag = rows[p - K];
    Wide64 acc;
    for (int j = 0; j < K; ++j) {
      Wide64 inner;
      for (int j2 = 0; j2 < K; ++j2) MulAcc(inner, lag[j2], s[j][j2]);
      MulAcc(acc, lag[j], Reduce(inner));
    }
    out[p - 1] = Reduce(acc);
  }
  share::Wipe(s, sizeof s);
}

// StepFold over groups [0, 8 q) of each vector: element k becomes
// sum_j lag[j] v[4k + j]. Block i reads elements [32 i, 32 i + 32) before
// it writes [8 i, 8 i + 8), which earlier blocks have read.
KMPC_DZKP_512 void StepFold512(F64* const v[4], size_t q, const F64* lag) {
  constexpr int K = kStepWords;
  __m512i l[K];
  for (int j = 0; j < K; ++j) l[j] = _mm512_set1_epi64(static_cast<int64_t>(lag[j].v));
  __m512i x[K];
  for (int c = 0; c < 4; ++c) {
    for (size_t i = 0; i < q; ++i) {
      GroupColumns8(v[c] + 32 * i, x);
      __m512i pe = _mm512_setzero_si512(), po = pe;
      for (int j = 0; j < K; ++j) {
        pe = _mm512_xor_si512(pe, _mm512_clmulepi64_epi128(x[j], l[j], 0x00));
        po = _mm512_xor_si512(po, _mm512_clmulepi64_epi128(x[j], l[j], 0x11));
      }
      Store8(v[c] + 8 * i,
             Reduce8(_mm512_unpacklo_epi64(pe, po), _mm512_unpackhi_epi64(pe, po)));
    }
  }
  share::Wipe(x, sizeof x);
}

}  // namespace

template <class E>
void TailH(const E* const f[2], const E* const g[2], E* out) {
  constexpr int T = kTailWords;
  using W = typename Field<E>::Wide;
  // Weak share of a * b: a0 * (b0 + b1) + a1 * b0.
  auto weak = [](E a0, E a1, E b0, E b1) {
    W acc;
    MulAcc(acc, a0, Add(b0, b1));
    MulAcc(acc, a1, b0);
    return Reduce(acc);
  };
  for (int p = 1; p < T; ++p) out[p - 1] = weak(f[0][p], f[1][p], g[0][p], g[1][p]);
  // p >= T: f(e_p) = sum_j L_j(e_p) f_j, one reduction per point.
  for (int p = T; p < 2 * T - 1; ++p) {
    const E* lag = LagrangeRow<E, T>(p);
    E at[4];
    const E* const v[4] = {f[0], f[1], g[0], g[1]};
    for (int c = 0; c < 4; ++c) at[c] = TailDot(lag, v[c]);
    out[p - 1] = weak(at[0], at[1], at[2], at[3]);
    share::Wipe(at, sizeof at);
  }
}

template <class E>
void StepH(const E* const f[2], const E* const g[2], size_t n, E* out) {
  constexpr int K = kStepWords, P = 2 * K - 1;
  using W = typename Field<E>::Wide;
  const E* const v[4] = {f[0], f[1], g[0], g[1]};
  const E* rows[K - 1];
  for (int p = K; p < P; ++p) rows[p - K] = LagrangeRow<E, K>(p);
  W acc[P - 1];
  size_t k0 = 0;
  if constexpr (std::is_same_v<E, F64>) {
    if (Use512()) {
      // The groups of whole blocks of kStepGroups512 by their cross sums,
      // the rest below; the sums of both are added before the reduction.
      const size_t q = n / (K * kStepGroups512);
      k0 = q * K * kStepGroups512;
      StepH512(f, g, q, rows, out);
    }
  }
  // Weak share of a * b: a0 * (b0 + b1) + a1 * b0.
  auto weak = [](W& w, const E* a) {
    MulAcc(w, a[0], Add(a[2], a[3]));
    MulAcc(w, a[1], a[2]);
  };
  E x[K][4], at[4];
  for (size_t k = k0; k < n; k += K) {
    for (int j = 0; j < K; ++j)
      for (int c = 0; c < 4; ++c) x[j][c] = k + j < n ? v[c][k + j] : Field<E>::Elem(0);
    for (int p = 1; p < K; ++p) weak(acc[p - 1], x[p]);
    // p >= K: f_k(e_p) = sum_j L_j(e_p) f_{Kk+j}, one reduction per point.
    for (int p = K; p < P; ++p) {
      for (int c = 0; c < 4; ++c) {
        W d;
        for (int j = 0; j < K; ++j) MulAcc(d, rows[p - K][j], x[j][c]);
        at[c] = Reduce(d);
      }
      weak(acc[p - 1], at);
    }
  }
  for (int p = 1; p < P; ++p) out[p - 1] = Add(k0 > 0 ? out[p - 1] : Field<E>::Elem(0), Reduce(acc[p - 1]));
  share::Wipe(x, sizeof x);
  share::Wipe(at, sizeof at);
  share::Wipe(acc, sizeof acc);
}

template <class E>
void StepFold(E* const f[2], E* const g[2], size_t n, E r) {
  constexpr int K = kStepWords;
  E lag[K];
  LagrangeAt(K, r, lag);
  size_t k0 = 0;
  if constexpr (std::is_same_v<E, F64>) {
    if (Use512()) {
      const size_t q = n / (K * kStepGroups512);
      k0 = q * kStepGroups512;
      E* const v[4] = {f[0], f[1], g[0], g[1]};
      StepFold512(v, q, lag);
    }
  }
  // Group k is read before element k is written (k <= K k).
  for (E* v : {f[0], f[1], g[0], g[1]}) {
    for (size_t k = k0; K * k < n; ++k) {
      typename Field<E>::Wide acc;
      for (size_t j = 0; j < K && K * k + j < n; ++j) MulAcc(acc, lag[j], v[K * k + j]);
      v[k] = Reduce(acc);
    }
  }
}

template <class E>
void TailFold(E* const f[2], E* const g[2], E r) {
  constexpr int T = kTailWords;
  E lag[T];
  LagrangeAt(T, r, lag);
  for (E* v : {f[0], f[1], g[0], g[1]}) v[0] = TailDot(lag, v);
}

template <class E>
void HalveFold(E* const f[2], E* const g[2], size_t n, E r) {
  const size_t m = n / 2;
  size_t k0 = 0;
  if (Use512()) {
    E* const v[4] = {f[0], f[1], g[0], g[1]};
    k0 = m / kPairs512<E> * kPairs512<E>;
    HalveFold512(v, m / kPairs512<E>, r);
  }
  HalveFoldTail(f, g, k0, n, r);
}

#define KMPC_DZKP_INSTANTIATE(E)                                                      \
  template void Interpolate<E>(int, const E*, const E*, E, E[2]);                     \
  template void HalveH<E>(const E* const[2], const E* const[2], size_t, E[2]);        \
  template void HalveFold<E>(E* const[2], E* const[2], size_t, E);                    \
  template void HalveFoldH<E>(E* const[2], E* const[2], size_t, E, E[2]);             \
  template void TailH<E>(const E* const[2], const E* const[2], E*);                   \
  template void TailFold<E>(E* const[2], E* const[2], E);                            \
  template void StepH<E>(const E* const[2], const E* const[2], size_t, E*);           \
  template void StepFold<E>(E* const[2], E* const[2], size_t, E);
KMPC_DZKP_INSTANTIATE(Fe)
KMPC_DZKP_INSTANTIATE(F64)
#undef KMPC_DZKP_INSTANTIATE

}  // namespace kmpc::protocol::dzkp
