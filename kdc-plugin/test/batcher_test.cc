// The batcher against a cluster: the window, the size limits, early flush,
// speculation, per-job failures, deadlines, share-copy checks and
// exactly-once completion. BatcherTest and SpeculationTest run every test
// twice: against the fake cluster (fake_cluster.h) and against the real
// servers' code in-process (real_cluster.h), so the fake is held to the
// servers' behaviour. FakeBatcherTest runs against the fake only: each of
// its tests says which fault the real servers cannot be made to show.
#include "batcher.h"

#include <syslog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fake_cluster.h"
#include "gtest/gtest.h"
#include "kdc_metrics.h"
#include "options.h"
#include "real_cluster.h"
#include "router.h"

namespace kmpc::kdc {
namespace {

using testing::FakeCluster;
using testing::RealCluster;
using testing::TestCluster;

enum class ClusterKind { kFake, kReal };

std::string KindName(const ::testing::TestParamInfo<ClusterKind>& info) {
  return info.param == ClusterKind::kFake ? "Fake" : "Real";
}

std::unique_ptr<TestCluster> MakeCluster(ClusterKind kind) {
  if (kind == ClusterKind::kFake) return std::make_unique<FakeCluster>();
  return std::make_unique<RealCluster>();
}

const std::string kKeyId(32, 'k');
const std::string kKey(32, 'K');

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

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Result> results_;
  std::map<uint64_t, int> count_;
  std::map<uint64_t, absl::Time> at_;
  std::vector<std::string> logs_;
};

Job Encrypt(const std::string& plaintext, uint32_t usage = 2) {
  Job j;
  j.type = kmpc::v1::JOB_ENCRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input.assign(plaintext.begin(), plaintext.end());
  return j;
}

Job Decrypt(const SecureBytes& ct, uint32_t usage = 2) {
  Job j;
  j.type = kmpc::v1::JOB_DECRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input = ct;
  return j;
}

std::string Str(const SecureBytes& b) { return std::string(b.begin(), b.end()); }

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
  // Whether the cluster computes checksums over the message's shares
  // (kmpc.proto Job.data_shares): the fake does; real servers of before
  // that contract do not, and tests of checksum values skip on them.
  bool ChecksumsOnShares() {
    return GetParam() == ClusterKind::kFake ||
           static_cast<RealCluster&>(cluster_).ChecksumsOnShares();
  }
  std::unique_ptr<TestCluster> owned_;
  TestCluster& cluster_;
  CollectingSink sink_;
};
INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest,
                         ::testing::Values(ClusterKind::kFake,
                                           ClusterKind::kReal),
                         KindName);

class FakeBatcherTest : public BatcherTest {
 protected:
  FakeCluster& fake_ = static_cast<FakeCluster&>(cluster_);
};
INSTANTIATE_TEST_SUITE_P(Cluster, FakeBatcherTest,
                         ::testing::Values(ClusterKind::kFake), KindName);

TEST_P(BatcherTest, EncryptDecryptChecksumVerifyRoundTrip) {
  if (!ChecksumsOnShares())
    GTEST_SKIP() << "these servers do not compute checksums over data_shares";
  BatcherOptions o;
  o.window = absl::Milliseconds(10);
  o.early_flush = false;  // flushed by the window
  auto b = Make(o);
  const std::string pt = "an EncTicketPart of some 150 bytes, give or take";
  ASSERT_TRUE(b->Submit(1, Encrypt(pt)).ok());
  Job ck;
  ck.type = kmpc::v1::JOB_CHECKSUM;
  ck.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  ck.key_id = kKeyId;
  ck.usage = 56;
  ck.input.assign(pt.begin(), pt.end());
  ASSERT_TRUE(b->Submit(2, std::move(ck)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  Result enc = sink_.Get(1);
  ASSERT_TRUE(enc.status.ok()) << enc.status;
  ASSERT_EQ(enc.output.size(), pt.size() + 32);
  // ctr0 || C || T with C = P ^ KS and the cluster's tag over C.
  std::string out = Str(enc.output);
  std::string ctr0 = out.substr(0, 16), c = out.substr(16, pt.size());
  std::string ks = cluster_.Keystream(kKey, ctr0, pt.size());
  for (size_t i = 0; i < pt.size(); ++i) EXPECT_EQ(c[i] ^ ks[i], pt[i]);
  EXPECT_EQ(out.substr(16 + pt.size()), cluster_.Tag(kKey, 2, ctr0, c, false));

  ASSERT_TRUE(b->Submit(3, Decrypt(enc.output)).ok());
  SecureBytes bad = enc.output;
  bad[20] ^= 1;
  ASSERT_TRUE(b->Submit(4, Decrypt(bad)).ok());
  Result ckr = sink_.Get(2);
  ASSERT_TRUE(ckr.status.ok());
  ASSERT_EQ(ckr.output.size(), 32u);
  // The tag is over the message the shares reconstruct: ctr0 || tag.
  const std::string sum = Str(ckr.output);
  EXPECT_EQ(sum.substr(16), cluster_.Tag(kKey, 56, sum.substr(0, 16), pt, true));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  v.key_id = kKeyId;
  v.usage = 56;
  v.input.assign(pt.begin(), pt.end());
  v.checksum = Str(ckr.output);
  Job v2 = v;
  v2.checksum[31] ^= 1;
  ASSERT_TRUE(b->Submit(5, std::move(v)).ok());
  ASSERT_TRUE(b->Submit(6, std::move(v2)).ok());
  ASSERT_TRUE(sink_.WaitFor(6));
  EXPECT_EQ(Str(sink_.Get(3).output), pt);
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(4).status)) << sink_.Get(4).status;
  EXPECT_TRUE(sink_.Get(4).output.empty());
  EXPECT_TRUE(sink_.Get(5).status.ok());
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(6).status));
}

Job Checksum(const std::string& msg, uint32_t usage = 17) {
  Job j;
  j.type = kmpc::v1::JOB_CHECKSUM;
  j.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  j.key_id = kKeyId;
  j.usage = usage;
  j.input.assign(msg.begin(), msg.end());
  return j;
}

// enctype.md invariant 5: a checksum's message (a ticket signature covers
// the EncTicketPart, session key included) reaches each server only as
// its two of three shares, dealt afresh for every job; the parties'
// requests differ in those shares only, and no party's request holds the
// message. The tags are still right (the fake reconstructs the message
// from two parties' shares).
TEST_P(FakeBatcherTest, ChecksumMessageReachesEachPartyOnlyAsShares) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // both jobs in one batch
  auto b = Make(o);
  const std::string msg =
      "EncTicketPart: session key 0123456789abcdef0123456789abcdef, PAC";
  ASSERT_TRUE(b->Submit(1, Checksum(msg)).ok());
  ASSERT_TRUE(b->Submit(2, Checksum(msg)).ok());  // the same message again
  ASSERT_TRUE(sink_.WaitFor(2));
  const std::string sum = Str(sink_.Get(1).output);
  ASSERT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_EQ(sum.substr(16), fake_.Tag(kKey, 17, sum.substr(0, 16), msg, true));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;
  v.key_id = kKeyId;
  v.usage = 17;
  v.input.assign(msg.begin(), msg.end());
  v.checksum = sum;
  ASSERT_TRUE(b->Submit(3, std::move(v)).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;

  std::array<std::vector<kmpc::v1::RunRequest>, 3> got;
  for (int p = 0; p < 3; ++p) {
    for (const std::string& raw : fake_.received(p)) {
      EXPECT_EQ(raw.find(msg.substr(0, 12)), std::string::npos) << p;
      EXPECT_EQ(raw.find("0123456789abcdef"), std::string::npos) << p;
      got[p].emplace_back();
      ASSERT_TRUE(got[p].back().ParseFromString(raw));
    }
    ASSERT_EQ(got[p].size(), 2u) << p;  // two batches
  }
  int jobs = 0;
  std::set<std::string> seen;  // every share of every job differs
  for (size_t r = 0; r < 2; ++r) {
    // The same batch and jobs for the three parties, but their own shares.
    for (int p = 1; p < 3; ++p) {
      ASSERT_EQ(got[p][r].batch_id(), got[0][r].batch_id());
      ASSERT_EQ(got[p][r].jobs_size(), got[0][r].jobs_size());
    }
    for (int k = 0; k < got[0][r].jobs_size(); ++k) {
      ++jobs;
      std::array<const kmpc::v1::SharePair*, 3> s;
      for (int p = 0; p < 3; ++p) {
        const kmpc::v1::Job& j = got[p][r].jobs(k);
        EXPECT_TRUE(j.data().empty());
        EXPECT_EQ(j.length(), msg.size());
        s[p] = &j.data_shares();
        ASSERT_EQ(s[p]->first().size(), msg.size());
        ASSERT_EQ(s[p]->second().size(), msg.size());
        EXPECT_NE(s[p]->first(), msg);
        EXPECT_NE(s[p]->second(), msg);
        // Party p holds (s_p, s_{p+1}): consistent with its neighbour's.
        EXPECT_TRUE(seen.insert(s[p]->first()).second) << r << " " << k;
        kmpc::v1::Job a = j, z = got[0][r].jobs(k);
        a.clear_data_shares();
        z.clear_data_shares();
        EXPECT_EQ(a.SerializeAsString(), z.SerializeAsString());
      }
      std::string d = s[0]->first();
      for (int p = 0; p < 3; ++p) {
        EXPECT_EQ(s[p]->second(), s[(p + 1) % 3]->first());
        if (p > 0)
          for (size_t i = 0; i < d.size(); ++i) d[i] ^= s[p]->first()[i];
      }
      EXPECT_EQ(d, msg);
    }
  }
  EXPECT_EQ(jobs, 3);
}

// Self-clocked batches by default: a lone job goes at once on an idle
// cluster, not after the window.
TEST_P(BatcherTest, LoneJobDoesNotWaitForTheWindowByDefault) {
  BatcherOptions o;
  EXPECT_TRUE(o.early_flush);
  o.window = absl::Seconds(30);  // would be unmistakable
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("a lone ticket")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_LT(sink_.At(1) - t0, absl::Seconds(5));
  EXPECT_EQ(RunCalls(), 1);
}

TEST_P(BatcherTest, MalformedJobsAreRefusedAtSubmit) {
  auto b = Make({});
  Job j = Encrypt("x");
  j.key_id = "short";
  EXPECT_TRUE(absl::IsInvalidArgument(b->Submit(1, std::move(j))));
  SecureBytes tiny(31, 1);
  EXPECT_TRUE(absl::IsDataLoss(b->Submit(2, Decrypt(tiny))));
  SecureBytes zero_ctr(48, 0);  // ctr0 == 0 touches the all-zero block
  EXPECT_TRUE(absl::IsDataLoss(b->Submit(3, Decrypt(zero_ctr))));
  SecureBytes wrap(48, 0xff);  // ctr0 + 1 wraps past 2^128 - 1
  EXPECT_TRUE(absl::IsDataLoss(b->Submit(4, Decrypt(wrap))));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  v.key_id = kKeyId;
  v.checksum = std::string(31, 'c');
  EXPECT_TRUE(absl::IsDataLoss(b->Submit(5, std::move(v))));
  b->Stop();
  EXPECT_TRUE(sink_.counts().empty());
}

