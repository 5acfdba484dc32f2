// engine/collect.h on one party, from a batch's plan, secrets and AES
// output set by hand: what each job type releases (keystream lanes, a
// state with its mask and powers, a pad, tag shares, an aes*-cts output),
// what a failed check withholds, and the release token a withheld reply
// gives back.
#include "engine/collect.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "batch_testing.h"
#include "engine/keys.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::CtsJob;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;

class CollectTest : public ::testing::Test {
 protected:
  CollectTest() { c_.AddKey(kKey, Bytes(16, 1), Cipher::kAes128); }

  // The batch as the phases before Collect leave it: plans by LookupKeys,
  // lanes placed, an AES output whose lane l, component k is 16 bytes of
  // 2l + k, no check passed.
  BatchState& Planned(const std::vector<Job>& jobs) {
    jobs_ = jobs;
    b_ = std::make_unique<BatchState>(1, jobs_, &c_.budget[0]);
    LookupKeys(c_.ctx(0), *b_, c_.Lookup(0));
    size_t n = 0;
    for (JobPlan& w : b_->plan)
      if (w.aes()) {
        w.lane0 = n;
        n += 1 + w.nks;
      }
    for (int k = 0; k < 2; ++k)
      for (size_t l = 0; l < n; ++l) b_->aes.out[k].insert(b_->aes.out[k].end(), 16, Byte(l, k));
    b_->nlanes = n;
    b_->pass.assign(jobs.size(), false);
    return *b_;
  }
  static uint8_t Byte(size_t lane, int k) { return static_cast<uint8_t>(2 * lane + k); }
  static Bytes Lanes(size_t from, size_t n, int k) {
    Bytes out;
    for (size_t l = from; l < from + n; ++l) out.insert(out.end(), 16, Byte(l, k));
    return out;
  }

  const std::string kKey = KeyId("key");
  PhaseCluster c_;
  std::vector<Job> jobs_;
  std::unique_ptr<BatchState> b_;
};

TEST_F(CollectTest, AnEncryptReleasesItsKeystreamAndAStateWithItsMask) {
  BatchState& b = Planned({CtrJob(pb::JOB_ENCRYPT, kKey, 2)});
  b.plan[0].ctr0[15] = 5;
  const BatchResult r = Collect(c_.ctx(0), b);
  EXPECT_EQ(r.batch_seq, 1u);
  const JobResult& e = r.jobs[0];
  EXPECT_EQ(e.status, pb::JOB_OK);
  EXPECT_EQ(e.ctr0, b.plan[0].ctr0);
  for (int k = 0; k < 2; ++k) EXPECT_EQ(e.keystream[k], Lanes(1, 2, k));
  ASSERT_NE(e.state, nullptr);
  EXPECT_EQ(e.state->party, 0);
  EXPECT_EQ(e.state->key_id, kKey);
  EXPECT_EQ(e.state->usage, 3u);
  EXPECT_EQ(e.state->nblocks, 2u);
  EXPECT_EQ(e.state->ctr0, b.plan[0].ctr0);
  EXPECT_EQ(e.state->mask[1][0], Byte(0, 1));
  EXPECT_NE(e.state->key, nullptr);  // the stored powers: no copy
  EXPECT_TRUE(e.state->h_powers[0].empty());
}

TEST_F(CollectTest, ComputedPowersAreMovedIntoTheState) {
  BatchState& b = Planned({CtrJob(pb::JOB_ENCRYPT, kKey, 1)});
  b.plan[0].m = kStoredHPowers + 2;
  for (int k = 0; k < 2; ++k) b.secrets[0].powers[k].assign(16 * b.plan[0].m, 0x60 + k);
  const BatchResult r = Collect(c_.ctx(0), b);
  ASSERT_NE(r.jobs[0].state, nullptr);
  EXPECT_EQ(r.jobs[0].state->key, nullptr);
  EXPECT_EQ(r.jobs[0].state->h_powers[1], Bytes(16 * (kStoredHPowers + 2), 0x61));
  EXPECT_TRUE(b.secrets[0].powers[1].empty());  // moved, not copied
}

