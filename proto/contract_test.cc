#include "contract.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batch_error.h"

namespace kmpc::contract {
namespace {

const std::string kKeyId(kKeyIdSize, 'k');

std::string Ctr0(unsigned char last, unsigned char fill = 0) {
  std::string c(kCtr0Size, static_cast<char>(fill));
  c.back() = static_cast<char>(last);
  return c;
}

TEST(CounterRange, RejectsZeroAndWrap) {
  EXPECT_FALSE(CounterRangeOk(Ctr0(0), 0));
  EXPECT_TRUE(CounterRangeOk(Ctr0(1), 0));
  EXPECT_TRUE(CounterRangeOk(Ctr0(1), 5));
  // c0 = 2^128 - 1: no block may follow it.
  EXPECT_TRUE(CounterRangeOk(Ctr0(0xff, 0xff), 0));
  EXPECT_FALSE(CounterRangeOk(Ctr0(0xff, 0xff), 1));
  // c0 = 2^128 - 3: two blocks fit, three wrap.
  EXPECT_TRUE(CounterRangeOk(Ctr0(0xfd, 0xff), 2));
  EXPECT_FALSE(CounterRangeOk(Ctr0(0xfd, 0xff), 3));
  EXPECT_FALSE(CounterRangeOk(std::string(15, '\1'), 0));
  EXPECT_FALSE(CounterRangeOk(std::string(17, '\1'), 0));
}

// Each slot of a linked pad has its own counter past the ENCRYPT's range:
// ctr0 + 2^17 + slot, big-endian with carry; no slot past kPadSlots, no
// sum that leaves the counter range.
TEST(LinkedPad, SlotsAreDistinctCountersPastTheEncrypt) {
  const std::string c0 = Ctr0(0xff, 0);  // carries into byte 14
  std::vector<std::string> got;
  for (uint32_t slot = 0; slot < kPadSlots; ++slot) {
    std::string out;
    ASSERT_TRUE(LinkedPadCtr0(c0, slot, &out)) << slot;
    ASSERT_EQ(out.size(), kCtr0Size);
    // 0xff + 2^17 + slot: byte 13 gets 0x02, byte 15 0xff + slot mod 256
    // with its carry into byte 14.
    EXPECT_EQ(static_cast<unsigned char>(out[13]), 0x02) << slot;
    const unsigned low = 0xff + slot;
    EXPECT_EQ(static_cast<unsigned char>(out[14]), low >> 8) << slot;
    EXPECT_EQ(static_cast<unsigned char>(out[15]), low & 0xff) << slot;
    for (const std::string& g : got) EXPECT_NE(g, out) << slot;
    got.push_back(out);
  }
  std::string slot0, legacy;
  ASSERT_TRUE(LinkedPadCtr0(c0, 0, &slot0));
  ASSERT_TRUE(LinkedPadCtr0(c0, &legacy));
  EXPECT_EQ(slot0, legacy);
  std::string untouched = "x";
  EXPECT_FALSE(LinkedPadCtr0(c0, kPadSlots, &untouched));
  EXPECT_EQ(untouched, "x");
  // 2^128 - 1 - (2^17 + 2): slots 0..2 fit, slot 3 would pass 2^128 - 1.
  std::string top(kCtr0Size, '\xff');
  top[13] = '\xfd';
  top[14] = '\xff';
  top[15] = '\xfd';
  std::string out;
  EXPECT_TRUE(LinkedPadCtr0(top, 2, &out));
  EXPECT_FALSE(LinkedPadCtr0(top, 3, &out));
}

// The exact data_shares sizes the servers require: two shares of each
// CHECKSUM / VERIFY_CHECKSUM message (no other job type takes any), of
// each Sign item's message; uint32 lengths do not wrap the sum.
TEST(ShareBytes, TwoSharesPerMessage) {
  pb::RunRequest run;
  for (pb::JobType t : {pb::JOB_ENCRYPT, pb::JOB_CHECKSUM, pb::JOB_DECRYPT,
                        pb::JOB_VERIFY_CHECKSUM, pb::JOB_PAD}) {
    pb::Job* j = run.add_jobs();
    j->set_type(t);
    j->set_length(0xffffffffu);
  }
  // A VERIFY_CHECKSUM's shares carry the presented tag after D.
  EXPECT_EQ(RunShareBytes(run), 4 * uint64_t{0xffffffffu} + 2 * kTagSize);
  run.mutable_jobs(1)->set_length(5);
  EXPECT_EQ(RunShareBytes(run), 10 + 2 * uint64_t{0xffffffffu} + 2 * kTagSize);
  EXPECT_EQ(RunShareBytes(pb::RunRequest()), 0u);
  pb::SignRequest sign;
  sign.add_items()->set_length(7);
  sign.add_items()->set_length(0);
  sign.add_items()->set_length(9);
  EXPECT_EQ(SignShareBytes(sign), 32u);
  sign.mutable_items(1)->set_verify(true);  // D || t'
  EXPECT_EQ(SignShareBytes(sign), 32u + 2 * kTagSize);
  EXPECT_EQ(SharedBytes(sign.items(1)), kTagSize);
  EXPECT_EQ(SharedBytes(pb::JOB_VERIFY_CHECKSUM, 7), 7 + kTagSize);
  EXPECT_EQ(SharedBytes(pb::JOB_CHECKSUM, 7), 7u);
  EXPECT_EQ(SharedBytes(pb::JOB_PAD, 7), 0u);
}

TEST(CheckJob, Encrypt) {
  JobShape j{pb::JOB_ENCRYPT, pb::CIPHER_AES128, kKeyIdSize, 100, "", ""};
  EXPECT_TRUE(CheckJob(j).ok());
  EXPECT_EQ(JobBlocks(j), 7u + 1);
  EXPECT_EQ(RevealedBytes(j), 100u);
  j.length = 0;
  EXPECT_TRUE(CheckJob(j).ok());
  EXPECT_EQ(JobBlocks(j), 1u);
  j.length = kMaxJobBytes;
  EXPECT_TRUE(CheckJob(j).ok());
  j.length = kMaxJobBytes + 1;
  EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED);
  j.length = 16;
  j.data = "x";
  EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED);
}

