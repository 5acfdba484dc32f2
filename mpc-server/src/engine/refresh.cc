// Share refresh (refresh.h): agreement on the pairs, then one zero-sharing
// round per batch. Secret buffers (masks, masked shares) are wiped on every
// way out.
#include "engine/refresh.h"

#include <openssl/evp.h>

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "engine/agreement.h"
#include "protocol/prss.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// One party's view of one pair, compared among the three parties:
//   code (1: KeyView, agreement.h; kViewNone for a malformed pair, decided
//   from the inputs alone) | cipher (1) | deal_id (16) |
//   SHA-256(public_meta) (32) | new id taken (1)
constexpr size_t kViewBytes = 51;

struct Digest {
  Digest() : ctx(EVP_MD_CTX_new()) {
    ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  }
  ~Digest() { EVP_MD_CTX_free(ctx); }
  void Update(const void* p, size_t n) {
    if (ok && n > 0) ok = EVP_DigestUpdate(ctx, p, n) == 1;
  }
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(v >> (56 - 8 * k));
    Update(b, 8);
  }
  void Str(const std::string& s) {
    U64(s.size());
    Update(s.data(), s.size());
  }
  absl::Status Final(std::array<uint8_t, 32>& out) {
    unsigned int len = 0;
    if (!ok || EVP_DigestFinal_ex(ctx, out.data(), &len) != 1 || len != 32)
      return absl::InternalError("SHA-256 failed");
    return absl::OkStatus();
  }
  EVP_MD_CTX* ctx;
  bool ok;
};

struct Plan {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  std::shared_ptr<const KeyShares> key;
  std::array<uint8_t, kViewBytes> view{};
  bool live() const { return status == pb::JOB_OK; }
  void Fail(pb::JobStatus s, std::string why) {
    status = s;
    detail = std::move(why);
    key.reset();
  }
};

// The pair's outcome from the three views (views[p] is party p's): the same
// on every party, since all three hold the same three views.
void Decide(Plan& w, const std::array<const uint8_t*, 3>& views) {
  if (views[0][0] == kViewNone && views[1][0] == kViewNone &&
      views[2][0] == kViewNone)
    return;  // malformed: already failed alike
  std::vector<int> taken;
  bool same = true;
  for (int p = 0; p < 3; ++p) {
    if (views[p][kViewBytes - 1] != 0) taken.push_back(p);
    // Everything but the "taken" byte must agree.
    if (std::memcmp(views[p], views[0], kViewBytes - 1) != 0) same = false;
  }
  auto [status, why] = KeyPresence(views);
  if (status != pb::JOB_OK) {
    w.Fail(status, std::move(why));
  } else if (!same) {
    w.Fail(pb::JOB_KEY_INCONSISTENT,
           "the MPC servers hold different dealings or metadata of this key "
           "(deal_id, cipher, kvno or label differ)");
  } else if (!taken.empty()) {
    w.Fail(pb::JOB_MALFORMED,
           absl::StrCat("the new key id is already taken on MPC party ",
                        PartyList(taken)));
  }
}

// The pairs' checks that depend on the inputs only (the same on all
// parties): id sizes, old != new, no new id twice or also an old id.
void CheckInputs(absl::Span<const RefreshItem> items, std::vector<Plan>& plan) {
  std::set<std::string> olds, news;
  for (const RefreshItem& it : items) olds.insert(it.old_key_id);
  for (size_t j = 0; j < items.size(); ++j) {
    const RefreshItem& it = items[j];
    if (it.old_key_id.size() != contract::kKeyIdSize ||
        it.new_key_id.size() != contract::kKeyIdSize) {
      plan[j].Fail(pb::JOB_MALFORMED,
                   absl::StrCat("key ids must be ", contract::kKeyIdSize, " bytes"));
    } else if (olds.count(it.new_key_id) != 0) {
      plan[j].Fail(pb::JOB_MALFORMED, "the new key id is an old key id of the batch");
    } else if (!news.insert(it.new_key_id).second) {
      plan[j].Fail(pb::JOB_MALFORMED, "the new key id appears twice in the batch");
    }
  }
}

