#include "protocol/dzkp.h"

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>

#include "share/replicated.h"

namespace kmpc::protocol::dzkp {

Fe Inv(Fe a) {
  // r = a^(2^k - 1) after k - 1 steps of r = r^2 * a; then one squaring.
  Fe r = a;
  for (int i = 0; i < 126; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

namespace {

uint8_t ReverseBits(uint8_t b) {
  b = static_cast<uint8_t>((b & 0xf0) >> 4 | (b & 0x0f) << 4);
  b = static_cast<uint8_t>((b & 0xcc) >> 2 | (b & 0x33) << 2);
  return static_cast<uint8_t>((b & 0xaa) >> 1 | (b & 0x55) << 1);
}

// 1 / prod_{m != j} (e_j + e_m) for j < n, computed once per n.
constexpr int kMaxPoints = 2 * kMaxGroupWords;
const Fe* Denominators(int n) {
  static std::mutex mu;
  static std::array<std::vector<Fe>, kMaxPoints + 1> table;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Fe>& t = table[n];
  if (t.empty()) {
    t.resize(n);
    for (int j = 0; j < n; ++j) {
      Fe d = FromU64(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) d = Mul(d, FromU64(static_cast<uint64_t>(j ^ m)));
      }
      t[j] = Inv(d);
    }
  }
  return t.data();
}

// 8 x 8 bit matrix transpose (Hacker's Delight, 7-3): byte i bit j ->
// byte j bit i.
inline uint64_t Transpose8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x ^= t ^ (t << 28);
  return x;
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
      m = Transpose8(m);
      for (int l = 0; l < 8; ++l) {
        out[8 * k + l] |= static_cast<Pattern>((m >> (8 * l)) & 0xff) << (8 * h);
      }
    }
  }
}

