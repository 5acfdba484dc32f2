// Jobs and plan items under the aes*-cts ciphers (cts_items.h): which the
// module serves (the AS exchange's TIMESTAMP and REPLY, DECRYPT and
// ENCRYPT; outside a plan a service ticket's ENCRYPT under usage 2 and
// CHECKSUM under usage 17), that an ENCRYPT's plaintext goes to the servers as shares only
// (the contract's check of its shape), and the results handed to the KDC
// (P of a DECRYPT's conf || P, an ENCRYPT's whole ciphertext).
#include "cts_items.h"

#include <string>

#include "contract.h"
#include "gtest/gtest.h"
#include "planner.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

Job CtsJobOf(pb::JobType type, size_t input_bytes, uint8_t fill = 0x41) {
  Job j;
  j.type = type;
  j.cipher = pb::CIPHER_AES256_CTS;
  j.key_id = std::string(contract::kKeyIdSize, 'k');
  j.usage = type == pb::JOB_DECRYPT ? 1 : 3;
  j.input.assign(input_bytes, fill);
  return j;
}

PlanItem CtsItem(Role role, pb::JobType type, uint32_t usage, bool given) {
  PlanItem p;
  p.role = role;
  p.type = type;
  p.cipher = pb::CIPHER_AES128_CTS;
  p.key_id = std::string(contract::kKeyIdSize, 'c');
  p.usage = usage;
  p.length = 200;
  p.flags = kItemExact;
  p.given = given;
  return p;
}

TEST(CtsItemsTest, OnlyDecryptEncryptAndChecksumAreServed) {
  EXPECT_TRUE(CtsJobServed(CtsJobOf(pb::JOB_DECRYPT, 60)).ok());
  EXPECT_TRUE(CtsJobServed(CtsJobOf(pb::JOB_ENCRYPT, 60)).ok());
  EXPECT_TRUE(CtsJobServed(CtsJobOf(pb::JOB_CHECKSUM, 60)).ok());
  for (pb::JobType t : {pb::JOB_VERIFY_CHECKSUM, pb::JOB_PAD}) {
    absl::Status st = CtsJobServed(CtsJobOf(t, 60));
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << t;
  }
}

// Outside a plan: only a service ticket's two jobs (no gate to wait for);
// the AS jobs and other usages need their plan.
TEST(CtsItemsTest, OnlyTheServiceTicketJobsAreServedUnplanned) {
  Job enc = CtsJobOf(pb::JOB_ENCRYPT, 60), ck = CtsJobOf(pb::JOB_CHECKSUM, 60);
  EXPECT_FALSE(CtsServedUnplanned(enc));  // usage 3: the AS reply
  enc.usage = 2;
  EXPECT_TRUE(CtsServedUnplanned(enc));
  ck.usage = 56;
  EXPECT_FALSE(CtsServedUnplanned(ck));
  ck.usage = 17;
  EXPECT_TRUE(CtsServedUnplanned(ck));
  Job dec = CtsJobOf(pb::JOB_DECRYPT, 60);
  EXPECT_FALSE(CtsServedUnplanned(dec));
  dec.usage = 2;
  EXPECT_FALSE(CtsServedUnplanned(dec));
}

// A CHECKSUM's message goes as shares; its result is the 12-byte value.
TEST(CtsItemsTest, ChecksumResultIsTheTwelveByteValue) {
  Job ck = CtsJobOf(pb::JOB_CHECKSUM, 300);
  ck.usage = 17;
  EXPECT_EQ(CtsSharedBytes(ck), 300u);
  EXPECT_TRUE(ShapeOf(ck).data.empty());
  SecureBytes v(contract::kCtsTag, 9);
  const SecureBytes want = v;
  ASSERT_TRUE(CtsResult(ck, &v).ok());
  EXPECT_EQ(v, want);
  SecureBytes longer(contract::kCtsTag + 16, 9);
  EXPECT_FALSE(CtsResult(ck, &longer).ok());
}

