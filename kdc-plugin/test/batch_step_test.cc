// One batch (batch_step.h) driven directly, with a recording StepHost in
// place of the dispatcher and the fake cluster as transport
// (step_fixture.h): its failures (a party down, the deadline, no fresh
// batch id) completing every job exactly once, a server's text made safe,
// and the one check every step kind makes of the servers' answers
// (CheckAnswer).
#include "batch_step.h"

#include <openssl/rand.h>

#include "absl/strings/match.h"
#include "step_fixture.h"

namespace kmpc::kdc::steptest {
namespace {

class BatchStepTest : public StepTest {};

TEST_F(BatchStepTest, APartyDownFailsEveryJobOnceAsUnavailable) {
  cluster_.set_down(2, true);
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
  jobs.push_back(Pending(2, pb::JOB_ENCRYPT, Bytes("two")));
  StartStep(Step(1, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(1));
  for (uint64_t t : {1, 2}) {
    EXPECT_EQ(host_->Get(t).status.code(), absl::StatusCode::kUnavailable);
    // The failure names the server (Transport::PartyName).
    EXPECT_TRUE(absl::StrContains(host_->Get(t).status.message(), "party 2 (fake)"))
        << host_->Get(t).status;
  }
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}, {2, 1}}));
  EXPECT_EQ(host_->finished(),
            (std::vector<std::pair<StepKind, bool>>{{StepKind::kRun, true}}));
}

TEST_F(BatchStepTest, ExpireFailsOpenJobsOnceAndNothingAfter) {
  cluster_.set_hang(0, true);
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
  auto step = Step(1, std::move(jobs));
  StartStep(step);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(host_->delivered().empty());  // still waiting for party 0
  step->Expire();
  Result r = host_->Get(1);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status.message(), "did not answer within 2000 ms"))
      << r.status;
  step->Expire();
  cluster_.set_hang(0, false);
  EXPECT_EQ(host_->delivered(), (std::map<uint64_t, int>{{1, 1}}));
}

// A server's free text reaches KDC logs and krb5 error texts only capped
// and printable: no forged log lines, no terminal escapes, no floods.
TEST(SafeDetailTest, CapsAndStripsAServersText) {
  EXPECT_EQ(SafeDetail("no such key id"), "no such key id");
  EXPECT_EQ(SafeDetail("a\nfake: log line\x1b[2J\xc3\xa9"), "a?fake: log line?[2J??");
  const std::string flood(100000, 'x');
  const std::string cut = SafeDetail(flood);
  EXPECT_EQ(cut, std::string(256, 'x') + "...");
  EXPECT_EQ(SafeDetail(""), "");
}

// OpenSSL's RAND_bytes failing (a RAND_METHOD whose bytes() fails) while
// installed; the default generator again after (RAND_set_rand_method is
// deprecated in OpenSSL 3 but still honoured by RAND_bytes).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
class FailingRandom {
 public:
  FailingRandom() {
    method_.bytes = [](unsigned char*, int) { return 0; };
    method_.status = [] { return 0; };
    EXPECT_EQ(RAND_set_rand_method(&method_), 1);
  }
  ~FailingRandom() { RAND_set_rand_method(RAND_OpenSSL()); }

 private:
  RAND_METHOD method_{};
};
#pragma GCC diagnostic pop

// Batch ids key the servers' one-use states: without a fresh one the step
// fails (INTERNAL, saying why) and sends nothing, rather than fall back
// on an id that may repeat.
TEST_F(BatchStepTest, NoFreshBatchIdFailsTheStepAndSendsNothing) {
  {
    FailingRandom fail;
    std::vector<PendingJob> jobs;
    jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
    jobs.push_back(Pending(2, pb::JOB_DECRYPT, Bytes(std::string(48, 'c'))));
    StartStep(Step(1, std::move(jobs)));
    ASSERT_TRUE(host_->WaitFinished(1));
  }
  for (uint64_t t : {1, 2}) {
    EXPECT_EQ(host_->Get(t).status.code(), absl::StatusCode::kInternal);
    EXPECT_TRUE(absl::StrContains(host_->Get(t).status.message(), "no fresh batch id"))
        << host_->Get(t).status;
  }
  EXPECT_TRUE(host_->sent().empty());
  EXPECT_TRUE(cluster_.calls().empty());
  // The generator back: a step goes out as usual.
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(3, pb::JOB_ENCRYPT, Bytes("three")));
  StartStep(Step(2, std::move(jobs)));
  ASSERT_TRUE(host_->WaitFinished(2));
  EXPECT_TRUE(host_->Get(3).status.ok()) << host_->Get(3).status;
}

// The answers' public frame, checked the same way for every step kind:
// each server answers as the party it was sent to, for this request, one
// result per item in the request's order, of this wire version.
TEST_F(BatchStepTest, EveryAnswerIsCheckedForPartyRequestCountAndOrder) {
  auto step = Step(1, {});
  google::protobuf::Arena arena;
  OnArena<pb::FinalizeResponse> resp(&arena);
  pb::FinalizeRequest req;
  req.set_batch_id("batch");
  for (uint64_t id : {4, 9}) req.add_items()->set_job_id(id);
  for (int p = 0; p < kParties; ++p) {
    resp[p].set_party(p);
    resp[p].set_batch_id("batch");
    resp[p].set_wire_version(contract::kWireVersion);
    for (uint64_t id : {4, 9}) resp[p].add_results()->set_job_id(id);
  }
  auto same = [&](const pb::FinalizeResult& r, int k) {
    return r.job_id() == req.items(k).job_id();
  };
  auto check = [&] { return CheckAnswers(*step, resp, req.batch_id(), 2, "items", same); };
  EXPECT_TRUE(check().ok()) << check();
  resp[2].set_party(1);
  EXPECT_TRUE(absl::StrContains(check().message(), "list the servers in party order")) << check();
  resp[2].set_party(2);
  resp[1].set_batch_id("other");
  EXPECT_TRUE(absl::StrContains(check().message(), "answered for another batch")) << check();
  // A Sign answer names no request: no id, no check of one.
  EXPECT_TRUE(CheckAnswers(*step, resp, "", 2, "items", same).ok());
  resp[1].set_batch_id("batch");
  resp[0].mutable_results(1)->set_job_id(4);
  EXPECT_TRUE(absl::StrContains(check().message(), "out of order")) << check();
  resp[0].mutable_results()->RemoveLast();
  EXPECT_TRUE(absl::StrContains(check().message(), "returned 1 results for 2 items")) << check();
  resp[0].add_results()->set_job_id(9);
  resp[1].set_wire_version(contract::kWireVersion + 1);
  EXPECT_EQ(check().code(), absl::StatusCode::kAborted);
  resp[1].set_wire_version(contract::kWireVersion);
  EXPECT_TRUE(check().ok()) << check();
}

}  // namespace
}  // namespace kmpc::kdc::steptest