// This party's view of pair j (a live plan): sets w.key when usable.
absl::Status LookUp(int party, const RefreshItem& item, const RefreshLookup& lookup,
                    Plan& w) {
  RefreshSource src = lookup ? lookup(item) : RefreshSource{};
  uint8_t* v = w.view.data();
  if (!src.old_key.ok() || *src.old_key == nullptr) {
    v[0] = (src.old_key.ok() || absl::IsNotFound(src.old_key.status())) ? kViewMissing
                                                                        : kViewBad;
  } else if (!(*src.old_key)->Validate().ok() || (*src.old_key)->party != party) {
    v[0] = kViewBad;
  } else {
    w.key = *src.old_key;
    v[0] = kViewPresent;
    v[1] = static_cast<uint8_t>(w.key->cipher);
    std::memcpy(v + 2, w.key->deal_id.data(), 16);
    Digest meta;
    meta.Update(src.public_meta.data(), src.public_meta.size());
    std::array<uint8_t, 32> md;
    if (absl::Status st = meta.Final(md); !st.ok()) return st;
    std::memcpy(v + 18, md.data(), 32);
  }
  v[kViewBytes - 1] = src.new_id_taken ? 1 : 0;
  return absl::OkStatus();
}

// Dealing id of the refreshed key: public, the same on the three parties,
// new for every refresh (the batch id is fresh per request), so that a
// party holding the shares of another run of the same pair is caught by the
// engine's key-view agreement instead of computing garbage.
absl::Status NewDealId(absl::Span<const uint8_t> batch_id, uint64_t seq,
                       const RefreshItem& item, const KeyShares& old,
                       std::array<uint8_t, 16>& out) {
  static constexpr char kTag[] = "kmpc-refresh-deal-v1";
  Digest d;
  d.Update(kTag, sizeof kTag);
  d.Update(batch_id.data(), batch_id.size());
  d.U64(seq);
  d.Str(item.new_key_id);
  d.Update(old.deal_id.data(), old.deal_id.size());
  std::array<uint8_t, 32> h;
  if (absl::Status st = d.Final(h); !st.ok()) return st;
  std::memcpy(out.data(), h.data(), 16);
  return absl::OkStatus();
}

size_t ComponentBytes(const KeyShares& k) {
  return k.round_keys[0].size() + k.h_powers[0].size();
}

// Secret buffers of the exchange, wiped on every way out.
struct Buffers {
  std::vector<uint8_t> out, in, mask;
  ~Buffers() {
    share::Wipe(out);
    share::Wipe(in);
    share::Wipe(mask);
  }
};

}  // namespace

