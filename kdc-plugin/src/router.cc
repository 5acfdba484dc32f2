#include "router.h"

#include <syslog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dispatcher.h"
#include "gate_book.h"
#include "status_class.h"

namespace kmpc::kdc {
namespace {

// A failure that says nothing about the job, only about the cluster (or
// that the cluster lacks the key id): another cluster may well succeed.
bool ClusterFailure(const absl::Status& s) {
  return contract::ClassOf(s.code()).kdc_cluster_failure;
}

}  // namespace

// One per cluster: tags the cluster's results for OnResult.
class Router::ClusterSink : public Sink {
 public:
  ClusterSink(Router* router, size_t cluster)
      : router_(router), cluster_(cluster) {}
  void Deliver(Result r) override { router_->OnResult(cluster_, std::move(r)); }
  // Only with several clusters (a lone cluster's batcher logs straight
  // to the sink, unprefixed).
  void Log(int level, std::string line) override {
    router_->sink_->Log(level,
                        absl::StrCat("cluster ", cluster_ + 1, ": ", line));
  }

 private:
  Router* const router_;
  const size_t cluster_;
};

Router::Router(BatcherOptions options, std::vector<Transport*> transports,
               Sink* sink, BatchObserver* observer, std::shared_ptr<GateBook> gates)
    : options_(options),
      transports_(std::move(transports)),
      sink_(sink),
      down_until_(transports_.size(), absl::InfinitePast()),
      failures_(transports_.size(), 0),
      probe_(transports_.size(), 0),
      reach_checked_(transports_.size(), absl::InfinitePast()),
      reach_ok_(transports_.size(), true) {
  // One gate book for all clusters: a gate replayed to another is caught.
  if (gates == nullptr) gates = std::make_shared<GateBook>(options, transports_.size());
  for (size_t c = 0; c < transports_.size(); ++c) {
    // One cluster: its batcher delivers straight to the sink, as before
    // there were several.
    Sink* s = sink;
    if (transports_.size() > 1) {
      sinks_.push_back(std::make_unique<ClusterSink>(this, c));
      s = sinks_.back().get();
    }
    batchers_.push_back(
        std::make_unique<Batcher>(options, transports_[c], s, observer, gates, c));
  }
  if (transports_.size() > 1)
    retry_thread_ = std::thread([this] { RetryLoop(); });
}

Router::~Router() { Stop(); }

bool Router::Reachable(size_t c, absl::Time now) {
  if (now - reach_checked_[c] < kReachableEvery) return reach_ok_[c];
  bool ok = true;
  for (int p = 0; p < 3 && ok; ++p) ok = transports_[c]->Reachable(p).ok();
  reach_checked_[c] = now;
  reach_ok_[c] = ok;
  return ok;
}

int Router::Pick(uint32_t tried, absl::Time now, uint64_t token) {
  int fallback = -1;
  for (size_t c = 0; c < transports_.size(); ++c) {
    if (tried & (1u << c)) continue;
    if (down_until_[c] <= now && Reachable(c, now)) {
      if (failures_[c] == 0) return static_cast<int>(c);
      // Failed before: one job at a time finds out whether it is back.
      if (probe_[c] == 0) {
        probe_[c] = token;
        return static_cast<int>(c);
      }
    }
    if (fallback < 0 || down_until_[c] < down_until_[fallback])
      fallback = static_cast<int>(c);
  }
  return fallback;
}

bool Router::ClusterAnswered(size_t c, uint64_t token, bool failed,
                             absl::Time now) {
  const bool probe = token != 0 && probe_[c] == token;
  if (probe) probe_[c] = 0;
  if (!failed) {
    if (probe) {  // it answered: healthy again
      failures_[c] = 0;
      down_until_[c] = absl::InfinitePast();
    }
    return false;
  }
  // One failure per event: the other jobs of a failed batch, and those
  // still in flight there, fail while the cluster is down already.
  if (down_until_[c] > now && !probe) return false;
  // kDownFor, doubled for each failure in a row, at most kMaxDownFor.
  const int n = std::min(++failures_[c], 16);
  down_until_[c] = now + std::min(kDownFor * (1 << (n - 1)), kMaxDownFor);
  // The jobs queued behind the failed batch would go into its next batch
  // (a hung server holds that one until its deadline too): they go
  // elsewhere now, if another cluster is healthy (OnResult).
  for (size_t d = 0; d < transports_.size(); ++d)
    if (d != c && failures_[d] == 0 && down_until_[d] <= now) return true;
  return false;
}

absl::Status Router::Submit(uint64_t token, Job job) {
  if (transports_.size() == 1)
    return batchers_[0]->dispatcher().Submit(token, std::move(job));
  const absl::Time now = absl::Now();
  int c;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_)
      return absl::UnavailableError("the kdcmpc module is shutting down");
    c = Pick(0, now, token);
    // Registered before the batcher has it: its answer may come at once.
    Pending& p = pending_[token];
    p.job = job;
    p.submitted = now;
    p.tried = 1u << c;
  }
  absl::Status st = batchers_[c]->dispatcher().Submit(token, std::move(job));
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    pending_.erase(token);
    if (probe_[c] == token) probe_[c] = 0;
  }
  return st;
}

