// The dispatcher: the queue, the flush policy and the batches in flight
// (batcher.h describes the policy). It owns the planner (planner.h,
// exchanges planned by the KDC), shares the module's gate book
// (gate_book.h: one per module, this dispatcher's cluster in it) with its
// steps, and is the host of every BatchStep it starts (start_step.h starts
// each by its kind). batcher_thread.h's Batcher runs it on a thread of its
// own.
//
// Invariants:
//  - mu_ guards everything but the sink gate; the dispatcher thread is the
//    only waiter on cv_. Submit wakes it only when a job changes its
//    decision (the first queued job, a queue reaching max_jobs or
//    max_blocks, the first finalize_only job); every batch's end wakes it.
//  - At most max_inflight Run batches and kMaxFinalizeOnlyInflight
//    finalize_only batches are in flight; `active_` holds each until its
//    StepFinished, so the deadline watchdog fails it even if a transport
//    never calls back.
//  - queued_blocks_ is the sum of `blocks` over queue_; other_enqueued_
//    holds the `enqueued` of every job in queue_ without cts_unit, in
//    queue order.
//  - deep_queue_ holds the groups with a job deeper than deep_rounds
//    (whole groups): NextDeep sends them (up to max_jobs, groups whole)
//    in a Run of their own, at most one in flight and never past
//    max_inflight, before the Run queue's next batch.
//  - flush_now_: the submitter went idle (SubmitterIdle) with early_flush
//    and jobs queued: an idle cluster takes them without the coalesce
//    delay (SubmitterIdle starts that Run batch itself, on the submitter's
//    thread, when none is in flight); cleared when a batch empties the
//    queue.
//  - finalize_only_now_: the submitter went idle with finalize_only jobs
//    queued: they go at once (else kFinalizeOnlyMaxWait after the first).
//  - Sign jobs (a CHECKSUM a held pad signs) wait in sign_queue_ only for
//    the submitter to go idle: SubmitterIdle() sends every one queued as
//    one Sign step (one SignRequest per server, an item per job, each item
//    its own pad), on the submitter's thread; if SubmitterIdle() does not
//    come within kSignMaxWait of the first, the dispatcher sends them. No
//    window, no Run in flight and no limit of their own beyond the pads
//    (speculate_max); each step is in `active_` until it finishes. Under
//    load the KDC submits many logins' signatures per loop iteration: one
//    request per party instead of one per signature (the gRPC calls and
//    their threads' wake-ups were most of the KDC's CPU per login).
//  - dispatcher_wake_ (under mu_): when the sleeping dispatcher wakes on
//    its own; InfinitePast while it is awake (it looks at everything again
//    before it sleeps). A thread that gives the dispatcher something to do
//    at time t notifies cv_ only if t < dispatcher_wake_ (NeedsWake): each
//    notification of a sleeping dispatcher is a futex call and a context
//    switch on a 2-core machine.
//  - Steps made on a submitter's thread (SubmitterIdle) are counted in
//    starting_ until started; Close() waits for them.
//  - A group (a planned exchange's first-Run jobs: its given items and
//    what the planner prepared) is queued contiguously
//    and NextRun never cuts it: BatchStep gates the prepared jobs on the
//    group's DECRYPT and links pads to its ticket ENCRYPT only within one
//    request. Each Run step counts once for every planned exchange with a
//    job in it (Planner::CountRun).
//  - After Close() nothing reaches the sink and nothing is queued or held.
#ifndef KMPC_KDC_PLUGIN_DISPATCHER_H_
#define KMPC_KDC_PLUGIN_DISPATCHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "batch_step.h"
#include "batcher.h"
#include "planner.h"

