// The Batcher's own promises (batcher_thread.h): it runs the dispatcher on
// a thread of its own, every accepted job completes once through the sink,
// TakeQueued hands queued jobs back unheard, and Stop() (or the destructor)
// leaves the sink silent, even for a batch in flight whose transport calls
// back late. The flush policy itself is the dispatcher's
// (dispatcher_test.cc), the deep lane batcher_test.cc's.
#include "batcher_thread.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "batcher_fixture.h"
#include "dispatcher.h"
#include "gtest/gtest.h"
#include "job.h"

namespace kmpc::kdc {
namespace {

INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest, ::testing::Values(ClusterKind::kFake),
                         KindName);

TEST_P(BatcherTest, EveryJobCompletesOnceAndIsCounted) {
  auto b = Make(WindowFlushed(absl::Milliseconds(20)));
  for (uint64_t t = 1; t <= 3; ++t) ASSERT_TRUE(b->dispatcher().Submit(t, Encrypt("ticket")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  for (uint64_t t = 1; t <= 3; ++t) EXPECT_TRUE(sink_.Get(t).status.ok()) << t;
  b->Stop();
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
  EXPECT_EQ(b->stats().jobs, 3u);
  EXPECT_EQ(b->stats().batches, 1u);
}

TEST_P(BatcherTest, TakeQueuedHandsBackWaitingJobsUnheard) {
  auto b = Make(WindowFlushed(absl::Seconds(30)));
  ASSERT_TRUE(b->dispatcher().Submit(7, Encrypt("a")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(9, Encrypt("b")).ok());
  std::vector<uint64_t> held_back;
  std::vector<uint64_t> tokens = b->dispatcher().TakeQueued(&held_back);
  std::sort(tokens.begin(), tokens.end());
  EXPECT_EQ(tokens, (std::vector<uint64_t>{7, 9}));
  EXPECT_TRUE(held_back.empty());  // no planned exchange held a job back
  EXPECT_TRUE(b->dispatcher().TakeQueued(&held_back).empty());
  b->Stop();
  EXPECT_TRUE(sink_.counts().empty());
  EXPECT_EQ(RunCalls(), 0);
}

TEST_P(BatcherTest, StopSilencesTheSinkForABatchInFlight) {
  HoldingTransport holding(&cluster_);
  BatcherOptions o;
  o.deadline = absl::Seconds(30);
  auto b = std::make_unique<Batcher>(o, &holding, &sink_);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("in flight")).ok());
  for (int i = 0; i < 1000 && holding.held() < 3; ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(holding.held(), 3u);  // one Run per party
  b->Stop();
  holding.ReleaseAll();  // late answers after Stop are harmless
  b.reset();             // and so is the destructor's Stop
  EXPECT_TRUE(sink_.counts().empty());
}

TEST_P(BatcherTest, DestructorStopsWithJobsQueued) {
  {
    auto b = Make(WindowFlushed(absl::Seconds(30)));
    ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("never sent")).ok());
  }
  EXPECT_TRUE(sink_.counts().empty());
  EXPECT_EQ(RunCalls(), 0);
}

}  // namespace
}  // namespace kmpc::kdc
