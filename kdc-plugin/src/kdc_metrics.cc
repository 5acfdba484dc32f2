#include "kdc_metrics.h"

#include "freshness.h"
#include "prometheus/text_serializer.h"
#include "status_class.h"
#include "transport.h"
#include "util/process_metrics.h"

namespace kmpc::kdc {

namespace {

using T = prometheus::MetricType;

// A BatcherStats field as a sample's value.
template <auto kField>
double Read(const BatcherStats& s) {
  return static_cast<double>(s.*kField);
}

// The batcher's families, one sample each, in exposition order: the queue,
// the batches and their jobs; then prepared keystreams, pads and signatures,
// re-runs and failovers.
struct StatsFamily {
  const char* name;
  const char* help;
  T type;
  double (*value)(const BatcherStats&);
};
using S = BatcherStats;
constexpr StatsFamily kStatsFamilies[] = {
    {"kmpc_kdc_queue_jobs", "jobs waiting for a batch", T::Gauge, Read<&S::queued_jobs>},
    {"kmpc_kdc_batches_inflight", "batches running", T::Gauge, Read<&S::inflight>},
    {"kmpc_kdc_speculative_keystreams_held",
     "prepared keystreams held for a plan's ticket or reply (the name is older than the plan)", T::Gauge, Read<&S::keystreams_held>},
    {"kmpc_kdc_batches_total", "batches started", T::Counter, Read<&S::batches>},
    {"kmpc_kdc_batches_failed_total", "batches with a failed job", T::Counter,
     Read<&S::failed_batches>},
    {"kmpc_kdc_deep_batches_total",
     "batches of one exchange's jobs deeper than deep_rounds, sent alone", T::Counter,
     Read<&S::deep_batches>},
    {"kmpc_kdc_cts_shape_cuts_total",
     "batches ended before the next job: its aes*-cts programs would pass the servers' "
     "bound on one batch's distinct programs (kCtsBatchBytes)",
     T::Counter, Read<&S::cts_shape_cuts>},
    {"kmpc_kdc_cts_unproven_refused_total",
     "exchanges refused: their aes*-cts gate's shape is unproven and the compile budget "
     "(cts_unproven_per_minute) spent",
     T::Counter, Read<&S::cts_unproven_refused>},
    {"kmpc_kdc_jobs_sent_total", "jobs sent in batches (prepared ones included)",
     T::Counter, Read<&S::jobs>},
    {"kmpc_kdc_aes_blocks_total", "AES blocks the servers reported", T::Counter,
     Read<&S::blocks>},
    {"kmpc_kdc_speculative_encrypts_total", "prepared ENCRYPT jobs (keystreams for a plan item) sent", T::Counter,
     Read<&S::speculative_encrypts>},
    {"kmpc_kdc_speculative_used_total",
     "prepared keystreams a ticket or reply used (hits)", T::Counter,
     Read<&S::speculative_used>},
    {"kmpc_kdc_speculative_wasted_total",
     "prepared keystreams never used (gate failed, expired, exchange over)", T::Counter,
     Read<&S::speculative_wasted>},
    {"kmpc_kdc_finalize_only_rerun_total",
     "prepared keystreams' jobs whose FINALIZE failed and were re-run", T::Counter,
     Read<&S::finalize_only_rerun>},
    {"kmpc_kdc_pads_held", "checksum pads held for a PAC signature", T::Gauge,
     Read<&S::pads_held>},
    {"kmpc_kdc_run_requests_total",
     "Run requests sent (one per batch or re-run, for the three servers)", T::Counter,
     Read<&S::run_requests>},
    {"kmpc_kdc_finalize_requests_total",
     "Finalize requests sent (after a Run, or of prepared keystreams)", T::Counter,
     Read<&S::finalize_requests>},
    {"kmpc_kdc_sign_requests_total",
     "checksums sent ring-free (Sign items: each a signature under a held pad)", T::Counter,
     Read<&S::sign_requests>},
    {"kmpc_kdc_sign_batches_total",
     "Sign requests sent (one per server each; every checksum queued when the KDC went "
     "idle)",
     T::Counter, Read<&S::sign_batches>},
    {"kmpc_kdc_pads_drawn_total", "PAD jobs sent with a request's first Run", T::Counter,
     Read<&S::pads_drawn>},
    {"kmpc_kdc_pads_used_total", "pads a checksum used (Sign)", T::Counter,
     Read<&S::pads_used>},
    {"kmpc_kdc_sign_chains_total",
     "Sign items that chained a PAC's KDC signature to its server signature", T::Counter,
     Read<&S::chains_sent>},
    {"kmpc_kdc_chained_signatures_total",
     "checksums completed from a chained Sign answer, without a request", T::Counter,
     Read<&S::chained_used>},
    {"kmpc_kdc_verify_pads_used_total",
     "PAC signatures verified ring-free under a verification pad", T::Counter,
     Read<&S::verify_pads_used>},
    {"kmpc_kdc_pads_wasted_total",
     "pads lost with their request's failed DECRYPT or expired unused", T::Counter,
     Read<&S::pads_wasted>},
    {"kmpc_kdc_sign_rerun_total",
     "checksums whose Sign failed (e.g. JOB_PAD_UNAVAILABLE), run instead", T::Counter,
     Read<&S::sign_rerun>},
    {"kmpc_kdc_sign_answers_failed_total",
     "Sign items a server answered with a status other than JOB_OK", T::Counter,
     Read<&S::sign_answers_failed>},
    {"kmpc_kdc_verify_disagreed_total",
     "security events: a ring-free verify refused a signature that the MPC check (a Run) "
     "accepted, so a server deviated",
     T::Counter, Read<&S::verify_disagreed>},
    {"kmpc_kdc_deviations_total",
     "security events: Run batches a server refused because its malicious check found that "
     "a server of the cluster deviated (BATCH_INTEGRITY_CHECK_FAILED); wrong passwords are "
     "kmpc_kdc_job_failures_total{cause=\"integrity\"}",
     T::Counter, Read<&S::deviations>},
    {"kmpc_kdc_breaker_open",
     "clusters whose last Run a server refused because its deviation breaker is open "
     "(BATCH_BREAKER_OPEN)",
     T::Gauge, Read<&S::breakers_open>},
    {"kmpc_kdc_cts_deferred_total",
     "gated aes*-cts jobs (AS replies) of a shape no verified gate proved, held back from "
     "their gate's Run",
     T::Counter, Read<&S::cts_deferred>},
    {"kmpc_kdc_cts_deferred_sent_total",
     "held-back aes*-cts jobs sent in a Run of their own after their gate verified",
     T::Counter, Read<&S::cts_deferred_sent>},
    {"kmpc_kdc_failovers_total",
     "jobs submitted again to another MPC cluster after a cluster failure", T::Counter,
     Read<&S::failovers>},
};

}  // namespace

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
    std::vector<prometheus::MetricFamily> out;
    for (const StatsFamily& sf : kStatsFamilies) {
      prometheus::MetricFamily f;
      f.name = sf.name;
      f.help = sf.help;
      f.type = sf.type;
      prometheus::ClientMetric m;
      if (sf.type == T::Counter)
        m.counter.value = sf.value(s);
      else
        m.gauge.value = sf.value(s);
      f.metric.push_back(std::move(m));
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
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
  RegisterExchangeFamilies();
}

void KdcMetrics::RegisterExchangeFamilies() {
  exchanges_ = &prometheus::BuildCounter()
                    .Name("kmpc_kdc_exchanges_total")
                    .Help("planned exchanges ended, by kind and result")
                    .Register(*registry_);
  exchange_runs_ = &prometheus::BuildCounter()
                        .Name("kmpc_kdc_exchange_runs_total")
                        .Help("Run requests that carried a job of a planned "
                              "exchange, summed when it ended")
                        .Register(*registry_);
  plan_misses_ = &prometheus::BuildCounter()
                      .Name("kmpc_kdc_plan_misses_total")
                      .Help("plan items run in a Run of their own, by "
                            "exchange, role and reason")
                      .Register(*registry_);
}

void KdcMetrics::ExchangeEnded(const ExchangeRecord& record, bool ok) {
  const std::string kind = ExchangeName(record.kind);
  const std::string result = ok ? "ok" : "failed";
  exchanges_->Add({{"exchange", kind}, {"result", result}}).Increment();
  exchange_runs_->Add({{"exchange", kind}, {"result", result}})
      .Increment(static_cast<double>(record.runs));
  for (const auto& [role, why] : record.misses)
    plan_misses_
        ->Add({{"exchange", kind}, {"role", RoleName(role)}, {"reason", MissName(why)}})
        .Increment();
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
  // The meanings are job.h's; the labels contract::ClassOf's.
  if (IsDeviation(s)) return "deviation";  // kUnavailable, a security event
  if (IsReplayedGate(s)) return "replayed";  // kResourceExhausted, freshness.h
  return contract::ClassOf(s.code()).cause;
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