namespace kmpc::kdc {

class Dispatcher : public StepHost,
                   public std::enable_shared_from_this<Dispatcher> {
 public:
  // gates: the module's gate book and this dispatcher's cluster in it
  // (null: a book of its own, one cluster).
  Dispatcher(BatcherOptions options, Transport* transport, Sink* sink,
             BatchObserver* observer = nullptr,
             std::shared_ptr<GateBook> gates = nullptr, size_t cluster = 0);

  // The queue's interface, reached through Batcher::dispatcher().
  // Queues a job. A malformed job is refused here (the sink never hears of
  // it); token is the caller's name for the job in its Result. `gate`: the
  // DECRYPT it goes gated on, a copy in its Run (prepared.h GroupOf).
  absl::Status Submit(uint64_t token, Job job, const Job* gate = nullptr);

  // Planned exchanges (planner.h). Begin: exchange `id` (nonzero, unique
  // among those not ended) with `plan`; `given` are the jobs of its items
  // given now, each delivered once as by Submit. An invalid plan or job is
  // refused here (kInvalidArgument). SubmitItem: the job of `item`,
  // completed from what was prepared or else run as an ordinary job (a
  // miss). End: the exchange is over; its record, or nullopt if unknown.
  absl::Status Begin(uint64_t id, Plan plan, std::vector<ItemJob> given);
  absl::Status SubmitItem(uint64_t id, int item, uint64_t token, Job job);
  std::optional<ExchangeRecord> End(uint64_t id);
  // A job of exchange `id` ran elsewhere (the router's failover).
  void CountMiss(uint64_t id, int item, Miss why);

  // The submitter has no more jobs for now (the KDC's event loop finished
  // the callback that submitted them): the signatures under held pads
  // queued since the last call go as one Sign request per server and the
  // finalize_only jobs as Finalize requests, both started on the calling
  // thread (gRPC async calls: it does not wait for them); with early_flush
  // an idle cluster gets the queued jobs at once instead of after
  // `coalesce`. May be called from any thread; not from inside the sink.
  void SubmitterIdle();

  // Takes every job waiting in the Run queue (not yet in a batch) out of
  // it and returns their tokens: the sink will hear nothing of them. The
  // router (router.h) calls it, from inside the sink, when this cluster
  // failed a batch, so that those jobs go to another cluster now rather
  // than into this one's next batch. Drops the prepared jobs queued with
  // them, whose items' jobs then run as ordinary ones (their tokens too,
  // if they were waiting: Planner::Lost). The jobs held back for a queued
  // gate (gate_book.h) are taken out too, into *held_back, never with the
  // others: they must not go elsewhere without their gate, and the caller
  // fails them. Takes mu_ (and the gate book's) only: callable from
  // inside the sink.
  std::vector<uint64_t> TakeQueued(std::vector<uint64_t>* held_back);

  // The dispatcher thread's body: returns once RequestStop was called.
  void RunUntilStopped();
  void RequestStop();
  // After the dispatcher thread has returned: closes the sink gate and
  // drops (wipes) everything queued or held.
  void Close();
  BatcherStats Stats() const;

  // StepHost.
  const BatcherOptions& options() const override { return options_; }
  Transport* transport() const override { return transport_; }
  GateBook& gates() const override { return *gates_; }
  void Deliver(Result result) override;
  void Log(int level, std::string line) override;
  void HoldKeystreams(std::vector<HeldKeystream> keystreams) override;
  void KeepChained(ChainedSignature c) override;
  void PreparedLost(const std::vector<std::pair<uint64_t, int>>& items,
                    bool sent) override;
  void Release(std::vector<PendingJob> group) override;
  void Count(StepEvent event, size_t n) override;
  void StepFinished(const std::shared_ptr<BatchStep>& step, StepKind kind,
                    uint64_t blocks, bool failed) override;

 private:
  using Lock = std::unique_lock<std::mutex>;
  bool Enqueue(PendingJob job, std::vector<PendingJob>* group_jobs);
  // Under mu_: queues q (a Sign, a finalize_only job, a Run job with
  // group_jobs after it) or, chained_done, moves its answer to *chained
  // for the caller to deliver outside mu_; returns whether the dispatcher
  // must be woken.
  bool Route(PendingJob q, std::vector<PendingJob>* group_jobs,
             Result* chained);
  // Under mu_: routes the jobs the planner handed back (Planner::Unpark)
  // of the exchanges in `ids`; chained answers go to *chained.
  bool RouteUnparked(std::vector<uint64_t> ids, std::vector<Result>* chained);
  absl::Status RoomLocked() const;
  void CountExchangeRuns(const std::vector<PendingJob>& jobs);
  void Loop();
  // Each returns true when it released the lock to act (the loop then
  // looks again), else lowers *wake to when it wants to act.
  bool ExpireOverdue(absl::Time now, absl::Time* wake, Lock* lk);
  bool StartUnlocked(std::shared_ptr<BatchStep> step, Lock* lk);
  bool StartFinalizeOnly(absl::Time now, absl::Time* wake, Lock* lk);
  bool StartRunBatch(absl::Time now, absl::Time* wake, Lock* lk);
  // Under mu_: the next Run batch, registered and counted in flight, if
  // one may go by `now` (the flush policy, batcher.h), else null (then
  // *wake is lowered to when one may).
  std::shared_ptr<BatchStep> NextRun(absl::Time now, absl::Time* wake);
  // Under mu_, queue_ not empty: when the Run queue is due (now or
  // earlier: at once), given the Runs in flight.
  absl::Time RunFlushAt(absl::Time now) const;
  bool StartSigns(absl::Time now, absl::Time* wake, Lock* lk);
  // Under mu_: a registered step of `kind` for `jobs` (the caller starts
  // it after releasing mu_); notifies the dispatcher if it sleeps past the
  // step's deadline (the watchdog).
  std::shared_ptr<BatchStep> MakeStep(std::vector<PendingJob> jobs,
                                      StepKind kind, absl::Time now);
  // Under mu_: the next finalize_only batch due by `now`, registered, or
  // null (then *wake is lowered to when one is due).
  std::shared_ptr<BatchStep> NextFinalizeOnly(absl::Time now,
                                              absl::Time* wake);
  // Under mu_: every queued sign job as one registered Sign step if
  // `force` or the first waited kSignMaxWait, else null (*wake lowered).
  std::shared_ptr<BatchStep> NextSign(absl::Time now, absl::Time* wake,
                                      bool force);
  // Whether the job's AND rounds pass deep_rounds (its figures' depth).
  bool Deep(const PendingJob& q) const;
  // Whether held aes*-cts units may wait past `window` behind a Run in
  // flight (BatcherOptions::cts_window; off by default).
  bool CtsHold() const {
    return options_.early_flush && options_.cts_window > options_.window;
  }
  // Under mu_: the next deep group's batch, registered, or null (none
  // queued, one in flight, or max_inflight reached).
  std::shared_ptr<BatchStep> NextDeep(absl::Time now);
  // Under mu_: moves whole units (a job, or a group) from q into *batch
  // within max_jobs, max_blocks and the servers' bound on distinct aes*-cts
  // programs (dispatcher.cc); returns their blocks.
  uint64_t TakeUnits(JobFifo* q, size_t max_jobs, uint64_t max_blocks,
                     std::vector<PendingJob>* batch);
  // Under mu_: whether a sleeping dispatcher must be woken to act at `at`;
  // if so it counts as awake from now on.
  bool NeedsWake(absl::Time at);
  // Under mu_: the jobs held back for exchange `id`'s gate, which left the
  // queue (TakeQueued): their tokens into *held_back, the prepared ones
  // lost (never sent).
  void TakeHeldBack(uint64_t id, std::vector<uint64_t>* held_back);

  const BatcherOptions options_;
  Transport* const transport_;
  BatchObserver* const observer_;  // may be null
  const std::shared_ptr<GateBook> gates_;  // before planner_, which uses it
  const size_t cluster_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  JobFifo queue_;
  uint64_t queued_blocks_ = 0;
  // The `enqueued` of each job in queue_ without cts_unit, in queue order
  // (the front is the first such job in the queue).
  std::deque<absl::Time> other_enqueued_;
  // Groups of a ticket and its signing PAD, or of a job and its gate's copy
  // (Submit, GroupOf): kTicketGroupBit | n, apart from the planner's
  // exchange groups (planner.cc kPlanGroupBit).
  static constexpr uint64_t kTicketGroupBit = uint64_t{1} << 62;
  // finalize_only batches in flight at once; and how long finalize_only
  // jobs wait for SubmitterIdle() (the KDC calls it when the callback that
  // submitted them returns) before they go anyway.
  static constexpr int kMaxFinalizeOnlyInflight = 4;
  static constexpr absl::Duration kFinalizeOnlyMaxWait = absl::Milliseconds(5);
  // How long sign jobs wait for SubmitterIdle() before the dispatcher
  // sends them anyway (the KDC calls it when its callback returns: well
  // before).
  static constexpr absl::Duration kSignMaxWait = absl::Milliseconds(5);
  uint64_t ticket_groups_ = 0;
  int inflight_ = 0;  // Run batches, deep ones included
  // Groups with a job deeper than BatcherOptions::deep_rounds: they go in
  // Run batches of their own, at most one in flight, so that one client's
  // long request never delays others' logins.
  JobFifo deep_queue_;
  int deep_inflight_ = 0;
  std::set<const BatchStep*> deep_steps_;
  bool flush_now_ = false;
  // ENCRYPT jobs whose keystream a prepared job gave: FINALIZE only, no
  // ring work, so they do not wait for the Run batches in flight.
  JobFifo finalize_only_queue_;
  int finalize_only_inflight_ = 0;
  int sign_inflight_ = 0;
  JobFifo sign_queue_;
  absl::Time dispatcher_wake_ = absl::InfinitePast();
  // Steps made by SubmitterIdle and not yet started (Start runs outside
  // mu_ on the submitting thread); Close() waits for them, so that none
  // starts on a transport that Stop's caller is about to destroy.
  int starting_ = 0;
  std::condition_variable started_cv_;
  bool finalize_only_now_ = false;
  std::set<std::shared_ptr<BatchStep>> active_;
  BatcherStats stats_;
  // Requests sent (BatcherStats), counted from the steps' threads.
  std::atomic<uint64_t> run_requests_{0}, finalize_requests_{0},
      sign_requests_{0}, sign_batches_{0};
  uint64_t next_seq_ = 1;
  // BatcherOptions::hold_pct: set when a Run batch ends with jobs
  // waiting; until hold_until_ the next Run waits for hold_jobs_ jobs.
  absl::Time hold_until_ = absl::InfinitePast();
  size_t hold_jobs_ = 0;
  Planner planner_;

  // Deliveries pass this gate; Close() shuts it.
  std::mutex sink_mu_;
  bool closed_ = false;
  Sink* const sink_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_DISPATCHER_H_
