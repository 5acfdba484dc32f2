// engine/tags.h on three parties, the phases before it run alone: T' of a
// CHECKSUM opens to the clear reference; the masked checks pass a
// DECRYPT's and a VERIFY_CHECKSUM's right tags and fail wrong ones alike
// on every party; powers of H past the stored ones open to H^k; a gate
// DECRYPT's verdict is counted into the failure budget.
#include "engine/tags.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "batch_testing.h"
#include "engine/aes_phase.h"
#include "engine/batch_agreement.h"
#include "engine/keys.h"
#include "enctype_reference.h"
#include "protocol/gf128.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::DealMessage;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;
using phase_testing::RunParties;

class TagsTest : public ::testing::Test {
 protected:
  TagsTest() { c_.AddKey(kKey, key_, Cipher::kAes128); }

  // The phases up to the AES pass, then `then`, on the three parties.
  void RunTo(const std::array<std::vector<Job>, 3>& jobs,
             const std::function<absl::Status(const RunContext&, BatchState&)>& then) {
    jobs_ = jobs;
    for (int i = 0; i < 3; ++i) b_[i] = std::make_unique<BatchState>(1, jobs_[i], &c_.budget[i]);
    for (const absl::Status& s : RunParties([&](int i) -> absl::Status {
           const RunContext ctx = c_.ctx(i);
           LookupKeys(ctx, *b_[i], c_.Lookup(i));
           if (absl::Status st = AgreeOnBatch(ctx, *b_[i]); !st.ok()) return st;
           if (absl::Status st = RunAes(ctx, *b_[i]); !st.ok()) return st;
           return then(ctx, *b_[i]);
         }))
      ASSERT_TRUE(s.ok()) << s;
  }
  static absl::Status Check(const RunContext& ctx, BatchState& b) {
    if (absl::Status st = ComputeTags(ctx, b); !st.ok()) return st;
    return CheckTags(ctx, b);
  }
  void ExpectPass(size_t j, bool want) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b_[i]->pass[j], want) << "party " << i << " job " << j;
  }

  const Bytes key_ = ::kmpc::testing::Random(16);
  const std::string kKey = KeyId("key");
  PhaseCluster c_;
  std::array<std::vector<Job>, 3> jobs_;
  std::array<std::unique_ptr<BatchState>, 3> b_;
};

TEST_F(TagsTest, AChecksumsTagOpensToTheReference) {
  const Bytes d = ::kmpc::testing::Random(40);
  std::array<std::vector<Job>, 3> jobs;
  for (auto& j : jobs) j = {CtrJob(pb::JOB_CHECKSUM, kKey)};
  DealMessage(jobs, 0, d);
  RunTo(jobs, ComputeTags);
  std::array<std::array<Block, 2>, 3> t;
  for (int i = 0; i < 3; ++i) t[i] = b_[i]->secrets[0].tprime;
  const Block& c0 = b_[0]->plan[0].ctr0;
  const Bytes want = reference::RefChecksum(key_, 3, Bytes(c0.begin(), c0.end()), d);
  const Block tag = phase_testing::Open16(t);
  EXPECT_EQ(Bytes(tag.begin(), tag.end()), Bytes(want.begin() + 16, want.end()));
}

TEST_F(TagsTest, DecryptTagsHoldOrFailAlikeOnEveryParty) {
  Bytes ctr0(16, 0);
  ctr0[3] = 0x77;
  Job good = CtrJob(pb::JOB_DECRYPT, kKey);
  good.data = reference::RefEncrypt(key_, 3, ctr0, ::kmpc::testing::Random(37));
  Job bad = good;
  bad.data.back() ^= 1;
  const std::vector<Job> jobs = {good, bad, CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  RunTo({jobs, jobs, jobs}, Check);
  ExpectPass(0, true);
  ExpectPass(1, false);
  ExpectPass(2, false);  // nothing to check
}

TEST_F(TagsTest, APresentedChecksumIsCheckedOnShares) {
  const Bytes d = ::kmpc::testing::Random(21);
  Bytes ctr0(16, 0);
  ctr0[0] = 0x31;
  const Bytes sum = reference::RefChecksum(key_, 3, ctr0, d);  // ctr0 || tag
  std::array<std::vector<Job>, 3> jobs;
  for (auto& j : jobs)
    j = {CtrJob(pb::JOB_VERIFY_CHECKSUM, kKey), CtrJob(pb::JOB_VERIFY_CHECKSUM, kKey)};
  Bytes right = d, wrong = d;
  right.insert(right.end(), sum.begin() + 16, sum.end());
  wrong.insert(wrong.end(), sum.begin() + 16, sum.end());
  wrong.back() ^= 0x80;
  DealMessage(jobs, 0, right);
  DealMessage(jobs, 1, wrong);
  for (auto& j : jobs)
    for (Job& v : j) {
      v.length = static_cast<uint32_t>(d.size());  // the tag follows D
      v.checksum = ctr0;
    }
  RunTo(jobs, Check);
  ExpectPass(0, true);
  ExpectPass(1, false);
}

TEST_F(TagsTest, PowersPastTheStoredOnesOpenToTheirPowerOfH) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 16 * (kStoredHPowers + 4);  // m = kStoredHPowers + 6
  const std::vector<Job> jobs = {pad};
  RunTo({jobs, jobs, jobs}, ExtendPowers);
  const size_t m = b_[0]->plan[0].m;
  ASSERT_GT(m, static_cast<size_t>(kStoredHPowers));
  const Block zero{};
  const Block h = ::kmpc::testing::OpensslAes(key_, zero.data());
  Block hk = h;
  for (size_t k = 1; k <= m; ++k) {
    std::array<std::array<Block, 2>, 3> v;
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(b_[i]->secrets[0].powers[0].size(), 16 * m);
      for (int c = 0; c < 2; ++c)
        std::memcpy(v[i][c].data(), b_[i]->secrets[0].powers[c].data() + 16 * (k - 1), 16);
    }
    EXPECT_EQ(phase_testing::Open16(v), hk) << "H^" << k;
    hk = protocol::GfMulReference(hk, h);
  }
}

TEST_F(TagsTest, AGateDecryptsVerdictIsCountedIntoTheBudget) {
  c_.AddKey(KeyId("user"), key_, Cipher::kAes128, KeyKind::kUser);
  Job gate = CtrJob(pb::JOB_DECRYPT, KeyId("user"));
  gate.usage = 1;
  gate.data = reference::RefEncrypt(key_, 1, Bytes(16, 1), Bytes(20, 2));
  const std::vector<Job> jobs = {gate, gate};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, c_.Lookup(0));
  ASSERT_TRUE(b.plan[0].live() && b.plan[1].live());
  b.plan[1].Fail(pb::JOB_MALFORMED, "failed before its verdict: not settled");
  b.pass = {false, false};
  SettleGates(b);
  const GateBudget& budget = c_.budget[0];
  EXPECT_EQ(budget.Failures(b.plan[0].deal, budget.Now()), 1u);
}

}  // namespace
}  // namespace kmpc::engine
