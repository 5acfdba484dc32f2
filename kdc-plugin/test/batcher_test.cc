// The batcher's deep lane (batcher.h, deep_rounds) through a Batcher: a
// job deeper than deep_rounds goes in a Run of its own beside the logins'
// batch, one deep batch in flight at a time; with the lane off it shares
// the batch. The rest of the flush policy is the dispatcher's
// (dispatcher_test.cc), the Batcher's thread batcher_thread_test.cc's.
#include "batcher.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "batcher_fixture.h"
#include "batcher_thread.h"
#include "dispatcher.h"
#include "gtest/gtest.h"
#include "job.h"

namespace kmpc::kdc {
namespace {

INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest, ::testing::Values(ClusterKind::kFake),
                         KindName);

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

}  // namespace
}  // namespace kmpc::kdc
