#include "gate_failures.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kmpc::kdc {

GateFailures& GateFailures::Shared() {
  static GateFailures* shared = new GateFailures();
  return *shared;
}

void GateFailures::Configure(const BatcherOptions& o) {
  std::lock_guard<std::mutex> l(mu_);
  limit_ = o.gate_failures;
  window_ = o.gate_failure_window;
}

bool GateFailures::IsGate(const Job& job) {
  if (job.type != kmpc::v1::JOB_DECRYPT) return false;
  return job.cts_key == kmpc::v1::CTS_KEY_DEALT ? job.usage == 1 : job.usage == 54;
}

absl::Status GateFailures::Admit(const Job& job, absl::Time now) {
  if (!IsGate(job)) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  if (limit_ == 0) return absl::OkStatus();
  auto it = keys_.find(job.key_id);
  if (it == keys_.end() || Expired(it->second, now) || it->second.failures < limit_)
    return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "this key's pre-authentication failed ", it->second.failures,
      " times within the module's gate_failure_window_s (gate_failures = ", limit_,
      "): refused until ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", it->second.start + window_,
                                            absl::UTCTimeZone())));
}

void GateFailures::Failed(const Job& job, absl::Time now) {
  if (!IsGate(job)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (limit_ == 0) return;
  if (keys_.size() >= kMaxKeys && keys_.count(job.key_id) == 0) PruneLocked(now);
  Window& w = keys_[job.key_id];
  if (w.failures == 0 || Expired(w, now)) w = Window{now, 0};
  ++w.failures;
}

// Drops the ended windows; if none ended, the oldest half.
void GateFailures::PruneLocked(absl::Time now) {
  for (auto it = keys_.begin(); it != keys_.end();)
    it = Expired(it->second, now) ? keys_.erase(it) : std::next(it);
  if (keys_.size() < kMaxKeys) return;
  std::vector<absl::Time> starts;
  starts.reserve(keys_.size());
  for (const auto& [k, w] : keys_) starts.push_back(w.start);
  std::nth_element(starts.begin(), starts.begin() + starts.size() / 2, starts.end());
  const absl::Time median = starts[starts.size() / 2];
  for (auto it = keys_.begin(); it != keys_.end();)
    it = it->second.start <= median ? keys_.erase(it) : std::next(it);
}

uint64_t GateFailures::Failures(const std::string& key_id, absl::Time now) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = keys_.find(key_id);
  if (it == keys_.end() || Expired(it->second, now)) return 0;
  return it->second.failures;
}

}  // namespace kmpc::kdc