TEST(CtsItemsTest, EncryptPlaintextGoesAsSharesOfItsLength) {
  const Job enc = CtsJobOf(pb::JOB_ENCRYPT, 250);
  EXPECT_TRUE(CtsJob(enc));
  EXPECT_EQ(CtsSharedBytes(enc), 250u);
  contract::JobShape s = ShapeOf(enc);
  EXPECT_TRUE(s.data.empty());  // never in the clear
  EXPECT_EQ(s.share_sizes[0], 250u);
  EXPECT_EQ(s.share_sizes[1], 250u);
  EXPECT_TRUE(CheckJob(enc).ok());
  EXPECT_FALSE(contract::ResultHasCtr0(s, pb::JOB_OK));
  EXPECT_EQ(contract::RevealedShareBytes(s, pb::JOB_OK),
            contract::kCtsConfounder + 250 + contract::kCtsTag);
  // A DECRYPT deals nothing: its ciphertext C || T is public.
  const Job dec = CtsJobOf(pb::JOB_DECRYPT, 16 + 40 + 12);
  EXPECT_EQ(CtsSharedBytes(dec), 0u);
  EXPECT_TRUE(CheckJob(dec).ok());
  // A ctr-mpc ENCRYPT still deals nothing.
  Job ctr = enc;
  ctr.cipher = pb::CIPHER_AES256;
  EXPECT_EQ(ShapeOf(ctr).share_sizes[0], 0u);
}

TEST(CtsItemsTest, DecryptResultIsThePlaintextWithoutTheConfounder) {
  const Job dec = CtsJobOf(pb::JOB_DECRYPT, 16 + 5 + 12);
  SecureBytes v = {'c', 'o', 'n', 'f', 'o', 'u', 'n', 'd', 'e', 'r', '-',
                   '1', '6', 'b', 'y', 't', 'h', 'e', 'l', 'l', 'o'};
  ASSERT_TRUE(CtsResult(dec, &v).ok());
  EXPECT_EQ(std::string(v.begin(), v.end()), "hello");
  SecureBytes short_value(20, 1);  // not conf || P of a 33-byte C || T
  EXPECT_EQ(CtsResult(dec, &short_value).code(), absl::StatusCode::kAborted);
}

TEST(CtsItemsTest, EncryptResultIsTheWholeCiphertext) {
  const Job enc = CtsJobOf(pb::JOB_ENCRYPT, 7);
  SecureBytes v(16 + 7 + 12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i);
  const SecureBytes want = v;
  ASSERT_TRUE(CtsResult(enc, &v).ok());
  EXPECT_EQ(v, want);
  SecureBytes keystream_sized(7);  // a ctr-mpc keystream would be this long
  EXPECT_FALSE(CtsResult(enc, &keystream_sized).ok());
}

TEST(CtsItemsTest, ResultStatusesAccepted) {
  const Job dec = CtsJobOf(pb::JOB_DECRYPT, 40);
  const Job enc = CtsJobOf(pb::JOB_ENCRYPT, 40);
  EXPECT_TRUE(CtsCheckResult(dec, pb::JOB_OK, 0).ok());
  EXPECT_TRUE(CtsCheckResult(dec, pb::JOB_INTEGRITY_FAILED, 0).ok());
  EXPECT_TRUE(CtsCheckResult(enc, pb::JOB_OK, 1).ok());
  EXPECT_TRUE(CtsCheckResult(enc, pb::JOB_WITHHELD, 1).ok());  // fails the job
  EXPECT_EQ(CtsCheckResult(enc, pb::JOB_INTEGRITY_FAILED, 1).code(),
            absl::StatusCode::kAborted);
}

