// The end-to-end attack that confirmed openings prevent (verify.cc, Coin
// and ConfirmedRing): one deviating party recovers the GHASH key H =
// AES_K(0) of a key whose powers the batch extends, from two batches that
// then fail, if the check opens its last claim before the parties have
// confirmed their coins.
//
// Setting (the Verify level: three parties in one process over an
// InMemoryRing with fixed PRSS keys; no engine). A dealer shares H^1 ..
// H^64 (the stored powers of a key, engine.h kStoredHPowers) and the
// parties extend them to H^m as the engine's ExtendPowers does (tags.h:
// rounds of H^(a+1 .. a+c) = H^a * H^(1 .. c) by Rep3::GfMul, logged),
// then run Verifier::Verify on that log alone: proof B holds only the
// powers-of-H products (no DECRYPT/VERIFY job, so no tag check and no
// uniformly random factor), proof A is off (no AND words).
//
// The cheater, party i, knows only what a real party i knows: its two
// components (i and i+1) of every shared value, its PRSS keys k_i and
// k_{i+1} (so the counters of its own draws), the messages it sent and
// received, and the shift d it chose. It sends its predecessor i-1 its
// share of coin c2 XOR d (CheatingChannel::Arm): party i-1 opens c2 ^ d
// and draws proof B's weights w'_k from it (FoldGfProducts), while parties
// i and i+1 use the true w_k. Write A for component i-1 (the one party i
// lacks) and B for component i. Everything else runs honestly.
//
// The algebra (dzkp.h, verify.cc). B's vectors are f_k = w_k x_k, g_k =
// y_k (k < n, x_k = H^a, y_k = H^j) and the mask f_n = w_m x'', g_n =
// y''. Party i-1's weak shares of every later h (HalveH, TailH) are
// bilinear in its components (A, B) of f and g, and g does not depend on
// the weights, so its reshared h values (to party i+1) differ from the
// honest ones by the weak shares of (delta f, g), delta f_k = (w'_k - w_k)
// x_k; the zero-shares are the same. Party i+1's component A of the claim
// goes through HalvingClaim and CompressClaim, linear in that component's
// claim and h values, and is opened to party i (OpenLast) next to its
// components A of the last f and g, which it computed from its own
// honest vectors. So party i learns F, G (the true last f, g) and
// C' = F G + Delta, where Delta is that linear map applied to the weak
// shares of (delta f, g): a known combination of products of components
// A and B of x_k, y_k, x'', y''. Each unknown is a polynomial in H with
// coefficients party i knows: x_{k,A} = H^a - x_{k,B} - x_{k,C} (and
// y_{k,A} likewise), and, since F = F_0(H) + kappa w_m x'' with F_0 the
// fold of the products' part and kappa the mask's fold coefficient
// (nonzero: verify.h step 5), x'' = (F - F_0(H)) / (kappa w_m) of degree
// max a, and y'' = (G - G_0(H)) / kappa of degree max j. Hence
//   Q(eta) = Delta(eta) - (C' - F G)
// is a polynomial of degree <= max a + max j (128 for m = 128: one
// doubling; 200 for m = 200, which adds a halving) that vanishes at
// eta = H. The masks hide F and G from an honest opening, but here the
// same opening that carries Delta pins them as functions of H, so they
// add no unknown. Party i evaluates Q at deg + 1 points by replaying the
// folds on its guessed components (the same dzkp functions), interpolates
// it, and takes the gcd of two batches' Q (fresh masks and coins, the
// same stored shares of H's powers): x - H. Any coin before the tail's
// would do; c2 is the one every check has.
//
// This file is built twice (core.cmake):
//  - kmpc_core_hrecovery_unconfirmed_test, against a copy of verify.cc
//    compiled with KMPC_TEST_UNCONFIRMED_OPENINGS (acknowledgements hashed,
//    not compared): the gcd is x - H and the recovered H equals the dealt
//    one, for every choice of cheater, from two batches in which both
//    honest parties report an integrity failure (after party i+1's last
//    opening has reached party i);
//  - kmpc_core_hrecovery_test, against kmpc_core as built: party i+1
//    finds party i-1's acknowledgement differing from its own hash at the
//    coin after c2, goes silent (ConfirmedRing), so its last opening to
//    party i is zeros; both honest parties report an integrity failure,
//    and the same recovery, run on what party i received, yields no
//    common root or one that is not H (and Q(H) != 0 for each batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../cheat.h"
#include "absl/strings/str_cat.h"
#include "net/memory_ring.h"
#include "protocol/dzkp.h"
#include "protocol/gf128.h"
#include "protocol/prf.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "tap_channel.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::CheatingChannel;
using ::kmpc::testing::RunParties;
using dzkp::Add;
using dzkp::Fe;
using dzkp::Mul;

