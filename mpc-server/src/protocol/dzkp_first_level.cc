// The multiplication check's first level (dzkp.h: FirstLevelH,
// FirstLevelFold): the lift of the AND log's words into GF(2^64) and its
// first compression, on the scalar (PCLMULQDQ), VPCLMULQDQ and GFNI paths.
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

#include "protocol/dzkp_simd.h"
#include "share/replicated.h"
#include "util/transpose.h"

namespace kmpc::protocol::dzkp {

namespace {

using namespace simd;  // NOLINT: the 512-bit primitives of dzkp_simd.h

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

}  // namespace

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

// sum_j' lag[j'] * row[j'] (G elements).
template <int G>
F64 Dot(const F64* lag, const F64* row, int j0) {
  Wide64 acc;
  for (int j = j0; j < G; ++j) MulAcc(acc, lag[j], row[j]);
  return Reduce(acc);
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

}  // namespace kmpc::protocol::dzkp
