#include "service/wipe_interceptor.h"

#include <openssl/crypto.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "kmpc.pb.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;
using grpc::experimental::InterceptionHookPoints;

std::atomic<WipeObserver*> g_observer{nullptr};

// The slice's release (grpc_slice_new_with_len): wipes, then frees.
void WipeAndFree(void* p, size_t n) {
  OPENSSL_cleanse(p, n);
  if (WipeObserver* o = g_observer.load(std::memory_order_acquire))
    o->SerializedReleased(static_cast<const uint8_t*>(p), n);
  std::free(p);
}

// Copies the serialized message into one slice released by WipeAndFree,
// wiping gRPC's own slices (which only this buffer references: the
// serializer made them for it) as it goes.
void MoveIntoWipingSlice(grpc::ByteBuffer* bb) {
  std::vector<grpc::Slice> parts;
  if (!bb->Dump(&parts).ok()) return;
  size_t n = 0;
  for (const grpc::Slice& s : parts) n += s.size();
  if (n == 0) return;
  auto* buf = static_cast<uint8_t*>(std::malloc(n));
  if (buf == nullptr) return;  // leave gRPC's buffer: the send goes on
  size_t at = 0;
  for (grpc::Slice& s : parts) {
    std::memcpy(buf + at, s.begin(), s.size());
    OPENSSL_cleanse(const_cast<uint8_t*>(s.begin()), s.size());
    at += s.size();
  }
  grpc::Slice mine(buf, n, &WipeAndFree);
  grpc::ByteBuffer replacement(&mine, 1);
  bb->Swap(&replacement);
}

class WipeSharesInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit WipeSharesInterceptor(const char* method) : method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      // The handler's response object (RpcMethodHandler::RunHandler's
      // non-const `rsp`, passed as a MessageLite): read before
      // GetSerializedSendMessage, which drops the pointer.
      auto* msg = const_cast<google::protobuf::MessageLite*>(
          static_cast<const google::protobuf::MessageLite*>(m->GetSendMessage()));
      grpc::ByteBuffer* bb = m->GetSerializedSendMessage();
      if (bb != nullptr) MoveIntoWipingSlice(bb);
      if (msg != nullptr) {
        const std::string* f = WipeResponseShares(msg);
        WipeObserver* o = g_observer.load(std::memory_order_acquire);
        if (o != nullptr && f != nullptr) o->MessageWiped(method_, *f);
      }
    }
    m->Proceed();
  }

 private:
  const char* const method_;
};

}  // namespace

const std::string* WipeResponseShares(google::protobuf::MessageLite* m) {
  std::string* f = nullptr;
  if (auto* r = dynamic_cast<pb::RunResponse*>(m)) f = r->mutable_shares();
  else if (auto* r = dynamic_cast<pb::FinalizeResponse*>(m)) f = r->mutable_tags();
  else if (auto* r = dynamic_cast<pb::SignResponse*>(m)) f = r->mutable_tag_shares();
  if (f != nullptr) OPENSSL_cleanse(f->data(), f->size());
  return f;
}

void SetWipeObserverForTesting(WipeObserver* o) {
  g_observer.store(o, std::memory_order_release);
}

grpc::experimental::Interceptor* WipeSharesInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // gRPC's full method names (kmpc.proto: package kmpc.v1, service KeyOps).
  if (absl::StartsWith(info->method(), "/kmpc.v1.KeyOps/"))
    return new WipeSharesInterceptor(info->method());
  return nullptr;  // no interceptor for this call
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
WipeSharesInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<WipeSharesInterceptorFactory>());
  return v;
}

}  // namespace kmpc::service
