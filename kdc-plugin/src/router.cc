#include "router.h"

#include <syslog.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace kmpc::kdc {
namespace {

// A failure that says nothing about the job, only about the cluster (or
// that the cluster lacks the key id): another cluster may well succeed.
bool ClusterFailure(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kNotFound:
      return true;
    default:
      return false;
  }
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
               Sink* sink, BatchObserver* observer)
    : options_(options),
      transports_(std::move(transports)),
      sink_(sink),
      down_until_(transports_.size(), absl::InfinitePast()),
      reach_checked_(transports_.size(), absl::InfinitePast()),
      reach_ok_(transports_.size(), true) {
  for (size_t c = 0; c < transports_.size(); ++c) {
    // One cluster: its batcher delivers straight to the sink, as before
    // there were several.
    Sink* s = sink;
    if (transports_.size() > 1) {
      sinks_.push_back(std::make_unique<ClusterSink>(this, c));
      s = sinks_.back().get();
    }
    batchers_.push_back(
        std::make_unique<Batcher>(options, transports_[c], s, observer));
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

int Router::Pick(uint32_t tried, absl::Time now) {
  int fallback = -1;
  for (size_t c = 0; c < transports_.size(); ++c) {
    if (tried & (1u << c)) continue;
    if (down_until_[c] <= now && Reachable(c, now))
      return static_cast<int>(c);
    if (fallback < 0 || down_until_[c] < down_until_[fallback])
      fallback = static_cast<int>(c);
  }
  return fallback;
}

absl::Status Router::Submit(uint64_t token, Job job) {
  if (transports_.size() == 1)
    return batchers_[0]->Submit(token, std::move(job));
  const absl::Time now = absl::Now();
  int c;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_)
      return absl::UnavailableError("the kdcmpc module is shutting down");
    c = Pick(0, now);
    // Registered before the batcher has it: its answer may come at once.
    Pending& p = pending_[token];
    p.job = job;
    p.submitted = now;
    p.tried = 1u << c;
  }
  absl::Status st = batchers_[c]->Submit(token, std::move(job));
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    pending_.erase(token);
  }
  return st;
}

void Router::OnResult(size_t cluster, Result r) {
  if (!ClusterFailure(r.status)) {
    Deliver(std::move(r));
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (r.status.code() != absl::StatusCode::kNotFound)
      down_until_[cluster] = absl::Now() + kDownFor;
    auto it = pending_.find(r.token);
    const bool retry =
        !stopping_ && it != pending_.end() &&
        Pick(it->second.tried, absl::Now()) >= 0 &&
        absl::Now() - it->second.submitted < kRetryWithin * options_.deadline;
    if (retry) {
      retries_.push_back({r.token, std::move(r.status)});
      cv_.notify_one();
      return;
    }
  }
  Deliver(std::move(r));
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
  for (;;) {
    cv_.wait(lk, [this] { return stopping_ || !retries_.empty(); });
    if (stopping_) return;
    Retry r = std::move(retries_.front());
    retries_.pop_front();
    auto it = pending_.find(r.token);
    if (it == pending_.end()) continue;
    const int c = Pick(it->second.tried, absl::Now());
    if (c < 0) {
      lk.unlock();
      Deliver(Result{r.token, std::move(r.first), {}});
      lk.lock();
      continue;
    }
    it->second.tried |= 1u << c;
    Job job = it->second.job;
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
    absl::Status st = batchers_[c]->Submit(r.token, std::move(job));
    if (!st.ok()) Deliver(Result{r.token, std::move(st), {}});
    lk.lock();
  }
}

void Router::SubmitterIdle() {
  for (auto& b : batchers_) b->SubmitterIdle();
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
    s.speculative_encrypts += x.speculative_encrypts;
    s.speculative_used += x.speculative_used;
    s.finalize_only_rerun += x.finalize_only_rerun;
    s.keystreams_held += x.keystreams_held;
    s.speculative_wasted += x.speculative_wasted;
    s.inflight += x.inflight;
    s.queued_jobs += x.queued_jobs;
  }
  std::lock_guard<std::mutex> l(mu_);
  s.failovers = failovers_;
  return s;
}

}  // namespace kmpc::kdc
