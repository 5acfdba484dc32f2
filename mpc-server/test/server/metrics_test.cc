// service/metrics.h: one registry behind Admin.Metrics and /metrics, every
// series labelled with the party, failures by their public cause, and what
// a batch adds to each counter.
#include "service/metrics.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/cts_jobs.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace kmpc::service {
namespace {

// One registry: what Render (Admin.Metrics) prints is what the
// collectables (the HTTP Exposer) hold; failures carry their public cause;
// every series carries the party.
TEST(MetricsTest, OneRegistryWithCausesAndParty) {
  Metrics m(2);
  m.RecordBatch("run", true, 4, 40, 1000, 10, absl::Microseconds(700));
  m.RecordBatch("finalize", false, 2, 0, 10, 1, absl::Seconds(3));
  m.RecordRejected("BATCH_MALFORMED");
  m.RecordRejected("BATCH_MALFORMED");
  m.RecordJobFailure("JOB_INTEGRITY_FAILED");
  m.RecordRingRejected("tls");
  m.RecordRingRejected("tls");
  m.RecordRingRejected("no_slot");
  EXPECT_EQ(m.batches_ok(), 1u);
  EXPECT_EQ(m.batches_failed(), 1u);
  const std::string text = m.Render();
  for (const char* want : {
           "kmpc_jobs_total{party=\"2\"} 4\n",
           "kmpc_aes_blocks_total{party=\"2\"} 40\n",
           "kmpc_batches_total{party=\"2\",kind=\"finalize\",result=\"error\"} 1\n",
           "kmpc_batches_rejected_total{party=\"2\",cause=\"BATCH_MALFORMED\"} 2\n",
           "kmpc_job_failures_total{party=\"2\",status=\"JOB_INTEGRITY_FAILED\"} 1\n",
           "kmpc_ring_rejected_connections_total{party=\"2\",reason=\"tls\"} 2\n",
           "kmpc_ring_rejected_connections_total{party=\"2\",reason=\"no_slot\"} 1\n",
           "kmpc_batch_latency_seconds_bucket{party=\"2\",kind=\"run\",le=\"0.0005\"} 0\n",
           "kmpc_batch_latency_seconds_bucket{party=\"2\",kind=\"run\",le=\"0.001\"} 1\n",
           "kmpc_batch_latency_seconds_bucket{party=\"2\",kind=\"finalize\",le=\"2\"} 0\n",
           "kmpc_batch_latency_seconds_bucket{party=\"2\",kind=\"finalize\",le=\"5\"} 1\n",
           "process_resident_memory_bytes{party=\"2\"} "})
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  EXPECT_EQ(m.collectables().size(), 2u);
  for (const auto& c : m.collectables()) EXPECT_NE(c.lock(), nullptr);
}

// The HTTP endpoint collects the collectables itself (prometheus::Exposer),
// without Render: the aes*-cts series, which mirror process-wide counters,
// are brought up to date by that collection too.
TEST(MetricsTest, TheHttpCollectionSeesTheCtsProgramCache) {
  Metrics m(0);
  engine::CtsProgramCache& cache = engine::CtsProgramCache::Shared();
  ASSERT_TRUE(cache.Get(kmpc::v1::JOB_CHECKSUM, 0, 21).ok());
  ASSERT_TRUE(cache.Get(kmpc::v1::JOB_CHECKSUM, 0, 21).ok());
  ASSERT_GE(cache.misses(), 1u);
  ASSERT_GE(cache.hits(), 1u);
  std::vector<prometheus::MetricFamily> families;
  for (const auto& w : m.collectables())
    if (auto c = w.lock())
      for (auto& f : c->Collect()) families.push_back(std::move(f));
  const std::string text = prometheus::TextSerializer().Serialize(families);
  for (const std::string& want :
       {absl::StrCat("kmpc_cts_program_cache_total{party=\"0\",result=\"miss\"} ",
                     cache.misses(), "\n"),
        absl::StrCat("kmpc_cts_program_cache_total{party=\"0\",result=\"hit\"} ",
                     cache.hits(), "\n"),
        absl::StrCat("kmpc_cts_masked_refused_total{party=\"0\"} ", cache.masked_refused(),
                     "\n"),
        absl::StrCat("kmpc_cts_masked_compiles_total{party=\"0\"} ", cache.masked_compiles(),
                     "\n"),
        absl::StrCat("kmpc_cts_masked_drops_total{party=\"0\"} ", cache.masked_drops(), "\n")})
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
}

// The ring's spinning waits are read from their source at each collection:
// the counters follow it, and without a source they stay at 0.
TEST(MetricsTest, RingWaitsFollowTheirSource) {
  Metrics m(2);
  EXPECT_TRUE(absl::StrContains(m.Render(),
                                "kmpc_ring_spins_ran_out_total{party=\"2\"} 0\n"));
  Metrics::RingWaits w{40, 7, 3, 20};
  m.SetRingWaitSource([&w] { return w; });
  for (int pass = 0; pass < 2; ++pass) {
    const std::string text = m.Render();
    for (const std::string& want :
         {absl::StrCat("kmpc_ring_spinning_waits_total{party=\"2\"} ", w.spun, "\n"),
          absl::StrCat("kmpc_ring_waits_slept_first_total{party=\"2\"} ", w.slept_first, "\n"),
          absl::StrCat("kmpc_ring_spins_ran_out_total{party=\"2\"} ", w.ran_out, "\n"),
          absl::StrCat("kmpc_ring_waits_spun_through_total{party=\"2\"} ", w.through, "\n")})
      EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
    w = {100, 9, 50, 30};
  }
}

// A failed batch counts its ring traffic and latency but no jobs or AES
// blocks; a sign batch has its own series and is not a ring batch of
// batches_ok / batches_failed.
TEST(MetricsTest, WhatEachBatchAdds) {
  Metrics m(0);
  m.RecordBatch("run", false, 8, 80, 500, 5, absl::Milliseconds(2));
  m.RecordBatch("run", true, 3, 30, 100, 2, absl::Milliseconds(1));
  m.RecordBatch("sign", true, 6, 0, 0, 0, absl::Microseconds(50));
  m.RecordIntegrityFailure();
  m.RecordRejected();
  EXPECT_EQ(m.batches_ok(), 1u);
  EXPECT_EQ(m.batches_failed(), 1u);
  const std::string text = m.Render();
  for (const char* want : {
           "kmpc_jobs_total{party=\"0\"} 9\n",  // the ok run and the sign batch
           "kmpc_aes_blocks_total{party=\"0\"} 30\n",
           "kmpc_ring_bytes_sent_total{party=\"0\"} 600\n",
           "kmpc_ring_messages_sent_total{party=\"0\"} 7\n",
           "kmpc_integrity_failures_total{party=\"0\"} 1\n",
           "kmpc_batches_total{party=\"0\",kind=\"run\",result=\"ok\"} 1\n",
           "kmpc_batches_total{party=\"0\",kind=\"run\",result=\"error\"} 1\n",
           "kmpc_batches_total{party=\"0\",kind=\"sign\",result=\"ok\"} 1\n",
           "kmpc_batches_rejected_total{party=\"0\",cause=\"other\"} 1\n",
           "kmpc_batch_latency_seconds_count{party=\"0\",kind=\"run\"} 2\n",
           "kmpc_batch_latency_seconds_count{party=\"0\",kind=\"sign\"} 1\n"})
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  // The latency buckets increase strictly (Prometheus requires it).
  const std::vector<double>& b = Metrics::BucketsSeconds();
  ASSERT_FALSE(b.empty());
  for (size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k - 1], b[k]);
}

}  // namespace
}  // namespace kmpc::service