// Sums of coefficients over the set bits of a byte: t[b] = sum c_j, bit j
// of b set (j < 8).
void SubsetSums(const Fe* c, Fe* t) {
  t[0] = Zero();
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

KMPC_DZKP_512 inline void MulAcc4(Wide4& w, __m512i a, __m512i b) {
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
  MulAcc4(w, a, b);
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
KMPC_DZKP_512 inline Fe Sum4(const Wide4& w) {
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

// out[i] = a[i] * b[i] for i < n (n a multiple of 4).
KMPC_DZKP_512 void MulPairwise512(const Fe* a, const Fe* b, Fe* out, int n) {
  for (int i = 0; i < n; i += 4) Store4(out + i, Mul4(Load4(a + i), Load4(b + i)));
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

// TransposeGroup512 for G = 64 with VBMI and GFNI: a 64 x 64 bit
// transpose in 8 x 8 blocks (register h holds words 8h .. 8h+7):
// bytes to blocks (VPERMB), blocks across registers (VPERMT2Q),
// bits within blocks (GF2P8AFFINEQB), blocks' bytes to lanes (VPERMB).
#define KMPC_DZKP_GFNI __attribute__((target("avx512f,avx512bw,avx512vbmi,gfni")))

bool UseGfni() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vbmi") &&
                           __builtin_cpu_supports("gfni");
  return have && !ForceScalarFlag();
}

// r[0..8) as an 8 x 8 matrix of qwords, transposed.
KMPC_DZKP_GFNI inline void TransposeQwords(__m512i r[8]) {
  const __m512i lo1 = _mm512_setr_epi64(0, 8, 2, 10, 4, 12, 6, 14);
  const __m512i hi1 = _mm512_setr_epi64(1, 9, 3, 11, 5, 13, 7, 15);
  const __m512i lo2 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi2 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i lo4 = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
  const __m512i hi4 = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
  __m512i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm512_permutex2var_epi64(r[i], lo1, r[i + 1]);
    a[i + 1] = _mm512_permutex2var_epi64(r[i], hi1, r[i + 1]);
  }
  // a[2p]: columns 0 2 4 6 of rows 2p, 2p+1; a[2p+1]: columns 1 3 5 7.
  for (int i = 0; i < 8; i += 4) {
    for (int odd = 0; odd < 2; ++odd) {
      b[i + odd] = _mm512_permutex2var_epi64(a[i + odd], lo2, a[i + 2 + odd]);
      b[i + 2 + odd] = _mm512_permutex2var_epi64(a[i + odd], hi2, a[i + 2 + odd]);
    }
  }
  // b[4q + c], c = 0..3: rows 4q..4q+3 of columns {0,4}, {1,5}, {2,6}, {3,7}.
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_permutex2var_epi64(b[c], lo4, b[4 + c]);
    r[c + 4] = _mm512_permutex2var_epi64(b[c], hi4, b[4 + c]);
  }
}

KMPC_DZKP_GFNI void Transpose64Gfni(const uint64_t* w, uint64_t out[64]) {
  // Within a register: qword m, byte i <- qword 7 - i, byte m (the block
  // of columns 8m.. with its rows reversed, for the affine step).
  struct Indexes {
    alignas(64) uint8_t to_blocks[64], to_lanes[64];
    constexpr Indexes() : to_blocks(), to_lanes() {
      for (int m = 0; m < 8; ++m) {
        for (int i = 0; i < 8; ++i) {
          to_blocks[8 * m + i] = static_cast<uint8_t>(8 * (7 - i) + m);
          to_lanes[8 * m + i] = static_cast<uint8_t>(8 * i + m);
        }
      }
    }
  };
  static constexpr Indexes kIdx;
  const __m512i ib = _mm512_load_si512(kIdx.to_blocks);
  const __m512i il = _mm512_load_si512(kIdx.to_lanes);
  // GF2P8AFFINEQB(x, A): bit i of byte k = parity(A.byte[7 - i] & x.byte[k]);
  // with x.byte[k] = 1 << k that is bit k of row 7 - i of A.
  const __m512i unit = _mm512_set1_epi64(static_cast<int64_t>(0x8040201008040201ull));
  __m512i r[8];
  for (int h = 0; h < 8; ++h) r[h] = _mm512_permutexvar_epi8(ib, _mm512_loadu_si512(w + 8 * h));
  TransposeQwords(r);  // r[m] qword h: block (rows 8h.., columns 8m..)
  for (int m = 0; m < 8; ++m) {
    const __m512i t = _mm512_gf2p8affine_epi64_epi8(unit, r[m], 0);
    // t qword h, byte k: lane 8m + k of words 8h .. 8h+7.
    _mm512_storeu_si512(out + 8 * m, _mm512_permutexvar_epi8(il, t));
  }
}

// The lane patterns of a group's words by the fastest transpose the CPU
// has.
template <int G>
void TransposeFor(const uint64_t* w, PatternT<G> out[64], bool v512, bool gfni) {
  if constexpr (G == 64) {
    if (gfni) return Transpose64Gfni(w, out);
  }
  if (v512) {
    TransposeGroup512<G>(w, out);
  } else {
    TransposeGroup<G>(w, out);
  }
}

// HalveH over pairs [0, 4 * q): the weak shares of h(1), h(x).
KMPC_DZKP_512 void HalveH512(const Fe* const f[2], const Fe* const g[2], size_t q,
                             Fe* h1, Fe* h2) {
  Wide4 w1{_mm512_setzero_si512(), _mm512_setzero_si512()}, w2 = w1;
  for (size_t i = 0; i < q; ++i) {
    __m512i a0, b0, a1, b1, c0, d0, c1, d1;
    Deinterleave(f[0] + 8 * i, a0, b0);
    Deinterleave(f[1] + 8 * i, a1, b1);
    Deinterleave(g[0] + 8 * i, c0, d0);
    Deinterleave(g[1] + 8 * i, c1, d1);
    MulAcc4(w1, b0, _mm512_xor_si512(d0, d1));
    MulAcc4(w1, b1, d0);
    const __m512i fa0 = _mm512_xor_si512(a0, MulX4(_mm512_xor_si512(a0, b0)));
    const __m512i fa1 = _mm512_xor_si512(a1, MulX4(_mm512_xor_si512(a1, b1)));
    const __m512i ga0 = _mm512_xor_si512(c0, MulX4(_mm512_xor_si512(c0, d0)));
    const __m512i ga1 = _mm512_xor_si512(c1, MulX4(_mm512_xor_si512(c1, d1)));
    MulAcc4(w2, fa0, _mm512_xor_si512(ga0, ga1));
    MulAcc4(w2, fa1, ga0);
  }
  *h1 = Sum4(w1);
  *h2 = Sum4(w2);
}

// HalveFold over pairs [0, 4 * q), in place.
KMPC_DZKP_512 void HalveFold512(Fe* const v[4], size_t q, Fe r) {
  const __m512i rv = _mm512_broadcast_i32x4(r);
  for (int c = 0; c < 4; ++c) {
    for (size_t i = 0; i < q; ++i) {
      __m512i a, b;
      Deinterleave(v[c] + 8 * i, a, b);
      Store4(v[c] + 4 * i, _mm512_xor_si512(a, Mul4(rv, _mm512_xor_si512(a, b))));
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

void LagrangeAt(int n, Fe x, Fe* out) {
  const Fe* den = Denominators(n);
  if (n <= 16) {  // n^2 products: fewer than one inversion's for small n
    for (int j = 0; j < n; ++j) {
      Fe num = FromU64(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) num = Mul(num, Add(x, FromU64(static_cast<uint64_t>(m))));
      }
      out[j] = Mul(num, den[j]);
    }
    return;
  }
  // Barycentric: L_j(x) = den_j * prod_m (x - e_m) / (x - e_j), the n
  // inverses from one (Montgomery's trick); x a node gives a unit vector.
  Fe d[kMaxPoints], prefix[kMaxPoints];
  Fe all = FromU64(1);
  for (int j = 0; j < n; ++j) {
    d[j] = Add(x, FromU64(static_cast<uint64_t>(j)));
    if (Equal(d[j], Zero())) {
      for (int m = 0; m < n; ++m) out[m] = FromU64(m == j);
      return;
    }
    prefix[j] = all;  // d_0 ... d_{j-1}
    all = Mul(all, d[j]);
  }
  Fe inv = Inv(all);  // 1 / (d_0 ... d_{k})
  for (int j = n - 1; j >= 0; --j) {
    const Fe inv_dj = Mul(inv, prefix[j]);  // 1 / d_j
    inv = Mul(inv, d[j]);
    out[j] = Mul(Mul(all, inv_dj), den[j]);
  }
}

namespace {

// Per-thread scratch of the first level (~60 KB), on the heap: as static
// thread_local arrays it would sit in every thread's static TLS block,
// and threads created with small stacks (civetweb's, for --metrics_addr)
// would then fail to start.
struct FirstLevelScratch {
  // S[j][j'] = sum over groups k of nu_k * (weak share of x_{k,j} & y_{k,j'})
  // and T[c][j] = sum_k nu_k * z_{c,k,j}: 64 x 64 carry-less products,
  // exact in 128 bits.
  Fe S[kMaxGroupWords][kMaxGroupWords];
  Fe T[2][kMaxGroupWords];
  // The 512-bit path's accumulators: [.][q][0] holds the products of
  // words 8q + 0, 2, 4, 6 (one per 128-bit lane), [.][q][1] of 8q + 1, 3,
  // 5, 7.
  __m512i acc[kMaxGroupWords][kMaxGroupWords / 8][2];
  __m512i zacc[2][kMaxGroupWords / 8][2];
  Fe ta[kMaxGroupWords / 8][256], tb[kMaxGroupWords / 8][256];
  void Wipe() { share::Wipe(this, sizeof *this); }
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
    for (int j2 = 0; j2 < G; ++j2) {
      s.S[j][j2] = Add(s.S[j][j2], Clmul64((x0[j] & yy[j2]) ^ (x1[j] & y0[j2]), nu));
    }
  }
  for (int c = 0; c < 2; ++c)
    for (int j = 0; j < G; ++j) s.T[c][j] = Add(s.T[c][j], Clmul64(z[c][j], nu));
}

// CrossGroup with VPCLMULQDQ: eight words of y against one of x per
// pair of instructions.
template <int G>
KMPC_DZKP_512 void CrossGroup512(const uint64_t* x0, const uint64_t* x1, const uint64_t* y0,
                                 const uint64_t* yy, const uint64_t* const z[2], uint64_t nu,
                                 FirstLevelScratch& s) {
  const __m512i nv = _mm512_set1_epi64(static_cast<int64_t>(nu));
  __m512i Y[G / 8], Y0[G / 8];
  for (int q = 0; q < G / 8; ++q) {
    Y[q] = _mm512_loadu_si512(yy + 8 * q);
    Y0[q] = _mm512_loadu_si512(y0 + 8 * q);
  }
  for (int j = 0; j < G; ++j) {
    const __m512i a = _mm512_set1_epi64(static_cast<int64_t>(x0[j]));
    const __m512i b = _mm512_set1_epi64(static_cast<int64_t>(x1[j]));
    for (int q = 0; q < G / 8; ++q) {
      const __m512i p = _mm512_xor_si512(_mm512_and_si512(a, Y[q]), _mm512_and_si512(b, Y0[q]));
      s.acc[j][q][0] = _mm512_xor_si512(s.acc[j][q][0], _mm512_clmulepi64_epi128(p, nv, 0x00));
      s.acc[j][q][1] = _mm512_xor_si512(s.acc[j][q][1], _mm512_clmulepi64_epi128(p, nv, 0x01));
    }
  }
  for (int c = 0; c < 2; ++c) {
    for (int q = 0; q < G / 8; ++q) {
      const __m512i v = _mm512_loadu_si512(z[c] + 8 * q);
      s.zacc[c][q][0] = _mm512_xor_si512(s.zacc[c][q][0], _mm512_clmulepi64_epi128(v, nv, 0x00));
      s.zacc[c][q][1] = _mm512_xor_si512(s.zacc[c][q][1], _mm512_clmulepi64_epi128(v, nv, 0x01));
    }
  }
  share::Wipe(Y, sizeof Y);
  share::Wipe(Y0, sizeof Y0);
}

// The 512-bit accumulators of 8q + {0, 2, 4, 6} and 8q + {1, 3, 5, 7}
// -> out[8q .. 8q + 8).
KMPC_DZKP_512 void Unpack512(const __m512i (*acc)[2], Fe* out, int words) {
  for (int q = 0; q < words / 8; ++q) {
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

// The Lagrange values L_j(e_p) over {e_0 .. e_{G-1}} for p in [G, kHPoints),
// computed once.
template <int G>
const Fe* LagrangeRow(int p) {
  struct Table {
    Fe v[G - 1][G];
    Table() {
      for (int p = G; p < 2 * G - 1; ++p)
        LagrangeAt(G, FromU64(static_cast<uint64_t>(p)), v[p - G]);
    }
  };
  static const Table table;
  return table.v[p - G];
}

// sum_j' lag[j'] * row[j'] (G elements).
template <int G>
Fe Dot(const Fe* lag, const Fe* row) {
  Wide acc;
  for (int j = 0; j < G; ++j) MulAcc(acc, lag[j], row[j]);
  return Reduce(acc);
}

template <int G>
KMPC_DZKP_512 Fe Dot512(const Fe* lag, const Fe* row) {
  Wide4 w{_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int j = 0; j < G; j += 4) MulAcc4(w, Load4(lag + j), Load4(row + j));
  return Sum4(w);
}


template <int G>
void FirstLevelHImpl(const AndShares& s, const AndWeights& w, Fe* out, Fe claim[2]) {
  const size_t groups = (s.n + G - 1) / G;
  FirstLevelScratch& sc = Scratch();
  sc.Wipe();
  const bool v512 = Use512();
  uint64_t b[6][G], yy[G];
  for (size_t k = 0; k < groups; ++k) {
    const uint64_t* x0 = GroupWords<G>(s.x[0], s.n, k, b[0]);
    const uint64_t* x1 = GroupWords<G>(s.x[1], s.n, k, b[1]);
    const uint64_t* y0 = GroupWords<G>(s.y[0], s.n, k, b[2]);
    const uint64_t* y1 = GroupWords<G>(s.y[1], s.n, k, b[3]);
    const uint64_t* const z[2] = {GroupWords<G>(s.z[0], s.n, k, b[4]),
                                  GroupWords<G>(s.z[1], s.n, k, b[5])};
    // Weak share of x_j & y_j': x0 & (y0 ^ y1) ^ x1 & y0, lane-wise.
    for (int j = 0; j < G; ++j) yy[j] = y0[j] ^ y1[j];
    if (v512) {
      CrossGroup512<G>(x0, x1, y0, yy, z, w.nu[k], sc);
    } else {
      CrossGroup<G>(x0, x1, y0, yy, z, w.nu[k], sc);
    }
  }
  if (v512) {
    for (int j = 0; j < G; ++j) Unpack512(sc.acc[j], sc.S[j], G);
    for (int c = 0; c < 2; ++c) Unpack512(sc.zacc[c], sc.T[c], G);
  }
  for (int c = 0; c < 2; ++c) {
    Wide t;
    for (int j = 0; j < G; ++j) MulAcc(t, w.tau[j], sc.T[c][j]);
    claim[c] = Reduce(t);
  }
  // h(p) = sum_{j,j'} L_j(p) L_j'(p) tau_j S_{j,j'}; L_j(e_p) = [j = p]
  // for p < G.
  for (int p = 1; p < 2 * G - 1; ++p) {
    if (p < G) {
      out[p - 1] = Mul(w.tau[p], sc.S[p][p]);
      continue;
    }
    const Fe* lag = LagrangeRow<G>(p);
    Wide acc;
    for (int j = 0; j < G; ++j) {
      const Fe inner = v512 ? Dot512<G>(lag, sc.S[j]) : Dot<G>(lag, sc.S[j]);
      MulAcc(acc, Mul(lag[j], w.tau[j]), inner);
    }
    out[p - 1] = Reduce(acc);
  }
  sc.Wipe();
  share::Wipe(b, sizeof b);
  share::Wipe(yy, sizeof yy);
}

template <int G>
void FirstLevelFoldImpl(const AndShares& s, const AndWeights& w, Fe r, Fe* f0,
                        Fe* f1, Fe* g0, Fe* g1) {
  const size_t groups = (s.n + G - 1) / G;
  Fe lag[G], a[G];
  LagrangeAt(G, r, lag);
  for (int j = 0; j < G; ++j) a[j] = Mul(lag[j], w.tau[j]);
  // Subset sums of a (x side) and of the Lagrange values (y side), per
  // byte of the lane pattern.
  constexpr int kBytes = G / 8;
  FirstLevelScratch& scratch = Scratch();
  auto& ta = scratch.ta;
  auto& tb = scratch.tb;
  for (int h = 0; h < kBytes; ++h) {
    SubsetSums(a + 8 * h, ta[h]);
    SubsetSums(lag + 8 * h, tb[h]);
  }
  Fe* f[2] = {f0, f1};
  Fe* g[2] = {g0, g1};
  uint64_t buf[G];
  PatternT<G> pat[64];
  alignas(64) Fe mu[64];
  const bool v512 = Use512();
  const bool gfni = UseGfni();
  // out[l] = sum of t[h][byte h of lane l's pattern] for the group's words.
  auto fold = [&](const uint64_t* a, size_t k, const Fe (*t)[256], Fe* out) {
    TransposeFor<G>(GroupWords<G>(a, s.n, k, buf), pat, v512, gfni);
    for (int l = 0; l < 64; ++l) {
      Fe v = t[0][pat[l] & 0xff];
      for (int h = 1; h < kBytes; ++h) v = Add(v, t[h][(pat[l] >> (8 * h)) & 0xff]);
      out[l] = v;
    }
  };
  // The x side for every group, then the y side: one table at a time
  // stays in the L1 cache.
  for (size_t k = 0; k < groups; ++k) {
    // nu_k * x^l: nu_k shifted by l (degree < 127, no reduction).
    const uint64_t nu = w.nu[k];
    mu[0] = FromU64(nu);
    for (int l = 1; l < 64; ++l) mu[l] = FromU64(nu << l, nu >> (64 - l));
    for (int c = 0; c < 2; ++c) {
      Fe* fo = f[c] + 64 * k;
      fold(s.x[c], k, ta, fo);
      if (v512) {
        MulPairwise512(mu, fo, fo, 64);
      } else {
        for (int l = 0; l < 64; ++l) fo[l] = Mul(mu[l], fo[l]);
      }
    }
  }
  for (size_t k = 0; k < groups; ++k) {
    for (int c = 0; c < 2; ++c) fold(s.y[c], k, tb, g[c] + 64 * k);
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

void FirstLevelH(const AndShares& s, const AndWeights& w, Fe* out, Fe claim[2]) {
  switch (w.g) {
    case 16: return FirstLevelHImpl<16>(s, w, out, claim);
    case 32: return FirstLevelHImpl<32>(s, w, out, claim);
    default: return FirstLevelHImpl<64>(s, w, out, claim);
  }
}

void FirstLevelFold(const AndShares& s, const AndWeights& w, Fe r, Fe* f0,
                    Fe* f1, Fe* g0, Fe* g1) {
  switch (w.g) {
    case 16: return FirstLevelFoldImpl<16>(s, w, r, f0, f1, g0, g1);
    case 32: return FirstLevelFoldImpl<32>(s, w, r, f0, f1, g0, g1);
    default: return FirstLevelFoldImpl<64>(s, w, r, f0, f1, g0, g1);
  }
}

void Interpolate(int n, const Fe* v0, const Fe* v1, Fe r, Fe out[2]) {
  Fe lag[kMaxPoints];
  LagrangeAt(n, r, lag);
  Wide acc[2];
  for (int j = 0; j < n; ++j) {
    MulAcc(acc[0], lag[j], v0[j]);
    MulAcc(acc[1], lag[j], v1[j]);
  }
  out[0] = Reduce(acc[0]);
  out[1] = Reduce(acc[1]);
}

void HalveH(const Fe* const f[2], const Fe* const g[2], size_t n, Fe out[2]) {
  Wide h1, h2;
  const size_t m = n / 2;
  size_t k0 = 0;
  Fe v1 = Zero(), v2 = Zero();
  if (Use512()) {
    k0 = m / 4 * 4;
    HalveH512(f, g, m / 4, &v1, &v2);
  }
  // Weak share of a * b: a0 * (b0 + b1) + a1 * b0.
  auto weak = [](Wide& acc, Fe a0, Fe a1, Fe b0, Fe b1) {
    MulAcc(acc, a0, Add(b0, b1));
    MulAcc(acc, a1, b0);
  };
  for (size_t k = k0; k < m; ++k) {
    const Fe a0 = f[0][2 * k], a1 = f[1][2 * k], b0 = f[0][2 * k + 1], b1 = f[1][2 * k + 1];
    const Fe c0 = g[0][2 * k], c1 = g[1][2 * k], d0 = g[0][2 * k + 1], d1 = g[1][2 * k + 1];
    weak(h1, b0, b1, d0, d1);
    // f(e_2) = a + x (a + b)
    weak(h2, Add(a0, MulX(Add(a0, b0))), Add(a1, MulX(Add(a1, b1))),
         Add(c0, MulX(Add(c0, d0))), Add(c1, MulX(Add(c1, d1))));
  }
  if (n % 2 == 1) {  // (a, 0): f(1) = 0, f(e_2) = (1 + x) a
    const Fe a0 = f[0][n - 1], a1 = f[1][n - 1], c0 = g[0][n - 1], c1 = g[1][n - 1];
    weak(h2, Add(a0, MulX(a0)), Add(a1, MulX(a1)), Add(c0, MulX(c0)), Add(c1, MulX(c1)));
  }
  out[0] = Add(Reduce(h1), v1);
  out[1] = Add(Reduce(h2), v2);
}

void HalveFold(Fe* const f[2], Fe* const g[2], size_t n, Fe r) {
  const size_t m = n / 2;
  size_t k0 = 0;
  if (Use512()) {
    Fe* const v[4] = {f[0], f[1], g[0], g[1]};
    k0 = m / 4 * 4;
    HalveFold512(v, m / 4, r);
  }
  for (int c = 0; c < 2; ++c) {
    for (size_t k = k0; k < m; ++k) {
      const Fe a = f[c][2 * k], b = f[c][2 * k + 1];
      f[c][k] = Add(a, Mul(r, Add(a, b)));
      const Fe u = g[c][2 * k], v = g[c][2 * k + 1];
      g[c][k] = Add(u, Mul(r, Add(u, v)));
    }
    if (n % 2 == 1) {  // b = 0: (1 + r) a
      const Fe a = f[c][n - 1], u = g[c][n - 1];
      const Fe one_r = Add(FromU64(1), r);
      f[c][m] = Mul(one_r, a);
      g[c][m] = Mul(one_r, u);
    }
  }
}

}  // namespace kmpc::protocol::dzkp