#ifdef KMPC_TEST_UNCONFIRMED_OPENINGS
constexpr bool kConfirmed = false;
#else
constexpr bool kConfirmed = true;
#endif

constexpr int kStored = 64;  // engine.h kStoredHPowers
constexpr int T = dzkp::kTailWords;
constexpr int P = dzkp::kTailHPoints;
using Msgs = ::kmpc::testing::TapChannel::Msgs;
using Poly = std::vector<Fe>;  // coefficients, lowest first

bool IsZero(Fe a) { return dzkp::Equal(a, dzkp::Zero()); }
Fe FeAt(const std::vector<uint8_t>& m, size_t k) { return dzkp::Load(m.data() + 16 * k); }

using Tap = ::kmpc::testing::TapChannel;

// ExtendPowers' plan (tags.cc) for a job of m blocks: rounds of
// H^(a+1 .. a+c) = H^a * H^(1 .. c), c = min(a, m - a).
struct Round {
  int a, c;
};
std::vector<Round> Plan(int m) {
  std::vector<Round> plan;
  for (int a = kStored; a < m; a += std::min(a, m - a)) plan.push_back({a, std::min(a, m - a)});
  return plan;
}

// What party i holds after a batch: its components (i, i+1) of the logged
// products (x0, x1, y0, y1, z0, z1 in GCM bytes, as logged), its PRSS
// keys and counter at the start of Verify, and its messages from Verify on.
struct CheaterView {
  int party = 0;
  uint8_t k_self[16], k_next[16];
  uint64_t counter0 = 0;
  std::array<std::vector<uint8_t>, 6> gf;
  std::vector<int> x_exp, y_exp;  // public: x_k = H^x_exp[k], y_k = H^y_exp[k]
  Msgs sent, received;
  uint8_t d[16] = {};  // the shift of its share of coin c2
};

struct Batch {
  std::array<absl::Status, 3> st;
  CheaterView view;
  std::vector<uint8_t> succ_last_opening;  // party i+1's last message but one
  size_t succ_messages = 0;
};

// The dealt key: H (GCM bytes) and a replicated sharing of H^1 .. H^64.
struct Dealt {
  Block h;
  std::array<std::vector<uint8_t>, 3> s;  // s[j]: component j of H^1 .. H^64
};

Dealt Deal() {
  static const uint8_t kDealer[16] = {0xd7, 0x11, 0x5a, 0x3c, 0x42};
  const Prf prf(kDealer);
  Dealt d;
  prf.Fill(0, 1, d.h.data());
  std::vector<uint8_t> pw(16 * kStored);
  Block p = d.h;
  for (int e = 0; e < kStored; ++e) {
    std::memcpy(&pw[16 * e], p.data(), 16);
    p = GfMul(p, d.h);
  }
  for (auto& c : d.s) c.resize(16 * kStored);
  prf.Fill(1, kStored, d.s[0].data());
  prf.Fill(1 + kStored, kStored, d.s[1].data());
  for (size_t b = 0; b < pw.size(); ++b) d.s[2][b] = pw[b] ^ d.s[0][b] ^ d.s[1][b];
  return d;
}

// Index of the coin c2's share among Verify's messages (ack, c1, the
// masks' reshare, ack, c2), the same on every party.
constexpr size_t kC2 = 4;

