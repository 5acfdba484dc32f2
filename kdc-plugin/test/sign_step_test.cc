// The Sign step (sign_step.h) driven through a batch, with a recording
// StepHost and the fake cluster (step_fixture.h): a CHECKSUM under a pad
// a Run drew is signed ring-free and verifies; one whose pad the servers
// do not hold runs as an ordinary CHECKSUM at once, counted.
#include "sign_step.h"

#include "absl/strings/match.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class SignStepTest : public StepTest {
 protected:
  // A sign job for `message` under the pad (run_batch_id, job id, ctr0).
  static PendingJob SignJob(uint64_t token, const std::string& message,
                            const std::string& run_batch_id, uint64_t job_id,
                            const std::string& ctr0) {
    PendingJob q = Pending(token, pb::JOB_CHECKSUM, Bytes(message));
    q.sign = true;
    q.run_batch_id = run_batch_id;
    q.run_job_id = job_id;
    q.output.assign(ctr0.begin(), ctr0.end());
    return q;
  }
  // The checksum `sum` over `message` verified in a Run (step `seq`).
  absl::Status Verify(uint64_t seq, uint64_t token, const std::string& message,
                      const SecureBytes& sum) {
    PendingJob v = Pending(token, pb::JOB_VERIFY_CHECKSUM, Bytes(message));
    v.job.checksum.assign(sum.begin(), sum.end());
    std::vector<PendingJob> jobs;
    jobs.push_back(std::move(v));
    StartStep(Step(seq, std::move(jobs)));
    if (!host_->WaitFinished(seq)) return absl::DeadlineExceededError("no answer");
    return host_->Get(token).status;
  }
};

TEST_F(SignStepTest, APadsChecksumIsSignedRingFreeAndVerifies) {
  const std::string message = "a PAC's server checksum input";
  PendingJob pad = Pending(1, pb::JOB_PAD, {});
  pad.prepared = true;
  pad.job.pad_length = message.size();
  std::vector<PendingJob> jobs;
  jobs.push_back(std::move(pad));
  StartStep(Step(1, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(1));
  const std::vector<HeldKeystream> held = host_->held();
  ASSERT_EQ(held.size(), 1u);
  ASSERT_TRUE(held[0].pad);
  jobs.clear();
  jobs.push_back(SignJob(2, message, held[0].run_batch_id, held[0].run_job_id, held[0].ctr0));
  StartStep(Step(2, std::move(jobs), StepKind::kSign));
  ASSERT_TRUE(host_->WaitFinished(2));
  const Result r = host_->Get(2);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.output.size(), contract::kChecksumSize);
  EXPECT_EQ(std::string(r.output.begin(), r.output.begin() + contract::kCtr0Size), held[0].ctr0);
  EXPECT_EQ(host_->count(StepEvent::kSignSent), 1u);
  EXPECT_EQ(host_->count(StepEvent::kSignRerun), 0u);
  EXPECT_TRUE(Verify(3, 3, message, r.output).ok());
  SecureBytes wrong = r.output;
  wrong.back() ^= 1;
  EXPECT_EQ(Verify(4, 4, message, wrong).code(), absl::StatusCode::kDataLoss);
}

TEST_F(SignStepTest, AnUnavailablePadRunsTheChecksumAtOnce) {
  const std::string message = "a PAC's KDC checksum input";
  std::vector<PendingJob> jobs;
  jobs.push_back(SignJob(1, message, std::string(contract::kBatchIdSize, 'x'), 0,
                         std::string(contract::kCtr0Size, '\x01')));
  StartStep(Step(1, std::move(jobs), StepKind::kSign));
  ASSERT_TRUE(host_->WaitFinished(1));
  const Result r = host_->Get(1);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.output.size(), contract::kChecksumSize);
  EXPECT_EQ(host_->count(StepEvent::kSignRerun), 1u);
  EXPECT_EQ(host_->count(StepEvent::kSignAnswersFailed), 1u);
  EXPECT_TRUE(absl::StrContains(host_->logs(), "JOB_PAD_UNAVAILABLE")) << host_->logs();
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}}));
  EXPECT_TRUE(Verify(2, 2, message, r.output).ok());
}

}  // namespace
}  // namespace kmpc::kdc::steptest
