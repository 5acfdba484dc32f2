// The pairs of a refresh and their agreement (refresh_agreement.h).
#include "engine/refresh_agreement.h"

#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "engine/agreement.h"
#include "engine/refresh_components.h"

namespace kmpc::engine::refresh {
namespace {

// This party's agreement header of a refresh: the digests of the inputs and
// of its views of the pairs.
absl::Status RefreshHeader(absl::Span<const uint8_t> batch_id, uint64_t seq,
                           absl::Span<const RefreshItem> items, int rebuild_party,
                           const std::vector<Plan>& plan, AgreementHeader& mine) {
  static constexpr char kTag[] = "kmpc-refresh-v1";
  Digest inputs, views;
  inputs.Update(kTag, sizeof kTag);
  inputs.Update(batch_id.data(), batch_id.size());
  inputs.U64(seq);
  inputs.U64(items.size());
  inputs.U64(static_cast<uint64_t>(rebuild_party + 1));
  for (const RefreshItem& it : items) {
    inputs.Str(it.old_key_id);
    inputs.Str(it.new_key_id);
  }
  for (const Plan& w : plan) views.Update(w.view.data(), kViewBytes);
  if (absl::Status st = inputs.Final(mine.inputs); !st.ok()) return st;
  return views.Final(mine.keys);
}

// Same pairs, different views (or a rebuild): exchange the views, each
// party's tagged for the party that receives it forwarded (as the
// headers), and fail the same pairs on all three parties. On the rebuilt
// party, survivor_views gets the survivors' views of every pair (cipher,
// dealing id and metadata digest of what it receives).
absl::Status ExchangeViews(Agreement& a, std::vector<Plan>& plan,
                           std::vector<uint8_t>& survivor_views) {
  net::RingChannel& channel = a.channel;
  const bool rebuild = a.rebuild_party != kNoRebuild;
  const int me = channel.party();
  const size_t n = kViewBytes * plan.size();
  std::vector<uint8_t> vmine(n + kForwardTagSize), vnext(n + kForwardTagSize),
      vnext2(n + kForwardTagSize);
  for (size_t j = 0; j < plan.size(); ++j)
    std::memcpy(&vmine[kViewBytes * j], plan[j].view.data(), kViewBytes);
  const ForwardTagKeys keys(a.prss);
  ForwardTag(keys.k1, absl::MakeConstSpan(vmine.data(), n), vmine.data() + n);
  if (absl::Status st = channel.Exchange(vmine, absl::MakeSpan(vnext)); !st.ok())
    return st;
  if (absl::Status st = channel.Exchange(vnext, absl::MakeSpan(vnext2)); !st.ok())
    return st;
  if (!ForwardedOrMine(keys.k0, absl::MakeSpan(vnext2), vmine)) a.deviated = true;
  for (size_t j = 0; j < plan.size(); ++j) {
    std::array<const uint8_t*, 3> v;
    v[me] = &vmine[kViewBytes * j];
    v[(me + 1) % 3] = &vnext[kViewBytes * j];
    v[(me + 2) % 3] = &vnext2[kViewBytes * j];
    if (rebuild) DecideRebuild(plan[j], v, a.rebuild_party);
    else Decide(plan[j], v);
  }
  if (rebuild && me == a.rebuild_party) {
    vnext.resize(n);  // the views without their tag
    survivor_views = std::move(vnext);
  }
  return absl::OkStatus();
}

}  // namespace

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

absl::Status LookUp(int party, const RefreshItem& item, const RefreshLookup& lookup,
                    Plan& w) {
  RefreshSource src = lookup ? lookup(item) : RefreshSource{};
  uint8_t* v = w.view.data();
  if (!src.old_key.ok() || *src.old_key == nullptr) {
    v[0] = (src.old_key.ok() || absl::IsNotFound(src.old_key.status())) ? kViewMissing
                                                                        : kViewBad;
  } else if (!(*src.old_key)->Validate().ok() || (*src.old_key)->party != party ||
             !UsableLayout(LayoutOf(**src.old_key))) {
    v[0] = kViewBad;
  } else {
    w.key = *src.old_key;
    w.public_meta = src.public_meta;
    v[0] = kViewPresent;
    v[1] = static_cast<uint8_t>(w.key->cipher);
    std::memcpy(v + 2, w.key->deal_id.data(), 16);
    std::array<uint8_t, 32> md;
    if (absl::Status st =
            MetaDigest(IsCts(w.key->cipher), src.public_meta, LayoutOf(*w.key), md);
        !st.ok())
      return st;
    std::memcpy(v + 18, md.data(), 32);
    std::memcpy(v + kViewOrigin, w.key->Origin().data(), 16);
  }
  v[kViewBytes - 1] = src.new_id_taken ? 1 : 0;
  return absl::OkStatus();
}

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

void DecideRebuild(Plan& w, const std::array<const uint8_t*, 3>& views, int lost) {
  std::array<uint8_t, kViewBytes> copy;
  std::memcpy(copy.data(), views[(lost + 1) % 3], kViewBytes);
  copy[kViewBytes - 1] = views[lost][kViewBytes - 1];
  std::array<const uint8_t*, 3> v = views;
  v[lost] = copy.data();
  if (views[lost][0] == kViewPresent) {
    // A party that still holds the key is not lost: refresh instead.
    w.Fail(pb::JOB_MALFORMED,
           absl::StrCat("MPC party ", lost, " still holds this key: it is not a "
                        "new server (refresh instead of rebuilding it)"));
    return;
  }
  Decide(w, v);
}

absl::Status AgreeOnRefresh(Agreement& a, absl::Span<const uint8_t> batch_id, uint64_t seq,
                            absl::Span<const RefreshItem> items, std::vector<Plan>& plan,
                            std::vector<uint8_t>& survivor_views) {
  const int rebuild_party = a.rebuild_party;
  AgreementHeader mine;
  if (absl::Status st = RefreshHeader(batch_id, seq, items, rebuild_party, plan, mine);
      !st.ok())
    return st;
  constexpr size_t kMsg = AgreementHeader::kSize + kForwardTagSize;
  uint8_t raw[kMsg], raw_next[kMsg], raw_next2[kMsg];
  mine.Encode(absl::MakeSpan(raw, AgreementHeader::kSize));
  {
    const ForwardTagKeys keys(a.prss);
    ForwardTag(keys.k1, absl::MakeConstSpan(raw, AgreementHeader::kSize),
               raw + AgreementHeader::kSize);
    if (absl::Status st = a.channel.Exchange(raw, absl::MakeSpan(raw_next)); !st.ok())
      return st;
    if (absl::Status st = a.channel.Exchange(raw_next, absl::MakeSpan(raw_next2)); !st.ok())
      return st;
    if (!ForwardedOrMine(keys.k0, absl::MakeSpan(raw_next2), raw)) a.deviated = true;
  }
  auto next = AgreementHeader::Decode(absl::MakeConstSpan(raw_next, AgreementHeader::kSize));
  if (!next.ok()) return next.status();
  auto next2 = AgreementHeader::Decode(absl::MakeConstSpan(raw_next2, AgreementHeader::kSize));
  if (!next2.ok()) return next2.status();
  if (!mine.SameInputs(*next) || !mine.SameInputs(*next2))
    return absl::AbortedError(
        "refresh refused: the MPC servers received different refresh requests");
  // A rebuild always exchanges the views: the rebuilt party learns the
  // survivors' views.
  if (rebuild_party != kNoRebuild || !mine.SameKeys(*next) || !mine.SameKeys(*next2))
    return ExchangeViews(a, plan, survivor_views);
  for (Plan& w : plan) Decide(w, {w.view.data(), w.view.data(), w.view.data()});
  return absl::OkStatus();
}

}  // namespace kmpc::engine::refresh
