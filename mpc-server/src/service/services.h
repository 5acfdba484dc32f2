// The gRPC services of one MPC server: KeyOps for the KDC
// (keyops_service.cc), Admin for the operator's tools (admin_service.cc);
// the checks of their requests are request_checks.h's. This is the only
// place absl::Status becomes grpc::Status (style.md; ToGrpcStatus,
// services.cc). Both services require mutual TLS; each has an allow-list of
// client certificate identities (subject CN, optional SHA-256 pins) and the
// server's CRL, checked from the call's AuthContext on every RPC (auth.h).
#ifndef KMPC_SERVICE_SERVICES_H_
#define KMPC_SERVICE_SERVICES_H_

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "contract.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "service/auth.h"
#include "service/key_cache.h"
#include "service/metrics.h"
#include "service/one_use_states.h"
#include "service/scheduler.h"
#include "store/share_store.h"

namespace kmpc::service {

struct ServiceOptions {
  int party = 0;
  ClientPolicy keyops_clients{{"kmpc-kdc"}};
  ClientPolicy admin_clients{{"kmpc-admin"}};
  // Keys whose password-derived aes*-cts key SetKeyKind may make a
  // service's, dropping the gate on its AS reply (--allow_ungate_keys),
  // each as its key id (32 raw bytes) followed by the deal_id of its shares
  // (16 raw bytes, engine.h KeyShares): shares put under a listed id later
  // (--allow_key_replace) are another dealing, not the listed key.
  // The Admin certificate is on the KDC host (kmpc-admin, kadmind's
  // dealer), so the request's allow_ungate alone would let a compromised
  // KDC host ungate any user and get offline verifiers of passwords never
  // used while it is compromised: each server's operator must list the key.
  std::set<std::string> ungate_keys;
  // How long an ENCRYPT job's state waits for its FINALIZE (the KDC sends
  // it right after the Run answers, within milliseconds).
  absl::Duration encrypt_state_ttl = absl::Seconds(10);
  size_t max_batch_jobs = 100000;
  size_t max_pending_encrypts = 1000000;
  // Memory all ENCRYPT states awaiting FINALIZE may hold together (a long
  // message's state holds up to 2 MiB of H-power shares); a batch whose
  // states do not fit is refused (BATCH_OVERLOADED).
  size_t max_pending_encrypt_bytes = size_t{256} << 20;
  // Pads (JOB_PAD) awaiting their Sign: the KDC draws one before it builds
  // the ticket it signs, so they wait a little longer than ENCRYPT states.
  // A pad signs one message; an expired one is dropped unused.
  absl::Duration pad_ttl = absl::Seconds(30);
  size_t max_pending_pads = 1000000;
  size_t max_pending_pad_bytes = size_t{256} << 20;
  // Items one Sign request may carry.
  size_t max_sign_items = 100000;
  // An aes*-cts DECRYPT (a gate) is failed (JOB_MALFORMED) when the KDC's
  // clock in its request (kmpc.proto RunRequest.now_unix) is further than
  // this from the server's: the KDC cannot move the freshness window
  // (engine.h EngineOptions::cts_skew_s) by more. It covers the hosts'
  // clock offsets (NTP keeps them within milliseconds) and the request's
  // age when it arrives (the KDC module's deadline, 3 s).
  absl::Duration cts_clock_tolerance = absl::Seconds(5);
  // Test-only (--debug_record_requests): every KeyOps request is appended
  // here, serialized, before it is processed. Empty: off.
  std::string debug_record_requests;
};

// Test-only (--debug_record_requests): appends every KeyOps request, as
// received and before any processing, to a file, one record each:
//   "<Method> <n>\n" then the n bytes of the serialized request, then "\n".
// For integration tests that scan what a server receives (enctype.md,
// invariant 5); never for production (the records hold shares). So that
// it cannot be switched on by accident, it also needs the environment
// variable kRecordRequestsEnv set to "1"; the file is created mode 0600
// (an existing one is set to 0600).
inline constexpr char kRecordRequestsEnv[] = "KMPC_TEST_ONLY_RECORD_REQUESTS";
class RequestRecorder {
 public:
  // Empty if recording is allowed (kRecordRequestsEnv=1); else why not.
  static std::string RefusalReason();
  // Opens `path` for appending; FAILED_PRECONDITION without
  // kRecordRequestsEnv=1, INVALID_ARGUMENT if it cannot open the file.
  static absl::StatusOr<std::unique_ptr<RequestRecorder>> Open(const std::string& path);
  ~RequestRecorder();
  void Record(const char* method, const google::protobuf::Message& req);

