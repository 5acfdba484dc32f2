// The multiplication check's first level (protocol/dzkp_first_level.cc)
// against plain sums over every gate: the lift and the first compression
// on both paths and every group size, an error in one product changing
// the claim, the wipe of the words it read, and three parties' weak shares
// adding up to the clear value.
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

TEST_P(DzkpPaths, FirstCompressionMatchesThePlainSums) {
  for (size_t n : {1, 16, 37, 70, 130}) {
    const int G = Groups(), P = 2 * G - 1;
    ClearLog log(n, G);
    F64 hv[kMaxHPoints], claim[2];
    FirstLevelH(log.Shares(), *log.w, hv, claim);
    // The claim is sum w z; comp 1 of (v, 0, 0) is 0.
    EXPECT_TRUE(Eq(claim[0], log.Weighted(log.z))) << n;
    EXPECT_TRUE(Eq(claim[1], F64{0})) << n;
    // h at e_1 .. e_{P-1}, gate by gate (a few points: the sums are slow).
    for (int p : {1, 7, G - 1, G, P - 1}) {
      ASSERT_TRUE(Eq(hv[p - 1], log.H(F64{static_cast<uint64_t>(p)}))) << n << " p=" << p;
    }
    // sum_{j < G} h(e_j) = sum w x y = the claim.
    F64 sum = log.H(F64{static_cast<uint64_t>(0)});
    for (int p = 1; p < G; ++p) sum = Add(sum, hv[p - 1]);
    EXPECT_TRUE(Eq(sum, claim[0])) << n;
    // After the challenge: f(r), g(r) as the plain sums, and h(r) from the
    // P values = sum f(r) g(r) (the new claim holds).
    const F64 r = RandomF64();
    const size_t m = 64 * log.w->nu.size();
    std::vector<F64> f0(m), f1(m), g0(m), g1(m);
    FirstLevelFold(log.Shares(), *log.w, r, f0.data(), f1.data(), g0.data(), g1.data());
    F64 ip = F64{0};
    for (size_t k = 0; k < log.w->nu.size(); ++k) {
      for (int l = 0; l < 64; ++l) {
        ASSERT_TRUE(Eq(f0[64 * k + l], log.F(k, l, r))) << n << " " << k << " " << l;
        ASSERT_TRUE(Eq(g0[64 * k + l], log.G(k, l, r)));
        ASSERT_TRUE(Eq(f1[64 * k + l], F64{0}));
        ASSERT_TRUE(Eq(g1[64 * k + l], F64{0}));
        ip = Add(ip, Mul(f0[64 * k + l], g0[64 * k + l]));
      }
    }
    F64 v0[kMaxHPoints], v1[kMaxHPoints] = {};
    v0[0] = claim[0];
    for (int p = 1; p < P; ++p) {
      v0[p] = hv[p - 1];
      if (p < G) v0[0] = Add(v0[0], hv[p - 1]);
    }
    F64 hr[2];
    Interpolate(P, v0, v1, r, hr);
    EXPECT_TRUE(Eq(hr[0], ip)) << n;
  }
}

// One additive error on any word, lane and gate makes the claim differ
// from sum_j h(e_j) (so the protocol's h(e_0) is off, and h with it).
TEST_P(DzkpPaths, AnErrorInAProductChangesTheClaim) {
  ClearLog log(70, Groups());
  F64 hv[kMaxHPoints], claim[2];
  FirstLevelH(log.Shares(), *log.w, hv, claim);
  const F64 honest = claim[0];
  for (size_t word : {0, 15, 16, 31, 32, 69}) {
    for (int lane : {0, 13, 63}) {
      log.z[word] ^= 1ull << lane;
      FirstLevelH(log.Shares(), *log.w, hv, claim);
      EXPECT_FALSE(Eq(claim[0], honest)) << word << " " << lane;
      log.z[word] ^= 1ull << lane;
    }
  }
}

