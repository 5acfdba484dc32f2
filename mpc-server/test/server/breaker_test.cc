// The deviation breaker (service/breaker.h): its window, trip, reset and
// persisted state, its metrics, and three Schedulers over the in-memory
// ring refusing every batch while one party's breaker is open.
#include "service/breaker.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "contract.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "service/memory_scheduler_ring.h"
#include "service/metrics.h"
#include "service/scheduler.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

TEST(Breaker, OpensAtTheNthDeviationWithinTheWindow) {
  Breaker b({3, absl::Minutes(10), ""});
  EXPECT_FALSE(b.RecordDeviation(kT0));
  EXPECT_FALSE(b.RecordDeviation(kT0 + absl::Seconds(1)));
  EXPECT_FALSE(b.open());
  EXPECT_EQ(b.Detail(), "");
  EXPECT_TRUE(b.RecordDeviation(kT0 + absl::Seconds(2)));
  EXPECT_TRUE(b.open());
  EXPECT_TRUE(absl::StrContains(b.Detail(), "3 deviations within 10m")) << b.Detail();
  EXPECT_FALSE(b.RecordDeviation(kT0 + absl::Seconds(3)));  // already open
  EXPECT_TRUE(b.open());
  EXPECT_EQ(b.deviations(), 4u);
}

TEST(Breaker, DeviationsOlderThanTheWindowDoNotCount) {
  Breaker b({3, absl::Minutes(10), ""});
  b.RecordDeviation(kT0);
  b.RecordDeviation(kT0 + absl::Minutes(5));
  EXPECT_FALSE(b.RecordDeviation(kT0 + absl::Minutes(11)));  // kT0 has left
  EXPECT_FALSE(b.open());
  EXPECT_TRUE(b.RecordDeviation(kT0 + absl::Minutes(12)));
}

TEST(Breaker, ZeroDeviationsNeverOpensButCounts) {
  Breaker b({0, absl::Minutes(10), ""});
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(b.RecordDeviation(kT0));
  EXPECT_FALSE(b.open());
  EXPECT_EQ(b.deviations(), 50u);
}

TEST(Breaker, ResetClosesItAndForgetsTheWindow) {
  Breaker b({2, absl::Minutes(10), ""});
  b.RecordDeviation(kT0);
  b.RecordDeviation(kT0);
  ASSERT_TRUE(b.open());
  absl::StatusOr<std::string> cleared = b.Reset();
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_TRUE(absl::StrContains(*cleared, "open since")) << *cleared;
  EXPECT_FALSE(b.open());
  EXPECT_FALSE(b.RecordDeviation(kT0 + absl::Seconds(1)));  // one, not three
  cleared = b.Reset();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, "");  // it was closed
}

TEST(Breaker, RefusalIsTyped) {
  Breaker b({1, absl::Minutes(10), ""});
  b.RecordDeviation(kT0);
  const absl::Status st = b.RefusalStatus();
  EXPECT_TRUE(absl::IsFailedPrecondition(st));
  EXPECT_TRUE(Breaker::IsRefusal(st));
  EXPECT_TRUE(absl::StrContains(st.message(), "kmpc-admin breaker-reset")) << st;
  EXPECT_FALSE(Breaker::IsRefusal(absl::FailedPreconditionError("other")));
  EXPECT_FALSE(Breaker::IsRefusal(absl::OkStatus()));
}

// A fresh directory for a breaker's state file (removed by the test).
std::string TripFileDir() {
  char dir[] = "/tmp/kmpc_breaker_XXXXXX";
  return mkdtemp(dir) != nullptr ? std::string(dir) : std::string();
}

// A restart does not clear a trip: the state file reopens it at Load();
// the server's operator removes the file, then Reset() closes it.
TEST(Breaker, TripSurvivesARestartUntilReset) {
  const std::string dir = TripFileDir();
  ASSERT_FALSE(dir.empty());
  const std::string file = dir + "/breaker-open";
  {
    Breaker b({1, absl::Minutes(10), file});
    ASSERT_TRUE(b.Load().ok());
    EXPECT_FALSE(b.open());
    EXPECT_TRUE(b.RecordDeviation(kT0));
    EXPECT_EQ(access(file.c_str(), F_OK), 0);
  }
  {
    Breaker b({1, absl::Minutes(10), file});
    EXPECT_FALSE(b.open());
    ASSERT_TRUE(b.Load().ok());
    EXPECT_TRUE(b.open());
    EXPECT_TRUE(absl::StrContains(b.Detail(), "before this restart")) << b.Detail();
    EXPECT_TRUE(absl::StrContains(b.Detail(), "1 deviations within 10m")) << b.Detail();
    ASSERT_EQ(unlink(file.c_str()), 0);
    ASSERT_TRUE(b.Reset().ok());
    EXPECT_FALSE(b.open());
  }
  Breaker b({1, absl::Minutes(10), file});
  ASSERT_TRUE(b.Load().ok());
  EXPECT_FALSE(b.open());
  rmdir(dir.c_str());
}

