// Jobs as the module holds them (job.h): the contract's view of one
// (ShapeOf), the check at Submit with its status codes (the table in
// job.h), and what a job costs in blocks.
#include "job.h"

#include <string>

#include "contract.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

Job MakeJob(pb::JobType type, size_t input_bytes, uint8_t fill = 0x01) {
  Job j;
  j.type = type;
  j.cipher = pb::CIPHER_AES256;
  j.key_id = std::string(contract::kKeyIdSize, 'k');
  j.usage = 3;
  j.input.assign(input_bytes, fill);
  return j;
}

TEST(JobTest, ShapeOfEncryptCarriesTheLengthNotThePlaintext) {
  Job j = MakeJob(pb::JOB_ENCRYPT, 100);
  contract::JobShape s = ShapeOf(j);
  EXPECT_EQ(s.type, pb::JOB_ENCRYPT);
  EXPECT_EQ(s.cipher, pb::CIPHER_AES256);
  EXPECT_EQ(s.key_id_size, contract::kKeyIdSize);
  EXPECT_EQ(s.length, 100u);
  EXPECT_TRUE(s.data.empty());  // the plaintext never leaves the KDC
}

TEST(JobTest, ShapeOfChecksumSaysTheMessageGoesAsTwoSharesOfItsLength) {
  Job j = MakeJob(pb::JOB_CHECKSUM, 50);
  contract::JobShape s = ShapeOf(j);
  EXPECT_EQ(s.length, 50u);
  EXPECT_EQ(s.share_sizes[0], 50u);
  EXPECT_EQ(s.share_sizes[1], 50u);
  EXPECT_TRUE(s.data.empty());
  j.type = pb::JOB_VERIFY_CHECKSUM;
  j.checksum = std::string(contract::kChecksumSize, 'c');
  s = ShapeOf(j);
  // The presented tag goes as shares after the message, its ctr0 in the
  // clear (kmpc.proto JOB_VERIFY_CHECKSUM).
  EXPECT_EQ(s.share_sizes[1], 50u + contract::kTagSize);
  EXPECT_EQ(s.checksum, std::string(contract::kCtr0Size, 'c'));
  EXPECT_TRUE(CheckJob(j).ok());
  j.checksum.resize(contract::kCtr0Size);  // no tag: refused as before
  EXPECT_TRUE(absl::IsDataLoss(CheckJob(j)));
}

TEST(JobTest, ShapeOfDecryptAndPad) {
  Job d = MakeJob(pb::JOB_DECRYPT, 80);
  contract::JobShape s = ShapeOf(d);
  EXPECT_EQ(s.data.size(), 80u);  // ctr0 || C || T is public
  EXPECT_EQ(s.length, 0u);
  Job p = MakeJob(pb::JOB_PAD, 0);
  p.pad_length = 1200;
  EXPECT_EQ(ShapeOf(p).length, 1200u);
}

TEST(JobTest, CheckJobMapsTheContractToStatusCodes) {
  EXPECT_TRUE(CheckJob(MakeJob(pb::JOB_ENCRYPT, 100)).ok());
  EXPECT_TRUE(CheckJob(MakeJob(pb::JOB_DECRYPT, 80)).ok());
  // Malformed: kInvalidArgument (-> EINVAL at the module boundary).
  Job no_cipher = MakeJob(pb::JOB_ENCRYPT, 100);
  no_cipher.cipher = pb::CIPHER_UNSPECIFIED;
  EXPECT_EQ(CheckJob(no_cipher).code(), absl::StatusCode::kInvalidArgument);
  Job short_id = MakeJob(pb::JOB_ENCRYPT, 100);
  short_id.key_id.resize(31);
  EXPECT_EQ(CheckJob(short_id).code(), absl::StatusCode::kInvalidArgument);
  Job finalize = MakeJob(pb::JOB_FINALIZE, 16);  // never submitted
  EXPECT_EQ(CheckJob(finalize).code(), absl::StatusCode::kInvalidArgument);
  // A ciphertext that cannot verify under any key: kDataLoss (an
  // integrity error), as the servers would answer.
  Job too_short = MakeJob(pb::JOB_DECRYPT, contract::kCiphertextOverhead - 1);
  EXPECT_EQ(CheckJob(too_short).code(), absl::StatusCode::kDataLoss);
  Job zero_ctr = MakeJob(pb::JOB_DECRYPT, 80, 0x00);  // ctr0 = 0
  EXPECT_EQ(CheckJob(zero_ctr).code(), absl::StatusCode::kDataLoss);
}

TEST(JobTest, BlocksAndCost) {
  // ENCRYPT: ceil(100 / 16) = 7 keystream blocks + the tag mask.
  EXPECT_EQ(JobBlocks(MakeJob(pb::JOB_ENCRYPT, 100)), 8u);
  EXPECT_EQ(JobCost(MakeJob(pb::JOB_ENCRYPT, 100)), 8u);
  // DECRYPT of 48 bytes of C (ctr0 || C || T = 80 bytes): 3 + 1.
  EXPECT_EQ(JobBlocks(MakeJob(pb::JOB_DECRYPT, 80)), 4u);
  // CHECKSUM: one AES block, plus one per block of GHASH in the cost.
  EXPECT_EQ(JobBlocks(MakeJob(pb::JOB_CHECKSUM, 100)), 1u);
  EXPECT_EQ(JobCost(MakeJob(pb::JOB_CHECKSUM, 100)), 1u + 7u);
}

}  // namespace
}  // namespace kmpc::kdc
