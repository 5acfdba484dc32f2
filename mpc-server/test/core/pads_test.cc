// engine/pads.h: a drawn counter made valid without a round; counters
// drawn alike on the three parties; a linked pad's counter after its
// ENCRYPT's, or withheld with it; the pads' zero shares sum to zero; the
// verification pads' factors and products laid out where CheckTags puts
// them.
#include "engine/pads.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "batch_testing.h"
#include "engine/keys.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;
using phase_testing::RunParties;

TEST(PadsTest, FixCounterMovesOnlyARangeThatTouchesZero) {
  Block zero{};
  FixCounter(zero, 1);
  Block want{};
  want[0] = 0x80;
  EXPECT_EQ(zero, want);
  Block top;
  top.fill(0xff);
  FixCounter(top, 1);
  EXPECT_EQ(top[0], 0x7f);  // now far from the wrap
  for (int k = 1; k < 16; ++k) EXPECT_EQ(top[k], 0xff);
  // Near the top by less than a linked pad's reach: moved as well.
  Block near;
  near.fill(0xff);
  near[13] = 0xfe;  // 2^128 - 1 - 2^16: below kLinkedPadOffset from the wrap
  FixCounter(near, 1);
  EXPECT_EQ(near[0], 0x7f);
  Block fine{};
  fine[0] = 0x12;
  fine[15] = 0x34;
  const Block before = fine;
  FixCounter(fine, contract::kMaxJobBlocks);
  EXPECT_EQ(fine, before);
}

class PadsRunTest : public ::testing::Test {
 protected:
  PadsRunTest() { c_.AddKey(kKey, Bytes(16, 1), Cipher::kAes128); }
  void Plan(const std::vector<Job>& jobs) {
    jobs_ = jobs;
    for (int i = 0; i < 3; ++i) {
      b_[i] = std::make_unique<BatchState>(1, jobs_, &c_.budget[i]);
      LookupKeys(c_.ctx(i), *b_[i], c_.Lookup(i));
    }
  }
  const std::string kKey = KeyId("key");
  PhaseCluster c_;
  std::vector<Job> jobs_;
  std::array<std::unique_ptr<BatchState>, 3> b_;
};

TEST_F(PadsRunTest, CountersAreDrawnAlikeOnTheThreeParties) {
  Plan({CtrJob(pb::JOB_ENCRYPT, kKey, 1), CtrJob(pb::JOB_ENCRYPT, KeyId("none"), 1),
        CtrJob(pb::JOB_ENCRYPT, kKey, 2)});
  for (const absl::Status& s : RunParties([&](int i) { return DrawCounters(c_.ctx(i), *b_[i]); }))
    ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(b_[i]->plan[0].ctr0_drawn);
    EXPECT_FALSE(b_[i]->plan[1].ctr0_drawn);  // failed: none drawn
    EXPECT_EQ(b_[i]->plan[0].ctr0, b_[0]->plan[0].ctr0);
    EXPECT_EQ(b_[i]->plan[2].ctr0, b_[0]->plan[2].ctr0);
  }
  EXPECT_NE(b_[0]->plan[0].ctr0, b_[0]->plan[2].ctr0);
  // Nothing left to draw: no round.
  const uint64_t before = c_.c.prss[0]->counter();
  EXPECT_TRUE(DrawCounters(c_.ctx(0), *b_[0]).ok());
  EXPECT_EQ(c_.c.prss[0]->counter(), before);
}

TEST_F(PadsRunTest, ALinkedPadFollowsItsEncryptOrIsWithheldWithIt) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 16;
  pad.pad_after = 0;
  pad.pad_slot = 3;
  Job pad2 = pad;
  pad2.pad_after = 1;
  Plan({CtrJob(pb::JOB_ENCRYPT, kKey, 1), CtrJob(pb::JOB_ENCRYPT, kKey, 1), pad, pad2});
  BatchState& b = *b_[0];
  EXPECT_FALSE(b.plan[2].needs_ctr0);
  b.plan[0].ctr0.fill(0);
  b.plan[0].ctr0[15] = 0x10;
  b.plan[1].Fail(pb::JOB_UNKNOWN_KEY, "gone");
  LinkPads(b);
  Block want{};
  want[15] = 0x10 + 3;
  want[13] = 0x02;  // + kLinkedPadOffset = 2^17
  EXPECT_EQ(b.plan[2].status, pb::JOB_OK);
  EXPECT_EQ(b.plan[2].ctr0, want);
  EXPECT_EQ(b.plan[3].status, pb::JOB_WITHHELD);
}

