#include "service/metrics.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "engine/cts_jobs.h"
#include "prometheus/text_serializer.h"
#include "util/process_metrics.h"

namespace kmpc::service {

const std::vector<double>& Metrics::BucketsSeconds() {
  static const std::vector<double> kBuckets = {
      0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
      0.1,    0.2,    0.5,   1,     2,     5,    10};
  return kBuckets;
}

// The registry as the HTTP endpoint serves it: the aes*-cts series, which
// mirror process-wide counters, brought up to date at each collection.
class Metrics::Synced : public prometheus::Collectable {
 public:
  explicit Synced(const Metrics* m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    m_->SyncCts();
    m_->SyncRing();
    return m_->registry_->Collect();
  }

 private:
  const Metrics* const m_;
};

Metrics::Metrics(int party)
    : party_(std::to_string(party)),
      registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_shared<util::ProcessMetrics>(
          std::map<std::string, std::string>{{"party", party_}})),
      synced_(std::make_shared<Synced>(this)) {
  const prometheus::Labels p = {{"party", party_}};
  auto counter = [&](const char* name, const char* help)
      -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(p).Register(
        *registry_);
  };
  batches_ = &counter("kmpc_batches_total",
                      "batches computed, by kind (run, finalize, sign) and result");
  const char* kinds[kKinds] = {"run", "finalize", "sign"};
  for (int k = 0; k < kKinds; ++k) {
    ok_[k] = &batches_->Add({{"kind", kinds[k]}, {"result", "ok"}});
    failed_[k] = &batches_->Add({{"kind", kinds[k]}, {"result", "error"}});
  }
  rejected_ = &counter("kmpc_batches_rejected_total",
                       "requests refused as a whole, by BatchErrorCode");
  job_failures_ = &counter("kmpc_job_failures_total",
                           "jobs that failed alone, by JobStatus");
  ring_rejected_ = &counter("kmpc_ring_rejected_connections_total",
                            "connections the ring listener rejected, by reason");
  jobs_ = &counter("kmpc_jobs_total", "jobs of the batches computed").Add({});
  aes_blocks_ = &counter("kmpc_aes_blocks_total",
                         "AES blocks of the Run batches computed")
                     .Add({});
  integrity_failures_ = &counter("kmpc_integrity_failures_total",
                                 "jobs whose tag or checksum did not verify")
                             .Add({});
  deviations_ = &counter("kmpc_deviations_total",
                         "batches failed because the malicious check found that a "
                         "server of the ring deviated from the protocol "
                         "(BATCH_INTEGRITY_CHECK_FAILED): a security event; wrong "
                         "passwords are kmpc_integrity_failures_total")
                     .Add({});
  breaker_open_ = &prometheus::BuildGauge()
                       .Name("kmpc_breaker_open")
                       .Help("1 while the deviation breaker refuses every batch "
                             "(BATCH_BREAKER_OPEN) until kmpc-admin breaker-reset")
                       .Labels(p)
                       .Register(*registry_)
                       .Add({});
  RegisterCts(p);
  ring_bytes_ = &counter("kmpc_ring_bytes_sent_total",
                         "bytes this party sent on the ring")
                     .Add({});
  ring_messages_ = &counter("kmpc_ring_messages_sent_total",
                            "messages this party sent on the ring")
                        .Add({});
  // RingWaits' fields in order (SyncRing).
  constexpr std::pair<const char*, const char*> kRingWaits[] = {
      {"kmpc_ring_spinning_waits_total",
       "ring receives of latency-bound batches that busy-polled (--ring_spin_us) "
       "before or instead of sleeping"},
      {"kmpc_ring_waits_slept_first_total",
       "of those, the ones that slept until shortly before the expected arrival "
       "first (--ring_spin_late)"},
      {"kmpc_ring_spins_ran_out_total",
       "of those, the ones whose spin ended before the message came (a sleep and "
       "a wake-up paid)"},
      {"kmpc_ring_waits_spun_through_total",
       "of those, the ones that spun through a wait longer than --ring_spin_us "
       "(peers rooms apart, --ring_spin_through_us): a core's time while a lone "
       "batch waits"}};
  static_assert(std::size(kRingWaits) == std::size(decltype(ring_waits_){}));
  for (size_t i = 0; i < std::size(kRingWaits); ++i)
    ring_waits_[i] = &counter(kRingWaits[i].first, kRingWaits[i].second).Add({});
  auto& latency = prometheus::BuildHistogram()
                      .Name("kmpc_batch_latency_seconds")
                      .Help("a batch's time from its request to its result "
                            "(scheduling and computation), by kind")
                      .Labels(p)
                      .Register(*registry_);
  for (int k = 0; k < kKinds; ++k)
    latency_[k] = &latency.Add({{"kind", kinds[k]}}, BucketsSeconds());
}

