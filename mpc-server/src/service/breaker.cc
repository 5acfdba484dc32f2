#include "service/breaker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "service/metrics.h"
#include "util/atomic_file.h"
#include "util/log.h"

namespace kmpc::service {
namespace {

constexpr size_t kMaxStateBytes = 512;

std::string Utc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// Printable ASCII only: the file is ours, but it is read back into log
// lines and Health answers.
std::string Printable(std::string s) {
  if (s.size() > kMaxStateBytes) s.resize(kMaxStateBytes);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

std::string Errno(const char* what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

}  // namespace

Breaker::Breaker(BreakerOptions options, Metrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {
  if (metrics_ != nullptr) metrics_->SetBreakerOpen(false);
}

absl::Status Breaker::Load() {
  if (options_.state_file.empty()) return absl::OkStatus();
  const int fd = ::open(options_.state_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return absl::OkStatus();
  std::string text;
  absl::Status st;
  if (fd < 0) {
    st = absl::InternalError(Errno("cannot read", options_.state_file));
  } else {
    char buf[kMaxStateBytes];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    ::close(fd);
    if (n < 0) st = absl::InternalError(Errno("cannot read", options_.state_file));
    else text.assign(buf, static_cast<size_t>(n));
  }
  absl::MutexLock lock(&mu_);
  open_ = true;
  detail_ = absl::StrCat("open since before this restart (", options_.state_file,
                         ": ", text.empty() ? "unreadable" : Printable(text), ")");
  if (metrics_ != nullptr) metrics_->SetBreakerOpen(true);
  KMPC_LOG(ERROR) << "deviation breaker " << detail_
                  << "; every batch is refused until this server's operator removes that "
                     "file and kmpc-admin breaker-reset runs";
  return st;
}

bool Breaker::RecordDeviation(absl::Time now) {
  if (metrics_ != nullptr) metrics_->RecordDeviation();
  absl::MutexLock lock(&mu_);
  ++total_;
  recent_.push_back(now);
  while (!recent_.empty() && recent_.front() <= now - options_.window)
    recent_.pop_front();
  KMPC_LOG(WARNING) << "detected deviation: " << recent_.size()
                    << " within " << absl::FormatDuration(options_.window)
                    << " (breaker opens at "
                    << (options_.deviations > 0 ? absl::StrCat(options_.deviations)
                                                : std::string("never: --breaker_deviations=0"))
                    << ")";
  if (open_ || options_.deviations <= 0 ||
      recent_.size() < static_cast<size_t>(options_.deviations))
    return false;
  Trip(now, absl::StrCat(recent_.size(), " deviations within ",
                         absl::FormatDuration(options_.window)));
  return true;
}

void Breaker::Trip(absl::Time now, const std::string& why) {
  open_ = true;
  detail_ = absl::StrCat("open since ", Utc(now), " after ", why);
  if (metrics_ != nullptr) metrics_->SetBreakerOpen(true);
  KMPC_LOG(ERROR) << "deviation breaker " << detail_
                  << ": a server of this ring deviated from the protocol; every "
                     "batch is refused (BATCH_BREAKER_OPEN) until this server's "
                     "operator removes the trip's file and kmpc-admin breaker-reset "
                     "runs. Rotate the keys first (docs/admin-guide.md)";
  if (options_.state_file.empty()) return;
  absl::Status st = util::WriteFileAtomically(options_.state_file, detail_ + "\n");
  if (!st.ok())
    KMPC_LOG(ERROR) << "deviation breaker: " << st.message()
                    << " (open in memory only: a restart would close it)";
}

bool Breaker::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

std::string Breaker::Detail() const {
  absl::MutexLock lock(&mu_);
  return open_ ? detail_ : std::string();
}

uint64_t Breaker::deviations() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

absl::StatusOr<std::string> Breaker::Reset() {
  absl::MutexLock lock(&mu_);
  if (!options_.state_file.empty() && ::access(options_.state_file.c_str(), F_OK) == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "the trip is recorded in ", options_.state_file,
        ": this server's operator removes that file on its host first (the "
        "breaker stays open until then), then kmpc-admin breaker-reset"));
  std::string cleared = open_ ? detail_ : std::string();
  open_ = false;
  detail_.clear();
  recent_.clear();
  if (metrics_ != nullptr) metrics_->SetBreakerOpen(false);
  KMPC_LOG(WARNING) << "deviation breaker reset by an operator"
                    << (cleared.empty() ? " (it was closed)" : ": was " + cleared);
  return cleared;
}

absl::Status Breaker::RefusalStatus() const {
  const std::string detail = Detail();
  absl::Status st = absl::FailedPreconditionError(absl::StrCat(
      "this server's deviation breaker is ", detail.empty() ? "open" : detail,
      ": it serves no batch until an operator rotates the keys, removes the "
      "trip's file on this server's host and runs kmpc-admin breaker-reset"));
  st.SetPayload(kBreakerPayload, absl::Cord("1"));
  return st;
}

absl::Status Breaker::PeerRefusal(int party) {
  absl::Status st = absl::FailedPreconditionError(absl::StrCat(
      "party ", party, "'s deviation breaker is open: it serves no batch until "
      "an operator rotates the keys, removes the trip's file on that server's "
      "host and runs kmpc-admin breaker-reset"));
  st.SetPayload(kBreakerPayload, absl::Cord("1"));
  return st;
}

bool Breaker::IsRefusal(const absl::Status& st) {
  return !st.ok() && st.GetPayload(kBreakerPayload).has_value();
}

}  // namespace kmpc::service
