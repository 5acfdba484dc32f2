// The Batcher's own promises (batcher.h): it runs the dispatcher on a thread
// of its own, every accepted job completes once through the sink, TakeQueued
// hands queued jobs back unheard, and Stop() (or the destructor) leaves the
// sink silent, even for a batch in flight whose transport calls back late.
// The flush policy itself is the dispatcher's (dispatcher_test.cc).
#include "batcher.h"
#include "dispatcher.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "batcher_fixture.h"
#include "gtest/gtest.h"
#include "job.h"

namespace kmpc::kdc {
namespace {

INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest, ::testing::Values(ClusterKind::kFake),
                         KindName);

// A transport that answers nothing until told: it keeps every Run's
// callback.
class HoldingTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void Run(int party, const kmpc::v1::RunRequest& req, kmpc::v1::RunResponse* /*resp*/,
           absl::Time /*deadline*/, Done done) override {
    std::lock_guard<std::mutex> l(mu_);
    held_.push_back(std::move(done));
    if (party != 0) return;
    std::vector<uint64_t> lengths;
    for (const auto& j : req.jobs()) lengths.push_back(j.length());
    std::sort(lengths.begin(), lengths.end());
    runs_.push_back(std::move(lengths));
  }
  // Party 0's Run requests: each one's job lengths, sorted.
  std::vector<std::vector<uint64_t>> runs() {
    std::lock_guard<std::mutex> l(mu_);
    return runs_;
  }
  size_t held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_.size();
  }
  // Calls every held callback with a failure (a transport's late answer).
  void ReleaseAll() {
    std::vector<Done> held;
    {
      std::lock_guard<std::mutex> l(mu_);
      held.swap(held_);
    }
    for (Done& d : held) d(CallStatus(absl::UnavailableError("late")));
  }

 private:
  std::mutex mu_;
  std::vector<Done> held_;
  std::vector<std::vector<uint64_t>> runs_;
};

// An aes*-cts ENCRYPT of `bytes` of plaintext (an AS reply's length, or a
// long one).
Job CtsEncrypt(size_t bytes) {
  Job j = Encrypt(std::string(bytes, 'r'), 3);
  j.cipher = kmpc::v1::CIPHER_AES256_CTS;
  return j;
}

// Submits a job deeper than deep_rounds and two logins' replies, and
// returns party 0's Run requests once `runs` of them are held.
std::vector<std::vector<uint64_t>> DeepAndLogins(HoldingTransport& holding, CollectingSink& sink,
                                                 uint64_t deep_rounds, size_t runs) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(20));
  o.deep_rounds = deep_rounds;
  o.deadline = absl::Seconds(30);
  o.max_inflight = 3;  // room for a second deep batch: the lane's own limit holds it
  Batcher b(o, &holding, &sink);
  EXPECT_GT(JobDepth(CtsEncrypt(1900)), o.deep_rounds);
  EXPECT_LT(JobDepth(CtsEncrypt(284)), 12000u);
  EXPECT_TRUE(b.dispatcher().Submit(1, CtsEncrypt(1900)).ok());
  EXPECT_TRUE(b.dispatcher().Submit(2, CtsEncrypt(284)).ok());
  EXPECT_TRUE(b.dispatcher().Submit(3, CtsEncrypt(290)).ok());
  for (int i = 0; i < 1000 && holding.runs().size() < runs; ++i)
    absl::SleepFor(absl::Milliseconds(5));
  if (deep_rounds != 0) {
    // A second deep job waits for the first (one deep batch in flight).
    EXPECT_TRUE(b.dispatcher().Submit(4, CtsEncrypt(1800)).ok());
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(b.stats().deep_batches, 1u);
    EXPECT_EQ(b.stats().queued_jobs, 1u);
  }
  std::vector<std::vector<uint64_t>> out = holding.runs();
  b.Stop();
  holding.ReleaseAll();
  return out;
}

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

// Issue 48 item 4: one client's long request (hundreds of addresses, a
// large padata: a deep aes*-cts job) must not delay others' logins. It
// goes in a Run of its own, beside the logins' batch, not in it; before
// the deep lane the three jobs went in one batch (deep_rounds = 0 shows
// it), whose every login waited for the deep job's rounds.
TEST_P(BatcherTest, DeepJobGoesInABatchOfItsOwn) {
  HoldingTransport holding(&cluster_);
  const auto runs = DeepAndLogins(holding, sink_, 12000, 2);
  ASSERT_EQ(runs.size(), 2u);
  std::vector<std::vector<uint64_t>> sorted = runs;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.size() < b.size(); });
  EXPECT_EQ(sorted[0], (std::vector<uint64_t>{1900}));
  EXPECT_EQ(sorted[1], (std::vector<uint64_t>{284, 290}));
}

TEST_P(BatcherTest, DeepLaneOffSharesTheBatch) {
  HoldingTransport holding(&cluster_);
  const auto runs = DeepAndLogins(holding, sink_, 0, 1);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (std::vector<uint64_t>{284, 290, 1900}));
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
