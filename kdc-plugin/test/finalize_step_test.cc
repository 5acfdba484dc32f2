// The Finalize step (finalize_step.h) driven through a batch, with a
// recording StepHost and the fake cluster (step_fixture.h): an ENCRYPT is
// a Run then a Finalize, and a finalize_only job whose ENCRYPT state the
// servers do not hold is encrypted again in a Run.
#include "finalize_step.h"

#include "absl/strings/match.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class FinalizeStepTest : public StepTest {};

TEST_F(FinalizeStepTest, EncryptIsARunThenAFinalizeAndDecryptGivesThePlaintextBack) {
  const std::string plaintext = "an EncTicketPart, 43 bytes long, say so....";
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes(plaintext)));
  Step(1, std::move(jobs))->Start();
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
  Step(2, std::move(dec))->Start();
  ASSERT_TRUE(host_->WaitFinished(2));
  Result ok = host_->Get(2);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(std::string(ok.output.begin(), ok.output.end()), plaintext);
  // The tampered one fails alone, as an integrity error.
  EXPECT_EQ(host_->Get(3).status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}, {2, 1}, {3, 1}}));
}

TEST_F(FinalizeStepTest, AFinalizeOnlyJobTheServersCannotFinalizeIsRunAgain) {
  const std::string plaintext = "an EncKDCRepPart";
  PendingJob q = Pending(1, pb::JOB_ENCRYPT, Bytes(plaintext));
  q.finalize_only = true;
  q.run_batch_id = std::string(contract::kBatchIdSize, 'x');  // no such state
  q.run_job_id = 0;
  q.output.assign(contract::kCtr0Size + plaintext.size(), 0);
  std::vector<PendingJob> jobs;
  jobs.push_back(std::move(q));
  Step(1, std::move(jobs))->Start();
  ASSERT_TRUE(host_->WaitFinished(1));
  const Result r = host_->Get(1);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.output.size(), contract::kCiphertextOverhead + plaintext.size());
  EXPECT_EQ(host_->count(StepEvent::kFinalizeOnlyRerun), 1u);
  EXPECT_EQ(host_->sent(), (std::vector<std::pair<StepKind, size_t>>{
                               {StepKind::kFinalizeOnly, 1}, {StepKind::kRun, 1},
                               {StepKind::kFinalizeOnly, 1}}));
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}}));
  // It decrypts as any ciphertext.
  std::vector<PendingJob> dec;
  dec.push_back(Pending(2, pb::JOB_DECRYPT, r.output));
  Step(2, std::move(dec))->Start();
  ASSERT_TRUE(host_->WaitFinished(2));
  const Result d = host_->Get(2);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(std::string(d.output.begin(), d.output.end()), plaintext);
}

}  // namespace
}  // namespace kmpc::kdc::steptest