TEST(CheckJob, KeyIdMustBe32Bytes) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{33}, size_t{256}}) {
    JobShape j{pb::JOB_ENCRYPT, pb::CIPHER_AES128, n, 16, "", ""};
    JobCheck c = CheckJob(j);
    EXPECT_EQ(c.status, pb::JOB_MALFORMED) << n;
    EXPECT_NE(c.detail.find("key id"), std::string::npos);
  }
}

// kmpc.proto Job.cipher: required, and one of the two MPC enctypes'.
TEST(CheckJob, CipherIsRequiredAndKnown) {
  for (pb::Cipher c : {pb::CIPHER_AES128, pb::CIPHER_AES256})
    for (pb::JobType t : {pb::JOB_ENCRYPT, pb::JOB_CHECKSUM, pb::JOB_PAD}) {
      JobShape j{t, c, kKeyIdSize, 16, "", ""};
      if (t == pb::JOB_CHECKSUM) j.share_sizes[0] = j.share_sizes[1] = 16;
      EXPECT_TRUE(CheckJob(j).ok()) << c << " " << t;
    }
  for (pb::Cipher c : {pb::CIPHER_UNSPECIFIED, static_cast<pb::Cipher>(3),
                       static_cast<pb::Cipher>(-1)}) {
    JobShape j{pb::JOB_ENCRYPT, c, kKeyIdSize, 16, "", ""};
    JobCheck r = CheckJob(j);
    EXPECT_EQ(r.status, pb::JOB_MALFORMED) << c;
    EXPECT_NE(r.detail.find("cipher"), std::string::npos) << r.detail;
  }
  pb::Job job;
  job.set_type(pb::JOB_ENCRYPT);
  job.set_key_id(kKeyId);
  job.set_length(16);
  EXPECT_EQ(CheckJob(ShapeOf(job)).status, pb::JOB_MALFORMED);  // no cipher
  job.set_cipher(pb::CIPHER_AES256);
  EXPECT_EQ(ShapeOf(job).cipher, pb::CIPHER_AES256);
  EXPECT_TRUE(CheckJob(ShapeOf(job)).ok());
}

// The aes*-cts jobs (kmpc.proto JobType): DECRYPT of C || T, ENCRYPT and
// CHECKSUM of a message, each dealt as shares, nothing else; what they
// take and reveal.
TEST(CheckJob, CtsCiphers) {
  for (pb::Cipher c : {pb::CIPHER_AES128_CTS, pb::CIPHER_AES256_CTS}) {
    EXPECT_TRUE(KnownCipher(c) && CtsCipher(c));
    JobShape d{pb::JOB_DECRYPT, c, kKeyIdSize, 44 + kCtsTag, "", ""};
    EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);  // no shares
    EXPECT_EQ(SharedBytes(pb::JOB_DECRYPT, c, 44 + kCtsTag), 44u + kCtsTag);
    d.share_sizes[0] = d.share_sizes[1] = 44 + kCtsTag;
    EXPECT_TRUE(CheckJob(d).ok()) << CheckJob(d).detail;
    EXPECT_EQ(RevealedBytes(d), 44u);
    EXPECT_EQ(std::get<2>(CtsShapeOf(d)), 44u);
    EXPECT_FALSE(ResultHasCtr0(d, pb::JOB_OK));
    // C || T in the clear (wire version 8's form): a password verifier
    // for every server, refused whatever the shares.
    const std::string ct(44 + kCtsTag, 'c');
    JobShape clear = d;
    clear.data = ct;
    EXPECT_EQ(CheckJob(clear).status, pb::JOB_MALFORMED);
    clear.length = 0;
    clear.share_sizes[0] = clear.share_sizes[1] = 0;
    EXPECT_EQ(CheckJob(clear).status, pb::JOB_MALFORMED);
    JobShape shortd{pb::JOB_DECRYPT, c, kKeyIdSize, 27, "", ""};
    shortd.share_sizes[0] = shortd.share_sizes[1] = 27;
    EXPECT_EQ(CheckJob(shortd).status, pb::JOB_INTEGRITY_FAILED);
    JobShape e{pb::JOB_ENCRYPT, c, kKeyIdSize, 300, "", ""};
    EXPECT_EQ(CheckJob(e).status, pb::JOB_MALFORMED);  // no shares
    e.share_sizes[0] = e.share_sizes[1] = 300;
    EXPECT_TRUE(CheckJob(e).ok()) << CheckJob(e).detail;
    EXPECT_EQ(RevealedBytes(e), 16u + 300 + 12);
    EXPECT_EQ(SharedBytes(pb::JOB_ENCRYPT, c, 300), 300u);
    e.data = "plaintext";
    EXPECT_EQ(CheckJob(e).status, pb::JOB_MALFORMED);  // never in the clear
    JobShape big{pb::JOB_ENCRYPT, c, kKeyIdSize, kMaxCtsBytes, "", ""};
    big.share_sizes[0] = big.share_sizes[1] = kMaxCtsBytes;
    EXPECT_EQ(CheckJob(big).status, pb::JOB_MALFORMED);
    JobShape k{pb::JOB_CHECKSUM, c, kKeyIdSize, 20, "", ""};
    k.share_sizes[0] = k.share_sizes[1] = 20;
    EXPECT_TRUE(CheckJob(k).ok());
    EXPECT_EQ(RevealedBytes(k), kCtsTag);
    for (pb::JobType t : {pb::JOB_VERIFY_CHECKSUM, pb::JOB_PAD, pb::JOB_FINALIZE}) {
      JobShape x{t, c, kKeyIdSize, 16, "", Ctr0(1)};
      EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED) << t;
      EXPECT_EQ(SharedBytes(t, c, 16), 0u);
    }
  }
  pb::RunRequest run;
  pb::Job* j = run.add_jobs();
  j->set_type(pb::JOB_ENCRYPT);
  j->set_cipher(pb::CIPHER_AES256_CTS);
  j->set_length(7);
  run.add_jobs()->set_type(pb::JOB_ENCRYPT);  // ctr-mpc: no shares
  run.mutable_jobs(1)->set_length(9);
  EXPECT_EQ(RunShareBytes(run), 14u);
  run.set_data_shares(std::string(14, 's'));
  EXPECT_EQ(SliceMessageShares(run)[0].first.size(), 7u);
  EXPECT_TRUE(SliceMessageShares(run)[1].first.empty());
}

