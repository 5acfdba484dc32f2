#include "service/key_cache.h"

#include "absl/strings/str_cat.h"

namespace kmpc::service {

absl::StatusOr<std::shared_ptr<const engine::KeyShares>> KeyCache::Get(
    absl::string_view key_id) {
  uint64_t started;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(std::string(key_id));
    if (it != cache_.end()) return it->second;
    started = epoch_;
    ++loading_;
  }
  auto shared = Load(key_id);
  if (load_hook_) load_hook_();
  absl::MutexLock lock(&mu_);
  --loading_;
  // Invalidated since the load started: the value read may predate the
  // store change, so it is returned (the call overlapped the change) but
  // not cached.
  auto inv = invalidated_.find(std::string(key_id));
  const bool stale = inv != invalidated_.end() && inv->second > started;
  if (loading_ == 0) invalidated_.clear();
  if (!shared.ok() || stale) return shared;
  if (cache_.size() > 200000) cache_.clear();
  cache_[std::string(key_id)] = *shared;
  return shared;
}

absl::StatusOr<std::shared_ptr<const engine::KeyShares>> KeyCache::Load(
    absl::string_view key_id) {
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(key_id.data()), key_id.size()));
  if (!id.ok()) return id.status();
  auto rec = store_->Get(*id);
  if (!rec.ok()) return rec.status();
  auto ks = engine::KeyShares::Parse(rec->shares.span());
  if (!ks.ok())
    return absl::DataLossError(absl::StrCat("stored shares of key ",
                                            store::KeyIdHex(*id),
                                            " do not parse: ", ks.status().message()));
  if (ks->party != party_ ||
      static_cast<uint8_t>(ks->cipher) != static_cast<uint8_t>(rec->meta.cipher))
    return absl::FailedPreconditionError(absl::StrCat(
        "stored shares of key ", store::KeyIdHex(*id), " belong to party ",
        ks->party, " or another cipher"));
  ks->kind = rec->meta.kind;  // the record's, not the shares' encoding
  return std::shared_ptr<const engine::KeyShares>(
      std::make_shared<const engine::KeyShares>(std::move(*ks)));
}

void KeyCache::Invalidate(absl::string_view key_id) {
  absl::MutexLock lock(&mu_);
  ++epoch_;
  cache_.erase(std::string(key_id));
  if (loading_ > 0) invalidated_[std::string(key_id)] = epoch_;
}

}  // namespace kmpc::service
