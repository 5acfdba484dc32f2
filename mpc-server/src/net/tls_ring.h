// The ring between the three servers over TLS 1.3 / TCP (channel.h).
//
// Party i dials party i-1 ("prev") once per worker and writes only on that
// connection; it accepts one connection per worker from party i+1 ("next")
// and only reads on it. Both ends check the peer's certificate identity
// (PartyIdentity) and a hello naming the party and worker.
//
// Send and receive overlap in one thread with non-blocking I/O: SendToPrev
// encrypts the message into the connection's output buffer and writes what
// the kernel takes; while a receive waits, buffered output keeps flowing;
// Flush() (end of batch) drains the rest. No party ever blocks in a send
// while it should be reading, so three parties sending large messages at
// once cannot deadlock. A receive with no output left to write sleeps in
// the socket read itself (wait_in_read), one syscall per wait.
//
// Failure model: any I/O error, timeout or malformed frame drops both of the
// channel's connections (so the neighbours fail fast too) and returns
// UNAVAILABLE / DATA_LOSS; the next Connect() re-dials prev and waits for
// next to re-dial, so a restarted peer rejoins at the next batch.
// Before each batch a channel also re-checks both peers' certificates
// (TlsFiles::check_peer: the CRL as reloaded since the handshake) and drops
// a revoked one, which its re-dial or accept then refuses.
#ifndef KMPC_NET_TLS_RING_H_
#define KMPC_NET_TLS_RING_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/channel.h"
#include "net/frame.h"
#include "net/tls_conn.h"

