#include "dispatcher.h"

#include <syslog.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "start_step.h"

namespace kmpc::kdc {

namespace {

// The most Run jobs SubmitterIdle() starts on the submitter's thread (the
// KDC's event loop): the exchanges of one callback or a few, the idle
// cluster's latency case. A backlog batch (up to backlog_batch_jobs, MBs
// to deal and serialize) goes from the dispatcher thread instead.
constexpr size_t kMaxInlineRunJobs = 64;

// A queue entry for `job` (of figures `f`, CheckJob) from the submitter of
// `token`, enqueued at `now`.
PendingJob Pending(uint64_t token, Job job, const JobFigures& f, absl::Time now) {
  PendingJob q;
  q.token = token;
  q.figures = f;
  q.blocks = f.cost;
  q.job = std::move(job);
  q.enqueued = now;
  return q;
}

}  // namespace

Dispatcher::Dispatcher(BatcherOptions options, Transport* transport,
                       Sink* sink, BatchObserver* observer,
                       std::shared_ptr<GateBook> gates, size_t cluster)
    : options_(options),
      transport_(transport),
      observer_(observer),
      gates_(gates != nullptr ? std::move(gates)
                              : std::make_shared<GateBook>(options_, cluster + 1)),
      cluster_(cluster),
      planner_(options_, gates_.get(), cluster_),
      sink_(sink) {}

absl::Status Dispatcher::Submit(uint64_t token, Job job, const Job* gate) {
  // PAD jobs are the planner's own (planner.h), never the KDC's.
  if (job.type == kmpc::v1::JOB_PAD)
    return absl::InvalidArgumentError("PAD jobs are not submitted");
  JobFigures f;
  if (absl::Status st = CheckJob(job, &f); !st.ok()) return st;
  // A job outside any plan: a Run job of its own, nothing prepared for it;
  // but for a ticket signed in the cluster, whose KDC signature's PAD (the
  // krbtgt's) goes with it, or a job gated on a copy of its gate, one
  // group (GroupOf; kmpc.proto Job.sign_pad, Job.release_if_ok).
  PendingJob q = Pending(token, std::move(job), f, absl::Now());
  std::vector<PendingJob> none = GroupOf(&q, gate);
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (absl::Status st = RoomLocked(); !st.ok()) return st;
    if (!none.empty()) q.group = none.back().group = kTicketGroupBit | ++ticket_groups_;
    Result unused;
    wake = Route(std::move(q), &none, &unused);
  }
  if (wake) cv_.notify_one();  // the dispatcher is the only waiter
  return absl::OkStatus();
}

bool Dispatcher::Route(PendingJob q, std::vector<PendingJob>* group_jobs,
                       Result* chained) {
  // With submitter_kicks, SubmitterIdle() takes the queued Sign and
  // FINALIZE-only jobs and starts an idle cluster's Run batch, and a Run
  // in flight wakes the dispatcher when it ends: a wake-up here would
  // only cost a futex call and a context switch per exchange.
  const bool kicked = options_.submitter_kicks;
  if (q.chained_done) {
    // Its answer is known (planner.h, chained signatures): delivered
    // by the caller, outside mu_, like a step's (the router registers a
    // job before submitting it: router.h).
    chained->token = q.token;
    chained->output = std::move(q.output);
    return false;
  }
  if (q.sign) {
    // Until SubmitterIdle(): a Sign needs no ring round, so it waits for
    // neither a window nor the Run in flight, only for the other
    // signatures of this callback (of every login it handled).
    const absl::Time due = q.enqueued + kSignMaxWait;
    const bool first = sign_queue_.empty();
    sign_queue_.push_back(std::move(q));
    return !kicked && first && NeedsWake(due);
  }
  const bool kicked_here =
      kicked && (q.finalize_only || options_.early_flush) && !Deep(q);
  return Enqueue(std::move(q), group_jobs) && !kicked_here &&
         NeedsWake(absl::InfinitePast());
}