 private:
  explicit RequestRecorder(std::FILE* f) : f_(f) {}
  absl::Mutex mu_;
  std::FILE* f_ ABSL_GUARDED_BY(mu_);
};

class KeyOpsService final : public kmpc::v1::KeyOps::Service {
 public:
  KeyOpsService(const ServiceOptions& options, KeyCache* keys,
                Scheduler* scheduler, Metrics* metrics)
      : options_(options), keys_(keys), scheduler_(scheduler),
        metrics_(metrics),
        states_(options.encrypt_state_ttl, options.max_pending_encrypts,
                options.max_pending_encrypt_bytes),
        pads_(options.pad_ttl, options.max_pending_pads,
              options.max_pending_pad_bytes) {
    if (!options.debug_record_requests.empty()) {
      auto r = RequestRecorder::Open(options.debug_record_requests);
      if (r.ok()) recorder_ = std::move(*r);
    }
  }
  grpc::Status Run(grpc::ServerContext* ctx, const kmpc::v1::RunRequest* req,
                   kmpc::v1::RunResponse* resp) override;
  grpc::Status Finalize(grpc::ServerContext* ctx,
                        const kmpc::v1::FinalizeRequest* req,
                        kmpc::v1::FinalizeResponse* resp) override;
  grpc::Status Sign(grpc::ServerContext* ctx, const kmpc::v1::SignRequest* req,
                    kmpc::v1::SignResponse* resp) override;

  // The request handling without authorization (tests, fuzzing). A job
  // that breaks the contract (contract::CheckJob) fails alone
  // (JobResult.status); a whole-batch refusal is a non-OK status carrying a
  // BatchError (proto/batch_error.h).
  // `deadline`: the client's (its gRPC deadline); a batch not on the ring
  // by then is dropped (Scheduler::Submit).
  grpc::Status DoRun(const kmpc::v1::RunRequest& req, kmpc::v1::RunResponse* resp,
                     absl::Time deadline = absl::InfiniteFuture());
  // Ring-free: served at once on the calling thread
  // (engine::FinalizeShare: one additive share of the tag), no scheduler pass; every ENCRYPT state is taken
  // before it is used, so it serves one FINALIZE at most. `deadline` is
  // unused (nothing waits).
  grpc::Status DoFinalize(const kmpc::v1::FinalizeRequest& req,
                          kmpc::v1::FinalizeResponse* resp,
                          absl::Time deadline = absl::InfiniteFuture());
  // Ring-free signing (kmpc.proto SignRequest): per item, the pad named by
  // (run_batch_id, job_id) is taken from this server's pad store before
  // anything is computed (one tag per pad, whoever asks), then this
  // party's additive tag share t_i is computed on the calling thread
  // (engine::SignShare). Per-item results: JOB_OK with a tag share;
  // JOB_PAD_UNAVAILABLE (no such pad here: never drawn, expired, used);
  // JOB_MALFORMED (run_batch_id size, usage or length not the pad's, share
  // sizes, a verify item on a signing pad or the reverse: the pad is put
  // back, nothing was computed). A verify item (verify) answers its
  // share x_i of r * (T ^ t') (SetVerifyAnswer). The request as a
  // whole is refused (BatchError) only for a malformed request_id, no
  // items, too many items or too many message bytes.
  grpc::Status DoSign(const kmpc::v1::SignRequest& req,
                      kmpc::v1::SignResponse* resp);

