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
//     copy of the batch (waiting up to `wait`, a few ms, for the KDC's RPC
//     to arrive) and adds "missing" or "needs new PRSS keys" to the message
//     it forwards. A follower that started serving after the batch reached
//     the leader (its age says when) never gets its copy: the KDC sent it
//     while this server was down. It answers "gone" at once, and the leader
//     fails the batch at once, so a restarted server does not hold the ring
//     up over batches from before its start;
//   COMMIT (go / abort / retry, new session): 0 -> 2 -> 1. On go, all three
//     (re)create their Engine if asked (PRSS key exchange over the fresh
//     connections) and run Engine::RunBatch(seq, jobs), which itself compares
//     a digest of the batch (the KDC cannot feed servers different inputs).
//     On retry (a copy was missing), the followers put their copies back and
//     the leader puts the batch back in its queue, to propose it again after
//     a short backoff with a new seq, until peer_batch_wait after its first
//     proposal (or its deadline): a batch whose copies have not all arrived
//     holds no worker on any server for more than a proposal's round trip
//     and `wait`, and the workers serve other batches meanwhile. Then the
//     leader aborts for good and all fail it ("party N did not receive this
//     batch from the client in time").
//
// Deadlines: a batch carries its client's deadline (the KDC's gRPC
// deadline). It is never proposed after it, and neither its wait in the
// queue, the leader's ring connect for it nor a follower's wait for its
// copy runs past it: nothing waits on a dead ring connection for a batch
// its client has given up on. A leader that stops waiting for a proposal's
// reply sends an abort COMMIT for it (neither go nor retry), and a reply
// that still comes is skipped by its older sequence number; a follower
// that stopped waiting for a commit drops it when it comes (party 2
// passes it on to party 1). So a late message of a batch that gave up
// never fails the next batch on that worker.
//
// Pipelining: every worker has its own ring connections and Engine, so with
// N workers N batches are in flight; one computes while others wait on the
// network.
//
// Files: the queue batches wait in on each server is scheduler_queue.cc's,
// the control messages scheduler_control.h's, the agreement and the runs
// on the ring scheduler.cc's.
#ifndef KMPC_SERVICE_SCHEDULER_H_
#define KMPC_SERVICE_SCHEDULER_H_

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/refresh.h"
#include "kmpc.pb.h"
#include "service/breaker.h"
#include "service/ring.h"

namespace kmpc::service {

using contract::kBatchIdSize;  // RunRequest / FinalizeRequest batch ids
using BatchId = std::array<uint8_t, kBatchIdSize>;

// kRefresh: an Admin RefreshKeys request (engine/refresh.h), scheduled on
// the same ring as the KDC's batches so that the three servers agree on it.
// FINALIZE never goes through the ring (KeyOpsService serves Finalize and
// Sign ring-free, services.h); kind 2 is refused on the ring.
enum class BatchKind : uint8_t { kRun = 1, kRefresh = 3 };

struct SchedulerOptions {
  // How long a submitted batch may wait to be scheduled on the ring.
  absl::Duration schedule_timeout = absl::Seconds(5);
  // How long after its first proposal a batch whose copy a follower lacks
  // is proposed again (party 0: the batch then fails, UNAVAILABLE).
  absl::Duration peer_batch_wait = absl::Seconds(2);
  // How long a follower waits for its own copy in one proposal before it
  // answers "missing" (party 0 sets it in the proposal). The KDC sends its
  // three calls at once, so the copies normally arrive within a ms of each
  // other; a longer gap costs a retry (retry_backoff).
  absl::Duration proposal_wait = absl::Milliseconds(5);
  // The first backoff before a batch is proposed again; it doubles on each
  // retry up to retry_backoff_max.
  absl::Duration retry_backoff = absl::Milliseconds(5);
  absl::Duration retry_backoff_max = absl::Milliseconds(100);
  absl::Duration connect_timeout = absl::Seconds(3);
  engine::EngineOptions engine;
  // The deviation breaker (breaker.h; null: none, tests). Every batch that
  // fails with an integrity failure (protocol::IsIntegrityFailure) is
  // recorded in it; while it is open no batch is enqueued, proposed or
  // run here: each fails with BATCH_BREAKER_OPEN before anything of it is
  // computed or sent on the ring. Must outlive the Scheduler.
  Breaker* breaker = nullptr;
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