// A job that breaks the contract fails alone at the servers: the module
// never sends one (Submit refuses it, above), so the request is edited on
// its way (a key id of 31 bytes). The servers answer JOB_MALFORMED for it
// (kInvalidArgument here); the other jobs of the batch succeed.
TEST_P(BatcherTest, MalformedJobFailsAloneAtTheServers) {
  const std::string marked(32, 'm');
  cluster_.AddKey(marked, std::string(32, 'M'));
  EditingTransport edited(&cluster_, [&](kmpc::v1::RunRequest* r) {
    for (auto& j : *r->mutable_jobs())
      if (j.key_id() == marked) j.set_key_id(marked.substr(0, 31));
  });
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // flushed by the window
  Batcher b(o, &edited, &sink_);
  Job bad = Encrypt("x");
  bad.key_id = marked;
  const std::string pt = "the other job";
  ASSERT_TRUE(b.Submit(1, std::move(bad)).ok());
  ASSERT_TRUE(b.Submit(2, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  const Result r1 = sink_.Get(1);
  EXPECT_TRUE(absl::IsInvalidArgument(r1.status)) << r1.status;
  EXPECT_TRUE(absl::StrContains(r1.status.message(), "key id")) << r1.status;
  EXPECT_TRUE(r1.output.empty());
  const Result r2 = sink_.Get(2);
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  const std::string out = Str(r2.output);
  ASSERT_EQ(out.size(), pt.size() + 32);
  const std::string ctr0 = out.substr(0, 16), c = out.substr(16, pt.size());
  const std::string ks = cluster_.Keystream(kKey, ctr0, pt.size());
  for (size_t i = 0; i < pt.size(); ++i) EXPECT_EQ(c[i] ^ ks[i], pt[i]);
  EXPECT_EQ(out.substr(16 + pt.size()), cluster_.Tag(kKey, 2, ctr0, c, false));
  EXPECT_EQ(RunCalls(), 1);  // one batch, no re-run
}

TEST_P(BatcherTest, WindowCollectsJobsIntoOneBatch) {
  BatcherOptions o;
  o.window = absl::Milliseconds(400);
  o.early_flush = false;  // flushed by the window
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(b->Submit(i, Encrypt("ticket")).ok());
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(sink_.WaitFor(5));
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(sink_.Get(i).status.ok());
    EXPECT_GE(sink_.At(i) - t0, absl::Milliseconds(395));
  }
  auto calls = cluster_.calls();
  ASSERT_EQ(RunCalls(), 1);
  EXPECT_EQ(calls[0].jobs, 5);
  // The window runs from the oldest job: flushed once, at ~400 ms.
  EXPECT_GE(calls[0].at - t0, absl::Milliseconds(395));
  EXPECT_LT(calls[0].at - t0, absl::Seconds(2));
  // Finalize is batched too: one call per server.
  int fin = 0;
  for (const auto& c : calls)
    if (c.method == "Finalize") {
      ++fin;
      EXPECT_EQ(c.jobs, 5);
    }
  EXPECT_EQ(fin, 3);
  EXPECT_EQ(b->stats().batches, 1u);
  EXPECT_EQ(b->stats().jobs, 5u);
}

TEST_P(BatcherTest, SizeLimitFlushesAtOnce) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = false;  // flushed by the window
  o.max_jobs = 4;
  o.backlog_jobs = 4;  // no bigger batches for a backlog (next test)
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(8, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  auto calls = cluster_.calls();
  EXPECT_EQ(calls[0].jobs, 4);
  // The ninth job waits for the window (30 s): not done yet.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink_.counts().size(), 8u);
  b->Stop();
  EXPECT_EQ(sink_.counts().size(), 8u);
}

// Jobs that piled up while a batch ran go out together, up to the backlog
// caps, not in batches of max_jobs; what is left below max_jobs waits for
// the window as usual.
TEST_P(BatcherTest, BacklogGoesOutInOneBiggerBatch) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = false;  // flushed by the window
  o.max_jobs = 4;
  o.backlog_jobs = 10;
  o.max_inflight = 1;
  cluster_.set_latency(absl::Milliseconds(150));
  auto b = Make(o);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("t")).ok());
  WaitRunCalls(1);  // batch 1 is in flight (150 ms)
  for (int i = 4; i < 22; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(22, absl::Seconds(5)));
  // 4; then 10 of the 18 that waited (the cap); then the other 8 at once
  // (still >= max_jobs): not in batches of 4, and nothing waits for 30 s.
  ASSERT_EQ(RunSizes(), (std::vector<int>{4, 10, 8}));
  for (int i = 0; i < 22; ++i) EXPECT_TRUE(sink_.Get(i).status.ok()) << i;
  // One batch at a time: each Run starts after the previous one's answer.
  const auto runs = Runs();
  for (size_t k = 1; k < runs.size(); ++k)
    EXPECT_GE(runs[k].at - runs[k - 1].at, absl::Milliseconds(145)) << k;
}

TEST_P(BatcherTest, BacklogBatchIsCappedByBlocks) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = false;  // flushed by the window
  o.max_jobs = 100;
  o.max_blocks = 4;      // each job: 1 keystream block + 1 = 2 blocks
  o.backlog_blocks = 6;
  o.max_inflight = 1;
  cluster_.set_latency(absl::Milliseconds(100));
  auto b = Make(o);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("t")).ok());
  WaitRunCalls(1);
  for (int i = 2; i < 9; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(8, absl::Seconds(5)));
  const std::vector<int> sizes = RunSizes();
  ASSERT_GE(sizes.size(), 3u);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 3);  // 6 blocks
  EXPECT_EQ(sizes[2], 3);
}

TEST_P(BatcherTest, BlockLimitFlushesAtOnce) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = false;  // flushed by the window
  o.max_blocks = 20;  // each job: 8 keystream blocks + 1
  o.backlog_blocks = 20;
  auto b = Make(o);
  ASSERT_TRUE(b->Submit(1, Encrypt(std::string(128, 'a'))).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt(std::string(128, 'b'))).ok());
  ASSERT_TRUE(b->Submit(3, Encrypt(std::string(128, 'c'))).ok());
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_EQ(cluster_.calls()[0].jobs, 2);
}

TEST_P(BatcherTest, EarlyFlushWhenIdleThenBatchesUnderLoad) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = true;
  o.coalesce = absl::Milliseconds(20);
  cluster_.set_latency(absl::Milliseconds(150));
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt("b")).ok());  // back to back: same batch
  WaitRunCalls(1);  // batch 1 went out (after the 20 ms coalescing)
  // The servers are busy with batch 1 (150 ms): these wait, then go together.
  for (int i = 3; i < 7; ++i) ASSERT_TRUE(b->Submit(i, Decrypt(SecureBytes(40, 7))).ok());
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(5)));
  EXPECT_LT(sink_.At(1) - t0, absl::Seconds(1));  // not the 30 s window
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 4);
  // The second batch started only after the first was done.
  EXPECT_GE(sink_.At(3), sink_.At(1));
  for (int i = 3; i < 7; ++i) EXPECT_TRUE(absl::IsDataLoss(sink_.Get(i).status));
}

