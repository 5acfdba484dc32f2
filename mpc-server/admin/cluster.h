// The cluster(s) as kmpc-admin's configuration (config.h) names them: the
// Admin side of the three servers of each, for kmpc-admin and the key
// dealer module.
//
// With more than one cluster (servers2 = ..., "simply using two clusters",
// Araki et al., CCS 2016, section 5.3) every key is dealt to every cluster
// under the same key id, with an independent sharing per cluster, so the
// KDB's one handle names the key in each and the KDC module can send any
// job to any cluster (kdc-plugin/src/router.h). Dealing is all-or-nothing
// across the clusters as it is across the three servers of one.
#ifndef KMPC_ADMIN_CLUSTER_H_
#define KMPC_ADMIN_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "admin/config.h"
#include "client/admin_client.h"
#include "status_class.h"

namespace kmpc::admin {

// The servers' Cipher of a krb5 enctype number whose keys the cluster holds:
// aes*-ctr-mpc (kdb.h's kEnctypeAes128Mpc / kEnctypeAes256Mpc, which kdb.cc
// ties to krb5's ENCTYPE_AES*_CTR_MPC and KRB5_KDCMPC_ENCTYPE_*) and
// aes128/aes256-cts-hmac-sha1-96 (kEnctypeAes*Cts: PutKey deals their usage
// material, engine::DealKey). The admin tools' one conversion from krb5
// enctypes; nullopt for every other enctype (RC4, DES, ...).
std::optional<engine::Cipher> CipherOfEnctype(int32_t enctype);

// Whether `canon` (a principal name, with or without its realm) is a
// ticket-granting principal (krbtgt/REALM, two components, as libkdb5's
// tgs_principal tells it): its key is random and decrypts
// tickets, so kmpc-admin share and the key dealer always deal it as a
// service's (the servers run only an AS exchange under a user's key:
// mpc-server engine/user_key_rule.h).
bool TicketGranting(const std::string& canon);
// krbtgt/REALM@REALM: the realm's own ticket-granting principal, whose key
// is random (a cross-realm one, krbtgt/OTHER@REALM or krbtgt/REALM@OTHER,
// is often set from a password both realms share).
bool LocalTicketGranting(const std::string& canon);

// Cluster 1 only (kmpc-admin status --kdb and refresh take the others from
// Clusters).
absl::StatusOr<std::unique_ptr<client::AdminClient>> ConnectCluster(
    const Config& cfg);

// A failure of the whole cluster (a server down, our certificate refused):
// the next principal or batch would fail the same way, so a run stops.
inline bool IsClusterError(const absl::Status& st) {
  return contract::ClassOf(st.code()).admin_cluster_error;
}

// Every configured cluster, in order (cluster 1 first).
class Clusters {
 public:
  static absl::StatusOr<std::unique_ptr<Clusters>> Connect(const Config& cfg);

  size_t size() const { return clusters_.size(); }
  client::AdminClient& at(size_t c) { return *clusters_[c]; }
  // "cluster 2: " with several clusters, "" with one: a prefix for
  // messages, so that a one-cluster realm reads as before.
  std::string Prefix(size_t c) const;

  // Every server of every cluster answers (AdminClient::CheckReachable);
  // the first failure, naming its cluster.
  absl::Status CheckReachable();

  // Deals `key` to every cluster in order under meta.key_id (a fresh
  // sharing each: AdminClient::PutKey, all-or-nothing on the three
  // servers). If a cluster fails, the id is deleted again from the
  // clusters that stored it; the status is that cluster's failure, its
  // message says what the clean-up removed or could not remove. The
  // caller wipes `key`.
  absl::Status PutKey(engine::Cipher cipher, absl::Span<const uint8_t> key,
                      const client::KeyMeta& meta);

  // Deletes key_id from every cluster (kNotFound counts as done); the
  // first failure, naming its cluster, after trying all.
  absl::Status DeleteKey(const std::string& key_id);

 private:
  explicit Clusters(std::vector<std::unique_ptr<client::AdminClient>> c)
      : clusters_(std::move(c)) {}
  std::vector<std::unique_ptr<client::AdminClient>> clusters_;
};

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_CLUSTER_H_
