// Wipes what a received request held once its handler is done: the bytes
// gRPC received and the strings of the parsed message (docs/security/
// channels-and-memory.md, "What stays in memory").
//
// A KeyOps request carries shares (RunRequest.data_shares and
// SignRequest.data_shares: the dealt shares of checksum inputs and of a
// presented tag), an Admin PutKeyRequest a party's key shares. In the gRPC
// 1.51 sync server, a generated service's handler (grpcpp/support/
// method_handler.h, RpcMethodHandler::Deserialize and
// UnaryDeserializeHelper) parses the request from the received
// grpc_byte_buffer through SerializationTraits<MessageLite> and destroys the
// buffer (GenericDeserialize's ByteBuffer::Clear) without touching its
// slices; RunHandler then destroys the message after the handler returns,
// its strings freed as they are. Neither step can be changed from a
// generated service, and SerializationTraits<MessageLite> is shared by every
// message type, so the services are registered through WipingService
// instead: a grpc::Service whose methods (same names) have a handler that
//   1. parses the request from the grpc_byte_buffer (ProtoBufferReader, as
//      GenericDeserialize does), then overwrites every slice of the buffer
//      with zeros and only then destroys it;
//   2. runs the service's method, then overwrites every string and bytes
//      field of the parsed message (recursively, by reflection) before
//      destroying it; also when parsing failed part-way.
// The response side is the interceptor's (wipe_interceptor.h).
//
// Not covered here: the TLS layer's own buffers (OpenSSL's record buffer
// inside gRPC's frame protector), and a message the client compressed (the
// KDC module and kmpc-admin never compress; gRPC then inflates into a buffer
// of its own).
#ifndef KMPC_SERVICE_REQUEST_WIPE_H_
#define KMPC_SERVICE_REQUEST_WIPE_H_

#include <grpc/byte_buffer.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "kmpc.grpc.pb.h"

namespace kmpc::service {

// Test hook (request_wipe_test.cc): called on the handling thread after
// step 1's wipe, before the buffer is destroyed, with each slice as it now
// is. Never set in production.
class RequestWipeObserver {
 public:
  virtual ~RequestWipeObserver() = default;
  virtual void ReceivedSliceWiped(absl::string_view method, const uint8_t* data,
                                  size_t n) = 0;
};
void SetRequestWipeObserverForTesting(RequestWipeObserver* o);

// Step 1: parses msg from req (which it takes and destroys), wiping every
// slice of req first. req may be null (no payload: an error status).
grpc::Status ParseAndWipe(grpc_byte_buffer* req, google::protobuf::Message* msg,
                          const char* method);

// Step 2: overwrites every string and bytes field of m, in place.
void WipeMessageStrings(google::protobuf::Message* m);

// RpcMethodHandler's unary flow with steps 1 and 2.
template <class Req, class Resp>
class WipingUnaryHandler : public grpc::internal::MethodHandler {
 public:
  using Fn = std::function<grpc::Status(grpc::ServerContext*, const Req*, Resp*)>;
  WipingUnaryHandler(const char* method, Fn fn) : method_(method), fn_(std::move(fn)) {}

  void RunHandler(const HandlerParameter& param) final {
    Resp rsp;
    grpc::Status status = param.status;
    if (status.ok()) {
      auto* req = static_cast<Req*>(param.request);
      status = grpc::internal::CatchingFunctionHandler([this, &param, req, &rsp] {
        return fn_(static_cast<grpc::ServerContext*>(param.server_context), req, &rsp);
      });
      WipeMessageStrings(req);
      req->~Req();
    }
    // As the generated handler (BaseResponseType MessageLite): the response
    // interceptor reads the message as a MessageLite (wipe_interceptor.h).
    grpc::internal::UnaryRunHandlerHelper(
        param, static_cast<google::protobuf::MessageLite*>(&rsp), status);
  }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** /*handler_data*/) final {
    // In the call's arena, as RpcMethodHandler::Deserialize does; the arena
    // is freed with the call, after RunHandler destroyed the message.
    auto* request = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(
        call, sizeof(Req))) Req;
    *status = ParseAndWipe(req, request, method_);
    if (status->ok()) return request;
    WipeMessageStrings(request);
    request->~Req();
    return nullptr;
  }

 private:
  const char* const method_;
  Fn fn_;
};

// A grpc::Service whose methods are added one by one with WipingUnaryHandler.
class WipingService : public grpc::Service {
 public:
  // name: gRPC's full method name, a string literal (RpcMethod keeps the
  // pointer).
  template <class Svc, class Req, class Resp>
  void AddUnary(const char* name, Svc* svc,
                grpc::Status (Svc::*fn)(grpc::ServerContext*, const Req*, Resp*)) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        name, grpc::internal::RpcMethod::NORMAL_RPC,
        new WipingUnaryHandler<Req, Resp>(
            name, [svc, fn](grpc::ServerContext* c, const Req* q, Resp* p) {
              return (svc->*fn)(c, q, p);
            })));
    names_.emplace_back(name);
  }
  // Aborts (a build error, not an input error) unless every method of the
  // proto service full_name (e.g. "kmpc.v1.KeyOps") was added: a method
  // added to kmpc.proto but not here would otherwise answer UNIMPLEMENTED.
  void RequireEveryMethodOf(const char* full_name) const;

 private:
  std::vector<std::string> names_;
};

// The KeyOps and Admin services of kmpc.proto, each method forwarded to
// svc (which is not registered itself). svc must outlive the result.
std::unique_ptr<grpc::Service> WipingKeyOps(kmpc::v1::KeyOps::Service* svc);
std::unique_ptr<grpc::Service> WipingAdmin(kmpc::v1::Admin::Service* svc);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_REQUEST_WIPE_H_
