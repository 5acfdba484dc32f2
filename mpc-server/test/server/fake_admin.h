// Test helper: an in-process Admin server over mTLS (StartPartyServer,
// party_server.h) that presents one party's certificate and keeps the keys
// it is given in a map, for the tests of the cluster client library, of
// kmpc-admin's cluster code and of the key dealer. It records what reached
// it (calls, deletes, the party field and the principal of each PutKey),
// never a share's bytes.
#ifndef KMPC_TEST_SERVER_FAKE_ADMIN_H_
#define KMPC_TEST_SERVER_FAKE_ADMIN_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/escaping.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "party_server.h"

namespace kmpc::testing {

// What a fake server does with a PutKey.
enum class PutBehaviour {
  kStore,          // store, OK
  kFail,           // store nothing, INTERNAL
  kStoreThenHang,  // store, then answer only after the client's deadline
};

// An Admin server presenting party `cert_party`'s certificate, answering
// Health as party `cert_party`, with a key store of ids.
class FakeAdmin {
 public:
  FakeAdmin(const std::string& certs, int cert_party, int port) : svc_(cert_party) {
    server_ = StartPartyServer(certs, cert_party, port, &svc_);
  }
  ~FakeAdmin() {
    svc_.release = true;
    server_->Shutdown(std::chrono::system_clock::now());
  }

  void set_put(PutBehaviour p) { svc_.put = p; }
  int calls() const { return svc_.calls.load(); }
  int deletes() const { return svc_.deletes.load(); }
  bool Has(const std::string& id) {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.keys.count(id) > 0;
  }
  // An earlier key under `id` (PutKey answers ALREADY_EXISTS).
  void Preload(const std::string& id) {
    std::lock_guard<std::mutex> l(svc_.mu);
    svc_.keys[id] = -1;
  }
  // The party field of the stored PutKey (-1: preloaded).
  int PartyOf(const std::string& id) {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.keys.at(id);
  }
  // The label (the principal) and kvno of the last PutKey that reached it.
  std::string last_label() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_label;
  }
  uint32_t last_kvno() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_kvno;
  }
  // The cipher of the last PutKey, and the size of its serialized shares.
  kmpc::v1::Cipher last_cipher() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_cipher;
  }
  size_t last_shares_size() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_shares_size;
  }
  // The key kind of the last PutKey (kmpc.proto KeyKind).
  // The deal the last PutKey's shares count under (engine.h
  // KeyShares::Origin), hex; empty if they did not parse.
  std::string last_origin() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_origin;
  }
  kmpc::v1::KeyKind last_kind() {
    std::lock_guard<std::mutex> l(svc_.mu);
    return svc_.last_kind;
  }

 private:
  struct Svc : kmpc::v1::Admin::Service {
    explicit Svc(int party) : party(party) {}
    grpc::Status Health(grpc::ServerContext*, const kmpc::v1::HealthRequest*,
                        kmpc::v1::HealthResponse* r) override {
      ++calls;
      r->set_party(party);
      return grpc::Status::OK;
    }
    grpc::Status PutKey(grpc::ServerContext* ctx, const kmpc::v1::PutKeyRequest* req,
                        kmpc::v1::PutKeyResponse*) override {
      ++calls;
      const std::string& id = req->info().key_id();
      {
        std::lock_guard<std::mutex> l(mu);
        last_label = req->info().label();
        last_kvno = req->info().kvno();
        last_cipher = req->info().cipher();
        last_kind = req->info().kind();
        last_shares_size = req->shares().size();
        auto ks = kmpc::engine::KeyShares::Parse(absl::MakeConstSpan(
            reinterpret_cast<const uint8_t*>(req->shares().data()), req->shares().size()));
        last_origin = ks.ok() ? absl::BytesToHexString(absl::string_view(
                                    reinterpret_cast<const char*>(ks->Origin().data()), 16))
                              : "";
        if (keys.count(id) && !req->replace())
          return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "already stored");
        if (put == PutBehaviour::kFail)
          return grpc::Status(grpc::StatusCode::INTERNAL, "disk full");
        keys[id] = static_cast<int>(req->party());
      }
      if (put == PutBehaviour::kStoreThenHang)
        while (!release && !ctx->IsCancelled())
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return grpc::Status::OK;
    }
    grpc::Status DeleteKey(grpc::ServerContext*, const kmpc::v1::DeleteKeyRequest* req,
                           kmpc::v1::DeleteKeyResponse*) override {
      ++calls;
      ++deletes;
      std::lock_guard<std::mutex> l(mu);
      if (keys.erase(req->key_id()) == 0)
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such key id");
      return grpc::Status::OK;
    }
    const int party;
    std::atomic<PutBehaviour> put{PutBehaviour::kStore};
    std::atomic<bool> release{false};
    std::atomic<int> calls{0}, deletes{0};
    std::mutex mu;
    std::map<std::string, int> keys;
    std::string last_label;
    uint32_t last_kvno = 0;
    kmpc::v1::Cipher last_cipher = kmpc::v1::CIPHER_UNSPECIFIED;
    kmpc::v1::KeyKind last_kind = kmpc::v1::KEY_KIND_USER;
    size_t last_shares_size = 0;
    std::string last_origin;
  };
  Svc svc_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace kmpc::testing

#endif  // KMPC_TEST_SERVER_FAKE_ADMIN_H_
