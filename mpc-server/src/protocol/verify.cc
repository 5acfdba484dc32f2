#include "protocol/verify.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/cord.h"
#include "protocol/prf.h"
#include "protocol/rep3.h"
#include "share/replicated.h"

namespace kmpc::protocol {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { Reset(); }
void Sha256::Reset() {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }
void Sha256::Update(absl::Span<const uint8_t> b) {
  if (ok_ && !b.empty()) ok_ = EVP_DigestUpdate(ctx_, b.data(), b.size()) == 1;
}
absl::Status Sha256::Final(std::array<uint8_t, 32>& out) {
  unsigned int len = 0;
  if (!ok_ || EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != 32) {
    return absl::InternalError("SHA-256 failed");
  }
  return absl::OkStatus();
}

bool IsIntegrityFailure(const absl::Status& st) {
  return st.code() == absl::StatusCode::kDataLoss &&
         st.GetPayload(kIntegrityPayload).has_value();
}

namespace {

// Wipes v over its whole capacity (the elements past size() may hold an
// earlier, larger use's data) and frees it.
template <class V>
void WipeAndFree(V& v) {
  v.resize(v.capacity());
  share::Wipe(v.data(), v.size() * sizeof(typename V::value_type));
  V().swap(v);
}

// Makes room for n elements in v. A reallocation (capacity doubled, as
// insert would) copies into a fresh buffer and wipes the old one, so the
// shares it held are not left behind in freed memory.
template <class V>
void Reserve(V& v, size_t n) {
  if (n <= v.capacity()) return;
  V bigger;
  bigger.reserve(std::max(n, 2 * v.capacity()));
  bigger.assign(v.begin(), v.end());
  WipeAndFree(v);
  v.swap(bigger);
}

template <class V, size_t N>
size_t CapacityBytes(const std::array<V, N>& vs) {
  size_t b = 0;
  for (const auto& v : vs) b += v.capacity() * sizeof(typename V::value_type);
  return b;
}

}  // namespace

MulLog::~MulLog() {
  Clear();
  FreeAll();
}

void MulLog::FreeAll() {
  for (auto& v : and_) WipeAndFree(v);
  for (auto& v : gf_) WipeAndFree(v);
  for (auto& v : fold_) WipeAndFree(v);
  weights_.reset();  // public (from a revealed coin)
}

size_t MulLog::retained_bytes() const {
  return CapacityBytes(and_) + CapacityBytes(gf_) + CapacityBytes(fold_) +
         (weights_ != nullptr ? sizeof(dzkp::AndWeights) +
                                    weights_->nu.capacity() * sizeof(uint64_t)
                              : 0);
}

void MulLog::ReleaseExcess() {
  if (retained_bytes() > kMaxRetainedBytes) FreeAll();
}

size_t MulLog::AppendAnd(size_t n, int live, uint64_t* out[5]) {
  const size_t at = and_[0].size();
  if (live < 64 && n > 0) {
    auto& last = partial_;
    if (!last.empty() && last.back()[0] + last.back()[1] == at &&
        last.back()[2] == static_cast<size_t>(live)) {
      last.back()[1] += n;
    } else {
      last.push_back({at, n, static_cast<size_t>(live)});
    }
  }
  if (at + n > and_[0].capacity()) {
    for (auto& v : and_) Reserve(v, at + n);
  }
  for (int k = 0; k < 6; ++k) {
    and_[k].resize(at + n);
    if (k < 5) out[k] = and_[k].data() + at;
  }
  return at;
}

size_t MulLog::AddAnd(const uint64_t* x0, const uint64_t* x1,
                      const uint64_t* y0, const uint64_t* y1,
                      const uint64_t* z0, size_t n, int live) {
  uint64_t* out[5];
  const size_t at = AppendAnd(n, live, out);
  const uint64_t* src[5] = {x0, x1, y0, y1, z0};
  for (int k = 0; k < 5; ++k) std::memcpy(out[k], src[k], 8 * n);
  return at;
}

void MulLog::SetAndZ1(size_t at, const uint64_t* z1, size_t n) {
  std::memcpy(and_[5].data() + at, z1, 8 * n);
}

void MulLog::AddGf(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
                   const uint8_t* y1, const uint8_t* z0, const uint8_t* z1,
                   size_t n) {
  const uint8_t* src[6] = {x0, x1, y0, y1, z0, z1};
  for (auto& v : gf_) Reserve(v, v.size() + 16 * n);
  for (int k = 0; k < 6; ++k) gf_[k].insert(gf_[k].end(), src[k], src[k] + 16 * n);
}

void MulLog::AddOpened(absl::Span<const uint8_t> v) {
  opened_.Update(v);
}

namespace {

// Appends bits to a word array in place (writing never overtakes reading).
class BitPacker {
 public:
  explicit BitPacker(uint64_t* out) : out_(out) {}
  // The low k bits of v, 1 <= k <= 64.
  void Put(uint64_t v, int k) {
    if (k < 64) v &= (uint64_t{1} << k) - 1;
    acc_ |= v << bits_;
    if (bits_ + k >= 64) {
      out_[n_++] = acc_;
      acc_ = bits_ == 0 ? 0 : v >> (64 - bits_);
      bits_ = bits_ + k - 64;
    } else {
      bits_ += k;
    }
  }
  // Words written, the last one padded with zero lanes (0 & 0 = 0).
  size_t Finish() {
    if (bits_ > 0) out_[n_++] = acc_;
    acc_ = 0;
    bits_ = 0;
    return n_;
  }

