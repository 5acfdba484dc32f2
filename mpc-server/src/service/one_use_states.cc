#include "service/one_use_states.h"

#include "absl/strings/str_cat.h"

namespace kmpc::service {

template <typename State>
void OneUseStates<State>::SweepLocked(absl::Time now) {
  if (now - last_sweep_ < absl::Seconds(1)) return;
  last_sweep_ = now;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->second.created > ttl_) {
      bytes_ -= it->second.bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

template <typename State>
absl::Status OneUseStates<State>::Put(const std::string& key, Entry e) {
  // The state's own buffers, the map node and its key (an estimate of the
  // allocator's view; a state shares its key's stored H powers).
  constexpr size_t kNodeBytes = 128;
  e.bytes = (e.state != nullptr ? e.state->OwnBytes() : 0) + key.capacity() +
            kNodeBytes;
  absl::MutexLock lock(&mu_);
  SweepLocked(e.created);
  // A key is used once: a second state under it (a batch id the KDC
  // repeated) would replace one that may still finalize or sign, so it is
  // refused and the first stays.
  if (entries_.count(key) != 0)
    return absl::AlreadyExistsError(absl::StrCat(
        "one of the ", what_, " is already under this batch/job id (a "
        "repeated batch id)"));
  if (entries_.size() >= max_)
    return absl::ResourceExhaustedError(absl::StrCat("too many ", what_));
  if (bytes_ + e.bytes > max_bytes_)
    return absl::ResourceExhaustedError(absl::StrCat(
        what_, " hold ", bytes_, " bytes, the limit is ", max_bytes_));
  bytes_ += e.bytes;
  entries_.emplace(key, std::move(e));
  return absl::OkStatus();
}

template <typename State>
absl::StatusOr<std::vector<typename OneUseStates<State>::Entry>>
OneUseStates<State>::TakeAll(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  absl::Time now = absl::Now();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end() || now - it->second.created > ttl_)
      return absl::NotFoundError(absl::StrCat(
          "item ", i, ": none of the ", what_, " is under this batch/job id "
          "(unknown, expired or already used)"));
  }
  std::vector<Entry> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) {
    auto it = entries_.find(k);
    bytes_ -= it->second.bytes;
    out.push_back(std::move(it->second));
    entries_.erase(it);
  }
  return out;
}

template <typename State>
absl::StatusOr<typename OneUseStates<State>::Entry> OneUseStates<State>::Take(
    const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return absl::NotFoundError("unknown or already used");
  const bool expired = absl::Now() - it->second.created > ttl_;
  bytes_ -= it->second.bytes;
  Entry e = std::move(it->second);
  entries_.erase(it);
  if (expired) return absl::NotFoundError("expired");
  return e;
}

template <typename State>
void OneUseStates<State>::Erase(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& k : keys) {
    auto it = entries_.find(k);
    if (it == entries_.end()) continue;
    bytes_ -= it->second.bytes;
    entries_.erase(it);
  }
}

template <typename State>
size_t OneUseStates<State>::size() {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

template <typename State>
size_t OneUseStates<State>::bytes() {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

template class OneUseStates<engine::EncryptState>;
template class OneUseStates<engine::PadState>;

}  // namespace kmpc::service
