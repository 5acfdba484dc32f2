// The server's engine flags (src/engine_flags.h): the options each makes,
// the modes' defaults, and every bad value refused with its flag's name
// before the server starts.
#include "engine_flags.h"

#include <sys/stat.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace kmpc::server {
namespace {

using ::testing::HasSubstr;

TEST(EngineFlags, TheDefaultsAreMaliciousWithMaskedRunsForALoneRequest) {
  absl::FlagSaver saver;
  auto o = EngineOptionsFromFlags("/nonexistent");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->malicious);
  EXPECT_EQ(o->depth3_max_blocks, 0u);  // malicious: never the depth-3 S-box
  EXPECT_EQ(o->cts_masked_max_jobs, engine::EngineOptions::kCtsMaskedMaxJobs);
  EXPECT_EQ(o->cts_masked_max_and_words, engine::EngineOptions::kCtsMaskedMaxAndWords);
  EXPECT_EQ(o->cts_masked_calm, absl::Seconds(2));
  // The load memory and the gate's bounds are shared by the workers.
  EXPECT_NE(o->cts_loaded_at, nullptr);
  EXPECT_NE(o->release_limiter, nullptr);
  EXPECT_NE(o->gate_budget, nullptr);
  EXPECT_TRUE(absl::GetFlag(FLAGS_cts_masked_gates));
}

TEST(EngineFlags, SemiHonestTakesTheDepth3SboxUnlessTold) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_security, "semi-honest");
  auto o = EngineOptionsFromFlags("/nonexistent");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->malicious);
  EXPECT_EQ(o->depth3_max_blocks, engine::EngineOptions::kDepth3MaxBlocksSemiHonest);
  absl::SetFlag(&FLAGS_depth3_max_blocks, 7);
  o = EngineOptionsFromFlags("/nonexistent");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->depth3_max_blocks, 7u);
}

TEST(EngineFlags, ValuesReachTheOptions) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_cts_masked_max_jobs, 0);
  absl::SetFlag(&FLAGS_cts_masked_calm, absl::Milliseconds(250));
  absl::SetFlag(&FLAGS_cts_skew_s, 60);
  absl::SetFlag(&FLAGS_verify_words, 4096);
  auto o = EngineOptionsFromFlags("/nonexistent");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cts_masked_max_jobs, 0u);
  EXPECT_EQ(o->cts_masked_calm, absl::Milliseconds(250));
  EXPECT_EQ(o->cts_skew_s, 60u);
  EXPECT_EQ(o->verify_words, 4096u);
}

// Each bad value: the server stops with a message naming the flag.
TEST(EngineFlags, EachBadValueIsRefusedByName) {
  struct Bad {
    void (*set)();
    const char* name;
  };
  const Bad bad[] = {
      {[] { absl::SetFlag(&FLAGS_security, "honest-ish"); }, "--security"},
      {[] { absl::SetFlag(&FLAGS_verify_words, -1); }, "--verify_words"},
      {[] { absl::SetFlag(&FLAGS_small_sbox_min_blocks, -1); }, "--small_sbox_min_blocks"},
      {[] { absl::SetFlag(&FLAGS_depth3_max_blocks, -2); }, "--depth3_max_blocks"},
      {[] { absl::SetFlag(&FLAGS_cts_skew_s, 0); }, "--cts_skew_s"},
      {[] { absl::SetFlag(&FLAGS_cts_releases_per_minute, -1); }, "--cts_releases_per_minute"},
      {[] { absl::SetFlag(&FLAGS_cts_masked_max_and_words, -1); }, "--cts_masked_max_and_words"},
      {[] { absl::SetFlag(&FLAGS_cts_masked_max_jobs, -1); }, "--cts_masked_max_jobs"},
      {[] { absl::SetFlag(&FLAGS_cts_masked_calm, absl::Seconds(-1)); }, "--cts_masked_calm"},
      {[] { absl::SetFlag(&FLAGS_gate_decrypts_per_run, -1); }, "--gate_decrypts_per_run"},
      {[] { absl::SetFlag(&FLAGS_gate_failure_window_s, 0); }, "--gate_failure_window_s"},
      {[] { absl::SetFlag(&FLAGS_wave_lanes, 1); }, "--wave_lanes"},
  };
  for (const Bad& b : bad) {
    absl::FlagSaver saver;
    b.set();
    auto o = EngineOptionsFromFlags("/nonexistent");
    ASSERT_FALSE(o.ok()) << b.name;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(b.name));
  }
}

// The failure budget's counts live in STORE_DIR/gate-failures: one that
// cannot be read stops the server, naming the flag.
TEST(EngineFlags, TheGateBudgetIsReadFromTheStoreDirectory) {
  absl::FlagSaver saver;
  const std::string dir = kmpc::testing::MakeTempDir("engine-flags");
  auto o = EngineOptionsFromFlags(dir);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(LoadGateBudget(*o), "");  // none yet: an empty budget
  ASSERT_EQ(mkdir((dir + "/gate-failures").c_str(), 0700), 0);
  o = EngineOptionsFromFlags(dir);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(LoadGateBudget(*o), HasSubstr("--gate_failures_per_window: "));
}

}  // namespace
}  // namespace kmpc::server
