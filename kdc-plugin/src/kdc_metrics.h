// The kdcmpc module's Prometheus metrics, served over HTTP by a
// prometheus::Exposer in the KDC process when kdc.conf sets
// [kdcmpc] kmpc = { metrics_addr = HOST:PORT } (options.h).
//
//   kmpc_kdc_queue_jobs                  gauge: jobs waiting for a batch
//   kmpc_kdc_batches_inflight            gauge: batches running
//   kmpc_kdc_speculative_keystreams_held gauge
//   kmpc_kdc_batches_total / _batches_failed_total / _jobs_sent_total /
//   _aes_blocks_total                    counters of the batcher
//   kmpc_kdc_speculative_{encrypts,used,wasted}_total,
//   kmpc_kdc_finalize_only_rerun_total   prepared keystreams: sent, hits, waste
//   kmpc_kdc_run_requests_total, _finalize_requests_total,
//   _sign_batches_total                  requests sent to the cluster (once
//                                        for its three servers): "Run
//                                        batches per exchange" is the
//                                        difference of run_requests around
//                                        one exchange
//   kmpc_kdc_sign_requests_total         checksums sent ring-free (Sign
//                                        items; one Sign request carries
//                                        all those queued at once)
//   kmpc_kdc_pads_{drawn,used,wasted}_total, kmpc_kdc_pads_held,
//   kmpc_kdc_sign_rerun_total            checksum pads (planner.h)
//   kmpc_kdc_sign_answers_failed_total   Sign items answered other than
//                                        JOB_OK by some server
//   kmpc_kdc_verify_disagreed_total      security events: a ring-free
//                                        verify refused a signature the
//                                        Run's MPC check accepted
//   kmpc_kdc_deviations_total            security events: Run batches a
//                                        server refused with
//                                        BATCH_INTEGRITY_CHECK_FAILED (a
//                                        server deviated; not a wrong
//                                        password: those are
//                                        job_failures_total{cause=
//                                        "integrity"})
//   kmpc_kdc_breaker_open                gauge: clusters whose last Run was
//                                        refused with BATCH_BREAKER_OPEN
//   kmpc_kdc_cts_deferred_total,         gated aes*-cts jobs of unproven
//   kmpc_kdc_cts_deferred_sent_total     shapes held back from their gate's
//                                        Run; of them, sent after it
//                                        verified (planner.h)
//   kmpc_kdc_failovers_total             jobs sent again to another MPC
//                                        cluster (router.h); with several
//                                        clusters every figure here is
//                                        their sum
//   kmpc_kdc_batch_jobs{kind}            histogram: jobs per batch
//   kmpc_kdc_batch_blocks{kind}          histogram: AES blocks per batch
//   kmpc_kdc_batch_latency_seconds{kind} histogram: MPC round trip of a
//                                        batch (Run and Finalize)
//   kmpc_kdc_jobs_completed_total{result}  jobs handed back to the KDC
//   kmpc_kdc_job_failures_total{cause}   ... that failed, by cause
//   kmpc_kdc_jobs_refused_total{cause}   jobs refused at submit
//   kmpc_kdc_exchanges_total{exchange,result}, kmpc_kdc_exchange_runs_total
//   {exchange,result}                    planned exchanges (planner.h)
//                                        ended, and the Run requests that
//                                        carried a job of them: "Runs per
//                                        exchange" is their ratio
//   kmpc_kdc_plan_misses_total{exchange,role,reason}  plan items that ran
//                                        in a Run of their own (bound,
//                                        ctr0, expired, budget, failover)
//   plus process memory (util/process_metrics.h).
// kind is "run" or "finalize_only". Nothing here is secret: counts, sizes,
// durations and public failure causes.
//
// krb5kdc -w N runs the module in each of N worker processes; only the
// first to bind metrics_addr serves it (its own figures); the others log a
// warning and run on without metrics. Likewise a port already taken only
// costs the metrics, never the KDC. civetweb (under prometheus::Exposer)
// sets SIGPIPE to SIG_IGN in the process; krb5kdc ignores it already
// (through a libev watcher that this replaces).
#ifndef KMPC_KDC_PLUGIN_KDC_METRICS_H_
#define KMPC_KDC_PLUGIN_KDC_METRICS_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "batch_stats.h"
#include "plan.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kmpc::kdc {

class KdcMetrics : public BatchObserver {
 public:
  KdcMetrics();

  // Where the batcher's gauges and counters are read at each scrape
  // (Batcher::stats); until set, and after ClearStatsSource, they are
  // left out.
  void SetStatsSource(std::function<BatcherStats()> stats);
  void ClearStatsSource();

  // BatchObserver.
  void BatchDone(bool finalize_only, size_t jobs, uint64_t blocks, bool failed,
                 absl::Duration latency) override;
  // A job the KDC gets back (OK or not), and one refused at submit.
  void JobDone(const absl::Status& status);
  void JobRefused(const absl::Status& status);
  // A planned exchange ended (planner.h): kmpc_kdc_exchanges_total,
  // kmpc_kdc_exchange_runs_total{exchange,result} (result "ok" when none of
  // its jobs failed) and kmpc_kdc_plan_misses_total{exchange,role,reason}.
  void ExchangeEnded(const ExchangeRecord& record, bool ok);

  // The public name of a failure's cause ("unavailable", "integrity", ...).
  static const char* CauseOf(const absl::Status& status);

  std::string Render() const;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;

 private:
  class StatsCollector;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StatsCollector> stats_;
  std::shared_ptr<prometheus::Collectable> process_;
  prometheus::Histogram* batch_jobs_[2];
  prometheus::Histogram* batch_blocks_[2];
  prometheus::Histogram* latency_[2];
  prometheus::Counter* completed_ok_;
  prometheus::Counter* completed_error_;
  prometheus::Family<prometheus::Counter>* failures_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Counter>* exchanges_;
  prometheus::Family<prometheus::Counter>* exchange_runs_;
  prometheus::Family<prometheus::Counter>* plan_misses_;
  void RegisterExchangeFamilies();
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_KDC_METRICS_H_
