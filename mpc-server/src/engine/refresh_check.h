// The check of a refresh's or a rebuild's new sharing before any party
// reports it (engine/refresh.h, "Checking the new sharing"): internal to
// refresh.cc and rebuild.cc, in its own file so that the exchange code
// stays short.
#ifndef KMPC_ENGINE_REFRESH_CHECK_H_
#define KMPC_ENGINE_REFRESH_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "net/channel.h"

namespace kmpc::engine {

// This party's side of one check. All buffers hold the live pairs'
// components in the exchange's layout (per pair its round keys, its
// powers of H, then for an aes*-cts key each dealt material entry's share
// in the record's order: every shared component of every key, so the check
// covers all of them) and have the same size on the three parties.
struct NewSharing {
  // The new view: component 0 (share i) and component 1 (share i+1).
  absl::Span<const uint8_t> new0, new1;
  // Refresh only (empty in a rebuild): each component's change, new ^ old.
  absl::Span<const uint8_t> delta0, delta1;
  // False when this party already found something wrong in the run (its
  // verdict is then "refuse"; the rounds are run all the same, in step).
  bool local_ok = true;
};

// Runs the check's five ring rounds (refresh.h). OK only if this party's
// own checks passed and neither neighbour's verdict refused; otherwise an
// integrity failure (protocol::IsIntegrityFailure) naming no secret, or a
// channel error. `context` binds every hash and tag to this run (batch id,
// sequence number, rebuild party).
absl::Status CheckNewSharing(net::RingChannel& channel, absl::Span<const uint8_t> context,
                             const NewSharing& mine);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_REFRESH_CHECK_H_