// The attack: Admin.ResetBreaker needs only the Admin certificate, which
// is on the KDC host, so an intruder there who also runs a deviating
// server would reset the bound on its aborts at will. A persisted trip
// closes only once this server's operator removed its file: Reset()
// refuses before (FAILED_PRECONDITION naming the file) and the breaker
// stays open; after, it closes.
TEST(Breaker, ResetNeedsTheOperatorToRemoveTheTripFile) {
  const std::string dir = TripFileDir();
  ASSERT_FALSE(dir.empty());
  const std::string file = dir + "/breaker-open";
  Breaker b({1, absl::Minutes(10), file});
  ASSERT_TRUE(b.Load().ok());
  EXPECT_TRUE(b.RecordDeviation(kT0));
  absl::StatusOr<std::string> r = b.Reset();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), file)) << r.status();
  EXPECT_TRUE(b.open());
  EXPECT_EQ(access(file.c_str(), F_OK), 0);
  ASSERT_EQ(unlink(file.c_str()), 0);
  r = b.Reset();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->empty());
  EXPECT_FALSE(b.open());
  rmdir(dir.c_str());
}

// kmpc_deviations_total and kmpc_breaker_open; kmpc_integrity_failures_total
// (wrong passwords) is not moved by a deviation.
TEST(Breaker, Metrics) {
  Metrics m(1);
  Breaker b({2, absl::Minutes(10), ""}, &m);
  EXPECT_TRUE(absl::StrContains(m.Render(), "kmpc_breaker_open{party=\"1\"} 0"));
  b.RecordDeviation(kT0);
  b.RecordDeviation(kT0);
  const std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "kmpc_deviations_total{party=\"1\"} 2")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_breaker_open{party=\"1\"} 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_integrity_failures_total{party=\"1\"} 0"))
      << text;
  ASSERT_TRUE(b.Reset().ok());
  EXPECT_TRUE(absl::StrContains(m.Render(), "kmpc_breaker_open{party=\"1\"} 0"));
}

// Three Schedulers over the in-memory ring, each with its breaker.
class BreakerSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_.resize(16);
    key_id_.resize(contract::kKeyIdSize);
    RAND_bytes(reinterpret_cast<uint8_t*>(key_.data()), 16);
    RAND_bytes(reinterpret_cast<uint8_t*>(key_id_.data()), contract::kKeyIdSize);
    auto views = engine::DealKey(
        engine::Cipher::kAes128,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key_.data()), 16));
    ASSERT_TRUE(views.ok()) << views.status();
    rings_ = std::make_unique<MemorySchedulerRings>(1, absl::Seconds(1));
    for (int i = 0; i < 3; ++i) {
      auto shares = std::make_shared<const engine::KeyShares>((*views)[i]);
      breakers_[i] = std::make_unique<Breaker>(BreakerOptions{1, absl::Minutes(10), ""});
      SchedulerOptions so;
      so.schedule_timeout = absl::Seconds(2);
      so.peer_batch_wait = absl::Milliseconds(300);
      so.breaker = breakers_[i].get();
      engine::KeyLookup lookup = [this, shares](absl::string_view id)
          -> absl::StatusOr<std::shared_ptr<const engine::KeyShares>> {
        if (id != key_id_) return absl::NotFoundError("no such key");
        return shares;
      };
      schedulers_[i] = std::make_unique<Scheduler>(&rings_->party(i), lookup, so);
      schedulers_[i]->Start();
    }
  }
  void TearDown() override {
    for (auto& s : schedulers_) s->Stop();
  }

  std::array<BatchOutcome, 3> SubmitAll() {
    engine::Job j;
    j.type = pb::JOB_ENCRYPT;
    j.cipher = pb::CIPHER_AES128;
    j.key_id = key_id_;
    j.usage = 3;
    j.nblocks = 1;
    BatchId id;
    RAND_bytes(id.data(), id.size());
    std::array<std::future<BatchOutcome>, 3> fs;
    for (int i = 0; i < 3; ++i)
      fs[i] = std::async(std::launch::async, [this, i, id, j] {
        return schedulers_[i]->Submit(BatchKind::kRun, id, {j});
      });
    std::array<BatchOutcome, 3> out;
    for (int i = 0; i < 3; ++i) out[i] = fs[i].get();
    return out;
  }

  std::string key_, key_id_;
  std::unique_ptr<MemorySchedulerRings> rings_;
  std::array<std::unique_ptr<Breaker>, 3> breakers_;
  std::array<std::unique_ptr<Scheduler>, 3> schedulers_;
};

// Whichever party's breaker is open, the batch fails on all three (that
// party and the leader: BATCH_BREAKER_OPEN at once) and nothing runs;
// after the reset the next batch runs.
TEST_F(BreakerSchedulerTest, AnOpenBreakerStopsTheRingUntilReset) {
  for (int open = 0; open < 3; ++open) {
    SCOPED_TRACE(open);
    breakers_[open]->RecordDeviation();
    ASSERT_TRUE(breakers_[open]->open());
    const absl::Time t0 = absl::Now();
    auto out = SubmitAll();
    EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
    for (int i = 0; i < 3; ++i) {
      EXPECT_FALSE(out[i].status.ok()) << i;
      EXPECT_EQ(out[i].ring_bytes, 0u) << i;  // nothing computed
    }
    EXPECT_EQ(out[open].error, pb::BATCH_BREAKER_OPEN);
    // The leader is told by a follower's proposal answer (kStatusBreaker):
    // it fails the batch at once, with the same cause.
    EXPECT_EQ(out[0].error, pb::BATCH_BREAKER_OPEN) << out[0].status;
    EXPECT_TRUE(Breaker::IsRefusal(out[open].status)) << out[open].status;
    ASSERT_TRUE(breakers_[open]->Reset().ok());
    out = SubmitAll();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
  }
}

}  // namespace
}  // namespace kmpc::service