// One batch: the powers of the dealt H to H^m, then Verify; party
// `cheater` shifts its share of coin c2 by d (byte 0 ^= 1).
Batch RunBatch(const Dealt& dealt, int m, int cheater, uint64_t run) {
  const std::vector<Round> plan = Plan(m);
  net::InMemoryRing ring;
  const int succ = (cheater + 1) % 3;
  Tap tap(ring.party(cheater)), succ_tap(ring.party(succ));
  CheatingChannel cheat(tap);
  cheat.Arm(plan.size() + kC2, 0, 0x01);
  std::array<net::RingChannel*, 3> ch{&ring.party(0), &ring.party(1), &ring.party(2)};
  ch[cheater] = &cheat;
  ch[succ] = &succ_tap;
  uint8_t keys[3][16];
  for (int k = 0; k < 3; ++k) std::memset(keys[k], 0x51 + k, 16);
  Batch out;
  CheaterView& v = out.view;
  v.party = cheater;
  std::memcpy(v.k_self, keys[cheater], 16);
  std::memcpy(v.k_next, keys[succ], 16);
  v.d[0] = 0x01;
  for (const Round& r : plan)
    for (int j = 1; j <= r.c; ++j) v.x_exp.push_back(r.a), v.y_exp.push_back(j);
  size_t verify_from = 0;
  out.st = RunParties([&](int i) -> absl::Status {
    Prss prss(i, keys[i], keys[(i + 1) % 3]);
    prss.Skip(run << 20);  // a later batch: fresh PRSS values
    Rep3 r(*ch[i], prss);
    MulLog log;
    r.set_log(&log);
    std::array<std::vector<uint8_t>, 2> pw{dealt.s[i], dealt.s[(i + 1) % 3]};
    absl::Status st;
    for (const Round& rd : plan) {  // ExtendPowers (tags.cc), one job
      const size_t n = 16 * rd.c;
      std::array<std::vector<uint8_t>, 6> t;
      for (auto& u : t) u.resize(n);
      for (int k = 0; k < 2; ++k)
        for (int j = 0; j < rd.c; ++j) {
          std::memcpy(&t[k][16 * j], &pw[k][16 * (rd.a - 1)], 16);
          std::memcpy(&t[2 + k][16 * j], &pw[k][16 * j], 16);
        }
      st = r.GfMul(t[0], t[1], t[2], t[3], absl::MakeSpan(t[4]), absl::MakeSpan(t[5]));
      if (!st.ok()) return st;
      for (int k = 0; k < 2; ++k) pw[k].insert(pw[k].end(), t[4 + k].begin(), t[4 + k].end());
      if (i == cheater)
        for (int k = 0; k < 6; ++k) v.gf[k].insert(v.gf[k].end(), t[k].begin(), t[k].end());
    }
    if (i == cheater) {
      v.counter0 = prss.counter();
      verify_from = plan.size();
    }
    st = Verifier::Verify(r, log);
    r.set_log(nullptr);
    return st;
  });
  v.sent.assign(tap.sent().begin() + verify_from, tap.sent().end());
  v.received.assign(tap.received().begin() + verify_from, tap.received().end());
  out.succ_messages = succ_tap.sent().size();
  if (out.succ_messages >= 2) out.succ_last_opening = succ_tap.sent()[out.succ_messages - 2];
  return out;
}

// ---- The cheater's computation (party i's knowledge only). ----

// HalvingClaim and CompressClaim of verify.cc, on one or two components.
void HalvingClaim(Fe c[2], const Fe h0[2], const Fe h1[2], Fe r) {
  const Fe v0[3] = {Add(c[0], h0[0]), h0[0], h0[1]};
  const Fe v1[3] = {Add(c[1], h1[0]), h1[0], h1[1]};
  dzkp::Interpolate(3, v0, v1, r, c);
}
void CompressClaim(Fe c[2], const Fe* h0, const Fe* h1, Fe r) {
  std::vector<Fe> v0(P), v1(P);
  v0[0] = c[0], v1[0] = c[1];
  for (int p = 1; p < P; ++p) {
    v0[p] = h0[p - 1], v1[p] = h1[p - 1];
    if (p < T) v0[0] = Add(v0[0], v0[p]), v1[0] = Add(v1[0], v1[p]);
  }
  dzkp::Interpolate(P, v0.data(), v1.data(), r, c);
}

