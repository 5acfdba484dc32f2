#include "kdc_metrics.h"

#include "prometheus/text_serializer.h"
#include "util/process_metrics.h"

namespace kmpc::kdc {

// The batcher's own figures, read at scrape time.
class KdcMetrics::StatsCollector : public prometheus::Collectable {
 public:
  void Set(std::function<BatcherStats()> f) {
    std::lock_guard<std::mutex> l(mu_);
    stats_ = std::move(f);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    BatcherStats s;
    {
      // Held while reading, so that ClearStatsSource waits for a scrape
      // in progress before the batcher goes.
      std::lock_guard<std::mutex> l(mu_);
      if (!stats_) return {};
      s = stats_();
    }
    Families add;
    AddBatchFamilies(s, add);
    AddSpeculationFamilies(s, add);
    return std::move(add.out);
  }

 private:
  using T = prometheus::MetricType;

  // add(name, help, type, value): one family of one sample, in order.
  struct Families {
    void operator()(const char* name, const char* help, T t, double v) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = t;
      prometheus::ClientMetric m;
      if (t == T::Counter)
        m.counter.value = v;
      else
        m.gauge.value = v;
      f.metric.push_back(std::move(m));
      out.push_back(std::move(f));
    }
    std::vector<prometheus::MetricFamily> out;
  };

  // The queue, the batches and their jobs.
  static void AddBatchFamilies(const BatcherStats& s, Families& add) {
    add("kmpc_kdc_queue_jobs", "jobs waiting for a batch", T::Gauge,
        static_cast<double>(s.queued_jobs));
    add("kmpc_kdc_batches_inflight", "batches running", T::Gauge, s.inflight);
    add("kmpc_kdc_speculative_keystreams_held",
        "speculative keystreams held for a ticket or reply", T::Gauge,
        static_cast<double>(s.keystreams_held));
    add("kmpc_kdc_batches_total", "batches started", T::Counter,
        static_cast<double>(s.batches));
    add("kmpc_kdc_batches_failed_total", "batches with a failed job",
        T::Counter, static_cast<double>(s.failed_batches));
    add("kmpc_kdc_jobs_sent_total",
        "jobs sent in batches (speculative ones included)", T::Counter,
        static_cast<double>(s.jobs));
    add("kmpc_kdc_aes_blocks_total", "AES blocks the servers reported",
        T::Counter, static_cast<double>(s.blocks));
  }

  // Speculation, pads and signatures, re-runs and failovers.
  static void AddSpeculationFamilies(const BatcherStats& s, Families& add) {
    add("kmpc_kdc_speculative_encrypts_total",
        "speculative ENCRYPT jobs sent", T::Counter,
        static_cast<double>(s.speculative_encrypts));
    add("kmpc_kdc_speculative_used_total",
        "speculative keystreams a ticket or reply used (hits)", T::Counter,
        static_cast<double>(s.speculative_used));
    add("kmpc_kdc_speculative_wasted_total",
        "speculative groups whose timestamp failed or that expired unused",
        T::Counter, static_cast<double>(s.speculative_wasted));
    add("kmpc_kdc_finalize_only_rerun_total",
        "speculated jobs whose FINALIZE failed and were re-run", T::Counter,
        static_cast<double>(s.finalize_only_rerun));
    add("kmpc_kdc_pads_held", "checksum pads held for a PAC signature",
        T::Gauge, static_cast<double>(s.pads_held));
    add("kmpc_kdc_run_requests_total",
        "Run requests sent (one per batch or re-run, for the three servers)",
        T::Counter, static_cast<double>(s.run_requests));
    add("kmpc_kdc_finalize_requests_total",
        "Finalize requests sent (after a Run, or of speculated keystreams)",
        T::Counter, static_cast<double>(s.finalize_requests));
    add("kmpc_kdc_sign_requests_total",
        "checksums sent ring-free (Sign items: each a signature under a "
        "held pad)",
        T::Counter, static_cast<double>(s.sign_requests));
    add("kmpc_kdc_sign_batches_total",
        "Sign requests sent (one per server each; every checksum queued "
        "when the KDC went idle)",
        T::Counter, static_cast<double>(s.sign_batches));
    add("kmpc_kdc_pads_drawn_total", "PAD jobs sent with a request's first Run",
        T::Counter, static_cast<double>(s.pads_drawn));
    add("kmpc_kdc_pads_used_total", "pads a checksum used (Sign)", T::Counter,
        static_cast<double>(s.pads_used));
    add("kmpc_kdc_verify_pads_used_total",
        "PAC signatures verified ring-free under a verification pad",
        T::Counter, static_cast<double>(s.verify_pads_used));
    add("kmpc_kdc_pads_wasted_total",
        "pads lost with their request's failed DECRYPT or expired unused",
        T::Counter, static_cast<double>(s.pads_wasted));
    add("kmpc_kdc_sign_rerun_total",
        "checksums whose Sign failed (e.g. JOB_PAD_UNAVAILABLE), run instead",
        T::Counter, static_cast<double>(s.sign_rerun));
    add("kmpc_kdc_sign_answers_failed_total",
        "Sign items a server answered with a status other than JOB_OK",
        T::Counter, static_cast<double>(s.sign_answers_failed));
    add("kmpc_kdc_verify_disagreed_total",
        "security events: a ring-free verify refused a signature that the "
        "MPC check (a Run) accepted, so a server deviated",
        T::Counter, static_cast<double>(s.verify_disagreed));
    add("kmpc_kdc_failovers_total",
        "jobs submitted again to another MPC cluster after a cluster failure",
        T::Counter, static_cast<double>(s.failovers));
  }

