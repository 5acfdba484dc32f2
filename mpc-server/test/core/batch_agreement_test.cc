// engine/batch_agreement.h on three parties over the in-memory ring: the
// same batch is agreed with its counters drawn on the way, alike on every
// party; different inputs are refused in step; different key views fail
// the same jobs everywhere; the digest covers the options that shape the
// rounds; dealt copies that differ refuse the batch on all three.
#include "engine/batch_agreement.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <vector>

#include "batch_testing.h"
#include "engine/keys.h"
#include "engine/pads.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::DealMessage;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;
using phase_testing::RunParties;

class BatchAgreementTest : public ::testing::Test {
 protected:
  BatchAgreementTest() { c_.AddKey(kKey, Bytes(16, 1), Cipher::kAes128); }

  // LookupKeys, then AgreeOnBatch, on the three parties (party i's batch
  // numbered seq[i]).
  std::array<absl::Status, 3> Agree(const std::array<std::vector<Job>, 3>& jobs,
                                    std::array<uint64_t, 3> seq = {1, 1, 1}) {
    for (int i = 0; i < 3; ++i)
      b_[i] = std::make_unique<BatchState>(seq[i], jobs[i], &c_.budget[i]);
    return RunParties([&](int i) {
      LookupKeys(c_.ctx(i), *b_[i], c_.Lookup(i));
      return AgreeOnBatch(c_.ctx(i), *b_[i]);
    });
  }
  void ExpectPrssInStep() {
    for (int i = 1; i < 3; ++i) EXPECT_EQ(c_.c.prss[i]->counter(), c_.c.prss[0]->counter());
  }

  const std::string kKey = KeyId("key");
  PhaseCluster c_;
  std::array<std::unique_ptr<BatchState>, 3> b_;
};

TEST_F(BatchAgreementTest, SameBatchIsAgreedWithItsCountersDrawn) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 20;
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 2),
                                 CtrJob(pb::JOB_ENCRYPT, kKey, 1), pad};
  for (const absl::Status& s : Agree({jobs, jobs, jobs})) ASSERT_TRUE(s.ok()) << s;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int i = 0; i < 3; ++i) {
      const JobPlan& w = b_[i]->plan[j];
      EXPECT_EQ(w.status, pb::JOB_OK) << w.detail;
      EXPECT_TRUE(w.ctr0_drawn);
      EXPECT_EQ(w.ctr0, b_[0]->plan[j].ctr0) << "party " << i << " job " << j;
      EXPECT_FALSE(b_[i]->deviated);
    }
  }
  EXPECT_NE(b_[0]->plan[0].ctr0, b_[0]->plan[1].ctr0);
  ExpectPrssInStep();
}

TEST_F(BatchAgreementTest, DifferentInputsAreRefusedInStep) {
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  std::vector<Job> more = jobs;
  more.push_back(CtrJob(pb::JOB_ENCRYPT, kKey, 1));  // one more counter drawn
  for (const absl::Status& s : Agree({jobs, jobs, more}))
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectPrssInStep();  // the counters re-aligned to the most drawn
  for (const absl::Status& s : Agree({jobs, jobs, jobs}, {1, 2, 1}))
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectPrssInStep();
  // The ring is still in step: the same batch then goes through.
  for (const absl::Status& s : Agree({jobs, jobs, jobs}, {3, 3, 3})) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(BatchAgreementTest, DifferentKeyViewsFailTheSameJobsEverywhere) {
  c_.AddKey(KeyId("partial"), Bytes(16, 2), Cipher::kAes128);
  c_.store[1].erase(KeyId("partial"));
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, KeyId("partial"), 1),
                                 CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  for (const absl::Status& s : Agree({jobs, jobs, jobs})) ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b_[i]->plan[0].status, pb::JOB_UNKNOWN_KEY);
    EXPECT_EQ(b_[i]->plan[0].detail, b_[0]->plan[0].detail);
    EXPECT_EQ(b_[i]->plan[1].status, pb::JOB_OK) << b_[i]->plan[1].detail;
    EXPECT_FALSE(b_[i]->plan[1].ctr0_drawn);  // DrawCounters draws it
  }
  ExpectPrssInStep();
  for (const absl::Status& s : RunParties([&](int i) { return DrawCounters(c_.ctx(i), *b_[i]); }))
    ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(b_[i]->plan[1].ctr0_drawn);
    EXPECT_EQ(b_[i]->plan[1].ctr0, b_[0]->plan[1].ctr0);
  }
}

TEST_F(BatchAgreementTest, DigestCoversTheOptionsThatShapeTheRounds) {
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, c_.Lookup(0));
  AgreementHeader h1, h2, h3;
  ASSERT_TRUE(DigestBatch(c_.ctx(0), b, h1).ok());
  ASSERT_TRUE(DigestBatch(c_.ctx(0), b, h2).ok());
  EXPECT_TRUE(h1.SameInputs(h2) && h1.SameKeys(h2));
  c_.options[0].wave_lanes *= 2;
  ASSERT_TRUE(DigestBatch(c_.ctx(0), b, h3).ok());
  EXPECT_FALSE(h1.SameInputs(h3));
  EXPECT_TRUE(h1.SameKeys(h3));
  // The key views are digested apart from the inputs.
  c_.options[0] = EngineOptions{};
  b.plan[0].over_rate = true;
  ASSERT_TRUE(DigestBatch(c_.ctx(0), b, h3).ok());
  EXPECT_TRUE(h1.SameInputs(h3));
  EXPECT_FALSE(h1.SameKeys(h3));
}

TEST_F(BatchAgreementTest, DealtCopiesThatDifferRefuseTheBatchOnAllThree) {
  std::array<std::vector<Job>, 3> jobs;
  for (auto& j : jobs) j = {CtrJob(pb::JOB_CHECKSUM, kKey)};
  DealMessage(jobs, 0, Bytes(40, 9));
  auto check = [&] {
    return RunParties([&](int i) -> absl::Status {
      if (!AnyDealt(*b_[i])) return absl::InternalError("nothing dealt");
      return CheckDealing(c_.ctx(i), *b_[i]);
    });
  };
  for (const absl::Status& s : Agree(jobs)) ASSERT_TRUE(s.ok()) << s;
  for (const absl::Status& s : check()) EXPECT_TRUE(s.ok()) << s;
  // Party 1's copy of component 2 (its component 1) is not party 2's.
  jobs[1][0].data_shares[1][5] ^= 1;
  for (const absl::Status& s : Agree(jobs, {2, 2, 2})) ASSERT_TRUE(s.ok()) << s;
  for (const absl::Status& s : check()) EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectPrssInStep();
}

TEST_F(BatchAgreementTest, NothingDealtInAKeystreamBatch) {
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, c_.Lookup(0));
  EXPECT_FALSE(AnyDealt(b));
}

}  // namespace
}  // namespace kmpc::engine
