#include "engine/gate_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kmpc::engine {
namespace {

// One line of the state file: "<deal id, 32 hex digits> <window start,
// Unix seconds> <failures>".
std::string Line(const DealId& deal, absl::Time start, uint32_t failures) {
  return absl::StrCat(
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(deal.data()), 16)),
      " ", absl::ToUnixSeconds(start), " ", failures, "\n");
}

bool ParseLine(absl::string_view line, DealId& deal, absl::Time& start, uint32_t& failures) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  int64_t s = 0;
  if (f.size() != 3 || f[0].size() != 32 || !absl::SimpleAtoi(f[1], &s) ||
      !absl::SimpleAtoi(f[2], &failures))
    return false;
  for (char c : f[0])
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  const std::string bytes = absl::HexStringToBytes(f[0]);
  std::memcpy(deal.data(), bytes.data(), 16);
  start = absl::FromUnixSeconds(s);
  return true;
}

absl::Status Errno(const char* what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Appends `text` to `path` (created 0600) and fdatasyncs it.
absl::Status Append(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot open", path);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fdatasync(fd) == 0;
  absl::Status st = ok ? absl::OkStatus() : Errno("cannot write", path);
  ::close(fd);
  return st;
}

// Writes `text` to path + ".tmp", fsyncs it and renames it over `path`,
// then fsyncs the directory: after a crash the file is whole, old or new.
absl::Status Replace(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status st = Errno("cannot write", tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

// Past this many lines more than twice the live deals, the file is
// rewritten (RewriteLocked): its size stays within a small multiple of
// the deals with failures in their window.
constexpr size_t kSlackLines = 1024;

}  // namespace

bool GateDecrypt(const Job& job, const KeyShares& key) {
  if (!PasswordDerived(key.kind) || job.type != pb::JOB_DECRYPT) return false;
  return job.cts_key == pb::CTS_KEY_DEALT ? job.usage == 1 : job.usage == 54;
}

GateBudget::GateBudget(GateBudgetOptions options) : options_(std::move(options)) {}

bool GateBudget::Expired(const Entry& e, absl::Time now) const {
  return e.failures > 0 && now - e.start >= options_.window;
}

absl::Status GateBudget::Load(absl::Time now) {
  if (options_.state_file.empty()) return absl::OkStatus();
  if (::access(options_.state_file.c_str(), F_OK) != 0 && errno == ENOENT)
    return absl::OkStatus();
  std::ifstream f(options_.state_file);
  if (!f.is_open()) return Errno("cannot read", options_.state_file);
  std::lock_guard<std::mutex> l(mu_);
  std::string line;
  while (std::getline(f, line)) {
    DealId deal;
    absl::Time start;
    uint32_t failures = 0;
    // A line cut short by a crash is skipped: at most that one failure.
    if (!ParseLine(line, deal, start, failures)) continue;
    Entry& e = entries_[deal];
    e.start = start;
    e.failures = failures;
  }
  if (f.bad()) return Errno("cannot read", options_.state_file);
  return RewriteLocked(now);
}

absl::Status GateBudget::RewriteLocked(absl::Time now) {
  std::string text;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (Expired(it->second, now)) it->second.failures = 0;
    if (it->second.failures == 0 && it->second.pending == 0) {
      it = entries_.erase(it);
      continue;
    }
    if (it->second.failures > 0) text += Line(it->first, it->second.start, it->second.failures);
    ++it;
  }
  absl::Status st = Replace(options_.state_file, text);
  if (st.ok()) lines_ = entries_.size();
  return st;
}

bool GateBudget::Reserve(const DealId& deal, absl::Time now) {
  std::lock_guard<std::mutex> l(mu_);
  Entry& e = entries_[deal];
  if (Expired(e, now)) e.failures = 0;
  if (options_.failures_per_window != 0 &&
      uint64_t{e.failures} + e.pending >= options_.failures_per_window)
    return false;
  ++e.pending;
  return true;
}

void GateBudget::Settle(const DealId& deal, bool failed, absl::Time now) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(deal);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.pending > 0) --e.pending;
  if (failed) {
    if (e.failures == 0 || Expired(e, now)) {
      e.start = now;
      e.failures = 0;
    }
    ++e.failures;
    PersistLocked(deal, e, now);
  }
  if (e.failures == 0 && e.pending == 0) entries_.erase(it);
}

void GateBudget::PersistLocked(const DealId& deal, const Entry& e, absl::Time now) {
  if (options_.state_file.empty()) return;
  absl::Status st;
  if (lines_ >= 2 * entries_.size() + kSlackLines) {
    st = RewriteLocked(now);  // holds e's new count too
  } else {
    st = Append(options_.state_file, Line(deal, e.start, e.failures));
    if (st.ok()) ++lines_;
  }
  write_status_ = st;
}

uint32_t GateBudget::Failures(const DealId& deal, absl::Time now) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(deal);
  if (it == entries_.end() || Expired(it->second, now)) return 0;
  return it->second.failures;
}

absl::Status GateBudget::write_status() const {
  std::lock_guard<std::mutex> l(mu_);
  return write_status_;
}

GateRun::~GateRun() {
  const absl::Time now = budget_->Now();
  for (const auto& [j, deal] : open_) budget_->Settle(deal, false, now);
}

bool GateRun::Take(size_t j, const DealId& deal) {
  uint32_t& n = in_run_[deal];
  if (budget_->per_run() != 0 && n >= budget_->per_run()) return false;
  if (!budget_->Reserve(deal, budget_->Now())) return false;
  ++n;
  open_[j] = deal;
  return true;
}

void GateRun::Settle(size_t j, bool passed) {
  auto it = open_.find(j);
  if (it == open_.end()) return;
  budget_->Settle(it->second, !passed, budget_->Now());
  open_.erase(it);
}

}  // namespace kmpc::engine
