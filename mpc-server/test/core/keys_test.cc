// engine/keys.h: a Run's first phase on one party (no ring): the job
// checks and plans, this party's key for every job and its release bound,
// the key views' encoding, and what the three views decide, alike on
// every party.
#include "engine/keys.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "batch_testing.h"
#include "protocol/gf128.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::CtsJob;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;

class KeysTest : public ::testing::Test {
 protected:
  KeysTest() {
    c_.AddKey(kKey, Bytes(16, 1), Cipher::kAes128);
    c_.AddKey(kUser, Bytes(16, 2), Cipher::kAes128, KeyKind::kUser);
  }
  // LookupKeys of `jobs` on `party`: its plans.
  std::vector<JobPlan> Plan(const std::vector<Job>& jobs, int party = 0) {
    BatchState b(1, jobs, &c_.budget[party]);
    LookupKeys(c_.ctx(party), b, c_.Lookup(party));
    return std::move(b.plan);
  }
  const std::string kKey = KeyId("key");
  const std::string kUser = KeyId("user");
  PhaseCluster c_;
};

TEST_F(KeysTest, PlansAnEncryptUnderAPresentKey) {
  const auto plan = Plan({CtrJob(pb::JOB_ENCRYPT, kKey, 3)});
  const JobPlan& w = plan[0];
  EXPECT_EQ(w.status, pb::JOB_OK) << w.detail;
  EXPECT_TRUE(w.live() && w.aes());
  EXPECT_EQ(w.key_view, kViewPresent);
  EXPECT_EQ(w.cipher, pb::CIPHER_AES128);
  EXPECT_TRUE(w.needs_ctr0);
  EXPECT_FALSE(w.ctr0_drawn);
  EXPECT_FALSE(w.check);
  EXPECT_EQ(w.nks, 3u);
  EXPECT_EQ(w.m, protocol::GhashBlocks(4, 48));
  EXPECT_FALSE(w.user_key);
  EXPECT_EQ(w.deal, w.key->Origin());
}

TEST_F(KeysTest, PlansADecryptFromItsCiphertext) {
  Job d = CtrJob(pb::JOB_DECRYPT, kKey);
  d.data.assign(16 + 20 + 16, 0);
  d.data[0] = 0x42;                       // ctr0
  for (int k = 0; k < 16; ++k) d.data[36 + k] = static_cast<uint8_t>(k);  // T
  const JobPlan w = Plan({d})[0];
  EXPECT_EQ(w.status, pb::JOB_OK) << w.detail;
  EXPECT_FALSE(w.needs_ctr0);
  EXPECT_TRUE(w.check);
  EXPECT_EQ(w.ctr0[0], 0x42);
  EXPECT_EQ(w.nks, 2u);                   // 20 bytes of C
  EXPECT_EQ(w.tag[15], 15);
  EXPECT_EQ(w.m, w.ghash_in.size() / 16);
}

TEST_F(KeysTest, AKeyMissingOrUnusableHereFailsTheJobAndShowsInItsView) {
  // No shares.
  JobPlan w = Plan({CtrJob(pb::JOB_ENCRYPT, KeyId("nobody"), 1)})[0];
  EXPECT_EQ(w.status, pb::JOB_UNKNOWN_KEY);
  EXPECT_EQ(w.key_view, kViewMissing);
  // Another party's view in this party's store.
  c_.store[0][KeyId("other")] = c_.store[1][kKey];
  w = Plan({CtrJob(pb::JOB_ENCRYPT, KeyId("other"), 1)})[0];
  EXPECT_EQ(w.status, pb::JOB_KEY_INCONSISTENT);
  EXPECT_EQ(w.key_view, kViewBad);
  // A store that fails.
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, [](absl::string_view) {
    return absl::StatusOr<std::shared_ptr<const KeyShares>>(absl::InternalError("disk"));
  });
  EXPECT_EQ(b.plan[0].status, pb::JOB_KEY_INCONSISTENT);
  EXPECT_EQ(b.plan[0].key_view, kViewBad);
  EXPECT_EQ(b.plan[0].key, nullptr);
}

TEST_F(KeysTest, MalformedConditionsFailAloneBeforeTheKeyIsLookedUp) {
  // release_if_ok naming an ENCRYPT, and itself.
  Job a = CtrJob(pb::JOB_ENCRYPT, kKey, 1), b = a;
  b.release_if_ok = 0;
  Job self = a;
  self.release_if_ok = 2;
  // Two PADs at one ENCRYPT's slot.
  Job p1 = CtrJob(pb::JOB_PAD, kKey);
  p1.length = 16;
  p1.pad_after = 0;
  p1.pad_slot = 1;
  const Job p2 = p1;
  const auto plan = Plan({a, b, self, p1, p2});
  EXPECT_EQ(plan[0].status, pb::JOB_OK);
  for (size_t j : {1, 2, 3, 4}) {
    EXPECT_EQ(plan[j].status, pb::JOB_MALFORMED) << j;
    EXPECT_EQ(plan[j].key_view, kViewNone) << j;  // no key looked up
  }
  EXPECT_TRUE(absl::StrContains(plan[1].detail, "release_if_ok")) << plan[1].detail;
  EXPECT_TRUE(absl::StrContains(plan[3].detail, "same ENCRYPT and slot")) << plan[3].detail;
}

