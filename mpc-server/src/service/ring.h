// What the Scheduler (scheduler.h) needs of the ring between the three
// servers: per worker, a data channel for the engine (net::RingChannel),
// control messages for the scheduling handshake on the same ordered link,
// connection upkeep and byte counters. Implemented over TLS
// (MakeTlsSchedulerRing, net/tls_ring.h) and in memory for tests
// (memory_scheduler_ring.h).
#ifndef KMPC_SERVICE_RING_H_
#define KMPC_SERVICE_RING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "net/channel.h"

namespace kmpc::net {
class TlsRing;
}

namespace kmpc::service {

// One worker's link: it sends to party i-1 and receives from party i+1;
// control and data messages travel in one order on it. Used by one thread.
class WorkerRing {
 public:
  virtual ~WorkerRing() = default;

  // The channel the worker's Engine runs on.
  virtual net::RingChannel& data() = 0;
  // Ensures the link is up (re-dialing a dropped connection).
  virtual absl::Status Connect(absl::Time deadline) = 0;
  virtual bool connected() const = 0;
  // Changes whenever the link was dropped or replaced: PRSS keys exchanged
  // over an older generation are stale.
  virtual uint64_t generation() const = 0;
  // True if a message from party i+1 is waiting (within `wait`).
  virtual bool InboundReadable(absl::Duration wait) = 0;
  // Starts a batch: data messages carry `seq`; no receive or flush of the
  // batch waits past `deadline` (its client's: InfiniteFuture for none).
  virtual void BeginBatch(uint32_t seq, absl::Time deadline) = 0;
  virtual absl::Status SendControl(uint32_t seq, absl::Span<const uint8_t> msg) = 0;
  // The next message, which must be a control message; waits until
  // `deadline`.
  virtual absl::StatusOr<std::vector<uint8_t>> RecvControl(uint32_t* seq,
                                                           absl::Time deadline) = 0;
  // Whether this batch's receives may busy-poll briefly before they sleep:
  // RecvControl's and the small data ones
  // (net::TlsRingChannel::set_spin_control, set_spin_data); a hint.
  virtual void SpinBatch(bool on) { (void)on; }
  // When a spinning receive may spin through the wait of peers rooms
  // apart (net::TlsRingChannel::set_spin_through): asked at each such
  // wait, from this worker's thread; a hint.
  virtual void SpinThroughWhile(std::function<bool()> allowed) { (void)allowed; }
  // Waits until everything sent has left this party.
  virtual absl::Status Flush(absl::Time deadline) = 0;
  // Drops the link after a failed batch (the neighbours fail fast).
  virtual void Reset() = 0;

  struct Counters {
    uint64_t bytes = 0;      // payload + framing sent
    uint64_t messages = 0;   // data messages sent
    uint64_t tcp_bytes = 0;  // on the wire (TLS records); 0 in memory
  };
  virtual Counters counters() const = 0;
};

// One party's ring: one WorkerRing per worker.
class SchedulerRing {
 public:
  virtual ~SchedulerRing() = default;
  virtual int party() const = 0;
  virtual int workers() const = 0;
  virtual WorkerRing& worker(int w) = 0;
  virtual bool AllConnected() const = 0;
  // How long a receive of one message may wait.
  virtual absl::Duration recv_timeout() const = 0;
};

// The TLS ring as a SchedulerRing; `ring` must outlive the result.
std::unique_ptr<SchedulerRing> MakeTlsSchedulerRing(net::TlsRing* ring);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_RING_H_
