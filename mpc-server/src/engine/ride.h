// Two protocols on one ring in the same rounds: the Run's own (the host,
// on the Run's thread) and a rider, a phase none of whose messages depends
// on the host's, run on a thread of its own. Each host message carries the
// rider's next one, so the rider's rounds cost no round trip of their own
// while the host has rounds to give (engine.cc: a login's krbtgt ticket,
// RunAes and ComputeTags, ride in the aes*-cts programs' first rounds).
//
// Determinism (the three parties' messages stay in step): the rider's
// sends s_1, s_2, ... are one sequence, the same on every party, and host
// exchange k carries s_k, waiting for the rider to post it; once the rider
// has returned, host exchanges go alone. What party i receives in host
// exchange k is its successor's host message and s_k of its successor's
// rider, whose size is this party's own s_k's: every ring protocol here
// sends messages of one size on every party (channel.h). Leftover rider
// messages (a rider with more rounds than the host had) go alone in Join.
// The host's SendToPrev and RecvFromNext, outside Exchange, carry nothing.
// The rider sends each round's message before it waits for that round's
// reply (every ring protocol here does): a rider that received first
// would wait for a host exchange that waits for its send.
//
// The rider has its own PRSS keys, Rep3 and MulLog (engine.cc), so the two
// threads share no protocol state; only this class's queues, under mu_.
#ifndef KMPC_ENGINE_RIDE_H_
#define KMPC_ENGINE_RIDE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "net/channel.h"

namespace kmpc::engine {

class RideAlong : public net::RingChannel {
 public:
  explicit RideAlong(net::RingChannel& inner);
  ~RideAlong() override;
  RideAlong(const RideAlong&) = delete;
  RideAlong& operator=(const RideAlong&) = delete;

  int party() const override { return inner_.party(); }
  // The host's side.
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    return inner_.SendToPrev(msg);
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    return inner_.RecvFromNext(out);
  }
  absl::Status Exchange(absl::Span<const uint8_t> to_prev,
                        absl::Span<uint8_t> from_next) override;

  // Runs rider(channel) on a thread of its own, its messages on the host's
  // exchanges from now on. At most one rider at a time. False, and no
  // rider, when no thread could be started (the caller runs it in turn).
  bool Start(std::function<absl::Status(net::RingChannel&)> rider);
  // Sends what the rider has left alone, waits for it and returns its
  // status (OK when none ran). After a host failure, abort = true ends the
  // rider instead (its channel calls fail ABORTED): nothing more is sent,
  // and what was sent was host exchanges' alike on every party.
  absl::Status Join(bool abort);
  bool riding() const { return thread_.joinable(); }

 private:
  class Side;  // the rider's RingChannel
  // The rider's next send, waiting for it; false once the rider returned
  // with nothing left to send. Holds mu_ through lock.
  bool NextSend(std::unique_lock<std::mutex>& lock, std::vector<uint8_t>* msg);
  // One inner exchange of to_prev and the rider's next send (if it has
  // one, and no exchange failed): the reply's host part into from_next,
  // the rest to the rider, the exchange's status in *st. False, nothing
  // sent, when there is nothing of the rider's to carry.
  bool Carry(absl::Span<const uint8_t> to_prev, absl::Span<uint8_t> from_next,
             absl::Status* st);
  void Deliver(absl::Status st, absl::Span<const uint8_t> part);

  net::RingChannel& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> outbox_;  // rider -> host, in order
  std::deque<std::vector<uint8_t>> inbox_;   // host -> rider, in order
  absl::Status failed_;                      // a host exchange's failure
  bool aborted_ = false;
  bool done_ = false;  // the rider returned
  absl::Status rider_status_;
  std::vector<uint8_t> send_, recv_;  // the host's combined messages
  std::thread thread_;
};

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_RIDE_H_
