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

// A fresh temporary directory (MakeTempDir) laid out as a MakeTestCerts
// certs directory for one server: `certs`'s ca.pem (so the server still
// trusts the test clients), and party-<party>.{pem,key}, a self-signed
// certificate that carries the party's names (SAN DNS:kmpc-party-<party>,
// IP:127.0.0.1) but chains to no CA a client trusts. Empty string on
// failure.
inline std::string MakeSelfSignedPartyCerts(const std::string& certs,
                                            int party) {
  std::string dir = MakeTempDir("self-signed");
  if (dir.empty()) return "";
  const std::string name = dir + "/party-" + std::to_string(party);
  const std::string cn = "kmpc-party-" + std::to_string(party);
  std::string cmd = "cp " + certs + "/ca.pem " + dir +
                    "/ca.pem && openssl req -x509 -newkey ec "
                    "-pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -keyout " +
                    name + ".key -out " + name + ".pem -subj /CN=" + cn +
                    " -addext subjectAltName=DNS:" + cn +
                    ",IP:127.0.0.1 >/dev/null 2>&1";
  return system(cmd.c_str()) == 0 ? dir : "";
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_SERVER_TEST_UTIL_H_