// Under mu_: each planned exchange with a job in a Run request counts that
// Run once (kmpc_kdc_exchange_runs_total).
void Dispatcher::CountExchangeRuns(const std::vector<PendingJob>& jobs) {
  std::vector<uint64_t> ids;
  for (const PendingJob& q : jobs)
    if (q.exchange_id != 0) ids.push_back(q.exchange_id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint64_t id : ids) planner_.CountRun(id);
}

bool Dispatcher::RouteUnparked(std::vector<uint64_t> ids,
                               std::vector<Result>* chained) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<PendingJob> ready;
  for (uint64_t id : ids) planner_.Unpark(id, &ready);
  bool wake = false;
  for (PendingJob& q : ready) {
    std::vector<PendingJob> none;
    Result c;
    wake |= Route(std::move(q), &none, &c);
    if (!c.output.empty()) chained->push_back(std::move(c));
  }
  // No submitter callback follows (SubmitterIdle): the dispatcher looks
  // at once (they waited for this Run already; aes*-cts ones may still
  // wait for a Run in flight, BatcherOptions::cts_window).
  if (!ready.empty()) wake |= NeedsWake(absl::InfinitePast());
  return wake;
}

// Under mu_: whether the queues have room; else why not.
absl::Status Dispatcher::RoomLocked() const {
  if (stopping_)
    return absl::UnavailableError("the kdcmpc module is shutting down");
  const size_t waiting =
      queue_.size() + finalize_only_queue_.size() + sign_queue_.size();
  if (waiting >= options_.max_queue)
    return absl::UnavailableError(absl::StrCat(
        "the MPC cluster is overloaded: ", waiting, " jobs wait"));
  return absl::OkStatus();
}

absl::Status Dispatcher::Begin(uint64_t id, Plan plan,
                               std::vector<ItemJob> given) {
  if (id == 0) return absl::InvalidArgumentError("exchange id 0");
  if (absl::Status st = Planner::Check(plan); !st.ok()) return st;
  std::vector<PendingJob> jobs;  // the given ones, then the prepared
  const absl::Time now = absl::Now();
  std::vector<bool> seen(plan.items.size(), false);
  size_t stated = 0;  // items the plan says are given now
  for (size_t i = 0; i < plan.items.size(); ++i)
    stated += plan.items[i].given && !SplicedAway(plan, i);
  if (given.size() != stated)
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan gives ", stated, " items now, the call ", given.size()));
  for (ItemJob& g : given) {
    if (g.item < 0 || static_cast<size_t>(g.item) >= plan.items.size() ||
        !plan.items[g.item].given || SplicedAway(plan, g.item) || seen[g.item])
      return absl::InvalidArgumentError(
          absl::StrCat("item ", g.item, " is not given in the plan, or twice"));
    seen[g.item] = true;
    JobFigures f;
    if (absl::Status st = CheckJob(g.job, &f); !st.ok()) return st;
    PendingJob q = Pending(g.token, std::move(g.job), f, now);
    q.item = g.item;
    jobs.push_back(std::move(q));
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (absl::Status st = RoomLocked(); !st.ok()) return st;
    if (planner_.Known(id))
      return absl::InvalidArgumentError("the exchange was begun already");
    std::vector<PendingJob> prepared;
    if (absl::Status st = planner_.Admit(id, std::move(plan), &jobs, &prepared); !st.ok())
      return st;
    // One group, queued together: NextRun never cuts it.
    for (PendingJob& x : prepared) jobs.push_back(std::move(x));
    if (jobs.empty()) return absl::OkStatus();
    PendingJob first = std::move(jobs.front());
    jobs.erase(jobs.begin());
    Result none;
    wake = Route(std::move(first), &jobs, &none);
  }
  if (wake) cv_.notify_one();
  return absl::OkStatus();
}

