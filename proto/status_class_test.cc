// The classification table against each consumer's rules as they stand in
// job.h, the router's failover, kmpc-admin's run stop and the admin
// client's PutKey (the four switches the table replaced), for every code.
#include "status_class.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kmpc::contract {
namespace {

using C = absl::StatusCode;

constexpr C kAll[] = {C::kOk,
                      C::kCancelled,
                      C::kUnknown,
                      C::kInvalidArgument,
                      C::kDeadlineExceeded,
                      C::kNotFound,
                      C::kAlreadyExists,
                      C::kPermissionDenied,
                      C::kResourceExhausted,
                      C::kFailedPrecondition,
                      C::kAborted,
                      C::kOutOfRange,
                      C::kUnimplemented,
                      C::kInternal,
                      C::kUnavailable,
                      C::kDataLoss,
                      C::kUnauthenticated};

bool In(C c, std::set<C> s) { return s.count(c) > 0; }

TEST(StatusClass, RouterCountsOnlyClusterFailures) {
  for (C c : kAll)
    EXPECT_EQ(ClassOf(c).kdc_cluster_failure,
              In(c, {C::kUnavailable, C::kDeadlineExceeded, C::kAborted, C::kNotFound}))
        << static_cast<int>(c);
}

TEST(StatusClass, AdminStopsOnWholeClusterErrors) {
  for (C c : kAll)
    EXPECT_EQ(ClassOf(c).admin_cluster_error,
              In(c, {C::kUnavailable, C::kDeadlineExceeded, C::kPermissionDenied,
                     C::kUnauthenticated}))
        << static_cast<int>(c);
}

TEST(StatusClass, PutKeyNotStoredOnlyWhenRefused) {
  // A deadline or an internal error may come after the server stored the
  // key: never "certainly not stored".
  for (C c : kAll)
    EXPECT_EQ(ClassOf(c).put_not_stored,
              In(c, {C::kUnavailable, C::kPermissionDenied, C::kUnauthenticated,
                     C::kInvalidArgument, C::kAlreadyExists, C::kFailedPrecondition}))
        << static_cast<int>(c);
  EXPECT_FALSE(ClassOf(C::kDeadlineExceeded).put_not_stored);
}

TEST(StatusClass, KrbErrorsFollowJobH) {
  std::set<C> retry = {C::kUnavailable, C::kDeadlineExceeded, C::kAborted,
                       C::kResourceExhausted, C::kCancelled, C::kOutOfRange};
  for (C c : kAll) {
    KrbClass want = KrbClass::kInternal;
    if (c == C::kOk) want = KrbClass::kNone;
    if (In(c, retry)) want = KrbClass::kSvcUnavailable;
    if (c == C::kNotFound) want = KrbClass::kUnknownKey;
    if (c == C::kPermissionDenied) want = KrbClass::kWrongCipher;
    if (In(c, {C::kDataLoss, C::kUnauthenticated})) want = KrbClass::kBadIntegrity;
    if (In(c, {C::kInvalidArgument, C::kFailedPrecondition})) want = KrbClass::kInvalid;
    EXPECT_EQ(ClassOf(c).krb, want) << static_cast<int>(c);
  }
}

TEST(StatusClass, CausesAreLabels) {
  EXPECT_EQ(std::string(ClassOf(C::kOutOfRange).cause), "too_long");
  EXPECT_EQ(std::string(ClassOf(C::kUnauthenticated).cause), "withheld");
  EXPECT_EQ(std::string(ClassOf(C::kDataLoss).cause), "integrity");
  for (C c : kAll) {
    const std::string label = ClassOf(c).cause;
    ASSERT_FALSE(label.empty());
    EXPECT_EQ(label.find_first_not_of("abcdefghijklmnopqrstuvwxyz_"), std::string::npos);
  }
}

TEST(StatusClass, CodesOutsideTheTableAreInternal) {
  for (int code : {-1, 17, 1000}) {
    const StatusClass& k = ClassOf(static_cast<C>(code));
    EXPECT_EQ(k.krb, KrbClass::kInternal);
    EXPECT_FALSE(k.kdc_cluster_failure || k.admin_cluster_error || k.put_not_stored);
  }
}

}  // namespace
}  // namespace kmpc::contract
