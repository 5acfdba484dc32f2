// engine/batch_state.h: what a Run's phases share. A BatchState holds one
// plan and one set of secrets per job; a JobPlan drops its key when it
// fails; a job's powers of H are the stored ones unless it needs more; the
// AES output is addressed by lane; the context reports its party and
// whether products are logged.
#include "engine/batch_state.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "batch_testing.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::PhaseCluster;

std::shared_ptr<const KeyShares> Key(int party) {
  auto views = DealKey(Cipher::kAes128, Bytes(16, 7));
  EXPECT_TRUE(views.ok()) << views.status();
  return std::make_shared<const KeyShares>((*views)[party]);
}

TEST(BatchStateTest, OnePlanAndOneSetOfSecretsPerJob) {
  const std::vector<Job> jobs(3);
  GateBudget budget;
  BatchState b(7, jobs, &budget);
  EXPECT_EQ(b.seq, 7u);
  EXPECT_EQ(b.jobs.size(), 3u);
  EXPECT_EQ(b.plan.size(), 3u);
  EXPECT_EQ(b.secrets.size(), 3u);
  ASSERT_NE(b.gates, nullptr);
  EXPECT_FALSE(b.deviated);
  EXPECT_TRUE(b.pass.empty() && b.stale.empty() && b.cts.empty());
  EXPECT_EQ(b.nlanes, 0u);
}

TEST(BatchStateTest, FailedPlanDropsItsKeyAndIsNotLive) {
  JobPlan w;
  EXPECT_FALSE(w.live());  // no key yet
  w.key = Key(0);
  EXPECT_TRUE(w.live());
  EXPECT_TRUE(w.aes());
  w.cts = true;
  EXPECT_TRUE(w.live());
  EXPECT_FALSE(w.aes());  // an aes*-cts job takes no AES lane
  w.Fail(pb::JOB_UNKNOWN_USAGE, "why");
  EXPECT_EQ(w.status, pb::JOB_UNKNOWN_USAGE);
  EXPECT_EQ(w.detail, "why");
  EXPECT_EQ(w.key, nullptr);
  EXPECT_FALSE(w.live());
}

TEST(BatchStateTest, PowersAreTheStoredOnesUnlessTheJobNeedsMore) {
  JobPlan w;
  w.key = Key(1);
  JobSecrets s;
  s.powers[0].assign(16 * (kStoredHPowers + 1), 1);
  s.powers[1].assign(16 * (kStoredHPowers + 1), 2);
  w.m = kStoredHPowers;
  EXPECT_EQ(PowersOf(w, s, 0), w.key->h_powers[0].data());
  EXPECT_EQ(PowersOf(w, s, 1), w.key->h_powers[1].data());
  w.m = kStoredHPowers + 1;
  EXPECT_EQ(PowersOf(w, s, 0), s.powers[0].data());
  EXPECT_EQ(PowersOf(w, s, 1), s.powers[1].data());
}

TEST(BatchStateTest, AesOutputIsAddressedByLane) {
  AesOutput a;
  a.out[0].resize(48);
  a.out[1].resize(48);
  EXPECT_EQ(a.Lane(0, 0), a.out[0].data());
  EXPECT_EQ(a.Lane(0, 2), a.out[0].data() + 32);
  EXPECT_EQ(a.Lane(1, 1), a.out[1].data() + 16);
}

TEST(BatchStateTest, UsageIsBigEndian) {
  const std::array<uint8_t, 4> want = {0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(UsageBe(0x01020304), want);
}

TEST(BatchStateTest, ContextReportsItsPartyAndWhetherItLogs) {
  PhaseCluster c;
  for (int i = 0; i < 3; ++i) {
    const RunContext ctx = c.ctx(i);
    EXPECT_EQ(ctx.party(), i);
    EXPECT_FALSE(ctx.logging());
    ctx.rep3.set_log(&ctx.log);
    EXPECT_TRUE(ctx.logging());
    ctx.rep3.set_log(nullptr);
  }
}

}  // namespace
}  // namespace kmpc::engine