// FAST keys (kmpc.proto Job.cts_key): the KDC's half leads the job's
// shares (a DECRYPT's only ones), on aes*-cts DECRYPT and ENCRYPT only.
TEST(CheckJob, CtsFastKeys) {
  EXPECT_EQ(CtsKeyBytes(pb::CTS_KEY_DEALT), 0u);
  EXPECT_EQ(CtsKeyBytes(pb::CTS_KEY_CF2_AES128), 16u);
  EXPECT_EQ(CtsKeyBytes(pb::CTS_KEY_CF2_AES256), 32u);
  const pb::Cipher c = pb::CIPHER_AES256_CTS;
  JobShape d{pb::JOB_DECRYPT, c, kKeyIdSize, 44 + kCtsTag, "", ""};
  d.cts_key = pb::CTS_KEY_CF2_AES256;
  d.share_sizes[0] = d.share_sizes[1] = 44 + kCtsTag;
  EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);  // no half
  d.share_sizes[0] = d.share_sizes[1] = 32 + 44 + kCtsTag;
  EXPECT_TRUE(CheckJob(d).ok()) << CheckJob(d).detail;
  EXPECT_EQ(RevealedBytes(d), 44u);
  d.share_sizes[1] = 16;
  EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);
  JobShape e{pb::JOB_ENCRYPT, c, kKeyIdSize, 300, "", ""};
  e.cts_key = pb::CTS_KEY_CF2_AES128;
  EXPECT_EQ(SharedBytes(pb::JOB_ENCRYPT, c, 300, pb::CTS_KEY_CF2_AES128), 316u);
  e.share_sizes[0] = e.share_sizes[1] = 300;
  EXPECT_EQ(CheckJob(e).status, pb::JOB_MALFORMED);
  e.share_sizes[0] = e.share_sizes[1] = 316;
  EXPECT_TRUE(CheckJob(e).ok()) << CheckJob(e).detail;
  EXPECT_EQ(RevealedBytes(e), 16u + 300 + 12);
  JobShape k{pb::JOB_CHECKSUM, c, kKeyIdSize, 20, "", ""};
  k.share_sizes[0] = k.share_sizes[1] = 20;
  k.cts_key = pb::CTS_KEY_CF2_AES256;
  EXPECT_EQ(CheckJob(k).status, pb::JOB_MALFORMED);
  JobShape ctr{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 32, "", ""};
  ctr.cts_key = pb::CTS_KEY_CF2_AES256;
  EXPECT_EQ(CheckJob(ctr).status, pb::JOB_MALFORMED);
  d.cts_key = static_cast<pb::CtsKey>(9);
  EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);
  pb::RunRequest run;
  pb::Job* j = run.add_jobs();
  j->set_type(pb::JOB_DECRYPT);
  j->set_cipher(c);
  j->set_cts_key(pb::CTS_KEY_CF2_AES128);
  j->set_length(30);
  pb::Job* j2 = run.add_jobs();
  j2->set_type(pb::JOB_ENCRYPT);
  j2->set_cipher(c);
  j2->set_length(7);
  j2->set_cts_key(pb::CTS_KEY_CF2_AES256);
  EXPECT_EQ(RunShareBytes(run), 2u * (16 + 30 + 39));
  run.set_data_shares(std::string(2 * (16 + 30 + 39), 's'));
  EXPECT_EQ(SliceMessageShares(run)[0].first.size(), 46u);
  EXPECT_EQ(SliceMessageShares(run)[1].first.size(), 39u);
}

// Length classes (cts-circuits.md): an ENCRYPT's shape names n's class
// (one CBC and one SHA-1 block count) by its largest length, a
// CHECKSUM's its SHA-1 block count's, a splice's offset its window of 16;
// a DECRYPT keeps its length.
TEST(CtsShape, NamesTheLengthClass) {
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 16), 16u);
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 17), 32u);
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 49), 55u);   // 49..55: one SHA-1 block
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 56), 64u);   // 56..64: two
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 305), 311u);
  EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, 312), 320u);
  EXPECT_EQ(CtsClassMax(pb::JOB_CHECKSUM, 0), 55u);
  EXPECT_EQ(CtsClassMax(pb::JOB_CHECKSUM, 56), 119u);
  EXPECT_EQ(CtsClassMax(pb::JOB_DECRYPT, 44), 44u);
  for (uint64_t n = 16; n <= 2048; ++n)
    EXPECT_EQ(CtsClassMax(pb::JOB_ENCRYPT, CtsClassMax(pb::JOB_ENCRYPT, n)),
              CtsClassMax(pb::JOB_ENCRYPT, n)) << n;
  EXPECT_EQ(CtsSpliceWindow(288), 292u);  // the checksum ends byte 316 of conf || P
  EXPECT_EQ(CtsSpliceWindow(292), 292u);
  EXPECT_EQ(CtsSpliceWindow(293), 308u);
  EXPECT_EQ(MakeCtsShape(pb::JOB_ENCRYPT, 14, 316, 0, 0, 320, 288),
            MakeCtsShape(pb::JOB_ENCRYPT, 14, 312, 0, 0, 320, 284));
  EXPECT_NE(MakeCtsShape(pb::JOB_ENCRYPT, 14, 311, 0, 0), MakeCtsShape(pb::JOB_ENCRYPT, 14, 312, 0, 0));
}

