// Jobs and plan items under the aes*-cts ciphers (cts_items.h): which the
// module serves (the AS exchange's TIMESTAMP and REPLY, DECRYPT and
// ENCRYPT; outside a plan a service ticket's ENCRYPT under usage 2 and
// CHECKSUM under usage 17), that an ENCRYPT's plaintext goes to the servers as shares only
// (the contract's check of its shape), and the results handed to the KDC
// (P of a DECRYPT's conf || P, an ENCRYPT's whole ciphertext); the
// PA-REQ-ENC-PA-REP splice (P || D as shares, the one plan shape taken).
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

// Outside a plan: only a service ticket's jobs (no gate to wait for): its
// ENCRYPT, its PAC server signature and its CAMMAC service verifier; the
// AS jobs and other usages need their plan.
TEST(CtsItemsTest, OnlyTheServiceTicketJobsAreServedUnplanned) {
  Job enc = CtsJobOf(pb::JOB_ENCRYPT, 60), ck = CtsJobOf(pb::JOB_CHECKSUM, 60);
  EXPECT_FALSE(CtsServedUnplanned(enc));  // usage 3: the AS reply
  enc.usage = 2;
  EXPECT_TRUE(CtsServedUnplanned(enc));
  ck.usage = 56;
  EXPECT_FALSE(CtsServedUnplanned(ck));
  ck.usage = 17;
  EXPECT_TRUE(CtsServedUnplanned(ck));
  ck.usage = 64;  // RFC 7751's CAMMAC service verifier
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
  EXPECT_EQ(SharedBytes(ck), 300u);
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
  EXPECT_EQ(SharedBytes(enc), 250u);
  contract::JobShape s = ShapeOf(enc);
  EXPECT_TRUE(s.data.empty());  // never in the clear
  EXPECT_EQ(s.share_sizes[0], 250u);
  EXPECT_EQ(s.share_sizes[1], 250u);
  EXPECT_TRUE(CheckJob(enc).ok());
  EXPECT_FALSE(contract::ResultHasCtr0(s, pb::JOB_OK));
  EXPECT_EQ(contract::RevealedShareBytes(s, pb::JOB_OK),
            contract::kCtsConfounder + 250 + contract::kCtsTag);
  // A DECRYPT deals its C || T (whole, an offline password verifier):
  // its length in the clear, never the bytes.
  const Job dec = CtsJobOf(pb::JOB_DECRYPT, 16 + 40 + 12);
  EXPECT_EQ(SharedBytes(dec), 16u + 40 + 12);
  EXPECT_TRUE(ShapeOf(dec).data.empty());
  EXPECT_EQ(ShapeOf(dec).length, 16u + 40 + 12);
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
  // The roles not served under such a key: a ticket (a service's key:
  // outside a plan), the PA-REQ-ENC-PA-REP checksum unspliced.
  for (auto [role, type, usage] :
       {std::tuple{Role::kTicket, pb::JOB_ENCRYPT, 2u},
        std::tuple{Role::kReqChecksum, pb::JOB_CHECKSUM, 56u}}) {
    Plan p = plan;
    p.items.push_back(CtsItem(role, type, usage, true));
    absl::Status st = Planner::Check(p);
    EXPECT_FALSE(st.ok()) << RoleName(role);
    EXPECT_NE(st.message().find("aes*-cts"), std::string::npos) << st;
  }
}

// A ticket to a service presented back (cts_items.h): the header ticket of
// a renewal (the gate) and an S4U2Proxy evidence ticket, DECRYPTs under
// usage 2 given at begin under the dealt key; not given, or under a FAST
// key, they are refused.
TEST(CtsItemsTest, PlannerTakesTicketsPresentedBackGivenAtBegin) {
  Plan plan;
  plan.kind = ExchangeKind::kS4u2Proxy;
  plan.items.push_back(CtsItem(Role::kHeaderTicket, pb::JOB_DECRYPT, 2, true));
  PlanItem evidence = CtsItem(Role::kSecondTicket, pb::JOB_DECRYPT, 2, true);
  evidence.flags |= kItemGated;
  evidence.gate = 0;
  plan.items.push_back(evidence);
  EXPECT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
  Plan alone;  // the evidence ticket alone (the header under a local key)
  alone.kind = ExchangeKind::kS4u2Proxy;
  alone.items.push_back(CtsItem(Role::kSecondTicket, pb::JOB_DECRYPT, 2, true));
  EXPECT_TRUE(Planner::Check(alone).ok()) << Planner::Check(alone);
  Plan later = plan;
  later.items[1].given = false;
  EXPECT_FALSE(Planner::Check(later).ok());
  Plan fast = plan;
  fast.items[0].cts_key = pb::CTS_KEY_CF2_AES128;
  EXPECT_FALSE(Planner::Check(fast).ok());
  Plan wrong = plan;  // the role's usage is 2: another is refused
  wrong.items[0].usage = 1;
  EXPECT_FALSE(Planner::Check(wrong).ok());
}