// Under mu_: registers a copy of `job` for a retry elsewhere (2+ clusters).
void Router::Register(uint64_t token, const Job& job, absl::Time now, int c,
                      std::shared_ptr<const Job> gate) {
  if (transports_.size() == 1) return;
  Pending& p = pending_[token];
  p.job = job;
  p.submitted = now;
  p.tried = 1u << c;
  p.gate = std::move(gate);
}

// The gate's copy for `plan`'s items that need it apart from the gate's
// Run (planner.h GatedOnItsTimestamp): a failover's retry of one given
// now, or a later one sent to another cluster.
Router::Gate Router::GateOf(const Plan& plan, const std::vector<ItemJob>& given) {
  Gate g;
  if (!Planner::Check(plan).ok()) return g;  // the dispatcher's Begin refuses it
  g.items.resize(plan.items.size());
  int gate = -1;
  for (size_t i = 0; i < plan.items.size(); ++i)
    if ((g.items[i] = GatedOnItsTimestamp(plan, i))) gate = plan.items[i].gate;
  for (const ItemJob& j : given)
    if (gate >= 0 && j.item == gate) g.job = std::make_shared<const Job>(j.job);
  return g;
}

// Under mu_: forgets jobs the batcher refused.
void Router::Unregister(const std::vector<uint64_t>& tokens, int c) {
  for (uint64_t t : tokens) {
    pending_.erase(t);
    if (probe_[c] == t) probe_[c] = 0;
  }
}

absl::Status Router::Begin(uint64_t id, Plan plan, std::vector<ItemJob> given) {
  const absl::Time now = absl::Now();
  std::vector<uint64_t> tokens;
  int c = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_)
      return absl::UnavailableError("the kdcmpc module is shutting down");
    if (pinned_.count(id))
      return absl::InvalidArgumentError("the exchange was begun already");
    Gate gate;
    if (transports_.size() > 1) {
      c = Pick(0, now, given.empty() ? 0 : given[0].token);
      gate = GateOf(plan, given);
    }
    for (const ItemJob& g : given) {
      tokens.push_back(g.token);
      const bool gated = gate.job && g.item >= 0 &&
                         static_cast<size_t>(g.item) < gate.items.size() && gate.items[g.item];
      // Before the batcher has it.
      Register(g.token, g.job, now, c, gated ? gate.job : nullptr);
    }
    if (gate.job) gates_[id] = std::move(gate);
    pinned_[id] = c;
  }
  absl::Status st =
      batchers_[c]->dispatcher().Begin(id, std::move(plan), std::move(given));
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    Unregister(tokens, c);
    pinned_.erase(id);
    gates_.erase(id);
  }
  return st;
}

