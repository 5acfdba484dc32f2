// Share refresh (refresh.h): agreement on the pairs (refresh_agreement.h),
// then one zero-sharing round per batch, or the rebuild of a lost party
// (rebuild.h). Secret buffers (masks, masked shares) are wiped on every
// way out.
#include "engine/refresh.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/rebuild.h"
#include "engine/refresh_agreement.h"
#include "engine/refresh_check.h"
#include "engine/refresh_components.h"
#include "protocol/prss.h"
#include "protocol/verify.h"

namespace kmpc::engine {
namespace refresh {
namespace {

// The refresh proper (no rebuild) of the pairs that go ahead: one
// zero-sharing round. `deviated` as for RebuildExchange.
absl::StatusOr<std::vector<RefreshOutcome>> RefreshExchange(
    net::RingChannel& channel, protocol::Prss& prss, absl::Span<const uint8_t> batch_id,
    uint64_t seq, absl::Span<const RefreshItem> items, const std::vector<Plan>& plan,
    bool deviated) {
  const int me = channel.party();
  std::vector<RefreshOutcome> out(items.size());
  size_t total = 0;
  for (size_t j = 0; j < plan.size(); ++j) {
    out[j].status = plan[j].status;
    out[j].detail = plan[j].detail;
    if (plan[j].live()) total += ComponentBytes(*plan[j].key);
  }
  if (total == 0) return out;  // nothing goes ahead, on all three parties

  Buffers buf;
  buf.out.resize(total);
  buf.in.resize(total);
  buf.mask.resize(total);
  prss.ZeroShare(buf.mask.data(), total);
  size_t pos = 0;
  for (const Plan& w : plan) {
    if (!w.live()) continue;
    for (const auto* comp : Components(*w.key, 0)) {
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
    if (absl::Status st =
            NewDealId(batch_id, seq, items[j], w.key->deal_id.data(), ks->deal_id);
        !st.ok())
      return st;
    ks->origin_deal_id = w.key->Origin();
    ks->kind = w.key->kind;  // a copy is the same kind of key (the record's)
    TakeComponents(buf, w.key->round_keys[0].size(), w.key->h_powers[0].size(),
                   LayoutOf(*w.key), pos, *ks);
    out[j].shares = std::move(ks);
  }
  // The new sharing checked before anyone reports it (refresh.h): copies,
  // and each component's change (component 0's is the mask; component 1's
  // is new ^ old) a sharing of zero.
  Buffers delta;  // delta.out: component 1's change
  delta.out.reserve(total);
  for (const Plan& w : plan)
    if (w.live())
      for (const auto* comp : Components(*w.key, 1))
        delta.out.insert(delta.out.end(), comp->begin(), comp->end());
  for (size_t k = 0; k < total; ++k) delta.out[k] ^= buf.in[k];
  const NewSharing check{buf.out, buf.in, buf.mask, delta.out, !deviated};
  if (absl::Status st =
          CheckNewSharing(channel, CheckContext(batch_id, seq, kNoRebuild), check);
      !st.ok())
    return st;
  return out;
}

}  // namespace
}  // namespace refresh

absl::StatusOr<std::vector<RefreshOutcome>> RefreshShares(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const RefreshLookup& lookup,
    int rebuild_party) {
  if (items.size() > kMaxRefreshPairs)
    return absl::InvalidArgumentError(absl::StrCat(
        "a refresh batch holds at most ", kMaxRefreshPairs, " pairs"));
  if (rebuild_party != kNoRebuild && (rebuild_party < 0 || rebuild_party > 2))
    return absl::InvalidArgumentError("the party to rebuild must be 0, 1 or 2");
  const int me = channel.party();
  std::vector<refresh::Plan> plan(items.size());
  refresh::CheckInputs(items, plan);
  for (size_t j = 0; j < items.size(); ++j)
    if (plan[j].live())
      if (absl::Status st = refresh::LookUp(me, items[j], lookup, plan[j]); !st.ok())
        return st;

  // Fresh PRSS keys for this refresh only (the forwarding tags' keys, then
  // the masks): the masks never depend on keys an earlier (possibly since
  // evicted) intruder saw; they are wiped when `prss` goes.
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  refresh::Agreement a{channel, *prss, rebuild_party};
  std::vector<uint8_t> survivor_views;  // on the rebuilt party only
  absl::StatusOr<std::vector<RefreshOutcome>> out =
      [&]() -> absl::StatusOr<std::vector<RefreshOutcome>> {
    if (absl::Status st =
            refresh::AgreeOnRefresh(a, batch_id, seq, items, plan, survivor_views);
        !st.ok())
      return st;
    if (rebuild_party != kNoRebuild)
      return refresh::RebuildExchange(channel, batch_id, seq, items, plan, rebuild_party,
                                      survivor_views, a.deviated);
    return refresh::RefreshExchange(channel, *prss, batch_id, seq, items, plan, a.deviated);
  }();
  // A forwarded message failed its tag: whatever came after, the refresh
  // fails here (no new view is stored; the old ones stay as they are).
  if (a.deviated) return protocol::IntegrityFailure();
  return out;
}

}  // namespace kmpc::engine