// A signed ticket's shape (CtsTicketClassMax, CtsTicketWindow): one SHA-1
// block count of conf || P, and T_s's start by its SHA-1 block, so that
// clients' names of other lengths share it; the reply's splice keeps its
// classes and windows of 16.
TEST(CtsShape, NamesASignedTicketsWiderClass) {
  EXPECT_EQ(CtsTicketClassMax(568), 631u);  // 568..631: ten SHA-1 blocks
  EXPECT_EQ(CtsTicketClassMax(631), 631u);
  EXPECT_EQ(CtsTicketClassMax(632), 695u);
  EXPECT_EQ(CtsTicketWindow(0), 47u);  // T_s starts in conf || P's first block
  EXPECT_EQ(CtsTicketWindow(47), 47u);
  EXPECT_EQ(CtsTicketWindow(48), 111u);
  EXPECT_EQ(CtsTicketWindow(111), 111u);
  EXPECT_EQ(CtsTicketWindow(112), 175u);
  const auto ticket = [](uint64_t n, uint64_t off) {
    return MakeCtsShape(pb::JOB_ENCRYPT, 14, n, 0, kTicketUsage, 384, off);
  };
  EXPECT_EQ(ticket(568, 400), ticket(631, 431));
  EXPECT_EQ(std::get<2>(ticket(568, 400)), 631u);
  EXPECT_EQ(std::get<6>(ticket(568, 400)), 431u);
  EXPECT_NE(ticket(568, 431), ticket(568, 432));  // T_s's next SHA-1 block
  EXPECT_NE(ticket(631, 400), ticket(632, 400));
  EXPECT_NE(ticket(600, 400), MakeCtsShape(pb::JOB_ENCRYPT, 14, 600, 0, kTicketUsage, 448, 400));
  // The reply's splice: CBC and SHA-1 block counts, windows of 16.
  EXPECT_NE(MakeCtsShape(pb::JOB_ENCRYPT, 14, 568, 0, 0, 384, 400),
            MakeCtsShape(pb::JOB_ENCRYPT, 14, 600, 0, 0, 384, 400));
  EXPECT_NE(MakeCtsShape(pb::JOB_ENCRYPT, 14, 600, 0, 0, 384, 400),
            MakeCtsShape(pb::JOB_ENCRYPT, 14, 600, 0, 0, 384, 420));
}

// The depth bound the KDC module's deep lane reads: a login's spliced
// reply well below deep_rounds' default (8,000), the caps' longest far
// above; only aes*-cts jobs have one.
TEST(CtsShape, DepthBound) {
  JobShape reply{pb::JOB_ENCRYPT, pb::CIPHER_AES256_CTS, kKeyIdSize, 300, "", ""};
  reply.splice_length = 320;
  EXPECT_GT(CtsDepthBound(reply), 4301u);  // cts_test SpliceFigures' depth
  EXPECT_LT(CtsDepthBound(reply), 12000u);
  JobShape deep = reply;
  deep.length = kMaxCtsBytes - kCtsConfounder;
  deep.splice_length = kMaxCtsSpliceBytes;
  EXPECT_GT(CtsDepthBound(deep), 20000u);
  JobShape ts{pb::JOB_DECRYPT, pb::CIPHER_AES256_CTS, kKeyIdSize, 56, "", ""};
  EXPECT_GT(CtsDepthBound(ts), 1069u);  // cts_test LoginFigures
  EXPECT_LT(CtsDepthBound(ts), 2000u);
  JobShape ctr{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 300, "", ""};
  EXPECT_EQ(CtsDepthBound(ctr), 0u);
}

// The PA-REQ-ENC-PA-REP splice (kmpc.proto Job.splice_length,
// splice_offset): on a usage-3 aes*-cts ENCRYPT under the dealt key only,
// D's shares after P's, the 12 bytes inside P; anything else MALFORMED.
TEST(CheckJob, CtsSplice) {
  EXPECT_GE(kWireVersion, 10u);
  for (pb::Cipher c : {pb::CIPHER_AES128_CTS, pb::CIPHER_AES256_CTS}) {
    JobShape e{pb::JOB_ENCRYPT, c, kKeyIdSize, 300, "", ""};
    e.usage = kSpliceReplyUsage;
    e.splice_length = 320;  // a 250-byte AS-REQ with its padding
    e.splice_offset = 288;
    EXPECT_EQ(SharedBytes(pb::JOB_ENCRYPT, c, 300, pb::CTS_KEY_DEALT, 320), 620u);
    e.share_sizes[0] = e.share_sizes[1] = 300;  // D's shares missing
    EXPECT_EQ(CheckJob(e).status, pb::JOB_MALFORMED);
    e.share_sizes[0] = e.share_sizes[1] = 620;
    EXPECT_TRUE(CheckJob(e).ok()) << CheckJob(e).detail;
    EXPECT_EQ(RevealedBytes(e), 16u + 300 + 12);  // C || T only
    const uint64_t spliced_blocks = JobBlocks(e);
    JobShape plain = e;
    plain.splice_length = plain.splice_offset = 0;
    plain.share_sizes[0] = plain.share_sizes[1] = 300;
    EXPECT_TRUE(CheckJob(plain).ok());
    EXPECT_GT(spliced_blocks, JobBlocks(plain) + CeilBlocks(250));
    // The 12 bytes must fit in P: offset 289 of 300 does not.
    JobShape x = e;
    x.splice_offset = 289;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    x.splice_offset = 301;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    x.splice_offset = 0xffffffffu;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    x = e;
    x.length = 11;
    x.splice_offset = 0;
    x.share_sizes[0] = x.share_sizes[1] = 11 + 320;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    x.length = 12;
    x.share_sizes[0] = x.share_sizes[1] = 12 + 320;
    EXPECT_TRUE(CheckJob(x).ok()) << CheckJob(x).detail;
    // An offset without a length.
    x = plain;
    x.splice_offset = 4;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    // Another usage, a FAST key.
    x = e;
    x.usage = 2;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    x = e;
    x.cts_key = pb::CTS_KEY_CF2_AES256;
    x.share_sizes[0] = x.share_sizes[1] = 32 + 620;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    // D over the cap, D not dealt padded (not a multiple of 64).
    x = e;
    x.splice_length = kMaxCtsSpliceBytes + 64;
    x.share_sizes[0] = x.share_sizes[1] = 300 + kMaxCtsSpliceBytes + 64;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    EXPECT_NE(CtsLengthProblem(x), "");
    x.splice_length = kMaxCtsSpliceBytes;
    x.share_sizes[0] = x.share_sizes[1] = 300 + kMaxCtsSpliceBytes;
    EXPECT_TRUE(CheckJob(x).ok()) << CheckJob(x).detail;
    x.splice_length = 250;
    x.share_sizes[0] = x.share_sizes[1] = 550;
    EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
    EXPECT_EQ(CtsLengthProblem(x), "");
    // DECRYPT and CHECKSUM: no splice (and no shares counted for one).
    JobShape d{pb::JOB_DECRYPT, c, kKeyIdSize, 44 + kCtsTag, "", ""};
    d.usage = kSpliceReplyUsage;
    d.splice_length = 250;
    d.share_sizes[0] = d.share_sizes[1] = 44 + kCtsTag;
    EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);
    EXPECT_EQ(SharedBytes(pb::JOB_DECRYPT, c, 44 + kCtsTag, pb::CTS_KEY_DEALT, 250),
              44u + kCtsTag);
    d.share_sizes[0] = d.share_sizes[1] = 44 + kCtsTag + 250;
    EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);
    JobShape k{pb::JOB_CHECKSUM, c, kKeyIdSize, 20, "", ""};
    k.usage = kSpliceReplyUsage;
    k.splice_length = 250;
    k.share_sizes[0] = k.share_sizes[1] = 20;
    EXPECT_EQ(CheckJob(k).status, pb::JOB_MALFORMED);
    k.share_sizes[0] = k.share_sizes[1] = 270;
    EXPECT_EQ(CheckJob(k).status, pb::JOB_MALFORMED);
  }
}

