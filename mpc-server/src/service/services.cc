// What services.h declares beside the two services (keyops_service.cc,
// admin_service.cc): ToGrpcStatus, the one conversion of an absl::Status
// into the grpc::Status a call answers, and the test-only RequestRecorder.
#include "service/services.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kmpc::service {

std::string RequestRecorder::RefusalReason() {
  const char* v = std::getenv(kRecordRequestsEnv);
  if (v != nullptr && std::string(v) == "1") return "";
  return absl::StrCat("--debug_record_requests is test-only (the records hold "
                      "shares): refused unless ", kRecordRequestsEnv,
                      "=1 is set in the environment too");
}

absl::StatusOr<std::unique_ptr<RequestRecorder>> RequestRecorder::Open(
    const std::string& path) {
  if (std::string why = RefusalReason(); !why.empty())
    return absl::FailedPreconditionError(why);
  const int fd = open(path.c_str(),
                      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  std::FILE* f = nullptr;
  if (fd >= 0 && fchmod(fd, 0600) == 0) f = fdopen(fd, "ab");
  if (f == nullptr) {
    if (fd >= 0) close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", path, " to record requests"));
  }
  return std::unique_ptr<RequestRecorder>(new RequestRecorder(f));
}

RequestRecorder::~RequestRecorder() {
  absl::MutexLock lock(&mu_);
  std::fclose(f_);
}

void RequestRecorder::Record(const char* method, const google::protobuf::Message& req) {
  const std::string bytes = req.SerializeAsString();
  absl::MutexLock lock(&mu_);
  std::fprintf(f_, "%s %zu\n", method, bytes.size());
  std::fwrite(bytes.data(), 1, bytes.size(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

grpc::Status ToGrpcStatus(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()),
                      std::string(st.message()));
}

}  // namespace kmpc::service