// Speculative keystream: after the ticket (usage 2) and reply (usage 3)
// lengths were seen once, a timestamp DECRYPT (usage 1) on an idle cluster
// takes two ENCRYPT jobs along; the next ticket and reply of that length
// need only FINALIZE, and their outputs are ordinary ctr0 || C || T. A
// timestamp that fails to decrypt drops its keystreams.
TEST_P(BatcherTest, SpeculativeKeystreamLetsTicketAndReplySkipTheRun) {
  const std::string tgt_id(32, 't'), tgt_key(32, 'T');
  cluster_.AddKey(tgt_id, tgt_key);
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = true;
  o.coalesce = absl::Milliseconds(1);
  auto b = Make(o);
  auto enc = [&](const std::string& key_id, uint32_t usage, size_t len) {
    Job j = Encrypt(std::string(len, static_cast<char>('a' + usage)), usage);
    j.key_id = key_id;
    return j;
  };
  auto finalizes = [&] {
    int n = 0;
    for (const auto& c : cluster_.calls()) n += c.method == "Finalize" && c.party == 0;
    return n;
  };
  // Learn: a ticket of 56 bytes and a reply of 56 bytes (-> 64 bytes of
  // keystream each: rounded up to blocks), and a timestamp.
  ASSERT_TRUE(b->Submit(1, enc(tgt_id, 2, 56)).ok());
  ASSERT_TRUE(b->Submit(2, enc(kKeyId, 3, 56)).ok());
  ASSERT_TRUE(b->Submit(3, Encrypt("a timestamp", 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  ASSERT_TRUE(sink_.Get(3).status.ok());
  const SecureBytes ts = sink_.Get(3).output;
  EXPECT_EQ(b->stats().speculative_encrypts, 0u);
  // Speculation needs an idle cluster: the batch that delivered job 3 may
  // still be finishing (a loaded machine).
  auto wait_idle = [&] {
    for (int i = 0; i < 500 && b->stats().inflight != 0; ++i)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(b->stats().inflight, 0);
  };
  wait_idle();

  // The timestamp's batch carries the two speculative ENCRYPT jobs.
  const int runs0 = RunCalls();
  ASSERT_TRUE(b->Submit(4, Decrypt(ts, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_EQ(Str(sink_.Get(4).output), "a timestamp");
  EXPECT_EQ(RunCalls(), runs0 + 1);
  EXPECT_EQ(cluster_.calls().back().jobs, 3);
  EXPECT_EQ(b->stats().speculative_encrypts, 2u);
  EXPECT_EQ(sink_.counts().size(), 4u);  // nothing delivered for them

  // Ticket and reply of the speculated length: FINALIZE only.
  const int fins0 = finalizes();
  ASSERT_TRUE(b->Submit(5, enc(tgt_id, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(6));
  EXPECT_EQ(RunCalls(), runs0 + 1);
  EXPECT_EQ(finalizes(), fins0 + 1);
  EXPECT_EQ(b->stats().speculative_used, 2u);
  for (auto [token, key, usage] : {std::tuple<uint64_t, std::string, uint32_t>{
                                       5, tgt_key, 2},
                                   {6, kKey, 3}}) {
    Result r = sink_.Get(token);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.output.size(), 64u + 32);
    std::string out = Str(r.output);
    std::string ctr0 = out.substr(0, 16), c = out.substr(16, 64);
    std::string ks = cluster_.Keystream(key, ctr0, 64);
    for (size_t i = 0; i < 64; ++i)
      EXPECT_EQ(c[i] ^ ks[i], static_cast<char>('a' + usage));
    EXPECT_EQ(out.substr(16 + 64), cluster_.Tag(key, usage, ctr0, c, false));
  }

  // A TGS-REQ's service ticket (usage 2 under another key, no usage-3 job
  // next to it) changes neither the ticket key nor the lengths: the next
  // timestamp still brings the krbtgt's keystream, which the next AS
  // ticket uses.
  const std::string svc_id(32, 's');
  cluster_.AddKey(svc_id, std::string(32, 'S'));
  ASSERT_TRUE(b->Submit(20, enc(svc_id, 2, 900)).ok());
  ASSERT_TRUE(b->Submit(21, Encrypt("other", 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(8));
  wait_idle();
  ASSERT_TRUE(b->Submit(22, Decrypt(ts, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(9));
  EXPECT_EQ(cluster_.calls().back().jobs, 3);
  const int runs_before = RunCalls();
  ASSERT_TRUE(b->Submit(23, enc(tgt_id, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(24, enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(11));
  EXPECT_TRUE(sink_.Get(23).status.ok());
  EXPECT_EQ(b->stats().speculative_used, 4u);
  EXPECT_EQ(RunCalls(), runs_before);  // FINALIZE only
  EXPECT_EQ(b->stats().speculative_encrypts, 4u);

  // A timestamp that does not decrypt: its keystreams are dropped, the
  // next ticket and reply run as usual.
  SecureBytes bad = ts;
  bad[20] ^= 1;
  wait_idle();
  ASSERT_TRUE(b->Submit(7, Decrypt(bad, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(12));
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(7).status));
  EXPECT_EQ(b->stats().speculative_encrypts, 6u);
  const int runs1 = RunCalls();
  ASSERT_TRUE(b->Submit(8, enc(tgt_id, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(9, enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(14));
  EXPECT_TRUE(sink_.Get(8).status.ok());
  EXPECT_TRUE(sink_.Get(9).status.ok());
  EXPECT_EQ(RunCalls(), runs1 + 1);
  EXPECT_EQ(b->stats().speculative_used, 4u);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// The speculation tests below start from here: ticket (krbtgt key, 56
// bytes) and reply (56 bytes) lengths learnt, then a timestamp DECRYPT on
// an idle cluster, which leaves two 64-byte keystreams. Tokens 1001-1004.
class SpeculationTest : public BatcherTest {
 protected:
  const std::string tgt_id_ = std::string(32, 't');
  const std::string tgt_key_ = std::string(32, 'T');
  void SetUp() override {
    BatcherTest::SetUp();
    cluster_.AddKey(tgt_id_, tgt_key_);
  }
  static BatcherOptions Opts() {
    BatcherOptions o;
    o.window = absl::Seconds(30);
    o.early_flush = true;
    // Jobs submitted back to back stay in one batch, even on a loaded
    // machine (SubmitterIdle flushes them).
    o.coalesce = absl::Seconds(2);
    o.deadline = absl::Seconds(5);
    return o;
  }
  Job Enc(const std::string& key_id, uint32_t usage, size_t len) {
    Job j = Encrypt(std::string(len, static_cast<char>('a' + usage)), usage);
    j.key_id = key_id;
    return j;
  }
  void WaitIdle(Batcher* b) {
    for (int i = 0; i < 500 && b->stats().inflight != 0; ++i)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(b->stats().inflight, 0);
  }
  void Speculate(Batcher* b) {
    const size_t n0 = sink_.counts().size();
    ASSERT_TRUE(b->Submit(1001, Enc(tgt_id_, 2, 56)).ok());
    ASSERT_TRUE(b->Submit(1002, Enc(kKeyId, 3, 56)).ok());
    ASSERT_TRUE(b->Submit(1003, Encrypt("a timestamp", 1)).ok());
    b->SubmitterIdle();
    ASSERT_TRUE(sink_.WaitFor(n0 + 3));
    ASSERT_TRUE(sink_.Get(1003).status.ok());
    WaitIdle(b);
    ASSERT_TRUE(b->Submit(1004, Decrypt(sink_.Get(1003).output, 1)).ok());
    b->SubmitterIdle();
    ASSERT_TRUE(sink_.WaitFor(n0 + 4));
    ASSERT_EQ(Str(sink_.Get(1004).output), "a timestamp");
    ASSERT_EQ(b->stats().speculative_encrypts, 2u);
    WaitIdle(b);
  }
  // token's result is a valid ctr0 || C || T of `len` bytes of the
  // plaintext Enc(.., usage, len) under key.
  void ExpectEncrypted(uint64_t token, const std::string& key, uint32_t usage,
                       size_t len) {
    Result r = sink_.Get(token);
    ASSERT_TRUE(r.status.ok()) << token << ": " << r.status;
    ASSERT_EQ(r.output.size(), len + 32);
    std::string out = Str(r.output);
    std::string ctr0 = out.substr(0, 16), c = out.substr(16, len);
    std::string ks = cluster_.Keystream(key, ctr0, len);
    for (size_t i = 0; i < len; ++i)
      ASSERT_EQ(c[i] ^ ks[i], static_cast<char>('a' + usage)) << token;
    EXPECT_EQ(out.substr(16 + len), cluster_.Tag(key, usage, ctr0, c, false))
        << token;
  }
};
INSTANTIATE_TEST_SUITE_P(Cluster, SpeculationTest,
                         ::testing::Values(ClusterKind::kFake,
                                           ClusterKind::kReal),
                         KindName);

// The servers forgot the speculative ENCRYPT states (a restart, or a TTL
// shorter than speculate_ttl): FINALIZE of the ticket and reply fails with
// BATCH_UNKNOWN_ENCRYPT. They are re-run as ordinary ENCRYPT jobs and
// succeed; the unrelated job of the same batch is not affected.
TEST_P(SpeculationTest, ForgottenKeystreamIsReRunAndOtherJobsSucceed) {
  auto b = Make(Opts());
  Speculate(b.get());
  ASSERT_EQ(b->stats().keystreams_held, 2u);
  cluster_.ForgetEncryptStates();
  const uint64_t batches0 = b->stats().batches;
  const int runs0 = RunCalls();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  ASSERT_TRUE(b->Submit(7, Enc(kKeyId, 7, 100)).ok());  // ordinary
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(7));
  // Job 7's batch, and the FINALIZE-only batch of the speculated jobs.
  EXPECT_EQ(b->stats().batches, batches0 + 2);
  EXPECT_EQ(b->stats().speculative_used, 2u);
  EXPECT_EQ(b->stats().finalize_only_rerun, 2u);
  EXPECT_EQ(RunCalls(), runs0 + 2);  // job 7's Run, and the re-run
  ExpectEncrypted(5, tgt_key_, 2, 64);
  ExpectEncrypted(6, kKey, 3, 64);
  ExpectEncrypted(7, kKey, 7, 100);
  EXPECT_EQ(b->stats().failed_batches, 0u);
  bool logged = false;
  for (const auto& line : sink_.logs())
    logged |= absl::StrContains(line, "re-running them");
  EXPECT_TRUE(logged);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// Only one server forgot the states (it restarted) and the two others are
// slow to answer the FINALIZE: the jobs are re-run as soon as the first
// failure arrives, not after the slow answers (which could take until the
// deadline), and the late answers re-run nothing twice.
TEST_P(SpeculationTest, OnePartyForgotReRunsWithoutWaitingForTheOthers) {
  auto b = Make(Opts());  // deadline 5 s
  Speculate(b.get());
  ASSERT_EQ(b->stats().keystreams_held, 2u);
  cluster_.ForgetEncryptStates(1);
  const int fin0 = cluster_.finalize_answers();
  cluster_.DelayNextFinalize(0, absl::Seconds(2));
  cluster_.DelayNextFinalize(2, absl::Seconds(2));
  const int runs0 = RunCalls();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  ExpectEncrypted(5, tgt_key_, 2, 64);
  ExpectEncrypted(6, kKey, 3, 64);
  // The two slow answers arrive (the cluster counts the callbacks it made).
  for (int i = 0; i < 600 && cluster_.finalize_answers() < fin0 + 3; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(cluster_.finalize_answers(), fin0 + 3);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(b->stats().finalize_only_rerun, 2u);
  EXPECT_EQ(RunCalls(), runs0 + 1);  // one re-run
  EXPECT_EQ(b->stats().failed_batches, 0u);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// Two matching keystreams held: the newest (the one the login's own
// timestamp brought) is used, not an older one the servers may have
// forgotten.
TEST_P(SpeculationTest, NewestMatchingKeystreamIsUsed) {
  auto b = Make(Opts());
  Speculate(b.get());
  cluster_.ForgetEncryptStates();  // the first pair is stale on the "servers"
  ASSERT_TRUE(b->Submit(5, Decrypt(sink_.Get(1003).output, 1)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(5));
  ASSERT_TRUE(sink_.Get(5).status.ok());
  EXPECT_EQ(b->stats().speculative_encrypts, 4u);
  WaitIdle(b.get());
  const int runs0 = RunCalls();
  ASSERT_TRUE(b->Submit(6, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(7, Enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(7));
  ExpectEncrypted(6, tgt_key_, 2, 64);
  ExpectEncrypted(7, kKey, 3, 64);
  EXPECT_EQ(b->stats().speculative_used, 2u);
  EXPECT_EQ(b->stats().finalize_only_rerun, 0u);
  EXPECT_EQ(RunCalls(), runs0);  // FINALIZE only
  WaitIdle(b.get());
  EXPECT_EQ(b->stats().keystreams_held, 2u);  // the stale pair, until it expires
}

// The only Run job of the batch fails per job (unknown key id); the
// finalize_only ticket and reply of that batch still finalize.
TEST_P(SpeculationTest, UnknownKeyRunJobBesideFinalizeOnlyJobs) {
  BatcherOptions o = Opts();
  o.deadline = absl::Seconds(3);
  auto b = Make(o);
  Speculate(b.get());
  const int runs0 = RunCalls();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  ASSERT_TRUE(b->Submit(7, Enc(std::string(32, 'u'), 7, 20)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(7));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(7).status)) << sink_.Get(7).status;
  ExpectEncrypted(5, tgt_key_, 2, 64);
  ExpectEncrypted(6, kKey, 3, 64);
  EXPECT_EQ(RunCalls(), runs0 + 1);
  EXPECT_EQ(b->stats().finalize_only_rerun, 0u);
}

// Every timestamp in a batch brings its own group along; speculative jobs
// held or queued count against speculate_max.
TEST_P(SpeculationTest, EveryTimestampBringsItsGroupUpToTheCap) {
  BatcherOptions o = Opts();
  o.speculate_max = 6;
  auto b = Make(o);
  Speculate(b.get());  // holds 2
  const SecureBytes ts = sink_.Get(1003).output;
  ASSERT_TRUE(b->Submit(5, Decrypt(ts, 1)).ok());
  ASSERT_TRUE(b->Submit(6, Decrypt(ts, 1)).ok());
  ASSERT_TRUE(b->Submit(7, Decrypt(ts, 1)).ok());  // 2 + 4 = the cap
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(7));
  for (uint64_t t : {5, 6, 7}) EXPECT_TRUE(sink_.Get(t).status.ok());
  EXPECT_EQ(b->stats().speculative_encrypts, 6u);
  EXPECT_EQ(cluster_.calls().back().jobs, 7);
  WaitIdle(b.get());
  EXPECT_EQ(b->stats().keystreams_held, 6u);
}

// Under load, without early flush (the 100 ms window): the timestamp's
// batch brings the ticket's and reply's keystreams along, and their
// FINALIZE goes when the KDC calls SubmitterIdle() without waiting for the Run batch in
// flight (max_inflight 1): a login needs one Run, not two.
TEST_P(SpeculationTest, UnderLoadTheFinalizeDoesNotWaitForTheRunInFlight) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;
  o.max_inflight = 1;
  o.deadline = absl::Seconds(10);
  auto b = Make(o);
  ASSERT_TRUE(b->Submit(1, Enc(tgt_id_, 2, 56)).ok());
  ASSERT_TRUE(b->Submit(2, Enc(kKeyId, 3, 56)).ok());
  ASSERT_TRUE(b->Submit(3, Encrypt("a timestamp", 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  ASSERT_TRUE(b->Submit(4, Decrypt(sink_.Get(3).output, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  ASSERT_EQ(Str(sink_.Get(4).output), "a timestamp");
  EXPECT_EQ(b->stats().speculative_encrypts, 2u);
  EXPECT_EQ(cluster_.calls().back().jobs, 3);
  WaitIdle(b.get());

  // Another login's batch occupies the ring for 2 s.
  cluster_.set_run_delay(absl::Seconds(2));
  const int runs0 = RunCalls();
  ASSERT_TRUE(b->Submit(10, Enc(kKeyId, 7, 100)).ok());
  WaitRunCalls(runs0 + 1);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(6));
  EXPECT_LT(sink_.At(6) - t0, absl::Seconds(1));
  ExpectEncrypted(5, tgt_key_, 2, 64);
  ExpectEncrypted(6, kKey, 3, 64);
  EXPECT_EQ(b->stats().speculative_used, 2u);
  ASSERT_TRUE(sink_.WaitFor(7));
  ExpectEncrypted(10, kKey, 7, 100);
  EXPECT_GT(sink_.At(10), sink_.At(6));
  EXPECT_EQ(RunCalls(), runs0 + 1);  // 5 and 6: FINALIZE only
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// Timestamps that do not decrypt (an unauthenticated flood of bad
// pre-auth) spend the speculation budget: a group takes a token when it is
// made and gives it back only when its keystreams are used, so of 400 bad
// timestamps only speculate_max / 2 (plus the slow refill) bring keystreams
// along; the rest cost the cluster only their own AES work.
TEST_P(SpeculationTest, FailedTimestampsUseUpTheBudget) {
  BatcherOptions o = Opts();
  o.early_flush = false;
  o.window = absl::Milliseconds(20);
  o.speculate_max = 200;  // budget: 100 groups
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  Speculate(b.get());  // one group made (a token spent), its pair held
  SecureBytes bad = sink_.Get(1003).output;
  bad[20] ^= 1;
  const size_t n0 = sink_.counts().size();
  for (uint64_t t = 0; t < 400; ++t)
    ASSERT_TRUE(b->Submit(2000 + t, Decrypt(bad, 1)).ok());
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ASSERT_TRUE(sink_.WaitFor(n0 + 400));
  for (uint64_t t = 0; t < 400; ++t)
    ASSERT_TRUE(absl::IsDataLoss(sink_.Get(2000 + t).status));
  const uint64_t groups = (b->stats().speculative_encrypts - 2) / 2;
  EXPECT_GE(groups, 99u);
  EXPECT_LE(static_cast<double>(groups), 99 + 32 * secs + 1) << secs;
  EXPECT_GE(b->stats().speculative_wasted, groups);
  EXPECT_LE(b->stats().speculative_wasted, groups + 2);  // + the held pair, if expired
  // Every speculative ENCRYPT went with its timestamp's DECRYPT as its
  // release condition: the servers, not only the module, withheld the
  // failed groups' keystreams (JOB_WITHHELD).
  EXPECT_EQ(static_cast<uint64_t>(cluster_.conditional_jobs()),
            b->stats().speculative_encrypts);
  WaitIdle(b.get());
  EXPECT_LE(b->stats().keystreams_held, 2u);  // the failed groups' were dropped
}

// The KDC normally calls SubmitterIdle() after a ticket and a reply; without
// it their FINALIZE still goes within milliseconds, not after the
// window or the coalesce delay.
TEST_P(SpeculationTest, FinalizeOnlyJobsGoWithoutSubmitterIdle) {
  auto b = Make(Opts());  // window 30 s, coalesce 2 s
  Speculate(b.get());
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(5)));
  EXPECT_LT(sink_.At(6) - t0, absl::Milliseconds(1500));
  ExpectEncrypted(5, tgt_key_, 2, 64);
  ExpectEncrypted(6, kKey, 3, 64);
  EXPECT_EQ(b->stats().speculative_used, 2u);
}

// The keystream's length: every recent plaintext length up to one block
// past the 7/8 quantile's, rounded up to blocks, and no more. (It used to
// be the quantile rounded up plus a blind extra block: ~2 of a login's 34
// AES blocks that no plaintext needed.)
TEST_P(SpeculationTest, KeystreamIsAsLongAsRecentLengthsNeed) {
  uint64_t token = 2000;
  // Learns (ticket, reply) = (len, len) once per entry, runs a timestamp,
  // then submits a ticket and a reply of the given lengths: want_used of
  // them use the speculated keystreams (FINALIZE only), the rest one Run.
  auto check = [&](std::vector<size_t> learn, size_t ticket, size_t reply,
                   uint64_t want_used) {
    auto b = Make(Opts());
    for (size_t len : learn) {
      const size_t n0 = sink_.counts().size();
      ASSERT_TRUE(b->Submit(token++, Enc(tgt_id_, 2, len)).ok());
      ASSERT_TRUE(b->Submit(token++, Enc(kKeyId, 3, len)).ok());
      b->SubmitterIdle();
      ASSERT_TRUE(sink_.WaitFor(n0 + 2));
      WaitIdle(b.get());
    }
    const uint64_t ts_token = token++;
    size_t n0 = sink_.counts().size();
    ASSERT_TRUE(b->Submit(ts_token, Encrypt("a timestamp", 1)).ok());
    b->SubmitterIdle();
    ASSERT_TRUE(sink_.WaitFor(n0 + 1));
    WaitIdle(b.get());
    const SecureBytes ts = sink_.Get(ts_token).output;
    n0 = sink_.counts().size();
    ASSERT_TRUE(b->Submit(token++, Decrypt(ts, 1)).ok());
    b->SubmitterIdle();
    ASSERT_TRUE(sink_.WaitFor(n0 + 1));
    ASSERT_EQ(b->stats().speculative_encrypts, 2u);
    WaitIdle(b.get());
    const int runs0 = RunCalls();
    const uint64_t t = token, r = token + 1;
    token += 2;
    n0 = sink_.counts().size();
    ASSERT_TRUE(b->Submit(t, Enc(tgt_id_, 2, ticket)).ok());
    ASSERT_TRUE(b->Submit(r, Enc(kKeyId, 3, reply)).ok());
    b->SubmitterIdle();
    ASSERT_TRUE(sink_.WaitFor(n0 + 2));
    ExpectEncrypted(t, tgt_key_, 2, ticket);
    ExpectEncrypted(r, kKey, 3, reply);
    EXPECT_EQ(b->stats().speculative_used, want_used);
    EXPECT_EQ(RunCalls(), runs0 + (want_used == 2 ? 0 : 1));
  };
  // 50 bytes learnt: 64 bytes of keystream. A 64-byte ticket uses it; a
  // 65-byte reply does not (with the blind extra block it would have).
  check({50}, 64, 65, 1);
  // 50 bytes (8 times), 70 and 200: the quantile is 50; 70 lies within a
  // block past it and is covered (80 bytes), the outlier 200 is not.
  std::vector<size_t> spread(8, 50);
  spread.push_back(70);
  spread.push_back(200);
  check(spread, 80, 80, 2);
  check(spread, 80, 81, 1);
}

// Pads (speculator.h): an exchange's first DECRYPT draws PAD jobs for the
// PAC signatures recent exchanges of its kind made, and a usage-17
// CHECKSUM under a held pad is one ring-free Sign request instead of a
// Run. Fake only: the servers' Sign is not in this tree (RealCluster
// answers Sign as unimplemented, and the module then runs the checksum).
class PadTest : public FakeBatcherTest {
 protected:
  const std::string tgt_id_ = std::string(32, 't');
  const std::string tgt_key_ = std::string(32, 'T');
  void SetUp() override {
    FakeBatcherTest::SetUp();
    cluster_.AddKey(tgt_id_, tgt_key_);
  }
  static BatcherOptions Opts() {
    BatcherOptions o;  // self-clocked (early flush) by default
    // Jobs submitted back to back stay in one batch (SubmitterIdle
    // flushes them).
    o.coalesce = absl::Seconds(2);
    o.deadline = absl::Seconds(5);
    return o;
  }
  void WaitIdle(Batcher* b) {
    for (int i = 0; i < 500 && b->stats().inflight != 0; ++i)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(b->stats().inflight, 0);
  }
  // Submits the jobs back to back, as the KDC does in one callback, and
  // waits for their results; returns their tokens.
  std::vector<uint64_t> Do(Batcher* b, std::vector<Job> jobs) {
    const size_t n0 = sink_.counts().size();
    std::vector<uint64_t> tokens;
    for (Job& j : jobs) {
      tokens.push_back(token_++);
      EXPECT_TRUE(b->Submit(tokens.back(), std::move(j)).ok());
    }
    b->SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + tokens.size()));
    WaitIdle(b);
    return tokens;
  }
  Job Tgt(Job j) {
    j.key_id = tgt_id_;
    return j;
  }
  Job Sig(size_t len, char fill) {
    return Tgt(Checksum(std::string(len, fill), 17));
  }
  // token's result is a checksum of Sig(len, fill) under the krbtgt key.
  void ExpectSigned(uint64_t token, size_t len, char fill) {
    const Result r = sink_.Get(token);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.output.size(), 32u);
    const std::string out = Str(r.output);
    EXPECT_EQ(out.substr(16), cluster_.Tag(tgt_key_, 17, out.substr(0, 16),
                                           std::string(len, fill), true));
  }
  // An AS exchange as the KDC runs it: the timestamp's DECRYPT, the PAC's
  // two signatures under the krbtgt key (one after the other: the KDC
  // signature covers the server signature), then ticket and reply.
  void AsExchange(Batcher* b, const SecureBytes& ts) {
    const uint64_t d = Do(b, {Decrypt(ts, 1)})[0];
    ASSERT_TRUE(sink_.Get(d).status.ok()) << sink_.Get(d).status;
    ExpectSigned(Do(b, {Sig(100, 's')})[0], 100, 's');
    ExpectSigned(Do(b, {Sig(90, 'k')})[0], 90, 'k');
    for (uint64_t t : Do(b, {Tgt(Encrypt(std::string(56, 't'), 2)),
                             Encrypt(std::string(56, 'r'), 3)}))
      ASSERT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  }
  // Every pad named in party p's Sign requests, once each.
  std::vector<std::pair<std::string, uint64_t>> SignedPads(int p) {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const std::string& raw : fake_.received_signs(p)) {
      kmpc::v1::SignRequest r;
      EXPECT_TRUE(r.ParseFromString(raw));
      for (const auto& it : r.items())
        out.emplace_back(it.run_batch_id(), it.job_id());
    }
    return out;
  }
  uint64_t token_ = 5000;
};
INSTANTIATE_TEST_SUITE_P(Cluster, PadTest,
                         ::testing::Values(ClusterKind::kFake), KindName);

// The second login: its timestamp's Run draws two pads (the first login
// signed twice under the krbtgt key), its two PAC signatures are Sign
// requests, its ticket and reply FINALIZE only: one Run in all. No pad
// signs twice, and the messages reach the servers as shares only.
TEST_P(PadTest, TimestampDrawsPadsAndSignaturesNeedNoRun) {
  auto b = Make(Opts());
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);  // learns: nothing was speculated yet
  EXPECT_EQ(b->stats().pads_drawn, 0u);
  EXPECT_EQ(b->stats().sign_requests, 0u);
  const BatcherStats s0 = b->stats();
  const int runs0 = RunCalls();
  AsExchange(b.get(), ts);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);  // "Run batches per login"
  EXPECT_EQ(RunCalls(), runs0 + 1);
  EXPECT_EQ(RunSizes().back(), 5);  // timestamp, 2 keystreams, 2 pads
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  // One after the other (the KDC signature covers the server's): two.
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 2u);
  EXPECT_EQ(s1.finalize_requests - s0.finalize_requests, 1u);
  EXPECT_EQ(s1.pads_drawn, 2u);
  EXPECT_EQ(s1.pads_used, 2u);
  EXPECT_EQ(s1.pads_held, 0u);
  EXPECT_EQ(s1.sign_rerun, 0u);
  // A third signature finds no pad: a Run of its own.
  const uint64_t t = Do(b.get(), {Sig(100, 'x')})[0];
  ExpectSigned(t, 100, 'x');
  EXPECT_EQ(b->stats().run_requests, s1.run_requests + 1);
  EXPECT_EQ(b->stats().sign_requests, s1.sign_requests);
  // Each pad was asked of every party once, and no more.
  for (int p = 0; p < 3; ++p) {
    auto pads = SignedPads(p);
    EXPECT_EQ(pads.size(), 2u) << p;
    const std::set<std::pair<std::string, uint64_t>> distinct(pads.begin(),
                                                                pads.end());
    EXPECT_EQ(distinct.size(), pads.size()) << p;
    for (const std::string& raw : fake_.received_signs(p)) {
      EXPECT_EQ(raw.find(std::string(90, 'k')), std::string::npos);
      EXPECT_EQ(raw.find(std::string(20, 's')), std::string::npos);
    }
  }
}

// Signatures submitted in one callback (under load: of many logins) go
// as one Sign request per server when the submitter goes idle, an item
// per signature, each under its own pad, each tag right.
TEST_P(PadTest, SignaturesOfOneCallbackShareOneRequest) {
  auto b = Make(Opts());
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  const BatcherStats s0 = b->stats();
  const int runs0 = RunCalls();
  const std::vector<uint64_t> t = Do(b.get(), {Sig(100, 'a'), Sig(90, 'b')});
  ExpectSigned(t[0], 100, 'a');
  ExpectSigned(t[1], 90, 'b');
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 1u);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
  EXPECT_EQ(s1.sign_rerun, 0u);
  EXPECT_EQ(RunCalls(), runs0);
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(fake_.received_signs(p).size(), 1u) << p;
    auto pads = SignedPads(p);
    ASSERT_EQ(pads.size(), 2u) << p;
    EXPECT_NE(pads[0], pads[1]) << p;
  }
}

// A pad the servers no longer hold (one restarted, or their TTL passed):
// JOB_PAD_UNAVAILABLE from that server, and the checksum runs as an
// ordinary CHECKSUM at once, with a right tag.
TEST_P(PadTest, UnavailablePadFallsBackToARun) {
  auto b = Make(Opts());
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  fake_.ForgetPads(1);
  const BatcherStats s0 = b->stats();
  const uint64_t t = Do(b.get(), {Sig(100, 'f')})[0];
  ExpectSigned(t, 100, 'f');
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 1u);
  EXPECT_EQ(s1.sign_rerun, 1u);
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 1u);
  EXPECT_EQ(s1.failed_batches, 0u);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
  // The fallback's Run carried the message as shares too.
  for (int p = 0; p < 3; ++p)
    for (const std::string& raw : fake_.received(p))
      EXPECT_EQ(raw.find(std::string(20, 'f')), std::string::npos);
}

// A renewal (TGS-REQ whose new TGT is encrypted under the krbtgt key):
// once learnt, its TGT's DECRYPT brings the new ticket's keystream and
// its signatures' pads along: one Run, two Signs, one Finalize. Renewed a
// second or more after the login, the new TGT and the PAC carry a
// starttime the login's TGT lacked (21 bytes longer): held ones still fit.
TEST_P(PadTest, RenewalIsOneRunSignsAndAFinalize) {
  auto b = Make(Opts());
  const SecureBytes tgt =
      sink_.Get(Do(b.get(), {Tgt(Encrypt(std::string(56, 'g'), 2))})[0]).output;
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);  // learns the krbtgt key, 56-byte tickets
  constexpr size_t kNew = 56 + 21;
  auto renewal = [&] {
    const uint64_t d = Do(b.get(), {Tgt(Decrypt(tgt, 2))})[0];
    ASSERT_TRUE(sink_.Get(d).status.ok()) << sink_.Get(d).status;
    ExpectSigned(Do(b.get(), {Sig(100 + 21, 'a')})[0], 100 + 21, 'a');
    ExpectSigned(Do(b.get(), {Sig(90, 'b')})[0], 90, 'b');
    const uint64_t e =
        Do(b.get(), {Tgt(Encrypt(std::string(kNew, 'n'), 2))})[0];
    const Result r = sink_.Get(e);
    ASSERT_TRUE(r.status.ok()) << r.status;
    const std::string out = Str(r.output);
    ASSERT_EQ(out.size(), kNew + 32);
    const std::string ctr0 = out.substr(0, 16), c = out.substr(16, kNew);
    const std::string ks = cluster_.Keystream(tgt_key_, ctr0, kNew);
    for (size_t i = 0; i < kNew; ++i) ASSERT_EQ(c[i] ^ ks[i], 'n');
    EXPECT_EQ(out.substr(16 + kNew), cluster_.Tag(tgt_key_, 2, ctr0, c, false));
  };
  renewal();  // learns the renewal
  const BatcherStats s0 = b->stats();
  renewal();
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);
  // The TGT, its keystream, 2 pads, the pad linked to the keystream, the
  // TGT's verification pad.
  EXPECT_EQ(RunSizes().back(), 6);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  EXPECT_EQ(s1.finalize_requests - s0.finalize_requests, 1u);
  EXPECT_EQ(s1.speculative_used - s0.speculative_used, 1u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
}

// Linked and verification pads (speculator.h, "Linked pads"): the AS's
// PAC server signature (a PAC-shaped message) is made under the pad linked
// to the ticket's keystream, at the ticket's ctr0 + 2^17; the ticket that
// carries it is encrypted with that keystream; the TGS-REQ's TGT DECRYPT
// draws a verification pad there, and the VERIFY of the signature is a
// ring-free verify item: no Run. A wrong tag fails it (DataLoss, as a
// Run's VERIFY), a VERIFY at another counter runs.
TEST_P(PadTest, TgtServerSignatureIsVerifiedWithoutARun) {
  auto b = Make(Opts());
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  // [MS-PAC] PACTYPE: 4 buffers, version 0 (only its header matters here).
  const std::string pac = std::string("\x04\0\0\0\0\0\0\0", 8) + std::string(92, 'p');
  SecureBytes tgt;
  std::string sig;
  auto as = [&] {
    const uint64_t d = Do(b.get(), {Decrypt(ts, 1)})[0];
    ASSERT_TRUE(sink_.Get(d).status.ok());
    Job s = Tgt(Checksum(pac, 17));
    sig = Str(sink_.Get(Do(b.get(), {std::move(s)})[0]).output);
    ExpectSigned(Do(b.get(), {Sig(32, 'k')})[0], 32, 'k');
    // The ticket carries the server signature (inside its PAC).
    const std::string plain = std::string(8, 'a') + sig + std::string(16, 'z');
    auto t = Do(b.get(), {Tgt(Encrypt(plain, 2)), Encrypt(std::string(56, 'r'), 3)});
    tgt = sink_.Get(t[0]).output;
  };
  as();  // learns the krbtgt key, the lengths and the signatures
  as();
  std::string want;
  ASSERT_TRUE(contract::LinkedPadCtr0(Str(tgt).substr(0, 16), &want));
  EXPECT_EQ(sig.substr(0, 16), want);  // the signature's counter is linked
  auto verify = [&](const std::string& checksum) {
    Job v = Tgt(Checksum(pac, 17));
    v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
    v.checksum = checksum;
    return sink_.Get(Do(b.get(), {std::move(v)})[0]).status;
  };
  auto tgs = [&](const std::string& checksum) {
    const uint64_t d = Do(b.get(), {Tgt(Decrypt(tgt, 2))})[0];
    EXPECT_TRUE(sink_.Get(d).status.ok());
    return verify(checksum);
  };
  BatcherStats s0 = b->stats();
  EXPECT_TRUE(tgs(sig).ok());
  BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);  // the TGT's DECRYPT
  EXPECT_EQ(s1.verify_pads_used - s0.verify_pads_used, 1u);
  EXPECT_EQ(s1.sign_rerun, 0u);
  std::string wrong = sig;
  wrong[20] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(tgs(wrong)));
  BatcherStats s2 = b->stats();
  EXPECT_EQ(s2.run_requests - s1.run_requests, 1u);
  EXPECT_EQ(s2.verify_pads_used - s1.verify_pads_used, 1u);
  // Another counter: no verification pad there, a Run of its own.
  std::string other = sig;
  other[3] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(tgs(other)));
  BatcherStats s3 = b->stats();
  EXPECT_EQ(s3.run_requests - s2.run_requests, 2u);
  EXPECT_EQ(s3.verify_pads_used, s2.verify_pads_used);
  // The verify items carried the presented tags and shares of the PAC,
  // never the PAC.
  for (int p = 0; p < 3; ++p)
    for (const std::string& raw : fake_.received_signs(p))
      EXPECT_EQ(raw.find(std::string(40, 'p')), std::string::npos);
}

// A held pad signs only a CHECKSUM it fits: same key id, cipher and usage,
// a message no longer than the pad. Others run as before and leave the
// pads held.
TEST_P(PadTest, OnlyAFittingChecksumUsesAPad) {
  auto b = Make(Opts());
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  // 128 bytes each: 100 learnt, and room for a starttime the learnt
  // messages lacked (a ticket issued a second after its authtime).
  ASSERT_EQ(b->stats().pads_held, 2u);
  const BatcherStats s0 = b->stats();
  Job other_key = Checksum(std::string(50, 'o'), 17);  // the client's key
  Job other_usage = Tgt(Checksum(std::string(50, 'u'), 18));
  Job wrong_cipher = Sig(50, 'w');
  wrong_cipher.cipher = kmpc::v1::CIPHER_AES128;
  for (Job& j : {std::ref(other_key), std::ref(other_usage)}) {
    const uint64_t t = Do(b.get(), {std::move(j)})[0];
    EXPECT_TRUE(sink_.Get(t).status.ok()) << t << ": " << sink_.Get(t).status;
  }
  // The key is AES-256: the cluster refuses the job for its cipher.
  const uint64_t wc = Do(b.get(), {std::move(wrong_cipher)})[0];
  EXPECT_TRUE(absl::IsPermissionDenied(sink_.Get(wc).status)) << sink_.Get(wc).status;
  const uint64_t too_long = Do(b.get(), {Sig(129, 'l')})[0];
  ExpectSigned(too_long, 129, 'l');
  BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_requests, s0.sign_requests);
  EXPECT_EQ(s1.run_requests - s0.run_requests, 4u);
  EXPECT_EQ(s1.pads_held, 2u);
  const uint64_t fits = Do(b.get(), {Sig(128, 'f')})[0];
  ExpectSigned(fits, 128, 'f');
  s1 = b->stats();
  EXPECT_EQ(s1.sign_requests, s0.sign_requests + 1);
  EXPECT_EQ(s1.run_requests - s0.run_requests, 4u);
  EXPECT_EQ(s1.pads_held, 1u);
}

// A Sign request goes at once: not behind the Run in flight (max_inflight
// 1, the ring busy for 2 s), not after the window.
TEST_P(PadTest, SignDoesNotWaitForTheRunInFlightOrTheWindow) {
  BatcherOptions o = Opts();
  o.window = absl::Seconds(30);
  auto b = Make(o);
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  cluster_.set_run_delay(absl::Seconds(2));
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  ASSERT_TRUE(b->Submit(9000, Encrypt(std::string(100, 'x'), 7)).ok());
  b->SubmitterIdle();
  WaitRunCalls(runs0 + 1);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(9001, Sig(100, 'q')).ok());
  ASSERT_TRUE(sink_.WaitFor(n0 + 1, absl::Seconds(5)));
  EXPECT_LT(sink_.At(9001) - t0, absl::Seconds(1));
  ExpectSigned(9001, 100, 'q');
  EXPECT_EQ(sink_.counts().count(9000), 0u);  // the Run is still in flight
  EXPECT_EQ(RunCalls(), runs0 + 1);
  ASSERT_TRUE(sink_.WaitFor(n0 + 2, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(9000).status.ok());
}

// Pads unused for speculate_ttl are dropped (the servers forget them after
// their own, longer, TTL) and counted wasted; the next signature runs.
TEST_P(PadTest, UnusedPadsExpire) {
  BatcherOptions o = Opts();
  o.speculate_ttl = absl::Milliseconds(300);
  auto b = Make(o);
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  for (int i = 0; i < 200 && b->stats().pads_held != 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));  // pruned without any submit
  EXPECT_EQ(b->stats().pads_held, 0u);
  EXPECT_EQ(b->stats().pads_wasted, 2u);
  const BatcherStats s0 = b->stats();
  ExpectSigned(Do(b.get(), {Sig(100, 'e')})[0], 100, 'e');
  EXPECT_EQ(b->stats().sign_requests, s0.sign_requests);
  EXPECT_EQ(b->stats().run_requests, s0.run_requests + 1);
}

// A server that does not answer a Sign: the checksum fails at the
// deadline, once; a server that is down: it fails at once (its re-run as a
// Run cannot reach the cluster either), once.
TEST_P(PadTest, SignFailuresCompleteTheJobOnce) {
  BatcherOptions o = Opts();
  o.deadline = absl::Milliseconds(800);
  auto b = Make(o);
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  fake_.set_hang(2, true);
  const absl::Time t0 = absl::Now();
  const uint64_t hung = Do(b.get(), {Sig(100, 'h')})[0];
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(hung).status)) << sink_.Get(hung).status;
  EXPECT_GE(sink_.At(hung) - t0, absl::Milliseconds(700));
  fake_.set_hang(2, false);
  fake_.set_down(1, true);
  const uint64_t down = Do(b.get(), {Sig(100, 'd')})[0];
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(down).status)) << sink_.Get(down).status;
  fake_.set_down(1, false);
  EXPECT_EQ(b->stats().pads_used, 2u);  // each pad taken once, never again
  EXPECT_EQ(b->stats().pads_held, 0u);
  absl::SleepFor(absl::Milliseconds(200));
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// Bad timestamps (unauthenticated) spend the pad budget: each exchange's
// pads take a token that only their use gives back, so a flood draws at
// most speculate_max / 2 exchanges' pads plus the refill, and every pad
// of a failed timestamp is counted wasted, never held.
TEST_P(PadTest, FailedTimestampsUseUpThePadBudget) {
  BatcherOptions o = Opts();
  o.speculate_max = 40;  // budget: 20 exchanges
  auto b = Make(o);
  const SecureBytes ts = sink_.Get(Do(b.get(), {Encrypt("a timestamp", 1)})[0]).output;
  AsExchange(b.get(), ts);
  SecureBytes bad = ts;
  bad[20] ^= 1;
  const absl::Time t0 = absl::Now();
  const size_t n0 = sink_.counts().size();
  for (uint64_t t = 0; t < 200; ++t)
    ASSERT_TRUE(b->Submit(7000 + t, Decrypt(bad, 1)).ok());
  b->SubmitterIdle();
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ASSERT_TRUE(sink_.WaitFor(n0 + 200));
  WaitIdle(b.get());
  for (uint64_t t = 0; t < 200; ++t)
    ASSERT_TRUE(absl::IsDataLoss(sink_.Get(7000 + t).status));
  const BatcherStats s = b->stats();
  const uint64_t exchanges = s.pads_drawn / 2;
  EXPECT_GE(exchanges, 5u);
  EXPECT_LE(static_cast<double>(exchanges), 20 + 32 * secs + 1) << secs;
  EXPECT_EQ(s.pads_wasted, s.pads_drawn);
  EXPECT_EQ(s.pads_held, 0u);
  EXPECT_EQ(s.pads_used, 0u);
}

TEST_P(BatcherTest, SpeculationOffSendsNoExtraJobs) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  o.speculate = false;
  auto b = Make(o);
  ASSERT_TRUE(b->Submit(1, Encrypt(std::string(40, 'x'), 2)).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt(std::string(40, 'y'), 3)).ok());
  ASSERT_TRUE(b->Submit(3, Encrypt("a timestamp", 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  ASSERT_TRUE(b->Submit(4, Decrypt(sink_.Get(3).output, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_EQ(cluster_.calls().back().jobs, 1);
  EXPECT_EQ(b->stats().speculative_encrypts, 0u);
}

TEST_P(BatcherTest, SubmitterIdleFlushesAnIdleQueueWithoutTheCoalesceDelay) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = true;
  o.coalesce = absl::Seconds(20);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt("b")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(RunCalls(), 0);  // the coalesce delay holds them
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_LT(sink_.At(2) - t0, absl::Seconds(5));
  EXPECT_EQ(RunCalls(), 1);  // both in one batch
  // A kick with nothing queued changes nothing; the next jobs wait again.
  b->SubmitterIdle();
  ASSERT_TRUE(b->Submit(3, Encrypt("c")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(RunCalls(), 1);
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(5)));
  EXPECT_EQ(RunCalls(), 2);
}

TEST_P(BatcherTest, SubmitterIdleWithoutEarlyFlushKeepsTheWindow) {
  BatcherOptions o;
  o.window = absl::Milliseconds(300);
  o.early_flush = false;  // flushed by the window
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("a")).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_GE(sink_.At(1) - t0, absl::Milliseconds(290));
}

// Fake only: the real servers have no hook for the fault (a party that never answers).
TEST_P(FakeBatcherTest, HangingServerFailsEveryJobAtTheDeadline) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  o.deadline = absl::Milliseconds(300);
  fake_.set_hang(1, true);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(5)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::IsUnavailable(sink_.Get(i).status)) << sink_.Get(i).status;
    EXPECT_GE(sink_.At(i) - t0, absl::Milliseconds(290));
    EXPECT_LT(sink_.At(i) - t0, absl::Seconds(2));
  }
  // The batcher keeps serving once the server is back.
  fake_.set_hang(1, false);
  ASSERT_TRUE(b->Submit(10, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(sink_.Get(10).status.ok());
  for (auto& [t, n] : sink_.counts()) EXPECT_EQ(n, 1) << "token " << t;
}

// Fake only: the real servers have no hook for the fault (a party that is down).
TEST_P(FakeBatcherTest, UnreachableServerFailsFast) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  o.deadline = absl::Seconds(20);
  fake_.set_down(2, true);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status));
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "party 2"));
  fake_.set_down(2, false);
  ASSERT_TRUE(b->Submit(2, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(sink_.Get(2).status.ok());
}

// Reachable(party) fails for the parties marked down (a transport that
// knows a connection is lost).
class KnownDownTransport : public ForwardingTransport {
 public:
  explicit KnownDownTransport(Transport* next) : ForwardingTransport(next) {}
  void set_down(int party, bool down) { down_[party] = down; }
  absl::Status Reachable(int party) override {
    return down_[party] ? absl::UnavailableError("connection lost")
                        : absl::OkStatus();
  }

 private:
  std::array<std::atomic<bool>, 3> down_{};
};

// A party the transport knows is down fails the batch at once, and no
// server is sent anything (the two others would hold a batch that cannot
// run); once it is back, batches go again.
TEST_P(BatcherTest, KnownDownPartyFailsTheBatchWithoutSendingIt) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  o.deadline = absl::Seconds(20);
  KnownDownTransport t(&cluster_);
  t.set_down(1, true);
  auto b = std::make_unique<Batcher>(o, &t, &sink_);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status));
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "party 1"))
      << sink_.Get(1).status;
  EXPECT_TRUE(cluster_.calls().empty());
  t.set_down(1, false);
  ASSERT_TRUE(b->Submit(2, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
  b.reset();  // before t
}

// A server's typed refusal (an overloaded queue) fails the batch's jobs
// at once (SVC_UNAVAILABLE), naming the party and the refusal; nothing is
// re-run, and the next batch succeeds once the server accepts again.
// Fake only: the real servers have no hook for the fault (a server refusing every batch (an overloaded queue)).
TEST_P(FakeBatcherTest, TypedRefusalFailsTheBatchAtOnce) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  o.deadline = absl::Seconds(20);
  fake_.set_refuse(1, kmpc::v1::BATCH_OVERLOADED);
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(b->Submit(2, Decrypt(SecureBytes(40, 7))).ok());
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  for (int t : {1, 2}) {
    const absl::Status& st = sink_.Get(t).status;
    EXPECT_TRUE(absl::IsUnavailable(st)) << st;
    EXPECT_TRUE(absl::StrContains(
        st.message(), "MPC party 1 (fake) refused the batch: BATCH_OVERLOADED"))
        << st;
  }
  EXPECT_EQ(RunCalls(), 1);
  fake_.set_refuse(1, kmpc::v1::BATCH_ERROR_UNSPECIFIED);
  ASSERT_TRUE(b->Submit(3, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
}

// Fake only: the real servers have no hook for the fault (a server sending a corrupt share copy).
TEST_P(FakeBatcherTest, ShareCopyDisagreementRejectsTheBatch) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  auto b = Make(o);
  // Warm up a ciphertext to decrypt.
  ASSERT_TRUE(b->Submit(1, Encrypt("the plaintext")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  SecureBytes ct = sink_.Get(1).output;
  fake_.set_corrupt(1, true);
  ASSERT_TRUE(b->Submit(2, Decrypt(ct)).ok());
  ASSERT_TRUE(b->Submit(3, Encrypt("other")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  for (int t : {2, 3}) {
    EXPECT_TRUE(absl::IsUnavailable(sink_.Get(t).status)) << sink_.Get(t).status;
    EXPECT_TRUE(sink_.Get(t).output.empty());
  }
  bool named = false;
  for (const auto& l : sink_.logs())
    named |= absl::StrContains(l, "rejected") &&
             absl::StrContains(l, "party 1 (fake) and party 2 (fake) disagree");
  EXPECT_TRUE(named) << ::testing::PrintToString(sink_.logs());
  // No plaintext in any log line.
  for (const auto& l : sink_.logs()) EXPECT_FALSE(absl::StrContains(l, "plaintext"));
  fake_.set_corrupt(1, false);
  ASSERT_TRUE(b->Submit(4, Decrypt(ct)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_EQ(Str(sink_.Get(4).output), "the plaintext");
}

// Fake only: the real servers have no hook for the fault (a server sending a corrupt tag share).
TEST_P(FakeBatcherTest, CorruptTagShareInFinalizeIsRejected) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  fake_.set_corrupt_finalize(0, true);
  auto b = Make(o);
  ASSERT_TRUE(b->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  for (int t : {1, 2}) {
    EXPECT_TRUE(absl::IsUnavailable(sink_.Get(t).status)) << sink_.Get(t).status;
    EXPECT_TRUE(sink_.Get(t).output.empty());
  }
  bool named = false;
  for (const auto& l : sink_.logs())
    named |= absl::StrContains(l, "tag") &&
             absl::StrContains(l, "party 0 (fake) and party 1 (fake) disagree");
  EXPECT_TRUE(named) << ::testing::PrintToString(sink_.logs());
}

// Fake only: the real servers have no hook for the fault (a cluster answering with ctr0 = 0).
TEST_P(FakeBatcherTest, InvalidCounterFromTheClusterIsRejected) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  fake_.set_zero_ctr0(true);
  auto b = Make(o);
  ASSERT_TRUE(b->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status)) << sink_.Get(1).status;
  // Nothing was finalized: no tag exists for that counter.
  for (const auto& c : fake_.calls()) EXPECT_NE(c.method, "Finalize");
}

TEST_P(BatcherTest, UnknownKeyFailsOnlyItsJobs) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // flushed by the window
  auto b = Make(o);
  Job j = Encrypt("x");
  j.key_id = std::string(32, 'u');
  ASSERT_TRUE(b->Submit(1, std::move(j)).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(1).status)) << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
}

// The servers fail a job whose key is missing or inconsistent on some of
// them per job (JobResult.status JOB_UNKNOWN_KEY / JOB_KEY_INCONSISTENT):
// only those jobs fail, in the same
// single Run, NOT_FOUND for a missing key, UNAVAILABLE for inconsistent
// shares; the others complete.
TEST_P(BatcherTest, PerJobKeyErrorsFailOnlyThoseJobs) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // flushed by the window
  const std::string bad(32, 'b');
  cluster_.AddInconsistentKey(bad);
  auto b = Make(o);
  Job unknown = Encrypt("x");
  unknown.key_id = std::string(32, 'u');
  Job stale = Encrypt("z");
  stale.key_id = bad;
  ASSERT_TRUE(b->Submit(1, std::move(unknown)).ok());
  ASSERT_TRUE(b->Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(b->Submit(3, std::move(stale)).ok());
  ASSERT_TRUE(b->Submit(4, Encrypt("w")).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(1).status)) << sink_.Get(1).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "no shares"))
      << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(3).status)) << sink_.Get(3).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(3).status.message(), "inconsistent"))
      << sink_.Get(3).status;
  EXPECT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  int runs = 0;
  for (const auto& c : cluster_.calls()) runs += c.method == "Run";
  EXPECT_EQ(runs, 3);  // one batch, one Run per party, no re-run
}

