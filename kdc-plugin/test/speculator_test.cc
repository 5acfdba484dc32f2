// The speculator (speculator.h) through the dispatcher against a cluster:
// speculative keystreams for tickets and replies, re-runs when a party
// forgot one, checksum pads and signatures, budgets and expiry.
#include "batcher_fixture.h"
#include "speculator.h"

#include <syslog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest,
                         ::testing::Values(ClusterKind::kFake,
                                           ClusterKind::kReal),
                         KindName);

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
  WaitIdle(b.get());

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
  WaitIdle(b.get());
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
  WaitIdle(b.get());
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

// A fixture whose cluster holds the krbtgt key (tgt_id_, tgt_key_) beside
// kKey.
template <class Base>
class WithKrbtgt : public Base {
 protected:
  const std::string tgt_id_ = std::string(32, 't');
  const std::string tgt_key_ = std::string(32, 'T');
  void SetUp() override {
    Base::SetUp();
    this->cluster_.AddKey(tgt_id_, tgt_key_);
  }
};

// The speculation tests below start from here: ticket (krbtgt key, 56
// bytes) and reply (56 bytes) lengths learnt, then a timestamp DECRYPT on
// an idle cluster, which leaves two 64-byte keystreams. Tokens 1001-1004.
class SpeculationTest : public WithKrbtgt<BatcherTest> {
 protected:
  static BatcherOptions Opts() {
    BatcherOptions o;
    o.window = absl::Seconds(30);
    o.early_flush = true;
    // Jobs submitted back to back stay in one batch, even on a loaded
    // machine (SubmitterIdle flushes them).
    o.coalesce = absl::Seconds(2);
    o.deadline = absl::Seconds(5);
    // The speculated keystreams must outlive a loaded machine's stalls
    // between the Run that drew them and the jobs that use them; 8 s stays
    // below the servers' ENCRYPT-state TTL (services.h, 10 s).
    o.speculate_ttl = absl::Seconds(8);
    return o;
  }
  Job Enc(const std::string& key_id, uint32_t usage, size_t len) {
    Job j = Encrypt(std::string(len, static_cast<char>('a' + usage)), usage);
    j.key_id = key_id;
    return j;
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
  EXPECT_TRUE(sink_.Logged({"re-running them"}));
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
  // The slow answers come `slow` after their call at the earliest, so
  // after t0 + slow: a result delivered (sink_.At, not when this thread
  // woke up) before then did not wait for them, however loaded the
  // machine. Below the 5 s deadline, which would fail the FINALIZE.
  const absl::Duration slow = absl::Seconds(3);
  cluster_.DelayNextFinalize(0, slow);
  cluster_.DelayNextFinalize(2, slow);
  const int runs0 = RunCalls();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->Submit(5, Enc(tgt_id_, 2, 64)).ok());
  ASSERT_TRUE(b->Submit(6, Enc(kKeyId, 3, 64)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(5)));
  for (uint64_t t : {5, 6}) EXPECT_LT(sink_.At(t) - t0, slow) << t;
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

// A batch cut never splits a speculation group: its ENCRYPT jobs are
// released only if the timestamp's tag holds, and the servers can check
// that only within one request (release_if_ok names a job of the same
// batch). Groups of three (the DECRYPT, the ticket's and the reply's
// keystreams) queued behind a cut at 4 jobs go in whole.
TEST_P(SpeculationTest, ABatchCutNeverSplitsAGroup) {
  BatcherOptions o = Opts();
  o.max_jobs = 4;
  o.backlog_jobs = 4;
  o.max_inflight = 1;
  o.speculate_max = 1000;
  auto b = Make(o);
  Speculate(b.get());
  const SecureBytes ts = sink_.Get(1003).output;
  const size_t runs0 = Runs().size(), n0 = sink_.counts().size();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b->Submit(10 + i, Decrypt(ts, 1)).ok());
  b->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 5));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(sink_.Get(10 + i).status.ok()) << i;
  const std::vector<int> sizes = RunSizes();
  ASSERT_GT(sizes.size(), runs0 + 1);  // the cut happened
  for (size_t k = runs0; k < sizes.size(); ++k) EXPECT_EQ(sizes[k] % 3, 0) << k;
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
class PadTest : public WithKrbtgt<FakeBatcherTest> {
 protected:
  static BatcherOptions Opts() {
    BatcherOptions o;  // self-clocked (early flush) by default
    // Jobs submitted back to back stay in one batch (SubmitterIdle
    // flushes them).
    o.coalesce = absl::Seconds(2);
    o.deadline = absl::Seconds(5);
    return o;
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
  // token's result is a checksum of `msg` under the krbtgt key.
  void ExpectSignedOver(uint64_t token, const std::string& msg) {
    const Result r = sink_.Get(token);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.output.size(), 32u);
    const std::string out = Str(r.output);
    EXPECT_EQ(out.substr(16), cluster_.Tag(tgt_key_, 17, out.substr(0, 16), msg, true));
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
  // Every pad named in party p's Sign requests (a chained item's two),
  // once each.
  std::vector<std::pair<std::string, uint64_t>> SignedPads(int p) {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const std::string& raw : fake_.received_signs(p)) {
      kmpc::v1::SignRequest r;
      EXPECT_TRUE(r.ParseFromString(raw));
      for (const auto& it : r.items()) {
        out.emplace_back(it.run_batch_id(), it.job_id());
        if (it.has_chain()) out.emplace_back(it.chain().run_batch_id(), it.chain().job_id());
      }
    }
    return out;
  }
  // [MS-PAC] PACTYPE: 4 buffers, version 0 (only its header matters here).
  static std::string Pac() {
    return std::string("\x04\0\0\0\0\0\0\0", 8) + std::string(92, 'p');
  }
  // An AS exchange whose ticket carries the PAC's server signature: the
  // timestamp's DECRYPT, the Pac() signed under the krbtgt key (*sig), the
  // KDC signature, then the ticket (*tgt, its plaintext holding *sig) and
  // the reply.
  void AsWithPac(Batcher* b, const SecureBytes& ts, std::string* sig, SecureBytes* tgt) {
    const uint64_t d = Do(b, {Decrypt(ts, 1)})[0];
    ASSERT_TRUE(sink_.Get(d).status.ok());
    *sig = Str(sink_.Get(Do(b, {Tgt(Checksum(Pac(), 17))})[0]).output);
    ExpectSignedOver(Do(b, {Tgt(Checksum(*sig, 17))})[0], *sig);
    const std::string plain = std::string(8, 'a') + *sig + std::string(16, 'z');
    auto t = Do(b, {Tgt(Encrypt(plain, 2)), Encrypt(std::string(56, 'r'), 3)});
    *tgt = sink_.Get(t[0]).output;
  }
  // A TGS-REQ's steps: the TGT's DECRYPT (which must hold), then the
  // VERIFY_CHECKSUM of Pac() against `checksum`; returns the VERIFY's status.
  absl::Status Tgs(Batcher* b, const SecureBytes& tgt, const std::string& checksum) {
    EXPECT_TRUE(sink_.Get(Do(b, {Tgt(Decrypt(tgt, 2))})[0]).status.ok());
    Job v = Tgt(Checksum(Pac(), 17));
    v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
    v.checksum = checksum;
    return sink_.Get(Do(b, {std::move(v)})[0]).status;
  }
  // A timestamp (an ENCRYPT of usage 1) for AsExchange and its DECRYPT.
  SecureBytes Timestamp(Batcher* b) {
    return sink_.Get(Do(b, {Encrypt("a timestamp", 1)})[0]).output;
  }
  // The tests below start from here: one AS exchange learnt, then its
  // timestamp's DECRYPT, which draws and holds two pads. *ts: the timestamp.
  void HoldTwoPads(Batcher* b, SecureBytes* ts) {
    *ts = Timestamp(b);
    ASSERT_NO_FATAL_FAILURE(AsExchange(b, *ts));
    ASSERT_TRUE(sink_.Get(Do(b, {Decrypt(*ts, 1)})[0]).status.ok());
    ASSERT_EQ(b->stats().pads_held, 2u);
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
  const SecureBytes ts = Timestamp(b.get());
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
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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

// A server whose Sign answer carries tag shares of another total size than
// one per JOB_OK result (surplus or short): the request fails, naming that
// party, and the checksum runs as an ordinary CHECKSUM with a right tag.
TEST_P(PadTest, TagSharesOfTheWrongSizeFailTheSign) {
  auto b = Make(Opts());
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  uint64_t reruns = b->stats().sign_rerun;
  for (const int extra : {16, -1}) {
    fake_.set_tag_shares_extra(2, extra);
    const BatcherStats s0 = b->stats();
    const uint64_t t = Do(b.get(), {Sig(100, extra > 0 ? 'u' : 'v')})[0];
    ExpectSigned(t, 100, extra > 0 ? 'u' : 'v');
    const BatcherStats s1 = b->stats();
    EXPECT_EQ(s1.sign_requests - s0.sign_requests, 1u) << extra;
    EXPECT_EQ(s1.sign_rerun, ++reruns) << extra;
    EXPECT_EQ(s1.run_requests - s0.run_requests, 1u) << extra;
    const std::string want = absl::StrCat("party 2 (fake) returned ", 16 + extra,
                                          " bytes of tag shares for 1 JOB_OK results");
    EXPECT_TRUE(sink_.Logged({want})) << want;
  }
  fake_.set_tag_shares_extra(2, 0);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// Chained signatures (speculator.h): a PAC server signature under a held
// pad takes the second held pad along in its Sign item; the KDC signature
// over it (its 32 bytes, under the same key) is then answered at once,
// without a request: one Sign request for the two, both tags right, both
// pads named once to every party, the message only as shares.
TEST_P(PadTest, ChainedKdcSignatureNeedsNoRequest) {
  auto b = Make(Opts());
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  const BatcherStats s0 = b->stats();
  const int runs0 = RunCalls();
  const uint64_t t1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  ExpectSignedOver(t1, Pac());
  const std::string sig = Str(sink_.Get(t1).output);
  const uint64_t t2 = Do(b.get(), {Tgt(Checksum(sig, 17))})[0];
  ExpectSignedOver(t2, sig);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 1u);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 1u);
  EXPECT_EQ(s1.chains_sent - s0.chains_sent, 1u);
  EXPECT_EQ(s1.chained_used - s0.chained_used, 1u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
  EXPECT_EQ(s1.pads_held, 0u);
  EXPECT_EQ(RunCalls(), runs0);
  // Two different counters: each pad signed once.
  EXPECT_NE(Str(sink_.Get(t2).output).substr(0, 16), sig.substr(0, 16));
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(fake_.received_signs(p).size(), 1u) << p;
    kmpc::v1::SignRequest r;
    ASSERT_TRUE(r.ParseFromString(fake_.received_signs(p)[0]));
    ASSERT_EQ(r.items_size(), 1);
    ASSERT_TRUE(r.items(0).has_chain());
    EXPECT_NE(std::make_pair(r.items(0).run_batch_id(), r.items(0).job_id()),
              std::make_pair(r.items(0).chain().run_batch_id(), r.items(0).chain().job_id()));
    EXPECT_EQ(fake_.received_signs(p)[0].find(std::string(40, 'p')), std::string::npos);
  }
  // The answer went with its use: the same message again runs.
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig, 17))})[0], sig);
  EXPECT_EQ(b->stats().chained_used, s1.chained_used);
  EXPECT_EQ(RunCalls(), runs0 + 1);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// A chain's second pad is an unlinked one only: a linked pad is its
