// Helpers shared by the server-side tests.
#ifndef KMPC_TEST_SERVER_TEST_UTIL_H_
#define KMPC_TEST_SERVER_TEST_UTIL_H_

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace kmpc::testing {

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

// A fresh temporary directory with deploy/gen-certs.sh's certificates in
// <dir>/certs; empty string on failure.
inline std::string MakeTestCerts(const std::string& tag) {
  std::string tmpl = "/tmp/kmpc-" + tag + "-XXXXXX";
  char* d = mkdtemp(tmpl.data());
  if (d == nullptr) return "";
  std::string dir = d;
  std::string cmd = "bash " KMPC_SOURCE_DIR "/deploy/gen-certs.sh " + dir +
                    "/certs >/dev/null";
  return system(cmd.c_str()) == 0 ? dir : "";
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_SERVER_TEST_UTIL_H_
