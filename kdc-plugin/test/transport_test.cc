// A call's outcome (transport.h CallStatus): success, an untyped failure,
// and a server's typed refusal of a whole batch (kmpc.proto BatchError).
#include "transport.h"

#include "absl/strings/match.h"
#include "batch_error.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

TEST(TransportTest, CallStatusOkAndUntypedFailure) {
  CallStatus ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_FALSE(ok.refused());
  CallStatus down(absl::UnavailableError("party 1 unreachable"));
  EXPECT_FALSE(down.ok());
  EXPECT_FALSE(down.refused());
  EXPECT_EQ(down.status.code(), absl::StatusCode::kUnavailable);
}

TEST(TransportTest, RefusedCarriesTheCodeAndANamedMessage) {
  kmpc::v1::BatchError e;
  e.set_code(kmpc::v1::BATCH_OVERLOADED);
  e.set_detail("queue full");
  CallStatus s = CallStatus::Refused(e);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.refused());
  EXPECT_EQ(s.refusal, kmpc::v1::BATCH_OVERLOADED);
  EXPECT_EQ(s.status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(s.status.message(), "queue full")) << s.status;
  EXPECT_TRUE(absl::StrContains(s.status.message(),
                                contract::BatchErrorName(kmpc::v1::BATCH_OVERLOADED)))
      << s.status;
}

// A job failed by a deviation stays kUnavailable (SVC_UNAVAILABLE, no
// lockout) and carries the mark the router keys on; OK is never marked.
TEST(TransportTest, DeviationMark) {
  const absl::Status st = MarkDeviation(absl::UnavailableError("refused"));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "refused");
  EXPECT_TRUE(IsDeviation(st));
  EXPECT_FALSE(IsDeviation(absl::UnavailableError("refused")));
  EXPECT_FALSE(IsDeviation(MarkDeviation(absl::OkStatus())));
}

}  // namespace
}  // namespace kmpc::kdc
