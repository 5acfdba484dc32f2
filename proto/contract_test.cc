#include "contract.h"

#include <gtest/gtest.h>

#include <string>

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
    for (pb::JobType t : {pb::JOB_ENCRYPT, pb::JOB_CHECKSUM}) {
      JobShape j{t, c, kKeyIdSize, t == pb::JOB_ENCRYPT ? 16u : 0u, "", ""};
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

TEST(CheckJob, ChecksumAndVerify) {
  JobShape c{pb::JOB_CHECKSUM, pb::CIPHER_AES128, kKeyIdSize, 0, "message", ""};
  EXPECT_TRUE(CheckJob(c).ok());
  EXPECT_EQ(JobBlocks(c), 1u);
  EXPECT_EQ(JobCost(c), 2u);  // the AES block of the tag mask + 1 of GHASH
  EXPECT_EQ(RevealedBytes(c), kTagSize);
  const std::string mib(kMaxJobBytes, 'm');
  JobShape whole{pb::JOB_CHECKSUM, pb::CIPHER_AES128, kKeyIdSize, 0, mib, ""};
  EXPECT_EQ(JobBlocks(whole), 1u);
  EXPECT_EQ(JobCost(whole), kMaxJobBlocks + 1);  // counted as a 1 MiB DECRYPT
  JobShape enc{pb::JOB_ENCRYPT, pb::CIPHER_AES128, kKeyIdSize, 100, "", ""};
  EXPECT_EQ(JobCost(enc), JobBlocks(enc));
  c.checksum = "x";
  EXPECT_EQ(CheckJob(c).status, pb::JOB_MALFORMED);

  std::string sum = Ctr0(9) + std::string(16, 't');
  JobShape v{pb::JOB_VERIFY_CHECKSUM, pb::CIPHER_AES128, kKeyIdSize, 0, "message", sum};
  EXPECT_TRUE(CheckJob(v).ok());
  EXPECT_EQ(JobCost(v), 2u);
  EXPECT_EQ(RevealedBytes(v), 0u);
  std::string short_sum = sum.substr(0, 31);
  v.checksum = short_sum;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_INTEGRITY_FAILED);
  std::string zero_sum = Ctr0(0) + std::string(16, 't');
  v.checksum = zero_sum;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_INTEGRITY_FAILED);
  std::string big(kMaxJobBytes + 1, 'd');
  v.checksum = sum;
  v.data = big;
  EXPECT_EQ(CheckJob(v).status, pb::JOB_MALFORMED);
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
}

}  // namespace
}  // namespace kmpc::contract