// The aes*-cts circuits' series (engine/cts_jobs.h), brought up to date by
// SyncCts when collected.
void Metrics::RegisterCts(const prometheus::Labels& p) {
  auto counter = [&](const char* name, const char* help)
      -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(p).Register(
        *registry_);
  };
  cts_precompile_pending_ = &prometheus::BuildGauge()
                                 .Name("kmpc_cts_precompile_pending")
                                 .Help("aes*-cts shapes queued for the background precompile "
                                       "(at start, and a timestamp's other length behind a "
                                       "login's compile) and not compiled yet")
                                 .Labels(p)
                                 .Register(*registry_)
                                 .Add({});
  cts_masked_pending_ = &prometheus::BuildGauge()
                             .Name("kmpc_cts_masked_pending")
                             .Help("aes*-cts programs queued or being compiled as gates "
                                   "over masked wires (their Runs use Rep3 ANDs until then)")
                             .Labels(p)
                             .Register(*registry_)
                             .Add({});
  auto& cts = counter("kmpc_cts_program_cache_total",
                      "aes*-cts program lookups (engine/cts_jobs.h), by result: a miss "
                      "compiles a circuit");
  cts_hits_ = &cts.Add({{"result", "hit"}});
  cts_misses_ = &cts.Add({{"result", "miss"}});
  cts_ands_ = &counter("kmpc_cts_ands_total",
                       "AND gates of the aes*-cts circuits evaluated, summed over jobs")
                   .Add({});
  cts_rounds_ = &counter("kmpc_cts_and_rounds_total",
                         "AND rounds of the aes*-cts circuit evaluations (each its "
                         "deepest program's depth)")
                     .Add({});
  cts_evaluations_ = &counter("kmpc_cts_evaluations_total",
                              "evaluations of aes*-cts circuits (one per batch with such jobs)")
                         .Add({});
  cts_masked_ = &counter("kmpc_cts_masked_evaluations_total",
                         "of those, evaluations as k-input gates over masked wires")
                     .Add({});
  cts_masked_refused_ = &counter("kmpc_cts_masked_refused_total",
                                 "aes*-cts programs whose compile over masked wires failed "
                                 "or came out past its price: their Runs stay on Rep3 ANDs")
                            .Add({});
  cts_masked_compiles_ = &counter("kmpc_cts_masked_compiles_total",
                                  "compiles of aes*-cts programs over masked wires ended "
                                  "(background, idle priority; attached or refused)")
                             .Add({});
  cts_masked_drops_ = &counter("kmpc_cts_masked_drops_total",
                               "aes*-cts programs over masked wires dropped past the cache's "
                               "memory bound (compiled again on a later use)")
                          .Add({});
}

void Metrics::RecordBatch(const char* kind, bool ok, uint64_t jobs,
                          uint64_t aes_blocks, uint64_t ring_bytes,
                          uint64_t ring_messages, absl::Duration latency) {
  const int k = std::strcmp(kind, "run") == 0      ? 0
                : std::strcmp(kind, "finalize") == 0 ? 1
                                                     : 2;
  (ok ? ok_[k] : failed_[k])->Increment();
  if (ok) {
    jobs_->Increment(static_cast<double>(jobs));
    aes_blocks_->Increment(static_cast<double>(aes_blocks));
  }
  ring_bytes_->Increment(static_cast<double>(ring_bytes));
  ring_messages_->Increment(static_cast<double>(ring_messages));
  latency_[k]->Observe(absl::ToDoubleSeconds(latency));
}

void Metrics::RecordRejected(const char* cause) {
  rejected_->Add({{"cause", cause}}).Increment();
}

void Metrics::RecordRingRejected(const char* reason) {
  ring_rejected_->Add({{"reason", reason}}).Increment();
}

void Metrics::RecordIntegrityFailure() { integrity_failures_->Increment(); }

void Metrics::RecordDeviation() { deviations_->Increment(); }

void Metrics::SetBreakerOpen(bool open) { breaker_open_->Set(open ? 1 : 0); }

void Metrics::RecordJobFailure(const std::string& status) {
  job_failures_->Add({{"status", status}}).Increment();
}

uint64_t Metrics::batches_ok() const {
  return static_cast<uint64_t>(ok_[0]->Value() + ok_[1]->Value());
}

uint64_t Metrics::batches_failed() const {
  return static_cast<uint64_t>(failed_[0]->Value() + failed_[1]->Value());
}

namespace {

// A counter that mirrors a process-wide count, brought up to it (never
// down: a counter only rises).
void CatchUp(prometheus::Counter* c, uint64_t v) {
  c->Increment(std::max(0.0, static_cast<double>(v) - c->Value()));
}

}  // namespace

void Metrics::SyncCts() const {
  std::lock_guard<std::mutex> l(sync_mu_);
  const engine::CtsProgramCache& cache = engine::CtsProgramCache::Shared();
  cts_masked_pending_->Set(static_cast<double>(cache.masked_pending()));
  cts_precompile_pending_->Set(static_cast<double>(cache.precompile_pending()));
  const engine::CtsCircuitCounters& cc = engine::CtsCircuitCounters::Shared();
  for (auto [c, v] : {std::pair{cts_hits_, cache.hits()}, std::pair{cts_misses_, cache.misses()},
                      std::pair{cts_masked_refused_, cache.masked_refused()},
                      std::pair{cts_masked_compiles_, cache.masked_compiles()},
                      std::pair{cts_masked_drops_, cache.masked_drops()},
                      std::pair{cts_ands_, cc.ands.load()}, std::pair{cts_rounds_, cc.rounds.load()},
                      std::pair{cts_evaluations_, cc.evaluations.load()},
                      std::pair{cts_masked_, cc.masked.load()}})
    CatchUp(c, v);
}

void Metrics::SetRingWaitSource(std::function<RingWaits()> source) {
  std::lock_guard<std::mutex> l(sync_mu_);
  ring_waits_source_ = std::move(source);
}

void Metrics::SyncRing() const {
  std::lock_guard<std::mutex> l(sync_mu_);
  if (!ring_waits_source_) return;
  const RingWaits w = ring_waits_source_();
  const uint64_t v[std::size(decltype(ring_waits_){})] = {w.spun, w.slept_first, w.ran_out,
                                                          w.through};
  for (size_t i = 0; i < std::size(v); ++i) CatchUp(ring_waits_[i], v[i]);
}

std::string Metrics::Render() const {
  std::vector<prometheus::MetricFamily> families = synced_->Collect();
  for (auto& f : process_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

std::vector<std::weak_ptr<prometheus::Collectable>> Metrics::collectables()
    const {
  return {synced_, process_};
}

}  // namespace kmpc::service
