// The Finalize step (finalize_step.h) driven through a batch, with a
// recording StepHost and the fake cluster (step_fixture.h): an ENCRYPT is
// a Run then a Finalize, and a finalize_only job whose ENCRYPT state the
// servers do not hold goes to the step's RerunJobs.
#include "finalize_step.h"

#include <mutex>

#include "absl/strings/match.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class FinalizeStepTest : public StepTest {};

TEST_F(FinalizeStepTest, EncryptIsARunThenAFinalizeAndDecryptGivesThePlaintextBack) {
  const std::string plaintext = "an EncTicketPart, 43 bytes long, say so....";
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes(plaintext)));
  StartStep(Step(1, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(1));
  Result enc = host_->Get(1);
  ASSERT_TRUE(enc.status.ok()) << enc.status;
  EXPECT_EQ(enc.output.size(), contract::kCiphertextOverhead + plaintext.size());
  EXPECT_EQ(host_->sent(), (std::vector<std::pair<StepKind, size_t>>{
                               {StepKind::kRun, 1}, {StepKind::kFinalizeOnly, 1}}));
  EXPECT_EQ(host_->finished(),
            (std::vector<std::pair<StepKind, bool>>{{StepKind::kRun, false}}));

  std::vector<PendingJob> dec;
  dec.push_back(Pending(2, pb::JOB_DECRYPT, enc.output));
  SecureBytes tampered = enc.output;
  tampered[contract::kCtr0Size] ^= 1;  // a bit of C
  dec.push_back(Pending(3, pb::JOB_DECRYPT, tampered));
  StartStep(Step(2, std::move(dec)));
  ASSERT_TRUE(host_->WaitFinished(2));
  Result ok = host_->Get(2);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(std::string(ok.output.begin(), ok.output.end()), plaintext);
  // The tampered one fails alone, as an integrity error.
  EXPECT_EQ(host_->Get(3).status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}, {2, 1}, {3, 1}}));
}

// What a finalize_only step's servers cannot finalize (no such ENCRYPT
// state) goes, cleared of its keystream, to the RerunJobs the step was made
// with (start_step.cc: RunStep::Start; start_step_test.cc runs it there),
// once, counted and logged; nothing is delivered for it by this step.
std::mutex rerun_mu;
std::vector<std::vector<size_t>> reruns;

void RecordRerun(std::shared_ptr<BatchStep>, std::vector<size_t> idx) {
  std::lock_guard<std::mutex> l(rerun_mu);
  reruns.push_back(std::move(idx));
}

TEST_F(FinalizeStepTest, AFinalizeOnlyStepHandsWhatTheServersForgotToItsRerun) {
  const std::string plaintext = "an EncKDCRepPart";
  PendingJob q = Pending(1, pb::JOB_ENCRYPT, Bytes(plaintext));
  q.finalize_only = true;
  q.run_batch_id = std::string(contract::kBatchIdSize, 'x');  // no such state
  q.run_job_id = 0;
  q.output.assign(contract::kCtr0Size + plaintext.size(), 0);
  std::vector<PendingJob> jobs;
  jobs.push_back(std::move(q));
  auto step = Step(1, std::move(jobs));
  auto fin = std::make_shared<FinalizeStep>(step, &RecordRerun);
  fin->Add(0, step->job(0).run_batch_id, 0, step->job(0).output.data() + contract::kCtr0Size,
           plaintext.size());
  FinalizeStep::Start(fin);
  fin.reset();
  auto recorded = [] {
    std::lock_guard<std::mutex> l(rerun_mu);
    return reruns;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (recorded().empty() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(recorded(), (std::vector<std::vector<size_t>>{{0}}));
  EXPECT_EQ(host_->count(StepEvent::kFinalizeOnlyRerun), 1u);
  EXPECT_TRUE(absl::StrContains(host_->logs(), "re-running them")) << host_->logs();
  EXPECT_FALSE(step->job(0).finalize_only);
  EXPECT_TRUE(step->job(0).output.empty());
  EXPECT_EQ(host_->sent(), (std::vector<std::pair<StepKind, size_t>>{
                               {StepKind::kFinalizeOnly, 1}}));
  EXPECT_TRUE(host_->delivered().empty());
  step->Expire();  // what the recording rerun left open
  ASSERT_TRUE(host_->WaitFinished(1));
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}}));
}

}  // namespace
}  // namespace kmpc::kdc::steptest
