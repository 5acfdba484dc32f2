#include "admin/rewrite_due.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kmpc::admin {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

std::string RewriteDuePath(const std::string& dbname) {
  return dbname + ".kmpc-rewrite-due";
}

absl::Status NoteRewriteDue(const std::string& dbname, const std::string& principal) {
  if (dbname.empty()) return absl::FailedPreconditionError("the KDB has no database_name");
  if (principal.find('\n') != std::string::npos)
    return absl::InvalidArgumentError("a principal name with a newline");
  const std::string path = RewriteDuePath(dbname);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("opening", path);
  const std::string line =
      absl::StrCat(static_cast<long long>(std::time(nullptr)), " ", principal, "\n");
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  absl::Status st = ok ? absl::OkStatus() : Errno("writing", path);
  if (::close(fd) != 0 && st.ok()) st = Errno("closing", path);
  return st;
}

absl::StatusOr<std::vector<std::string>> RewritesDue(const std::string& dbname) {
  std::vector<std::string> out;
  if (dbname.empty()) return out;
  const std::string path = RewriteDuePath(dbname);
  std::ifstream f(path);
  if (!f) {
    if (errno == ENOENT) return out;
    return Errno("reading", path);
  }
  std::set<std::string> seen;
  std::string line;
  while (std::getline(f, line)) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;  // a line cut short by a crash
    std::string name = line.substr(sp + 1);
    if (!name.empty() && seen.insert(name).second) out.push_back(std::move(name));
  }
  return out;
}

uint64_t RewriteDueSize(const std::string& dbname) {
  struct stat st;
  if (dbname.empty() || ::stat(RewriteDuePath(dbname).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

absl::Status ClearRewriteDue(const std::string& dbname, uint64_t size_before) {
  if (dbname.empty() || RewriteDueSize(dbname) > size_before) return absl::OkStatus();
  const std::string path = RewriteDuePath(dbname);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("removing", path);
  return absl::OkStatus();
}

}  // namespace kmpc::admin