// ticket keystream's (a TGS-REQ on that ticket names its counter to verify
// the PAC), so a chain that took it would leave that keystream's next
// verification without a pad. With only linked pads left beside the one
// the server signature takes, the KDC signature is a request of its own
// and the other linked pad stays held.
TEST_P(PadTest, ChainTakesNoLinkedPad) {
  auto b = Make(Opts());
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  // A second exchange's DECRYPT draws pads too, the first of them linked
  // (one linked pad per AS group): two linked pads held, the rest unlinked.
  const SecureBytes ts2 = Timestamp(b.get());
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts2, 1)})[0]).status.ok());
  const size_t held = b->stats().pads_held;
  ASSERT_GE(held, 3u);
  // Signatures of other messages take the unlinked pads (unlinked first).
  for (size_t i = 0; i < held - 2; ++i)
    ExpectSigned(Do(b.get(), {Sig(90, static_cast<char>('k' + i))})[0], 90,
                 static_cast<char>('k' + i));
  ASSERT_EQ(b->stats().pads_held, 2u);
  const BatcherStats s0 = b->stats();
  const uint64_t t1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  ExpectSignedOver(t1, Pac());
  const std::string sig = Str(sink_.Get(t1).output);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.chains_sent - s0.chains_sent, 0u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 1u);
  EXPECT_EQ(s1.pads_held, 1u);
  // The KDC signature: signed the ordinary way, correct.
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig, 17))})[0], sig);
  EXPECT_EQ(b->stats().chained_used, s0.chained_used);
}

