// One-use secret states held between two calls of the KDC: what an ENCRYPT
// job leaves for its FINALIZE (enctype.md, invariant 2: at most one
// FINALIZE per ENCRYPT) and what a PAD job leaves for one Sign item
// (invariant 6: one tag per pad). The two kinds live in separate stores
// of distinct types (EncryptStates, PadStates, below), so a pad can never
// be finalized and an ENCRYPT state never signed.
#ifndef KMPC_SERVICE_ONE_USE_STATES_H_
#define KMPC_SERVICE_ONE_USE_STATES_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace kmpc::service {

// States of type State (engine::EncryptState or engine::PadState, each with
// OwnBytes()) by (batch id, job id): at most one use each, within a TTL and
// a memory budget.
template <typename State>
class OneUseStates {
 public:
  struct Entry {
    std::shared_ptr<const State> state;
    uint32_t length = 0;  // ENCRYPT: plaintext bytes; PAD: the longest message
    absl::Time created;
    size_t bytes = 0;  // set by Put: what the entry counts in the budget
  };
  // An entry lives `ttl`; at most `max_entries` entries holding
  // `max_bytes` bytes together. `what` names the states in errors
  // ("ENCRYPT jobs awaiting FINALIZE").
  OneUseStates(absl::Duration ttl, size_t max_entries, size_t max_bytes,
               std::string what)
      : ttl_(ttl), max_(max_entries), max_bytes_(max_bytes), what_(std::move(what)) {}
  // RESOURCE_EXHAUSTED beyond max_entries entries or max_bytes bytes;
  // ALREADY_EXISTS if `key` holds an entry (never replaced: one use per
  // key).
  absl::Status Put(const std::string& key, Entry e);
  // Removes the entries under `keys` that exist.
  void Erase(const std::vector<std::string>& keys);
  // Removes and returns the entries for all keys, or none of them.
  absl::StatusOr<std::vector<Entry>> TakeAll(const std::vector<std::string>& keys);
  // Removes and returns the entry under `key` (NOT_FOUND: unknown, expired
  // or taken already).
  absl::StatusOr<Entry> Take(const std::string& key);
  size_t size();
  size_t bytes();  // counted against max_bytes

 private:
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration ttl_;
  size_t max_;
  size_t max_bytes_;
  std::string what_;
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
};

extern template class OneUseStates<engine::EncryptState>;
extern template class OneUseStates<engine::PadState>;

// The two stores; `what` names each in its errors.
class EncryptStates : public OneUseStates<engine::EncryptState> {
 public:
  EncryptStates(absl::Duration ttl, size_t max_entries, size_t max_bytes)
      : OneUseStates(ttl, max_entries, max_bytes, "ENCRYPT jobs awaiting FINALIZE") {}
};

class PadStates : public OneUseStates<engine::PadState> {
 public:
  PadStates(absl::Duration ttl, size_t max_entries, size_t max_bytes)
      : OneUseStates(ttl, max_entries, max_bytes, "PAD jobs awaiting Sign") {}
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_ONE_USE_STATES_H_