// AndShares::wipe: the first compression's results are those of the same
// words read without it, and every word [0, n) of the six buffers is zero
// afterwards (words past n untouched), at sizes with partial groups and
// tails of a step of groups (1 word, G - 1, G + 1, odd counts).
TEST_P(DzkpPaths, FirstCompressionWipesTheWordsItReadLast) {
  const int G = Groups();
  for (size_t n : {size_t{1}, size_t(G - 1), size_t(G + 1), size_t(3 * G + 5), size_t{4 * 64 + 7},
                   size_t{9 * 64 + 63}}) {
    ClearLog clear(n, G);
    std::array<std::vector<uint64_t>, 6> v;
    for (int c = 0; c < 6; ++c) {
      v[c].resize(n + 3, 0x5a5a5a5a5a5a5a5aull);  // 3 sentinels past n
      for (size_t i = 0; i < n; ++i) v[c][i] = Rng()();
    }
    for (size_t i = 0; i < n; ++i) v[4][i] = v[0][i] & v[2][i];
    const auto copy = v;
    const AndShares ref{{copy[0].data(), copy[1].data()}, {copy[2].data(), copy[3].data()},
                        {copy[4].data(), copy[5].data()}, n};
    AndShares s{{v[0].data(), v[1].data()}, {v[2].data(), v[3].data()},
                {v[4].data(), v[5].data()}, n, /*wipe=*/true};
    F64 h_ref[kMaxHPoints], h[kMaxHPoints], c_ref[2], c[2];
    FirstLevelH(ref, *clear.w, h_ref, c_ref);
    FirstLevelH(s, *clear.w, h, c);
    for (int p = 0; p < 2 * G - 2; ++p) EXPECT_TRUE(Eq(h[p], h_ref[p])) << n << " " << p;
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(Eq(c[k], c_ref[k])) << n;
    const F64 r = RandomF64();
    const size_t m = 64 * clear.w->nu.size();
    std::array<std::vector<F64>, 4> fr, fw;
    for (int k = 0; k < 4; ++k) fr[k].resize(m), fw[k].resize(m);
    FirstLevelFold(ref, *clear.w, r, fr[0].data(), fr[1].data(), fr[2].data(), fr[3].data());
    FirstLevelFold(s, *clear.w, r, fw[0].data(), fw[1].data(), fw[2].data(), fw[3].data());
    for (int k = 0; k < 4; ++k)
      for (size_t q = 0; q < m; ++q) ASSERT_TRUE(Eq(fw[k][q], fr[k][q])) << n << " " << k << " " << q;
    for (int k = 0; k < 6; ++k) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[k][i], 0u) << n << " comp " << k << " word " << i;
      for (size_t i = n; i < n + 3; ++i) ASSERT_EQ(v[k][i], 0x5a5a5a5a5a5a5a5aull) << n;
    }
  }
}

// Three parties' shares: the weak shares of h add up to the clear h, and
// the claims' and folds' comps are consistent replicated shares.
TEST_P(DzkpPaths, WeakSharesOfThreePartiesAddUp) {
  const size_t n = 75;
  const int P = 2 * Groups() - 1;
  ClearLog clear(n, Groups());
  F64 hv[kMaxHPoints], cl[2];
  FirstLevelH(clear.Shares(), *clear.w, hv, cl);
  // Additive shares s_0 ^ s_1 ^ s_2 of x, y, z; party i holds (s_i, s_{i+1}).
  std::array<std::vector<uint64_t>, 3> xs, ys, zs;
  for (int i = 0; i < 3; ++i) xs[i].resize(n), ys[i].resize(n), zs[i].resize(n);
  for (size_t k = 0; k < n; ++k) {
    xs[0][k] = Rng()(), xs[1][k] = Rng()(), xs[2][k] = clear.x[k] ^ xs[0][k] ^ xs[1][k];
    ys[0][k] = Rng()(), ys[1][k] = Rng()(), ys[2][k] = clear.y[k] ^ ys[0][k] ^ ys[1][k];
    zs[0][k] = Rng()(), zs[1][k] = Rng()(), zs[2][k] = clear.z[k] ^ zs[0][k] ^ zs[1][k];
  }
  F64 sum[kMaxHPoints - 1] = {}, claims[3][2];
  const F64 r = RandomF64();
  const size_t m = 64 * clear.w->nu.size();
  std::vector<F64> ref_f(m), ref_g(m), zf(m), zg(m);
  FirstLevelFold(clear.Shares(), *clear.w, r, ref_f.data(), zf.data(), ref_g.data(), zg.data());
  std::array<std::array<std::vector<F64>, 4>, 3> folds;
  for (int i = 0; i < 3; ++i) {
    const int i1 = (i + 1) % 3;
    AndShares s{{xs[i].data(), xs[i1].data()}, {ys[i].data(), ys[i1].data()},
                {zs[i].data(), zs[i1].data()}, n};
    F64 h[kMaxHPoints];
    FirstLevelH(s, *clear.w, h, claims[i]);
    for (int p = 0; p < P - 1; ++p) sum[p] = Add(sum[p], h[p]);
    for (auto& v : folds[i]) v.resize(m);
    FirstLevelFold(s, *clear.w, r, folds[i][0].data(), folds[i][1].data(),
                   folds[i][2].data(), folds[i][3].data());
  }
  for (int p = 0; p < P - 1; ++p) EXPECT_TRUE(Eq(sum[p], hv[p])) << p;
  for (int i = 0; i < 3; ++i) {
    // comp 1 of party i = comp 0 of party i+1.
    EXPECT_TRUE(Eq(claims[i][1], claims[(i + 1) % 3][0]));
  }
  EXPECT_TRUE(Eq(Add(Add(claims[0][0], claims[1][0]), claims[2][0]), cl[0]));
  for (size_t q = 0; q < m; ++q) {
    F64 f = F64{0}, g = F64{0};
    for (int i = 0; i < 3; ++i) {
      f = Add(f, folds[i][0][q]);
      g = Add(g, folds[i][2][q]);
      ASSERT_TRUE(Eq(folds[i][1][q], folds[(i + 1) % 3][0][q]));
    }
    ASSERT_TRUE(Eq(f, ref_f[q]));
    ASSERT_TRUE(Eq(g, ref_g[q]));
  }
}

}  // namespace
}  // namespace kmpc::protocol::dzkp
