// engine/aes_phase.h: counter blocks with carries; the lanes of the live
// ctr-mpc jobs placed one after another, AES_K(c0) first, and opened to
// OpenSSL's AES of each counter block; a batch over kMaxBatchBlocks lanes
// refused before any round.
#include "engine/aes_phase.h"

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
using phase_testing::CtsJob;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;
using phase_testing::RunParties;

TEST(AesPhaseTest, CounterPlusCarriesAcrossTheWords) {
  Block c{}, out{};
  for (int k = 8; k < 16; ++k) c[k] = 0xff;
  CounterPlus(c.data(), 0, out.data());
  EXPECT_EQ(out, c);
  CounterPlus(c.data(), 1, out.data());
  Block want{};
  want[7] = 1;
  EXPECT_EQ(out, want);
  CounterPlus(c.data(), 3, out.data());
  want[15] = 2;
  EXPECT_EQ(out, want);
}

class AesPhaseRunTest : public ::testing::Test {
 protected:
  AesPhaseRunTest() {
    c_.AddKey(kKey, key_, Cipher::kAes128);
    c_.AddKey(KeyId("cts"), Bytes(16, 5), Cipher::kAes128Cts);
  }
  const Bytes key_ = ::kmpc::testing::Random(16);
  const std::string kKey = KeyId("key");
  PhaseCluster c_;
};

TEST_F(AesPhaseRunTest, EveryLiveLaneOpensToAesOfItsCounter) {
  const auto cts = CtsJob(pb::JOB_ENCRYPT, KeyId("cts"), 3, 40);
  std::array<std::vector<Job>, 3> jobs;
  for (int i = 0; i < 3; ++i)
    jobs[i] = {CtrJob(pb::JOB_ENCRYPT, kKey, 2), cts[i],
               CtrJob(pb::JOB_ENCRYPT, KeyId("none"), 4), CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  Block c0{}, c3{};
  c0[15] = 0xfe;  // its keystream carries into byte 14
  c3[0] = 0x40;
  std::array<std::unique_ptr<BatchState>, 3> b;
  for (int i = 0; i < 3; ++i) {
    b[i] = std::make_unique<BatchState>(1, jobs[i], &c_.budget[i]);
    LookupKeys(c_.ctx(i), *b[i], c_.Lookup(i));
    b[i]->plan[0].ctr0 = c0;
    b[i]->plan[3].ctr0 = c3;
  }
  for (const absl::Status& s : RunParties([&](int i) { return RunAes(c_.ctx(i), *b[i]); }))
    ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(b[i]->plan[1].cts);  // no lane
    EXPECT_EQ(b[i]->nlanes, 3u + 2u);
    EXPECT_EQ(b[i]->plan[0].lane0, 0u);
    EXPECT_EQ(b[i]->plan[3].lane0, 3u);
  }
  auto open = [&](size_t lane) {
    std::array<std::array<Block, 2>, 3> v;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 2; ++k) std::memcpy(v[i][k].data(), b[i]->aes.Lane(k, lane), 16);
    return phase_testing::Open16(v);
  };
  Block ctr;
  for (uint64_t l = 0; l < 3; ++l) {
    CounterPlus(c0.data(), l, ctr.data());
    EXPECT_EQ(open(l), ::kmpc::testing::OpensslAes(key_, ctr.data())) << l;
  }
  for (uint64_t l = 0; l < 2; ++l) {
    CounterPlus(c3.data(), l, ctr.data());
    EXPECT_EQ(open(3 + l), ::kmpc::testing::OpensslAes(key_, ctr.data())) << l;
  }
}

TEST_F(AesPhaseRunTest, ABatchOverItsBlocksIsRefusedBeforeAnyRound) {
  const std::vector<Job> jobs = {CtrJob(pb::JOB_ENCRYPT, kKey, 1)};
  BatchState b(1, jobs, &c_.budget[0]);
  LookupKeys(c_.ctx(0), b, c_.Lookup(0));
  b.plan[0].nks = kMaxBatchBlocks;  // 1 + nks lanes
  const absl::Status s = RunAes(c_.ctx(0), b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(b.nlanes, 0u);
  EXPECT_TRUE(b.aes.out[0].empty());
}

}  // namespace
}  // namespace kmpc::engine
