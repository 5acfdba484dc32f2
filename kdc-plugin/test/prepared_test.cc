#include "prepared.h"

#include <gtest/gtest.h>

#include <string>

#include "contract.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

HeldKeystream Held(const std::string& ctr0, const std::string& ks) {
  HeldKeystream k;
  k.ctr0 = ctr0;
  k.keystream.assign(ks.begin(), ks.end());
  k.run_batch_id = std::string(16, 'b');
  k.run_job_id = 7;
  return k;
}

// finalize_only: ctr0 || plaintext ^ keystream (the keystream may be
// longer than the plaintext), no AES work left, the Run's state named.
TEST(FinalizeWith, XorsThePlaintextUnderTheHeldKeystream) {
  PendingJob q;
  q.job.type = pb::JOB_ENCRYPT;
  q.job.input = {0x01, 0x02, 0x03};
  q.blocks = 5;
  FinalizeWith(&q, Held(std::string(16, 'c'), std::string("\x10\x20\x30\x40", 4)));
  ASSERT_EQ(q.output.size(), contract::kCiphertextOverhead + 3);
  EXPECT_EQ(std::string(q.output.begin(), q.output.begin() + 16), std::string(16, 'c'));
  EXPECT_EQ(q.output[16], 0x11);
  EXPECT_EQ(q.output[17], 0x22);
  EXPECT_EQ(q.output[18], 0x33);
  EXPECT_TRUE(q.finalize_only);
  EXPECT_FALSE(q.sign);
  EXPECT_EQ(q.blocks, 0u);
  EXPECT_EQ(q.run_batch_id, std::string(16, 'b'));
  EXPECT_EQ(q.run_job_id, 7u);
}

TEST(SignWith, NamesThePadAndItsCounter) {
  PendingJob q;
  q.job.type = pb::JOB_CHECKSUM;
  q.job.input = {1, 2, 3};
  q.blocks = 3;
  SignWith(&q, Held(std::string(16, 'p'), ""));
  EXPECT_EQ(std::string(q.output.begin(), q.output.end()), std::string(16, 'p'));
  EXPECT_TRUE(q.sign);
  EXPECT_FALSE(q.finalize_only);
  EXPECT_EQ(q.blocks, 0u);
  EXPECT_EQ(q.run_job_id, 7u);
}

// A chain needs the pad's powers of H to reach four blocks beyond the
// message's (contract::PadPowers: at least kStoredHPowers).
TEST(ChainFits, NeedsFourPowersBeyondTheMessage) {
  EXPECT_TRUE(ChainFits(60 * 16, 0));  // 60 + 4 <= 64 stored powers
  EXPECT_FALSE(ChainFits(61 * 16, 0));
  EXPECT_TRUE(ChainFits(100 * 16, 100 * 16 + 32));  // 100 + 4 <= 102 + 2
  EXPECT_FALSE(ChainFits(100 * 16, 100 * 16));
}

SecureBytes Bytes(const std::string& s) { return SecureBytes(s.begin(), s.end()); }

// A prepared job is of its cause's group and time, prepared, and sends
// only a length: an ENCRYPT's plaintext is zeros, a PAD's length its bound.
TEST(PreparedJob, TakesItsCausesGroup) {
  PendingJob cause;
  cause.group = 9;
  cause.enqueued = absl::FromUnixSeconds(5);
  cause.job.input = Bytes("secret");
  PendingJob e = PreparedJob(cause, pb::JOB_ENCRYPT, std::string(32, 'k'),
                             pb::CIPHER_AES256, 2, 40);
  EXPECT_TRUE(e.prepared);
  EXPECT_EQ(e.group, 9u);
  EXPECT_EQ(e.enqueued, cause.enqueued);
  EXPECT_EQ(e.job.input, SecureBytes(40, 0));
  PendingJob p = PreparedJob(cause, pb::JOB_PAD, std::string(32, 'k'),
                             pb::CIPHER_AES256, 17, 300);
  EXPECT_EQ(p.job.pad_length, 300u);
  EXPECT_TRUE(p.job.input.empty());
}

}  // namespace
}  // namespace kmpc::kdc
