// engine/cts_plan.h: which dealt material an aes*-cts job takes, and which
// usages and directions are refused (JOB_UNKNOWN_USAGE); one task per live
// aes*-cts job with its program; the batch's bound on distinct shapes,
// past which a job fails alone; and a ticket's KDC-signature inputs, which
// the three parties' components open to ctr0 || H^2 || L.
#include "engine/cts_plan.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "batch_testing.h"
#include "contract.h"
#include "engine/keys.h"
#include "protocol/gf128.h"

namespace kmpc::engine {
namespace {

using phase_testing::Bytes;
using phase_testing::CtrJob;
using phase_testing::CtsJob;
using phase_testing::KeyId;
using phase_testing::PhaseCluster;

class CtsPlanTest : public ::testing::Test {
 protected:
  CtsPlanTest() {
    c_.AddKey(kService, Bytes(16, 1), Cipher::kAes128Cts, KeyKind::kService);
    c_.AddKey(kUser, Bytes(16, 2), Cipher::kAes128Cts, KeyKind::kUser);
    c_.AddKey(kCtr, Bytes(16, 3), Cipher::kAes128);
  }
  // FindCtsMaterial of a job of `type` and `usage` under `id` (party 0).
  std::string Find(pb::JobType type, uint32_t usage, const std::string& id,
                   const CtsMaterial** material = nullptr) {
    Job job = CtsJob(type, id, usage, 40)[0];
    CtsTask t;
    t.type = type;
    std::string why = FindCtsMaterial(job, *c_.store[0][id], t);
    if (material != nullptr) *material = t.material;
    return why;
  }
  std::unique_ptr<BatchState> Plan(const std::vector<Job>& jobs) {
    jobs_ = jobs;
    auto b = std::make_unique<BatchState>(1, jobs_, &c_.budget[0]);
    LookupKeys(c_.ctx(0), *b, c_.Lookup(0));
    EXPECT_TRUE(PlanCts(c_.ctx(0), *b).ok());
    return b;
  }

  const std::string kService = KeyId("service"), kUser = KeyId("user"), kCtr = KeyId("ctr");
  PhaseCluster c_;
  std::vector<Job> jobs_;
};

TEST_F(CtsPlanTest, MaterialOfTheUsagesTheKdcUsesInTheirOneDirection) {
  const CtsMaterial* m = nullptr;
  EXPECT_EQ(Find(pb::JOB_DECRYPT, 1, kService, &m), "");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->kind, CtsKind::kUsage);
  EXPECT_EQ(m->usage, 1u);
  EXPECT_EQ(Find(pb::JOB_ENCRYPT, 3, kService), "");
  EXPECT_EQ(Find(pb::JOB_DECRYPT, contract::kTicketUsage, kService), "");
  EXPECT_EQ(Find(pb::JOB_CHECKSUM, 17, kService, &m), "");
  EXPECT_EQ(m->kind, CtsKind::kChecksum);
  EXPECT_EQ(Find(pb::JOB_CHECKSUM, 64, kService), "");
  // The other direction, or a usage the KDC never asks for.
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_DECRYPT, 3, kService),
                                "usage 3 is not dealt for an aes*-cts DECRYPT"));
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_ENCRYPT, 1, kService), "ENCRYPT"));
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_CHECKSUM, 56, kService), "CHECKSUM"));
  // A password-derived key: no ticket DECRYPT, no CAMMAC verifier, and
  // no ticket material at all.
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_DECRYPT, contract::kTicketUsage, kUser),
                                "service's key only"));
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_CHECKSUM, 64, kUser), "CAMMAC"));
  EXPECT_TRUE(absl::StrContains(Find(pb::JOB_ENCRYPT, 2, kUser), "no material was dealt"));
}

TEST_F(CtsPlanTest, OneTaskPerLiveCtsJobWithItsProgram) {
  const auto enc = CtsJob(pb::JOB_ENCRYPT, kService, 3, 40);
  const auto wrong = CtsJob(pb::JOB_DECRYPT, kService, 3, 60);
  const auto b = Plan({enc[0], wrong[0], CtrJob(pb::JOB_ENCRYPT, kCtr, 1)});
  ASSERT_EQ(b->cts.size(), 1u);
  EXPECT_EQ(b->plan[0].status, pb::JOB_OK) << b->plan[0].detail;
  EXPECT_EQ(b->plan[0].cts_task, 0);
  EXPECT_EQ(b->plan[1].status, pb::JOB_UNKNOWN_USAGE);
  EXPECT_EQ(b->plan[1].cts_task, -1);
  EXPECT_EQ(b->plan[2].cts_task, -1);  // a ctr-mpc job: an AES lane
  const CtsTask& t = b->cts[0];
  EXPECT_EQ(t.job, 0u);
  EXPECT_EQ(t.type, pb::JOB_ENCRYPT);
  EXPECT_EQ(t.nr, 10);
  EXPECT_EQ(t.usage, 3u);
  EXPECT_EQ(t.n, contract::CtsLengthOf(ShapeOf(enc[0])));
  EXPECT_NE(t.program, nullptr);
  ASSERT_NE(t.material, nullptr);
  EXPECT_EQ(t.shared_in[0].data(), jobs_[0].data_shares[0].data());  // no copy
  EXPECT_EQ(b->cts_shapes.size(), 1u);
  EXPECT_EQ(b->cts_shape_bytes, CtsProgramCache::ShapeBytes(ShapeOf(t)));
}

