// kmpc-admin configuration: where the three MPC servers are and which
// certificate the tool presents to them.  Flags override the config file.
//
// Config file (KMPC_ADMIN_CONFIG, else /etc/kmpc/admin.conf if present, or
// --config=PATH): "name = value" lines, '#' comments:
//   servers    = HOST:PORT,HOST:PORT,HOST:PORT   parties 0, 1, 2 in ring order
//   ca         = PATH   CA certificate the servers' certificates chain to
//   cert       = PATH   this tool's client certificate (CN kmpc-admin)
//   key        = PATH   its private key
//   realm      = REALM  (default: the default realm of KRB5_CONFIG)
//   timeout_ms = N      deadline of each RPC (default 10000)
//   user_ctr_mpc = true|false   (default false) whether a password-derived
//                        key (a user's) may be dealt under aes*-ctr-mpc
//                        too, by kmpc-admin share and kadmind's dealer: a
//                        second door to the password, whose timestamp and
//                        reply reach every server whole; for fleets of
//                        patched clients and tests (docs/admin-guide.md)
//   servers2 = HOST:PORT,HOST:PORT,HOST:PORT   a second MPC cluster: every
//   ca2 / cert2 / key2 = PATH                  key is dealt to each cluster
//                        under the same key id, all or nothing (cluster.h);
//                        likewise 3 and 4. A cluster without ca/cert/key of
//                        its own uses cluster 1's.
// The KDB itself is found as kadmin.local finds it: KRB5_CONFIG and
// KRB5_KDC_PROFILE.
#ifndef KMPC_ADMIN_CONFIG_H_
#define KMPC_ADMIN_CONFIG_H_

#include <array>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cluster_config.h"

namespace kmpc::admin {

struct Config {
  std::array<std::string, 3> servers;
  std::string ca;
  std::string cert;
  std::string key;
  std::string realm;
  int timeout_ms = 10000;
  bool user_ctr_mpc = false;  // the file comment
  // Clusters 2.. (client::kMaxClusters at most; config names with the
  // cluster's number appended): more[0] is cluster 2. Their rpc_timeout is
  // unused: timeout_ms is every cluster's.
  std::vector<client::ClusterConfig> more;
};

// Reads a config file into name -> value pairs (strict: unknown names,
// lines without '=' and duplicates are errors, with the line number).
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path);

// Applies name -> value pairs (from the file or from flags) to cfg.
absl::Status ApplySettings(const std::map<std::string, std::string>& settings,
                           Config* cfg);

// Checks that the cluster part of cfg is complete.
absl::Status CheckClusterConfig(const Config& cfg);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_CONFIG_H_
