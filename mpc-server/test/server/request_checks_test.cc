// The request checks of service/request_checks.h, alone: each refusal's
// BatchErrorCode and detail, and what passes.
#include "service/request_checks.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "batch_error.h"
#include "contract.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

// The BatchErrorCode a refusal carries (BATCH_ERROR_UNSPECIFIED if none).
pb::BatchErrorCode CodeOf(const grpc::Status& st) {
  auto e = contract::BatchErrorOf(st);
  return e ? e->code() : pb::BATCH_ERROR_UNSPECIFIED;
}

TEST(RequestChecks, RefuseCarriesTheCodeAndDetail) {
  const grpc::Status st = Refuse(pb::BATCH_TOO_LARGE, "too many");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(CodeOf(st), pb::BATCH_TOO_LARGE);
  EXPECT_EQ(contract::BatchErrorOf(st)->detail(), "too many");
  EXPECT_EQ(st.error_message(), "too many");
}

// A failed batch is refused with its own code, BATCH_INTERNAL if it names
// none, and its status message.
TEST(RequestChecks, RefuseOfABatchOutcome) {
  BatchOutcome out;
  out.status = absl::UnavailableError("ring down");
  out.error = pb::BATCH_RING_UNAVAILABLE;
  EXPECT_EQ(CodeOf(Refuse(out)), pb::BATCH_RING_UNAVAILABLE);
  EXPECT_EQ(Refuse(out).error_message(), "ring down");
  out.error = pb::BATCH_ERROR_UNSPECIFIED;
  EXPECT_EQ(CodeOf(Refuse(out)), pb::BATCH_INTERNAL);
}

TEST(RequestChecks, WireVersion) {
  EXPECT_TRUE(CheckWireVersion(contract::kWireVersion).ok());
  for (uint32_t v : {0u, contract::kWireVersion - 1, contract::kWireVersion + 1}) {
    const grpc::Status st = CheckWireVersion(v);
    EXPECT_EQ(CodeOf(st), pb::BATCH_MALFORMED) << v;
    EXPECT_FALSE(st.error_message().empty());
  }
}

TEST(RequestChecks, BatchIdIsItsSizeExactly) {
  const std::string b(contract::kBatchIdSize, '\x5a');
  BatchId id{};
  ASSERT_TRUE(ParseBatchId(b, &id).ok());
  EXPECT_EQ(std::string(id.begin(), id.end()), b);
  for (size_t n : {size_t{0}, contract::kBatchIdSize - 1, contract::kBatchIdSize + 1}) {
    const grpc::Status st = ParseBatchId(std::string(n, 'x'), &id);
    EXPECT_EQ(CodeOf(st), pb::BATCH_MALFORMED) << n;
    EXPECT_NE(st.error_message().find("got " + std::to_string(n)), std::string::npos)
        << st.error_message();
  }
}

TEST(RequestChecks, RequestSizeNeitherEmptyNorOverTheLimit) {
  EXPECT_TRUE(CheckRequestSize(1, "batch", "jobs", 10).ok());
  EXPECT_TRUE(CheckRequestSize(10, "batch", "jobs", 10).ok());
  const grpc::Status none = CheckRequestSize(0, "batch", "jobs", 10);
  EXPECT_EQ(CodeOf(none), pb::BATCH_MALFORMED);
  EXPECT_EQ(none.error_message(), "batch has no jobs");
  const grpc::Status over = CheckRequestSize(11, "sign", "items", 10);
  EXPECT_EQ(CodeOf(over), pb::BATCH_TOO_LARGE);
  EXPECT_EQ(over.error_message(), "sign has 11 items, the limit is 10");
}

// The flat share buffer is its stated size exactly; a refusal names sizes.
TEST(RequestChecks, ShareBytesAreWhatTheLengthsTake) {
  EXPECT_TRUE(CheckShareBytes("batch", 64, 64).ok());
  EXPECT_TRUE(CheckShareBytes("batch", 0, 0).ok());
  for (size_t got : {size_t{0}, size_t{63}, size_t{65}}) {
    const grpc::Status st = CheckShareBytes("batch", 64, got);
    EXPECT_EQ(CodeOf(st), pb::BATCH_MALFORMED) << got;
    EXPECT_NE(st.error_message().find("carries " + std::to_string(got) + " bytes"),
              std::string::npos)
        << st.error_message();
  }
}

}  // namespace
}  // namespace kmpc::service