TEST_F(CtsPlanTest, ADistinctShapePastTheBatchBoundFailsAlone) {
  const auto short1 = CtsJob(pb::JOB_ENCRYPT, kService, 3, 40);
  const auto longer = CtsJob(pb::JOB_ENCRYPT, kService, 3, 200);
  const auto short2 = CtsJob(pb::JOB_ENCRYPT, kService, 3, 40);
  c_.options[0].cts_batch_bytes = Plan({short1[0]})->cts_shape_bytes;
  const auto b = Plan({short1[0], longer[0], short2[0]});
  EXPECT_EQ(b->plan[0].status, pb::JOB_OK) << b->plan[0].detail;
  EXPECT_EQ(b->plan[1].status, pb::JOB_MALFORMED);
  EXPECT_TRUE(absl::StrContains(b->plan[1].detail, "distinct lengths")) << b->plan[1].detail;
  EXPECT_EQ(b->plan[2].status, pb::JOB_OK) << b->plan[2].detail;  // a shape it has
  EXPECT_EQ(b->cts.size(), 2u);
}

TEST_F(CtsPlanTest, TicketSignatureInputsOpenToCtr0HSquaredAndL) {
  // Job 0 a ticket task signing with the PAD of job 1; only what
  // FillTicketSignatures reads is set.
  Job ticket = CtsJob(pb::JOB_ENCRYPT, kService, 2, 40)[0];
  ticket.sign_pad = 1;
  Job pad = CtrJob(pb::JOB_PAD, kCtr);
  pad.usage = contract::kTicketChecksumUsage;
  pad.length = contract::kSpliceBytes;
  const std::vector<Job> jobs = {ticket, pad};
  Block ctr0{}, mask{};
  ctr0[15] = 9;
  for (int k = 0; k < 16; ++k) mask[k] = static_cast<uint8_t>(3 * k + 1);
  auto mask_views = share::Deal(mask);
  ASSERT_TRUE(mask_views.ok());
  // part[q][i]: party i's two components of bytes 16q .. 16q+16 of the
  // signature's inputs (ctr0, H^2, L).
  std::array<std::array<std::array<Block, 2>, 3>, 3> part;
  for (int i = 0; i < 3; ++i) {
    BatchState b(1, jobs, &c_.budget[i]);
    JobPlan& w = b.plan[1];
    w.key = c_.store[i][kCtr];
    w.ctr0 = ctr0;
    w.m = protocol::GhashBlocks(5, contract::kSpliceBytes);
    for (int k = 0; k < 2; ++k) {
      const std::vector<uint8_t>& c = (*mask_views)[i].comp[k];
      b.aes.out[k].assign(c.begin(), c.end());  // lane 0: AES_K(c0)
    }
    b.cts.emplace_back();
    b.cts[0].job = 0;
    b.cts[0].ticket = true;
    FillTicketSignatures(c_.ctx(i), b);
    for (int q = 0; q < 3; ++q)
      for (int k = 0; k < 2; ++k)
        std::memcpy(part[q][i][k].data(), b.cts[0].sign[k].data() + 16 * q, 16);
  }
  EXPECT_EQ(phase_testing::Open16(part[0]), ctr0);
  const Block zero{};
  const Block h = ::kmpc::testing::OpensslAes(Bytes(16, 3), zero.data());
  EXPECT_EQ(phase_testing::Open16(part[1]), protocol::GfMulReference(h, h));
  Block l = protocol::Ghash(
      h, protocol::GhashInput(ChecksumAad(contract::kTicketChecksumUsage),
                              Bytes(contract::kSpliceBytes, 0)));
  for (int k = 0; k < 16; ++k) l[k] ^= mask[k];
  EXPECT_EQ(phase_testing::Open16(part[2]), l);
}

}  // namespace
}  // namespace kmpc::engine
