// One batch step (batch_step.h) driven directly, with a recording
// StepHost in place of the dispatcher and the fake cluster as transport:
// a Run then Finalize for an ENCRYPT, a DECRYPT of what it made, the
// requests it says it sends, and its failures (a party down, a share copy
// that disagrees, the deadline) completing every job exactly once.
#include "batch_step.h"

#include <openssl/rand.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "contract.h"
#include "fake_cluster.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;
using testing::FakeCluster;

const std::string kKeyId(contract::kKeyIdSize, 'k');
const std::string kKey(32, 'K');

class RecordingHost : public StepHost {
 public:
  explicit RecordingHost(Transport* t) : transport_(t) {
    options_.deadline = absl::Milliseconds(2000);
  }
  const BatcherOptions& options() const override { return options_; }
  Transport* transport() const override { return transport_; }
  void Deliver(Result r) override {
    std::lock_guard<std::mutex> l(mu_);
    ++delivered_[r.token];
    results_[r.token] = std::move(r);
    cv_.notify_all();
  }
  void Log(int, std::string line) override {
    std::lock_guard<std::mutex> l(mu_);
    logs_.push_back(std::move(line));
  }
  void HoldKeystreams(std::vector<HeldKeystream>) override {}
  void KeepChained(ChainedSignature) override {}
  void FinalizeOnlyRerun(size_t) override {}
  void PadsWasted(size_t) override {}
  void GateVerified(uint64_t) override {}
  void GateFailed(uint64_t, const absl::Status&) override {}
  void PreparedLost(const std::vector<std::pair<uint64_t, int>>&) override {}
  void SignRerun(size_t) override {}
  void SignAnswersFailed(size_t) override {}
  void VerifyDisagreed() override {}
  void DeviationDetected() override {}
  void BreakerSeen(bool) override {}
  void Sending(StepKind what, size_t items) override {
    std::lock_guard<std::mutex> l(mu_);
    sent_.emplace_back(what, items);
  }
  void StepFinished(const std::shared_ptr<BatchStep>&, StepKind kind, uint64_t,
                    bool failed) override {
    std::lock_guard<std::mutex> l(mu_);
    finished_.emplace_back(kind, failed);
    cv_.notify_all();
  }

  // Waits until `n` steps finished; false after 10 s.
  bool WaitFinished(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(10),
                        [&] { return finished_.size() >= n; });
  }
  Result Get(uint64_t token) {
    std::lock_guard<std::mutex> l(mu_);
    return results_.at(token);
  }
  std::map<uint64_t, int> delivered() {
    std::lock_guard<std::mutex> l(mu_);
    return delivered_;
  }
  std::vector<std::pair<StepKind, size_t>> sent() {
    std::lock_guard<std::mutex> l(mu_);
    return sent_;
  }
  std::vector<std::pair<StepKind, bool>> finished() {
    std::lock_guard<std::mutex> l(mu_);
    return finished_;
  }
  std::string logs() {
    std::lock_guard<std::mutex> l(mu_);
    std::string all;
    for (const auto& s : logs_) all += s + "\n";
    return all;
  }

 private:
  BatcherOptions options_;
  Transport* transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Result> results_;
  std::map<uint64_t, int> delivered_;
  std::vector<std::pair<StepKind, size_t>> sent_;
  std::vector<std::pair<StepKind, bool>> finished_;
  std::vector<std::string> logs_;
};

PendingJob Pending(uint64_t token, pb::JobType type, SecureBytes input) {
  PendingJob p;
  p.token = token;
  p.job.type = type;
  p.job.cipher = pb::CIPHER_AES256;
  p.job.key_id = kKeyId;
  p.job.usage = 2;
  p.job.input = std::move(input);
  p.blocks = JobCost(p.job);
  p.enqueued = absl::Now();
  return p;
}

SecureBytes Bytes(const std::string& s) { return SecureBytes(s.begin(), s.end()); }

class BatchStepTest : public ::testing::Test {
 protected:
  BatchStepTest() : host_(std::make_shared<RecordingHost>(&cluster_)) {
    cluster_.AddKey(kKeyId, kKey);
  }
  std::shared_ptr<BatchStep> Step(uint64_t seq, std::vector<PendingJob> jobs) {
    return std::make_shared<BatchStep>(host_, seq, std::move(jobs), absl::Now(),
                                       StepKind::kRun);
  }
  FakeCluster cluster_;
  std::shared_ptr<RecordingHost> host_;
};

TEST_F(BatchStepTest, EncryptIsARunThenAFinalizeAndDecryptGivesThePlaintextBack) {
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

TEST_F(BatchStepTest, APartyDownFailsEveryJobOnceAsUnavailable) {
  cluster_.set_down(2, true);
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
  jobs.push_back(Pending(2, pb::JOB_ENCRYPT, Bytes("two")));
  Step(1, std::move(jobs))->Start();
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

TEST_F(BatchStepTest, ShareCopiesThatDisagreeFailTheWholeStep) {
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

TEST_F(BatchStepTest, ExpireFailsOpenJobsOnceAndNothingAfter) {
  cluster_.set_hang(0, true);
  std::vector<PendingJob> jobs;
  jobs.push_back(Pending(1, pb::JOB_ENCRYPT, Bytes("one")));
  auto step = Step(1, std::move(jobs));
  step->Start();
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

TEST_F(BatchStepTest, AServersDetailReachesTheErrorOnlyMadeSafe) {
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
    Step(1, std::move(jobs))->Start();
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
  Step(2, std::move(jobs))->Start();
  ASSERT_TRUE(host_->WaitFinished(2));
  EXPECT_TRUE(host_->Get(3).status.ok()) << host_->Get(3).status;
}

// Review hardening (batch_step.cc BuildRunRequest): a planned job gated on
// its exchange's gate DECRYPT (PendingJob::gated) went out with no
// release_if_ok when the gate was not in the same request, i.e. ungated:
// its keystream released whether or not the gate would verify. The
// dispatcher never cuts a group today, so this needs another bug to
// happen; fail closed: such a step fails and sends nothing.
TEST_F(BatchStepTest, AGatedJobWithoutItsGateInTheRequestIsNeverSent) {
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
}  // namespace kmpc::kdc
