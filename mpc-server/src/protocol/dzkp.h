// The arithmetic of the multiplication check (verify.h): the fields
// GF(2^64) (the AND gates' proof) and GF(2^128) (the proof of the logged
// GF(2^128) products), lifting 64-lane AND words into GF(2^64), Lagrange
// coefficients, and the compression steps, as local functions on one
// party's shares so that tests can run them on clear values (a value v is
// the sharing (v, 0)) against a plain-text reference.
//
// Fields, both in the polynomial basis (bit i is the coefficient of x^i):
//  - GF(2^128) = GF(2)[x] / (x^128 + x^7 + x^2 + x + 1), 128-bit integers
//    little-endian in an __m128i (Fe). This is GCM's field with the bits
//    of each byte in the opposite order (FromGcm), so GF(2^128) products
//    logged by the engine keep their relation z = x * y.
//  - GF(2^64) = GF(2)[x] / (x^64 + x^4 + x^3 + x + 1) (F64; the
//    pentanomial is irreducible, the low-weight one in the standard tables,
//    e.g. Seroussi, "Table of low-weight binary irreducible polynomials",
//    HP Labs HPL-98-135): a product is one 64 x 64 carry-less product and a
//    reduction by shifts, eight per pair of VPCLMULQDQ.
//
// Shares: a replicated share of v held by party i is (v_i, v_{i+1}) (comp
// 0 and comp 1). A weak share of a product a * b is party i's term
// a_i * (b_i + b_{i+1}) + a_{i+1} * b_i of a 3-out-of-3 additive sharing
// (the three terms add up to a * b; Araki et al., CCS 2016, section 2).
#ifndef KMPC_PROTOCOL_DZKP_H_
#define KMPC_PROTOCOL_DZKP_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace kmpc::protocol::dzkp {

// A field element (a wrapper so that std::vector<Fe> keeps __m128i's
// alignment without attribute warnings).
struct Fe {
  __m128i v;
  Fe() = default;
  Fe(__m128i x) : v(x) {}  // NOLINT: implicit, as the intrinsics' type
  operator __m128i() const { return v; }  // NOLINT
};

// An allocator whose resize leaves new elements uninitialised, for
// buffers that are written in full before they are read (the check's
// log and vectors; zeroing them first cost a pass over memory).
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}  // NOLINT
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using FeVector = std::vector<Fe, NoInitAllocator<Fe>>;
using WordVector = std::vector<uint64_t, NoInitAllocator<uint64_t>>;

inline Fe Zero() { return _mm_setzero_si128(); }
inline Fe FromU64(uint64_t lo, uint64_t hi = 0) {
  return _mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo));
}
inline Fe Load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline void Store(uint8_t* p, Fe a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), a);
}
inline Fe Add(Fe a, Fe b) { return _mm_xor_si128(a, b); }
inline bool Equal(Fe a, Fe b) {
  const __m128i d = _mm_xor_si128(a, b);
  return _mm_testz_si128(d, d) != 0;
}

// An unreduced product (256 bits); sums of products are reduced once.
struct Wide {
  __m128i lo = _mm_setzero_si128();
  __m128i hi = _mm_setzero_si128();
};

// w += a * b, unreduced (schoolbook: four PCLMULQDQ).
inline void MulAcc(Wide& w, Fe a, Fe b) {
  const __m128i t0 = _mm_clmulepi64_si128(a, b, 0x00);
  const __m128i t1 = _mm_clmulepi64_si128(a, b, 0x11);
  const __m128i t2 = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10),
                                   _mm_clmulepi64_si128(a, b, 0x01));
  w.lo = _mm_xor_si128(w.lo, _mm_xor_si128(t0, _mm_slli_si128(t2, 8)));
  w.hi = _mm_xor_si128(w.hi, _mm_xor_si128(t1, _mm_srli_si128(t2, 8)));
}

// hi * x^128 = hi * (x^7 + x^2 + x + 1): two folds by 0x87.
inline Fe Reduce(const Wide& w) {
  const __m128i p = _mm_set_epi64x(0, 0x87);
  const __m128i a = _mm_clmulepi64_si128(w.hi, p, 0x00);  // < 2^71
  const __m128i b = _mm_clmulepi64_si128(w.hi, p, 0x01);  // < 2^71, * x^64
  __m128i r = _mm_xor_si128(w.lo, _mm_xor_si128(a, _mm_slli_si128(b, 8)));
  const __m128i over = _mm_srli_si128(b, 8);  // < 2^7, * x^128
  return _mm_xor_si128(r, _mm_clmulepi64_si128(over, p, 0x00));
}

