// The servers' cache of parsed key shares (the engine's KeyLookup).
#ifndef KMPC_SERVICE_KEY_CACHE_H_
#define KMPC_SERVICE_KEY_CACHE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
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

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_KEY_CACHE_H_
