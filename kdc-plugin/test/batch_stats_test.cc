// One batch's figures (batch_stats.h): what the Runs' BatchStats add up
// to, and the debug line they feed.
#include "batch_stats.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

TEST(BatchStatsTest, AddRunSumsTheSlowestPartysTimesAndPartyZerosRing) {
  StepFigures f;
  kmpc::v1::BatchStats p0;
  p0.set_ring_messages(12);
  f.AddRun(p0, 300, 4000);
  p0.set_ring_messages(5);  // a re-run of the same batch
  f.AddRun(p0, 200, 1000);
  EXPECT_EQ(f.server_queue_us.load(), 500u);
  EXPECT_EQ(f.server_compute_us.load(), 5000u);
  EXPECT_EQ(f.ring_messages.load(), 17u);
}

TEST(BatchStatsTest, DebugLineNamesEveryFigure) {
  StepFigures f;
  f.blocks = 96;
  f.run_us = 2500;
  f.finalize_us = 700;
  kmpc::v1::BatchStats p0;
  p0.set_ring_messages(9);
  f.AddRun(p0, 100, 1800);
  const std::string line =
      DebugLine(7, 12, 1, 90, absl::Microseconds(1500), absl::Milliseconds(5), f);
  EXPECT_EQ(line,
            "kdcmpc: batch #7: 12 jobs (1 failed), 96 AES blocks (90 requested), "
            "queued 1.5 ms, run 2.5 ms (servers: queue 0.1 ms, compute 1.8 ms, "
            "9 ring messages), finalize 0.7 ms, total 5.0 ms");
  // What batch_step.cc's callers and test_kdc_plugin.py parse.
  EXPECT_TRUE(absl::StrContains(line, "96 AES blocks ("));
}

}  // namespace
}  // namespace kmpc::kdc
