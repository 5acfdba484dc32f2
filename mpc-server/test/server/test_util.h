// Helpers shared by the server-side tests.
#ifndef KMPC_TEST_SERVER_TEST_UTIL_H_
#define KMPC_TEST_SERVER_TEST_UTIL_H_

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace kmpc::testing {

// Removes the directory tree when the test program exits: the temporary
// directories hold share stores and the test CA's private keys, which must
// not pile up in /tmp run after run.
inline void RemoveAtExit(const std::string& dir) {
  struct Registry {
    std::mutex mu;
    std::vector<std::string> dirs;
    ~Registry() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Registry r;
  std::lock_guard<std::mutex> l(r.mu);
  r.dirs.push_back(dir);
}

// A fresh temporary directory /tmp/kmpc-<tag>-XXXXXX, removed at exit;
// empty string on failure.
inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = "/tmp/kmpc-" + tag + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  RemoveAtExit(tmpl);
  return tmpl;
}

// A loopback port that was free a moment ago.
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t l = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A fresh temporary directory (MakeTempDir) with deploy/gen-certs.sh's
// certificates in <dir>/certs; empty string on failure.
inline std::string MakeTestCerts(const std::string& tag) {
  std::string dir = MakeTempDir(tag);
  if (dir.empty()) return "";
  std::string cmd = "bash " KMPC_SOURCE_DIR "/deploy/gen-certs.sh " + dir +
                    "/certs >/dev/null";
  return system(cmd.c_str()) == 0 ? dir : "";
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_SERVER_TEST_UTIL_H_
