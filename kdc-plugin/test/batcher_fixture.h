// What the dispatcher's and the planner's tests share: a sink that
// collects results, jobs, transports that forward or edit requests, and
// BatcherTest, the fixture that runs a test against the fake cluster
// (fake_cluster.h) and against the real servers' code in-process
// (real_cluster.h), so that the fake is held to the servers' behaviour.
// FakeBatcherTest runs against the fake only. A test file instantiates
// the fixtures it uses (INSTANTIATE_TEST_SUITE_P).
#ifndef KMPC_KDC_TEST_BATCHER_FIXTURE_H_
#define KMPC_KDC_TEST_BATCHER_FIXTURE_H_

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "batcher_thread.h"
#include "dispatcher.h"
#include "fake_cluster.h"
#include "gtest/gtest.h"
#include "real_cluster.h"

namespace kmpc::kdc {

using testing::FakeCluster;
using testing::RealCluster;
using testing::TestCluster;

enum class ClusterKind { kFake, kReal };

inline std::string KindName(const ::testing::TestParamInfo<ClusterKind>& info) {
  return info.param == ClusterKind::kFake ? "Fake" : "Real";
}

inline std::unique_ptr<TestCluster> MakeCluster(ClusterKind kind) {
  if (kind == ClusterKind::kFake) return std::make_unique<FakeCluster>();
  return std::make_unique<RealCluster>();
}

inline const std::string kKeyId(32, 'k');
inline const std::string kKey(32, 'K');

// Options of a batcher that a window alone flushes (no early flush).
inline BatcherOptions WindowFlushed(absl::Duration window) {
  BatcherOptions o;
  o.window = window;
  o.early_flush = false;
  return o;
}

// Options of a batcher the KDC module kicks (submitter_kicks): only
// SubmitterIdle() flushes the queue (coalesce 20 s), or the window.
inline BatcherOptions SubmitterKicked(absl::Duration window) {
  BatcherOptions o;
  o.window = window;
  o.early_flush = true;
  o.coalesce = absl::Seconds(20);
  o.submitter_kicks = true;
  return o;
}

class CollectingSink : public Sink {
 public:
  void Deliver(Result r) override {
    std::lock_guard<std::mutex> l(mu_);
    ++count_[r.token];
    at_[r.token] = absl::Now();
    results_[r.token] = std::move(r);
    cv_.notify_all();
  }
  void Log(int level, std::string line) override {
    std::lock_guard<std::mutex> l(mu_);
    logs_.push_back(std::move(line));
  }
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, absl::ToChronoMicroseconds(timeout),
                        [&] { return results_.size() >= n; });
  }
  Result Get(uint64_t token) {
    std::lock_guard<std::mutex> l(mu_);
    return results_.at(token);
  }
  absl::Time At(uint64_t token) {
    std::lock_guard<std::mutex> l(mu_);
    return at_.at(token);
  }
  std::map<uint64_t, int> counts() {
    std::lock_guard<std::mutex> l(mu_);
    return count_;
  }
  std::vector<std::string> logs() {
    std::lock_guard<std::mutex> l(mu_);
    return logs_;
  }
  // Whether one log line contains every one of `parts`.
  bool Logged(std::initializer_list<absl::string_view> parts) {
    for (const std::string& line : logs()) {
      bool all = true;
      for (absl::string_view p : parts) all = all && absl::StrContains(line, p);
      if (all) return true;
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Result> results_;
  std::map<uint64_t, int> count_;
  std::map<uint64_t, absl::Time> at_;
  std::vector<std::string> logs_;
};

inline Job Encrypt(const std::string& plaintext, uint32_t usage = 2) {
  Job j;
  j.type = kmpc::v1::JOB_ENCRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input.assign(plaintext.begin(), plaintext.end());
  return j;
}

inline Job Decrypt(const SecureBytes& ct, uint32_t usage = 2) {
  Job j;
  j.type = kmpc::v1::JOB_DECRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input = ct;
  return j;
}

inline std::string Str(const SecureBytes& b) { return std::string(b.begin(), b.end()); }

// Passes every call on to `next`; subclasses override what they change.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(Transport* next) : next_(next) {}
  void Run(int party, const kmpc::v1::RunRequest& req,
           kmpc::v1::RunResponse* resp, absl::Time deadline,
           Done done) override {
    next_->Run(party, req, resp, deadline, std::move(done));
  }
  void Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                kmpc::v1::FinalizeResponse* resp, absl::Time deadline,
                Done done) override {
    next_->Finalize(party, req, resp, deadline, std::move(done));
  }
  void Sign(int party, const kmpc::v1::SignRequest& req,
            kmpc::v1::SignResponse* resp, absl::Time deadline,
            Done done) override {
    next_->Sign(party, req, resp, deadline, std::move(done));
  }
  std::string PartyName(int party) const override {
    return next_->PartyName(party);
  }

 protected:
  Transport* next_;
};