// Two components of B's vectors, each padded to at least T elements.
struct Vecs {
  std::array<std::vector<Fe>, 2> f, g;
  explicit Vecs(size_t n) {
    for (auto* v : {&f[0], &f[1], &g[0], &g[1]}) v->assign(std::max<size_t>(n, T), dzkp::Zero());
  }
  void HalveFold(size_t n, Fe r) {
    Fe* const fp[2] = {f[0].data(), f[1].data()};
    Fe* const gp[2] = {g[0].data(), g[1].data()};
    dzkp::HalveFold(fp, gp, n, r);
  }
  void HalveH(size_t n, Fe out[2]) const {
    const Fe* const fp[2] = {f[0].data(), f[1].data()};
    const Fe* const gp[2] = {g[0].data(), g[1].data()};
    dzkp::HalveH(fp, gp, n, out);
  }
  // Zero-pads from n, then TailH into out (P - 1 values) or TailFold.
  void TailH(size_t n, Fe* out) {
    for (auto* v : {&f[0], &f[1], &g[0], &g[1]}) std::fill(v->begin() + n, v->end(), dzkp::Zero());
    const Fe* const fp[2] = {f[0].data(), f[1].data()};
    const Fe* const gp[2] = {g[0].data(), g[1].data()};
    dzkp::TailH(fp, gp, out);
  }
  void TailFold(size_t n, Fe r) {
    for (auto* v : {&f[0], &f[1], &g[0], &g[1]}) std::fill(v->begin() + n, v->end(), dzkp::Zero());
    Fe* const fp[2] = {f[0].data(), f[1].data()};
    Fe* const gp[2] = {g[0].data(), g[1].data()};
    dzkp::TailFold(fp, gp, r);
  }
};

// What party i derives from its view: the coins, both weight vectors,
// its own components, and the opened F, G and C'.
struct Derived {
  size_t ng = 0;
  std::vector<Fe> r_halve;  // B's halving challenges
  Fe r_tail;
  std::vector<Fe> w, w_shift;  // from c2 and from c2 ^ d (n + 1 each)
  Fe mx[2], my[2];             // components i, i+1 of B's mask
  std::array<std::vector<Fe>, 2> x, y;  // components i, i+1 of x_k, y_k
  Fe F, G, C;                  // opened
  bool own_opening_matches = false;
};

std::vector<Fe> Weights(const uint8_t coin[16], size_t n) {
  std::vector<uint8_t> b(16 * n);
  Prf(coin).Fill(1, n, b.data());
  std::vector<Fe> w(n);
  for (size_t k = 0; k < n; ++k) w[k] = FeAt(b, k);
  return w;
}

// Verify's messages from the cheater's first on: ack, c1, the masks'
// reshare, ack, c2, then per halving a reshare, an ack and a coin, then
// the tail's reshare, ack and coin, the opening and the compare.
size_t Halvings(size_t ng) {
  size_t halvings = 0;
  for (size_t n = ng + 1; n > static_cast<size_t>(T); n = (n + 1) / 2) ++halvings;
  return halvings;
}
// The reshare of halving s (of the tail for s = the number of halvings);
// its coin follows at + 2, and after the tail the opening at + 3.
size_t ReshareAt(size_t s) { return 5 + 3 * s; }

