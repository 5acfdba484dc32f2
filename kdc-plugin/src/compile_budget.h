// The compile budget's two parts (docs/design/exchange-plan.md, "The
// compile budget"): a token bucket, and the set of the most recently proven
// program shapes, which need no token. The servers compile an aes*-cts
// program per shape (a ciphertext length its sender chooses), so the KDC
// module (gate_book.h) and kadmind's ticket decrypter
// (kdc-plugin/dealer/ticket_decrypt.h) bound how many new shapes a minute
// unauthenticated senders make them compile. Header-only: the dealer
// library includes it without linking the module's sources.
//
// Not thread-safe: each user holds them under its own mutex.
#ifndef KMPC_KDC_PLUGIN_COMPILE_BUDGET_H_
#define KMPC_KDC_PLUGIN_COMPILE_BUDGET_H_

#include <algorithm>
#include <cstddef>
#include <list>
#include <map>

#include "absl/time/time.h"

namespace kmpc::kdc {

// A token bucket: `burst` tokens at most, refilled at `per_sec`.
struct Budget {
  double tokens, burst, per_sec;
  absl::Time at;
  // Takes a token if there is one. A wall-clock step backwards refills
  // nothing (and takes nothing).
  bool Take(absl::Time now) {
    const double dt = std::max(0.0, absl::ToDoubleSeconds(now - at));
    if (at != absl::Time()) tokens = std::min(burst, tokens + per_sec * dt);
    at = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  }
  void GiveBack(double t) { tokens = std::min(burst, tokens + t); }
};

// The `Capacity` keys most recently proven, the least recently proven
// first out (an LRU set).
template <typename Key, size_t Capacity>
class RecentlyProven {
 public:
  static constexpr size_t kCapacity = Capacity;
  bool Has(const Key& k) const { return index_.count(k) != 0; }
  // k is proven now (inserted, or moved to the front).
  void Prove(const Key& k) {
    auto it = index_.find(k);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    lru_.push_front(k);
    index_.emplace(k, lru_.begin());
    if (lru_.size() > Capacity) {
      index_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  // k is no longer proven.
  void Forget(const Key& k) {
    auto it = index_.find(k);
    if (it == index_.end()) return;
    lru_.erase(it->second);
    index_.erase(it);
  }
  size_t size() const { return lru_.size(); }
  void Clear() {
    lru_.clear();
    index_.clear();
  }

 private:
  std::list<Key> lru_;  // most recent first
  std::map<Key, typename std::list<Key>::iterator> index_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_COMPILE_BUDGET_H_
