// The servers' log lines (util/log.h): one line per message on stderr, in
// the glog-like format the docs and the integration tests read, and
// KMPC_VLOG gated by the verbosity.
#include "util/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace kmpc::log {
namespace {

// Runs f with fd 2 sent to a temporary file; returns what was written.
template <typename F>
std::string CaptureStderr(F f) {
  char path[] = "/tmp/kmpc-log-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  unlink(path);
  int saved = dup(2);
  dup2(fd, 2);
  f();
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buf[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST(LogTest, OneLinePerMessageWithSeverityTimeThreadAndPlace) {
  const std::string out = CaptureStderr([] {
    KMPC_LOG(INFO) << "listening on " << "127.0.0.1:7000";
    KMPC_LOG(WARNING) << "slow";
    KMPC_LOG(ERROR) << "down";
  });
  const std::regex line(
      R"(^([IWE])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ log_test\.cc:\d+\] (.*)$)");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(out.substr(start, nl - start));
  ASSERT_EQ(lines.size(), 3u) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, line)) << lines[0];
  EXPECT_EQ(m[1], "I");
  EXPECT_EQ(m[2], "listening on 127.0.0.1:7000");
  ASSERT_TRUE(std::regex_match(lines[1], m, line)) << lines[1];
  EXPECT_EQ(m[1], "W");
  ASSERT_TRUE(std::regex_match(lines[2], m, line)) << lines[2];
  EXPECT_EQ(m[1], "E");
  EXPECT_EQ(m[2], "down");
}

TEST(LogTest, VlogOnlyAtOrAboveTheVerbosity) {
  const int before = g_verbosity.load();
  g_verbosity = 0;
  EXPECT_EQ(CaptureStderr([] { KMPC_VLOG(1) << "hidden"; }), "");
  g_verbosity = 1;
  EXPECT_NE(CaptureStderr([] { KMPC_VLOG(1) << "shown"; }).find("] shown\n"),
            std::string::npos);
  EXPECT_EQ(CaptureStderr([] { KMPC_VLOG(2) << "hidden"; }), "");
  g_verbosity = before;
}

}  // namespace
}  // namespace kmpc::log
