// What the step tests share (batch_step_test, start_step_test, run_step_test,
// finalize_step_test, sign_step_test): a recording StepHost in place of
// the dispatcher, with the fake cluster as transport, and jobs to give it.
#ifndef KMPC_KDC_PLUGIN_TEST_STEP_FIXTURE_H_
#define KMPC_KDC_PLUGIN_TEST_STEP_FIXTURE_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "batch_step.h"
#include "start_step.h"
#include "contract.h"
#include "gate_book.h"
#include "fake_cluster.h"
#include "gtest/gtest.h"

namespace kmpc::kdc::steptest {

namespace pb = ::kmpc::v1;
using ::kmpc::kdc::testing::FakeCluster;

inline const std::string kKeyId(contract::kKeyIdSize, 'k');
inline const std::string kKey(32, 'K');

class RecordingHost : public StepHost {
 public:
  explicit RecordingHost(Transport* t) : transport_(t), gates_(options_) {
    options_.deadline = absl::Milliseconds(2000);
  }
  const BatcherOptions& options() const override { return options_; }
  Transport* transport() const override { return transport_; }
  GateBook& gates() const override { return gates_; }
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
  void HoldKeystreams(std::vector<HeldKeystream> k) override {
    std::lock_guard<std::mutex> l(mu_);
    for (HeldKeystream& h : k) held_.push_back(std::move(h));
  }
  void KeepChained(ChainedSignature) override {}
  void PreparedLost(const std::vector<std::pair<uint64_t, int>>&, bool) override {}
  void Release(std::vector<PendingJob>) override {}
  // The requests sent, as (the step kind that sends them, items).
  void Count(StepEvent e, size_t n) override {
    std::lock_guard<std::mutex> l(mu_);
    counts_[e] += n;
    if (e == StepEvent::kRunSent) sent_.emplace_back(StepKind::kRun, n);
    if (e == StepEvent::kFinalizeSent) sent_.emplace_back(StepKind::kFinalizeOnly, n);
    if (e == StepEvent::kSignSent) sent_.emplace_back(StepKind::kSign, n);
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
  size_t count(StepEvent e) {
    std::lock_guard<std::mutex> l(mu_);
    return counts_[e];
  }
  std::vector<HeldKeystream> held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_;
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
  mutable GateBook gates_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Result> results_;
  std::map<uint64_t, int> delivered_;
  std::vector<std::pair<StepKind, size_t>> sent_;
  std::vector<std::pair<StepKind, bool>> finished_;
  std::vector<std::string> logs_;
  std::map<StepEvent, size_t> counts_;
  std::vector<HeldKeystream> held_;
};

inline PendingJob Pending(uint64_t token, pb::JobType type, SecureBytes input) {
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

inline SecureBytes Bytes(const std::string& s) { return SecureBytes(s.begin(), s.end()); }

class StepTest : public ::testing::Test {
 protected:
  StepTest() : host_(std::make_shared<RecordingHost>(&cluster_)) {
    cluster_.AddKey(kKeyId, kKey);
  }
  std::shared_ptr<BatchStep> Step(uint64_t seq, std::vector<PendingJob> jobs,
                                  StepKind kind = StepKind::kRun) {
    return std::make_shared<BatchStep>(host_, seq, std::move(jobs), absl::Now(), kind);
  }
  FakeCluster cluster_;
  std::shared_ptr<RecordingHost> host_;
};

}  // namespace kmpc::kdc::steptest

#endif  // KMPC_KDC_PLUGIN_TEST_STEP_FIXTURE_H_
