// The multiplication check (verify.h): Verifier::Verify's rounds over a
// MulLog (mul_log.h) and the compare of the opened values' hashes, on a
// ring that goes silent once this party's view of the openings diverged.
#include "protocol/verify.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/cord.h"
#include "protocol/prf.h"
#include "protocol/rep3.h"
#include "share/replicated.h"

namespace kmpc::protocol {

bool IsIntegrityFailure(const absl::Status& st) {
  return st.code() == absl::StatusCode::kDataLoss &&
         st.GetPayload(kIntegrityPayload).has_value();
}

absl::Status IntegrityFailure() {
  absl::Status bad = absl::DataLossError(
      "MPC integrity check failed: a server deviated from the protocol; "
      "batch aborted, nothing released");
  bad.SetPayload(kIntegrityPayload, absl::Cord("1"));
  return bad;
}

#ifdef KMPC_TEST_COIN_HOOK
// Defined by coin_redraw_test.cc, the only binary built with the switch
// (core.cmake): may overwrite an opened coin (alike on every party), and
// A's and B's mask weights from coin c2 as the redraw sees them.
void TestCoinHook(int party, uint8_t coin[16]);
void TestMaskWeightHook(int party, dzkp::F64& wm);
void TestGfMaskWeightHook(int party, uint8_t wm[16]);
#endif

namespace {

using wiping::Reserve;

// Detaches the context's log while the checks run their own rounds.
class Unlogged {
 public:
  explicit Unlogged(Rep3& ctx) : ctx_(ctx), saved_(ctx.log()) { ctx.set_log(nullptr); }
  ~Unlogged() { ctx_.set_log(saved_); }

 private:
  Rep3& ctx_;
  MulLog* saved_;
};

// The check's side of the ring. Messages pass through until this party
// finds that its view of the openings differs from an honest peer's (an
// acknowledgement that is not its own hash, or a deviation seen before the
// check); from then on every message it sends is zeros of the size the
// protocol prescribes. The ring stays in step (no party waits for a
// message that never comes), and nothing this party computes after the
// views diverged, i.e. from a peer's messages derived from a value opened
// differently, reaches any party (verify.h, "Openings").
class ConfirmedRing : public net::RingChannel {
 public:
  ConfirmedRing(net::RingChannel& inner, bool deviated) : inner_(inner), stopped_(deviated) {}
  int party() const override { return inner_.party(); }
  void Stop() { stopped_ = true; }
  bool stopped() const { return stopped_; }
  // The next message goes out as it is even after Stop: a coin's share, a
  // fresh PRSS value independent of the data. Its receiver then opens the
  // same coin as the third party, so its last opening is the one it would
  // send in an honest run and tells party i nothing (were the share
  // zeros, that opening would be at another point: a second evaluation of
  // the cheater's own polynomials).
  void PassNext() { pass_ = true; }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    if (Passes()) return inner_.SendToPrev(msg);
    const std::vector<uint8_t> zeros(msg.size(), 0);
    return inner_.SendToPrev(zeros);
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override { return inner_.RecvFromNext(out); }
  absl::Status Exchange(absl::Span<const uint8_t> to_prev,
                        absl::Span<uint8_t> from_next) override {
    if (Passes()) return inner_.Exchange(to_prev, from_next);
    const std::vector<uint8_t> zeros(to_prev.size(), 0);
    return inner_.Exchange(zeros, from_next);
  }

 private:
  bool Passes() {
    const bool passes = !stopped_ || pass_;
    pass_ = false;
    return passes;
  }