// A ticket signed in the cluster (kmpc.proto Job.sign_pad): the PAC
// spliced into a usage-2 ENCRYPT, room for both signatures (the KDC's
// kTicketSignatureGap after the server's), its shape its own (the usage
// kept) and not the reply splice's; sign_pad on anything else MALFORMED.
TEST(CheckJob, CtsTicketSignatures) {
  EXPECT_GE(kWireVersion, 16u);
  JobShape t{pb::JOB_ENCRYPT, pb::CIPHER_AES256_CTS, kKeyIdSize, 560, "", ""};
  t.usage = kTicketUsage;
  t.splice_length = 384;  // a 330-byte PAC with its padding
  t.splice_offset = 480;
  t.sign_pad = true;
  t.share_sizes[0] = t.share_sizes[1] = 560 + 384;
  EXPECT_TRUE(CheckJob(t).ok()) << CheckJob(t).detail;
  EXPECT_EQ(RevealedBytes(t), 16u + 560 + 12);
  JobShape r = t;
  r.usage = kSpliceReplyUsage;
  r.sign_pad = false;
  EXPECT_TRUE(CheckJob(r).ok());
  EXPECT_NE(CtsShapeOf(t), CtsShapeOf(r));
  EXPECT_EQ(std::get<4>(CtsShapeOf(t)), kTicketUsage);
  // 12 + 4 + 32 bytes from the offset must fit in P.
  JobShape x = t;
  x.splice_offset = 560 - 48;
  EXPECT_TRUE(CheckJob(x).ok());
  x.splice_offset = 560 - 47;
  EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
  // A usage-2 splice without sign_pad, sign_pad without a splice or on
  // another usage, type or cipher.
  x = t;
  x.sign_pad = false;
  EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
  x = r;
  x.sign_pad = true;
  EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
  x = t;
  x.splice_length = x.splice_offset = 0;
  x.share_sizes[0] = x.share_sizes[1] = 560;
  EXPECT_EQ(CheckJob(x).status, pb::JOB_MALFORMED);
  JobShape k{pb::JOB_CHECKSUM, pb::CIPHER_AES256_CTS, kKeyIdSize, 20, "", ""};
  k.usage = kTicketChecksumUsage;
  k.sign_pad = true;
  k.share_sizes[0] = k.share_sizes[1] = 20;
  EXPECT_EQ(CheckJob(k).status, pb::JOB_MALFORMED);
  JobShape ctr{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 560, "", ""};
  ctr.usage = kTicketUsage;
  ctr.sign_pad = true;
  EXPECT_EQ(CheckJob(ctr).status, pb::JOB_MALFORMED);
  pb::Job j;
  j.set_sign_pad(7);
  EXPECT_TRUE(ShapeOf(j).sign_pad);
}

