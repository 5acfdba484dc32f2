// The servers' failure budget (engine/gate_budget.h) on its own: which
// jobs are gate DECRYPTs, the window, reservations in flight, the per-Run
// cap, and the counts' persistence across a restart. The engine's use of
// it (three parties, refusals alike on all) is in cts_jobs_test.cc.
#include "engine/gate_budget.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <random>
#include <string>

#include "absl/time/time.h"

namespace kmpc::engine {
namespace {

DealId Deal(uint8_t b) {
  DealId d{};
  d.fill(b);
  return d;
}

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

std::string TempFile() {
  char dir[] = "/tmp/kmpc-gate-budget-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return std::string(dir) + "/gate-failures";
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One failure settled at `now`.
void Fail(GateBudget& b, const DealId& d, absl::Time now) {
  ASSERT_TRUE(b.Reserve(d, now));
  b.Settle(d, /*failed=*/true, now);
}

TEST(GateDecrypt, TheTimestampAndTheFastChallengeUnderAPasswordDerivedKey) {
  KeyShares user, service;
  user.kind = KeyKind::kUser;
  service.kind = KeyKind::kService;
  Job ts;
  ts.type = pb::JOB_DECRYPT;
  ts.usage = 1;
  EXPECT_TRUE(GateDecrypt(ts, user));
  ts.cipher = pb::CIPHER_AES256;  // a ctr-mpc user key's timestamp too
  EXPECT_TRUE(GateDecrypt(ts, user));
  EXPECT_FALSE(GateDecrypt(ts, service));
  Job fast = ts;
  fast.cts_key = pb::CTS_KEY_CF2_AES256;
  fast.usage = 54;
  EXPECT_TRUE(GateDecrypt(fast, user));
  fast.usage = 1;  // not a FAST challenge
  EXPECT_FALSE(GateDecrypt(fast, user));
  Job enc = ts;
  enc.type = pb::JOB_ENCRYPT;
  EXPECT_FALSE(GateDecrypt(enc, user));
}

TEST(GateBudget, FailuresUpToTheBoundThenRefusedUntilTheWindowEnds) {
  GateBudgetOptions o;
  o.failures_per_window = 3;
  o.window = absl::Seconds(60);
  GateBudget b(o);
  const DealId d = Deal(1);
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Fail(b, d, kT0 + absl::Seconds(i)));
  EXPECT_EQ(b.Failures(d, kT0 + absl::Seconds(3)), 3u);
  EXPECT_FALSE(b.Reserve(d, kT0 + absl::Seconds(10)));
  EXPECT_FALSE(b.Reserve(d, kT0 + absl::Seconds(59)));
  // Another deal is not affected.
  EXPECT_TRUE(b.Reserve(Deal(2), kT0));
  b.Settle(Deal(2), false, kT0);
  // The window runs from its first failure.
  EXPECT_TRUE(b.Reserve(d, kT0 + absl::Seconds(60)));
  b.Settle(d, true, kT0 + absl::Seconds(60));
  EXPECT_EQ(b.Failures(d, kT0 + absl::Seconds(61)), 1u);
}

// Issue 62's acceptance, the servers' side: a realm whose users each type a
// wrong password 5 times an hour (12 minutes or more apart), each followed
// by the right one, in Runs of their own, never meets the default budget
// (100 failures a window of an hour), over two days; the honest typos of
// a day are far below it.
TEST(GateBudget, UsersWithFiveWrongPasswordsAnHourNeverMeetTheBudget) {
  GateBudget b{GateBudgetOptions{}};
  std::mt19937 rng(62);
  for (int u = 0; u < 50; ++u) {
    const DealId d = Deal(static_cast<uint8_t>(100 + u));
    absl::Time t = kT0 + absl::Seconds(rng() % 3600);
    for (int k = 0; k < 48 * 5; ++k) {
      ASSERT_TRUE(b.Reserve(d, t)) << "user " << u << ", typo " << k;
      b.Settle(d, /*failed=*/true, t);
      ASSERT_TRUE(b.Reserve(d, t + absl::Seconds(8))) << "user " << u << ", login " << k;
      b.Settle(d, /*failed=*/false, t + absl::Seconds(8));
      EXPECT_LE(b.Failures(d, t + absl::Seconds(8)), 10u);
      t += absl::Minutes(12) + absl::Seconds(rng() % 900);
    }
  }
}

TEST(GateBudget, PassesAreNotCountedAndReservationsInFlightAre) {
  GateBudgetOptions o;
  o.failures_per_window = 2;
  GateBudget b(o);
  const DealId d = Deal(3);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(b.Reserve(d, kT0));
    b.Settle(d, /*failed=*/false, kT0);
  }
  EXPECT_EQ(b.Failures(d, kT0), 0u);
  // Two in flight at once (batches running together): a third waits for
  // their verdicts.
  ASSERT_TRUE(b.Reserve(d, kT0));
  ASSERT_TRUE(b.Reserve(d, kT0));
  EXPECT_FALSE(b.Reserve(d, kT0));
  b.Settle(d, false, kT0);
  EXPECT_TRUE(b.Reserve(d, kT0));
}

TEST(GateBudget, ZeroIsNoBound) {
  GateBudgetOptions o;
  o.failures_per_window = 0;
  GateBudget b(o);
  for (int i = 0; i < 500; ++i) ASSERT_NO_FATAL_FAILURE(Fail(b, Deal(4), kT0));
}

TEST(GateRun, AtMostPerRunGateDecryptsOfADealInOneBatch) {
  GateBudgetOptions o;
  o.per_run = 4;
  o.clock = [] { return kT0; };
  GateBudget b(o);
  {
    GateRun run(&b);
    int admitted = 0;
    for (size_t j = 0; j < 64; ++j) admitted += run.Take(j, Deal(5));
    EXPECT_EQ(admitted, 4);
    EXPECT_TRUE(run.Take(64, Deal(6)));  // another deal's own four
    for (size_t j = 0; j < 4; ++j) run.Settle(j, /*passed=*/false);
    run.Settle(7, false);  // refused above: not counted
  }
  EXPECT_EQ(b.Failures(Deal(5), kT0), 4u);
  // The unsettled reservation (job 64) was dropped with the run, uncounted.
  EXPECT_EQ(b.Failures(Deal(6), kT0), 0u);
  GateRun next(&b);
  EXPECT_TRUE(next.Take(0, Deal(5)));
}

TEST(GateRun, RefusedOnceTheWindowIsSpent) {
  GateBudgetOptions o;
  o.per_run = 4;
  o.failures_per_window = 6;
  o.clock = [] { return kT0; };
  GateBudget b(o);
  int verdicts = 0;
  for (int r = 0; r < 5; ++r) {
    GateRun run(&b);
    for (size_t j = 0; j < 8; ++j)
      if (run.Take(j, Deal(7))) {
        ++verdicts;
        run.Settle(j, false);
      }
  }
  EXPECT_EQ(verdicts, 6);
}

TEST(GateBudget, CountsSurviveARestart) {
  GateBudgetOptions o;
  o.failures_per_window = 5;
  o.window = absl::Seconds(100);
  o.state_file = TempFile();
  {
    GateBudget b(o);
    ASSERT_TRUE(b.Load(kT0).ok());  // no file yet: empty
    for (int i = 0; i < 5; ++i) ASSERT_NO_FATAL_FAILURE(Fail(b, Deal(8), kT0));
    ASSERT_NO_FATAL_FAILURE(Fail(b, Deal(9), kT0 - absl::Seconds(200)));
    ASSERT_TRUE(b.write_status().ok()) << b.write_status();
  }
  {
    // A torn last line (a crash mid-write) is skipped.
    std::ofstream f(o.state_file, std::ios::app);
    f << "0a0a";
  }
  GateBudget again(o);
  ASSERT_TRUE(again.Load(kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(again.Failures(Deal(8), kT0 + absl::Seconds(1)), 5u);
  EXPECT_FALSE(again.Reserve(Deal(8), kT0 + absl::Seconds(1)));
  EXPECT_EQ(again.Failures(Deal(9), kT0 + absl::Seconds(1)), 0u);  // its window ended
  // Load rewrote the file with the live deals only.
  const std::string text = Read(o.state_file);
  EXPECT_EQ(text, "08080808080808080808080808080808 1800000000 5\n");
  EXPECT_TRUE(again.Reserve(Deal(8), kT0 + absl::Seconds(100)));
}

TEST(GateBudget, AnUnreadableFileStopsTheLoad) {
  GateBudgetOptions o;
  o.state_file = "/proc/self/mem/gate-failures";  // exists as a path prefix, not a file
  GateBudget b(o);
  EXPECT_FALSE(b.Load(kT0).ok());
}

TEST(GateBudget, TheFileStaysSmall) {
  GateBudgetOptions o;
  o.failures_per_window = 0;
  o.state_file = TempFile();
  GateBudget b(o);
  for (int i = 0; i < 1100; ++i) ASSERT_NO_FATAL_FAILURE(Fail(b, Deal(10), kT0));
  std::ifstream f(o.state_file);
  size_t lines = 0;
  for (std::string l; std::getline(f, l);) ++lines;
  EXPECT_LE(lines, 1026u);
  GateBudget again(o);
  ASSERT_TRUE(again.Load(kT0).ok());
  EXPECT_EQ(again.Failures(Deal(10), kT0), 1100u);
}

}  // namespace
}  // namespace kmpc::engine