 private:
  grpc::Status Serve(grpc::ServerContext* ctx, const char* what,
                     google::protobuf::Message* resp,
                     const std::function<grpc::Status()>& body);
  grpc::Status FillRunResults(const kmpc::v1::RunRequest& req,
                              engine::BatchResult& result,
                              kmpc::v1::RunResponse* resp);
  kmpc::v1::JobStatus SignChained(const kmpc::v1::SignItem& it, const std::string& key,
                                  PadStates::Entry e, absl::Span<const uint8_t> share0,
                                  absl::Span<const uint8_t> share1, std::string* tag_shares,
                                  std::string* detail);
  void SetVerifyAnswer(const engine::PadState& pad, const kmpc::v1::SignItem& it,
                       const contract::MessageShares& sh,
                       std::array<uint8_t, 16>* t) const;
  ServiceOptions options_;
  KeyCache* keys_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  EncryptStates states_;
  PadStates pads_;
  std::unique_ptr<RequestRecorder> recorder_;  // test-only, usually null
};

class AdminService final : public kmpc::v1::Admin::Service {
 public:
  // `breaker` (may be null: tests) is the scheduler's deviation breaker
  // (breaker.h), reported by Health and cleared by ResetBreaker.
  AdminService(const ServiceOptions& options, store::ShareStore* store,
               KeyCache* keys, Scheduler* scheduler, service::Metrics* metrics,
               Breaker* breaker = nullptr)
      : options_(options), store_(store), keys_(keys), scheduler_(scheduler),
        metrics_(metrics), breaker_(breaker) {}
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
  grpc::Status RefreshKeys(grpc::ServerContext* ctx,
                           const kmpc::v1::RefreshKeysRequest* req,
                           kmpc::v1::RefreshKeysResponse* resp) override;
  grpc::Status DeleteKeys(grpc::ServerContext* ctx,
                          const kmpc::v1::DeleteKeysRequest* req,
                          kmpc::v1::DeleteKeysResponse* resp) override;
  // An operator's decision (admin clients only, as every Admin RPC):
  // closes the breaker (Breaker::Reset). FAILED_PRECONDITION without a
  // breaker; INTERNAL if its persisted trip cannot be removed (it stays
  // open).
  grpc::Status ResetBreaker(grpc::ServerContext* ctx,
                            const kmpc::v1::ResetBreakerRequest* req,
                            kmpc::v1::ResetBreakerResponse* resp) override;
  // Re-marks a stored key's kind (kmpc.proto SetKeyKindRequest).
  grpc::Status SetKeyKind(grpc::ServerContext* ctx,
                          const kmpc::v1::SetKeyKindRequest* req,
                          kmpc::v1::SetKeyKindResponse* resp) override;

  // Without authorization (tests). RefreshKeys: the pairs run on the ring
  // (Scheduler::SubmitRefresh, engine/refresh.h); the new shares of every
  // pair that went ahead are stored in one store transaction (PutAll), so
  // an error leaves none of them on this server.
  grpc::Status DoRefreshKeys(const kmpc::v1::RefreshKeysRequest& req,
                             kmpc::v1::RefreshKeysResponse* resp);
  grpc::Status DoDeleteKeys(const kmpc::v1::DeleteKeysRequest& req,
                            kmpc::v1::DeleteKeysResponse* resp);
  grpc::Status DoResetBreaker(kmpc::v1::ResetBreakerResponse* resp);
  // SetKeyKind's work: the record is edited in one store transaction
  // (ShareStore::Edit) and the key cache forgets the old view.
  absl::Status DoSetKeyKind(const kmpc::v1::SetKeyKindRequest& req,
                            kmpc::v1::SetKeyKindResponse* resp);

 private:
  absl::Status DoPutKey(const kmpc::v1::PutKeyRequest& req);
  grpc::Status StoreRefreshed(
      const std::vector<engine::RefreshItem>& items, const BatchOutcome& out,
      bool rebuilt_here, const std::map<std::string, store::KeyMeta>& metas,
      kmpc::v1::RefreshKeysResponse* resp);
  ServiceOptions options_;
  store::ShareStore* store_;
  KeyCache* keys_;
  Scheduler* scheduler_;
  service::Metrics* metrics_;
  Breaker* breaker_;
};

grpc::Status ToGrpcStatus(const absl::Status& st);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_SERVICES_H_
