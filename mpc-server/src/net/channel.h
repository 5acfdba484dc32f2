// The ring between the three MPC servers, as seen by one party.
//
// Party i (0, 1, 2) holds the replicated shares (s_i, s_{i+1}) and, in every
// interactive step of the protocol (AND layer, GF(2^128) multiplication,
// reveal among servers, batch digest comparison), sends exactly one message
// to party i-1 ("prev") and receives exactly one from party i+1 ("next")
// (Araki et al., CCS 2016, section 2.2). The protocol is deterministic, so the
// receiver always knows the exact size of the message it expects.
//
// Implementations: InMemoryRing (tests, three parties in one process) and the
// TLS-over-TCP ring (mpc-server/src/net/tls_*), one RingChannel per worker.
#ifndef KMPC_NET_CHANNEL_H_
#define KMPC_NET_CHANNEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kmpc::net {

class RingChannel {
 public:
  virtual ~RingChannel() = default;

  // This party's index in the ring (0, 1 or 2).
  virtual int party() const = 0;

  // Sends one message to party i-1. May return before the peer read it.
  virtual absl::Status SendToPrev(absl::Span<const uint8_t> msg) = 0;

  // Receives one message from party i+1 into `out`. Fails (and never blocks
  // beyond the channel's deadline) if the peer is gone, the message is
  // malformed, or its size differs from out.size(): UNAVAILABLE for a lost
  // peer or a timeout, DATA_LOSS for a malformed frame.
  virtual absl::Status RecvFromNext(absl::Span<uint8_t> out) = 0;

  // Send then receive in one call; implementations may overlap the two.
  virtual absl::Status Exchange(absl::Span<const uint8_t> to_prev,
                                absl::Span<uint8_t> from_next) {
    absl::Status s = SendToPrev(to_prev);
    if (!s.ok()) return s;
    return RecvFromNext(from_next);
  }
};

}  // namespace kmpc::net

#endif  // KMPC_NET_CHANNEL_H_