// kmpc.proto Job.cipher: the job carries the KDC's enctype and the cluster
// refuses a key id dealt for the other one, per job (JOB_WRONG_CIPHER ->
// kPermissionDenied, which the module maps to KRB5_BAD_ENCTYPE); the other
// jobs of the same Run complete. A job without a cipher never leaves the
// KDC (contract::CheckJob: kInvalidArgument at submit).
TEST_P(BatcherTest, WrongCipherFailsOnlyThatJob) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // flushed by the window
  const std::string id128(32, 'a');
  cluster_.AddKey(id128, std::string(16, 'A'));
  auto b = Make(o);
  Job as256 = Encrypt("x");  // kKey, AES-256: right
  Job wrong256 = Encrypt("y");
  wrong256.key_id = id128;  // dealt AES-128, named AES-256
  Job wrong128 = Encrypt("z");
  wrong128.cipher = kmpc::v1::CIPHER_AES128;  // kKey is AES-256
  Job as128 = Encrypt("w");
  as128.key_id = id128;
  as128.cipher = kmpc::v1::CIPHER_AES128;
  ASSERT_TRUE(b->Submit(1, std::move(as256)).ok());
  ASSERT_TRUE(b->Submit(2, std::move(wrong256)).ok());
  ASSERT_TRUE(b->Submit(3, std::move(wrong128)).ok());
  ASSERT_TRUE(b->Submit(4, std::move(as128)).ok());
  Job none = Encrypt("v");
  none.cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  absl::Status refused = b->Submit(5, std::move(none));
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "cipher")) << refused;
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  for (uint64_t t : {2, 3}) {
    const absl::Status& st = sink_.Get(t).status;
    EXPECT_TRUE(absl::IsPermissionDenied(st)) << t << ": " << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "another enctype")) << st;
    EXPECT_TRUE(sink_.Get(t).output.empty()) << t;
    EXPECT_STREQ(KdcMetrics::CauseOf(st), "wrong_cipher");
  }
  EXPECT_TRUE(absl::StrContains(sink_.Get(2).status.message(), "dealt for AES128"))
      << sink_.Get(2).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(3).status.message(), "dealt for AES256"))
      << sink_.Get(3).status;
  // The right ones are the right enctype's ciphertexts.
  const SecureBytes& ct = sink_.Get(4).output;
  ASSERT_GE(ct.size(), 32u + 1);
  const std::string ctr0(ct.begin(), ct.begin() + 16);
  EXPECT_EQ(static_cast<char>(ct[16] ^ cluster_.Keystream(std::string(16, 'A'), ctr0, 1)[0]), 'w');
  int runs = 0;
  for (const auto& c : cluster_.calls()) runs += c.method == "Run";
  EXPECT_EQ(runs, 3);  // one batch, one Run per party, no re-run
}

