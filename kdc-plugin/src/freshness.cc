#include "freshness.h"

#include <openssl/sha.h>

#include <ctime>
#include <functional>

#include "absl/strings/cord.h"

namespace kmpc::kdc {

absl::Status ReplayedGateError(absl::string_view why) {
  absl::Status st = absl::ResourceExhaustedError(why);
  st.SetPayload(kReplayedPayload, absl::Cord("1"));
  return st;
}

bool IsReplayedGate(const absl::Status& st) {
  return !st.ok() && st.GetPayload(kReplayedPayload).has_value();
}

namespace {

// The digest a gate is remembered by: of the key id (length-prefixed) and
// the ciphertext, so equal ciphertexts under two keys are two entries.
std::string Digest(const std::string& key_id, absl::Span<const uint8_t> ciphertext) {
  std::string in(1, static_cast<char>(key_id.size()));
  in += key_id;
  in.append(reinterpret_cast<const char*>(ciphertext.data()), ciphertext.size());
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const uint8_t*>(in.data()), in.size(),
         reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

bool Digits(absl::Span<const uint8_t> s, size_t from, size_t n, int* out) {
  int v = 0;
  for (size_t i = from; i < from + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = 10 * v + (s[i] - '0');
  }
  *out = v;
  return true;
}

}  // namespace

std::optional<absl::Time> PaTimestamp(absl::Span<const uint8_t> p) {
  static constexpr uint8_t kHeader[] = {0xA0, 0x11, 0x18, 0x0F};
  if (p.size() < 21 || p.size() > 129 || p[0] != 0x30 || p[1] != p.size() - 2) return std::nullopt;
  for (size_t i = 0; i < sizeof kHeader; ++i)
    if (p[2 + i] != kHeader[i]) return std::nullopt;
  if (p[20] != 'Z') return std::nullopt;
  struct tm tm = {};
  int f[6];
  static constexpr size_t kAt[] = {6, 10, 12, 14, 16, 18}, kLen[] = {4, 2, 2, 2, 2, 2};
  for (int i = 0; i < 6; ++i)
    if (!Digits(p, kAt[i], kLen[i], &f[i])) return std::nullopt;
  if (f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > 31 || f[3] > 23 || f[4] > 59 || f[5] > 60)
    return std::nullopt;
  tm.tm_year = f[0] - 1900;
  tm.tm_mon = f[1] - 1;
  tm.tm_mday = f[2];
  tm.tm_hour = f[3];
  tm.tm_min = f[4];
  tm.tm_sec = f[5];
  return absl::FromTimeT(timegm(&tm));
}

void GateFreshness::set_skew(absl::Duration skew) {
  std::lock_guard<std::mutex> l(mu_);
  skew_ = skew;
}

absl::Duration GateFreshness::skew() const {
  std::lock_guard<std::mutex> l(mu_);
  return skew_;
}

size_t GateFreshness::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return seen_.size();
}

void GateFreshness::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  seen_.clear();
  expiry_ = {};
  in_flight_.clear();
}

std::optional<std::string> GateFreshness::Claim(const std::string& key_id,
                                                absl::Span<const uint8_t> ciphertext) {
  std::string d = Digest(key_id, ciphertext);
  std::lock_guard<std::mutex> l(mu_);
  if (!in_flight_.insert(d).second) return std::nullopt;
  return d;
}

void GateFreshness::Unclaim(const std::string& digest) {
  std::lock_guard<std::mutex> l(mu_);
  in_flight_.erase(digest);
}

size_t GateFreshness::in_flight() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_flight_.size();
}

void GateFreshness::ExpireLocked(absl::Time now) {
  while (!expiry_.empty() && expiry_.top().first < now) {
    auto it = seen_.find(expiry_.top().second);
    if (it != seen_.end() && it->second == expiry_.top().first) seen_.erase(it);
    expiry_.pop();
  }
}

bool GateFreshness::Seen(const std::string& key_id, absl::Span<const uint8_t> ciphertext,
                         absl::Time now) {
  const std::string d = Digest(key_id, ciphertext);
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked(now);
  return seen_.count(d) > 0;
}

GateFreshness::Verdict GateFreshness::Check(const std::string& key_id,
                                            absl::Span<const uint8_t> ciphertext,
                                            absl::Span<const uint8_t> pa_enc_ts,
                                            absl::Time now) {
  const std::optional<absl::Time> t = PaTimestamp(pa_enc_ts);
  std::lock_guard<std::mutex> l(mu_);
  if (!t.has_value() || absl::AbsDuration(now - *t) > skew_) return Verdict::kSkewed;
  ExpireLocked(now);
  std::string d = Digest(key_id, ciphertext);
  const absl::Time until = *t + skew_;
  if (seen_.count(d) > 0) return Verdict::kReplayed;
  if (seen_.size() >= max_entries_) return Verdict::kFull;
  seen_.emplace(d, until);
  expiry_.emplace(until, std::move(d));
  return Verdict::kFresh;
}

}  // namespace kmpc::kdc