// A splice on a ctr-mpc job is MALFORMED; a request's shares are sliced
// with D after P (SharedBytes(const Job&)), and ShapeOf carries the splice
// fields and the usage to the check.
TEST(CheckJob, CtsSpliceInARequest) {
  JobShape ctr{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 300, "", ""};
  ctr.usage = kSpliceReplyUsage;
  EXPECT_TRUE(CheckJob(ctr).ok());
  ctr.splice_length = 250;
  ctr.splice_offset = 10;
  EXPECT_EQ(CheckJob(ctr).status, pb::JOB_MALFORMED);
  ctr.splice_length = 0;
  EXPECT_EQ(CheckJob(ctr).status, pb::JOB_MALFORMED);
  pb::RunRequest run;
  pb::Job* j = run.add_jobs();
  j->set_type(pb::JOB_ENCRYPT);
  j->set_cipher(pb::CIPHER_AES256_CTS);
  j->set_key_id(std::string(kKeyIdSize, 'k'));
  j->set_usage(kSpliceReplyUsage);
  j->set_length(20);
  j->set_splice_length(64);
  j->set_splice_offset(8);
  pb::Job* j2 = run.add_jobs();
  j2->set_type(pb::JOB_CHECKSUM);
  j2->set_cipher(pb::CIPHER_AES256_CTS);
  j2->set_length(5);
  EXPECT_EQ(SharedBytes(*j), 84u);
  EXPECT_EQ(RunShareBytes(run), 2u * (84 + 5));
  run.set_data_shares(std::string(2 * (84 + 5), 's'));
  const auto sliced = SliceMessageShares(run);
  EXPECT_EQ(sliced[0].first.size(), 84u);
  EXPECT_EQ(sliced[1].first.size(), 5u);
  EXPECT_TRUE(CheckJob(ShapeOf(*j, &sliced[0])).ok()) << CheckJob(ShapeOf(*j, &sliced[0])).detail;
  j->set_splice_offset(9);
  EXPECT_EQ(CheckJob(ShapeOf(*j, &sliced[0])).status, pb::JOB_MALFORMED);
}

// Bounded depth (contract.h kMaxCtsBytes): each aes*-cts job kind is
// capped at what real exchanges need; the cap is CtsLengthProblem's, and
// CheckJob fails a job over it JOB_MALFORMED with that detail.
TEST(CheckJob, CtsLengthCaps) {
  const pb::Cipher c = pb::CIPHER_AES256_CTS;
  // A DECRYPT's C || T goes as shares, its length in the clear.
  JobShape d{pb::JOB_DECRYPT, c, kKeyIdSize, kMaxCtsDecryptBytes + kCtsTag, "", ""};
  d.share_sizes[0] = d.share_sizes[1] = d.length;
  EXPECT_TRUE(CheckJob(d).ok()) << CheckJob(d).detail;
  d.length += 1;
  d.share_sizes[0] = d.share_sizes[1] = d.length;
  EXPECT_EQ(CheckJob(d).status, pb::JOB_MALFORMED);
  EXPECT_EQ(CheckJob(d).detail, CtsLengthProblem(d));
  EXPECT_NE(CtsLengthProblem(d).find("at most 268"), std::string::npos) << CtsLengthProblem(d);
  // A ticket presented back (usage 2) is capped as a ticket is.
  JobShape t = d;
  t.usage = kTicketUsage;
  t.length = kMaxCtsBytes + kCtsTag;
  t.share_sizes[0] = t.share_sizes[1] = t.length;
  EXPECT_TRUE(CheckJob(t).ok()) << CheckJob(t).detail;
  t.length += 1;
  t.share_sizes[0] = t.share_sizes[1] = t.length;
  EXPECT_NE(CtsLengthProblem(t).find("at most 2060"), std::string::npos) << CtsLengthProblem(t);
  JobShape e{pb::JOB_ENCRYPT, c, kKeyIdSize, kMaxCtsBytes - kCtsConfounder, "", ""};
  e.usage = 2;
  e.share_sizes[0] = e.share_sizes[1] = e.length;
  EXPECT_TRUE(CheckJob(e).ok()) << CheckJob(e).detail;
  e.length += 1;
  e.share_sizes[0] = e.share_sizes[1] = e.length;
  EXPECT_EQ(CheckJob(e).status, pb::JOB_MALFORMED);
  EXPECT_NE(CtsLengthProblem(e), "");
  JobShape k{pb::JOB_CHECKSUM, c, kKeyIdSize, kMaxCtsBytes + 1, "", ""};
  k.usage = 17;
  k.share_sizes[0] = k.share_sizes[1] = k.length;
  EXPECT_EQ(CheckJob(k).status, pb::JOB_MALFORMED);
  EXPECT_NE(CtsLengthProblem(k), "");
  JobShape ctr{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 100000, "", ""};
  EXPECT_EQ(CtsLengthProblem(ctr), "");  // ctr-mpc jobs: kMaxJobBytes
}

TEST(CheckJob, Decrypt) {
  std::string data = Ctr0(7) + std::string(40, 'c') + std::string(16, 't');
  JobShape j{pb::JOB_DECRYPT, pb::CIPHER_AES128, kKeyIdSize, 0, data, ""};
  EXPECT_TRUE(CheckJob(j).ok());
  EXPECT_EQ(JobBlocks(j), 3u + 1);
  EXPECT_EQ(RevealedBytes(j), 40u);
  // Shorter than ctr0 || T, or a counter range through zero: cannot verify.
  std::string short_data(31, '\1');
  j.data = short_data;
  EXPECT_EQ(CheckJob(j).status, pb::JOB_INTEGRITY_FAILED);
  EXPECT_EQ(JobBlocks(j), 1u);
  std::string zero = Ctr0(0) + std::string(16, 't');
  j.data = zero;
  EXPECT_EQ(CheckJob(j).status, pb::JOB_INTEGRITY_FAILED);
  std::string wrap = Ctr0(0xff, 0xff) + std::string(1, 'c') + std::string(16, 't');
  j.data = wrap;
  EXPECT_EQ(CheckJob(j).status, pb::JOB_INTEGRITY_FAILED);
  // Exactly ctr0 || T: an empty plaintext.
  std::string empty = Ctr0(1) + std::string(16, 't');
  j.data = empty;
  EXPECT_TRUE(CheckJob(j).ok());
  j.length = 1;
  EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED);
}

// A message to checksum as shares of `n` bytes each (the module's view
// before it deals them, and a server's after).
JobShape Shared(pb::JobType t, uint64_t n, absl::string_view checksum = "") {
  JobShape j{t, pb::CIPHER_AES128, kKeyIdSize, n, "", checksum};
  j.share_sizes[0] = j.share_sizes[1] = SharedBytes(t, n);
  return j;
}

