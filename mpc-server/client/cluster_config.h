// One MPC cluster as each of its clients names it (the KDC module's
// options, kmpc-admin's config and flags, the key dealer, the tools):
// without gRPC, so that the settings' parsers need not include channels.h.
#ifndef KMPC_CLIENT_CLUSTER_CONFIG_H_
#define KMPC_CLIENT_CLUSTER_CONFIG_H_

#include <array>
#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "client/reveal.h"  // kParties

namespace kmpc::client {

// At most this many clusters: the settings servers, servers2, ... servers4
// of the KDC module and of kmpc-admin (every key is in each).
inline constexpr size_t kMaxClusters = 4;

// Where the three servers are and how this client authenticates.
struct ClusterConfig {
  std::array<std::string, kParties> servers;  // party 0, 1, 2: "HOST:PORT"
  std::string ca;    // PEM: the CA the servers' certificates chain to
  std::string cert;  // PEM: this client's certificate
  std::string key;   // PEM: its private key (unencrypted)
  // Deadline of each RPC the library makes (AdminClient).
  absl::Duration rpc_timeout = absl::Seconds(10);
};

}  // namespace kmpc::client

#endif  // KMPC_CLIENT_CLUSTER_CONFIG_H_