// Fake only: the real servers have no hook for the fault (parties hanging, down and corrupt in turn).
TEST_P(FakeBatcherTest, EveryJobCompletesExactlyOnceUnderChaos) {
  BatcherOptions o;
  o.window = absl::Milliseconds(3);
  o.max_jobs = 7;
  o.deadline = absl::Milliseconds(200);
  o.early_flush = true;
  o.max_inflight = 3;
  fake_.set_latency(absl::Milliseconds(2));
  auto b = Make(o);
  const int n = 600;
  for (int i = 0; i < n; ++i) {
    if (i == 150) fake_.set_hang(0, true);
    if (i == 250) fake_.set_hang(0, false);
    if (i == 300) fake_.set_down(1, true);
    if (i == 350) fake_.set_down(1, false);
    if (i == 400) fake_.set_corrupt(2, true);
    if (i == 450) fake_.set_corrupt(2, false);
    ASSERT_TRUE(b->Submit(i, Encrypt(std::string(1 + i % 70, 'p'))).ok());
    if (i % 10 == 0) absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(sink_.WaitFor(n, absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(300));  // late callbacks must not count
  auto counts = sink_.counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(n));
  int ok = 0;
  for (auto& [t, c] : counts) {
    EXPECT_EQ(c, 1) << "token " << t;
    ok += sink_.Get(t).status.ok();
  }
  EXPECT_GT(ok, n / 3);
}

TEST_P(BatcherTest, FullQueueRefusesJobs) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = false;  // flushed by the window
  o.max_queue = 3;
  auto b = Make(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("x")).ok());
  EXPECT_TRUE(absl::IsUnavailable(b->Submit(3, Encrypt("x"))));
}