TEST_F(KeysTest, AGatedReplyTakesItsKeysReleaseToken) {
  c_.AddKey(KeyId("cts-user"), Bytes(16, 3), Cipher::kAes128Cts, KeyKind::kUser);
  c_.options[0].cts_releases_per_minute = 1;
  auto dec = CtsJob(pb::JOB_DECRYPT, KeyId("cts-user"), 1, 60);
  auto enc = CtsJob(pb::JOB_ENCRYPT, KeyId("cts-user"), 3, 40);
  enc[0].release_if_ok = 0;
  const std::vector<Job> jobs = {dec[0], enc[0]};
  std::vector<JobPlan> plan = Plan(jobs);
  EXPECT_TRUE(plan[0].user_key);
  EXPECT_FALSE(plan[0].gated_reply);
  EXPECT_TRUE(plan[1].gated_reply);
  EXPECT_FALSE(plan[1].over_rate);
  // The bucket held one token: the next batch's reply is over the bound.
  plan = Plan(jobs);
  EXPECT_TRUE(plan[1].over_rate);
  EXPECT_EQ(plan[1].status, pb::JOB_OK);  // fails in DecideKey, alike
}

TEST_F(KeysTest, UserKeyRuleFailsWhatAUsersCtrKeyMayNotRun) {
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kUser, 1),
                                 CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, c_.Lookup(0));
  ApplyUserKeyRule(b);
  EXPECT_EQ(b.plan[0].status, pb::JOB_MALFORMED);
  EXPECT_FALSE(b.plan[0].detail.empty());
  EXPECT_EQ(b.plan[1].status, pb::JOB_OK) << b.plan[1].detail;
}

TEST_F(KeysTest, SpentBySignatureAndShapeOf) {
  Job t = CtrJob(pb::JOB_ENCRYPT, kKey, 2);
  EXPECT_EQ(ShapeOf(t).length, 32u);  // a ctr-mpc ENCRYPT's: 16 nblocks
  t.sign_pad = 1;
  const std::vector<Job> jobs = {t, CtrJob(pb::JOB_PAD, kKey)};
  EXPECT_TRUE(SpentBySignature(jobs, 1));
  EXPECT_FALSE(SpentBySignature(jobs, 0));
}

// Three views of one job's key, party p's from plans[p].
void DecideFrom(JobPlan& w, const std::array<JobPlan, 3>& plans) {
  std::array<std::array<uint8_t, kKeyViewBytes>, 3> v;
  for (int p = 0; p < 3; ++p) EncodeKeyView(plans[p], v[p].data());
  DecideKey(w, {v[0].data(), v[1].data(), v[2].data()});
}

TEST_F(KeysTest, ThreeViewsDecideAlike) {
  const Job job = CtrJob(pb::JOB_ENCRYPT, kKey, 1);
  std::array<JobPlan, 3> plans;
  for (int p = 0; p < 3; ++p) plans[p] = Plan({job}, p)[0];
  JobPlan w = plans[0];
  DecideFrom(w, plans);
  EXPECT_EQ(w.status, pb::JOB_OK) << w.detail;

  // Party 1 is over its release bound: every party fails the job.
  std::array<JobPlan, 3> over = plans;
  over[1].over_rate = true;
  uint8_t view[kKeyViewBytes];
  EncodeKeyView(over[1], view);
  EXPECT_EQ(view[1] & kViewOverRate, kViewOverRate);
  w = plans[0];
  DecideFrom(w, over);
  EXPECT_EQ(w.status, pb::JOB_RATE_LIMITED);
  EXPECT_TRUE(absl::StrContains(w.detail, "--cts_releases_per_minute")) << w.detail;
  over[1].over_rate = false;
  over[2].over_budget = true;
  w = plans[0];
  DecideFrom(w, over);
  EXPECT_EQ(w.status, pb::JOB_RATE_LIMITED);
  EXPECT_TRUE(absl::StrContains(w.detail, "failure budget")) << w.detail;

  // Party 2 holds another dealing.
  std::array<JobPlan, 3> other = plans;
  auto redealt = DealKey(Cipher::kAes128, Bytes(16, 1));
  ASSERT_TRUE(redealt.ok());
  other[2].key = std::make_shared<const KeyShares>((*redealt)[2]);
  w = plans[0];
  DecideFrom(w, other);
  EXPECT_EQ(w.status, pb::JOB_KEY_INCONSISTENT);

  // Party 1 lacks the key.
  std::array<JobPlan, 3> missing = plans;
  missing[1].key_view = kViewMissing;
  missing[1].key.reset();
  w = plans[0];
  DecideFrom(w, missing);
  EXPECT_EQ(w.status, pb::JOB_UNKNOWN_KEY);
  EXPECT_TRUE(absl::StrContains(w.detail, "party 1")) << w.detail;

  // The job names another cipher than the key was dealt for.
  w = plans[0];
  w.cipher = pb::CIPHER_AES256;
  DecideFrom(w, plans);
  EXPECT_EQ(w.status, pb::JOB_WRONG_CIPHER);

  // A job that failed its check on every party stays as it is.
  JobPlan failed;
  failed.Fail(pb::JOB_MALFORMED, "check");
  w = failed;
  DecideFrom(w, {failed, failed, failed});
  EXPECT_EQ(w.status, pb::JOB_MALFORMED);
  EXPECT_EQ(w.detail, "check");
}

}  // namespace
}  // namespace kmpc::engine
