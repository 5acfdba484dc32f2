// The shares an ENCRYPT job leaves for its FINALIZE, held between the Run
// and the Finalize call (enctype.md, invariant 2: at most one FINALIZE per
// ENCRYPT).
#ifndef KMPC_SERVICE_ENCRYPT_STATES_H_
#define KMPC_SERVICE_ENCRYPT_STATES_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace kmpc::service {

// State left by ENCRYPT jobs for their FINALIZE: at most one use each.
class EncryptStates {
 public:
  struct Entry {
    std::shared_ptr<const engine::EncryptState> state;
    uint32_t length = 0;  // plaintext bytes the ENCRYPT job was asked for
    absl::Time created;
    size_t bytes = 0;  // set by Put: what the entry counts in the budget
  };
  // An entry lives `ttl`; at most `max_entries` entries holding
  // `max_bytes` bytes together.
  EncryptStates(absl::Duration ttl, size_t max_entries, size_t max_bytes)
      : ttl_(ttl), max_(max_entries), max_bytes_(max_bytes) {}
  // RESOURCE_EXHAUSTED beyond max_entries entries or max_bytes bytes.
  absl::Status Put(const std::string& key, Entry e);
  // Removes the entries under `keys` that exist.
  void Erase(const std::vector<std::string>& keys);
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

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_ENCRYPT_STATES_H_