namespace kmpc::net {

// Why the ring listener turned a connection away (TlsRing::ListenLoop,
// HandleAccepted).
enum class RingReject {
  kNoSlot,    // no handshake slot free (total or per-source limit)
  kSilent,    // sent nothing within the first-bytes deadline
  kTls,       // the TLS handshake failed
  kIdentity,  // a certificate of the CA, but not kmpc-party-<next>
  kPin,       // next's certificate key is not one of next_pins
  kHello,     // malformed ring hello after the handshake
};
inline constexpr int kRingRejectReasons = 6;
// "no_slot", "silent", "tls", "identity", "pin", "hello": the reason label
// of kmpc_ring_rejected_connections_total (service/metrics.h).
const char* RingRejectName(RingReject r);

struct TlsRingOptions {
  int party = 0;
  int workers = 1;
  std::string listen_addr;  // host:port of this party's ring listener
  std::string prev_addr;    // host:port of party (i-1)'s ring listener
  // Host (a name or address, optionally :port, which is ignored) that
  // party (i+1) dials this listener from. Connections from its addresses
  // (resolved at Start) get handshake slots of their own, so a flood from
  // other addresses cannot keep the neighbour out (ListenLoop). Empty: none
  // reserved; the per-source limit still applies.
  std::string next_host;
  // Output queued for prev and not yet taken by the kernel is capped here:
  // past it the channel fails (UNAVAILABLE: the batch fails, the next
  // re-dials). The ring gates every party on its successor's replies, so an
  // honest prev lets about two rounds' messages queue up at most, and no
  // round of a batch of kMaxBatchBlocks (2^20) blocks sends more than a few
  // tens of bytes per block: an AND layer is 1 bit per AND (engine.h: 1020
  // bytes per AES-128 block over 30 layers with the 51-AND S-box, 640 over
  // 60 with the 32-AND one; waves of wave_lanes blocks send less), a
  // GF(2^128) product round 16 bytes per block. 128 MiB leaves room above
  // that; without a cap, a prev that stops reading made the queue grow to a
  // whole batch's egress (~0.7 GB for 2^20 AES-128 blocks).
  size_t max_queued_bytes = size_t{128} << 20;
  // Optional pins (SpkiPin, tls_conn.h) of the neighbours' certificate
  // keys. Empty: any certificate of the CA with the party's CN. Non-empty:
  // the neighbour's key must be one of them too, checked when dialing prev
  // (PERMISSION_DENIED naming the party) and when accepting next (refused).
  // Without pins the CA's key holder can impersonate a party to the other
  // two (docs/security-model.md).
  std::vector<SpkiPin> prev_pins;
  std::vector<SpkiPin> next_pins;
  TlsFiles tls;
  absl::Duration recv_timeout = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(5);
  // A receive of a data message of at most spin_max_bytes busy-polls up to
  // spin_us before it sleeps (0: never). Small messages are the rounds of
  // latency-bound batches: the peer's reply comes within tens of
  // microseconds, and a sleep/wake-up per round costs about as much. Large
  // messages (throughput-bound batches) sleep at once, so spinning never
  // takes CPU from the co-located parties when it is the bottleneck; so do
  // small ones while set_spin_data(false) (a batch that is not
  // latency-bound, as the scheduler decides).
  int spin_us = 0;
  size_t spin_max_bytes = 3072;
  // A spinning receive whose recent waits (WaitHistory) were longer than
  // spin_us: up to a median of spin_through_us (servers rooms apart, a
  // one-way delay of up to ~1 ms), where set_spin_through allows it, it
  // spins through the wait, until half a spin past the longest recent one
  // (spin_through_us at most); otherwise, once the early waits too are
  // longer than spin_us, it first sleeps until spin_us before the expected
  // arrival, then spins (2 x spin_us at most), and else spins spin_us and
  // sleeps. The first two pay no wake-up after a sleep (tens of us on a
  // VM, each of a login's ~2,200 rounds); the spin through costs the
  // server a core while a latency-bound batch waits on its peers, never
  // while a large one does (spin_max_bytes, and the scheduler's
  // set_spin_data). false: spin spin_us first, then sleep. Every spin ends
  // at the receive's deadline and on Abort().
  bool spin_late = true;
  int spin_through_us = 1500;  // at most kMaxSpinThroughUs
  static constexpr int kMaxSpinThroughUs = 10000;
  // A receive with no output to drain waits in the socket read itself
  // (TlsConn::UseBlockingReads) rather than in poll(); false: poll, as a
  // control for benchmarks.
  bool wait_in_read = true;
  // Every rejected connection is counted (TlsRing::rejected, on_reject);
  // it is logged (WARNING) at most once per reason per reject_log_interval,
  // that line giving how many were not logged since the previous one. A
  // flood of connections from any number of source addresses thus writes
  // at most kRingRejectReasons lines per interval.
  absl::Duration reject_log_interval = absl::Seconds(10);
  // Called (from the listener's threads) once per rejected connection,
  // e.g. to count it in a metric; must be thread-safe. May be empty.
  std::function<void(RingReject)> on_reject;
};

// When a spinning receive of a ring channel expects its next message, from
// its last kWaits waits. A masked Run's waits between rooms are bimodal
// (messages already sent while this party computed, and a one-way delay
// for the rest), so the median tells the peers' distance: up to `through`
// the receive spins through the wait; past it (rounds of milliseconds,
// where a wake-up is a small part of the wait) it sleeps until `spin`
// before the early waits (the second least, so that one short wait does
// not move it) and spins past the median by half a spin, so a wake-up
// after the sleep (a timer's, tens of us late on a VM) comes before the
// message, not after it.
class WaitHistory {
 public:
  static constexpr size_t kWaits = 16;
  void Add(absl::Duration wait);
  struct Plan {
    absl::Duration sleep;       // before spinning
    absl::Duration spin_until;  // from the wait's start
  };
  // Before kWaits / 2 waits are in, or with a median of at most `spin`
  // (one site): no sleep, spin_until = spin. A median up to `through`: no
  // sleep, spin_until = the longest wait + spin / 2, at most `through`.
  // Past it, once the second least passes `spin`: sleep = that - spin,
  // spin_until = max(that, median + spin / 2), at most that + spin (waits
  // that vary widely sleep the rest); otherwise as one site.
  Plan PlanFor(absl::Duration spin,
               absl::Duration through = absl::ZeroDuration()) const;

 private:
  std::array<absl::Duration, kWaits> waits_{};
  size_t n_ = 0;
};

class TlsRing;

class TlsRingChannel final : public RingChannel {
 public:
  int party() const override { return party_; }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override;
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override;
  absl::Status Exchange(absl::Span<const uint8_t> to_prev,
                        absl::Span<uint8_t> from_next) override;

