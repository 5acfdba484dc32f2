// Rebuilding a lost party (refresh.h, rebuild_party): the two survivors
// give a party with an empty store a view of every pair that goes ahead
// and re-randomise their own, without any key being reconstructed
// anywhere; the new views' copies are checked (refresh_check.h) before
// any party returns one. The protocol and why it leaks nothing are in
// refresh.h.
#ifndef KMPC_ENGINE_REBUILD_H_
#define KMPC_ENGINE_REBUILD_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/refresh.h"
#include "engine/refresh_agreement.h"
#include "net/channel.h"

namespace kmpc::engine::refresh {

// len bytes of AES-256-CTR(seed) keystream, counter block `stream` (the
// masks s, t and the pad p are three streams).
absl::Status Expand(const std::array<uint8_t, 32>& seed, uint8_t stream,
                    std::vector<uint8_t>& out, size_t len);

// The rebuild of party `lost` for the pairs that go ahead (plan, agreed by
// AgreeOnRefresh; survivor_views: on the lost party, the survivors' views).
// `deviated`: a forwarded agreement message failed its tag on this party,
// whose verdict in the check then refuses, so neither honest party keeps
// the new sharing.
absl::StatusOr<std::vector<RefreshOutcome>> RebuildExchange(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const std::vector<Plan>& plan, int lost,
    const std::vector<uint8_t>& survivor_views, bool deviated);

}  // namespace kmpc::engine::refresh

#endif  // KMPC_ENGINE_REBUILD_H_
