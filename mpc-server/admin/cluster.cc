#include "admin/cluster.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "admin/kdb.h"

namespace kmpc::admin {

bool LocalTicketGranting(const std::string& canon) {
  if (!TicketGranting(canon)) return false;
  const size_t at = canon.find('@', 7);
  return at != std::string::npos && canon.compare(7, at - 7, canon, at + 1) == 0;
}

bool TicketGranting(const std::string& canon) {
  if (canon.rfind("krbtgt/", 0) != 0) return false;
  // Exactly two components (libkdb5's tgs_principal): no unescaped '/'
  // between "krbtgt/" and the realm's unescaped '@'.
  for (size_t i = 7; i < canon.size(); ++i) {
    if (canon[i] == '\\') ++i;
    else if (canon[i] == '@') return true;
    else if (canon[i] == '/') return false;
  }
  return true;
}

std::optional<engine::Cipher> CipherOfEnctype(int32_t enctype) {
  switch (enctype) {
    case kEnctypeAes128Mpc: return engine::Cipher::kAes128;
    case kEnctypeAes256Mpc: return engine::Cipher::kAes256;
    case kEnctypeAes128Cts: return engine::Cipher::kAes128Cts;
    case kEnctypeAes256Cts: return engine::Cipher::kAes256Cts;
    default: return std::nullopt;
  }
}
namespace {

absl::StatusOr<std::unique_ptr<client::AdminClient>> Connect(
    const std::array<std::string, 3>& servers, const std::string& ca,
    const std::string& cert, const std::string& key, int timeout_ms) {
  client::ClusterConfig c;
  c.servers = servers;
  c.ca = ca;
  c.cert = cert;
  c.key = key;
  c.rpc_timeout = absl::Milliseconds(timeout_ms);
  // Up to 3 s for the three connections before the first call, as
  // kmpc-mpc-client (client/channels.h ChannelOptions::connect_wait): a
  // connection whose first attempt fails transiently (a server just
  // started, a loaded host) is retried instead of failing the command as
  // "unreachable"; a server that is down still fails the first call.
  client::ChannelOptions o;
  o.connect_wait = absl::Milliseconds(std::min(3000, timeout_ms));
  return client::AdminClient::Connect(c, o);
}

absl::Status Prefixed(const std::string& prefix, const absl::Status& st) {
  if (st.ok() || prefix.empty()) return st;
  return absl::Status(st.code(), absl::StrCat(prefix, st.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<client::AdminClient>> ConnectCluster(
    const Config& cfg) {
  if (absl::Status st = CheckClusterConfig(cfg); !st.ok()) return st;
  return Connect(cfg.servers, cfg.ca, cfg.cert, cfg.key, cfg.timeout_ms);
}

absl::StatusOr<std::unique_ptr<Clusters>> Clusters::Connect(const Config& cfg) {
  std::vector<std::unique_ptr<client::AdminClient>> all;
  auto first = ConnectCluster(cfg);
  if (!first.ok()) return first.status();
  all.push_back(std::move(*first));
  for (size_t c = 0; c < cfg.more.size(); ++c) {
    const client::ClusterConfig& m = cfg.more[c];
    // A cluster without mTLS files of its own uses cluster 1's (config.h).
    const bool own = !m.ca.empty() || !m.cert.empty() || !m.key.empty();
    auto cl = admin::Connect(m.servers, own ? m.ca : cfg.ca,
                             own ? m.cert : cfg.cert, own ? m.key : cfg.key,
                             cfg.timeout_ms);
    if (!cl.ok())
      return Prefixed(absl::StrCat("cluster ", c + 2, ": "), cl.status());
    all.push_back(std::move(*cl));
  }
  return std::unique_ptr<Clusters>(new Clusters(std::move(all)));
}

std::string Clusters::Prefix(size_t c) const {
  return clusters_.size() > 1 ? absl::StrCat("cluster ", c + 1, ": ") : "";
}

absl::Status Clusters::CheckReachable() {
  for (size_t c = 0; c < clusters_.size(); ++c)
    if (absl::Status st = clusters_[c]->CheckReachable(); !st.ok())
      return Prefixed(Prefix(c), st);
  return absl::OkStatus();
}

absl::Status Clusters::PutKey(engine::Cipher cipher,
                              absl::Span<const uint8_t> key,
                              const client::KeyMeta& meta) {
  for (size_t c = 0; c < clusters_.size(); ++c) {
    absl::Status st = clusters_[c]->PutKey(cipher, key, meta);
    if (st.ok()) continue;
    // Undo the clusters that hold it: no key is left in one cluster only.
    std::string undo;
    for (size_t d = 0; d < c; ++d) {
      absl::Status del = clusters_[d]->DeleteKey(meta.key_id);
      absl::StrAppend(&undo, "; ",
                      del.ok() ? absl::StrCat("removed again from cluster ", d + 1)
                               : absl::StrCat("NOT removed from cluster ", d + 1,
                                              ": ", del.message()));
    }
    return absl::Status(st.code(),
                        absl::StrCat(Prefix(c), st.message(), undo));
  }
  return absl::OkStatus();
}

absl::Status Clusters::DeleteKey(const std::string& key_id) {
  absl::Status first;
  for (size_t c = 0; c < clusters_.size(); ++c) {
    absl::Status st = clusters_[c]->DeleteKey(key_id);
    if (!st.ok() && first.ok()) first = Prefixed(Prefix(c), st);
  }
  return first;
}

}  // namespace kmpc::admin
