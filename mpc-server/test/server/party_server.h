// Test helper: an in-process gRPC server over mTLS that presents one
// party's certificate from a MakeTestCerts directory (test_util.h), the way
// a real kmpc-mpc-server does (deploy/gen-certs.sh layout).
#ifndef KMPC_TEST_SERVER_PARTY_SERVER_H_
#define KMPC_TEST_SERVER_PARTY_SERVER_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace kmpc::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Serves `service` on 127.0.0.1:port with party `cert_party`'s key and
// certificate, requiring a client certificate of the test CA.
inline std::unique_ptr<grpc::Server> StartPartyServer(const std::string& certs,
                                                      int cert_party, int port,
                                                      grpc::Service* service) {
  grpc::SslServerCredentialsOptions o(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ReadFile(certs + "/ca.pem");
  const std::string name = absl::StrCat(certs, "/party-", cert_party);
  o.pem_key_cert_pairs.push_back({ReadFile(name + ".key"), ReadFile(name + ".pem")});
  grpc::ServerBuilder b;
  int bound = 0;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                     grpc::SslServerCredentials(o), &bound);
  b.RegisterService(service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  EXPECT_EQ(bound, port);
  return server;
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_SERVER_PARTY_SERVER_H_