inline Fe Mul(Fe a, Fe b) {
  Wide w;
  MulAcc(w, a, b);
  return Reduce(w);
}

// a * x (the element FromU64(2)).
inline Fe MulX(Fe a) {
  const __m128i carry = _mm_srli_epi64(a, 63);
  __m128i s = _mm_or_si128(_mm_slli_epi64(a, 1), _mm_slli_si128(carry, 8));
  const __m128i top = _mm_srli_si128(carry, 8);
  const __m128i mask = _mm_sub_epi64(_mm_setzero_si128(), top);
  return _mm_xor_si128(s, _mm_and_si128(mask, _mm_set_epi64x(0, 0x87)));
}

// a^(2^128 - 2): the inverse of a nonzero a (0 for 0).
Fe Inv(Fe a);

// ---- GF(2^64) ----
struct F64 {
  uint64_t v;
};
using F64Vector = std::vector<F64, NoInitAllocator<F64>>;
inline F64 Add(F64 a, F64 b) { return F64{a.v ^ b.v}; }
inline bool Equal(F64 a, F64 b) { return a.v == b.v; }

// hi * x^64 + lo reduced: x^64 = x^4 + x^3 + x + 1, so hi * x^64 is
// hi ^ hi << 1 ^ hi << 3 ^ hi << 4 plus the bits shifted past x^63 (a
// polynomial `over` of degree < 4), whose over * x^64 has degree < 8.
inline uint64_t Reduce64(uint64_t lo, uint64_t hi) {
  const uint64_t over = (hi >> 63) ^ (hi >> 61) ^ (hi >> 60);
  return lo ^ hi ^ (hi << 1) ^ (hi << 3) ^ (hi << 4) ^ over ^ (over << 1) ^ (over << 3) ^
         (over << 4);
}

// An unreduced sum of products (128 bits); reduced once.
struct Wide64 {
  __m128i v = _mm_setzero_si128();
};
inline void MulAcc(Wide64& w, F64 a, F64 b) {
  w.v = _mm_xor_si128(w.v, _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(a.v)),
                                                 _mm_cvtsi64_si128(static_cast<int64_t>(b.v)),
                                                 0x00));
}
inline F64 Reduce(const Wide64& w) {
  return F64{Reduce64(static_cast<uint64_t>(_mm_cvtsi128_si64(w.v)),
                      static_cast<uint64_t>(_mm_extract_epi64(w.v, 1)))};
}
inline F64 Mul(F64 a, F64 b) {
  Wide64 w;
  MulAcc(w, a, b);
  return Reduce(w);
}
// a * x.
inline F64 MulX(F64 a) { return F64{(a.v << 1) ^ ((0 - (a.v >> 63)) & 0x1B)}; }
// a^(2^64 - 2): the inverse of a nonzero a (0 for 0).
F64 Inv(F64 a);

// What the generic steps below need of a field E: its unreduced
// accumulator and the element with integer representation j (the
// interpolation points e_j).
template <class E>
struct Field;
template <>
struct Field<Fe> {
  using Wide = dzkp::Wide;
  static Fe Elem(uint64_t j) { return FromU64(j); }
};
template <>
struct Field<F64> {
  using Wide = Wide64;
  static F64 Elem(uint64_t j) { return F64{j}; }
};

// The bulk loops use VPCLMULQDQ on four GF(2^128) or eight GF(2^64)
// elements per 512-bit register
// when the CPU has AVX-512 and VPCLMULQDQ, else one PCLMULQDQ per 64-bit
// product; the first fold uses GF2P8AFFINEQB bit-matrix products where
// the CPU has GFNI and AVX-512 VBMI, else table look-ups.
// ForceScalar(true) picks the scalar paths (tests run both); returns
// the previous setting. Not thread-safe: call before the threads start.
bool ForceScalar(bool force);

// GCM's byte string (NIST SP 800-38D, 6.3) <-> this basis: the bits of
// every byte reversed.
Fe FromGcm(const uint8_t* b);
void ToGcm(Fe a, uint8_t* b);

// The interpolation points e_j = Field<E>::Elem(j). out[j] = the Lagrange
// basis polynomial of e_j over {e_0 .. e_{n-1}}, evaluated at x (E = Fe or
// F64, as for the generic steps below).
template <class E>
void LagrangeAt(int n, E x, E* out);

