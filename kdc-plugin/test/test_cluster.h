// What the batcher tests need of a cluster, besides being the batcher's
// Transport: keys, a record of the calls, the server-side events the
// module's prepared work must survive (a restart forgets the ENCRYPT states), delays of
// answers, and a reference computation of the constructions for the
// expected outputs. Two implementations: FakeCluster (fake_cluster.h, its
// own HMAC-based "cipher", fault injection) and RealCluster
// (real_cluster.h, the servers' KeyOps code over the in-memory ring, the
// enctype of shared/design/enctype.md). The tests parameterised over both
// (batcher_fixture.h: dispatcher_test.cc, planner_test.cc) hold the fake to the real servers' behaviour.
#ifndef KMPC_KDC_PLUGIN_TEST_TEST_CLUSTER_H_
#define KMPC_KDC_PLUGIN_TEST_TEST_CLUSTER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "transport.h"

namespace kmpc::kdc::testing {

class TestCluster : public Transport {
 public:
  // One call the batcher made, recorded when it was made.
  struct Call {
    std::string method;  // "Run" or "Finalize"
    int party;
    int jobs;  // jobs of a Run, items of a Finalize
    absl::Time at;
  };

  // key: 16 or 32 bytes (AES-128 / AES-256 for the real servers).
  virtual void AddKey(const std::string& key_id, const std::string& key) = 0;
  // Jobs of this key id fail with JOB_KEY_INCONSISTENT: the servers hold
  // different dealings of it.
  virtual void AddInconsistentKey(const std::string& key_id) = 0;
  // Every server forgets the ENCRYPT states awaiting FINALIZE (a restart,
  // or the state TTL passed).
  virtual void ForgetEncryptStates() = 0;
  // Only `party` forgets them (a restart of that server).
  virtual void ForgetEncryptStates(int party) = 0;
  // The next Finalize of `party` answers `d` later (one-shot).
  virtual void DelayNextFinalize(int party, absl::Duration d) = 0;
  // Every answer comes `d` after the call (the fake), or `d` after the
  // servers' answer (the real servers, whose own time adds to it).
  virtual void set_latency(absl::Duration d) = 0;
  // Every Run answers `d` later still (a busy ring).
  virtual void set_run_delay(absl::Duration d) = 0;
  // Finalize callbacks made so far (answers delivered, any status).
  virtual int finalize_answers() = 0;
  virtual std::vector<Call> calls() = 0;
  // Jobs with a release condition (Job.release_if_ok) in party 0's Runs.
  int conditional_jobs() const { return conditional_jobs_.load(); }

  // Reference computations of what the cluster computes, for the tests'
  // expectations: the keystream of `len` bytes from ctr0 and the tag of
  // an encryption (checksum false: over C) or of a checksum (over D).
  virtual std::string Keystream(const std::string& key,
                                const std::string& ctr0, size_t len) const = 0;
  virtual std::string Tag(const std::string& key, uint32_t usage,
                          const std::string& ctr0, const std::string& data,
                          bool checksum) const = 0;

 protected:
  // Every implementation's Run records its request here.
  void CountConditions(int party, const kmpc::v1::RunRequest& req) {
    if (party != 0) return;
    for (const auto& j : req.jobs()) conditional_jobs_ += j.has_release_if_ok();
  }

 private:
  std::atomic<int> conditional_jobs_{0};
};

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_PLUGIN_TEST_TEST_CLUSTER_H_
