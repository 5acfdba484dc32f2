// The cluster as kmpc-admin's configuration (config.h) names it: the Admin
// side of the three servers, for kmpc-admin and the key dealer module.
#ifndef KMPC_ADMIN_CLUSTER_H_
#define KMPC_ADMIN_CLUSTER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "admin/config.h"
#include "client/admin_client.h"

namespace kmpc::admin {

inline absl::StatusOr<std::unique_ptr<client::AdminClient>> ConnectCluster(
    const Config& cfg) {
  if (absl::Status st = CheckClusterConfig(cfg); !st.ok()) return st;
  client::ClusterConfig c;
  c.servers = cfg.servers;
  c.ca = cfg.ca;
  c.cert = cfg.cert;
  c.key = cfg.key;
  c.rpc_timeout = absl::Milliseconds(cfg.timeout_ms);
  return client::AdminClient::Connect(c);
}

// A failure of the whole cluster (a server down, our certificate refused):
// the next principal or batch would fail the same way, so a run stops.
inline bool IsClusterError(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return true;
    default:
      return false;
  }
}

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_CLUSTER_H_