// Party i's draws, replayed from its PRSS keys and counter in Verify's
// order (c1, the masks, the masks' zero-share, c2, per halving a
// zero-share and a coin, the tail's zero-share and coin), and the coins
// they open with the shares party i+1 sent.
void ReplayDraws(const CheaterView& v, size_t halvings, Derived& d) {
  Prss prss(v.party, v.k_self, v.k_next);
  prss.Skip(v.counter0);
  uint8_t c0[32], c1[32], zero[16 * P];
  auto coin = [&](size_t msg, uint8_t out[16]) {
    prss.RandomShares(c0, c1, 16);
    for (int b = 0; b < 16; ++b) out[b] = c0[b] ^ c1[b] ^ v.received[msg][b];
  };
  uint8_t c[16], c2[16];
  coin(1, c);
  prss.RandomShares(c0, c1, 32);
  d.mx[0] = dzkp::Load(c0), d.mx[1] = dzkp::Load(c1);
  d.my[0] = dzkp::Load(c0 + 16), d.my[1] = dzkp::Load(c1 + 16);
  prss.ZeroShare(zero, 16);
  coin(kC2, c2);
  d.w = Weights(c2, d.ng + 1);
  for (int b = 0; b < 16; ++b) c[b] = c2[b] ^ v.d[b];  // what party i-1 opened
  d.w_shift = Weights(c, d.ng + 1);
  for (size_t h = 0; h < halvings; ++h) {
    prss.ZeroShare(zero, 32);
    coin(ReshareAt(h) + 2, c);
    d.r_halve.push_back(dzkp::Load(c));
  }
  prss.ZeroShare(zero, 16 * (P - 1));
  coin(ReshareAt(halvings) + 2, c);
  d.r_tail = dzkp::Load(c);
}

// Party i's own Verify, replayed from its log, PRSS keys and messages:
// the coins, both weight vectors, its components, the opened F, G, C'.
std::optional<Derived> Derive(const CheaterView& v) {
  Derived d;
  d.ng = v.gf[0].size() / 16;
  const size_t halvings = Halvings(d.ng);
  const std::vector<size_t> sizes_head = {32, 16, 16, 32, 16};
  const size_t nmsg = ReshareAt(halvings) + 5;
  if (v.sent.size() != nmsg || v.received.size() != nmsg) return std::nullopt;
  for (size_t j = 0; j < sizes_head.size(); ++j)
    if (v.received[j].size() != sizes_head[j]) return std::nullopt;
  ReplayDraws(v, halvings, d);
  // Party i's components (i, i+1): FoldGfProducts, the halvings, the tail.
  const size_t n = d.ng;
  Vecs own(n + 1);
  Fe claim[2] = {dzkp::Zero(), dzkp::Zero()};
  for (int k = 0; k < 2; ++k) {
    d.x[k].resize(n), d.y[k].resize(n);
    for (size_t j = 0; j < n; ++j) {
      d.x[k][j] = dzkp::FromGcm(&v.gf[k][16 * j]);
      d.y[k][j] = dzkp::FromGcm(&v.gf[2 + k][16 * j]);
      own.f[k][j] = Mul(d.w[j], d.x[k][j]);
      own.g[k][j] = d.y[k][j];
      claim[k] = Add(claim[k], Mul(d.w[j], dzkp::FromGcm(&v.gf[4 + k][16 * j])));
    }
    own.f[k][n] = Mul(d.w[n], d.mx[k]);
    own.g[k][n] = d.my[k];
  }
  // The masks' product, reshared: h0 what party i sent, h1 what it got.
  claim[0] = Add(claim[0], Mul(d.w[n], FeAt(v.sent[2], 0)));
  claim[1] = Add(claim[1], Mul(d.w[n], FeAt(v.received[2], 0)));
  size_t nb = n + 1;
  for (size_t h = 0; h < halvings; ++h) {
    const auto& s = v.sent[ReshareAt(h)];
    const auto& rcv = v.received[ReshareAt(h)];
    const Fe h0[2] = {FeAt(s, 0), FeAt(s, 1)}, h1[2] = {FeAt(rcv, 0), FeAt(rcv, 1)};
    HalvingClaim(claim, h0, h1, d.r_halve[h]);
    own.HalveFold(nb, d.r_halve[h]);
    nb = (nb + 1) / 2;
  }
  std::vector<Fe> t0(P - 1), t1(P - 1);
  for (int p = 0; p < P - 1; ++p) {
    t0[p] = FeAt(v.sent[ReshareAt(halvings)], p);
    t1[p] = FeAt(v.received[ReshareAt(halvings)], p);
  }
  CompressClaim(claim, t0.data(), t1.data(), d.r_tail);
  own.TailFold(nb, d.r_tail);
  // The opening: party i sends component i+1, receives component i-1.
  const auto& mine = v.sent[ReshareAt(halvings) + 3];
  const auto& got = v.received[ReshareAt(halvings) + 3];
  d.own_opening_matches = dzkp::Equal(FeAt(mine, 0), own.f[1][0]) &&
                          dzkp::Equal(FeAt(mine, 1), own.g[1][0]) &&
                          dzkp::Equal(FeAt(mine, 2), claim[1]);
  d.F = Add(Add(own.f[0][0], own.f[1][0]), FeAt(got, 0));
  d.G = Add(Add(own.g[0][0], own.g[1][0]), FeAt(got, 1));
  d.C = Add(Add(claim[0], claim[1]), FeAt(got, 2));
  return d;
}

