// What services.h declares beside the two services (service/services.cc):
// the test-only request recorder, as KeyOpsService's handlers use it on
// the parties of services_testing.h, and ToGrpcStatus.
#include "services_testing.h"

namespace kmpc::service {
namespace {

// An absl::Status becomes the grpc::Status of the same code and message.
TEST(ToGrpcStatus, KeepsTheCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status st = ToGrpcStatus(absl::NotFoundError("no such key"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "no such key");
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// --debug_record_requests: every KeyOps request is appended as received,
// before authorization or any processing; the handlers then wipe the
// request's message shares.
TEST_F(ServiceTest, DebugRecorderAppendsRequestsAsReceived) {
  const std::string path = absl::StrCat(*dir_, "/recorded-", random());
  ASSERT_EQ(setenv(kRecordRequestsEnv, "1", 1), 0);
  ServiceOptions o;
  o.debug_record_requests = path;
  KeyOpsService svc(o, parties_[0].keys.get(), parties_[0].scheduler.get(),
                    &parties_[0].metrics);
  v1::SignRequest sign;
  sign.set_request_id(Rand(16));
  auto* it = sign.add_items();
  it->set_run_batch_id(Rand(16));
  it->set_length(6);
  sign.mutable_data_shares()->append("share0share1");
  const std::string sign_bytes = sign.SerializeAsString();
  v1::RunRequest run;
  run.set_batch_id(Rand(16));
  auto* job = run.add_jobs();
  job->set_type(v1::JOB_CHECKSUM);
  job->set_length(7);
  run.mutable_data_shares()->append("runsha0runsha1");
  const std::string run_bytes = run.SerializeAsString();
  v1::FinalizeRequest fin;
  fin.set_batch_id(Rand(16));
  fin.add_items()->set_ciphertext("ciphertext");
  const std::string fin_bytes = fin.SerializeAsString();
  {
    grpc::ServerContext ctx;  // no peer identity: refused after recording
    v1::SignResponse sr;
    EXPECT_FALSE(svc.Sign(&ctx, &sign, &sr).ok());
    v1::RunResponse rr;
    EXPECT_FALSE(svc.Run(&ctx, &run, &rr).ok());
    v1::FinalizeResponse fr;
    EXPECT_FALSE(svc.Finalize(&ctx, &fin, &fr).ok());
  }
  // The handlers wiped the shares of the requests they were given.
  EXPECT_EQ(sign.data_shares(), std::string(12, '\0'));
  EXPECT_EQ(run.data_shares(), std::string(14, '\0'));
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string want = absl::StrCat("Sign ", sign_bytes.size(), "\n", sign_bytes, "\n",
                                        "Run ", run_bytes.size(), "\n", run_bytes, "\n",
                                        "Finalize ", fin_bytes.size(), "\n", fin_bytes, "\n");
  EXPECT_EQ(ss.str(), want);
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);  // the records hold shares
  unsetenv(kRecordRequestsEnv);
  // Off by default.
  EXPECT_TRUE(ServiceOptions{}.debug_record_requests.empty());
}

// The recorder cannot be switched on by the flag alone: without
// KMPC_TEST_ONLY_RECORD_REQUESTS=1 it is refused and creates no file; an
// existing file it may append to is made 0600.
TEST_F(ServiceTest, DebugRecorderNeedsItsEnvironmentVariable) {
  const std::string path = absl::StrCat(*dir_, "/refused-", random());
  unsetenv(kRecordRequestsEnv);
  for (const char* v : {static_cast<const char*>(nullptr), "0", "yes"}) {
    if (v != nullptr) ASSERT_EQ(setenv(kRecordRequestsEnv, v, 1), 0);
    auto r = RequestRecorder::Open(path);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find("KMPC_TEST_ONLY_RECORD_REQUESTS=1"),
              std::string::npos);
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "created " << path;
  }
  ASSERT_EQ(setenv(kRecordRequestsEnv, "1", 1), 0);
  { std::ofstream(path) << "x"; }
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_TRUE(RequestRecorder::Open(path).ok());
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  unsetenv(kRecordRequestsEnv);
}

}  // namespace
}  // namespace kmpc::service
