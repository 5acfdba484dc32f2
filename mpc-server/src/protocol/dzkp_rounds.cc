// The multiplication check's later rounds (dzkp.h): the halvings
// (HalveH, HalveFold, HalveFoldH) and the steps by kStepWords (StepH,
// StepFold) down to the last compression (TailH, TailFold), in GF(2^128)
// and GF(2^64), each with its VPCLMULQDQ path.
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

namespace kmpc::protocol::dzkp {

namespace {

using namespace simd;  // NOLINT: the 512-bit primitives of dzkp_simd.h

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