TEST(CtsItemsTest, PlannerTakesTheAsTimestampAndReplyOnly) {
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  plan.items.push_back(CtsItem(Role::kTimestamp, pb::JOB_DECRYPT, 1, true));
  PlanItem reply = CtsItem(Role::kReply, pb::JOB_ENCRYPT, 3, true);
  reply.flags |= kItemGated;
  reply.gate = 0;
  plan.items.push_back(reply);
  EXPECT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
  EXPECT_TRUE(CtsItemProblem(plan.items[0]).empty());

  Plan later = plan;  // a REPLY whose input would come later
  later.items[1].given = false;
  EXPECT_FALSE(Planner::Check(later).ok());
  Plan bound = plan;  // a length that is only a bound
  bound.items[1].flags &= ~kItemExact;
  EXPECT_FALSE(Planner::Check(bound).ok());
  // The roles not served under such a key: a ticket (a service's key), a
  // TGS header ticket, the PA-REQ-ENC-PA-REP checksum.
  for (auto [role, type, usage] :
       {std::tuple{Role::kTicket, pb::JOB_ENCRYPT, 2u},
        std::tuple{Role::kHeaderTicket, pb::JOB_DECRYPT, 2u},
        std::tuple{Role::kReqChecksum, pb::JOB_CHECKSUM, 56u}}) {
    Plan p = plan;
    p.items.push_back(CtsItem(role, type, usage, true));
    absl::Status st = Planner::Check(p);
    EXPECT_FALSE(st.ok()) << RoleName(role);
    EXPECT_NE(st.message().find("aes*-cts"), std::string::npos) << st;
  }
}

// FAST (cts_items.h): the client's encrypted challenge as the gate and the
// KDC's challenge and the reply under FAST keys; the KDC's half goes as
// shares (before an ENCRYPT's plaintext; a DECRYPT's only shares), never
// in the clear; an encrypted challenge without a FAST key, or a
// TIMESTAMP with one, is refused.
TEST(CtsItemsTest, FastItemsTakeTheirKeysHalfAsShares) {
  Job dec = CtsJobOf(pb::JOB_DECRYPT, 16 + 28 + 12);
  dec.usage = 54;
  dec.cts_key = pb::CTS_KEY_CF2_AES256;
  dec.cf2_half.assign(32, 0x5a);
  EXPECT_EQ(CtsSharedBytes(dec), 32u);
  contract::JobShape s = ShapeOf(dec);
  EXPECT_EQ(s.share_sizes[0], 32u);
  EXPECT_EQ(s.data.size(), 16u + 28 + 12);  // the ciphertext is public
  EXPECT_TRUE(CheckJob(dec).ok()) << CheckJob(dec);
  Job enc = CtsJobOf(pb::JOB_ENCRYPT, 200);
  enc.cts_key = pb::CTS_KEY_CF2_AES128;
  enc.cf2_half.assign(16, 0x5a);
  EXPECT_EQ(CtsSharedBytes(enc), 216u);
  EXPECT_TRUE(CheckJob(enc).ok()) << CheckJob(enc);
  EXPECT_EQ(contract::RevealedShareBytes(ShapeOf(enc), pb::JOB_OK),
            contract::kCtsConfounder + 200 + contract::kCtsTag);
  Job wrong = enc;  // a half of another size than its cts_key says
  wrong.cf2_half.resize(32);
  EXPECT_FALSE(CheckJob(wrong).ok());

  Plan plan;
  plan.kind = ExchangeKind::kAsFast;
  PlanItem gate = CtsItem(Role::kChallenge, pb::JOB_DECRYPT, 54, true);
  gate.cts_key = pb::CTS_KEY_CF2_AES256;
  plan.items.push_back(gate);
  for (auto [role, usage] : {std::pair{Role::kKdcChallenge, 55u}, std::pair{Role::kReply, 3u}}) {
    PlanItem it = CtsItem(role, pb::JOB_ENCRYPT, usage, true);
    it.flags |= kItemGated;
    it.gate = 0;
    it.cts_key = pb::CTS_KEY_CF2_AES256;
    plan.items.push_back(it);
  }
  EXPECT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
  Plan no_key = plan;
  no_key.items[0].cts_key = pb::CTS_KEY_DEALT;
  EXPECT_FALSE(Planner::Check(no_key).ok());
  Plan ts_key = plan;
  ts_key.items[0].role = Role::kTimestamp;
  ts_key.items[0].usage = 1;
  EXPECT_FALSE(Planner::Check(ts_key).ok());
  Plan usage = plan;  // a role's usage is fixed
  usage.items[1].usage = 54;
  EXPECT_FALSE(Planner::Check(usage).ok());
}

}  // namespace
}  // namespace kmpc::kdc
