// The real MPC servers in one process, for the batcher tests: three
// KeyOpsServices (mpc-server/src/service/services.h), each with its own
// LMDB share store in a temporary directory, key cache and Scheduler, over
// the in-memory scheduler ring (service/memory_scheduler_ring.h). Keys are
// dealt as the servers store them (engine::DealKey: replicated XOR shares
// of the key and its derived values). What the servers compute is the
// enctype of shared/design/enctype.md; Keystream and Tag compute it in the
// clear with OpenSSL AES and the bit-by-bit GF(2^128) multiply the engine
// tests use as their reference.
//
// The transport around the services is the test's: a call is the
// service's request handler (KeyOpsService::DoRun / DoFinalize, without
// gRPC and mTLS, which kmpc_kdc_grpc_transport_test covers) on a thread of its
// own, its refusal turned into a CallStatus as GrpcTransport does.
#ifndef KMPC_KDC_PLUGIN_TEST_REAL_CLUSTER_H_
#define KMPC_KDC_PLUGIN_TEST_REAL_CLUSTER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "service/memory_scheduler_ring.h"
#include "service/services.h"
#include "store/share_store.h"
#include "test_cluster.h"

namespace kmpc::kdc::testing {

class RealCluster : public TestCluster {
 public:
  RealCluster();
  // Waits for the calls in progress (each ends by its answer or by the
  // scheduler's timeouts), then stops the servers.
  ~RealCluster() override;

  void AddKey(const std::string& key_id, const std::string& key) override;
  // Parties 0 and 1 hold one dealing of a key, party 2 another.
  void AddInconsistentKey(const std::string& key_id) override;
  // A restart of the KeyOps service(s): a new KeyOpsService with no ENCRYPT
  // states; calls already in progress finish on the old one.
  void ForgetEncryptStates() override;
  void ForgetEncryptStates(int party) override;
  void DelayNextFinalize(int party, absl::Duration d) override;
  void set_latency(absl::Duration d) override;
  void set_run_delay(absl::Duration d) override;
  int finalize_answers() override;
  std::vector<Call> calls() override;

  void Run(int party, const kmpc::v1::RunRequest& req,
           kmpc::v1::RunResponse* resp, absl::Time deadline,
           Done done) override;
  void Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                kmpc::v1::FinalizeResponse* resp, absl::Time deadline,
                Done done) override;
  std::string PartyName(int party) const override;

  // Whether these servers compute CHECKSUM and VERIFY_CHECKSUM on the
  // message's shares (kmpc.proto Job.data_shares), found by one probe
  // CHECKSUM (once). Servers of before that contract take the shares'
  // job as an empty message: tests of checksums skip on them.
  bool ChecksumsOnShares();

  // AES-CTR from ctr0 + 1 and the GHASH tag of enctype.md.
  std::string Keystream(const std::string& key, const std::string& ctr0,
                        size_t len) const override;
  std::string Tag(const std::string& key, uint32_t usage,
                  const std::string& ctr0, const std::string& data,
                  bool checksum) const override;

 private:
  struct Party {
    std::unique_ptr<store::ShareStore> store;
    std::unique_ptr<service::KeyCache> keys;
    std::unique_ptr<service::Scheduler> scheduler;
    std::unique_ptr<service::Metrics> metrics;
    std::shared_ptr<service::KeyOpsService> keyops;  // guarded by mu_
  };
  // Stores `view` (one party's engine::DealKey view) on its party.
  void Store(const std::string& key_id, const engine::KeyShares& view);
  std::shared_ptr<service::KeyOpsService> Service(int party);
  void Restart(int party);
  // Runs f on a thread of its own; the destructor waits for it.
  void Spawn(std::function<void()> f);

  std::unique_ptr<service::MemorySchedulerRings> rings_;
  std::array<Party, 3> parties_;

  std::mutex mu_;
  std::condition_variable idle_;
  int running_ = 0;  // Spawn'ed threads not finished
  std::vector<Call> calls_;
  absl::Duration latency_;
  absl::Duration run_delay_;
  std::array<absl::Duration, 3> next_fin_delay_{};
  std::atomic<int> fin_answers_{0};
  std::once_flag probe_once_;
  bool checksums_on_shares_ = false;
};

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_PLUGIN_TEST_REAL_CLUSTER_H_