 private:
  uint64_t* out_;
  uint64_t acc_ = 0;
  int bits_ = 0;
  size_t n_ = 0;
};

}  // namespace

void MulLog::PackLiveLanes() {
  if (partial_.empty()) return;
  const size_t n = and_[0].size();
  // The check is over the set of logged words, in any order the three
  // parties share: the full words fill [0, F) (those at or past F move
  // into the partial words' places below F), the live lanes of the partial
  // words, packed, follow.
  size_t partial_words = 0, live_bits = 0;
  for (const auto& [first, count, live] : partial_) {
    partial_words += count;
    live_bits += count * live;
  }
  const size_t full = n - partial_words;
  std::vector<size_t> holes, sources;  // below F partial, at or past F full
  size_t at = full;
  for (const auto& [first, count, live] : partial_) {
    for (size_t i = first; i < std::min(first + count, full); ++i) holes.push_back(i);
    for (; at < first; ++at) sources.push_back(at);
    at = std::max(at, first + count);
  }
  for (; at < n; ++at) sources.push_back(at);
  const size_t packed_words = (live_bits + 63) / 64;
  dzkp::WordVector packed(packed_words);
  for (auto& v : and_) {
    BitPacker out(packed.data());
    for (const auto& [first, count, live] : partial_) {
      for (size_t i = first; i < first + count; ++i) out.Put(v[i], static_cast<int>(live));
    }
    out.Finish();
    for (size_t k = 0; k < holes.size(); ++k) v[holes[k]] = v[sources[k]];
    std::copy(packed.begin(), packed.end(), v.begin() + full);
    share::Wipe(v.data() + full + packed_words, 8 * (n - full - packed_words));
    v.resize(full + packed_words);
  }
  share::Wipe(packed.data(), 8 * packed.size());
  partial_.clear();
}

void MulLog::Rewind() {
  partial_.clear();
  and_dirty_ = std::max(and_dirty_, and_[0].size());
  for (auto& v : and_) v.resize(0);
  for (auto& v : gf_) {
    share::Wipe(v.data(), v.size());
    v.clear();
  }
  opened_.Reset();
}

void MulLog::Clear() {
  Rewind();
  for (auto& v : and_) share::Wipe(v.data(), 8 * std::min(and_dirty_, v.capacity()));
  for (auto& v : fold_) {
    share::Wipe(v.data(), sizeof(dzkp::Fe) * std::min(fold_dirty_, v.capacity()));
    v.clear();
  }
  and_dirty_ = 0;
  fold_dirty_ = 0;
}

namespace {

// Detaches the context's log while the checks run their own rounds.
class Unlogged {
 public:
  explicit Unlogged(Rep3& ctx) : ctx_(ctx), saved_(ctx.log()) { ctx.set_log(nullptr); }
  ~Unlogged() { ctx_.set_log(saved_); }

