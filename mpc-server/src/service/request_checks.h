// The checks every KeyOps and Admin request passes before any work is
// done for it (keyops_service.cc, admin_service.cc), and the refusal they
// answer with: a non-OK grpc::Status carrying a BatchError
// (proto/batch_error.h), so that a client tells refusals apart by code. A
// refusal's detail names sizes and counts only, never a share's bytes.
#ifndef KMPC_SERVICE_REQUEST_CHECKS_H_
#define KMPC_SERVICE_REQUEST_CHECKS_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "kmpc.pb.h"
#include "service/scheduler.h"

namespace kmpc::service {

// A whole-request refusal: BatchError{code, detail}.
grpc::Status Refuse(kmpc::v1::BatchErrorCode code, std::string detail);
// A batch the scheduler or the engine could not run: its BatchErrorCode
// (BATCH_INTERNAL if it names none) and its status message.
grpc::Status Refuse(const BatchOutcome& out);

// A request of another KeyOps wire version (contract::kWireVersion):
// BATCH_MALFORMED naming both versions.
grpc::Status CheckWireVersion(uint32_t got);

// The batch id (contract::kBatchIdSize bytes) into *id, or a
// BATCH_MALFORMED refusal.
grpc::Status ParseBatchId(const std::string& b, BatchId* id);

// The size checks every KeyOps request shares: `n` items of `unit`, not
// none (BATCH_MALFORMED), not above `limit` (BATCH_TOO_LARGE).
grpc::Status CheckRequestSize(int n, absl::string_view request,
                              absl::string_view unit, size_t limit);

// The flat share buffer's size (`got`) against what the request's lengths
// take (`want`: contract::RunShareBytes, SignShareBytes): any other size
// is refused as a whole (BATCH_MALFORMED), naming sizes only.
grpc::Status CheckShareBytes(absl::string_view request, uint64_t want, size_t got);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_REQUEST_CHECKS_H_