absl::Status Dispatcher::SubmitItem(uint64_t id, int item, uint64_t token,
                                    Job job) {
  JobFigures f;
  if (absl::Status st = CheckJob(job, &f); !st.ok()) return st;
  PendingJob q = Pending(token, std::move(job), f, absl::Now());
  bool wake = false;
  Result chained;
  std::string miss_line;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (absl::Status st = RoomLocked(); !st.ok()) return st;
    if (!planner_.Known(id))
      return absl::InvalidArgumentError("no such exchange (begin, or ended)");
    if (absl::Status st = planner_.Match(id, item, q.job); !st.ok()) return st;
    bool parked = false;
    std::vector<PendingJob> none;  // q's group: its gate's copy if regated (Planner::Take)
    const std::optional<Miss> miss = planner_.Take(id, item, &q, &parked, &none);
    if (miss)
      miss_line = absl::StrCat("kdcmpc: plan item ", item, " runs alone (",
                               MissName(*miss), ")");
    if (!parked) wake = Route(std::move(q), &none, &chained);
  }
  if (wake) cv_.notify_one();
  if (!miss_line.empty()) Log(LOG_INFO, std::move(miss_line));
  if (!chained.output.empty()) Deliver(std::move(chained));
  return absl::OkStatus();
}

std::optional<ExchangeRecord> Dispatcher::End(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  if (!planner_.Known(id)) return std::nullopt;
  return planner_.End(id);
}

void Dispatcher::CountMiss(uint64_t id, int item, Miss why) {
  std::lock_guard<std::mutex> l(mu_);
  planner_.CountMiss(id, item, why);
}

// NeedsWake(absl::InfinitePast()): whenever it sleeps.
bool Dispatcher::NeedsWake(absl::Time at) {
  // Awake (InfinitePast): it looks again before it sleeps.
  if (at >= dispatcher_wake_) return false;
  dispatcher_wake_ = absl::InfinitePast();
  return true;
}

std::shared_ptr<BatchStep> Dispatcher::MakeStep(std::vector<PendingJob> jobs,
                                                StepKind kind,
                                                absl::Time now) {
  if (kind != StepKind::kSign) ++stats_.batches;
  if (kind == StepKind::kRun) CountExchangeRuns(jobs);
  stats_.jobs += jobs.size();
  auto step = std::make_shared<BatchStep>(shared_from_this(), next_seq_++,
                                          std::move(jobs), now, kind);
  active_.insert(step);
  // The watchdog must know of the step's deadline.
  if (NeedsWake(step->deadline())) cv_.notify_one();
  return step;
}

// Under mu_. Whether the dispatcher must look again: only when this job
// changes its decision (the flush time depends on the oldest queued job,
// or a full queue; the dispatcher re-evaluates after every batch start and
// completion anyway). A wake-up per job would cost the KDC's event loop a
// futex call and usually a context switch per job under load.
bool Dispatcher::Enqueue(PendingJob q, std::vector<PendingJob>* group_jobs) {
  if (q.finalize_only) {
    const bool first = finalize_only_queue_.empty();
    finalize_only_queue_.push_back(std::move(q));
    return first;
  }
  // Deep work goes in a batch of its own (BatcherOptions::deep_rounds):
  // the whole group, so that nothing of it is cut from its gate.
  bool deep = Deep(q);
  for (const PendingJob& x : *group_jobs) deep = deep || Deep(x);
  if (deep) {
    const bool first = deep_queue_.empty();
    deep_queue_.push_back(std::move(q));
    for (PendingJob& x : *group_jobs) deep_queue_.push_back(std::move(x));
    return first;
  }
  const bool was_empty = queue_.empty();
  const bool had_other = !other_enqueued_.empty();
  const uint64_t blocks_before = queued_blocks_;
  const size_t size_before = queue_.size();
  bool cts = contract::CtsCipher(q.job.cipher);
  for (const PendingJob& x : *group_jobs) cts = cts || contract::CtsCipher(x.job.cipher);
  auto push = [&](PendingJob&& x) {
    x.cts_unit = cts;
    const absl::Time at = x.enqueued;
    const uint64_t blocks = x.blocks;
    queue_.push_back(std::move(x));
    queued_blocks_ += blocks;
    // After the queue's push: a failure here leaves an entry missing (a
    // flush later by at most cts_window), never one too many.
    if (!cts) other_enqueued_.push_back(at);
  };
  push(std::move(q));
  for (PendingJob& x : *group_jobs) push(std::move(x));
  // The first other unit behind held aes*-cts units may bring the flush
  // forward (its window runs from its own arrival).
  return was_empty || (CtsHold() && !cts && !had_other) ||
         (size_before < options_.max_jobs &&
          queue_.size() >= options_.max_jobs) ||
         (blocks_before < options_.max_blocks &&
          queued_blocks_ >= options_.max_blocks);
}