Fe Pow(Fe a, int e) {
  Fe r = dzkp::FromU64(1);
  for (int k = 0; k < e; ++k) r = Mul(r, a);
  return r;
}

// Folds one clear vector (component 0; component 1 zero) through B's
// halvings and tail: its last f and g.
void FoldClear(const Derived& d, const std::vector<Fe>& f, const std::vector<Fe>& g, Fe* F,
               Fe* G) {
  Vecs c(f.size());
  std::copy(f.begin(), f.end(), c.f[0].begin());
  std::copy(g.begin(), g.end(), c.g[0].begin());
  size_t n = f.size();
  for (Fe r : d.r_halve) c.HalveFold(n, r), n = (n + 1) / 2;
  c.TailFold(n, d.r_tail);
  *F = c.f[0][0], *G = c.g[0][0];
}

// Q(eta): the change of party i+1's component i-1 of the last claim that
// party i-1's shifted weights cause if H = eta, minus the observed C' - F G.
Fe EvalQ(const CheaterView& v, const Derived& d, Fe kappa, Fe eta) {
  const size_t n = d.ng;
  std::vector<Fe> xv(n + 1), yv(n + 1);
  for (size_t k = 0; k < n; ++k) {
    xv[k] = Pow(eta, v.x_exp[k]);
    yv[k] = Pow(eta, v.y_exp[k]);
  }
  // The masks, from the opened F, G: F = F_0 + kappa w_m x'', G = G_0 + kappa y''.
  std::vector<Fe> fw(n + 1, dzkp::Zero()), gv(n + 1, dzkp::Zero());
  for (size_t k = 0; k < n; ++k) fw[k] = Mul(d.w[k], xv[k]), gv[k] = yv[k];
  Fe F0, G0;
  FoldClear(d, fw, gv, &F0, &G0);
  const Fe inv_kappa = dzkp::Inv(kappa);
  xv[n] = Mul(Add(d.F, F0), dzkp::Inv(Mul(kappa, d.w[n])));
  yv[n] = Mul(Add(d.G, G0), inv_kappa);
  // Party i-1's components (i-1, i) of delta f and g.
  Vecs delta(n + 1);
  for (size_t k = 0; k <= n; ++k) {
    const Fe xb = k < n ? d.x[0][k] : d.mx[0], xc = k < n ? d.x[1][k] : d.mx[1];
    const Fe yb = k < n ? d.y[0][k] : d.my[0], yc = k < n ? d.y[1][k] : d.my[1];
    const Fe dw = Add(d.w_shift[k], d.w[k]);
    delta.f[0][k] = Mul(dw, Add(xv[k], Add(xb, xc)));
    delta.f[1][k] = Mul(dw, xb);
    delta.g[0][k] = Add(yv[k], Add(yb, yc));
    delta.g[1][k] = yb;
  }
  Fe dc[2] = {dzkp::Zero(), dzkp::Zero()};
  size_t nb = n + 1;
  for (Fe r : d.r_halve) {
    Fe h[2];
    delta.HalveH(nb, h);
    HalvingClaim(dc, h, h, r);
    delta.HalveFold(nb, r);
    nb = (nb + 1) / 2;
  }
  std::vector<Fe> th(P - 1);
  delta.TailH(nb, th.data());
  CompressClaim(dc, th.data(), th.data(), d.r_tail);
  return Add(dc[0], Add(d.C, Mul(d.F, d.G)));
}