TEST(CheckJob, ChecksumAndVerify) {
  JobShape c = Shared(pb::JOB_CHECKSUM, 7);
  EXPECT_TRUE(CheckJob(c).ok());
  EXPECT_EQ(JobBlocks(c), 1u);
  EXPECT_EQ(JobCost(c), 2u);  // the AES block of the tag mask + 1 of GHASH
  EXPECT_EQ(RevealedBytes(c), kTagSize);
  JobShape whole = Shared(pb::JOB_CHECKSUM, kMaxJobBytes);
  EXPECT_TRUE(CheckJob(whole).ok());
  EXPECT_EQ(JobBlocks(whole), 1u);
  EXPECT_EQ(JobCost(whole), kMaxJobBlocks + 1);  // counted as a 1 MiB DECRYPT
  JobShape enc{pb::JOB_ENCRYPT, pb::CIPHER_AES128, kKeyIdSize, 100, "", ""};
  EXPECT_EQ(JobCost(enc), JobBlocks(enc));
  c.checksum = "x";
  EXPECT_EQ(CheckJob(c).status, pb::JOB_MALFORMED);

  // On the wire a VERIFY_CHECKSUM carries its ctr0 in the clear, the tag
  // as shares after D (kmpc.proto JOB_VERIFY_CHECKSUM).
  std::string sum = Ctr0(9);
  JobShape v = Shared(pb::JOB_VERIFY_CHECKSUM, 7, sum);
  EXPECT_TRUE(CheckJob(v).ok());
  EXPECT_EQ(JobCost(v), 2u);
  EXPECT_EQ(RevealedBytes(v), 0u);
  std::string clear_tag = sum + std::string(16, 't');  // a tag in the clear
  v.checksum = clear_tag;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_INTEGRITY_FAILED);
  std::string short_sum = sum.substr(0, 15);
  v.checksum = short_sum;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_INTEGRITY_FAILED);
  std::string zero_sum = Ctr0(0);
  v.checksum = zero_sum;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_INTEGRITY_FAILED);
  v.checksum = sum;
  v.share_sizes[0] = v.share_sizes[1] = 7;  // D without the tag
  EXPECT_EQ(CheckJob(v).status, pb::JOB_MALFORMED);
  JobShape big = Shared(pb::JOB_VERIFY_CHECKSUM, kMaxJobBytes + 1, sum);
  EXPECT_EQ(CheckJob(big).status, pb::JOB_MALFORMED);
}

// enctype.md invariant 5: a checksum's message never reaches a server in
// the clear, and each server's two shares are as long as the message.
TEST(CheckJob, ChecksumMessageOnlyAsShares) {
  for (pb::JobType t : {pb::JOB_CHECKSUM, pb::JOB_VERIFY_CHECKSUM}) {
    const std::string sum = Ctr0(9);
    JobShape j = Shared(t, 7, t == pb::JOB_VERIFY_CHECKSUM ? sum : "");
    j.data = "message";
    JobCheck r = CheckJob(j);
    EXPECT_EQ(r.status, pb::JOB_MALFORMED) << t;
    EXPECT_NE(r.detail.find("shares"), std::string::npos) << r.detail;
    EXPECT_EQ(r.detail.find("message\""), std::string::npos);  // no data echoed
    j.data = "";
    j.share_sizes[1] = 6;
    EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED) << t;
    j.share_sizes[0] = j.share_sizes[1] = 0;
    EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED) << t;  // shares missing
  }
  // From the proto: the shares' sizes are read from the request's flat
  // buffer (RunRequest.data_shares), a clear message is seen.
  pb::RunRequest req;
  pb::Job& job = *req.add_jobs();
  job.set_type(pb::JOB_CHECKSUM);
  job.set_cipher(pb::CIPHER_AES256);
  job.set_key_id(kKeyId);
  job.set_length(3);
  req.set_data_shares("abcdef");
  auto shape = [&] {
    const std::vector<MessageShares> m = SliceMessageShares(req);
    EXPECT_EQ(m.size(), 1u);
    return ShapeOf(req.jobs(0), &m[0]);
  };
  EXPECT_TRUE(CheckJob(shape()).ok());
  EXPECT_EQ(SliceMessageShares(req)[0].first, "abc");
  EXPECT_EQ(SliceMessageShares(req)[0].second, "def");
  job.set_data("abc");
  EXPECT_EQ(CheckJob(shape()).status, pb::JOB_MALFORMED);
  job.clear_data();
  req.set_data_shares("abcde");  // a buffer short of the job's slice
  EXPECT_EQ(CheckJob(shape()).status, pb::JOB_MALFORMED);
  // An empty message: no shares at all is two empty shares.
  job.set_length(0);
  req.clear_data_shares();
  EXPECT_TRUE(CheckJob(shape()).ok());
}

// The flat layout (kmpc.proto, "Shares travel flat"): slices in job order
// for the types that take shares, each 2 * length; a job whose slice the
// buffer does not hold whole gets none, and the reader stays put.
TEST(FlatShares, SlicesInJobOrder) {
  pb::RunRequest req;
  auto add = [&](pb::JobType t, uint32_t len) {
    pb::Job* j = req.add_jobs();
    j->set_type(t);
    j->set_length(len);
  };
  add(pb::JOB_CHECKSUM, 2);
  add(pb::JOB_ENCRYPT, 100);  // takes no shares
  add(pb::JOB_VERIFY_CHECKSUM, 1);  // D || t': 17 bytes per share
  add(pb::JOB_CHECKSUM, 3);
  req.set_data_shares("aabbc" + std::string(16, 'T') + "d" + std::string(16, 'U') +
                      "XYZ");
  const std::vector<MessageShares> m = SliceMessageShares(req);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].first, "aa");
  EXPECT_EQ(m[0].second, "bb");
  EXPECT_TRUE(m[1].first.empty() && m[1].second.empty());
  EXPECT_EQ(m[2].first, "c" + std::string(16, 'T'));
  EXPECT_EQ(m[2].second, "d" + std::string(16, 'U'));
  EXPECT_TRUE(m[3].first.empty() && m[3].second.empty());  // 3 of 6 bytes
  FlatReader r("0123456789");
  EXPECT_TRUE(r.Take(11).empty());
  EXPECT_EQ(r.left(), 10u);
  EXPECT_EQ(r.Take(4), "0123");
  EXPECT_EQ(r.TakePair(3).second, "789");
  EXPECT_EQ(r.left(), 0u);
}