// With chain_signatures off, the same exchange is two Sign requests, each
// item under one pad (what the chained test above saves).
TEST_P(PadTest, UnchainedKdcSignatureIsARequestOfItsOwn) {
  BatcherOptions o = Opts();
  o.chain_signatures = false;
  auto b = Make(o);
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  const BatcherStats s0 = b->stats();
  const uint64_t t1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  ExpectSignedOver(t1, Pac());
  const std::string sig = Str(sink_.Get(t1).output);
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig, 17))})[0], sig);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 2u);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  EXPECT_EQ(s1.chains_sent, 0u);
  EXPECT_EQ(s1.chained_used, 0u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
}

// A kept second signature answers only its own message under its own key:
// another 32-byte message (or the same under another usage) goes the
// usual way, and the right one still finds it.
TEST_P(PadTest, ChainedSignatureAnswersOnlyItsMessage) {
  auto b = Make(Opts());
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  const uint64_t t1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  const std::string sig = Str(sink_.Get(t1).output);
  std::string other = sig;
  other[31] ^= 1;
  const BatcherStats s0 = b->stats();
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(other, 17))})[0], other);
  const uint64_t u = Do(b.get(), {Tgt(Checksum(sig, 18))})[0];
  ASSERT_TRUE(sink_.Get(u).status.ok());
  EXPECT_EQ(Str(sink_.Get(u).output).substr(16),
            cluster_.Tag(tgt_key_, 18, Str(sink_.Get(u).output).substr(0, 16), sig, true));
  EXPECT_EQ(b->stats().chained_used, s0.chained_used);
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig, 17))})[0], sig);
  EXPECT_EQ(b->stats().chained_used, s0.chained_used + 1);
}