// The submitter's callback returned: its signatures and its prepared
// keystreams' FINALIZE go now, from this thread (no hand-off to the
// dispatcher thread: a futex wake and two context switches per callback);
// an idle cluster (early flush) may take the Run queue now.
void Dispatcher::SubmitterIdle() {
  std::vector<std::shared_ptr<BatchStep>> steps;
  bool wake = false;
  {
    Lock lk(mu_);
    if (stopping_) return;
    const absl::Time now = absl::Now();
    absl::Time unused = absl::InfiniteFuture();
    if (auto s = NextSign(now, &unused, /*force=*/true)) steps.push_back(s);
    if (!finalize_only_queue_.empty()) finalize_only_now_ = true;
    // Up to the in-flight limit; the rest go as those end (StepFinished
    // wakes the dispatcher, which sees finalize_only_now_).
    while (auto s = NextFinalizeOnly(now, &unused)) steps.push_back(s);
    if (auto s = NextDeep(now)) steps.push_back(s);
    if (options_.early_flush && !queue_.empty()) {
      flush_now_ = true;
      // An idle cluster takes the queue now, from this thread: waking the
      // dispatcher for it would put a futex wake and two context switches
      // on the critical path of every exchange that finds it idle. With
      // max_inflight batches in flight the queue waits for one to end (its
      // completion wakes the dispatcher, which then sees flush_now_);
      // otherwise the dispatcher is woken if it must act by a time (the
      // window behind a batch in flight, a hold: hold_pct).
      // A backlog (more than kMaxInlineRunJobs waiting) goes from the
      // dispatcher thread instead: building and dealing it would stall the
      // event loop.
      if (inflight_ < options_.max_inflight && queue_.size() > kMaxInlineRunJobs) {
        wake = NeedsWake(RunFlushAt(now));  // it sees flush_now_
      } else if (inflight_ < options_.max_inflight) {
        absl::Time run_at = absl::InfiniteFuture();
        if (auto s = NextRun(now, &run_at))
          steps.push_back(s);
        else
          wake = NeedsWake(run_at);
      }
    }
    starting_ += static_cast<int>(steps.size());
  }
  if (wake) cv_.notify_one();
  if (steps.empty()) return;
  const int n = static_cast<int>(steps.size());
  for (auto& s : steps) StartStep(s);
  steps.clear();
  std::lock_guard<std::mutex> l(mu_);
  if ((starting_ -= n) == 0) started_cv_.notify_all();
}

