#include "service/request_wipe.h"

#include <grpc/slice.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/unknown_field_set.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::atomic<RequestWipeObserver*> g_observer{nullptr};

// The received bytes as protobuf reads them: the slices of an uncompressed
// grpc_byte_buffer, in order, read in place (no copy).
class SliceInput : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceInput(const grpc_slice_buffer& sb) : sb_(sb) {}

  bool Next(const void** data, int* size) override {
    if (backed_up_ > 0) {  // the tail BackUp returned, again
      const grpc_slice& s = sb_.slices[i_ - 1];
      *data = GRPC_SLICE_START_PTR(s) + GRPC_SLICE_LENGTH(s) - backed_up_;
      *size = backed_up_;
      read_ += backed_up_;
      backed_up_ = 0;
      return true;
    }
    while (i_ < sb_.count && GRPC_SLICE_LENGTH(sb_.slices[i_]) == 0) ++i_;
    if (i_ == sb_.count) return false;
    const grpc_slice& s = sb_.slices[i_++];
    *data = GRPC_SLICE_START_PTR(s);
    *size = static_cast<int>(GRPC_SLICE_LENGTH(s));
    read_ += *size;
    return true;
  }
  void BackUp(int count) override {
    backed_up_ = count;
    read_ -= count;
  }
  bool Skip(int count) override {
    const void* d;
    int n;
    while (count > 0) {
      if (!Next(&d, &n)) return false;
      if (n > count) BackUp(n - count);
      count -= n < count ? n : count;
    }
    return true;
  }
  int64_t ByteCount() const override { return read_; }

 private:
  const grpc_slice_buffer& sb_;
  size_t i_ = 0;
  int backed_up_ = 0;
  int64_t read_ = 0;
};

// Zeroes every slice of b in place. The slices are gRPC's receive buffers
// (or sub-slices of them, or inlined copies in b itself), referenced by b
// alone once the transport handed the message over.
void WipeSlices(grpc_byte_buffer* b, const char* method) {
  grpc_slice_buffer& sb = b->data.raw.slice_buffer;
  RequestWipeObserver* o = g_observer.load(std::memory_order_acquire);
  for (size_t i = 0; i < sb.count; ++i) {
    uint8_t* p = GRPC_SLICE_START_PTR(sb.slices[i]);
    const size_t n = GRPC_SLICE_LENGTH(sb.slices[i]);
    OPENSSL_cleanse(p, n);
    if (o != nullptr) o->ReceivedSliceWiped(method, p, n);
  }
}

void WipeField(Message* m, const Reflection* r, const FieldDescriptor* f) {
  std::string scratch;
  if (f->is_repeated()) {
    const int n = r->FieldSize(*m, f);
    for (int i = 0; i < n; ++i) {
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        WipeMessageStrings(r->MutableRepeatedMessage(m, f, i));
      } else {
        // The reference is the stored string (no ctype CORD/STRING_PIECE in
        // kmpc.proto), written in place.
        const std::string& s = r->GetRepeatedStringReference(*m, f, i, &scratch);
        if (&s != &scratch) OPENSSL_cleanse(const_cast<char*>(s.data()), s.size());
      }
    }
  } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (r->HasField(*m, f)) WipeMessageStrings(r->MutableMessage(m, f));
  } else {
    const std::string& s = r->GetStringReference(*m, f, &scratch);
    if (&s != &scratch) OPENSSL_cleanse(const_cast<char*>(s.data()), s.size());
  }
}

}  // namespace

void SetRequestWipeObserverForTesting(RequestWipeObserver* o) {
  g_observer.store(o, std::memory_order_release);
}

void WipeMessageStrings(Message* m) {
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING ||
        f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
      WipeField(m, r, f);
  }
  // Unknown fields (a newer client's) keep their bytes as strings too.
  google::protobuf::UnknownFieldSet* u = r->MutableUnknownFields(m);
  for (int i = 0; i < u->field_count(); ++i) {
    google::protobuf::UnknownField* f = u->mutable_field(i);
    if (f->type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      std::string* s = f->mutable_length_delimited();
      OPENSSL_cleanse(s->data(), s->size());
    }
  }
}

grpc::Status ParseAndWipe(grpc_byte_buffer* req, Message* msg, const char* method) {
  if (req == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  grpc::Status st;
  if (req->type != GRPC_BB_RAW ||
      req->data.raw.compression != GRPC_COMPRESS_NONE) {
    // gRPC core inflates before the handler sees the message; a buffer
    // still compressed here is not one this server accepts.
    st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "compressed request messages are not accepted");
  } else {
    SliceInput in(req->data.raw.slice_buffer);
    if (!msg->ParseFromZeroCopyStream(&in))
      st = grpc::Status(grpc::StatusCode::INTERNAL, "request does not parse");
  }
  WipeSlices(req, method);
  grpc_byte_buffer_destroy(req);
  return st;
}

void WipingService::RequireEveryMethodOf(const char* full_name) const {
  const google::protobuf::ServiceDescriptor* sd =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full_name);
  bool ok = sd != nullptr && static_cast<size_t>(sd->method_count()) == names_.size();
  for (int i = 0; ok && i < sd->method_count(); ++i) {
    const std::string path = absl::StrCat("/", full_name, "/", sd->method(i)->name());
    ok = std::find(names_.begin(), names_.end(), path) != names_.end();
  }
  if (!ok) {
    std::fprintf(stderr, "request_wipe: a method of %s has no wiping handler\n", full_name);
    std::abort();
  }
}

std::unique_ptr<grpc::Service> WipingKeyOps(pb::KeyOps::Service* svc) {
  auto w = std::make_unique<WipingService>();
  using S = pb::KeyOps::Service;
  w->AddUnary("/kmpc.v1.KeyOps/Run", static_cast<S*>(svc), &S::Run);
  w->AddUnary("/kmpc.v1.KeyOps/Finalize", static_cast<S*>(svc), &S::Finalize);
  w->AddUnary("/kmpc.v1.KeyOps/Sign", static_cast<S*>(svc), &S::Sign);
  w->RequireEveryMethodOf("kmpc.v1.KeyOps");
  return w;
}

std::unique_ptr<grpc::Service> WipingAdmin(pb::Admin::Service* svc) {
  auto w = std::make_unique<WipingService>();
  using S = pb::Admin::Service;
  w->AddUnary("/kmpc.v1.Admin/PutKey", static_cast<S*>(svc), &S::PutKey);
  w->AddUnary("/kmpc.v1.Admin/DeleteKey", static_cast<S*>(svc), &S::DeleteKey);
  w->AddUnary("/kmpc.v1.Admin/ListKeys", static_cast<S*>(svc), &S::ListKeys);
  w->AddUnary("/kmpc.v1.Admin/Health", static_cast<S*>(svc), &S::Health);
  w->AddUnary("/kmpc.v1.Admin/Metrics", static_cast<S*>(svc), &S::Metrics);
  w->AddUnary("/kmpc.v1.Admin/RefreshKeys", static_cast<S*>(svc), &S::RefreshKeys);
  w->AddUnary("/kmpc.v1.Admin/DeleteKeys", static_cast<S*>(svc), &S::DeleteKeys);
  w->AddUnary("/kmpc.v1.Admin/ResetBreaker", static_cast<S*>(svc), &S::ResetBreaker);
  w->AddUnary("/kmpc.v1.Admin/SetKeyKind", static_cast<S*>(svc), &S::SetKeyKind);
  w->RequireEveryMethodOf("kmpc.v1.Admin");
  return w;
}

}  // namespace kmpc::service