 private:
  Rep3& ctx_;
  MulLog* saved_;
};

// The final round: H(opened) to party i-1; compare what party i+1 sends
// with our own.
absl::Status Compare(Rep3& ctx, Sha256& opened, bool local_ok) {
  std::array<uint8_t, 32> ho{}, in{};
  absl::Status st = opened.Final(ho);
  if (!st.ok()) return st;
  st = ctx.channel().Exchange(absl::MakeConstSpan(ho), absl::MakeSpan(in));
  if (!st.ok()) return st;
  const bool same = CRYPTO_memcmp(in.data(), ho.data(), 32) == 0;
  if (!same || !local_ok) {
    absl::Status bad = absl::DataLossError(
        "MPC integrity check failed: a server deviated from the protocol; "
        "batch aborted, nothing released");
    bad.SetPayload(kIntegrityPayload, absl::Cord("1"));
    return bad;
  }
  return absl::OkStatus();
}

using dzkp::Fe;

// A coin: a fresh PRSS random value, opened (one round) and hashed into
// the opened values. Drawn after everything it challenges was sent.
absl::Status Coin(Rep3& ctx, Sha256& opened, uint8_t out[16]) {
  uint8_t c0[16], c1[16];
  ctx.prss().RandomShares(c0, c1, 16);
  absl::Status st = ctx.Reveal(absl::MakeConstSpan(c0, 16), absl::MakeConstSpan(c1, 16),
                               absl::MakeSpan(out, 16));
  share::Wipe(c0, 16);
  share::Wipe(c1, 16);
  if (st.ok()) opened.Update(absl::MakeConstSpan(out, 16));
  return st;
}

// Weak shares -> replicated shares (one message): party i adds its
// zero-share, sends the sum to party i-1 and receives party i+1's.
absl::Status Reshare(Rep3& ctx, const Fe* weak, size_t n, Fe* r0, Fe* r1) {
  uint8_t t[16 * dzkp::kMaxHPoints + 16], in[sizeof t];
  if (n * 16 > sizeof t) return absl::InternalError("Reshare: too many elements");
  ctx.prss().ZeroShare(t, 16 * n);
  for (size_t k = 0; k < n; ++k) {
    dzkp::Store(t + 16 * k, dzkp::Add(dzkp::Load(t + 16 * k), weak[k]));
  }
  absl::Status st = ctx.channel().Exchange(absl::MakeConstSpan(t, 16 * n),
                                           absl::MakeSpan(in, 16 * n));
  if (st.ok()) {
    for (size_t k = 0; k < n; ++k) {
      r0[k] = dzkp::Load(t + 16 * k);
      r1[k] = dzkp::Load(in + 16 * k);
    }
  }
  share::Wipe(t, sizeof t);
  share::Wipe(in, sizeof in);
  return st;
}

void FillFe(const Prf& prf, uint64_t ctr, size_t n, Fe* out) {
  if (n > 0) prf.Fill(ctr, n, reinterpret_cast<uint8_t*>(out));
}

constexpr int kMaxP = dzkp::kMaxHPoints;
// MulLog::fold_: the compressed vectors f0, f1, g0, g1.
using Fold = std::array<dzkp::FeVector, 4>;

// The secrets a verification holds besides the log and its fold vectors;
// Verifier::Verify wipes them on every way out.
struct VerifySecrets {
  explicit VerifySecrets(const dzkp::AndWeights& w) : weights(w) {}
  // The first compression's weights (public); its h has P = 2 g - 1
  // points for g = weights.g words per group.
  const dzkp::AndWeights& weights;
  Fe hw[kMaxP] = {}, h0[kMaxP] = {}, h1[kMaxP] = {}, claim[2] = {}, mx[2], my[2], c[2] = {};
  int G() const { return weights.g; }
  int P() const { return 2 * weights.g - 1; }
  void Wipe() {
    share::Wipe(hw, sizeof hw);
    share::Wipe(h0, sizeof h0);
    share::Wipe(h1, sizeof h1);
    share::Wipe(claim, sizeof claim);
    share::Wipe(mx, sizeof mx);
    share::Wipe(my, sizeof my);
    share::Wipe(c, sizeof c);
  }
};

// Round 1: the first compression's weights from coin c1.
void FirstWeights(const uint8_t* coin, size_t groups, dzkp::AndWeights& w) {
  const Prf prf(coin);
  FillFe(prf, 0, w.g, w.tau);
  // nu: two per PRF block.
  const size_t blocks = (groups + 1) / 2;
  Reserve(w.nu, 2 * blocks);
  w.nu.resize(2 * blocks);
  if (blocks > 0) {
    prf.Fill(dzkp::kMaxGroupWords, blocks, reinterpret_cast<uint8_t*>(w.nu.data()));
  }
  w.nu.resize(groups);
}

// Round 2: h(e_1) .. h(e_{P-1}) and the mask's product, reshared.
absl::Status FirstLevelProof(Rep3& ctx, const dzkp::AndShares& s,
                             const dzkp::AndWeights& w, VerifySecrets& v) {
  dzkp::FirstLevelH(s, w, v.hw, v.claim);
  {
    uint8_t r0[32], r1[32];
    ctx.prss().RandomShares(r0, r1, 32);
    v.mx[0] = dzkp::Load(r0), v.mx[1] = dzkp::Load(r1);
    v.my[0] = dzkp::Load(r0 + 16), v.my[1] = dzkp::Load(r1 + 16);
    share::Wipe(r0, 32);
    share::Wipe(r1, 32);
    dzkp::Wide t;
    dzkp::MulAcc(t, v.mx[0], dzkp::Add(v.my[0], v.my[1]));
    dzkp::MulAcc(t, v.mx[1], v.my[0]);
    v.hw[v.P() - 1] = dzkp::Reduce(t);
  }
  return Reshare(ctx, v.hw, static_cast<size_t>(v.P()), v.h0, v.h1);
}

// Round 3, from coin c2: r, and the claim h(r) into v.c. Returns r.
Fe FirstLevelClaim(const Prf& prf, VerifySecrets& v) {
  Fe r;
  FillFe(prf, 0, 1, &r);
  // Values at e_0 .. e_{P-1}: h(e_0) = claim - h(e_1) - ... - h(e_{G-1}).
  const int P = v.P(), G = v.G();
  Fe v0[kMaxP], v1[kMaxP];
  v0[0] = v.claim[0], v1[0] = v.claim[1];
  for (int p = 1; p < P; ++p) {
    v0[p] = v.h0[p - 1], v1[p] = v.h1[p - 1];
    if (p < G) v0[0] = dzkp::Add(v0[0], v0[p]), v1[0] = dzkp::Add(v1[0], v1[p]);
  }
  dzkp::Interpolate(P, v0, v1, r, v.c);
  share::Wipe(v0, sizeof v0);
  share::Wipe(v1, sizeof v1);
  return r;
}

// Round 3, from coin c2: the weights w'_k of the ng GF(2^128) products
// (log gf, from element `at` of the fold) and w'_m of the mask; adds sum
// w'_k z_k + w'_m z' to the claim v.c.
void FoldGfProducts(const Prf& prf, const std::array<std::vector<uint8_t>, 6>& Gf,
                    size_t ng, size_t at, Fold& fold, VerifySecrets& v) {
  auto& [f0, f1, g0, g1] = fold;
  std::vector<Fe> wk(ng + 1);
  FillFe(prf, 1, ng + 1, wk.data());
  dzkp::Wide acc[2];
  for (size_t k = 0; k < ng; ++k, ++at) {
    const size_t o = 16 * k;
    f0[at] = dzkp::Mul(wk[k], dzkp::FromGcm(Gf[0].data() + o));
    f1[at] = dzkp::Mul(wk[k], dzkp::FromGcm(Gf[1].data() + o));
    g0[at] = dzkp::FromGcm(Gf[2].data() + o);
    g1[at] = dzkp::FromGcm(Gf[3].data() + o);
    dzkp::MulAcc(acc[0], wk[k], dzkp::FromGcm(Gf[4].data() + o));
    dzkp::MulAcc(acc[1], wk[k], dzkp::FromGcm(Gf[5].data() + o));
  }
  // The mask: its product came back reshared as the last element.
  f0[at] = dzkp::Mul(wk[ng], v.mx[0]);
  f1[at] = dzkp::Mul(wk[ng], v.mx[1]);
  g0[at] = v.my[0];
  g1[at] = v.my[1];
  dzkp::MulAcc(acc[0], wk[ng], v.h0[v.P() - 1]);
  dzkp::MulAcc(acc[1], wk[ng], v.h1[v.P() - 1]);
  v.c[0] = dzkp::Add(v.c[0], dzkp::Reduce(acc[0]));
  v.c[1] = dzkp::Add(v.c[1], dzkp::Reduce(acc[1]));
  share::Wipe(acc, sizeof acc);
}

// Rounds 4..: halvings of the n1 fold elements (each a reshare of h(1),
// h(x) and a coin) until at most kTailWords are left, then the last
// compression of those (zero-padded: the fold vectors hold at least
// kTailWords elements) to one: h(e_1) .. h(e_{2T-2}) reshared and a coin.
absl::Status Halvings(Rep3& ctx, Sha256& opened, size_t n1, Fold& fold,
                      VerifySecrets& v) {
  uint8_t coin[16];
  Fe* const fv[2] = {fold[0].data(), fold[1].data()};
  Fe* const gv[2] = {fold[2].data(), fold[3].data()};
  size_t n = n1;
  if (n > dzkp::kTailWords) dzkp::HalveH(fv, gv, n, v.hw);
  for (; n > dzkp::kTailWords; n = (n + 1) / 2) {
    if (absl::Status st = Reshare(ctx, v.hw, 2, v.h0, v.h1); !st.ok()) return st;
    if (absl::Status st = Coin(ctx, opened, coin); !st.ok()) return st;
    const Fe r = dzkp::Load(coin);
    const Fe v0[3] = {dzkp::Add(v.c[0], v.h0[0]), v.h0[0], v.h0[1]};
    const Fe v1[3] = {dzkp::Add(v.c[1], v.h1[0]), v.h1[0], v.h1[1]};
    dzkp::Interpolate(3, v0, v1, r, v.c);
    // The next halving's h(1), h(x) in the same pass as this fold.
    if ((n + 1) / 2 > dzkp::kTailWords) {
      dzkp::HalveFoldH(fv, gv, n, r, v.hw);
    } else {
      dzkp::HalveFold(fv, gv, n, r);
    }
  }
  for (auto& vec : fold) std::fill(vec.begin() + n, vec.begin() + dzkp::kTailWords, dzkp::Zero());
  constexpr int T = dzkp::kTailWords, P = dzkp::kTailHPoints;
  dzkp::TailH(fv, gv, v.hw);
  if (absl::Status st = Reshare(ctx, v.hw, P - 1, v.h0, v.h1); !st.ok()) return st;
  if (absl::Status st = Coin(ctx, opened, coin); !st.ok()) return st;
  // h(e_0) = c - h(e_1) - ... - h(e_{T-1}).
  Fe v0[P], v1[P];
  v0[0] = v.c[0], v1[0] = v.c[1];
  for (int p = 1; p < P; ++p) {
    v0[p] = v.h0[p - 1], v1[p] = v.h1[p - 1];
    if (p < T) v0[0] = dzkp::Add(v0[0], v0[p]), v1[0] = dzkp::Add(v1[0], v1[p]);
  }
  const Fe r = dzkp::Load(coin);
  dzkp::Interpolate(P, v0, v1, r, v.c);
  dzkp::TailFold(fv, gv, r);
  share::Wipe(v0, sizeof v0);
  share::Wipe(v1, sizeof v1);
  return absl::OkStatus();
}

// Opening: the last f, g and claim; *local_ok: the claim is their product.
absl::Status OpenLast(Rep3& ctx, Sha256& opened, const Fold& fold, const Fe c[2],
                      bool* local_ok) {
  const auto& [f0, f1, g0, g1] = fold;
  uint8_t o0[48], o1[48], open[48];
  dzkp::Store(o0, f0[0]), dzkp::Store(o0 + 16, g0[0]), dzkp::Store(o0 + 32, c[0]);
  dzkp::Store(o1, f1[0]), dzkp::Store(o1 + 16, g1[0]), dzkp::Store(o1 + 32, c[1]);
  absl::Status st = ctx.Reveal(absl::MakeConstSpan(o0, 48), absl::MakeConstSpan(o1, 48),
                               absl::MakeSpan(open, 48));
  share::Wipe(o0, 48);
  share::Wipe(o1, 48);
  if (!st.ok()) return st;
  opened.Update(absl::MakeConstSpan(open, 48));
  *local_ok = dzkp::Equal(
      dzkp::Mul(dzkp::Load(open), dzkp::Load(open + 16)), dzkp::Load(open + 32));
  return absl::OkStatus();
}

}  // namespace

absl::Status Verifier::CompareOpened(Rep3& ctx, MulLog& log) {
  Unlogged detach(ctx);
  absl::Status st = Compare(ctx, log.opened_, true);
  log.Clear();
  return st;
}

absl::Status Verifier::Verify(Rep3& ctx, MulLog& log) {
  Unlogged detach(ctx);
  log.PackLiveLanes();
  const size_t nw = log.and_words(), ng = log.gf_products();
  const int g = dzkp::GroupWordsFor(nw);
  const size_t groups = (nw + g - 1) / g;
  const auto& L = log.and_;
  const dzkp::AndShares s{{L[0].data(), L[1].data()},
                          {L[2].data(), L[3].data()},
                          {L[4].data(), L[5].data()},
                          nw};
  auto& [f0, f1, g0, g1] = log.fold_;
  if (log.weights_ == nullptr) log.weights_ = std::make_unique<dzkp::AndWeights>();
  dzkp::AndWeights& w = *log.weights_;
  w.g = g;
  // Every secret this function holds, wiped on every way out.
  VerifySecrets sec(w);
  // The log and the fold vectors are overwritten by the next wave's check
  // and wiped by MulLog::Clear at the end of the batch (a pass over them
  // per wave cost ~10% of the check).
  auto wipe = [&] {
    log.fold_dirty_ = std::max(log.fold_dirty_, f0.size());
    sec.Wipe();
    log.Rewind();
  };
  auto fail = [&](absl::Status st) {
    wipe();
    return st;
  };

  // Round 1: coin c1, the first compression's weights.
  uint8_t coin[16];
  if (absl::Status st = Coin(ctx, log.opened_, coin); !st.ok()) return fail(st);
  FirstWeights(coin, groups, w);
  if (absl::Status st = FirstLevelProof(ctx, s, w, sec); !st.ok()) return fail(st);

  // Round 3: coin c2: r and the weights of the GF(2^128) products and the
  // mask. The new claim: h(r) + sum w'_k z_k + w'_m z'.
  if (absl::Status st = Coin(ctx, log.opened_, coin); !st.ok()) return fail(st);
  const size_t n1 = 64 * groups + ng + 1;
  const size_t len = std::max<size_t>(n1, dzkp::kTailWords);  // Halvings' padding
  for (auto* v : {&f0, &f1, &g0, &g1}) {
    Reserve(*v, len);
    v->resize(len);
  }
  {
    const Prf prf(coin);
    const Fe r = FirstLevelClaim(prf, sec);
    if (groups > 0) dzkp::FirstLevelFold(s, w, r, f0.data(), f1.data(), g0.data(), g1.data());
    FoldGfProducts(prf, log.gf_, ng, 64 * groups, log.fold_, sec);
  }

  if (absl::Status st = Halvings(ctx, log.opened_, n1, log.fold_, sec); !st.ok())
    return fail(st);
  bool local_ok = false;
  if (absl::Status st = OpenLast(ctx, log.opened_, log.fold_, sec.c, &local_ok); !st.ok())
    return fail(st);

  // Last round: compare.
  absl::Status st = Compare(ctx, log.opened_, local_ok);
  wipe();
  return st;
}

}  // namespace kmpc::protocol