void Dispatcher::RunUntilStopped() {
  // No exception may end this thread (std::terminate would take the KDC
  // with it): after a failure (memory), try again shortly. A job lost that
  // way fails at its batch's deadline; one still queued is retried.
  for (;;) {
    try {
      Loop();
      return;
    } catch (...) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void Dispatcher::Loop() {
  Lock lk(mu_);
  dispatcher_wake_ = absl::InfinitePast();
  while (!stopping_) {
    const absl::Time now = absl::Now();
    // Unused keystreams go at their expiry, not at the next submit: an
    // idle KDC must not keep them in memory.
    absl::Time wake = planner_.Prune(now);
    if (ExpireOverdue(now, &wake, &lk)) continue;
    // finalize_only jobs need no ring work: they do not wait for the Run
    // batch in flight.
    if (StartFinalizeOnly(now, &wake, &lk)) continue;
    if (StartSigns(now, &wake, &lk)) continue;
    if (StartRunBatch(now, &wake, &lk)) continue;
    dispatcher_wake_ = wake;
    if (wake == absl::InfiniteFuture()) {
      cv_.wait(lk);
    } else {
      cv_.wait_for(lk, absl::ToChronoMicroseconds(wake - absl::Now()) +
                           std::chrono::microseconds(50));
    }
    dispatcher_wake_ = absl::InfinitePast();
  }
}

// The watchdog: a batch past its deadline fails even if a transport never
// calls back.
bool Dispatcher::ExpireOverdue(absl::Time now, absl::Time* wake, Lock* lk) {
  std::vector<std::shared_ptr<BatchStep>> expired;
  for (const auto& step : active_) {
    if (step->deadline() <= now)
      expired.push_back(step);
    else
      *wake = std::min(*wake, step->deadline());
  }
  if (expired.empty()) return false;
  lk->unlock();
  for (auto& step : expired) step->Expire();
  expired.clear();
  lk->lock();
  return true;
}

// Starts `step` (if any) with the mutex released: StartStep and the step's
// last reference may call back into the dispatcher.
bool Dispatcher::StartUnlocked(std::shared_ptr<BatchStep> step, Lock* lk) {
  if (!step) return false;
  lk->unlock();
  StartStep(step);
  step.reset();
  lk->lock();
  return true;
}

bool Dispatcher::StartFinalizeOnly(absl::Time now, absl::Time* wake,
                                   Lock* lk) {
  return StartUnlocked(NextFinalizeOnly(now, wake), lk);
}

bool Dispatcher::StartSigns(absl::Time now, absl::Time* wake, Lock* lk) {
  return StartUnlocked(NextSign(now, wake, /*force=*/false), lk);
}

bool Dispatcher::StartRunBatch(absl::Time now, absl::Time* wake, Lock* lk) {
  return StartUnlocked(NextRun(now, wake), lk);
}

void Dispatcher::RequestStop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void Dispatcher::Close() {
  {
    std::lock_guard<std::mutex> l(sink_mu_);
    closed_ = true;
  }
  std::unique_lock<std::mutex> l(mu_);
  // stopping_ is set: no SubmitterIdle makes another step.
  started_cv_.wait(l, [this] { return starting_ == 0; });
  queue_.clear();
  other_enqueued_.clear();
  deep_queue_.clear();
  finalize_only_queue_.clear();
  sign_queue_.clear();
  queued_blocks_ = 0;
  planner_.Clear();  // SecureBytes wipes the keystreams
}

BatcherStats Dispatcher::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  BatcherStats out = stats_;
  out.inflight = inflight_ + finalize_only_inflight_ + sign_inflight_;
  out.queued_jobs = queue_.size() + deep_queue_.size() + finalize_only_queue_.size() +
                    sign_queue_.size();
  const Planner::Counts& pc = planner_.counts();
  out.keystreams_held = planner_.held() - planner_.pads_held();
  out.speculative_encrypts = pc.keystreams;
  out.speculative_used = pc.keystreams_used;
  out.speculative_wasted = pc.keystreams_wasted;
  out.run_requests = run_requests_.load(std::memory_order_relaxed);
  out.finalize_requests = finalize_requests_.load(std::memory_order_relaxed);
  out.sign_requests = sign_requests_.load(std::memory_order_relaxed);
  out.sign_batches = sign_batches_.load(std::memory_order_relaxed);
  out.pads_drawn = pc.pads_drawn;
  out.pads_used = pc.pads_used;
  out.verify_pads_used = pc.verify_pads_used;
  out.chains_sent = pc.chains_sent;
  out.chained_used = pc.chained_used;
  const GateBook::Counts gc = gates_->counts(cluster_);
  out.cts_deferred = gc.deferred;
  out.cts_deferred_sent = gc.deferred_sent;
  out.cts_unproven_refused = gc.unproven_refused;
  out.pads_wasted = stats_.pads_wasted + pc.pads_wasted;
  out.pads_held = planner_.pads_held();
  return out;
}

std::vector<uint64_t> Dispatcher::TakeQueued(std::vector<uint64_t>* held_back) {
  std::vector<uint64_t> tokens;
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint64_t> lost;  // exchanges whose prepared jobs go here
  for (JobFifo* fifo : {&queue_, &deep_queue_}) {
    for (PendingJob& q : *fifo) {
      if (q.regate) continue;  // its gated jobs leave without it
      if (q.prepared) {
        planner_.Lost(q.exchange_id, q.item);
        lost.push_back(q.exchange_id);
      } else {
        tokens.push_back(q.token);
        // The jobs held back for this gate leave with it (gate_book.h):
        // this cluster would never see its verdict.
        if (q.gate && q.exchange_id != 0) TakeHeldBack(q.exchange_id, held_back);
      }
    }
  }
  queue_.clear();  // wipes inputs (SecureBytes)
  other_enqueued_.clear();
  deep_queue_.clear();
  queued_blocks_ = 0;
  flush_now_ = false;
  // Jobs parked for those prepared jobs move with the queue.
  std::sort(lost.begin(), lost.end());
  lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
  std::vector<PendingJob> ready;
  for (uint64_t id : lost) planner_.Unpark(id, &ready);
  for (const PendingJob& q : ready) tokens.push_back(q.token);
  return tokens;
}

void Dispatcher::TakeHeldBack(uint64_t id, std::vector<uint64_t>* held_back) {
  const GateBook::Outcome o = gates_->Verdict(
      id, absl::CancelledError("its gate left this cluster's queue"), absl::Now());
  for (const PendingJob& h : o.fail) {
    if (h.prepared)
      planner_.Lost(id, h.item, /*sent=*/false);  // its item runs alone, if ever submitted
    else
      held_back->push_back(h.token);
  }
}  // `o` wipes the jobs' inputs (SecureBytes)

void Dispatcher::Deliver(Result r) {
  std::lock_guard<std::mutex> l(sink_mu_);
  if (!closed_) sink_->Deliver(std::move(r));
}

void Dispatcher::Log(int level, std::string line) {
  std::lock_guard<std::mutex> l(sink_mu_);
  if (!closed_) sink_->Log(level, std::move(line));
}

void Dispatcher::HoldKeystreams(std::vector<HeldKeystream> keystreams) {
  bool wake;
  std::vector<Result> chained;
  {
    std::lock_guard<std::mutex> l(mu_);
    // After Stop() nothing would prune them: `keystreams` goes out of
    // scope here and SecureBytes wipes them.
    if (stopping_) return;
    absl::Time first = absl::InfiniteFuture();
    for (const HeldKeystream& k : keystreams) first = std::min(first, k.expires);
    std::vector<uint64_t> ids;
    for (HeldKeystream& k : keystreams) {
      ids.push_back(k.exchange_id);
      planner_.Hold(std::move(k));
    }
    // Jobs that waited for this Run go now.
    const bool routed = RouteUnparked(std::move(ids), &chained);
    // The dispatcher prunes them when they expire: woken only if it would
    // sleep past that (it usually wakes earlier for a step's deadline).
    wake = NeedsWake(first) || routed;
  }
  if (wake) cv_.notify_all();
  for (Result& c : chained) Deliver(std::move(c));
}

void Dispatcher::PreparedLost(const std::vector<std::pair<uint64_t, int>>& items,
                              bool sent) {
  std::vector<Result> chained;
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    std::vector<uint64_t> ids;
    for (const auto& [id, item] : items) {
      planner_.Lost(id, item, sent);
      ids.push_back(id);
    }
    wake = RouteUnparked(std::move(ids), &chained);
  }
  if (wake) cv_.notify_all();
  for (Result& c : chained) Deliver(std::move(c));
}