// Lane l of an AND word weighs x^l in GF(2^64): the lift sum_l x^l v_l of
// a 64-lane word v is v itself read as a polynomial of degree < 64, which
// costs nothing, and the weak share of a lane-wise product x & y' lifts to
// the AND of the weak shares' words. An error word D != 0 lifts to a
// nonzero element, so the lane weights need no randomness of their own:
// the random group and word weights below make errors of different words
// independent (verify.h, soundness).
inline F64 LaneWeight(int l) { return F64{l < 64 ? uint64_t{1} << l : 0}; }

// Words per group of the first compression (verify.h): G = 16, 32 or
// 64, by the size of the log (GroupWordsFor), the same on all parties. Its
// polynomial h has 2G - 1 points. Larger groups cost G cross products
// per word and G^3 products per check (evaluating h), smaller ones leave
// 64 / G elements per word for the halvings.
inline constexpr int kMaxGroupWords = 64;
inline constexpr int kMaxHPoints = 2 * kMaxGroupWords - 1;
int GroupWordsFor(size_t and_words);

// The first compression's weights in GF(2^64): AND word j of group k and
// lane l weighs nu[k] * tau[j] * x^l with tau[j] = sigma[j]^2, and the
// first compression puts sigma[j] on both sides (f(e_j) = nu_k sigma_j
// x^l x, g(e_j) = sigma_j y), so that the coefficient of the cross term
// x_j y_j' in h, sigma_j sigma_j' L_j L_j', is symmetric in (j, j'): the
// cross products are needed only for j <= j', as the lift of x_j & y_j'
// ^ x_j' & y_j (one 64 x 64 carry-less product per unordered pair).
// Squaring is a bijection of GF(2^64) (the Frobenius automorphism), so
// tau[j] is uniform when sigma[j] is. nu[k] times a lifted word is one
// 64 x 64 carry-less product, summed over groups unreduced (128 bits) and
// reduced once per sum.
struct AndWeights {
  int g = kMaxGroupWords;  // words per group
  F64 sigma[kMaxGroupWords];
  F64 tau[kMaxGroupWords];  // sigma[j]^2 (DeriveTau)
  std::vector<uint64_t> nu;  // one per group (elements of GF(2^64))
  void DeriveTau() {
    for (int j = 0; j < kMaxGroupWords; ++j) tau[j] = Mul(sigma[j], sigma[j]);
  }
};

// One party's shares of the AND log: n words of x, y (two comps each) and
// z (two comps). Words past n count as zero.
struct AndShares {
  const uint64_t* x[2];
  const uint64_t* y[2];
  const uint64_t* z[2];
  size_t n;
  // The words are the caller's own writable buffers, read for the last
  // time by the first compression: FirstLevelH wipes z[c][0 .. n) (it is
  // z's only reader) and FirstLevelFold x and y, each group right after
  // its last read, while its cache lines are hot (share::Wipe, which the
  // compiler keeps). Every word [0, n) of the six is zero after both.
  bool wipe = false;
};

// First compression, before the challenge: this party's weak shares of
// h(e_1) .. h(e_{2G-2}) (out[0 .. 2G-3], G = w.g) and its replicated
// shares of the claim sum_g w_g z_g (claim[0], claim[1]), where
//   h(X) = sum over groups k and lanes l of f_{k,l}(X) * g_{k,l}(X),
//   f_{k,l}(e_j) = nu_k sigma_j x^l x_{k,j,l}, g_{k,l}(e_j) = sigma_j y_{k,j,l}
// (j < G, degree G - 1), so that
//   h(e_0) + ... + h(e_{G-1}) = sum_g w_g x_g y_g.
void FirstLevelH(const AndShares& s, const AndWeights& w, F64* out, F64 claim[2]);

// First compression, after the challenge r: for every group k and lane l,
// f_{k,l}(r) and g_{k,l}(r) (both comps) into f[c][64*k + l], g[c][...].
void FirstLevelFold(const AndShares& s, const AndWeights& w, F64 r, F64* f0,
                    F64* f1, F64* g0, F64* g1);

// h(r) from its values at e_0 .. e_{n-1} (both comps; n = 2G - 1 for
// the first compression, 3 for the halving steps).
template <class E>
void Interpolate(int n, const E* v0, const E* v1, E r, E out[2]);