// A server that adds an error to its share of the chained second tag
// makes only that signature wrong (what the KDC signature's verifier
// refuses); the first is right. One that makes the chain fail (a pad
// forgotten) costs a Run for the first, and the second takes its own way:
// both right, each answered once.
TEST_P(PadTest, DeviatingServerInAChainOnlyBreaksThatSignature) {
  auto b = Make(Opts());
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
  fake_.set_chain_tag_share_error(1, std::string(16, '\x5a'));
  const uint64_t t1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  ExpectSignedOver(t1, Pac());
  const std::string sig = Str(sink_.Get(t1).output);
  const Result r2 = sink_.Get(Do(b.get(), {Tgt(Checksum(sig, 17))})[0]);
  ASSERT_TRUE(r2.status.ok());
  const std::string out = Str(r2.output);
  std::string want = cluster_.Tag(tgt_key_, 17, out.substr(0, 16), sig, true);
  EXPECT_NE(out.substr(16), want);
  for (int i = 0; i < 16; ++i) want[i] ^= 0x5a;
  EXPECT_EQ(out.substr(16), want);  // off by exactly that server's error
  fake_.set_chain_tag_share_error(1, "");
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  ASSERT_EQ(b->stats().pads_held, 2u);
  fake_.ForgetPads(2);
  const BatcherStats s0 = b->stats();
  const uint64_t u1 = Do(b.get(), {Tgt(Checksum(Pac(), 17))})[0];
  ExpectSignedOver(u1, Pac());
  const std::string sig2 = Str(sink_.Get(u1).output);
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig2, 17))})[0], sig2);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_rerun - s0.sign_rerun, 1u);
  EXPECT_EQ(s1.chained_used, s0.chained_used);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
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
  const SecureBytes ts = Timestamp(b.get());
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
// Run's VERIFY) after the Run's re-check, a VERIFY at another counter
// runs.
TEST_P(PadTest, TgtServerSignatureIsVerifiedWithoutARun) {
  auto b = Make(Opts());
  const SecureBytes ts = Timestamp(b.get());
  SecureBytes tgt;
  std::string sig;
  // Learns the krbtgt key, the lengths and the signatures.
  ASSERT_NO_FATAL_FAILURE(AsWithPac(b.get(), ts, &sig, &tgt));
  ASSERT_NO_FATAL_FAILURE(AsWithPac(b.get(), ts, &sig, &tgt));
  std::string want;
  ASSERT_TRUE(contract::LinkedPadCtr0(Str(tgt).substr(0, 16), &want));
  EXPECT_EQ(sig.substr(0, 16), want);  // the signature's counter is linked
  auto tgs = [&](const std::string& checksum) { return Tgs(b.get(), tgt, checksum); };
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
  // The TGT's DECRYPT and the re-check of the refused tag.
  EXPECT_EQ(s2.run_requests - s1.run_requests, 2u);
  EXPECT_EQ(s2.verify_pads_used - s1.verify_pads_used, 1u);
  EXPECT_EQ(s2.verify_disagreed, 0u);
  // Another counter: no verification pad there, a Run of its own.
  std::string other = sig;
  other[3] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(tgs(other)));
  BatcherStats s3 = b->stats();
  EXPECT_EQ(s3.run_requests - s2.run_requests, 2u);
  EXPECT_EQ(s3.verify_pads_used, s2.verify_pads_used);
  // The verify items carried shares of the PAC and of the presented tag
  // (a PAC signature, bytes of the ticket's plaintext), never either.
  for (int p = 0; p < 3; ++p) {
    for (const std::string& raw : fake_.received_signs(p)) {
      EXPECT_EQ(raw.find(std::string(40, 'p')), std::string::npos);
      EXPECT_EQ(raw.find(sig.substr(16)), std::string::npos);
      EXPECT_EQ(raw.find(wrong.substr(16)), std::string::npos);
    }
    for (const std::string& raw : fake_.received(p))
      EXPECT_EQ(raw.find(sig.substr(16)), std::string::npos);
  }
}