absl::Status Router::SubmitItem(uint64_t id, int item, uint64_t token, Job job) {
  const absl::Time now = absl::Now();
  int c, to;
  std::shared_ptr<const Job> gate;  // its gate's copy goes with it elsewhere
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_)
      return absl::UnavailableError("the kdcmpc module is shutting down");
    auto it = pinned_.find(id);
    if (it == pinned_.end())
      return absl::InvalidArgumentError("no such exchange (begin, or ended)");
    c = to = it->second;
    if (transports_.size() > 1 && (failures_[c] != 0 || down_until_[c] > now)) {
      const int d = Pick(1u << c, now, token);
      if (d >= 0) to = d;
    }
    auto g = gates_.find(id);
    if (g != gates_.end() && item >= 0 && static_cast<size_t>(item) < g->second.items.size() &&
        g->second.items[item])
      gate = g->second.job;
    Register(token, job, now, to, gate);
  }
  absl::Status st;
  if (to == c) {
    st = batchers_[c]->dispatcher().SubmitItem(id, item, token, std::move(job));
  } else {
    batchers_[c]->dispatcher().CountMiss(id, item, Miss::kFailover);
    st = batchers_[to]->dispatcher().Submit(token, std::move(job), gate.get());
  }
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    Unregister({token}, to);
  }
  return st;
}

std::optional<ExchangeRecord> Router::End(uint64_t id) {
  int c;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pinned_.find(id);
    if (it == pinned_.end()) return std::nullopt;
    c = it->second;
    pinned_.erase(it);
    gates_.erase(id);
  }
  return batchers_[c]->dispatcher().End(id);
}

void Router::OnResult(size_t cluster, Result r) {
  const bool cluster_failure = ClusterFailure(r.status);
  if (IsDeviation(r.status)) LogDeviation(cluster, r.status);
  bool move_queued;
  {
    std::lock_guard<std::mutex> l(mu_);
    // kNotFound: the cluster answered, it only lacks that key id.
    move_queued = ClusterAnswered(
        cluster, r.token,
        cluster_failure && r.status.code() != absl::StatusCode::kNotFound,
        absl::Now());
  }
  if (move_queued) {
    // Here, before the failed batch's step ends and its dispatcher can
    // start the next batch (the sink is told of every job of a step before
    // it ends). Under the dispatcher's sink gate, outside mu_.
    std::vector<uint64_t> held_back;
    std::vector<uint64_t> moved =
        batchers_[cluster]->dispatcher().TakeQueued(&held_back);
    {
      std::lock_guard<std::mutex> l(mu_);
      for (uint64_t t : moved)
        retries_.push_back({t, absl::UnavailableError(absl::StrCat(
                                   "queued on MPC cluster ", cluster + 1,
                                   " when it failed a batch"))});
      if (!moved.empty()) cv_.notify_one();
    }
    // A job held back for a gate does not follow it: it would run on the
    // other cluster without its gate (gate_book.h).
    for (uint64_t t : held_back) {
      Result f;
      f.token = t;
      f.status = GateBook::HeldBackFailure(absl::StrCat(
          "its gate was queued on MPC cluster ", cluster + 1, " when it failed a batch"));
      Deliver(std::move(f));
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cluster_failure) {
      auto it = pending_.find(r.token);
      // Invariant: a job goes to a cluster at most once (Submit and
      // RetryLoop set its bit before sending; Pick skips set bits), so an
      // integrity-failed batch (IsDeviation) is never resent to the
      // cluster that detected the deviation, only to another one.
      if (it != pending_.end()) it->second.tried |= 1u << cluster;
      const uint32_t all = (1u << transports_.size()) - 1;
      const bool retry = !stopping_ && it != pending_.end() &&
                         (it->second.tried & all) != all &&
                         absl::Now() - it->second.submitted <
                             kRetryWithin * options_.deadline;
      if (retry) {
        retries_.push_back({r.token, std::move(r.status)});
        cv_.notify_one();
        return;
      }
    }
  }
  Deliver(std::move(r));
}

// At most once a second: a deviation fails a whole batch.
void Router::LogDeviation(size_t cluster, const absl::Status& st) {
  const absl::Time now = absl::Now();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now - last_deviation_log_ < absl::Seconds(1)) return;
    last_deviation_log_ = now;
  }
  sink_->Log(LOG_ERR, absl::StrCat("kdcmpc: MPC cluster ", cluster + 1,
                                   " detected a deviation from the protocol (",
                                   st.message(), "); its failed jobs are never "
                                   "sent to it again"));
}

void Router::Deliver(Result r) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_.erase(r.token);
  }
  sink_->Deliver(std::move(r));
}

