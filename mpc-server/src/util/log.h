// Minimal logging for the server side (Debian 12's abseil 20220623 predates
// absl/log, so ABSL_LOG / absl::InitializeLog are not available).
//
//   KMPC_LOG(INFO) << "listening on " << addr;
//   KMPC_VLOG(1) << "ring: party 2 connected";   // only with --v >= 1
//
// One line per message on stderr: "I1121 06:20:01.123456 12345 file.cc:42] msg".
// Never log shares, keys, secret-tied counters or plaintext.
#ifndef KMPC_UTIL_LOG_H_
#define KMPC_UTIL_LOG_H_

#include <atomic>
#include <sstream>

namespace kmpc::log {

enum class Severity { kInfo, kWarning, kError };

// Verbosity for KMPC_VLOG (set from main's --v flag).
extern std::atomic<int> g_verbosity;

class Message {
 public:
  Message(Severity s, const char* file, int line);
  ~Message();
  std::ostream& stream() { return out_; }

 private:
  Severity severity_;
  std::ostringstream out_;
};

}  // namespace kmpc::log

#define KMPC_LOG_SEVERITY_INFO ::kmpc::log::Severity::kInfo
#define KMPC_LOG_SEVERITY_WARNING ::kmpc::log::Severity::kWarning
#define KMPC_LOG_SEVERITY_ERROR ::kmpc::log::Severity::kError
#define KMPC_LOG(sev) \
  ::kmpc::log::Message(KMPC_LOG_SEVERITY_##sev, __FILE__, __LINE__).stream()
#define KMPC_VLOG(level)                                \
  if (::kmpc::log::g_verbosity.load() < (level)) {      \
  } else                                                \
    KMPC_LOG(INFO)

#endif  // KMPC_UTIL_LOG_H_
