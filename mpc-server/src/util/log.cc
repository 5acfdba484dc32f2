#include "util/log.h"

#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace kmpc::log {

std::atomic<int> g_verbosity{0};

Message::Message(Severity s, const char* file, int line) : severity_(s) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  gmtime_r(&tv.tv_sec, &t);
  const char* base = std::strrchr(file, '/');
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%c%02d%02d %02d:%02d:%02d.%06ld %ld %s:%d] ",
                s == Severity::kInfo ? 'I' : s == Severity::kWarning ? 'W' : 'E',
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<long>(tv.tv_usec),
                static_cast<long>(syscall(SYS_gettid)),
                base ? base + 1 : file, line);
  out_ << buf;
}

Message::~Message() {
  out_ << '\n';
  std::string s = out_.str();
  // One write per line so lines of concurrent threads do not interleave.
  ssize_t ignored = write(2, s.data(), s.size());
  (void)ignored;
  (void)severity_;
}

}  // namespace kmpc::log