void Dispatcher::KeepChained(ChainedSignature c) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;  // `c` is wiped as it goes
    const absl::Time at = c.expires;
    planner_.KeepChained(std::move(c));
    wake = NeedsWake(at);  // to prune it when it expires
  }
  if (wake) cv_.notify_all();
}

void Dispatcher::Release(std::vector<PendingJob> group) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || group.empty()) return;  // `group` is wiped as it goes
    // The prepared jobs held back with the reply count as sent now (not the
    // gate's copy: no keystream nor pad).
    for (const PendingJob& q : group)
      if (q.prepared && !q.regate) planner_.CountSent(q);
    // One group, queued together (its pads link to its ticket's keystream
    // within one request): NextRun never cuts it.
    PendingJob first = std::move(group.front());
    group.erase(group.begin());
    Result unused;  // no job of it is chained_done
    wake = Route(std::move(first), &group, &unused);
    // No submitter callback follows (SubmitterIdle): the dispatcher looks
    // at once (they waited for their gate's Run already; they may still
    // wait for a Run in flight, BatcherOptions::cts_window).
    wake |= NeedsWake(absl::InfinitePast());
  }
  if (wake) cv_.notify_all();
}

void Dispatcher::Count(StepEvent event, size_t n) {
  switch (event) {
    case StepEvent::kRunSent:
      run_requests_.fetch_add(1, std::memory_order_relaxed);
      return;
    case StepEvent::kFinalizeSent:
      finalize_requests_.fetch_add(1, std::memory_order_relaxed);
      return;
    case StepEvent::kSignSent:
      sign_batches_.fetch_add(1, std::memory_order_relaxed);
      sign_requests_.fetch_add(n, std::memory_order_relaxed);
      return;
    default:
      break;
  }
  std::lock_guard<std::mutex> l(mu_);
  switch (event) {
    case StepEvent::kFinalizeOnlyRerun: stats_.finalize_only_rerun += n; break;
    case StepEvent::kSignRerun: stats_.sign_rerun += n; break;
    case StepEvent::kPadsWasted: stats_.pads_wasted += n; break;
    case StepEvent::kSignAnswersFailed: stats_.sign_answers_failed += n; break;
    case StepEvent::kVerifyDisagreed: stats_.verify_disagreed += n; break;
    case StepEvent::kDeviation: stats_.deviations += n; break;
    case StepEvent::kBreakerOpen: stats_.breakers_open = 1; break;
    case StepEvent::kBreakerClosed: stats_.breakers_open = 0; break;
    default: break;
  }
}

