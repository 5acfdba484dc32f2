// Typed whole-batch refusals (kmpc.proto, BatchError): the server sends the
// serialized BatchError in the details of the call's non-OK grpc::Status
// (gRPC's rich error model), so a client tells them apart by code, never by
// message text. A status without details is a transport failure.
#ifndef KMPC_PROTO_BATCH_ERROR_H_
#define KMPC_PROTO_BATCH_ERROR_H_

#include <grpcpp/support/status.h>

#include <optional>
#include <string>

#include "kmpc.pb.h"

namespace kmpc::contract {

// The gRPC status code each BatchErrorCode travels with.
grpc::StatusCode GrpcCodeOf(kmpc::v1::BatchErrorCode code);

// A non-OK status carrying BatchError{code, detail}; the status message is
// `detail` too, for logs and tools that only print it.
grpc::Status BatchErrorStatus(kmpc::v1::BatchErrorCode code,
                              std::string detail);

// The BatchError a server attached, or nullopt (OK, transport failure, or
// details that do not parse).
std::optional<kmpc::v1::BatchError> BatchErrorOf(const grpc::Status& status);

// "BATCH_OVERLOADED" etc.
const char* BatchErrorName(kmpc::v1::BatchErrorCode code);

}  // namespace kmpc::contract

#endif  // KMPC_PROTO_BATCH_ERROR_H_