  mutable std::mutex mu_;
  std::function<BatcherStats()> stats_;
};

namespace {

// Powers of two: one job to a backlog batch (BatcherOptions::backlog_jobs
// 2048 by default, up to 100000).
prometheus::Histogram::BucketBoundaries PowersOfTwo(int max_log2) {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i <= max_log2; ++i) b.push_back(static_cast<double>(1 << i));
  return b;
}

// Sub-millisecond (a FINALIZE-only batch on loopback) to seconds (the
// batch deadline, 3 s by default).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
      0.1,    0.2,    0.5,   1,     2,     5,    10};
  return kBuckets;
}

}  // namespace

KdcMetrics::KdcMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      stats_(std::make_shared<StatsCollector>()),
      process_(std::make_shared<util::ProcessMetrics>()) {
  const char* kinds[2] = {"run", "finalize_only"};
  auto& jobs = prometheus::BuildHistogram()
                   .Name("kmpc_kdc_batch_jobs")
                   .Help("jobs per batch")
                   .Register(*registry_);
  auto& blocks = prometheus::BuildHistogram()
                     .Name("kmpc_kdc_batch_blocks")
                     .Help("AES blocks per batch (servers' figure)")
                     .Register(*registry_);
  auto& latency = prometheus::BuildHistogram()
                      .Name("kmpc_kdc_batch_latency_seconds")
                      .Help("a batch's MPC round trip: from its start to its "
                            "last answer (Run and Finalize)")
                      .Register(*registry_);
  for (int k = 0; k < 2; ++k) {
    batch_jobs_[k] = &jobs.Add({{"kind", kinds[k]}}, PowersOfTwo(17));
    batch_blocks_[k] = &blocks.Add({{"kind", kinds[k]}}, PowersOfTwo(20));
    latency_[k] = &latency.Add({{"kind", kinds[k]}}, LatencyBuckets());
  }
  auto& completed = prometheus::BuildCounter()
                        .Name("kmpc_kdc_jobs_completed_total")
                        .Help("jobs handed back to the KDC, by result")
                        .Register(*registry_);
  completed_ok_ = &completed.Add({{"result", "ok"}});
  completed_error_ = &completed.Add({{"result", "error"}});
  failures_ = &prometheus::BuildCounter()
                   .Name("kmpc_kdc_job_failures_total")
                   .Help("jobs handed back to the KDC failed, by cause")
                   .Register(*registry_);
  refused_ = &prometheus::BuildCounter()
                  .Name("kmpc_kdc_jobs_refused_total")
                  .Help("jobs refused at submit, by cause")
                  .Register(*registry_);
}

void KdcMetrics::SetStatsSource(std::function<BatcherStats()> stats) {
  stats_->Set(std::move(stats));
}

void KdcMetrics::ClearStatsSource() { stats_->Set(nullptr); }

void KdcMetrics::BatchDone(bool finalize_only, size_t jobs, uint64_t blocks,
                           bool /*failed*/, absl::Duration latency) {
  const int k = finalize_only ? 1 : 0;
  batch_jobs_[k]->Observe(static_cast<double>(jobs));
  batch_blocks_[k]->Observe(static_cast<double>(blocks));
  latency_[k]->Observe(absl::ToDoubleSeconds(latency));
}

const char* KdcMetrics::CauseOf(const absl::Status& s) {
  // The meanings are job.h's (and KrbErrorFromStatus's in module.cc).
  switch (s.code()) {
    case absl::StatusCode::kOk: return "ok";
    case absl::StatusCode::kUnavailable: return "unavailable";
    case absl::StatusCode::kDeadlineExceeded: return "deadline";
    case absl::StatusCode::kResourceExhausted: return "overloaded";
    case absl::StatusCode::kAborted: return "aborted";
    case absl::StatusCode::kCancelled: return "cancelled";
    case absl::StatusCode::kNotFound: return "unknown_key";
    case absl::StatusCode::kPermissionDenied: return "wrong_cipher";
    case absl::StatusCode::kDataLoss: return "integrity";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition: return "invalid";
    default: return "internal";
  }
}

void KdcMetrics::JobDone(const absl::Status& status) {
  if (status.ok()) {
    completed_ok_->Increment();
    return;
  }
  completed_error_->Increment();
  failures_->Add({{"cause", CauseOf(status)}}).Increment();
}

void KdcMetrics::JobRefused(const absl::Status& status) {
  refused_->Add({{"cause", CauseOf(status)}}).Increment();
}

std::string KdcMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : collectables())
    if (auto p = c.lock())
      for (auto& f : p->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

std::vector<std::weak_ptr<prometheus::Collectable>> KdcMetrics::collectables()
    const {
  return {registry_, stats_, process_};
}

}  // namespace kmpc::kdc