TEST_P(BatcherTest, StopAbandonsPendingJobsAndNothingArrivesAfter) {
  BatcherOptions o;
  o.window = absl::Milliseconds(5);
  o.early_flush = false;  // flushed by the window
  cluster_.set_latency(absl::Milliseconds(200));
  auto b = Make(o);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b->Submit(i, Encrypt("x")).ok());
  absl::SleepFor(absl::Milliseconds(50));  // in flight
  b->Stop();
  size_t at_stop = sink_.counts().size();
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(sink_.counts().size(), at_stop);
  EXPECT_FALSE(b->Submit(99, Encrypt("x")).ok());
}

TEST(OptionsTest, ParsesAndRejects) {
  // Self-clocked batches by default (batcher.h).
  auto d = ParseOptions({"servers = h:1,h:2,h:3", "certs=/c"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->batcher.early_flush);
  EXPECT_EQ(d->batcher.max_inflight, 1);
  EXPECT_EQ(d->batcher.window, absl::Milliseconds(100));
  auto off = ParseOptions({"servers = h:1,h:2,h:3", "certs=/c", "early_flush=no"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->batcher.early_flush);
  auto o = ParseOptions({"servers = 127.0.0.1:1,127.0.0.1:2, 127.0.0.1:3",
                         "certs=/c", "batch_window_ms=50", "early_flush=true",
                         "deadline_ms=1500", "max_batch_jobs=9",
                         "max_batch_blocks=99", "debug=yes",
                         "max_queue_jobs=7", "speculate=off",
                         "speculate_ttl_ms=1500", "speculate_max=100",
                         "backlog_batch_jobs=33",
                         "backlog_batch_blocks=444", "max_inflight=2"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->batcher.speculate);
  EXPECT_EQ(o->batcher.speculate_ttl, absl::Milliseconds(1500));
  EXPECT_EQ(o->batcher.speculate_max, 100u);
  EXPECT_EQ(BatcherOptions().speculate_max, 8192u);
  EXPECT_EQ(BatcherOptions().speculate_ttl, absl::Seconds(4));
  EXPECT_TRUE(BatcherOptions().speculate);
  EXPECT_EQ(o->servers[2], "127.0.0.1:3");
  EXPECT_EQ(o->ca, "/c/ca.pem");
  EXPECT_EQ(o->cert, "/c/kdc.pem");
  EXPECT_EQ(o->key, "/c/kdc.key");
  EXPECT_EQ(o->batcher.window, absl::Milliseconds(50));
  EXPECT_TRUE(o->batcher.early_flush);
  EXPECT_EQ(o->batcher.deadline, absl::Milliseconds(1500));
  EXPECT_EQ(o->batcher.max_jobs, 9u);
  EXPECT_EQ(o->batcher.max_blocks, 99u);
  EXPECT_TRUE(o->batcher.debug);
  EXPECT_EQ(o->batcher.max_queue, 7u);
  EXPECT_EQ(o->batcher.backlog_jobs, 33u);
  EXPECT_EQ(o->batcher.backlog_blocks, 444u);
  EXPECT_EQ(o->batcher.max_inflight, 2);
  EXPECT_EQ(BatcherOptions().max_inflight, 1);
  EXPECT_EQ(o->metrics_addr, "");
  auto m = ParseOptions({"servers=h:1,h:2,h:3", "certs=/c",
                         "metrics_addr = 127.0.0.1:9100"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->metrics_addr, "127.0.0.1:9100");
  // Three relations instead of a list.
  EXPECT_TRUE(ParseOptions({"servers=h:1", "servers=h:2", "servers=h:3",
                            "ca=a", "cert=b", "key=c"})
                  .ok());
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"servers=h:1,h:2", "certs=/c"},
           {"servers=h:1,h:2,h", "certs=/c"},
           {"servers=h:1,h:2,h:3"},
           {"servers=h:1,h:2,h:3", "certs=/c", "batch_window_ms=-1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "early_flush=maybe"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate=2"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_ttl_ms=0"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_max=1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_ttl_ms=600000"},
           {"servers=h:1,h:2,h:3", "certs=/c", "bogus=1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "backlog_batch_jobs=0"},
           {"servers=h:1,h:2,h:3", "certs=/c", "backlog_batch_blocks=x"},
           {"servers=h:1,h:2,h:3", "certs=/c", "noequals"},
           {"servers=h:1,h:2,h:3", "certs=/c", "metrics_addr=9100"},
           {"servers=h:1,h:2,h:3", "certs=/c", "metrics_addr=h:0"}}) {
    EXPECT_FALSE(ParseOptions(bad).ok()) << ::testing::PrintToString(bad);
  }
}

// Several clusters (options.h): numbered relations, later clusters
// inherit cluster 1's mTLS files unless they name their own.
TEST(OptionsTest, ParsesMoreClusters) {
  auto o = ParseOptions({"servers=a:1,a:2,a:3", "certs=/c",
                         "servers2 = b:1, b:2, b:3",
                         "servers3=c:1,c:2,c:3", "certs3=/d"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->clusters.size(), 3u);
  EXPECT_EQ(o->servers[0], "a:1");
  EXPECT_EQ(o->clusters[0].servers, o->servers);
  EXPECT_EQ(o->clusters[1].servers[1], "b:2");
  EXPECT_EQ(o->clusters[1].ca, "/c/ca.pem");
  EXPECT_EQ(o->clusters[2].key, "/d/kdc.key");
  auto one = ParseOptions({"servers=a:1,a:2,a:3", "certs=/c"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->clusters.size(), 1u);
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"servers=a:1,a:2,a:3", "certs=/c", "servers2=b:1,b:2"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers3=c:1,c:2,c:3"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers5=c:1,c:2,c:3"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers2=b:1,b:2,b:3",
            "ca2=/x"},
           {"servers=a:1,a:2,a:3", "certs=/c", "certs2=/d"}}) {
    EXPECT_FALSE(ParseOptions(bad).ok()) << ::testing::PrintToString(bad);
  }
}

// Two fake clusters holding the same key under the same id behind a
// Router (router.h).
class RouterTest : public ::testing::Test {
 protected:
  RouterTest() {
    for (auto& c : clusters_) c.AddKey(kKeyId, kKey);
    options_.window = absl::Milliseconds(5);
  }
  std::unique_ptr<Router> Make() {
    return std::make_unique<Router>(
        options_, std::vector<Transport*>{&clusters_[0], &clusters_[1]},
        &sink_);
  }
  size_t Calls(int c) { return clusters_[c].calls().size(); }

  std::array<FakeCluster, 2> clusters_;
  BatcherOptions options_;
  CollectingSink sink_;
};

TEST_F(RouterTest, PrimaryTakesEverythingWhileHealthy) {
  auto r = Make();
  for (uint64_t t = 1; t <= 20; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(20));
  for (uint64_t t = 1; t <= 20; ++t) EXPECT_TRUE(sink_.Get(t).status.ok());
  EXPECT_GT(Calls(0), 0u);
  EXPECT_EQ(Calls(1), 0u);
  EXPECT_EQ(r->stats().failovers, 0u);
}

// A party of the primary down: every job fails over and completes once;
// a ciphertext made by cluster 2 decrypts on cluster 1 (same key, same id).
TEST_F(RouterTest, FailsOverWhenAPartyOfThePrimaryIsDown) {
  auto r = Make();
  clusters_[0].set_down(1, true);
  const std::string pt = "an EncTicketPart";
  for (uint64_t t = 1; t <= 10; ++t) ASSERT_TRUE(r->Submit(t, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(10));
  for (uint64_t t = 1; t <= 10; ++t)
    ASSERT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  EXPECT_GT(Calls(1), 0u);
  EXPECT_GT(r->stats().failovers, 0u);
  // The primary is avoided now: new jobs go straight to cluster 2.
  const size_t before = Calls(0);
  ASSERT_TRUE(r->Submit(11, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(11));
  EXPECT_EQ(Calls(0), before);
  // Back after Router::kDownFor: cluster 1 decrypts cluster 2's ciphertext.
  clusters_[0].set_down(1, false);
  absl::SleepFor(Router::kDownFor + absl::Milliseconds(50));
  const size_t on2 = Calls(1);
  ASSERT_TRUE(r->Submit(12, Decrypt(sink_.Get(11).output)).ok());
  ASSERT_TRUE(sink_.WaitFor(12));
  Result d = sink_.Get(12);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(Str(d.output), pt);
  EXPECT_EQ(Calls(1), on2);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
  const std::vector<std::string> logs = sink_.logs();
  EXPECT_TRUE(std::any_of(logs.begin(), logs.end(), [](const std::string& l) {
    return absl::StrContains(l, "jobs go to cluster 2");
  }));
}

// A hung party (no answer, no error) fails the primary's batch only at
// its deadline; the jobs still get their try on cluster 2.
TEST_F(RouterTest, HungPrimaryFailsOverAtItsDeadline) {
  options_.deadline = absl::Milliseconds(300);
  auto r = Make();
  clusters_[0].set_hang(2, true);
  const absl::Time start = absl::Now();
  for (uint64_t t = 1; t <= 3; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  for (uint64_t t = 1; t <= 3; ++t)
    EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  EXPECT_GE(sink_.At(1) - start, options_.deadline);
  EXPECT_GT(Calls(1), 0u);
  // While it is down, jobs go to cluster 2 at once.
  auto quick = [&](uint64_t from, uint64_t to) {
    const absl::Time t0 = absl::Now();
    for (uint64_t t = from; t <= to; ++t)
      EXPECT_TRUE(r->Submit(t, Encrypt("y")).ok());
    EXPECT_TRUE(sink_.WaitFor(to));
    size_t n = 0;
    for (uint64_t t = from; t <= to; ++t) {
      EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
      if (sink_.At(t) - t0 < options_.deadline) ++n;
    }
    return n;
  };
  EXPECT_EQ(quick(4, 8), 5u);
  // Its down time over, one job probes it (and waits for the deadline);
  // the others still go to cluster 2 at once.
  absl::SleepFor(Router::kDownFor);
  EXPECT_EQ(quick(9, 13), 4u);
  // Back: the next probe finds it answering, and it is the primary again.
  clusters_[0].set_hang(2, false);
  absl::SleepFor(2 * Router::kDownFor + absl::Milliseconds(300));
  const size_t before14 = Calls(1);
  const size_t before14_0 = Calls(0);
  EXPECT_EQ(quick(14, 14), 1u);
  EXPECT_GT(Calls(0), before14_0);  // the probe went to cluster 1
  EXPECT_EQ(Calls(1), before14);
  const size_t on2 = Calls(1);
  EXPECT_EQ(quick(15, 18), 4u);
  EXPECT_EQ(Calls(1), on2);
}

// Jobs queued behind the hung batch (max_inflight 1) go to cluster 2 as
// soon as that batch fails, not into the hung cluster's next batch.
TEST_F(RouterTest, JobsQueuedOnAFailedClusterMoveAtOnce) {
  options_.deadline = absl::Milliseconds(500);
  auto r = Make();
  clusters_[0].set_hang(0, true);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(r->Submit(1, Encrypt("a")).ok());
  absl::SleepFor(absl::Milliseconds(50));
  for (uint64_t t = 2; t <= 6; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("b")).ok());
  ASSERT_TRUE(sink_.WaitFor(6));
  for (uint64_t t = 1; t <= 6; ++t) {
    EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
    EXPECT_LT(sink_.At(t) - start, options_.deadline * 1.6) << t;
  }
  clusters_[0].set_hang(0, false);
}

TEST_F(RouterTest, BothClustersDownFailsOnceUnavailable) {
  auto r = Make();
  clusters_[0].set_down(0, true);
  clusters_[1].set_down(2, true);
  ASSERT_TRUE(r->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_EQ(sink_.Get(1).status.code(), absl::StatusCode::kUnavailable);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink_.counts().at(1), 1);
}

// A key missing on the primary (kNotFound) is found on cluster 2 without
// taking the primary out of service.
TEST_F(RouterTest, KeyMissingOnThePrimaryIsTriedOnTheOther) {
  const std::string other(32, 'o');
  clusters_[1].AddKey(other, kKey);
  auto r = Make();
  Job j = Encrypt("x");
  j.key_id = other;
  ASSERT_TRUE(r->Submit(1, std::move(j)).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  const size_t before = Calls(0);
  ASSERT_TRUE(r->Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_GT(Calls(0), before);
}

// A tag that does not verify is final: no second try on another cluster.
TEST_F(RouterTest, IntegrityFailureIsNotRetried) {
  auto r = Make();
  ASSERT_TRUE(r->Submit(1, Encrypt("a ticket")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  SecureBytes bad = sink_.Get(1).output;
  bad[18] ^= 1;
  ASSERT_TRUE(r->Submit(2, Decrypt(bad)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_EQ(sink_.Get(2).status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Calls(1), 0u);
}

// The module's metrics: failures by a public cause, batch figures into the
// histograms, the batcher's counters read at render time and left out once
// the source is cleared.
TEST(KdcMetricsTest, CountsAndRenders) {
  KdcMetrics m;
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::DataLossError("tag")), "integrity");
  EXPECT_STREQ(KdcMetrics::CauseOf(absl::UnavailableError("down")),
               "unavailable");
  m.JobDone(absl::OkStatus());
  m.JobDone(absl::OkStatus());
  m.JobDone(absl::DataLossError("tag"));
  m.JobRefused(absl::UnavailableError("queue full"));
  m.BatchDone(false, 3, 30, false, absl::Microseconds(1500));
  m.BatchDone(true, 2, 0, false, absl::Microseconds(300));
  BatcherStats st;
  st.queued_jobs = 5;
  st.speculative_used = 7;
  st.failovers = 4;
  m.SetStatsSource([st] { return st; });
  std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_jobs_completed_total{result=\"ok\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_job_failures_total{cause=\"integrity\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_jobs_refused_total{cause=\"unavailable\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_jobs_sum{kind=\"run\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_latency_seconds_bucket{kind=\"run\",le=\"0.002\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_batch_latency_seconds_bucket{kind=\"run\",le=\"0.001\"} 0\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_queue_jobs 5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_speculative_used_total 7\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kmpc_kdc_failovers_total 4\n")) << text;
  for (const char* name :
       {"kmpc_kdc_run_requests_total 0\n", "kmpc_kdc_finalize_requests_total 0\n",
        "kmpc_kdc_sign_requests_total 0\n", "kmpc_kdc_pads_drawn_total 0\n",
        "kmpc_kdc_pads_used_total 0\n", "kmpc_kdc_pads_wasted_total 0\n",
        "kmpc_kdc_pads_held 0\n", "kmpc_kdc_sign_rerun_total 0\n"})
    EXPECT_TRUE(absl::StrContains(text, name)) << name;
  EXPECT_TRUE(absl::StrContains(text, "process_resident_memory_bytes ")) << text;
  m.ClearStatsSource();
  EXPECT_FALSE(absl::StrContains(m.Render(), "kmpc_kdc_queue_jobs"));
}

}  // namespace
}  // namespace kmpc::kdc