  net::RingChannel& inner_;
  bool stopped_;
  bool pass_ = false;
};

// A check's rounds and sizes follow from public values the parties agreed
// on before it (the batch, the log's sizes, the coins), and every round
// before it completed in step: a malformed, mis-sized or out-of-step
// message inside the check (DATA_LOSS from the ring: net/frame.cc,
// memory_ring.cc) comes from a party that deviated, e.g. one that showed
// its predecessor alone a coin to redraw (CoinAvoiding). It fails the
// check as a detected deviation, counted as one (the breaker), not as a
// ring fault.
absl::Status AsDeviation(absl::Status st) {
  if (absl::IsDataLoss(st) && !IsIntegrityFailure(st)) return IntegrityFailure();
  return st;
}

// What the check's rounds share: the hash of every value opened so far
// and the ring that goes silent once this party's view diverged.
struct Views {
  Sha256& opened;
  ConfirmedRing& ring;
};

// The final round: H(opened) to party i-1; compare what party i+1 sends
// with our own.
absl::Status Compare(Rep3& ctx, Sha256& opened, bool local_ok) {
  std::array<uint8_t, 32> ho{}, in{};
  absl::Status st = opened.Final(ho);
  if (!st.ok()) return st;
  // A party that saw a deviation sends zeros: its openings may include
  // values computed from a shifted one (cts/masked_eval.cc's views), and
  // the compare fails anyway.
  const std::array<uint8_t, 32> zeros{};
  st = ctx.channel().Exchange(absl::MakeConstSpan(local_ok ? ho : zeros), absl::MakeSpan(in));
  if (!st.ok()) return st;
  const bool same = CRYPTO_memcmp(in.data(), ho.data(), 32) == 0;
  if (!same || !local_ok) return IntegrityFailure();
  return absl::OkStatus();
}

using dzkp::F64;
using dzkp::Fe;

// A coin: a fresh PRSS random value, opened and hashed into the opened
// values, two rounds. The ring is one-way (party i sends to i-1 and
// receives from i+1), so in a single opening round party i+1 could send
// party i its share of the coin before party i-1 has received party i's
// last message: party i, reading ahead, would know the coin before it
// sends that message and could choose its error to vanish at the coin
// (an h' with h'(r) = h(r) plus the claimed error). So first a round of
// acknowledgements: each party sends H(opened so far) to party i-1 and
// compares what party i+1 sent with its own hash. An honest party i+1
// reveals its share only after receiving the acknowledgement of party
// i-1, which party i-1 sends only after it received party i's last
// message: every message a coin challenges has reached an honest party
// before any party can compute the coin.
// The comparison confirms every earlier opening (the previous coins, the
// batch's ctr0 and reveals) before this party sends anything computed
// from them: party i can shift the share it sends party i-1 of any
// opening, so that i-1 alone opens a different value and derives its
// next messages (to party i+1) from it; party i+1, which opened the true
// value, finds i-1's acknowledgement differing from its own hash at the
// next coin and goes silent (ConfirmedRing) before it sends anything
// computed from those messages (a claim interpolated from i-1's reshared
// h values, opened to party i, would be a known relation of the shares
// party i lacks). Between an opening and the next acknowledgement an
// honest party sends only messages computed from its own components and
// from what it received before the opening: reshares and AND layers,
// each masked by a zero-share component that party i cannot compute.
// KMPC_TEST_ONE_ROUND_COIN: defined only where the tests compile a copy of
// this file (kmpc_core_readahead_oneround_test, core.cmake) to show that
// the read-ahead attack works without the acknowledgements;
// KMPC_TEST_UNCONFIRMED_OPENINGS: likewise (kmpc_core_openings_unconfirmed_test)
// for the acknowledgement hashed but not compared. No library or server is
// built with either.
absl::Status Coin(Rep3& ctx, Views& views, uint8_t out[16]) {
#ifndef KMPC_TEST_ONE_ROUND_COIN
  std::array<uint8_t, 32> ack{}, peer{};
  if (absl::Status st = views.opened.Peek(ack); !st.ok()) return st;
  if (absl::Status st = ctx.channel().Exchange(absl::MakeConstSpan(ack), absl::MakeSpan(peer));
      !st.ok())
    return st;
#ifndef KMPC_TEST_UNCONFIRMED_OPENINGS
  if (CRYPTO_memcmp(ack.data(), peer.data(), 32) != 0) views.ring.Stop();
#endif
  views.opened.Update(absl::MakeConstSpan(peer));
#endif
  uint8_t c0[16], c1[16];
  ctx.prss().RandomShares(c0, c1, 16);
  views.ring.PassNext();
  absl::Status st = ctx.Reveal(absl::MakeConstSpan(c0, 16), absl::MakeConstSpan(c1, 16),
                               absl::MakeSpan(out, 16));
  share::Wipe(c0, 16);
  share::Wipe(c1, 16);
#ifdef KMPC_TEST_COIN_HOOK
  if (st.ok()) TestCoinHook(ctx.party(), out);
#endif
  if (st.ok()) views.opened.Update(absl::MakeConstSpan(out, 16));
  return st;
}

// Whether r is one of the interpolation nodes e_0 .. e_{n-1}
// (Field<E>::Elem: the elements with integer representation below n).
bool IsNode(F64 r, size_t n) { return r.v < n; }
bool IsNode(Fe r, size_t n) {
  return _mm_extract_epi64(r, 1) == 0 && static_cast<uint64_t>(_mm_cvtsi128_si64(r)) < n;
}

// Coins until avoids(coin). A zero mask weight, or a compression's
// challenge equal to one of its interpolation nodes, would zero the mask's
// coefficient in the opened f or g, which would then be a public linear
// combination of wire values (verify.h, step 5): such a coin is redrawn.
// The coin is public, so every party redraws alike, and each challenge is
// uniform over the field minus the nodes (soundness: verify.h). The last
// party to reveal can show its predecessor any coin, so a cheater can
// force redraws there: more than kMaxCoinDraws in a row (for honest
// parties, probability below 2^-400) is a detected deviation.
constexpr int kMaxCoinDraws = 8;
template <class Avoids>
absl::Status CoinAvoiding(Rep3& ctx, Views& views, uint8_t out[16], Avoids avoids) {
  for (int i = 0; i < kMaxCoinDraws; ++i) {
    if (absl::Status st = Coin(ctx, views, out); !st.ok()) return st;
    if (avoids(out)) return absl::OkStatus();
  }
  return IntegrityFailure();
}

// A coin's challenges: the GF(2^64) proof's is its low 8 bytes, the
// GF(2^128) proof's all 16 (each uniform in its field).
F64 Challenge64(const uint8_t coin[16]) {
  F64 r;
  std::memcpy(&r.v, coin, 8);
  return r;
}

// A compression coin's predicate for CoinAvoiding: neither challenge is
// one of its proof's interpolation nodes (a_nodes, b_nodes; 0 for a proof
// not compressed by this coin).
auto AvoidsNodes(size_t a_nodes, size_t b_nodes) {
  return [a_nodes, b_nodes](const uint8_t* c) {
    return !IsNode(Challenge64(c), a_nodes) && !IsNode(dzkp::Load(c), b_nodes);
  };
}

constexpr int kMaxP = dzkp::kMaxProofPoints;

// Weak shares -> replicated shares (one message) of na elements of
// GF(2^64) and nb of GF(2^128): party i adds its zero-share, sends the
// sum to party i-1 and receives party i+1's.
absl::Status Reshare(Rep3& ctx, const F64* wa, size_t na, const Fe* wb, size_t nb, F64* a0,
                     F64* a1, Fe* b0, Fe* b1) {
  constexpr size_t kMax = 8 * kMaxP + 16 * dzkp::kTailHPoints;
  uint8_t t[kMax], in[kMax];
  const size_t n = 8 * na + 16 * nb;
  if (n > kMax) return absl::InternalError("Reshare: too many elements");
  ctx.prss().ZeroShare(t, n);
  for (size_t k = 0; k < na; ++k) {
    uint64_t z;
    std::memcpy(&z, t + 8 * k, 8);
    z ^= wa[k].v;
    std::memcpy(t + 8 * k, &z, 8);
  }
  uint8_t* tb = t + 8 * na;
  for (size_t k = 0; k < nb; ++k) dzkp::Store(tb + 16 * k, dzkp::Add(dzkp::Load(tb + 16 * k), wb[k]));
  absl::Status st =
      ctx.channel().Exchange(absl::MakeConstSpan(t, n), absl::MakeSpan(in, n));
  if (st.ok()) {
    for (size_t k = 0; k < na; ++k) {
      std::memcpy(&a0[k].v, t + 8 * k, 8);
      std::memcpy(&a1[k].v, in + 8 * k, 8);
    }
    for (size_t k = 0; k < nb; ++k) {
      b0[k] = dzkp::Load(tb + 16 * k);
      b1[k] = dzkp::Load(in + 8 * na + 16 * k);
    }
  }
  share::Wipe(t, sizeof t);
  share::Wipe(in, sizeof in);
  return st;
}

// One inner-product proof's secrets in field E (F64: the AND gates';
// Fe: the GF(2^128) products'): the h values of the current step (weak,
// then replicated), the mask x', y' and the claim c.
template <class E>
struct ProofState {
  E hw[kMaxP], h0[kMaxP], h1[kMaxP];
  E mx[2], my[2], c[2];
  void Wipe() { share::Wipe(this, sizeof *this); }
};

// The weak share of the mask's product x' y'.
template <class E>
E MaskProduct(const ProofState<E>& p) {
  typename dzkp::Field<E>::Wide t;
  dzkp::MulAcc(t, p.mx[0], dzkp::Add(p.my[0], p.my[1]));
  dzkp::MulAcc(t, p.mx[1], p.my[0]);
  return dzkp::Reduce(t);
}

// The claim after a compression of factor G (h of degree 2G - 2, P =
// 2G - 1 values, h(e_1) .. h(e_{P-1}) in h0, h1): h(e_0) = claim - h(e_1)
// - ... - h(e_{G-1}), then h(r) into out.
template <class E>
void CompressClaim(const E claim[2], const E* h0, const E* h1, int G, E r, E out[2]) {
  const int P = 2 * G - 1;
  E v0[kMaxP], v1[kMaxP];
  v0[0] = claim[0], v1[0] = claim[1];
  for (int p = 1; p < P; ++p) {
    v0[p] = h0[p - 1], v1[p] = h1[p - 1];
    if (p < G) v0[0] = dzkp::Add(v0[0], v0[p]), v1[0] = dzkp::Add(v1[0], v1[p]);
  }
  dzkp::Interpolate(P, v0, v1, r, out);
  share::Wipe(v0, sizeof v0);
  share::Wipe(v1, sizeof v1);
}

// MulLog::fold_ and gf_fold_: the compressed vectors f0, f1, g0, g1.
using Fold = std::array<dzkp::F64Vector, 4>;
using GfFold = std::array<dzkp::FeVector, 4>;

// The secrets a verification holds besides the log and its fold vectors;
// Verifier::Verify wipes them on every way out. Proof a is the AND gates'
// (GF(2^64)), b the GF(2^128) products' (verify.h); each runs when it has
// something to prove (a also when the log is empty).
struct VerifySecrets {
  VerifySecrets(const dzkp::AndWeights& w, bool and_on, bool gf_on)
      : weights(w), on_a(and_on), on_b(gf_on) {}
  // The first compression's weights (public); its h has P = 2 g - 1
  // points for g = weights.g words per group.
  const dzkp::AndWeights& weights;
  const bool on_a, on_b;
  ProofState<F64> a = {};
  ProofState<Fe> b = {};
  F64 claim[2] = {};  // the AND gates' claim sum w z
  int G() const { return weights.g; }
  int P() const { return 2 * weights.g - 1; }
  void Wipe() {
    a.Wipe();
    b.Wipe();
    share::Wipe(claim, sizeof claim);
  }
};

// Round 1: the first compression's weights from coin c1.
void FirstWeights(const uint8_t* coin, size_t groups, dzkp::AndWeights& w) {
  const Prf prf(coin);
  static_assert(dzkp::kMaxGroupWords % 2 == 0);
  prf.Fill(0, (w.g + 1) / 2, reinterpret_cast<uint8_t*>(w.sigma));  // two per PRF block
  w.DeriveTau();
  const size_t blocks = (groups + 1) / 2;
  Reserve(w.nu, 2 * blocks);
  w.nu.resize(2 * blocks);
  if (blocks > 0) {
    prf.Fill(dzkp::kMaxGroupWords, blocks, reinterpret_cast<uint8_t*>(w.nu.data()));
  }
  w.nu.resize(groups);
}

// Round 2: h(e_1) .. h(e_{P-1}) and the masks' products, reshared.
absl::Status FirstLevelProof(Rep3& ctx, const dzkp::AndShares& s,
                             const dzkp::AndWeights& w, VerifySecrets& v) {
  uint8_t r0[32], r1[32];
  if (v.on_a) {
    dzkp::FirstLevelH(s, w, v.a.hw, v.claim);
    ctx.prss().RandomShares(r0, r1, 16);
    std::memcpy(&v.a.mx[0].v, r0, 8), std::memcpy(&v.a.mx[1].v, r1, 8);
    std::memcpy(&v.a.my[0].v, r0 + 8, 8), std::memcpy(&v.a.my[1].v, r1 + 8, 8);
    v.a.hw[v.P() - 1] = MaskProduct(v.a);
  }
  if (v.on_b) {
    ctx.prss().RandomShares(r0, r1, 32);
    v.b.mx[0] = dzkp::Load(r0), v.b.mx[1] = dzkp::Load(r1);
    v.b.my[0] = dzkp::Load(r0 + 16), v.b.my[1] = dzkp::Load(r1 + 16);
    v.b.hw[0] = MaskProduct(v.b);
  }
  share::Wipe(r0, 32);
  share::Wipe(r1, 32);
  return Reshare(ctx, v.a.hw, v.on_a ? static_cast<size_t>(v.P()) : 0, v.b.hw, v.on_b ? 1 : 0,
                 v.a.h0, v.a.h1, v.b.h0, v.b.h1);
}

// Round 3, from coin c2 (block 0: r and the mask's weight w'_m): the AND
// proof's claim h(r) + w'_m z', the mask (w'_m x', y') as element `at` of
// the fold. Returns r.
F64 FirstLevelClaim(const Prf& prf, size_t at, Fold& fold, VerifySecrets& v) {
  uint8_t b0[16];
  prf.Fill(0, 1, b0);
  F64 r, wm;
  std::memcpy(&r.v, b0, 8);
  std::memcpy(&wm.v, b0 + 8, 8);
  CompressClaim(v.claim, v.a.h0, v.a.h1, v.G(), r, v.a.c);
  // The mask: its product came back reshared as the last h value.
  const F64 z[2] = {v.a.h0[v.P() - 1], v.a.h1[v.P() - 1]};
  for (int c = 0; c < 2; ++c) {
    v.a.c[c] = dzkp::Add(v.a.c[c], dzkp::Mul(wm, z[c]));
    fold[c][at] = dzkp::Mul(wm, v.a.mx[c]);
    fold[2 + c][at] = v.a.my[c];
  }
  return r;
}

// Round 3, from coin c2 (blocks 1 ..): the GF(2^128) proof's weights w'_k
// of the ng products and w'_m of its mask; its claim sum_k w'_k z_k +
// w'_m z' and its vectors (w'_k x_k, y_k), then (w'_m x', y').
void FoldGfProducts(const Prf& prf, const std::array<std::vector<uint8_t>, 6>& Gf,
                    size_t ng, GfFold& fold, VerifySecrets& v) {
  auto& [f0, f1, g0, g1] = fold;
  std::vector<Fe> wk(ng + 1);
  prf.Fill(1, ng + 1, reinterpret_cast<uint8_t*>(wk.data()));
  dzkp::Wide acc[2];
  for (size_t k = 0; k < ng; ++k) {
    const size_t o = 16 * k;
    f0[k] = dzkp::Mul(wk[k], dzkp::FromGcm(Gf[0].data() + o));
    f1[k] = dzkp::Mul(wk[k], dzkp::FromGcm(Gf[1].data() + o));
    g0[k] = dzkp::FromGcm(Gf[2].data() + o);
    g1[k] = dzkp::FromGcm(Gf[3].data() + o);
    dzkp::MulAcc(acc[0], wk[k], dzkp::FromGcm(Gf[4].data() + o));
    dzkp::MulAcc(acc[1], wk[k], dzkp::FromGcm(Gf[5].data() + o));
  }
  f0[ng] = dzkp::Mul(wk[ng], v.b.mx[0]);
  f1[ng] = dzkp::Mul(wk[ng], v.b.mx[1]);
  g0[ng] = v.b.my[0];
  g1[ng] = v.b.my[1];
  dzkp::MulAcc(acc[0], wk[ng], v.b.h0[0]);
  dzkp::MulAcc(acc[1], wk[ng], v.b.h1[0]);
  v.b.c[0] = dzkp::Reduce(acc[0]);
  v.b.c[1] = dzkp::Reduce(acc[1]);
  share::Wipe(acc, sizeof acc);
}

// The claim after a halving: h(r) from h(e_0) = c - h(1), h(1), h(x).
template <class E>
void HalvingClaim(ProofState<E>& p, E r) {
  const E v0[3] = {dzkp::Add(p.c[0], p.h0[0]), p.h0[0], p.h0[1]};
  const E v1[3] = {dzkp::Add(p.c[1], p.h1[0]), p.h1[0], p.h1[1]};
  dzkp::Interpolate(3, v0, v1, r, p.c);
}

// A's h for its next step: a compression by kStepWords once its vectors
// hold at most kStepFrom elements, else a halving's h(1), h(x).
// Returns the number of h values (2 kStepWords - 2 or 2).
size_t NextStepH(F64* const af[2], F64* const ag[2], size_t na, VerifySecrets& v) {
  if (na <= dzkp::kStepFrom) {
    dzkp::StepH<F64>(af, ag, na, v.a.hw);
    return 2 * dzkp::kStepWords - 2;
  }
  dzkp::HalveH<F64>(af, ag, na, v.a.hw);
  return 2;
}

// A's step after the coin r: its claim and vectors; the next step's h
// (into v.a.hw, fused with the fold for a halving) while more than
// kTailWords elements are left. Returns the next step's h count (0 when
// none).
size_t StepA(F64* const af[2], F64* const ag[2], size_t& na, size_t nh, F64 r,
             VerifySecrets& v) {
  constexpr size_t T = dzkp::kTailWords;
  static_assert(dzkp::kStepWords > 2, "a step's h count must differ from a halving's (2)");
  static_assert(dzkp::kStepFrom >= T, "steps by kStepWords start above the tail");
  if (nh != 2) {
    const F64 c[2] = {v.a.c[0], v.a.c[1]};
    CompressClaim(c, v.a.h0, v.a.h1, dzkp::kStepWords, r, v.a.c);
    dzkp::StepFold<F64>(af, ag, na, r);
    na = (na + dzkp::kStepWords - 1) / dzkp::kStepWords;
    return na > T ? NextStepH(af, ag, na, v) : 0;
  }
  HalvingClaim(v.a, r);
  const size_t next = (na + 1) / 2;
  if (next > T && next > dzkp::kStepFrom) {
    // The next halving's h(1), h(x) in the same pass as this fold.
    dzkp::HalveFoldH(af, ag, na, r, v.a.hw);
    na = next;
    return 2;
  }
  dzkp::HalveFold(af, ag, na, r);
  na = next;
  return na > T ? NextStepH(af, ag, na, v) : 0;
}

// Rounds 4..: A's halvings, then its compressions by kStepWords, and B's
// halvings, in the same rounds (each a reshare of the h values of every
// proof still above kTailWords elements, and a coin) until each has at
// most kTailWords left.
absl::Status Halvings(Rep3& ctx, Views& views, size_t& na, size_t& nb, Fold& fa, GfFold& fb,
                      VerifySecrets& v) {
  constexpr size_t T = dzkp::kTailWords;
  uint8_t coin[16];
  F64* const af[2] = {fa[0].data(), fa[1].data()};
  F64* const ag[2] = {fa[2].data(), fa[3].data()};
  Fe* const bf[2] = {fb[0].data(), fb[1].data()};
  Fe* const bg[2] = {fb[2].data(), fb[3].data()};
  size_t nh = na > T ? NextStepH(af, ag, na, v) : 0;  // A's h values this round
  while (na > T || nb > T) {
    const bool hb = nb > T;
    if (hb) dzkp::HalveH<Fe>(bf, bg, nb, v.b.hw);
    if (absl::Status st = Reshare(ctx, v.a.hw, nh, v.b.hw, hb ? 2 : 0, v.a.h0, v.a.h1,
                                  v.b.h0, v.b.h1);
        !st.ok())
      return st;
    // A halving interpolates over {e_0, e_1}, a step over e_0 .. e_{K-1}
    // (StepA: nh is 2 for a halving).
    const size_t a_nodes = nh == 0 ? 0 : nh == 2 ? 2 : dzkp::kStepWords;
    if (absl::Status st = CoinAvoiding(ctx, views, coin, AvoidsNodes(a_nodes, hb ? 2 : 0));
        !st.ok())
      return st;
    if (nh > 0) nh = StepA(af, ag, na, nh, Challenge64(coin), v);
    if (hb) {
      const Fe r = dzkp::Load(coin);
      HalvingClaim(v.b, r);
      dzkp::HalveFold(bf, bg, nb, r);
      nb = (nb + 1) / 2;
    }
  }
  return absl::OkStatus();
}

// The last compression of both proofs (vectors zero-padded to kTailWords:
// they hold at least that many elements) to one element: h(e_1) ..
// h(e_{2T-2}) of each reshared in one message, and a coin.
absl::Status Tails(Rep3& ctx, Views& views, size_t na, size_t nb, Fold& fa, GfFold& fb,
                   VerifySecrets& v) {
  constexpr int T = dzkp::kTailWords, P = dzkp::kTailHPoints;
  F64* const af[2] = {fa[0].data(), fa[1].data()};
  F64* const ag[2] = {fa[2].data(), fa[3].data()};
  Fe* const bf[2] = {fb[0].data(), fb[1].data()};
  Fe* const bg[2] = {fb[2].data(), fb[3].data()};
  if (v.on_a) {
    for (auto& vec : fa) std::fill(vec.begin() + na, vec.begin() + T, F64{0});
    dzkp::TailH<F64>(af, ag, v.a.hw);
  }
  if (v.on_b) {
    for (auto& vec : fb) std::fill(vec.begin() + nb, vec.begin() + T, dzkp::Zero());
    dzkp::TailH<Fe>(bf, bg, v.b.hw);
  }
  if (absl::Status st = Reshare(ctx, v.a.hw, v.on_a ? P - 1 : 0, v.b.hw, v.on_b ? P - 1 : 0,
                                v.a.h0, v.a.h1, v.b.h0, v.b.h1);
      !st.ok())
    return st;
  uint8_t coin[16];
  if (absl::Status st = CoinAvoiding(ctx, views, coin,
                                     AvoidsNodes(v.on_a ? T : 0, v.on_b ? T : 0));
      !st.ok())
    return st;
  if (v.on_a) {
    const F64 r = Challenge64(coin), c[2] = {v.a.c[0], v.a.c[1]};
    CompressClaim(c, v.a.h0, v.a.h1, T, r, v.a.c);
    dzkp::TailFold(af, ag, r);
  }
  if (v.on_b) {
    const Fe r = dzkp::Load(coin), c[2] = {v.b.c[0], v.b.c[1]};
    CompressClaim(c, v.b.h0, v.b.h1, T, r, v.b.c);
    dzkp::TailFold(bf, bg, r);
  }
  return absl::OkStatus();
}

// Opening: each proof's last f, g and claim (GF(2^64): 24 bytes, then
// GF(2^128): 48); *local_ok: each claim is the product of its f and g.
absl::Status OpenLast(Rep3& ctx, Views& views, const Fold& fa, const GfFold& fb,
                      const VerifySecrets& v, bool* local_ok) {
  uint8_t o0[72], o1[72], open[72];
  size_t n = 0;
  if (v.on_a) {
    const F64 s0[3] = {fa[0][0], fa[2][0], v.a.c[0]}, s1[3] = {fa[1][0], fa[3][0], v.a.c[1]};
    std::memcpy(o0, s0, 24), std::memcpy(o1, s1, 24);
    n = 24;
  }
  if (v.on_b) {
    dzkp::Store(o0 + n, fb[0][0]), dzkp::Store(o0 + n + 16, fb[2][0]);
    dzkp::Store(o0 + n + 32, v.b.c[0]);
    dzkp::Store(o1 + n, fb[1][0]), dzkp::Store(o1 + n + 16, fb[3][0]);
    dzkp::Store(o1 + n + 32, v.b.c[1]);
    n += 48;
  }
  absl::Status st = ctx.Reveal(absl::MakeConstSpan(o0, n), absl::MakeConstSpan(o1, n),
                               absl::MakeSpan(open, n));
  share::Wipe(o0, sizeof o0);
  share::Wipe(o1, sizeof o1);
  if (!st.ok()) return st;
  views.opened.Update(absl::MakeConstSpan(open, n));
  bool ok = true;
  if (v.on_a) {
    F64 o[3];
    std::memcpy(o, open, 24);
    ok = dzkp::Equal(dzkp::Mul(o[0], o[1]), o[2]);
  }
  if (v.on_b) {
    const uint8_t* b = open + (v.on_a ? 24 : 0);
    ok = ok && dzkp::Equal(dzkp::Mul(dzkp::Load(b), dzkp::Load(b + 16)), dzkp::Load(b + 32));
  }
  *local_ok = ok;
  return absl::OkStatus();
}

// Makes v hold n elements (at least kTailWords: the last compression's
// padding).
template <class V>
void Size(V& v, size_t n) {
  n = std::max<size_t>(n, dzkp::kTailWords);
  Reserve(v, n);
  v.resize(n);
}

// Coin c2 gives A's mask weight w'_m (FirstLevelClaim: block 0, bytes
// 8..15) and B's w''_m (FoldGfProducts: block 1 + ng); a zero one would
// keep that mask out of its proof's opened f (CoinAvoiding). c2's r
// interpolates the groups, not the mask, so it may be any element.
bool MaskWeightsNonzero(const uint8_t* coin, bool on_a, bool on_b, size_t ng, int party) {
  const Prf prf(coin);
  uint8_t b[16];
  if (on_a) {
    prf.Fill(0, 1, b);
    F64 wm;
    std::memcpy(&wm.v, b + 8, 8);
#ifdef KMPC_TEST_COIN_HOOK
    TestMaskWeightHook(party, wm);
#endif
    if (wm.v == 0) return false;
  }
  if (on_b) {
    prf.Fill(1 + ng, 1, b);
#ifdef KMPC_TEST_COIN_HOOK
    TestGfMaskWeightHook(party, b);
#endif
    if (IsNode(dzkp::Load(b), 1)) return false;  // e_0: zero
  }
  (void)party;
  return true;
}

}  // namespace

absl::Status Verifier::CompareOpened(Rep3& ctx, MulLog& log) {
  Unlogged detach(ctx);
  absl::Status st = Compare(ctx, log.opened_, !log.deviated());
  log.Clear();
  return AsDeviation(std::move(st));
}

absl::Status Verifier::Verify(Rep3& outer, MulLog& log) {
  Unlogged detach(outer);
  ConfirmedRing ring(outer.channel(), log.deviated());
  Rep3 ctx(ring, outer.prss());
  Views views{log.opened_, ring};
  log.PackLiveLanes();
  const size_t nw = log.and_words(), ng = log.gf_products();
  const int g = dzkp::GroupWordsFor(nw);
  const size_t groups = (nw + g - 1) / g;
  const auto& L = log.and_;
  const dzkp::AndShares s{
      {L[0].data(), L[1].data()}, {L[2].data(), L[3].data()}, {L[4].data(), L[5].data()}, nw,
      /*wipe=*/true};
  if (log.weights_ == nullptr) log.weights_ = std::make_unique<dzkp::AndWeights>();
  dzkp::AndWeights& w = *log.weights_;
  w.g = g;
  // Every secret this function holds, wiped on every way out.
  VerifySecrets sec(w, nw > 0 || ng == 0, ng > 0);
  // The log's words [0, nw) are wiped by the first compression's last
  // reads of them (AndShares::wipe; PackLiveLanes wiped those past nw);
  // if the check stops before the fold, MulLog::Clear wipes them at the
  // end of the batch. The AND proof's vectors are overwritten by the next
  // wave's check and wiped by Clear (a pass over them per wave cost ~10%
  // of the check).
  auto wipe = [&] {
    log.fold_dirty_ = std::max(log.fold_dirty_, log.fold_[0].size());
    sec.Wipe();
    log.Rewind();
  };
  auto fail = [&](absl::Status st) {
    wipe();
    return AsDeviation(std::move(st));
  };

  // Round 1: coin c1, the first compression's weights.
  uint8_t coin[16];
  if (absl::Status st = Coin(ctx, views, coin); !st.ok()) return fail(st);
  FirstWeights(coin, groups, w);
  if (absl::Status st = FirstLevelProof(ctx, s, w, sec); !st.ok()) return fail(st);

  // Round 3: coin c2: r, the masks' weights and the GF(2^128) products'.
  // Redrawn if a mask's weight is zero (MaskWeightsNonzero).
  auto first_avoids = [&](const uint8_t* c) {
    return MaskWeightsNonzero(c, sec.on_a, sec.on_b, ng, ctx.party());
  };
  if (absl::Status st = CoinAvoiding(ctx, views, coin, first_avoids); !st.ok())
    return fail(st);
  size_t na = 0, nb = 0;
  {
    const Prf prf(coin);
    if (sec.on_a) {
      na = 64 * groups + 1;
      for (auto& v : log.fold_) Size(v, na);
      auto& [f0, f1, g0, g1] = log.fold_;
      const F64 r = FirstLevelClaim(prf, 64 * groups, log.fold_, sec);
      if (groups > 0) dzkp::FirstLevelFold(s, w, r, f0.data(), f1.data(), g0.data(), g1.data());
      log.and_wiped_ = true;
    }
    if (sec.on_b) {
      nb = ng + 1;
      for (auto& v : log.gf_fold_) Size(v, nb);
      FoldGfProducts(prf, log.gf_, ng, log.gf_fold_, sec);
    }
  }

  if (absl::Status st = Halvings(ctx, views, na, nb, log.fold_, log.gf_fold_, sec);
      !st.ok())
    return fail(st);
  if (absl::Status st = Tails(ctx, views, na, nb, log.fold_, log.gf_fold_, sec); !st.ok())
    return fail(st);
  bool local_ok = false;
  if (absl::Status st = OpenLast(ctx, views, log.fold_, log.gf_fold_, sec, &local_ok);
      !st.ok())
    return fail(st);

  // Last round: compare.
  absl::Status st = Compare(ctx, log.opened_, local_ok && !ring.stopped());
  wipe();
  return AsDeviation(std::move(st));
}

}  // namespace kmpc::protocol
