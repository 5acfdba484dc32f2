// Puts client batches on the ring: the same batch, received by all three
// servers from the KDC, must run on the same worker with the same sequence
// number everywhere.
//
// The ring is a SchedulerRing (ring.h): TLS in the server, in memory in
// tests.
//
// Party 0 leads. Each of its workers takes the oldest waiting batch and
// agrees on it with the other two in two passes of small control frames
// around the ring (0 -> 2 -> 1 -> 0, the direction every party sends in):
//
//   PROPOSE (kind, batch id, seq, age, wait): each follower claims its own
//     copy of the batch (waiting up to `wait` for the KDC's RPC to arrive)
//     and adds "missing" or "needs new PRSS keys" to the message it
//     forwards. A follower that started serving after the batch reached the
//     leader (its age says when) never gets its copy: the KDC sent it while
//     this server was down. It answers "missing" at once, so a restarted
//     server does not hold the ring up over batches from before its start;
//   COMMIT (go / abort, new session): 0 -> 2 -> 1. On go, all three
//     (re)create their Engine if asked (PRSS key exchange over the fresh
//     connections) and run Engine::RunBatch(seq, jobs), which itself compares
//     a digest of the batch (the KDC cannot feed servers different inputs).
//
// Deadlines: a batch carries its client's deadline (the KDC's gRPC
// deadline). It is never proposed after it, and neither its wait in the
// queue, the leader's ring connect for it nor a follower's wait for its
// copy runs past it: nothing waits on a dead ring connection for a batch
// its client has given up on.
//
// Pipelining: every worker has its own ring connections and Engine, so with
// N workers N batches are in flight; one computes while others wait on the
// network.
#ifndef KMPC_SERVICE_SCHEDULER_H_
#define KMPC_SERVICE_SCHEDULER_H_

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/refresh.h"
#include "kmpc.pb.h"
#include "service/ring.h"

namespace kmpc::service {

using contract::kBatchIdSize;  // RunRequest / FinalizeRequest batch ids
using BatchId = std::array<uint8_t, kBatchIdSize>;

// kRefresh: an Admin RefreshKeys request (engine/refresh.h), scheduled on
// the same ring as the KDC's batches so that the three servers agree on it.
enum class BatchKind : uint8_t { kRun = 1, kFinalize = 2, kRefresh = 3 };

struct SchedulerOptions {
  // How long a submitted batch may wait to be scheduled on the ring.
  absl::Duration schedule_timeout = absl::Seconds(5);
  // How long a follower waits for its own copy of a proposed batch.
  absl::Duration peer_batch_wait = absl::Seconds(2);
  absl::Duration connect_timeout = absl::Seconds(3);
  engine::EngineOptions engine;
};

struct BatchOutcome {
  absl::Status status;
  // Why the batch failed (status not OK), as the client is told.
  kmpc::v1::BatchErrorCode error = kmpc::v1::BATCH_ERROR_UNSPECIFIED;
  engine::BatchResult result;
  std::vector<engine::RefreshOutcome> refreshed;  // kRefresh, same order
  uint64_t ring_bytes = 0;     // sent by this party for this batch
  uint64_t ring_messages = 0;
  uint64_t tcp_bytes = 0;      // the same on the wire: TLS records, via TCP_INFO
  absl::Duration queue_time;   // arrival -> claimed by a worker
  absl::Duration run_time;     // claimed -> done
};

class Scheduler {
 public:
  // `ring` must outlive the Scheduler.
  Scheduler(SchedulerRing* ring, engine::KeyLookup lookup,
            SchedulerOptions options);
  // Over the TLS ring (MakeTlsSchedulerRing).
  Scheduler(net::TlsRing* ring, engine::KeyLookup lookup,
            SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();
  void Stop();

  // Runs the batch on the ring; blocks until it finished or failed.
  // ALREADY_EXISTS if the same (kind, id) is already waiting; UNAVAILABLE if
  // the ring could not run it (peer down, batch not received by a peer).
  // A failed outcome names its BatchErrorCode.
  // `deadline`: the client's; the batch fails (UNAVAILABLE) if it is not
  // on the ring by then.
  BatchOutcome Submit(BatchKind kind, const BatchId& id,
                      std::vector<engine::Job> jobs,
                      absl::Time deadline = absl::InfiniteFuture());
  // A share refresh (kRefresh) on the ring, the same way: blocks until it
  // finished or failed; outcome.refreshed holds the per-pair outcomes.
  // `lookup` runs on a worker thread during the batch.
  BatchOutcome SubmitRefresh(const BatchId& id,
                             std::vector<engine::RefreshItem> items,
                             engine::RefreshLookup lookup,
                             int rebuild_party = engine::kNoRebuild);

  bool RingUp() const { return ring_->AllConnected(); }
  int party() const { return ring_->party(); }
  int workers() const { return ring_->workers(); }

 private:
  struct Work;
  struct Session;  // one worker's Engine and the channel generation it used

  void LeaderLoop(int worker);
  void FollowerLoop(int worker);
  absl::Status LeadBatch(WorkerRing& ch, Session& session,
                         uint32_t seq, Work& work);
  absl::Status RunOnRing(WorkerRing& ch, Session& session,
                         uint32_t seq, bool new_session, Work& work);
  BatchOutcome Enqueue(std::shared_ptr<Work> work);
  std::shared_ptr<Work> Claim(BatchKind kind, const BatchId& id,
                              absl::Time deadline);
  // The leader's idle upkeep of one worker's ring connections.
  void IdleConnect(WorkerRing& ch);
  void Complete(const std::shared_ptr<Work>& work, absl::Status status);

  std::unique_ptr<SchedulerRing> owned_ring_;  // the TLS adapter, if any
  SchedulerRing* ring_;
  engine::KeyLookup lookup_;
  SchedulerOptions options_;
  std::atomic<bool> stopping_{false};
  // When this Scheduler was made: no batch of the KDC can have reached this
  // server earlier (main.cc makes it before it starts serving gRPC).
  const absl::Time serving_since_ = absl::Now();
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::string, std::shared_ptr<Work>> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Work>> queue_ ABSL_GUARDED_BY(mu_);  // party 0
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_SCHEDULER_H_
