// The pairs of a refresh or rebuild (refresh.h) and their agreement: every
// party's view of every pair from its store, the views compared on the
// ring (the engine's two rounds, agreement.h, without counters; what a
// party forwards carries its originator's tag), and every pair's outcome
// decided alike on the three parties.
#ifndef KMPC_ENGINE_REFRESH_AGREEMENT_H_
#define KMPC_ENGINE_REFRESH_AGREEMENT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/refresh.h"
#include "net/channel.h"
#include "protocol/prss.h"

namespace kmpc::engine::refresh {

// One party's view of one pair, compared among the three parties:
//   code (1: KeyView, agreement.h; kViewNone for a malformed pair, decided
//   from the inputs alone) | cipher (1) | deal_id (16) |
//   metadata digest (32, MetaDigest: the public metadata and, for an
//   aes*-cts key, its material's layout) | origin deal id (16,
//   KeyShares::Origin: the new key's origin) | new id taken (1)
constexpr size_t kViewBytes = 67;
constexpr size_t kViewOrigin = 50;

// One pair's outcome so far and this party's facts about it.
struct Plan {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  std::shared_ptr<const KeyShares> key;
  std::string public_meta;  // this party's (RefreshSource::public_meta)
  std::array<uint8_t, kViewBytes> view{};
  bool live() const { return status == pb::JOB_OK; }
  void Fail(pb::JobStatus s, std::string why) {
    status = s;
    detail = std::move(why);
    key.reset();
  }
};

// The pairs' checks that depend on the inputs only (the same on all
// parties): id sizes, old != new, no new id twice or also an old id.
void CheckInputs(absl::Span<const RefreshItem> items, std::vector<Plan>& plan);

// This party's view of pair j (a live plan): sets w.key when usable.
absl::Status LookUp(int party, const RefreshItem& item, const RefreshLookup& lookup,
                    Plan& w);

// The pair's outcome from the three views (views[p] is party p's): the same
// on every party, since all three hold the same three views.
void Decide(Plan& w, const std::array<const uint8_t*, 3>& views);

// Decide for a rebuild of party `lost`: its store is empty, so its view is
// replaced by the first survivor's (the survivors must agree between
// themselves); only its "new id taken" byte counts.
void DecideRebuild(Plan& w, const std::array<const uint8_t*, 3>& views, int lost);

// The public state of one refresh's agreement: the refresh's PRSS (the
// forwarding tags' keys) and whether a forwarded message failed its tag
// (agreement.h ForwardedOrMine), which fails the refresh as an integrity
// failure once it has run in step (RefreshShares).
struct Agreement {
  net::RingChannel& channel;
  protocol::Prss& prss;
  int rebuild_party;
  bool deviated = false;
};

// Agreement (the engine's two rounds, agreement.h, without counters; what
// a party forwards carries its originator's tag, ForwardTag), then every
// pair's outcome decided alike on the three parties. Same pairs with
// different views, or a rebuild: the views are exchanged too (tagged as
// the headers), and on the rebuilt party survivor_views gets the
// survivors' views of every pair (cipher, dealing id and metadata digest
// of what it receives).
absl::Status AgreeOnRefresh(Agreement& a, absl::Span<const uint8_t> batch_id, uint64_t seq,
                            absl::Span<const RefreshItem> items, std::vector<Plan>& plan,
                            std::vector<uint8_t>& survivor_views);

}  // namespace kmpc::engine::refresh

#endif  // KMPC_ENGINE_REFRESH_AGREEMENT_H_