void Dispatcher::StepFinished(const std::shared_ptr<BatchStep>& step,
                              StepKind kind, uint64_t blocks, bool failed) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    active_.erase(step);
    switch (kind) {
      case StepKind::kRun:
        --inflight_;
        if (deep_steps_.erase(step.get()) != 0) --deep_inflight_;
        // Only a batch that succeeded measures the cluster's pace: a failed
        // one may have run to its deadline. The hold never exceeds the
        // window, the wait a queue behind a batch in flight is promised.
        if (!failed && options_.hold_pct > 0 && options_.early_flush &&
            !queue_.empty()) {
          const absl::Time now = absl::Now();
          hold_until_ = now + std::min((now - step->start()) * options_.hold_pct / 100,
                                       options_.window);
          hold_jobs_ = step->size();
        }
        break;
      case StepKind::kFinalizeOnly: --finalize_only_inflight_; break;
      case StepKind::kSign: --sign_inflight_; break;
    }
    stats_.blocks += blocks;
    if (failed) ++stats_.failed_batches;
    // A Run's or finalize_only batch's end may let the next one of its
    // queue start (the in-flight limits, early flush); nothing waits for
    // a Sign's.
    const bool waiting =
        (kind == StepKind::kRun && (!queue_.empty() || !deep_queue_.empty())) ||
        (kind == StepKind::kFinalizeOnly && !finalize_only_queue_.empty());
    wake = waiting && NeedsWake(absl::InfinitePast());
  }
  if (wake) cv_.notify_all();
  if (observer_ != nullptr && kind != StepKind::kSign)
    observer_->BatchDone(kind == StepKind::kFinalizeOnly, step->size(), blocks,
                         failed, absl::Now() - step->start());
}

}  // namespace kmpc::kdc