// FAST (cts_items.h): the client's encrypted challenge as the gate and the
// KDC's challenge and the reply under FAST keys; the KDC's half goes as
// shares (before an ENCRYPT's plaintext or a DECRYPT's C || T), never in
// the clear; an encrypted challenge without a FAST key, or a TIMESTAMP
// with one, is refused.
TEST(CtsItemsTest, FastItemsTakeTheirKeysHalfAsShares) {
  Job dec = CtsJobOf(pb::JOB_DECRYPT, 16 + 28 + 12);
  dec.usage = 54;
  dec.cts_key = pb::CTS_KEY_CF2_AES256;
  dec.cf2_half.assign(32, 0x5a);
  EXPECT_EQ(SharedBytes(dec), 32u + 16 + 28 + 12);
  contract::JobShape s = ShapeOf(dec);
  EXPECT_EQ(s.share_sizes[0], 32u + 16 + 28 + 12);
  EXPECT_TRUE(s.data.empty());  // the ciphertext goes as shares too
  EXPECT_TRUE(CheckJob(dec).ok()) << CheckJob(dec);
  Job enc = CtsJobOf(pb::JOB_ENCRYPT, 200);
  enc.cts_key = pb::CTS_KEY_CF2_AES128;
  enc.cf2_half.assign(16, 0x5a);
  EXPECT_EQ(SharedBytes(enc), 216u);
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

// The PA-REQ-ENC-PA-REP splice (cts_items.h CtsSpliceProblem, kmpc.proto
// Job.splice_length): one ENCRYPT whose shares are P then D, the request,
// dealt like P though it is public; the checksum goes into P inside the
// cluster and its 12 bytes are never a result of their own.
TEST(CtsItemsTest, ASplicedReplyDealsItsPlaintextThenTheRequest) {
  Job enc = CtsJobOf(pb::JOB_ENCRYPT, 250);
  enc.splice.assign(180, 0x30);  // D, then its HMAC inner padding
  const std::string pad = contract::SplicePadding(180);
  enc.splice.insert(enc.splice.end(), pad.begin(), pad.end());
  enc.splice_offset = 200;
  EXPECT_EQ(SharedBytes(enc), 250u + 192u);
  const contract::JobShape s = ShapeOf(enc);
  EXPECT_TRUE(s.data.empty());
  EXPECT_EQ(s.share_sizes[0], 442u);
  EXPECT_EQ(s.splice_length, 192u);
  EXPECT_EQ(s.splice_offset, 200u);
  EXPECT_TRUE(CheckJob(enc).ok()) << CheckJob(enc);
  // The revealed value is the reply's ciphertext only.
  EXPECT_EQ(contract::RevealedShareBytes(s, pb::JOB_OK),
            contract::kCtsConfounder + 250 + contract::kCtsTag);
  Job late = enc;  // 12 bytes must fit in P
  late.splice_offset = 239;
  EXPECT_EQ(CheckJob(late).code(), absl::StatusCode::kInvalidArgument);
  Job ticket = enc;  // a splice into another usage than the AS reply's
  ticket.usage = 2;
  EXPECT_EQ(CheckJob(ticket).code(), absl::StatusCode::kInvalidArgument);
  Job fast = enc;  // nor under a FAST key
  fast.cts_key = pb::CTS_KEY_CF2_AES256;
  fast.cf2_half.assign(32, 0x5a);
  EXPECT_EQ(CheckJob(fast).code(), absl::StatusCode::kInvalidArgument);
  Job unpadded = enc;  // D not dealt padded: no multiple of 64
  unpadded.splice.resize(180);
  EXPECT_EQ(CheckJob(unpadded).code(), absl::StatusCode::kInvalidArgument);
  Job longest = enc;  // the cap: an AS-REQ of 1015 bytes, padded to 1024
  longest.splice.assign(contract::kMaxCtsSpliceBytes, 0x30);
  EXPECT_TRUE(CheckJob(longest).ok()) << CheckJob(longest);
  longest.splice.resize(contract::kMaxCtsSpliceBytes + 64, 0);
  EXPECT_EQ(CheckJob(longest).code(), absl::StatusCode::kOutOfRange);
  Job offset_only = CtsJobOf(pb::JOB_ENCRYPT, 250);
  offset_only.splice_offset = 4;
  EXPECT_EQ(CheckJob(offset_only).code(), absl::StatusCode::kInvalidArgument);
}

Plan SplicedAsPlan() {
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  plan.items.push_back(CtsItem(Role::kTimestamp, pb::JOB_DECRYPT, 1, true));
  PlanItem cksum = CtsItem(Role::kReqChecksum, pb::JOB_CHECKSUM, 56, true);
  cksum.length = 180;
  PlanItem reply = CtsItem(Role::kReply, pb::JOB_ENCRYPT, 3, true);
  reply.length = 250;
  reply.splice_from = 1;
  reply.splice_offset = 200;
  for (PlanItem* p : {&cksum, &reply}) {
    p->flags |= kItemGated;
    p->gate = 0;
  }
  plan.items.push_back(cksum);
  plan.items.push_back(reply);
  return plan;
}

TEST(CtsItemsTest, PlannerTakesTheRequestChecksumSplicedIntoTheReplyOnly) {
  const Plan plan = SplicedAsPlan();
  EXPECT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
  EXPECT_TRUE(SplicedAway(plan, 1));
  EXPECT_FALSE(SplicedAway(plan, 2));
  auto refused = [](const Plan& p, const char* what) {
    const absl::Status st = Planner::Check(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
  };
  Plan alone = plan;  // the checksum released on its own: never
  alone.items[2].splice_from = -1;
  refused(alone, "a REQ_CHECKSUM not spliced");
  Plan from_ts = plan;
  from_ts.items[2].splice_from = 0;
  refused(from_ts, "a splice from the TIMESTAMP");
  Plan self = plan;
  self.items[2].splice_from = 2;
  refused(self, "a splice from itself");
  Plan outside = plan;
  outside.items[2].splice_from = 7;
  refused(outside, "a splice from outside the plan");
  Plan other_key = plan;
  other_key.items[1].key_id = std::string(contract::kKeyIdSize, 'd');
  refused(other_key, "a checksum under another key");
  Plan other_cipher = plan;
  other_cipher.items[1].cipher = pb::CIPHER_AES256_CTS;
  refused(other_cipher, "a checksum under another cipher");
  Plan fast = plan;
  fast.items[2].cts_key = pb::CTS_KEY_CF2_AES128;
  refused(fast, "a splice into a reply under a FAST key");
  Plan late = plan;
  late.items[2].splice_offset = 239;
  refused(late, "12 bytes past the plaintext");
  Plan not_given = plan;
  not_given.items[1].given = false;
  refused(not_given, "a checksum not given at begin");
  Plan into_challenge = plan;  // a splice into another item than the REPLY
  into_challenge.items[2].role = Role::kKdcChallenge;
  into_challenge.items[2].usage = 55;
  into_challenge.items[2].cts_key = pb::CTS_KEY_CF2_AES128;
  refused(into_challenge, "a splice into a KDC_CHALLENGE");
  Plan twice = plan;  // one checksum into two replies
  twice.items.push_back(twice.items[2]);
  refused(twice, "one checksum spliced twice");
  Plan empty = plan;  // (its length cap: CheckJob, cts_gate_test)
  empty.items[1].length = 0;
  refused(empty, "an empty request");
  // A ctr-mpc plan item takes no splice either.
  Plan ctr = plan;
  for (PlanItem& p : ctr.items) p.cipher = pb::CIPHER_AES128;
  ctr.items[0].length = 16 + 60 + 16;
  refused(ctr, "a splice under ctr-mpc keys");
}

}  // namespace
}  // namespace kmpc::kdc