void Router::RetryLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  uint32_t submitted = 0;  // bit c: a retry went to cluster c
  for (;;) {
    if (retries_.empty() && submitted != 0) {
      // This thread is the retries' submitter: it says when it is done
      // (BatcherOptions::submitter_kicks), once for all it just submitted.
      lk.unlock();
      for (size_t c = 0; c < batchers_.size(); ++c)
        if (submitted & (1u << c)) batchers_[c]->dispatcher().SubmitterIdle();
      submitted = 0;
      lk.lock();
      continue;
    }
    cv_.wait(lk, [this] { return stopping_ || !retries_.empty(); });
    if (stopping_) return;
    Retry r = std::move(retries_.front());
    retries_.pop_front();
    auto it = pending_.find(r.token);
    if (it == pending_.end()) continue;
    const int c = Pick(it->second.tried, absl::Now(), r.token);
    if (c < 0) {
      lk.unlock();
      Deliver(Result{r.token, std::move(r.first), {}});
      lk.lock();
      continue;
    }
    it->second.tried |= 1u << c;
    Job job = it->second.job;
    const std::shared_ptr<const Job> gate = it->second.gate;
    ++failovers_;
    // One line a second at most: a cluster going down fails a whole batch.
    const absl::Time now = absl::Now();
    const bool log = now - last_log_ >= absl::Seconds(1);
    if (log) last_log_ = now;
    const uint64_t total = failovers_;
    lk.unlock();
    if (log)
      sink_->Log(LOG_WARNING,
                 absl::StrCat("kdcmpc: jobs go to cluster ", c + 1,
                              " after failing elsewhere (", r.first.message(),
                              "); ", total, " jobs failed over so far"));
    absl::Status st =
        batchers_[c]->dispatcher().Submit(r.token, std::move(job), gate.get());
    if (!st.ok())
      Deliver(Result{r.token, std::move(st), {}});
    else
      submitted |= 1u << c;
    lk.lock();
  }
}

void Router::SubmitterIdle() {
  for (auto& b : batchers_) b->dispatcher().SubmitterIdle();
}

void Router::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (retry_thread_.joinable()) retry_thread_.join();
  for (auto& b : batchers_) b->Stop();
  std::lock_guard<std::mutex> l(mu_);
  pending_.clear();  // SecureBytes wipe themselves
  pinned_.clear();
  retries_.clear();
}

BatcherStats Router::stats() const {
  BatcherStats s;
  for (const auto& b : batchers_) {
    BatcherStats x = b->stats();
    s.batches += x.batches;
    s.jobs += x.jobs;
    s.blocks += x.blocks;
    s.failed_batches += x.failed_batches;
    s.deep_batches += x.deep_batches;
    s.cts_shape_cuts += x.cts_shape_cuts;
    s.cts_unproven_refused += x.cts_unproven_refused;
    s.speculative_encrypts += x.speculative_encrypts;
    s.speculative_used += x.speculative_used;
    s.finalize_only_rerun += x.finalize_only_rerun;
    s.keystreams_held += x.keystreams_held;
    s.speculative_wasted += x.speculative_wasted;
    s.inflight += x.inflight;
    s.queued_jobs += x.queued_jobs;
    s.run_requests += x.run_requests;
    s.finalize_requests += x.finalize_requests;
    s.sign_requests += x.sign_requests;
    s.sign_batches += x.sign_batches;
    s.pads_drawn += x.pads_drawn;
    s.pads_used += x.pads_used;
    s.verify_pads_used += x.verify_pads_used;
    s.chains_sent += x.chains_sent;
    s.chained_used += x.chained_used;
    s.cts_deferred += x.cts_deferred;
    s.cts_deferred_sent += x.cts_deferred_sent;
    s.pads_wasted += x.pads_wasted;
    s.pads_held += x.pads_held;
    s.sign_rerun += x.sign_rerun;
    s.sign_answers_failed += x.sign_answers_failed;
    s.verify_disagreed += x.verify_disagreed;
    s.deviations += x.deviations;
    s.breakers_open += x.breakers_open;
  }
  std::lock_guard<std::mutex> l(mu_);
  s.failovers = failovers_;
  return s;
}

}  // namespace kmpc::kdc
