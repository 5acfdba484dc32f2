// The scheduler's queue (service/scheduler_queue.cc) on one party whose
// workers never run (no other party on the in-memory ring): a batch waits
// until the schedule timeout or its client's deadline, whichever is first;
// the same batch is admitted once; an open breaker and a stop refuse at
// once.
#include "service/scheduler.h"

#include <gtest/gtest.h>
#include <openssl/rand.h>

#include <functional>
#include <future>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "service/breaker.h"
#include "service/memory_scheduler_ring.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

BatchId RandomBatchId() {
  BatchId id;
  RAND_bytes(id.data(), id.size());
  return id;
}

// Party 1's Scheduler, not started: nothing ever claims its batches.
class SchedulerQueueTest : public ::testing::Test {
 protected:
  void Make(absl::Duration schedule_timeout, Breaker* breaker = nullptr) {
    rings_ = std::make_unique<MemorySchedulerRings>(1, absl::Seconds(1));
    SchedulerOptions so;
    so.schedule_timeout = schedule_timeout;
    so.breaker = breaker;
    engine::KeyLookup none = [](absl::string_view)
        -> absl::StatusOr<std::shared_ptr<const engine::KeyShares>> {
      return absl::NotFoundError("no keys here");
    };
    scheduler_ = std::make_unique<Scheduler>(&rings_->party(1), none, so);
  }

  std::unique_ptr<MemorySchedulerRings> rings_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerQueueTest, WaitsUntilTheScheduleTimeout) {
  Make(absl::Milliseconds(200));
  const absl::Time t0 = absl::Now();
  BatchOutcome out = scheduler_->Submit(BatchKind::kRun, RandomBatchId(), {});
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsUnavailable(out.status)) << out.status;
  EXPECT_EQ(out.error, pb::BATCH_RING_UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(out.status.message(),
                                "was not scheduled on the ring within 200ms"))
      << out.status;
  EXPECT_FALSE(absl::StrContains(out.status.message(), "client's deadline"));
}

TEST_F(SchedulerQueueTest, WaitsNoLongerThanTheClientsDeadline) {
  Make(absl::Seconds(30));
  const absl::Time t0 = absl::Now();
  BatchOutcome out = scheduler_->Submit(BatchKind::kRun, RandomBatchId(), {},
                                        t0 + absl::Milliseconds(150));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(out.error, pb::BATCH_RING_UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(out.status.message(), "(the client's deadline)"))
      << out.status;
}

// A second copy of a waiting batch (same kind and id) is refused at once;
// the first keeps waiting until the scheduler stops, which fails it as
// shutting down.
TEST_F(SchedulerQueueTest, TheSameBatchWaitsOnceAndAStopEndsTheWait) {
  Make(absl::Seconds(30));
  const BatchId id = RandomBatchId();
  std::future<BatchOutcome> first = std::async(std::launch::async, [&] {
    return scheduler_->Submit(BatchKind::kRun, id, {});
  });
  absl::SleepFor(absl::Milliseconds(300));  // the first is waiting
  BatchOutcome again = scheduler_->Submit(BatchKind::kRun, id, {});
  EXPECT_TRUE(absl::IsAlreadyExists(again.status)) << again.status;
  EXPECT_EQ(again.error, pb::BATCH_MALFORMED);
  EXPECT_TRUE(absl::StrContains(again.status.message(), "is already waiting on this server"));
  ASSERT_EQ(first.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  scheduler_->Stop();
  BatchOutcome out = first.get();
  EXPECT_TRUE(absl::IsUnavailable(out.status)) << out.status;
  EXPECT_EQ(out.error, pb::BATCH_SHUTTING_DOWN);
}

// Busy (the engines' EngineOptions::busy, and not the ring workers'
// spin through): more than one batch admitted and not done. A refused copy
// does not count; a batch counts until its outcome, whatever ends it (here
// the stop). A destroyed Scheduler leaves its ring no question to ask.
TEST_F(SchedulerQueueTest, BusyWhileAnotherBatchIsInFlight) {
  Make(absl::Seconds(30));
  // The engines ask the scheduler (EngineOptions::busy), whatever the
  // options it was given held.
  const std::function<bool()>& engines_busy = scheduler_->engine_options().busy;
  ASSERT_TRUE(engines_busy);
  EXPECT_FALSE(scheduler_->Busy());
  EXPECT_FALSE(engines_busy());
  EXPECT_TRUE(rings_->SpinThroughAllowed(1, 0));
  const BatchId id = RandomBatchId();
  std::future<BatchOutcome> first = std::async(std::launch::async, [&] {
    return scheduler_->Submit(BatchKind::kRun, id, {});
  });
  absl::SleepFor(absl::Milliseconds(300));  // the first is waiting
  EXPECT_FALSE(scheduler_->Busy()) << "one batch alone";
  ASSERT_TRUE(absl::IsAlreadyExists(scheduler_->Submit(BatchKind::kRun, id, {}).status));
  EXPECT_FALSE(scheduler_->Busy()) << "a refused copy is not in flight";
  std::future<BatchOutcome> second = std::async(std::launch::async, [&] {
    return scheduler_->Submit(BatchKind::kRun, RandomBatchId(), {});
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!scheduler_->Busy() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(scheduler_->Busy()) << "two batches waiting";
  EXPECT_TRUE(engines_busy());
  EXPECT_FALSE(rings_->SpinThroughAllowed(1, 0));
  scheduler_->Stop();
  EXPECT_EQ(first.get().error, pb::BATCH_SHUTTING_DOWN);
  EXPECT_EQ(second.get().error, pb::BATCH_SHUTTING_DOWN);
  EXPECT_FALSE(scheduler_->Busy()) << "both done";
  EXPECT_FALSE(engines_busy());
  EXPECT_TRUE(rings_->SpinThroughAllowed(1, 0));
  scheduler_.reset();
  EXPECT_FALSE(rings_->SpinThroughAllowed(1, 0));
}

TEST_F(SchedulerQueueTest, AnOpenBreakerRefusesAtOnce) {
  Breaker breaker(BreakerOptions{1, absl::Minutes(10), ""});
  Make(absl::Seconds(30), &breaker);
  breaker.RecordDeviation();
  ASSERT_TRUE(breaker.open());
  const absl::Time t0 = absl::Now();
  BatchOutcome out = scheduler_->Submit(BatchKind::kRun, RandomBatchId(), {});
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(out.error, pb::BATCH_BREAKER_OPEN);
  EXPECT_TRUE(Breaker::IsRefusal(out.status)) << out.status;
  scheduler_.reset();  // before the breaker it points to
}

}  // namespace
}  // namespace kmpc::service