// ---- Polynomials over GF(2^128). ----

void Trim(Poly& p) {
  while (!p.empty() && IsZero(p.back())) p.pop_back();
}

Fe Eval(const Poly& p, Fe x) {
  Fe r = dzkp::Zero();
  for (size_t k = p.size(); k-- > 0;) r = Add(Mul(r, x), p[k]);
  return r;
}

// The polynomial of degree < xs.size() through (xs[j], ys[j]) (Lagrange).
Poly InterpolatePoly(const std::vector<Fe>& xs, const std::vector<Fe>& ys) {
  const size_t n = xs.size();
  Poly all(1, dzkp::FromU64(1));  // prod (x - xs[j])
  for (Fe a : xs) {
    Poly next(all.size() + 1, dzkp::Zero());
    for (size_t k = 0; k < all.size(); ++k) {
      next[k + 1] = Add(next[k + 1], all[k]);
      next[k] = Add(next[k], Mul(a, all[k]));
    }
    all.swap(next);
  }
  Poly out(n, dzkp::Zero());
  for (size_t j = 0; j < n; ++j) {
    Poly q(n);  // all / (x - xs[j]), synthetic division
    Fe carry = dzkp::Zero();
    for (size_t k = n; k-- > 0;) {
      carry = Add(all[k + 1], Mul(carry, xs[j]));
      q[k] = carry;
    }
    const Fe scale = Mul(ys[j], dzkp::Inv(Eval(q, xs[j])));
    for (size_t k = 0; k < n; ++k) out[k] = Add(out[k], Mul(scale, q[k]));
  }
  Trim(out);
  return out;
}

Poly Mod(Poly a, const Poly& b) {
  const Fe inv = dzkp::Inv(b.back());
  while (a.size() >= b.size()) {
    const Fe q = Mul(a.back(), inv);
    const size_t s = a.size() - b.size();
    for (size_t k = 0; k < b.size(); ++k) a[s + k] = Add(a[s + k], Mul(q, b[k]));
    Trim(a);
  }
  return a;
}

Poly Gcd(Poly a, Poly b) {
  Trim(a), Trim(b);
  while (!b.empty()) {
    Poly r = Mod(a, b);
    a.swap(b);
    b.swap(r);
  }
  return a;
}

// The attack's recovery from one batch: Q, interpolated from deg + 1
// points, and checked at one more.
struct Relation {
  Poly q;
  bool exact = false;  // Q's interpolation agrees with a fresh evaluation
};
std::optional<Relation> Relate(const CheaterView& v) {
  const std::optional<Derived> d = Derive(v);
  if (!d) return std::nullopt;
  const size_t n = d->ng;
  std::vector<Fe> unit(n + 1, dzkp::Zero()), none(n + 1, dzkp::Zero());
  unit[n] = dzkp::FromU64(1);
  Fe kappa, unused;
  FoldClear(*d, unit, none, &kappa, &unused);
  if (IsZero(kappa)) return std::nullopt;
  const int deg = *std::max_element(v.x_exp.begin(), v.x_exp.end()) +
                  *std::max_element(v.y_exp.begin(), v.y_exp.end());
  std::vector<Fe> xs(deg + 1), ys(deg + 1);
  for (int j = 0; j <= deg; ++j) {
    xs[j] = dzkp::FromU64(0x1000 + j, 0x5eed);
    ys[j] = EvalQ(v, *d, kappa, xs[j]);
  }
  Relation rel;
  rel.q = InterpolatePoly(xs, ys);
  const Fe probe = dzkp::FromU64(0xfeed, 0xbeef);
  rel.exact = dzkp::Equal(Eval(rel.q, probe), EvalQ(v, *d, kappa, probe));
  return rel;
}