TEST_F(PadsRunTest, ThePadsZeroSharesSumToZero) {
  Job pad = CtrJob(pb::JOB_PAD, kKey);
  pad.length = 16;
  Plan({pad, CtrJob(pb::JOB_ENCRYPT, KeyId("none"), 1), pad});
  b_[0]->plan[2].Fail(pb::JOB_MALFORMED, "a failed PAD draws its share too");
  RunParties([&](int i) {
    DrawPadZeros(c_.ctx(i), *b_[i]);
    return absl::OkStatus();
  });
  for (size_t j : {0, 2}) {
    Block sum{};
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 16; ++k) sum[k] ^= b_[i]->secrets[j].zero[k];
    EXPECT_EQ(sum, Block{}) << j;
    EXPECT_NE(b_[0]->secrets[j].zero, Block{}) << j;
  }
  EXPECT_EQ(b_[0]->secrets[1].zero, Block{});  // not a PAD
  EXPECT_EQ(c_.c.prss[0]->counter(), c_.c.prss[1]->counter());
}

TEST_F(PadsRunTest, VerificationPadsFactorsAndProductsAreLaidOutPerPad) {
  Job vpad = CtrJob(pb::JOB_PAD, kKey);
  vpad.length = 16;
  vpad.checksum.assign(16, 0x55);  // a verification pad at that counter
  Job sign = vpad;
  sign.checksum.clear();
  Plan({sign, vpad});
  BatchState& b = *b_[0];
  std::vector<size_t> pads;
  const size_t m = b.plan[1].m;
  ASSERT_EQ(VerifyPadInputs(b, &pads), m + 1);
  ASSERT_EQ(pads, std::vector<size_t>{1});
  // AES output: lane 0 is the pad's AES_K(c0).
  b.plan[1].lane0 = 0;
  for (int k = 0; k < 2; ++k) b.aes.out[k].assign(16, static_cast<uint8_t>(0xa0 + k));
  const size_t off = 32, n = off + 16 * (m + 1);
  std::vector<uint8_t> x0(n), x1(n), y0(n), y1(n);
  FillVerifyPads(c_.ctx(0), b, pads, off, &x0, &x1, &y0, &y1);
  const JobSecrets& s = b.secrets[1];
  for (size_t k = 0; k <= m; ++k) {
    const size_t at = off + 16 * k;
    EXPECT_EQ(0, std::memcmp(&x0[at], s.r[0].data(), 16)) << k;
    EXPECT_EQ(0, std::memcmp(&x1[at], s.r[1].data(), 16)) << k;
    const uint8_t* want0 = k < m ? b.plan[1].key->h_powers[0].data() + 16 * k : b.aes.Lane(0, 0);
    EXPECT_EQ(0, std::memcmp(&y0[at], want0, 16)) << k;
  }
  EXPECT_EQ(x0[0], 0);  // before `off`: untouched
  std::vector<uint8_t> z0(n), z1(n);
  for (size_t k = 0; k < n; ++k) {
    z0[k] = static_cast<uint8_t>(k);
    z1[k] = static_cast<uint8_t>(~k);
  }
  TakeVerifyPads(b, pads, off, z0, z1);
  EXPECT_EQ(b.secrets[1].rpowers[0], Bytes(z0.begin() + off, z0.begin() + off + 16 * m));
  EXPECT_EQ(b.secrets[1].rpowers[1], Bytes(z1.begin() + off, z1.begin() + off + 16 * m));
  EXPECT_EQ(0, std::memcmp(b.secrets[1].rmask[0].data(), &z0[off + 16 * m], 16));
  EXPECT_TRUE(b.secrets[0].rpowers[0].empty());  // a signing pad: none
}

}  // namespace
}  // namespace kmpc::engine