// One deviating server (issue 25, "Signing stays secure"): an error it
// XORs into its share of a verify item's answer makes the answers refuse
// a signature that holds; the Run's VERIFY_CHECKSUM re-checks it, accepts,
// and the security event is logged and counted. A wrong tag stays refused.
// An error in a signing item's share gives a tag off by exactly that error
// (the KDC cannot tell; the signature is invalid, whatever the key or the
// message). Nothing here depends on a secret: the same error, the same
// outcome.
TEST_P(PadTest, DeviatingServerInASignOrVerifyItem) {
  auto b = Make(Opts());
  const SecureBytes ts = Timestamp(b.get());
  SecureBytes tgt;
  std::string sig;
  ASSERT_NO_FATAL_FAILURE(AsWithPac(b.get(), ts, &sig, &tgt));
  ASSERT_NO_FATAL_FAILURE(AsWithPac(b.get(), ts, &sig, &tgt));
  auto tgs = [&](const std::string& checksum) { return Tgs(b.get(), tgt, checksum); };
  const std::string error = "\x01 sixteen bytes";
  for (int cheat = 0; cheat < 3; ++cheat) {
    fake_.set_tag_share_error(cheat, /*sign=*/false, error);
    const BatcherStats s0 = b->stats();
    const size_t logs0 = sink_.logs().size();
    EXPECT_TRUE(tgs(sig).ok()) << cheat;
    const BatcherStats s1 = b->stats();
    EXPECT_EQ(s1.verify_pads_used - s0.verify_pads_used, 1u) << cheat;
    EXPECT_EQ(s1.run_requests - s0.run_requests, 2u) << cheat;  // + re-check
    EXPECT_EQ(s1.verify_disagreed - s0.verify_disagreed, 1u) << cheat;
    EXPECT_EQ(s1.sign_rerun, s0.sign_rerun) << cheat;
    bool logged = false;
    const auto logs = sink_.logs();
    for (size_t i = logs0; i < logs.size(); ++i)
      logged |= absl::StrContains(logs[i], "ring-free verify disagreed with the MPC check");
    EXPECT_TRUE(logged) << cheat;
    std::string wrong = sig;
    wrong[20] ^= 1;
    EXPECT_TRUE(absl::IsDataLoss(tgs(wrong))) << cheat;
    EXPECT_EQ(b->stats().verify_disagreed, s1.verify_disagreed) << cheat;
    fake_.set_tag_share_error(cheat, false, "");
  }
  // A signing item: the tag is off by the error, nothing else changes.
  fake_.set_tag_share_error(1, /*sign=*/true, error);
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  const BatcherStats s0 = b->stats();
  const std::string out = Str(sink_.Get(Do(b.get(), {Sig(32, 'k')})[0]).output);
  ASSERT_EQ(b->stats().pads_used - s0.pads_used, 1u);
  ASSERT_EQ(out.size(), 32u);
  std::string want = cluster_.Tag(tgt_key_, 17, out.substr(0, 16), std::string(32, 'k'), true);
  for (int i = 0; i < 16; ++i) want[i] ^= error[i];
  EXPECT_EQ(out.substr(16), want);
  fake_.set_tag_share_error(1, true, "");
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// A ticket that takes the keystream a linked pad was drawn for before any
// PAC signature reserved it (Speculator::UseHeld) unlinks that pad: it
// signs as an unlinked one from then on (held_pads_, newest first), so
// both PAC signatures of the exchange still need no Run and no pad is
// used twice or lost.
TEST_P(PadTest, ATicketTakingALinkedKeystreamUnlinksItsPad) {
  auto b = Make(Opts());
  const SecureBytes ts = Timestamp(b.get());
  const std::string pac = Pac();
  auto pac_sig = [&] {
    return sink_.Get(Do(b.get(), {Tgt(Checksum(pac, 17))})[0]);
  };
  // Learning: two signatures per AS under the krbtgt key, the lengths.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
    const std::string sig = Str(pac_sig().output);
    ExpectSignedOver(Do(b.get(), {Tgt(Checksum(sig, 17))})[0], sig);
    const std::string plain = std::string(8, 'a') + sig + std::string(16, 'z');
    for (uint64_t t : Do(b.get(), {Tgt(Encrypt(plain, 2)),
                                   Encrypt(std::string(56, 'r'), 3)}))
      ASSERT_TRUE(sink_.Get(t).status.ok());
  }
  const BatcherStats s0 = b->stats();
  ASSERT_TRUE(sink_.Get(Do(b.get(), {Decrypt(ts, 1)})[0]).status.ok());
  // The ticket first: it takes the held keystream the linked pad is for.
  const std::string plain = std::string(8, 'a') + std::string(32, 'n') +
                            std::string(16, 'z');
  const auto t = Do(b.get(), {Tgt(Encrypt(plain, 2)),
                              Encrypt(std::string(56, 'r'), 3)});
  ASSERT_TRUE(sink_.Get(t[0]).status.ok());
  const Result r = pac_sig();
  ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectSignedOver(Do(b.get(), {Tgt(Checksum(Str(r.output), 17))})[0], Str(r.output));
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);  // the DECRYPT only
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
  EXPECT_EQ(s1.sign_rerun, 0u);
  EXPECT_EQ(s1.speculative_used - s0.speculative_used, 2u);  // ticket, reply
  // The unlinked pad (its ticket keystream gone) is the newest unlinked
  // one: the PAC took it, at the ticket's ctr0 + 2^17.
  std::string linked;
  ASSERT_TRUE(contract::LinkedPadCtr0(Str(sink_.Get(t[0]).output).substr(0, 16),
                                      &linked));
  EXPECT_EQ(Str(r.output).substr(0, 16), linked);
  // Every pad signed once.
  for (int p = 0; p < 3; ++p) {
    auto pads = SignedPads(p);
    std::set<std::pair<std::string, uint64_t>> once(pads.begin(), pads.end());
    EXPECT_EQ(once.size(), pads.size());
  }
}

