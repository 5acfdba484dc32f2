// A batch started by its kind (start_step.h), with a recording StepHost and
// the fake cluster (step_fixture.h): a Run batch's finalize_only jobs go in
// a Finalize request of their own beside the Run of its other jobs, one
// whose ENCRYPT state the servers forgot comes back through a Run, and a
// Sign batch is one Sign request for every job.
#include "start_step.h"

#include "prepared.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class StartStepTest : public StepTest {
 protected:
  // What the Run of step `seq` prepared for `jobs` (prepared, as the
  // planner's are): their keystreams and pads, as held for later jobs.
  std::vector<HeldKeystream> Prepare(uint64_t seq, std::vector<PendingJob> jobs) {
    for (PendingJob& q : jobs) q.prepared = true;
    const size_t n = jobs.size();
    StartStep(Step(seq, std::move(jobs)));
    EXPECT_TRUE(host_->WaitFinished(seq));
    std::vector<HeldKeystream> held = host_->held();
    EXPECT_EQ(held.size(), n);
    return held;
  }
  // The plaintext of ciphertext `c`, decrypted in a Run (step `seq`).
  std::string Decrypted(uint64_t seq, uint64_t token, const SecureBytes& c) {
    std::vector<PendingJob> jobs;
    jobs.push_back(Pending(token, pb::JOB_DECRYPT, c));
    StartStep(Step(seq, std::move(jobs)));
    EXPECT_TRUE(host_->WaitFinished(seq));
    const Result r = host_->Get(token);
    EXPECT_TRUE(r.status.ok()) << r.status;
    return std::string(r.output.begin(), r.output.end());
  }
  using Sent = std::vector<std::pair<StepKind, size_t>>;
};

TEST_F(StartStepTest, FinalizeOnlyJobsGoInAFinalizeOfTheirOwnBesideTheRun) {
  const std::string plaintext = "an EncKDCRepPart";
  std::vector<PendingJob> prep;
  prep.push_back(Pending(1, pb::JOB_ENCRYPT, SecureBytes(plaintext.size(), 0)));
  std::vector<HeldKeystream> held = Prepare(1, std::move(prep));
  ASSERT_EQ(held.size(), 1u);
  PendingJob enc = Pending(2, pb::JOB_ENCRYPT, Bytes(plaintext));
  FinalizeWith(&enc, std::move(held[0]));
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(3, pb::JOB_CHECKSUM, Bytes("a PAC's server checksum input")));
  jobs.push_back(std::move(enc));
  StartStep(Step(2, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(2));
  // After the preparing Run: the Finalize of job 2, then the Run of job 3,
  // started together (neither waits for the other's answers).
  EXPECT_EQ(host_->sent(), (Sent{{StepKind::kRun, 1},
                                 {StepKind::kFinalizeOnly, 1},
                                 {StepKind::kRun, 1}}));
  EXPECT_EQ(host_->finished().back(), (std::pair<StepKind, bool>{StepKind::kRun, false}));
  EXPECT_EQ(host_->count(StepEvent::kFinalizeOnlyRerun), 0u);
  const Result c = host_->Get(2);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.output.size(), contract::kCiphertextOverhead + plaintext.size());
  EXPECT_EQ(host_->Get(3).output.size(), contract::kChecksumSize);
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{2, 1}, {3, 1}}));
  EXPECT_EQ(Decrypted(3, 4, c.output), plaintext);
}

// The Finalize step re-runs what the servers could not finalize through
// the Run step, as StartStep made it to.
TEST_F(StartStepTest, AFinalizeOnlyJobTheServersForgotComesBackThroughARun) {
  const std::string plaintext = "a ticket's EncTicketPart";
  PendingJob q = Pending(1, pb::JOB_ENCRYPT, Bytes(plaintext));
  HeldKeystream gone;
  gone.run_batch_id = std::string(contract::kBatchIdSize, 'x');  // no such state
  gone.ctr0 = std::string(contract::kCtr0Size, '\0');
  gone.keystream = SecureBytes(plaintext.size(), 0);
  FinalizeWith(&q, std::move(gone));
  std::vector<PendingJob> jobs;
  jobs.push_back(std::move(q));
  StartStep(Step(1, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(1));
  EXPECT_EQ(host_->sent(), (Sent{{StepKind::kFinalizeOnly, 1},
                                 {StepKind::kRun, 1},
                                 {StepKind::kFinalizeOnly, 1}}));
  EXPECT_EQ(host_->count(StepEvent::kFinalizeOnlyRerun), 1u);
  const Result c = host_->Get(1);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(Decrypted(2, 2, c.output), plaintext);
}

TEST_F(StartStepTest, ASignBatchIsOneSignRequestForEveryJob) {
  const std::string messages[2] = {"a PAC's server checksum input",
                                   "a PAC's KDC checksum input"};
  std::vector<PendingJob> pads;
  for (int i = 0; i < 2; ++i) {
    pads.push_back(Pending(1 + i, pb::JOB_PAD, {}));
    pads.back().job.pad_length = messages[i].size();
  }
  std::vector<HeldKeystream> held = Prepare(1, std::move(pads));
  ASSERT_EQ(held.size(), 2u);
  std::vector<PendingJob> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(Pending(3 + i, pb::JOB_CHECKSUM, Bytes(messages[i])));
    SignWith(&jobs.back(), std::move(held[i]));
  }
  StartStep(Step(2, std::move(jobs), StepKind::kSign));
  ASSERT_TRUE(host_->WaitFinished(2));
  EXPECT_EQ(host_->sent(), (Sent{{StepKind::kRun, 2}, {StepKind::kSign, 2}}));
  EXPECT_EQ(host_->finished().back(), (std::pair<StepKind, bool>{StepKind::kSign, false}));
  for (uint64_t t : {3, 4}) {
    EXPECT_TRUE(host_->Get(t).status.ok()) << host_->Get(t).status;
    EXPECT_EQ(host_->Get(t).output.size(), contract::kChecksumSize);
  }
  EXPECT_EQ(host_->count(StepEvent::kSignRerun), 0u);
}

}  // namespace
}  // namespace kmpc::kdc::steptest
