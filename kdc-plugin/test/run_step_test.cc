// The Run step (run_step.h) driven through a batch, with a recording
// StepHost and the fake cluster (step_fixture.h): share copies that
// disagree fail the whole step, a server's detail reaches the error only
// made safe, a gated job never goes without its gate, a ticket signed in
// the cluster names its PAD of the same Run and never goes without it.
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
  StartStep(Step(1, std::move(jobs)));
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
  StartStep(Step(1, std::move(jobs)));
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
  StartStep(Step(1, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(1));
  EXPECT_FALSE(host_->Get(1).status.ok());
  EXPECT_TRUE(host_->Get(1).output.empty());
  EXPECT_TRUE(host_->sent().empty());
  EXPECT_TRUE(cluster_.calls().empty());
}

// A ticket ENCRYPT signed in the cluster (dispatcher.cc Submit) and the
// krbtgt's signing PAD of its group: aes*-cts under the service's key.
std::vector<PendingJob> SignedTicket(bool with_pad) {
  const uint64_t group = (uint64_t{1} << 62) | 1;
  std::vector<PendingJob> jobs;
  PendingJob enc = Pending(1, pb::JOB_ENCRYPT, Bytes(std::string(120, 0)));
  enc.job.cipher = pb::CIPHER_AES256_CTS;
  enc.job.key_id = std::string(contract::kKeyIdSize, 's');
  enc.job.splice = Bytes(std::string(40, 'P') + contract::SplicePadding(40));
  enc.job.splice_offset = 60;
  enc.job.sign_key_id = kKeyId;
  enc.job.sign_cipher = pb::CIPHER_AES256;
  enc.group = group;
  jobs.push_back(std::move(enc));
  if (with_pad) {
    PendingJob pad;
    pad.prepared = pad.ticket_pad = true;
    pad.group = group;
    pad.job.type = pb::JOB_PAD;
    pad.job.cipher = pb::CIPHER_AES256;
    pad.job.key_id = kKeyId;
    pad.job.usage = contract::kTicketChecksumUsage;
    pad.job.pad_length = contract::kSpliceBytes;
    pad.blocks = JobCost(pad.job);
    pad.enqueued = absl::Now();
    jobs.push_back(std::move(pad));
  }
  return jobs;
}

// kmpc.proto Job.sign_pad: the ticket names its PAD, of the same request,
// by job id; the PAD's result is spent inside the ticket's program, so
// nothing of it is held for a later Sign item.
TEST_F(RunStepTest, ATicketSignedInTheClusterNamesItsPadOfTheSameRun) {
  StartStep(Step(1, SignedTicket(/*with_pad=*/true)));
  ASSERT_TRUE(host_->WaitFinished(1));
  const std::vector<std::string> got = cluster_.received(0);
  ASSERT_EQ(got.size(), 1u);
  pb::RunRequest req;
  ASSERT_TRUE(req.ParseFromString(got[0]));
  ASSERT_EQ(req.jobs_size(), 2);
  const pb::Job& ticket = req.jobs(0);
  const pb::Job& pad = req.jobs(1);
  EXPECT_EQ(ticket.type(), pb::JOB_ENCRYPT);
  ASSERT_TRUE(ticket.has_sign_pad());
  EXPECT_EQ(ticket.sign_pad(), pad.job_id());
  EXPECT_EQ(ticket.splice_length(), 40 + contract::SplicePadding(40).size());
  EXPECT_EQ(ticket.splice_offset(), 60u);
  EXPECT_EQ(pad.type(), pb::JOB_PAD);
  EXPECT_EQ(pad.usage(), contract::kTicketChecksumUsage);
  EXPECT_EQ(pad.length(), contract::kSpliceBytes);
  EXPECT_FALSE(pad.has_sign_pad());
  EXPECT_TRUE(host_->held().empty());
  EXPECT_EQ(host_->delivered().count(0), 0u);  // the PAD has no caller
}

// A ticket whose PAD is not in the request (a re-run of the ticket alone:
// another bug) would be malformed at the servers: the step fails closed
// and sends nothing.
TEST_F(RunStepTest, ATicketSignedInTheClusterNeverGoesWithoutItsPad) {
  StartStep(Step(1, SignedTicket(/*with_pad=*/false)));
  ASSERT_TRUE(host_->WaitFinished(1));
  EXPECT_FALSE(host_->Get(1).status.ok());
  EXPECT_TRUE(host_->Get(1).output.empty());
  EXPECT_TRUE(host_->sent().empty());
  EXPECT_TRUE(cluster_.calls().empty());
}

}  // namespace
}  // namespace kmpc::kdc::steptest