// A held pad signs only a CHECKSUM it fits: same key id, cipher and usage,
// a message no longer than the pad. Others run as before and leave the
// pads held.
TEST_P(PadTest, OnlyAFittingChecksumUsesAPad) {
  auto b = Make(Opts());
  // 128 bytes each: 100 learnt, and room for a starttime the learnt
  // messages lacked (a ticket issued a second after its authtime).
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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
  SecureBytes ts;
  ASSERT_NO_FATAL_FAILURE(HoldTwoPads(b.get(), &ts));
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
  const SecureBytes ts = Timestamp(b.get());
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
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
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

// HeldList's look-up by ctr0 (a linked pad's ticket keystream, a
// verification pad): the newest of the right key, usage and cipher;
// taking one keeps the other indexes whole (TakeNewest, pop_front after).
TEST(HeldListTest, FindAndTakeByCtr0) {
  auto held = [](std::string key, uint32_t usage, std::string ctr0,
                 uint64_t job) {
    HeldKeystream h;
    h.key_id = std::move(key);
    h.usage = usage;
    h.cipher = kmpc::v1::CIPHER_AES256;
    h.ctr0 = std::move(ctr0);
    h.run_job_id = job;
    return h;
  };
  const std::string c1(16, '1'), c2(16, '2'), c3(16, '3');
  HeldList l;
  l.push_back(held("k", 2, c1, 1));
  l.push_back(held("k", 2, c2, 2));
  l.push_back(held("k", 17, c2, 3));  // same ctr0, other usage
  l.push_back(held("k", 2, c2, 4));   // a twin: newest first
  l.push_back(held("k", 2, c3, 5));
  const auto cipher = kmpc::v1::CIPHER_AES256;
  EXPECT_EQ(l.Find("k", 2, cipher, std::string(16, '9')), nullptr);
  EXPECT_EQ(l.Find("other", 2, cipher, c1), nullptr);
  EXPECT_EQ(l.Find("k", 2, kmpc::v1::CIPHER_AES128, c1), nullptr);
  ASSERT_NE(l.Find("k", 17, cipher, c2), nullptr);
  EXPECT_EQ(l.Find("k", 17, cipher, c2)->run_job_id, 3u);
  HeldKeystream out;
  ASSERT_TRUE(l.Take("k", 2, cipher, c2, &out));
  EXPECT_EQ(out.run_job_id, 4u);
  ASSERT_TRUE(l.Take("k", 2, cipher, c2, &out));
  EXPECT_EQ(out.run_job_id, 2u);
  EXPECT_FALSE(l.Take("k", 2, cipher, c2, &out));
  EXPECT_EQ(l.size(), 3u);
  // The key's own list lost exactly those two: newest first is job 5.
  // Too short for the message (Length: an empty keystream): passed over.
  EXPECT_FALSE(l.TakeNewest("k", 2, cipher, 1,
                            [](const HeldKeystream&) { return true; }, &out));
  ASSERT_TRUE(l.TakeNewest("k", 2, cipher, 0,
                           [](const HeldKeystream&) { return true; }, &out));
  EXPECT_EQ(out.run_job_id, 5u);
  EXPECT_EQ(l.Find("k", 2, cipher, c3), nullptr);
  l.pop_front();  // job 1
  EXPECT_EQ(l.Find("k", 2, cipher, c1), nullptr);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l.front().run_job_id, 3u);
  ASSERT_TRUE(l.Take("k", 17, cipher, c2, &out));
  EXPECT_TRUE(l.empty());
}

