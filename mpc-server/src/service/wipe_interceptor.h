// Wipes the keystream and tag shares a KeyOps response carried once gRPC
// has serialized it (docs/security/channels-and-memory.md, "What stays in
// memory").
//
// The sync server owns a unary response (grpc::internal::RpcMethodHandler::
// RunHandler, gRPC 1.51 support/method_handler.h: `ResponseType rsp` on its
// stack): the handler fills it, UnaryRunHandlerHelper hands it to
// CallOpSendMessage::SendMessagePtr, which serializes it lazily when the
// send op is added, and the message is destroyed after the call, its string
// buffers freed as they are. The handler cannot wipe it (it returns before
// the serialization), so a server interceptor does, at PRE_SEND_MESSAGE
// (support/interceptor.h): it
//   1. takes the message (GetSendMessage: still unserialized there, since
//      SendMessagePtr serializes only when no interceptor has done so);
//   2. has gRPC serialize it (GetSerializedSendMessage) and moves the bytes
//      into one slice of its own whose release callback wipes it before
//      freeing it, wiping gRPC's slices as it copies them;
//   3. wipes the share fields of the message itself (RunResponse.shares,
//      FinalizeResponse.tags, SignResponse.tag_shares): the object is the
//      handler's non-const `rsp`, no longer read by gRPC after step 2.
// A response that is not sent (the handler's status is an error) is never
// serialized: the services fill the share fields only on success.
#ifndef KMPC_SERVICE_WIPE_INTERCEPTOR_H_
#define KMPC_SERVICE_WIPE_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"

namespace kmpc::service {

// Test hooks (wipe_interceptor_test.cc): called on the thread that does
// the work; the views are valid only during the call. Never set in
// production.
class WipeObserver {
 public:
  virtual ~WipeObserver() = default;
  // After step 3: the share field of the message, as it now is.
  virtual void MessageWiped(absl::string_view method, absl::string_view field) = 0;
  // In the slice's release, after its wipe and before its free.
  virtual void SerializedReleased(const uint8_t* data, size_t n) = 0;
};
void SetWipeObserverForTesting(WipeObserver* o);

// Wipes the share field of a KeyOps response in place (RunResponse.shares,
// FinalizeResponse.tags, SignResponse.tag_shares) and returns it; null
// (nothing done) for any other message. Also for a response that will not
// be sent (keyops_service.cc, Serve).
const std::string* WipeResponseShares(google::protobuf::MessageLite* m);

// Applies to the KeyOps methods; other methods get no interceptor.
class WipeSharesInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// The list for ServerBuilder::experimental().SetInterceptorCreators.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
WipeSharesInterceptors();

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_WIPE_INTERCEPTOR_H_