  // Ensures both connections are up (re-dialing prev, waiting for next).
  absl::Status Connect(absl::Time deadline);
  // Starts a batch: data frames carry `seq`, steps count from 0. A data
  // receive waits recv_timeout at most, and never past `deadline` (the
  // batch's client has given up by then; a hung peer then fails the batch
  // at that deadline, not recv_timeout later).
  void BeginBatch(uint32_t seq, absl::Time deadline = absl::InfiniteFuture());
  // Control messages (batch scheduling), variable length up to
  // kMaxControlPayload; RecvControl waits until `deadline`.
  absl::Status SendControl(uint32_t seq, absl::Span<const uint8_t> msg);
  absl::StatusOr<std::vector<uint8_t>> RecvControl(uint32_t* seq,
                                                   absl::Time deadline);
  // Whether RecvControl spins like a small data receive (spin_us). The
  // scheduler sets it for the agreement of a latency-bound batch (the next
  // control message is one or two hops away, and five hops of sleep and
  // wake-up come before every batch otherwise), and clears it for a large
  // one, whose parties must not take CPU from each other on a shared
  // machine.
  void set_spin_control(bool on) { spin_control_ = on; }
  // Whether data receives of at most spin_max_bytes spin (on until set).
  // The scheduler sets it with set_spin_control, per batch: message size
  // alone does not tell a latency-bound batch, since a batch of many
  // aes*-cts logins sends bit-packed AND layers of a few KiB at most in
  // each of its ~2,400 rounds; spinning there, with three parties and
  // other work on two cores, yields the CPU its peers need (sched_yield
  // was 16% of a server's CPU and a Run took ~1.7x as long in a storm of
  // 24 logins per Run: docs/bench-log.md).
  void set_spin_data(bool on) { spin_data_ = on; }
  // When a spinning receive may spin through a wait of a few hundred
  // microseconds (TlsRingOptions::spin_through_us), asked at each such
  // wait on the worker's thread; empty (the default): never. The scheduler
  // allows it while its server has a single batch in flight: the spin
  // takes a core, which a busy server's other batches need.
  void set_spin_through(std::function<bool()> allowed) {
    spin_through_ = std::move(allowed);
  }
  // Waits until all queued output is written.
  absl::Status Flush(absl::Time deadline);
  // Drops both connections (after a failed batch).
  void Reset();
  // Payload + framing bytes this channel has written.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t steps_sent() const { return steps_sent_.load(); }
  // Waits that busy-polled before sleeping (or instead of it).
  uint64_t spins() const { return spins_.load(); }
  // Of those, the waits that slept first (TlsRingOptions::spin_late).
  uint64_t late_spins() const { return late_spins_.load(); }
  // Of those, the waits whose spin ended before the message came: they
  // slept in poll() after it and paid a wake-up.
  uint64_t spins_ran_out() const { return spins_ran_out_.load(); }
  // Of those, the waits that spun through past spin_us until the message
  // came (a peer rooms apart, TlsRingOptions::spin_through_us), a core's
  // time each.
  uint64_t spun_through() const { return spun_through_.load(); }
  // Bytes TCP sent to prev on this channel's connections: frames plus TLS
  // record overhead and handshakes (TCP_INFO tcpi_bytes_sent). Worker
  // thread only.
  uint64_t tcp_bytes_sent() const;
  bool connected() const;
  // Changes whenever a connection is dropped or replaced: the PRSS keys
  // exchanged over the old connections are then stale.
  uint64_t generation() const { return generation_; }
  // True if the inbound connection has bytes waiting (non-leader idle loop).
  bool InboundReadable(absl::Duration wait);

 private:
  friend class TlsRing;
  TlsRingChannel(TlsRing* ring, int worker, int party)
      : ring_(ring), worker_(worker), party_(party) {}
  void OfferIncoming(std::unique_ptr<TlsConn> conn);
  // Encrypts one frame into out_'s output buffer (TlsConn::UseBufferedIo:
  // never blocks) and writes what the kernel takes now.
  absl::Status SendFrame(FrameType type, uint32_t seq, uint32_t step,
                         absl::Span<const uint8_t> payload);
  // n > 0: reads exactly n bytes into p, writing buffered output meanwhile.
  // n == 0: writes buffered output, until all of it is written (wait) or
  // what the kernel takes now (!wait). spin: busy-poll before sleeping.
  absl::Status Pump(uint8_t* p, size_t n, absl::Time deadline, bool wait = true,
                    bool spin = false);
  // Pump's wait in poll() for the fds it needs (output room, input),
  // spinning first if asked; OK when one is ready or on EINTR, a failure
  // (channel dropped) at the deadline or on Abort().
  absl::Status PollWait(bool out_blocked, bool want_in, bool reading,
                        bool spin, absl::Time deadline);
  // PlanFor's `through`: spin_through_us while set_spin_through allows.
  absl::Duration SpinThroughBound() const;
  absl::Status Fail(absl::Status st);
  void AdoptIncoming();
  void DropOut();
  uint64_t OutTcpBytes() const;