TEST_F(CollectTest, ADecryptReleasesOnlyIfItsTagHeld) {
  Job d = CtrJob(pb::JOB_DECRYPT, kKey);
  d.data.assign(16 + 20 + 16, 1);
  BatchState& b = Planned({d, d});
  b.pass[0] = true;
  const BatchResult r = Collect(c_.ctx(0), b);
  EXPECT_EQ(r.jobs[0].status, pb::JOB_OK);
  EXPECT_EQ(r.jobs[0].keystream[0], Lanes(1, 2, 0));
  EXPECT_EQ(r.jobs[1].status, pb::JOB_INTEGRITY_FAILED);
  EXPECT_TRUE(r.jobs[1].keystream[0].empty() && r.jobs[1].keystream[1].empty());
}

TEST_F(CollectTest, AChecksumReleasesItsTagShares) {
  Job s = CtrJob(pb::JOB_CHECKSUM, kKey);
  s.length = 8;
  s.data_shares = {Bytes(8, 1), Bytes(8, 2)};
  BatchState& b = Planned({s});
  b.secrets[0].tprime[1].fill(0x77);
  const BatchResult r = Collect(c_.ctx(0), b);
  EXPECT_EQ(r.jobs[0].status, pb::JOB_OK) << r.jobs[0].detail;
  EXPECT_EQ(r.jobs[0].tag[1], b.secrets[0].tprime[1]);
}

TEST_F(CollectTest, AJobReleasedOnAFailedCheckIsWithheldWithNothingInIt) {
  Job d = CtrJob(pb::JOB_DECRYPT, kKey);
  d.data.assign(16 + 16 + 16, 1);
  Job e = CtrJob(pb::JOB_ENCRYPT, kKey, 1);
  e.release_if_ok = 0;
  BatchState& b = Planned({d, e});
  b.plan[1].ctr0[0] = 9;
  BatchResult r = Collect(c_.ctx(0), b);
  EXPECT_EQ(r.jobs[1].status, pb::JOB_WITHHELD);
  EXPECT_TRUE(absl::StrContains(r.jobs[1].detail, "did not verify")) << r.jobs[1].detail;
  EXPECT_TRUE(r.jobs[1].keystream[0].empty() && r.jobs[1].keystream[1].empty());
  EXPECT_EQ(r.jobs[1].state, nullptr);
  EXPECT_EQ(r.jobs[1].ctr0, Block{});
  // Its condition verified: released.
  BatchState& again = Planned({d, e});
  again.pass[0] = true;
  r = Collect(c_.ctx(0), again);
  EXPECT_EQ(r.jobs[1].status, pb::JOB_OK);
  EXPECT_NE(r.jobs[1].state, nullptr);
}

TEST_F(CollectTest, AStaleTimestampWithholdsAUserKeysGatedJob) {
  Job d = CtrJob(pb::JOB_DECRYPT, kKey);
  d.data.assign(16 + 16 + 16, 1);
  Job e = CtrJob(pb::JOB_ENCRYPT, kKey, 1);
  e.release_if_ok = 0;
  BatchState& b = Planned({d, e});
  b.pass[0] = true;
  b.stale = {true, false};
  b.plan[1].user_key = false;  // a random key's reply is no verifier
  EXPECT_EQ(Collect(c_.ctx(0), b).jobs[1].status, pb::JOB_OK);
  BatchState& user = Planned({d, e});
  user.pass[0] = true;
  user.stale = {true, false};
  user.plan[1].user_key = true;
  const BatchResult r = Collect(c_.ctx(0), user);
  EXPECT_EQ(r.jobs[0].status, pb::JOB_OK);  // the DECRYPT itself verified
  EXPECT_EQ(r.jobs[1].status, pb::JOB_WITHHELD);
  EXPECT_TRUE(absl::StrContains(r.jobs[1].detail, "clock skew")) << r.jobs[1].detail;
}

