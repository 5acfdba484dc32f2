// The request checks and refusals of request_checks.h.
#include "service/request_checks.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "batch_error.h"
#include "contract.h"

namespace kmpc::service {

namespace pb = ::kmpc::v1;

grpc::Status Refuse(pb::BatchErrorCode code, std::string detail) {
  return contract::BatchErrorStatus(code, std::move(detail));
}

// A batch the scheduler or the engine could not run.
grpc::Status Refuse(const BatchOutcome& out) {
  return Refuse(out.error == pb::BATCH_ERROR_UNSPECIFIED ? pb::BATCH_INTERNAL
                                                         : out.error,
                std::string(out.status.message()));
}

// A request of another KeyOps wire version (contract::kWireVersion).
grpc::Status CheckWireVersion(uint32_t got) {
  std::string bad = contract::WireVersionProblem(got, "the KDC module");
  if (bad.empty()) return grpc::Status::OK;
  return Refuse(pb::BATCH_MALFORMED, std::move(bad));
}

// The batch id, or a BATCH_MALFORMED refusal.
grpc::Status ParseBatchId(const std::string& b, BatchId* id) {
  if (b.size() != contract::kBatchIdSize)
    return Refuse(pb::BATCH_MALFORMED,
                  absl::StrCat("batch_id must be ", contract::kBatchIdSize,
                               " bytes, got ", b.size()));
  std::memcpy(id->data(), b.data(), contract::kBatchIdSize);
  return grpc::Status::OK;
}

// The size checks every KeyOps request shares: not empty (BATCH_MALFORMED),
// not above the configured limit (BATCH_TOO_LARGE).
grpc::Status CheckRequestSize(int n, absl::string_view request,
                              absl::string_view unit, size_t limit) {
  if (n == 0)
    return Refuse(pb::BATCH_MALFORMED, absl::StrCat(request, " has no ", unit));
  if (static_cast<size_t>(n) > limit)
    return Refuse(pb::BATCH_TOO_LARGE, absl::StrCat(request, " has ", n, " ",
                                                    unit, ", the limit is ", limit));
  return grpc::Status::OK;
}

// The flat share buffer's size against the lengths the request states
// (contract::RunShareBytes, SignShareBytes): any other size is refused as a
// whole (BATCH_MALFORMED), naming sizes only.
grpc::Status CheckShareBytes(absl::string_view request, uint64_t want, size_t got) {
  if (got == want) return grpc::Status::OK;
  return Refuse(pb::BATCH_MALFORMED,
                absl::StrCat(request, " carries ", got, " bytes of data_shares, its ",
                             "lengths take ", want, " (two shares per message)"));
}

}  // namespace kmpc::service