  // Whether more than one batch is in flight on this server (admitted by
  // Submit and not yet done: waiting, proposed or running): its engines'
  // EngineOptions::busy, which then keeps their Runs on Rep3 ANDs, and
  // its ring workers' WorkerRing::SpinThroughWhile (not while busy).
  bool Busy() const { return in_flight_.load(std::memory_order_relaxed) > 1; }
  // What this Scheduler's workers create their engines with (its
  // SchedulerOptions::engine, busy set to Busy).
  const engine::EngineOptions& engine_options() const { return options_.engine; }

  bool RingUp() const { return ring_->AllConnected(); }
  int party() const { return ring_->party(); }
  int workers() const { return ring_->workers(); }
  // --security=malicious: the batches' engines verify every product.
  bool malicious() const { return options_.engine.malicious; }

 private:
  struct Work;
  struct Session;  // one worker's Engine and the channel generation it used

  // Busy as the engines' EngineOptions::busy and as when the ring's
  // workers may spin through a wait (WorkerRing::SpinThroughWhile).
  void AskBusy();

  void LeaderLoop(int worker);
  void FollowerLoop(int worker);
  // FollowerLoop's steps for one proposal (struct Proposal, scheduler.cc).
  struct Proposal;
  // The last proposal a follower's worker stopped waiting for the commit
  // of (its client's deadline passed), and whether it had forwarded it:
  // the leader's commit for it may still be the next message.
  struct Abandoned {
    uint32_t seq = 0;
    bool forwarded = false;
  };
  // Waits briefly for the next proposal from the predecessor; false if none
  // came, it was the late commit of `abandoned` (dropped, or passed on to
  // party 1 by party 2), or it was not a proposal (the channel is then
  // reset).
  bool ReceiveProposal(WorkerRing& ch, int worker, Proposal& p,
                       std::optional<Abandoned>& abandoned);
  // Claims this server's copy of the proposed batch, waiting for it as the
  // proposal allows; without one, marks the proposal missing or gone.
  void ClaimProposed(Proposal& p);
  // Forwards the proposal to the successor and receives the leader's
  // commit; party 2 passes the commit on to party 1.
  absl::Status ForwardProposal(WorkerRing& ch, Session& session, Proposal& p);
  // Runs the batch if the commit says go; otherwise puts this server's copy
  // back for a retry or fails it.
  void FollowCommit(WorkerRing& ch, Session& session, int worker, Proposal& p);
  // `again`: set when the batch was aborted for a retry (work.not_before
  // says when); the status is then OK.
  absl::Status LeadBatch(WorkerRing& ch, Session& session,
                         uint32_t seq, Work& work, bool* again);
  absl::Status RunOnRing(WorkerRing& ch, Session& session,
                         uint32_t seq, bool new_session, Work& work);
  // The queue (scheduler_queue.cc). Admits the batch or refuses it at
  // once, then waits for its outcome.
  BatchOutcome Enqueue(std::shared_ptr<Work> work);
  std::shared_ptr<Work> Claim(BatchKind kind, const BatchId& id,
                              absl::Time deadline);
  // Party 0: the oldest queued batch not waiting for a retry's backoff,
  // claimed for worker `ch`'s ring (IdleConnect while the queue is empty);
  // null once stopping.
  std::shared_ptr<Work> NextBatch(WorkerRing& ch);
  // Party 0, when a leader loop stops: fails every batch still queued.
  void FailQueued();
  // The leader's idle upkeep of one worker's ring connections.
  void IdleConnect(WorkerRing& ch);
  void Complete(const std::shared_ptr<Work>& work, absl::Status status);
  // Whether a breaker is set and open (SchedulerOptions::breaker).
  bool BreakerOpen() const;
  // True (and the batch completed with the breaker's refusal) if the
  // breaker is open.
  bool RefuseIfBreakerOpen(const std::shared_ptr<Work>& work);
  // Puts a claimed batch back for its next proposal: in pending_ (a
  // follower's copy, for Claim) or also in queue_ (party 0).
  void Unclaim(const std::shared_ptr<Work>& work);

  std::unique_ptr<SchedulerRing> owned_ring_;  // the TLS adapter, if any
  SchedulerRing* ring_;
  engine::KeyLookup lookup_;
  SchedulerOptions options_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> in_flight_{0};  // Busy()
  // When this Scheduler was made: no batch of the KDC can have reached this
  // server earlier (main.cc makes it before it starts serving gRPC).
  const absl::Time serving_since_ = absl::Now();
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Work>> pending_ ABSL_GUARDED_BY(mu_);
  // Party 0: oldest first; a batch waiting for a retry stays in place
  // with its not_before and is passed over until then.
  std::deque<std::shared_ptr<Work>> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_SCHEDULER_H_
