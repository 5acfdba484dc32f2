#include "batch_error.h"

namespace kmpc::contract {

namespace pb = ::kmpc::v1;

grpc::StatusCode GrpcCodeOf(pb::BatchErrorCode code) {
  switch (code) {
    case pb::BATCH_MALFORMED: return grpc::StatusCode::INVALID_ARGUMENT;
    case pb::BATCH_TOO_LARGE:
    case pb::BATCH_OVERLOADED: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case pb::BATCH_PEERS_DISAGREE: return grpc::StatusCode::ABORTED;
    case pb::BATCH_RING_UNAVAILABLE:
    case pb::BATCH_SHUTTING_DOWN: return grpc::StatusCode::UNAVAILABLE;
    case pb::BATCH_UNKNOWN_ENCRYPT: return grpc::StatusCode::NOT_FOUND;
    case pb::BATCH_TIMED_OUT: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case pb::BATCH_INTEGRITY_CHECK_FAILED: return grpc::StatusCode::DATA_LOSS;
    case pb::BATCH_BREAKER_OPEN: return grpc::StatusCode::FAILED_PRECONDITION;
    default: return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status BatchErrorStatus(pb::BatchErrorCode code, std::string detail) {
  pb::BatchError e;
  e.set_code(code);
  e.set_detail(detail);
  return grpc::Status(GrpcCodeOf(code), std::move(detail),
                      e.SerializeAsString());
}

std::optional<pb::BatchError> BatchErrorOf(const grpc::Status& status) {
  if (status.ok() || status.error_details().empty()) return std::nullopt;
  pb::BatchError e;
  if (!e.ParseFromString(status.error_details()) ||
      e.code() == pb::BATCH_ERROR_UNSPECIFIED)
    return std::nullopt;
  return e;
}

const char* BatchErrorName(pb::BatchErrorCode code) {
  const std::string& n = pb::BatchErrorCode_Name(code);
  return n.empty() ? "BATCH_ERROR_UNKNOWN" : n.c_str();
}

}  // namespace kmpc::contract