// Take finds its element in the key's list by push order (binary search):
// taking elements from anywhere in a long list, in any order, takes
// exactly those and leaves the rest newest first.
TEST(HeldListTest, TakeFromAnywhereInALongList) {
  const auto cipher = kmpc::v1::CIPHER_AES256;
  auto ctr = [](int i) {
    std::string c(16, '\0');
    std::memcpy(c.data(), &i, sizeof(i));
    return c;
  };
  HeldList l;
  constexpr int kN = 1000;
  for (int i = 0; i < kN; ++i) {
    HeldKeystream h;
    h.key_id = "k";
    h.usage = 17;
    h.cipher = cipher;
    h.pad = true;
    h.pad_length = 64;
    h.ctr0 = ctr(i);
    h.run_job_id = static_cast<uint64_t>(i);
    l.push_back(std::move(h));
  }
  HeldKeystream out;
  // Every third element, from the middle outwards and back.
  std::vector<int> taken;
  for (int i = kN / 2; i < kN; i += 3) taken.push_back(i);
  for (int i = kN / 2 - 3; i >= 0; i -= 3) taken.push_back(i);
  for (int i : taken) {
    ASSERT_TRUE(l.Take("k", 17, cipher, ctr(i), &out)) << i;
    EXPECT_EQ(out.run_job_id, static_cast<uint64_t>(i));
    EXPECT_FALSE(l.Take("k", 17, cipher, ctr(i), &out)) << i;
  }
  ASSERT_EQ(l.size(), kN - taken.size());
  std::set<int> gone(taken.begin(), taken.end());
  for (int i = kN - 1; i >= 0; --i) {
    if (gone.count(i)) continue;
    ASSERT_TRUE(l.TakeNewest("k", 17, cipher, 64,
                             [](const HeldKeystream&) { return true; }, &out));
    EXPECT_EQ(out.run_job_id, static_cast<uint64_t>(i));
  }
  EXPECT_TRUE(l.empty());
}

}  // namespace
}  // namespace kmpc::kdc