// A halving step (Boyle, Gilboa, Ishai, Nof, CCS 2019, with compression
// factor 2; MAESTRO's verify_dot_product): for vectors of n
// elements (a missing last one counts as zero), pairs (2k, 2k+1) give
// f_k(X) = a + X (a + b), g_k likewise, and h(X) = sum_k f_k g_k of degree
// 2. Before the challenge: this party's weak shares of h(e_1), h(e_2).
// In either field (E = Fe, F64).
template <class E>
void HalveH(const E* const f[2], const E* const g[2], size_t n, E out[2]);
// After it: f_k(r), g_k(r) in place (elements 0 .. ceil(n/2) - 1).
template <class E>
void HalveFold(E* const f[2], E* const g[2], size_t n, E r);
// HalveFold, then HalveH of the ceil(n/2) folded elements into out, in one
// pass over the vectors.
template <class E>
void HalveFoldH(E* const f[2], E* const g[2], size_t n, E r, E out[2]);

// A compression of factor K = kStepWords (verify.h, step 4), for the AND
// proof's vectors once they hold at most kStepFrom elements: groups of K
// consecutive elements (missing ones count as zero), f_k(X) through
// f_k(e_j) = f[K k + j] (j < K), g_k likewise, h = sum_k f_k g_k of
// degree 2K - 2. One round trio takes n elements to ceil(n / K), where two
// halvings take three rounds each to reach ceil(n / 4): 32769 -> 129 in
// four steps instead of eight halvings. In GF(2^64) with VPCLMULQDQ, h
// comes from the K^2 cross sums M_{j,j'} of the groups' element columns
// (h is bilinear in f and g: 2 K^2 = 32 carry-less products per group,
// summed unreduced, the 2K - 2 points evaluated once from M) and the fold
// costs K products per group and component: ~12 products per element
// against ~6 for the two halvings it replaces (each ~4 per element of its
// input), so the steps start at kStepFrom = 2^15 + 1, where the vectors
// of a check of 2^16 AND words (2^16 + 1 elements) arrive after one
// halving and reach T = 129 in four steps (2^15 + 1 = 4^4 128 + 1; 25
// rounds per check instead of 31 from 2049). Before the challenge: this
// party's weak shares of h(e_1) ..
// h(e_{2K-2}) (out[0 .. 2K-3]); after it: f_k(r), g_k(r) into element k
// (elements 0 .. ceil(n / K) - 1), in place.
inline constexpr int kStepWords = 4;
inline constexpr size_t kStepFrom = 32769;
template <class E>
void StepH(const E* const f[2], const E* const g[2], size_t n, E* out);
template <class E>
void StepFold(E* const f[2], E* const g[2], size_t n, E r);

// The last compression (verify.h): once the halvings have left at most
// kTailWords elements, the vectors (zero-padded to kTailWords) go to one
// element in one step, as the first compression does with a group: f(X)
// through f(e_j) = f_j (j < T = kTailWords), g likewise, h = f g of degree
// 2T - 2. One round trio (reshare, coin) instead of log2(T) halvings of
// three rounds each. T = 2^7 + 1: the vectors enter the halvings with
// 64 m + 1 elements (the mask is the + 1) and a halving takes n to
// ceil(n / 2), so 2^k + 1 elements reach 2^(k-7) + 1 <= T after k - 7
// halvings, one fewer than a power-of-two T would allow (65,537 elements,
// a check of 65,536 AND words: 9 halvings, against 12 for T = 32). The
// tail's cost, (T - 1) T products per vector component, is ~66,000 64 x 64
// carry-less products per check (tens of microseconds), against 9 rounds.
inline constexpr int kTailWords = 129;
inline constexpr int kTailHPoints = 2 * kTailWords - 1;
// The most h values a proof step reshares (the first compression's
// 2G - 1 or the last one's 2T - 1).
inline constexpr int kMaxProofPoints =
    kTailHPoints > kMaxHPoints ? kTailHPoints : kMaxHPoints;
// Before the challenge: this party's weak shares of h(e_1) ..
// h(e_{2T-2}) (out[0 .. 2T-3]) from elements 0 .. T-1 of f and g.
template <class E>
void TailH(const E* const f[2], const E* const g[2], E* out);
// After it: f(r), g(r) into element 0 (both comps).
template <class E>
void TailFold(E* const f[2], E* const g[2], E r);

}  // namespace kmpc::protocol::dzkp

#endif  // KMPC_PROTOCOL_DZKP_H_
