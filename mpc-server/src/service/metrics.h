// Per-batch counters and latency histograms of one server, kept in one
// prometheus-cpp Registry: the Admin.Metrics RPC renders it (Render) and
// the HTTP /metrics endpoint (main.cc --metrics_addr, prometheus::Exposer)
// serves the same collectables, so the two cannot disagree. Only public
// figures: counts, sizes, durations, public failure causes; never anything
// derived from keys or plaintext.
//
// Every series carries the constant label party="<i>".
#ifndef KMPC_SERVICE_METRICS_H_
#define KMPC_SERVICE_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kmpc::service {

class Metrics {
 public:
  // Sub-millisecond (one small batch on loopback) to seconds (a batch
  // waiting for a dead peer's ring timeout).
  static const std::vector<double>& BucketsSeconds();

  explicit Metrics(int party = 0);

  // kind: "run", "finalize" or "sign".
  void RecordBatch(const char* kind, bool ok, uint64_t jobs, uint64_t aes_blocks,
                   uint64_t ring_bytes, uint64_t ring_messages,
                   absl::Duration latency);
  // A request refused as a whole; cause: the BatchErrorCode's name
  // (contract::BatchErrorName), "other" when it carried none.
  void RecordRejected(const char* cause = "other");
  // A job whose tag or checksum did not verify (a wrong password, a bad
  // ticket): kmpc_integrity_failures_total. Not a deviation.
  void RecordIntegrityFailure();
  // A batch this server failed because its malicious check found that a
  // server of its ring deviated (BATCH_INTEGRITY_CHECK_FAILED):
  // kmpc_deviations_total, the security event operators page on
  // (service/breaker.h counts it toward the breaker).
  void RecordDeviation();
  // The kmpc_breaker_open gauge: 1 while the breaker refuses every batch.
  void SetBreakerOpen(bool open);
  // A connection the ring listener rejected; reason: net::RingRejectName
  // (no_slot, silent, tls, identity, pin, hello). Thread-safe (the
  // listener's threads call it through TlsRingOptions::on_reject).
  void RecordRingRejected(const char* reason);
  // A job that failed alone; status: its JobStatus name.
  void RecordJobFailure(const std::string& status);
  // The ring's receive waits that spun (net::TlsRingChannel::spins,
  // late_spins, spins_ran_out, spun_through), summed over its workers;
  // `source` is read at each collection (kmpc_ring_spinning_waits_total
  // and the three below it) and must outlive the Metrics object's use. A
  // wait whose spin ran out paid a sleep and a wake-up: the figure that
  // tells whether the spin policy (--ring_spin_us, --ring_spin_late,
  // --ring_spin_through_us) fits the peers' distance.
  struct RingWaits {
    uint64_t spun = 0, slept_first = 0, ran_out = 0, through = 0;
  };
  void SetRingWaitSource(std::function<RingWaits()> source);

  uint64_t batches_ok() const;
  uint64_t batches_failed() const;

  // The Prometheus text format of everything collectables() holds.
  std::string Render() const;
  // The registry and the process memory collector (util/process_metrics.h),
  // for an Exposer; the Metrics object owns them.
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;

 private:
  const std::string party_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> process_;
  prometheus::Family<prometheus::Counter>* batches_;
  static constexpr int kKinds = 3;  // run, finalize, sign
  prometheus::Counter* ok_[kKinds];
  prometheus::Counter* failed_[kKinds];
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* job_failures_;
  prometheus::Family<prometheus::Counter>* ring_rejected_;
  prometheus::Counter* jobs_;
  prometheus::Counter* aes_blocks_;
  prometheus::Counter* integrity_failures_;
  prometheus::Counter* deviations_;
  prometheus::Gauge* breaker_open_;
  // Brings the aes*-cts series below up to the process's counters; every
  // collection (Render, and the HTTP endpoint through `synced_`) does so
  // first.
  void SyncCts() const;
  void RegisterCts(const prometheus::Labels& p);
  class Synced;
  std::shared_ptr<prometheus::Collectable> synced_;
  // kmpc_cts_program_cache_total{result="hit"|"miss"}, brought up to the
  // process's engine::CtsProgramCache when collected.
  prometheus::Counter* cts_hits_;
  prometheus::Counter* cts_misses_;
  // kmpc_cts_ands_total, kmpc_cts_and_rounds_total,
  // kmpc_cts_evaluations_total, kmpc_cts_masked_evaluations_total:
  // engine::CtsCircuitCounters, brought up likewise.
  prometheus::Counter* cts_ands_;
  prometheus::Counter* cts_rounds_;
  prometheus::Counter* cts_evaluations_;
  prometheus::Counter* cts_masked_;
  prometheus::Gauge* cts_masked_pending_;  // CtsProgramCache::masked_pending
  prometheus::Gauge* cts_precompile_pending_;  // CtsProgramCache::precompile_pending
  prometheus::Counter* cts_masked_refused_;  // CtsProgramCache::masked_refused
  prometheus::Counter* cts_masked_compiles_;  // CtsProgramCache::masked_compiles
  prometheus::Counter* cts_masked_drops_;     // CtsProgramCache::masked_drops
  // One SyncCts or SyncRing at a time (they add differences); guards
  // ring_waits_source_.
  mutable std::mutex sync_mu_;
  prometheus::Counter* ring_bytes_;
  prometheus::Counter* ring_messages_;
  std::function<RingWaits()> ring_waits_source_;  // set before serving
  prometheus::Counter* ring_waits_[4];  // spun, slept_first, ran_out, through
  void SyncRing() const;
  prometheus::Histogram* latency_[kKinds];
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_METRICS_H_