absl::StatusOr<std::vector<RefreshOutcome>> RefreshShares(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const RefreshLookup& lookup) {
  if (items.size() > kMaxRefreshPairs)
    return absl::InvalidArgumentError(absl::StrCat(
        "a refresh batch holds at most ", kMaxRefreshPairs, " pairs"));
  const int me = channel.party();
  std::vector<Plan> plan(items.size());
  CheckInputs(items, plan);
  for (size_t j = 0; j < items.size(); ++j)
    if (plan[j].live())
      if (absl::Status st = LookUp(me, items[j], lookup, plan[j]); !st.ok()) return st;

  // Agreement (the engine's two rounds, agreement.h, without counters).
  AgreementHeader mine;
  {
    static constexpr char kTag[] = "kmpc-refresh-v1";
    Digest inputs, views;
    inputs.Update(kTag, sizeof kTag);
    inputs.Update(batch_id.data(), batch_id.size());
    inputs.U64(seq);
    inputs.U64(items.size());
    for (const RefreshItem& it : items) {
      inputs.Str(it.old_key_id);
      inputs.Str(it.new_key_id);
    }
    for (const Plan& w : plan) views.Update(w.view.data(), kViewBytes);
    if (absl::Status st = inputs.Final(mine.inputs); !st.ok()) return st;
    if (absl::Status st = views.Final(mine.keys); !st.ok()) return st;
  }
  uint8_t raw[AgreementHeader::kSize], raw_next[AgreementHeader::kSize],
      raw_next2[AgreementHeader::kSize];
  mine.Encode(absl::MakeSpan(raw));
  if (absl::Status st = channel.Exchange(raw, absl::MakeSpan(raw_next)); !st.ok())
    return st;
  if (absl::Status st = channel.Exchange(raw_next, absl::MakeSpan(raw_next2)); !st.ok())
    return st;
  auto next = AgreementHeader::Decode(raw_next);
  if (!next.ok()) return next.status();
  auto next2 = AgreementHeader::Decode(raw_next2);
  if (!next2.ok()) return next2.status();
  if (!mine.SameInputs(*next) || !mine.SameInputs(*next2))
    return absl::AbortedError(
        "refresh refused: the MPC servers received different refresh requests");
  if (!mine.SameKeys(*next) || !mine.SameKeys(*next2)) {
    // Same pairs, different views: exchange them, fail the same pairs.
    const size_t n = kViewBytes * plan.size();
    std::vector<uint8_t> vmine(n), vnext(n), vnext2(n);
    for (size_t j = 0; j < plan.size(); ++j)
      std::memcpy(&vmine[kViewBytes * j], plan[j].view.data(), kViewBytes);
    if (absl::Status st = channel.Exchange(vmine, absl::MakeSpan(vnext)); !st.ok())
      return st;
    if (absl::Status st = channel.Exchange(vnext, absl::MakeSpan(vnext2)); !st.ok())
      return st;
    for (size_t j = 0; j < plan.size(); ++j) {
      std::array<const uint8_t*, 3> v;
      v[me] = &vmine[kViewBytes * j];
      v[(me + 1) % 3] = &vnext[kViewBytes * j];
      v[(me + 2) % 3] = &vnext2[kViewBytes * j];
      Decide(plan[j], v);
    }
  } else {
    for (Plan& w : plan) Decide(w, {w.view.data(), w.view.data(), w.view.data()});
  }

  std::vector<RefreshOutcome> out(items.size());
  size_t total = 0;
  for (size_t j = 0; j < plan.size(); ++j) {
    out[j].status = plan[j].status;
    out[j].detail = plan[j].detail;
    if (plan[j].live()) total += ComponentBytes(*plan[j].key);
  }
  if (total == 0) return out;  // nothing goes ahead, on all three parties

  // Fresh PRSS keys for this refresh only: the masks never depend on keys
  // an earlier (possibly since evicted) intruder saw; they are wiped when
  // `prss` goes.
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  Buffers buf;
  buf.out.resize(total);
  buf.in.resize(total);
  buf.mask.resize(total);
  prss->ZeroShare(buf.mask.data(), total);
  size_t pos = 0;
  for (const Plan& w : plan) {
    if (!w.live()) continue;
    for (const auto* comp : {&w.key->round_keys[0], &w.key->h_powers[0]}) {
      for (size_t k = 0; k < comp->size(); ++k)
        buf.out[pos + k] = (*comp)[k] ^ buf.mask[pos + k];
      pos += comp->size();
    }
  }
  if (absl::Status st = channel.Exchange(buf.out, absl::MakeSpan(buf.in)); !st.ok())
    return st;
  pos = 0;
  for (size_t j = 0; j < plan.size(); ++j) {
    const Plan& w = plan[j];
    if (!w.live()) continue;
    auto ks = std::make_shared<KeyShares>();
    ks->party = me;
    ks->cipher = w.key->cipher;
    if (absl::Status st = NewDealId(batch_id, seq, items[j], *w.key, ks->deal_id);
        !st.ok())
      return st;
    const size_t rk = w.key->round_keys[0].size(), hp = w.key->h_powers[0].size();
    ks->round_keys[0].assign(buf.out.begin() + pos, buf.out.begin() + pos + rk);
    ks->round_keys[1].assign(buf.in.begin() + pos, buf.in.begin() + pos + rk);
    pos += rk;
    ks->h_powers[0].assign(buf.out.begin() + pos, buf.out.begin() + pos + hp);
    ks->h_powers[1].assign(buf.in.begin() + pos, buf.in.begin() + pos + hp);
    pos += hp;
    out[j].shares = std::move(ks);
  }
  return out;
}

}  // namespace kmpc::engine