// x - H from two relations, if their gcd is linear.
std::optional<Fe> Recover(const Poly& q1, const Poly& q2) {
  const Poly g = Gcd(q1, q2);
  if (g.size() != 2) return std::nullopt;
  return Mul(g[0], dzkp::Inv(g[1]));
}

bool AllZero(const std::vector<uint8_t>& m) {
  return std::all_of(m.begin(), m.end(), [](uint8_t b) { return b == 0; });
}

std::string Show(const std::array<absl::Status, 3>& st) {
  return absl::StrCat(st[0].ToString(), " / ", st[1].ToString(), " / ", st[2].ToString());
}

void Attack(int m) {
  const Dealt dealt = Deal();
  const Fe h = dzkp::FromGcm(dealt.h.data());
  for (int cheater = 0; cheater < 3; ++cheater) {
    const std::string what = absl::StrCat("m = ", m, ", cheater ", cheater, ": ");
    std::vector<Poly> rel;
    for (uint64_t run = 1; run <= 2; ++run) {
      const Batch b = RunBatch(dealt, m, cheater, run);
      // The batch fails at both honest parties (their views differ).
      EXPECT_TRUE(IsIntegrityFailure(b.st[(cheater + 1) % 3])) << what << Show(b.st);
      EXPECT_TRUE(IsIntegrityFailure(b.st[(cheater + 2) % 3])) << what << Show(b.st);
      ASSERT_EQ(b.succ_last_opening.size(), 48u) << what;  // B's f, g, claim
      if (kConfirmed) {
        EXPECT_TRUE(AllZero(b.succ_last_opening)) << what;
      } else {
        EXPECT_FALSE(AllZero(b.succ_last_opening)) << what;
      }
      const std::optional<Derived> d = Derive(b.view);
      ASSERT_TRUE(d.has_value()) << what;
      // The cheater's replay of its own Verify is exact. As built, the
      // cheater's own (library) Verify may have gone silent too, once
      // party i+1's zeros reached it (a later acknowledgement): then its
      // opening is zeros, and the replay still holds its components.
      const auto& own = b.view.sent[b.view.sent.size() - 2];
      EXPECT_TRUE(d->own_opening_matches || (kConfirmed && AllZero(own))) << what;
      const std::optional<Relation> r = Relate(b.view);
      ASSERT_TRUE(r.has_value()) << what;
      EXPECT_TRUE(r->exact) << what << "Q is of higher degree than the algebra says";
      EXPECT_LE(r->q.size(), static_cast<size_t>(m + 1)) << what;
      if (kConfirmed) {
        EXPECT_FALSE(IsZero(Eval(r->q, h))) << what << "a relation of H leaked";
      } else {
        EXPECT_TRUE(IsZero(Eval(r->q, h))) << what << "Q(H) != 0: the algebra is wrong";
        EXPECT_GE(r->q.size(), 2u) << what << "Q is constant";
      }
      rel.push_back(r->q);
    }
    const std::optional<Fe> found = Recover(rel[0], rel[1]);
    if (kConfirmed) {
      EXPECT_FALSE(found.has_value() && dzkp::Equal(*found, h)) << what << "H recovered";
    } else {
      ASSERT_TRUE(found.has_value()) << what << "the gcd is not linear";
      EXPECT_TRUE(dzkp::Equal(*found, h)) << what << "recovered a value that is not H";
    }
  }
}

// One doubling (H^65 .. H^128 = H^64 * H^(1 .. 64)): 64 products, no
// halving; Q of degree <= 128.
TEST(HRecovery, OneDoubling) { Attack(128); }

// Two doublings (H^64 * H^(1..64), then H^128 * H^(1..72)): 136 products,
// one halving before the tail; Q of degree <= 200.
TEST(HRecovery, TwoDoublingsWithAHalving) { Attack(200); }

}  // namespace
}  // namespace kmpc::protocol