TEST(FlatShares, ResultLayout) {
  JobShape enc{pb::JOB_ENCRYPT, pb::CIPHER_AES256, kKeyIdSize, 40, "", ""};
  JobShape pad{pb::JOB_PAD, pb::CIPHER_AES256, kKeyIdSize, 700, "", ""};
  JobShape sum{pb::JOB_CHECKSUM, pb::CIPHER_AES256, kKeyIdSize, 70, "", ""};
  const std::string ct(16 + 25 + 16, 'c');
  JobShape dec{pb::JOB_DECRYPT, pb::CIPHER_AES256, kKeyIdSize, 0, ct, ""};
  EXPECT_EQ(RevealedShareBytes(enc, pb::JOB_OK), 40u);
  EXPECT_EQ(RevealedShareBytes(enc, pb::JOB_WITHHELD), 0u);
  EXPECT_EQ(RevealedShareBytes(pad, pb::JOB_OK), 0u);
  EXPECT_EQ(RevealedShareBytes(sum, pb::JOB_OK), 16u);
  EXPECT_EQ(RevealedShareBytes(dec, pb::JOB_OK), 25u);
  EXPECT_EQ(RevealedShareBytes(dec, pb::JOB_INTEGRITY_FAILED), 0u);
  EXPECT_TRUE(ResultHasCtr0(pb::JOB_ENCRYPT, pb::JOB_OK));
  EXPECT_TRUE(ResultHasCtr0(pb::JOB_PAD, pb::JOB_OK));
  EXPECT_TRUE(ResultHasCtr0(pb::JOB_CHECKSUM, pb::JOB_OK));
  EXPECT_FALSE(ResultHasCtr0(pb::JOB_DECRYPT, pb::JOB_OK));
  EXPECT_FALSE(ResultHasCtr0(pb::JOB_ENCRYPT, pb::JOB_MALFORMED));
}

TEST(FlatShares, WireVersionProblemNamesBothVersions) {
  EXPECT_TRUE(WireVersionProblem(kWireVersion, "x").empty());
  const std::string old = WireVersionProblem(0, "MPC party 1");
  EXPECT_NE(old.find("MPC party 1"), std::string::npos) << old;
  EXPECT_NE(old.find("version 0"), std::string::npos) << old;
  EXPECT_NE(old.find(std::to_string(kWireVersion)), std::string::npos) << old;
  EXPECT_NE(old.find("upgraded together"), std::string::npos) << old;
}

TEST(CheckJob, Pad) {
  JobShape p{pb::JOB_PAD, pb::CIPHER_AES256, kKeyIdSize, 700, "", ""};
  EXPECT_TRUE(CheckJob(p).ok());
  EXPECT_EQ(JobBlocks(p), 1u);
  EXPECT_EQ(JobCost(p), 1u + 44);  // the pad + the powers a 700-byte message needs
  EXPECT_EQ(RevealedBytes(p), 0u);
  EXPECT_STREQ(JobTypeName(pb::JOB_PAD), "PAD");
  p.length = kMaxJobBytes + 1;
  EXPECT_EQ(CheckJob(p).status, pb::JOB_MALFORMED);
  p.length = 16;
  p.data = "x";
  EXPECT_EQ(CheckJob(p).status, pb::JOB_MALFORMED);
  p.data = "";
  p.share_sizes[0] = 16;
  EXPECT_EQ(CheckJob(p).status, pb::JOB_MALFORMED);
}

TEST(CheckJob, FinalizeAndUnknownTypesAreNotRunJobs) {
  for (pb::JobType t : {pb::JOB_TYPE_UNSPECIFIED, pb::JOB_FINALIZE,
                        static_cast<pb::JobType>(99)}) {
    JobShape j{t, pb::CIPHER_AES128, kKeyIdSize, 0, "", ""};
    EXPECT_EQ(CheckJob(j).status, pb::JOB_MALFORMED) << t;
  }
}

TEST(CheckJob, ShapeOfProto) {
  pb::Job job;
  job.set_type(pb::JOB_ENCRYPT);
  job.set_cipher(pb::CIPHER_AES128);
  job.set_key_id(kKeyId);
  job.set_length(33);
  JobShape s = ShapeOf(job);
  EXPECT_EQ(s.key_id_size, kKeyIdSize);
  EXPECT_TRUE(CheckJob(s).ok());
  EXPECT_EQ(JobBlocks(s), 4u);
}

TEST(BatchError, RoundTripsThroughGrpcStatus) {
  grpc::Status st = BatchErrorStatus(pb::BATCH_OVERLOADED, "queue full");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(), "queue full");
  auto e = BatchErrorOf(st);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), pb::BATCH_OVERLOADED);
  EXPECT_EQ(e->detail(), "queue full");
  EXPECT_STREQ(BatchErrorName(e->code()), "BATCH_OVERLOADED");
}

TEST(BatchError, TransportFailuresCarryNone) {
  EXPECT_FALSE(BatchErrorOf(grpc::Status::OK).has_value());
  EXPECT_FALSE(BatchErrorOf(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "connection refused"))
                   .has_value());
  EXPECT_FALSE(BatchErrorOf(grpc::Status(grpc::StatusCode::INTERNAL, "x",
                                         "\xff\xff not a proto"))
                   .has_value());
}

TEST(BatchError, EveryCodeHasADistinctMeaning) {
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_RING_UNAVAILABLE), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_PEERS_DISAGREE), grpc::StatusCode::ABORTED);
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_MALFORMED), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_UNKNOWN_ENCRYPT), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_TIMED_OUT), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(GrpcCodeOf(pb::BATCH_BREAKER_OPEN), grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace kmpc::contract