  TlsRing* ring_;
  int worker_;
  int party_;
  std::unique_ptr<TlsConn> out_;  // to prev, write-only
  std::unique_ptr<TlsConn> in_;   // from next, read-only
  std::mutex incoming_mu_;
  std::unique_ptr<TlsConn> incoming_;  // handed over by the listener
  // Frame header and the start of the payload, written as one TLS record.
  uint8_t staging_[16 * 1024];
  uint32_t seq_ = 0;
  uint32_t send_step_ = 0;
  uint32_t recv_step_ = 0;
  absl::Time batch_deadline_ = absl::InfiniteFuture();
  bool spin_control_ = false;
  bool spin_data_ = true;
  std::function<bool()> spin_through_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> steps_sent_{0};
  std::atomic<uint64_t> spins_{0};
  std::atomic<uint64_t> late_spins_{0};
  std::atomic<uint64_t> spins_ran_out_{0};
  std::atomic<uint64_t> spun_through_{0};
  WaitHistory waits_;  // the spinning receives' waits (worker thread)
  std::atomic<bool> up_{false};
  uint64_t generation_ = 0;
  uint64_t tcp_bytes_base_ = 0;  // from connections already closed
};

class TlsRing {
 public:
  static absl::StatusOr<std::unique_ptr<TlsRing>> Start(
      const TlsRingOptions& options);
  ~TlsRing();
  TlsRingChannel* channel(int worker) { return channels_[worker].get(); }
  int workers() const { return static_cast<int>(channels_.size()); }
  const TlsRingOptions& options() const { return options_; }
  bool AllConnected() const;
  uint64_t bytes_sent() const;
  int listen_port() const { return listen_port_; }
  // Connections the listener rejected for reason r since Start.
  uint64_t rejected(RingReject r) const {
    return rejected_[static_cast<int>(r)].load();
  }
  // Shutting down: a batch's waits (receive, flush) and Connect's loops
  // return UNAVAILABLE within ~100 ms instead of running to their timeout,
  // so a batch in flight ends at once (its peers see the connection go).
  // A TLS handshake or hello under way still runs to its own deadline.
  void Abort() { aborting_ = true; }
  bool aborting() const { return aborting_; }

 private:
  friend class TlsRingChannel;
  explicit TlsRing(const TlsRingOptions& options) : options_(options) {}
  void ListenLoop();
  void HandleAccepted(int fd, const std::string& source);
  // Counts a rejected connection from source (printable address) and logs
  // it unless a line for the same reason was written less than
  // reject_log_interval ago. detail: the public cause (no key material).
  void Reject(RingReject reason, const std::string& source,
              const std::string& detail);
  // Resolves next_host into next_addrs_ (raw IPv4/IPv6 address bytes).
  void ResolveNext();

  // Handshake slots (ListenLoop): kMaxHandshakes for all sources together,
  // at most kMaxPerSource of them per source address, and kPeerSlots more
  // that only next_host's addresses may take.
  static constexpr int kMaxHandshakes = 16;
  static constexpr int kMaxPerSource = 4;
  int PeerSlots() const { return static_cast<int>(channels_.size()) + 2; }

  TlsRingOptions options_;
  std::unique_ptr<TlsContext> server_ctx_;
  std::unique_ptr<TlsContext> client_ctx_;
  std::vector<std::unique_ptr<TlsRingChannel>> channels_;
  int listen_fd_ = -1;
  int listen_port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborting_{false};
  std::thread listener_;
  std::mutex handshakes_mu_;
  std::condition_variable handshakes_cv_;
  int handshakes_ = 0;       // in their handshake, on the shared slots
  int peer_handshakes_ = 0;  // in their handshake, on next_host's own slots
  std::map<std::string, int> per_source_;  // shared slots by source address
  std::vector<std::string> next_addrs_;
  std::array<std::atomic<uint64_t>, kRingRejectReasons> rejected_{};
  struct RejectLogState {
    absl::Time next_line = absl::InfinitePast();
    uint64_t unlogged = 0;  // rejected since the last line, not logged
  };
  std::mutex reject_log_mu_;
  std::array<RejectLogState, kRingRejectReasons> reject_log_;
};

}  // namespace kmpc::net

#endif  // KMPC_NET_TLS_RING_H_
