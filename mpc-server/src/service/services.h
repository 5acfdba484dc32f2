// The gRPC services of one MPC server: KeyOps for the KDC, Admin for the
// operator's tools. This is the only place absl::Status becomes grpc::Status
// (style.md). Both services require mutual TLS; each has an allow-list of
// client certificate identities (subject CN, optional SHA-256 pins) and the
// server's CRL, checked from the call's AuthContext on every RPC (auth.h).
#ifndef KMPC_SERVICE_SERVICES_H_
#define KMPC_SERVICE_SERVICES_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "service/auth.h"
#include "service/metrics.h"
#include "service/scheduler.h"
#include "store/share_store.h"

namespace kmpc::service {

// Parsed KeyShares by key id, loaded from the store on first use and
// dropped on PutKey/DeleteKey. Thread-safe; used by every worker's Engine.
//
// A load runs without the lock; an Invalidate of the same id while it runs
// (the store changed after the load may have read it) keeps the loaded
// value out of the cache, so stale shares never outlive a PutKey/DeleteKey.
class KeyCache {
 public:
  KeyCache(store::ShareStore* store, int party) : store_(store), party_(party) {}
  absl::StatusOr<std::shared_ptr<const engine::KeyShares>> Get(
      absl::string_view key_id);
  // Call after the store was changed for key_id.
  void Invalidate(absl::string_view key_id);
  engine::KeyLookup AsLookup() {
    return [this](absl::string_view id) { return Get(id); };
  }
  // Tests: runs between a load's store read and its insertion.
  void SetLoadHookForTest(std::function<void()> hook) { load_hook_ = std::move(hook); }

 private:
  absl::StatusOr<std::shared_ptr<const engine::KeyShares>> Load(
      absl::string_view key_id);
  store::ShareStore* store_;
  int party_;
  std::function<void()> load_hook_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const engine::KeyShares>> cache_
      ABSL_GUARDED_BY(mu_);
  // Bumped by every Invalidate; a load remembers it when it starts.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int loading_ ABSL_GUARDED_BY(mu_) = 0;  // loads in progress
  // Ids invalidated while loads were in progress -> epoch of the latest
  // such Invalidate; cleared when no load is in progress.
  std::map<std::string, uint64_t> invalidated_ ABSL_GUARDED_BY(mu_);
};

struct ServiceOptions {
  int party = 0;
  ClientPolicy keyops_clients{{"kmpc-kdc"}};
  ClientPolicy admin_clients{{"kmpc-admin"}};
  // How long an ENCRYPT job's state waits for its FINALIZE (the KDC sends
  // it right after the Run answers, within milliseconds).
  absl::Duration encrypt_state_ttl = absl::Seconds(10);
  size_t max_batch_jobs = 100000;
  size_t max_pending_encrypts = 1000000;
  // Memory all ENCRYPT states awaiting FINALIZE may hold together (a long
  // message's state holds up to 2 MiB of H-power shares); an ENCRYPT job
  // beyond it fails with RESOURCE_EXHAUSTED.
  size_t max_pending_encrypt_bytes = size_t{256} << 20;
};

// State left by ENCRYPT jobs for their FINALIZE: at most one use each.
class EncryptStates {
 public:
  struct Entry {
    std::shared_ptr<const engine::EncryptState> state;
    uint32_t length = 0;  // plaintext bytes the ENCRYPT job was asked for
    absl::Time created;
    size_t bytes = 0;  // set by Put: what the entry counts in the budget
  };
  explicit EncryptStates(const ServiceOptions& o)
      : ttl_(o.encrypt_state_ttl),
        max_(o.max_pending_encrypts),
        max_bytes_(o.max_pending_encrypt_bytes) {}
  // RESOURCE_EXHAUSTED beyond max_pending_encrypts entries or
  // max_pending_encrypt_bytes bytes.
  absl::Status Put(const std::string& key, Entry e);
  // Removes and returns the entries for all keys, or none of them.
  absl::StatusOr<std::vector<Entry>> TakeAll(const std::vector<std::string>& keys);
  size_t size();
  size_t bytes();  // counted against max_pending_encrypt_bytes

 private:
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration ttl_;
  size_t max_;
  size_t max_bytes_;
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
};

class KeyOpsService final : public kmpc::v1::KeyOps::Service {
 public:
  KeyOpsService(const ServiceOptions& options, KeyCache* keys,
                Scheduler* scheduler, Metrics* metrics)
      : options_(options), keys_(keys), scheduler_(scheduler),
        metrics_(metrics), states_(options) {}
  grpc::Status Run(grpc::ServerContext* ctx, const kmpc::v1::RunRequest* req,
                   kmpc::v1::RunResponse* resp) override;
  grpc::Status Finalize(grpc::ServerContext* ctx,
                        const kmpc::v1::FinalizeRequest* req,
                        kmpc::v1::FinalizeResponse* resp) override;

  // The request handling without gRPC (tests, fuzzing).
  absl::Status DoRun(const kmpc::v1::RunRequest& req, kmpc::v1::RunResponse* resp);
  absl::Status DoFinalize(const kmpc::v1::FinalizeRequest& req,
                          kmpc::v1::FinalizeResponse* resp);

 private:
  grpc::Status Serve(grpc::ServerContext* ctx, const char* what,
                     google::protobuf::Message* resp,
                     const std::function<absl::Status()>& body);
  ServiceOptions options_;
  KeyCache* keys_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  EncryptStates states_;
};

class AdminService final : public kmpc::v1::Admin::Service {
 public:
  AdminService(const ServiceOptions& options, store::ShareStore* store,
               KeyCache* keys, Scheduler* scheduler, service::Metrics* metrics)
      : options_(options), store_(store), keys_(keys), scheduler_(scheduler),
        metrics_(metrics) {}
  grpc::Status PutKey(grpc::ServerContext* ctx, const kmpc::v1::PutKeyRequest* req,
                      kmpc::v1::PutKeyResponse* resp) override;
  grpc::Status DeleteKey(grpc::ServerContext* ctx,
                         const kmpc::v1::DeleteKeyRequest* req,
                         kmpc::v1::DeleteKeyResponse* resp) override;
  grpc::Status ListKeys(grpc::ServerContext* ctx,
                        const kmpc::v1::ListKeysRequest* req,
                        kmpc::v1::ListKeysResponse* resp) override;
  grpc::Status Health(grpc::ServerContext* ctx, const kmpc::v1::HealthRequest* req,
                      kmpc::v1::HealthResponse* resp) override;
  grpc::Status Metrics(grpc::ServerContext* ctx,
                       const kmpc::v1::MetricsRequest* req,
                       kmpc::v1::MetricsResponse* resp) override;

 private:
  absl::Status DoPutKey(const kmpc::v1::PutKeyRequest& req);
  ServiceOptions options_;
  store::ShareStore* store_;
  KeyCache* keys_;
  Scheduler* scheduler_;
  service::Metrics* metrics_;
};

grpc::Status ToGrpcStatus(const absl::Status& st);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_SERVICES_H_