// Each Run request edited by `edit` first (the same edit for the three
// parties): a client that sends what the module would not.
class EditingTransport : public ForwardingTransport {
 public:
  EditingTransport(Transport* next,
                   std::function<void(kmpc::v1::RunRequest*)> edit)
      : ForwardingTransport(next), edit_(std::move(edit)) {}
  void Run(int party, const kmpc::v1::RunRequest& req,
           kmpc::v1::RunResponse* resp, absl::Time deadline,
           Done done) override {
    auto copy = std::make_shared<kmpc::v1::RunRequest>(req);
    edit_(copy.get());
    next_->Run(party, *copy, resp, deadline,
               [copy, done = std::move(done)](CallStatus s) {
                 done(std::move(s));
               });
  }

 private:
  std::function<void(kmpc::v1::RunRequest*)> edit_;
};

// A transport that answers nothing until told: it keeps every Run's
// callback.
class HoldingTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void Run(int party, const kmpc::v1::RunRequest& req, kmpc::v1::RunResponse* /*resp*/,
           absl::Time /*deadline*/, Done done) override {
    std::lock_guard<std::mutex> l(mu_);
    held_.push_back(std::move(done));
    if (party != 0) return;
    std::vector<uint64_t> lengths;
    for (const auto& j : req.jobs()) lengths.push_back(j.length());
    std::sort(lengths.begin(), lengths.end());
    runs_.push_back(std::move(lengths));
  }
  // Party 0's Run requests: each one's job lengths, sorted.
  std::vector<std::vector<uint64_t>> runs() {
    std::lock_guard<std::mutex> l(mu_);
    return runs_;
  }
  size_t held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_.size();
  }
  // Calls every held callback with a failure (a transport's late answer).
  void ReleaseAll() {
    std::vector<Done> held;
    {
      std::lock_guard<std::mutex> l(mu_);
      held.swap(held_);
    }
    for (Done& d : held) d(CallStatus(absl::UnavailableError("late")));
  }

 private:
  std::mutex mu_;
  std::vector<Done> held_;
  std::vector<std::vector<uint64_t>> runs_;
};

// The cluster is made in the constructor, so the references below are
// valid in the test bodies; it outlives the batchers (declared first).
class BatcherTest : public ::testing::TestWithParam<ClusterKind> {
 protected:
  BatcherTest() : owned_(MakeCluster(GetParam())), cluster_(*owned_) {}
  void SetUp() override { cluster_.AddKey(kKeyId, kKey); }
  std::unique_ptr<Batcher> Make(BatcherOptions o) {
    return std::make_unique<Batcher>(o, &cluster_, &sink_);
  }
  // Waits until party 0 has had `n` Run calls (a batch is in flight), so a
  // test does not rely on a sleep being long enough on a loaded machine.
  void WaitRunCalls(int n) {
    for (int i = 0; i < 1000 && RunCalls() < n; ++i)
      absl::SleepFor(absl::Milliseconds(5));
    ASSERT_GE(RunCalls(), n);
  }
  // Party 0's Run calls (one per batch, or per re-run), oldest first.
  std::vector<TestCluster::Call> Runs() {
    std::vector<TestCluster::Call> out;
    for (const auto& c : cluster_.calls())
      if (c.method == "Run" && c.party == 0) out.push_back(c);
    return out;
  }
  std::vector<int> RunSizes() {
    std::vector<int> sizes;
    for (const auto& c : Runs()) sizes.push_back(c.jobs);
    return sizes;
  }
  int RunCalls() { return static_cast<int>(Runs().size()); }
  // Waits until b has no batch in flight (prepared work needs an
  // idle cluster; the batch that delivered a result may still be ending).
  void WaitIdle(Batcher* b) {
    for (int i = 0; i < 500 && b->stats().inflight != 0; ++i)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(b->stats().inflight, 0);
  }
  // Whether the cluster computes checksums over the message's shares
  // (kmpc.proto RunRequest.data_shares): the fake does; real servers of before
  // that contract do not, and tests of checksum values skip on them.
  bool ChecksumsOnShares() {
    return GetParam() == ClusterKind::kFake ||
           static_cast<RealCluster&>(cluster_).ChecksumsOnShares();
  }
  std::unique_ptr<TestCluster> owned_;
  TestCluster& cluster_;
  CollectingSink sink_;
};

class FakeBatcherTest : public BatcherTest {
 protected:
  FakeCluster& fake_ = static_cast<FakeCluster&>(cluster_);
};

inline Job Checksum(const std::string& msg, uint32_t usage = 17) {
  Job j;
  j.type = kmpc::v1::JOB_CHECKSUM;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input.assign(msg.begin(), msg.end());
  return j;
}

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_TEST_BATCHER_FIXTURE_H_
