#include "gate_failures.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kmpc::kdc {

bool GateFailures::IsGate(const Job& job) {
  if (job.type != kmpc::v1::JOB_DECRYPT) return false;
  return job.cts_key == kmpc::v1::CTS_KEY_DEALT ? job.usage == kTimestampUsage
                                                 : job.usage == kChallengeUsage;
}

// Drops the slots of gates admitted longer than kReservationTtl ago.
void GateFailures::LapseLocked(Window& w, absl::Time now) {
  auto live = std::find_if(w.in_flight.begin(), w.in_flight.end(),
                           [now](absl::Time t) { return now - t < kReservationTtl; });
  w.in_flight.erase(w.in_flight.begin(), live);
}

absl::Status GateFailures::Admit(const Job& job, absl::Time now) {
  if (!IsGate(job)) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  if (limit_ == 0) return absl::OkStatus();
  if (keys_.size() >= kMaxKeys && keys_.count(job.key_id) == 0) PruneLocked(now);
  Window& w = keys_[job.key_id];
  LapseLocked(w, now);
  const uint64_t failures = FailuresLocked(w, now);
  if (failures + w.in_flight.size() < limit_) {
    w.in_flight.push_back(now);
    return absl::OkStatus();
  }
  if (failures < limit_)
    return absl::ResourceExhaustedError(absl::StrCat(
        "this key has ", w.in_flight.size(), " pre-authentications in flight and ", failures,
        " failed within the module's gate_failure_window_s (gate_failures = ", limit_,
        "): refused until one is answered"));
  return absl::ResourceExhaustedError(absl::StrCat(
      "this key's pre-authentication failed ", failures,
      " times within the module's gate_failure_window_s (gate_failures = ", limit_,
      "): refused until ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", w.start + window_,
                                            absl::UTCTimeZone())));
}

void GateFailures::Done(const Job& job, bool failed, absl::Time now) {
  if (!IsGate(job)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (limit_ == 0) return;
  if (keys_.size() >= kMaxKeys && keys_.count(job.key_id) == 0) PruneLocked(now);
  auto it = keys_.find(job.key_id);
  if (it != keys_.end() && !it->second.in_flight.empty())
    it->second.in_flight.erase(it->second.in_flight.begin());
  if (!failed) {
    if (it != keys_.end() && it->second.in_flight.empty() &&
        FailuresLocked(it->second, now) == 0)
      keys_.erase(it);  // a login's key leaves no entry behind
    return;
  }
  Window& w = it != keys_.end() ? it->second : keys_[job.key_id];
  if (w.failures == 0 || Expired(w, now)) {
    w.start = now;
    w.failures = 0;
  }
  ++w.failures;
}

// Drops the ended windows without gates in flight; if that is not enough,
// the oldest half.
void GateFailures::PruneLocked(absl::Time now) {
  for (auto it = keys_.begin(); it != keys_.end();) {
    LapseLocked(it->second, now);
    const bool idle = it->second.in_flight.empty() && FailuresLocked(it->second, now) == 0;
    it = idle ? keys_.erase(it) : std::next(it);
  }
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
  return it == keys_.end() ? 0 : FailuresLocked(it->second, now);
}

size_t GateFailures::InFlight(const std::string& key_id, absl::Time now) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = keys_.find(key_id);
  if (it == keys_.end()) return 0;
  size_t n = 0;
  for (absl::Time t : it->second.in_flight) n += now - t < kReservationTtl;
  return n;
}

}  // namespace kmpc::kdc
