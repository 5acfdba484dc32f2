// The Admin service of the three MPC servers (proto/kmpc.proto, service
// Admin) over the pinned channels of channels.h, with the admin client
// certificate. Every failure names the server (party and address) and
// says what kind of failure it is (ClusterChannels::RpcError). Errors
// never carry key material.
#ifndef KMPC_CLIENT_ADMIN_CLIENT_H_
#define KMPC_CLIENT_ADMIN_CLIENT_H_

#include <array>
#include <optional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/channels.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"

namespace kmpc::client {

// What a PutKey stores besides the shares.
struct KeyMeta {
  std::string key_id;  // contract::kKeyIdSize bytes
  uint32_t kvno = 0;
  std::string label;
  // Overwrite an id the server holds (servers refuse it unless they allow
  // key replacement).
  bool replace = false;
  // kmpc.proto KeyKind: a password-derived user's key by default (its AS
  // reply gated, no ticket or PAC material: engine.h kCtsServiceUsages).
  KeyKind kind = KeyKind::kUser;
  // The deal the key's per-key bounds are counted under (engine.h
  // KeyShares::origin_deal_id: the gate's failure budget, the release
  // limiter); unset: its own deal. The keys of one password under several
  // enctypes (aes256 and aes128) are one door and share one budget.
  std::optional<std::array<uint8_t, 16>> origin = std::nullopt;
};

class AdminClient {
 public:
  static absl::StatusOr<std::unique_ptr<AdminClient>> Connect(
      const ClusterConfig& cfg, const ChannelOptions& opts = {});
  explicit AdminClient(ClusterChannels channels);

  const ClusterChannels& channels() const { return channels_; }
  // "server 1 (127.0.0.1:7001)"
  std::string Describe(int party) const { return channels_.Describe(party); }

  // One answer per server, in parallel; an error names the server.
  std::array<absl::StatusOr<kmpc::v1::HealthResponse>, kParties> Health();
  std::array<absl::StatusOr<std::vector<kmpc::v1::KeyInfo>>, kParties> ListKeys();
  std::array<absl::StatusOr<std::string>, kParties> Metrics();
  // Admin.ResetBreaker on each server (service/breaker.h): closes its
  // deviation breaker. Per server: what it cleared, or the error.
  std::array<absl::StatusOr<kmpc::v1::ResetBreakerResponse>, kParties> ResetBreaker();

  // Admin.SetKeyKind on each server (kmpc.proto SetKeyKindRequest), in
  // parallel. Per server: what it did, or the error naming the server.
  std::array<absl::StatusOr<kmpc::v1::SetKeyKindResponse>, kParties> SetKeyKind(
      const std::string& key_id, KeyKind kind, bool allow_ungate);
  // On one server only (tests: a cluster re-marked part of the way).
  absl::StatusOr<kmpc::v1::SetKeyKindResponse> SetKeyKindOn(int party,
                                                            const std::string& key_id,
                                                            KeyKind kind, bool allow_ungate);

  // Fails (naming the first unreachable or refusing server) unless all
  // three answer Health, each as the party of its position.
  absl::Status CheckReachable();

  // Deals `key` (engine::DealKey: expanded round keys, H and its powers,
  // replicated 2-of-3 XOR shares) and stores party i's view on server i,
  // all-or-nothing: if any server fails, the key id is deleted again from
  // every server that stored it or may have (a PutKey that timed out or
  // lost its connection may have been stored all the same), i.e. from all
  // three except a server that answered that the id was already taken
  // there (kAlreadyExists, kFailedPrecondition: its store is unchanged and
  // holds an earlier key under that id, which stays). The status is the
  // first failed server's kind of failure; its message lists every
  // server's failure and what the clean-up removed or could not remove.
  // `each` (optional) gets every server's PutKey status (OK where stored).
  // Every copy of the shares is wiped; the caller wipes `key`.
  absl::Status PutKey(engine::Cipher cipher, absl::Span<const uint8_t> key,
                      const KeyMeta& meta,
                      std::array<absl::Status, kParties>* each = nullptr);

  // Deletes key_id from all three servers (kNotFound counts as done).
  absl::Status DeleteKey(const std::string& key_id);
  // The same, one status per server (kNotFound, naming the server, where
  // it was not there).
  std::array<absl::Status, kParties> DeleteKeyEach(const std::string& key_id);
  // From one server only (tests: a key store out of step).
  absl::Status DeleteKeyOn(int party, const std::string& key_id);

  // Many ids from every server, one DeleteKeys call (one store scrub) per
  // server; ids a server did not hold count as deleted there.
  std::array<absl::Status, kParties> DeleteKeysEach(
      const std::vector<std::string>& key_ids);

  // One RefreshKeys request (a fresh batch id, the same pairs in the same
  // order) to the three servers in parallel (kmpc.proto: they re-randomise
  // the shares of each old id and store them under its new id). Per
  // server: its per-pair results, or the call's error naming the server.
  // A pair is refreshed only where all three answered JOB_OK for it.
  // rebuild_party >= 0: the request rebuilds that (replaced, empty) server
  // from the two others (kmpc.proto RefreshKeysRequest.rebuild_party).
  struct RefreshPair {
    std::string old_key_id, new_key_id;
  };
  std::array<absl::StatusOr<std::vector<kmpc::v1::RefreshResult>>, kParties>
  RefreshKeys(const std::vector<RefreshPair>& pairs, absl::Duration timeout,
              int rebuild_party = -1);

 private:
  absl::Status Error(int party, const char* method, const grpc::Status& st) const;

  ClusterChannels channels_;
  std::array<std::unique_ptr<kmpc::v1::Admin::Stub>, kParties> stubs_;
};

}  // namespace kmpc::client

#endif  // KMPC_CLIENT_ADMIN_CLIENT_H_