TEST_F(CollectTest, AWithheldReplyGivesBackItsReleaseToken) {
  c_.options[0].cts_releases_per_minute = 1;
  Job d = CtrJob(pb::JOB_DECRYPT, kKey);
  d.data.assign(16 + 16 + 16, 1);
  Job e = CtrJob(pb::JOB_ENCRYPT, kKey, 1);
  e.release_if_ok = 0;
  BatchState& b = Planned({d, e});
  b.plan[1].gated_reply = true;
  b.plan[1].deal.fill(0xd1);
  const std::string deal(b.plan[1].deal.begin(), b.plan[1].deal.end());
  ASSERT_TRUE(c_.limiter[0].Take(deal, 1, absl::Now()));  // as LookupKeys took it
  Collect(c_.ctx(0), b);  // withheld: the token comes back
  EXPECT_TRUE(c_.limiter[0].Take(deal, 1, absl::Now()));
  EXPECT_FALSE(c_.limiter[0].Take(deal, 1, absl::Now()));
}

TEST_F(CollectTest, APadCarriesItsCounterMaskAndZeroShareUnlessATicketSpentIt) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 40;
  BatchState& b = Planned({pad});
  b.plan[0].ctr0[1] = 4;
  b.secrets[0].zero.fill(0x5a);
  BatchResult r = Collect(c_.ctx(0), b);
  ASSERT_NE(r.jobs[0].pad, nullptr);
  const PadState& p = *r.jobs[0].pad;
  EXPECT_EQ(p.ctr0, b.plan[0].ctr0);
  EXPECT_EQ(r.jobs[0].ctr0, b.plan[0].ctr0);
  EXPECT_EQ(p.max_length, 40u);
  EXPECT_FALSE(p.verify_only);
  EXPECT_EQ(p.zero, b.secrets[0].zero);
  EXPECT_EQ(p.mask[0][0], Byte(0, 0));
  // A ticket of the batch names it (Job::sign_pad): only ctr0 leaves.
  Job ticket = CtrJob(pb::JOB_ENCRYPT, kKey, 1);
  ticket.sign_pad = 1;
  BatchState& spent = Planned({ticket, pad});
  r = Collect(c_.ctx(0), spent);
  EXPECT_EQ(r.jobs[1].status, pb::JOB_OK);
  EXPECT_EQ(r.jobs[1].pad, nullptr);
}

TEST_F(CollectTest, AVerificationPadHoldsRTimesItsPowersAndMask) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 16;
  pad.checksum.assign(16, 0x21);
  BatchState& b = Planned({pad});
  JobSecrets& s = b.secrets[0];
  for (int k = 0; k < 2; ++k) {
    s.rpowers[k].assign(16 * b.plan[0].m, 0x30 + k);
    s.rmask[k].fill(0x40 + k);
    s.r[k].fill(0x50 + k);
  }
  const BatchResult r = Collect(c_.ctx(0), b);
  ASSERT_NE(r.jobs[0].pad, nullptr);
  const PadState& p = *r.jobs[0].pad;
  EXPECT_TRUE(p.verify_only);
  EXPECT_EQ(p.key, nullptr);
  EXPECT_EQ(p.h_powers[1], Bytes(16 * b.plan[0].m, 0x31));
  EXPECT_EQ(p.mask[1][0], 0x41);
  EXPECT_EQ(p.r[0][0], 0x50);
}

TEST_F(CollectTest, ACtsResultIsItsTasksOutputOrNothing) {
  c_.AddKey(KeyId("cts"), Bytes(16, 2), Cipher::kAes128Cts);
  const auto dec = CtsJob(pb::JOB_DECRYPT, KeyId("cts"), 1, 60);
  const auto enc = CtsJob(pb::JOB_ENCRYPT, KeyId("cts"), 3, 40);
  BatchState& b = Planned({dec[0], enc[0]});
  for (size_t j = 0; j < 2; ++j) {
    b.cts.emplace_back();
    b.cts[j].job = j;
    b.cts[j].type = b.jobs[j].type;
    b.cts[j].out = {Bytes(8, 0x11), Bytes(8, 0x22)};
    b.plan[j].cts_task = static_cast<int64_t>(j);
  }
  const BatchResult r = Collect(c_.ctx(0), b);
  EXPECT_EQ(r.jobs[0].status, pb::JOB_INTEGRITY_FAILED);
  EXPECT_TRUE(r.jobs[0].keystream[0].empty());
  EXPECT_EQ(r.jobs[1].status, pb::JOB_OK);
  EXPECT_EQ(r.jobs[1].keystream[1], Bytes(8, 0x22));
}

}  // namespace
}  // namespace kmpc::engine
