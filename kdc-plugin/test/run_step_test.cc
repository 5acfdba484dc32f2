// The Run step (run_step.h) driven through a batch, with a recording
// StepHost and the fake cluster (step_fixture.h): share copies that
// disagree fail the whole step, a server's detail reaches the error only
// made safe, a gated job never goes without its gate.
#include "run_step.h"

#include "absl/strings/match.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class RunStepTest : public StepTest {};

TEST_F(RunStepTest, ShareCopiesThatDisagreeFailTheWholeStep) {
  cluster_.set_corrupt(1, true);
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
  jobs.push_back(Pending(2, pb::JOB_ENCRYPT, Bytes("two")));
  Step(1, std::move(jobs))->Start();
  ASSERT_TRUE(host_->WaitFinished(1));
  for (uint64_t t : {1, 2})
    EXPECT_EQ(host_->Get(t).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}, {2, 1}}));
  EXPECT_FALSE(host_->logs().empty());  // the rejected step is logged
}

TEST_F(RunStepTest, AServersDetailReachesTheErrorOnlyMadeSafe) {
  cluster_.set_failure_detail("line one\nkdcmpc: forged line" + std::string(5000, '!'));
  std::vector<PendingJob> jobs;
  PendingJob unknown = Pending(1, pb::JOB_ENCRYPT, Bytes("one"));
  unknown.job.key_id = std::string(contract::kKeyIdSize, 'u');  // not dealt
  jobs.push_back(std::move(unknown));
  Step(1, std::move(jobs))->Start();
  ASSERT_TRUE(host_->WaitFinished(1));
  const Result r = host_->Get(1);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
  const absl::string_view m = r.status.message();
  EXPECT_TRUE(absl::StrContains(m, "holds no shares for this key id")) << m;
  EXPECT_TRUE(absl::StrContains(m, "line one?kdcmpc: forged line")) << m;
  EXPECT_EQ(m.find('\n'), absl::string_view::npos) << m;
  EXPECT_LT(m.size(), 400u) << m.size();
}

// Review hardening (run_step.cc Build): a planned job gated on
// its exchange's gate DECRYPT (PendingJob::gated) went out with no
// release_if_ok when the gate was not in the same request, i.e. ungated:
// its keystream released whether or not the gate would verify. The
// dispatcher never cuts a group today, so this needs another bug to
// happen; fail closed: such a step fails and sends nothing.
TEST_F(RunStepTest, AGatedJobWithoutItsGateInTheRequestIsNeverSent) {
  std::vector<PendingJob> jobs;
  PendingJob enc = Pending(1, pb::JOB_ENCRYPT, Bytes("an EncTicketPart"));
  enc.group = (uint64_t{1} << 63) | 7;
  enc.exchange_id = 7;
  enc.gated = true;
  jobs.push_back(std::move(enc));
  Step(1, std::move(jobs))->Start();
  ASSERT_TRUE(host_->WaitFinished(1));
  EXPECT_FALSE(host_->Get(1).status.ok());
  EXPECT_TRUE(host_->Get(1).output.empty());
  EXPECT_TRUE(host_->sent().empty());
  EXPECT_TRUE(cluster_.calls().empty());
}

}  // namespace
}  // namespace kmpc::kdc::steptest
