// The multiplication check's later rounds (protocol/dzkp_rounds.cc)
// against plain sums: the halvings (and the fused fold-then-halve), the
// steps by kStepWords with three parties' weak shares adding up, and the
// last compression, in both fields and on both paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dzkp_testing.h"
#include "protocol/dzkp.h"
#include "protocol/gf128.h"

namespace kmpc::protocol::dzkp {
namespace {

KMPC_DZKP_PATHS()


// A halving on clear vectors: h(1), h(x) as plain sums; the claim folded
// through h(r) equals the folded inner product; a wrong claim gives a
// wrong h(r) (for the test's random r).
template <class E>
void ExpectHalvingMatchesThePlainSums() {
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 64, 101, 1000}) {
    std::vector<E> f(n), g(n), zf(n), zg(n);
    for (auto& v : f) v = Random<E>();
    for (auto& v : g) v = Random<E>();
    E claim = El<E>(0);
    for (size_t k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[2];
    HalveH<E>(fv, gv, n, h);
    auto at = [&](size_t k, const std::vector<E>& v) { return k < n ? v[k] : El<E>(0); };
    E h1 = El<E>(0), h2 = El<E>(0);
    const E x = El<E>(2);
    for (size_t k = 0; 2 * k < n; ++k) {
      const E a = at(2 * k, f), b = at(2 * k + 1, f), c = at(2 * k, g), d = at(2 * k + 1, g);
      h1 = Add(h1, Mul(b, d));
      h2 = Add(h2, Mul(Add(a, Mul(x, Add(a, b))), Add(c, Mul(x, Add(c, d)))));
    }
    EXPECT_TRUE(Eq(h[0], h1)) << n;
    EXPECT_TRUE(Eq(h[1], h2)) << n;
    const E r = Random<E>();
    const E v0[3] = {Add(claim, h[0]), h[0], h[1]}, v1[3] = {El<E>(0), El<E>(0), El<E>(0)};
    E hr[2];
    Interpolate(3, v0, v1, r, hr);
    const E wrong = Add(claim, El<E>(1));
    const E w0[3] = {Add(wrong, h[0]), h[0], h[1]};
    E hw[2];
    Interpolate(3, w0, v1, r, hw);
    HalveFold(fv, gv, n, r);
    E ip = El<E>(0);
    for (size_t k = 0; k < (n + 1) / 2; ++k) ip = Add(ip, Mul(f[k], g[k]));
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
    EXPECT_FALSE(Eq(hw[0], ip)) << n;
  }
}

// The fused fold and next halving: the same vectors and h(1), h(x) as
// HalveFold then HalveH, for lengths around the 512-bit path's blocks.
template <class E>
void ExpectFusedHalvingMatchesFoldThenHalve() {
  for (size_t n : {2, 3, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 1001}) {
    std::vector<E> v[2][4];
    for (auto& side : v)
      for (auto& c : side) c.resize(n);
    for (size_t i = 0; i < n; ++i)
      for (int c = 0; c < 4; ++c) v[0][c][i] = v[1][c][i] = Random<E>();
    const E r = Random<E>();
    E* f0[2] = {v[0][0].data(), v[0][1].data()};
    E* g0[2] = {v[0][2].data(), v[0][3].data()};
    E* f1[2] = {v[1][0].data(), v[1][1].data()};
    E* g1[2] = {v[1][2].data(), v[1][3].data()};
    HalveFold(f0, g0, n, r);
    E want[2], got[2];
    HalveH<E>(f0, g0, (n + 1) / 2, want);
    HalveFoldH(f1, g1, n, r, got);
    EXPECT_TRUE(Eq(got[0], want[0])) << n;
    EXPECT_TRUE(Eq(got[1], want[1])) << n;
    for (size_t i = 0; i < (n + 1) / 2; ++i)
      for (int c = 0; c < 4; ++c) ASSERT_TRUE(Eq(v[0][c][i], v[1][c][i])) << n << " " << i;
  }
}

// h(r) from a compression's P - 1 values h(e_1) .. h(e_{P-1}) and its
// claim (h(e_0) = claim - the sum of h(e_1) .. h(e_{k-1}), k the group
// size), into hr; the same with the claim off by one into hw.
template <class E, int P>
void InterpolateClaim(const E& claim, const E* h, int k, const E& r, E* hr, E* hw) {
  E v0[P], v1[P] = {}, w0[P];
  v0[0] = claim;
  for (int p = 1; p < P; ++p) {
    v0[p] = h[p - 1];
    if (p < k) v0[0] = Add(v0[0], h[p - 1]);
  }
  std::copy(v0, v0 + P, w0);
  w0[0] = Add(w0[0], El<E>(1));
  Interpolate(P, v0, v1, r, hr);
  Interpolate(P, w0, v1, r, hw);
}

// The last compression on clear vectors (zero-padded to kTailWords): the
// values at e_1 .. e_{T-1} and the claim give h(e_0); h(r) interpolated
// from the 2T - 1 values equals f(r) g(r) after the fold; a wrong claim
// gives a wrong h(r).
template <class E>
void ExpectTailCompressionMatchesThePlainSums() {
  constexpr int T = kTailWords, P = kTailHPoints;
  for (int n : {1, 2, 17, T}) {
    std::vector<E> f(T, El<E>(0)), g(T, El<E>(0)), zf(T, El<E>(0)), zg(T, El<E>(0));
    for (int k = 0; k < n; ++k) f[k] = Random<E>(), g[k] = Random<E>();
    E claim = El<E>(0);
    for (int k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[P - 1];
    TailH<E>(fv, gv, h);
    // h(e_p) = f(e_p) g(e_p), f(e_p) the interpolation of f_0 .. f_{T-1}.
    for (int p : {1, T - 1, T, P - 1}) {
      E lag[T];
      LagrangeAt(T, El<E>(p), lag);
      E fp = El<E>(0), gp = El<E>(0);
      for (int j = 0; j < T; ++j) fp = Add(fp, Mul(lag[j], f[j])), gp = Add(gp, Mul(lag[j], g[j]));
      EXPECT_TRUE(Eq(h[p - 1], Mul(fp, gp))) << n << " p=" << p;
    }
    const E r = Random<E>();
    E hr[2], hw[2];
    InterpolateClaim<E, P>(claim, h, T, r, hr, hw);
    TailFold(fv, gv, r);
    EXPECT_TRUE(Eq(zf[0], El<E>(0)));
    EXPECT_TRUE(Eq(hr[0], Mul(f[0], g[0]))) << n;
    EXPECT_FALSE(Eq(hw[0], Mul(f[0], g[0]))) << n;
  }
}

// A compression by kStepWords on clear vectors of n elements (n not a
// multiple of K: the last group is zero-padded): the values at e_1 ..
// e_{2K-2} and the claim give h(e_0); h(r) interpolated from the 2K - 1
// values equals the inner product of the folded vectors; a wrong claim
// gives a wrong h(r).
template <class E>
void ExpectStepMatchesThePlainSums() {
  constexpr int K = kStepWords, P = 2 * K - 1;
  for (size_t n : {size_t{1}, size_t{5}, size_t{K}, size_t{4 * K + 3}, size_t{kStepFrom}}) {
    std::vector<E> f(n), g(n), zf(n, El<E>(0)), zg(n, El<E>(0));
    for (size_t k = 0; k < n; ++k) f[k] = Random<E>(), g[k] = Random<E>();
    E claim = El<E>(0);
    for (size_t k = 0; k < n; ++k) claim = Add(claim, Mul(f[k], g[k]));
    E* fv[2] = {f.data(), zf.data()};
    E* gv[2] = {g.data(), zg.data()};
    E h[P - 1];
    StepH<E>(fv, gv, n, h);
    // h(e_p) = sum over groups of f_k(e_p) g_k(e_p).
    for (int p : {1, K - 1, K, P - 1}) {
      E lag[K];
      LagrangeAt(K, El<E>(p), lag);
      E want = El<E>(0);
      for (size_t k = 0; K * k < n; ++k) {
        E fp = El<E>(0), gp = El<E>(0);
        for (size_t j = 0; j < K && K * k + j < n; ++j)
          fp = Add(fp, Mul(lag[j], f[K * k + j])), gp = Add(gp, Mul(lag[j], g[K * k + j]));
        want = Add(want, Mul(fp, gp));
      }
      EXPECT_TRUE(Eq(h[p - 1], want)) << n << " p=" << p;
    }
    const E r = Random<E>();
    E hr[2], hw[2];
    InterpolateClaim<E, P>(claim, h, K, r, hr, hw);
    StepFold(fv, gv, n, r);
    const size_t m = (n + K - 1) / K;
    E ip = El<E>(0);
    for (size_t k = 0; k < m; ++k) {
      ip = Add(ip, Mul(f[k], g[k]));
      EXPECT_TRUE(Eq(zf[k], El<E>(0)));
    }
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
    EXPECT_FALSE(Eq(hw[0], ip)) << n;
  }
}

// Three parties' replicated shares of f, g (party i holds (s_i, s_{i+1})):
// their weak shares of a step's h values add up to the plain sums of
// f_k(e_p) g_k(e_p), and their folds are consistent replicated shares of
// the plain fold, at sizes with whole blocks of eight groups, partial
// ones, and both (the 512-bit path's blocks and the scalar rest).
TEST_P(DzkpPaths, StepWeakSharesOfThreePartiesAddUp) {
  constexpr int K = kStepWords, P = 2 * K - 1;
  for (size_t n : {size_t{3}, size_t{31}, size_t{32}, size_t{33}, size_t{101}, size_t{257},
                   size_t{1000}}) {
    std::vector<F64> f(n), g(n);
    std::array<std::vector<F64>, 3> fs, gs;
    for (int i = 0; i < 3; ++i) fs[i].resize(n), gs[i].resize(n);
    for (size_t k = 0; k < n; ++k) {
      f[k] = RandomF64(), g[k] = RandomF64();
      fs[0][k] = RandomF64(), fs[1][k] = RandomF64();
      fs[2][k] = Add(Add(f[k], fs[0][k]), fs[1][k]);
      gs[0][k] = RandomF64(), gs[1][k] = RandomF64();
      gs[2][k] = Add(Add(g[k], gs[0][k]), gs[1][k]);
    }
    F64 sum[P - 1] = {};
    const F64 r = RandomF64();
    std::array<std::array<std::vector<F64>, 4>, 3> folds;
    for (int i = 0; i < 3; ++i) {
      const int i1 = (i + 1) % 3;
      folds[i] = {fs[i], fs[i1], gs[i], gs[i1]};
      F64* fv[2] = {folds[i][0].data(), folds[i][1].data()};
      F64* gv[2] = {folds[i][2].data(), folds[i][3].data()};
      F64 h[P - 1];
      StepH<F64>(fv, gv, n, h);
      for (int p = 0; p < P - 1; ++p) sum[p] = Add(sum[p], h[p]);
      StepFold<F64>(fv, gv, n, r);
    }
    F64 lagr[K];
    LagrangeAt(K, r, lagr);
    for (int p = 1; p < P; ++p) {
      F64 lag[K];
      LagrangeAt(K, F64{static_cast<uint64_t>(p)}, lag);
      F64 want{0};
      for (size_t k = 0; K * k < n; ++k) {
        F64 fp{0}, gp{0};
        for (size_t j = 0; j < K && K * k + j < n; ++j)
          fp = Add(fp, Mul(lag[j], f[K * k + j])), gp = Add(gp, Mul(lag[j], g[K * k + j]));
        want = Add(want, Mul(fp, gp));
      }
      EXPECT_TRUE(Eq(sum[p - 1], want)) << n << " p=" << p;
    }
    for (size_t k = 0; K * k < n; ++k) {
      F64 fr{0}, gr{0};
      for (size_t j = 0; j < K && K * k + j < n; ++j)
        fr = Add(fr, Mul(lagr[j], f[K * k + j])), gr = Add(gr, Mul(lagr[j], g[K * k + j]));
      F64 fsum{0}, gsum{0};
      for (int i = 0; i < 3; ++i) {
        fsum = Add(fsum, folds[i][0][k]);
        gsum = Add(gsum, folds[i][2][k]);
        ASSERT_TRUE(Eq(folds[i][1][k], folds[(i + 1) % 3][0][k])) << n << " k=" << k;
        ASSERT_TRUE(Eq(folds[i][3][k], folds[(i + 1) % 3][2][k])) << n << " k=" << k;
      }
      ASSERT_TRUE(Eq(fsum, fr)) << n << " k=" << k;
      ASSERT_TRUE(Eq(gsum, gr)) << n << " k=" << k;
    }
  }
}

TEST_P(DzkpPaths, StepByKMatchesThePlainSums) {
  ExpectStepMatchesThePlainSums<Fe>();
  ExpectStepMatchesThePlainSums<F64>();
}

TEST_P(DzkpPaths, HalvingMatchesThePlainSums) {
  ExpectHalvingMatchesThePlainSums<Fe>();
  ExpectHalvingMatchesThePlainSums<F64>();
}

TEST_P(DzkpPaths, FusedHalvingMatchesFoldThenHalve) {
  ExpectFusedHalvingMatchesFoldThenHalve<Fe>();
  ExpectFusedHalvingMatchesFoldThenHalve<F64>();
}

TEST_P(DzkpPaths, TailCompressionMatchesThePlainSums) {
  ExpectTailCompressionMatchesThePlainSums<Fe>();
  ExpectTailCompressionMatchesThePlainSums<F64>();
}

}  // namespace
}  // namespace kmpc::protocol::dzkp
