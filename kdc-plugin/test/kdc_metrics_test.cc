// The module's Prometheus metrics (kdc_metrics.h).
#include "kdc_metrics.h"
#include "freshness.h"
#include "transport.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

// The module's metrics: failures by a public cause, batch figures into the
// histograms, the batcher's counters read at render time and left out once
// the source is cleared.
TEST(KdcMetricsTest, CountsAndRenders) {
  KdcMetrics m;
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::DataLossError("tag")), "integrity");
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::OutOfRangeError("cap")), "too_long");
  // A gated job withheld because its gate failed (batch_step.cc).
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::UnauthenticatedError("withheld")), "withheld");
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::UnavailableError("down")),
               "unavailable");
  EXPECT_STREQ(KdcMetrics::CauseOf(MarkDeviation(absl::UnavailableError("x"))),
               "deviation");
  // A replayed gate is kResourceExhausted, as an overloaded cluster is,
  // but counted apart: replays are not a capacity alarm (freshness.h).
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::ResourceExhaustedError("queue")), "overloaded");
  EXPECT_STREQ(KdcMetrics::CauseOf(ReplayedGateError("copy")), "replayed");
  EXPECT_EQ(ReplayedGateError("copy").code(), absl::StatusCode::kResourceExhausted);
  m.JobDone(absl::OkStatus());
  m.JobDone(absl::OkStatus());
  m.JobDone(absl::DataLossError("tag"));
  m.JobRefused(absl::UnavailableError("queue full"));
  m.BatchDone(false, 3, 30, false, absl::Microseconds(1500));
  m.BatchDone(true, 2, 0, false, absl::Microseconds(300));
  BatcherStats st;
  st.queued_jobs = 5;
  st.speculative_used = 7;
  st.failovers = 4;
  st.deviations = 2;
  st.breakers_open = 1;
  m.SetStatsSource([st] { return st; });
  std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_jobs_completed_total{result=\"ok\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_job_failures_total{cause=\"integrity\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_jobs_refused_total{cause=\"unavailable\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_jobs_sum{kind=\"run\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_latency_seconds_bucket{kind=\"run\",le=\"0.002\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_latency_seconds_bucket{kind=\"run\",le=\"0.001\"} 0\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_queue_jobs 5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_speculative_used_total 7\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_failovers_total 4\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_deviations_total 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_breaker_open 1\n")) << text;
  for (const char* name :
       {"kmpc_kdc_run_requests_total 0\n", "kmpc_kdc_finalize_requests_total 0\n",
        "kmpc_kdc_sign_requests_total 0\n", "kmpc_kdc_pads_drawn_total 0\n",
        "kmpc_kdc_pads_used_total 0\n", "kmpc_kdc_pads_wasted_total 0\n",
        "kmpc_kdc_pads_held 0\n", "kmpc_kdc_sign_rerun_total 0\n"})
    EXPECT_TRUE(absl::StrContains(text, name)) << name;
  EXPECT_TRUE(absl::StrContains(text, "process_resident_memory_bytes ")) << text;
  m.ClearStatsSource();
  EXPECT_FALSE(absl::StrContains(m.Render(), "kmpc_kdc_queue_jobs"));
}

// A planned exchange's end: one exchange, its Runs, its misses by role
// and reason, under its kind and result.
TEST(KdcMetricsTest, CountsExchangesTheirRunsAndMisses) {
  KdcMetrics m;
  ExchangeRecord ok;
  ok.kind = ExchangeKind::kRenew;
  ok.runs = 1;
  m.ExchangeEnded(ok, true);
  m.ExchangeEnded(ok, true);
  ExchangeRecord missed;
  missed.kind = ExchangeKind::kTgs;
  missed.runs = 2;
  missed.misses = {{Role::kTicket, Miss::kBound}};
  m.ExchangeEnded(missed, false);
  const std::string text = m.Render();
  for (const char* want :
       {"kmpc_kdc_exchanges_total{exchange=\"renew\",result=\"ok\"} 2\n",
        "kmpc_kdc_exchange_runs_total{exchange=\"renew\",result=\"ok\"} 2\n",
        "kmpc_kdc_exchanges_total{exchange=\"tgs\",result=\"failed\"} 1\n",
        "kmpc_kdc_exchange_runs_total{exchange=\"tgs\",result=\"failed\"} 2\n",
        "kmpc_kdc_plan_misses_total{exchange=\"tgs\",reason=\"bound\",role=\"ticket\"} 1\n"})
    EXPECT_TRUE(absl::StrContains(text, want)) << want << text;
}

}  // namespace
}  // namespace kmpc::kdc
