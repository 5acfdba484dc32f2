// The Admin side of the three MPC servers (proto/kmpc.proto, service Admin),
// over mTLS with the admin client certificate. Every failure names the
// server (party index and address) and says what kind of failure it is:
// unreachable, TLS refused, certificate not authorized, or the server's own
// error. Errors never carry key material.
#ifndef KMPC_ADMIN_CLUSTER_H_
#define KMPC_ADMIN_CLUSTER_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "admin/config.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"

namespace kmpc::admin {

inline constexpr size_t kKeyIdLen = 32;

class AdminCluster {
 public:
  static absl::StatusOr<std::unique_ptr<AdminCluster>> Connect(const Config& cfg);

  // "server 1 (127.0.0.1:7001)"
  std::string Describe(int party) const;

  // Health of each server; an error names the server.
  std::array<absl::StatusOr<kmpc::v1::HealthResponse>, 3> Health();
  std::array<absl::StatusOr<std::vector<kmpc::v1::KeyInfo>>, 3> ListKeys();

  // Fails (naming the first unreachable or refusing server) unless all
  // three answer Health.
  absl::Status CheckReachable();

  // Deals `key` (engine::DealKey: expanded round keys, H and its powers,
  // replicated 2-of-3 XOR shares) and stores party i's view on server i
  // under key_id. All-or-nothing: if any server fails, the key id is
  // deleted again from every server and the first error is returned.
  // Wipes every copy of the key and the shares it made; the caller wipes
  // `key`.
  absl::Status PutKey(engine::Cipher cipher, absl::Span<const uint8_t> key,
                      const std::string& key_id, uint32_t kvno,
                      const std::string& label);

  // Deletes key_id from all three servers (NOT_FOUND counts as done).
  absl::Status DeleteKey(const std::string& key_id);
  // The same, one status per server (NOT_FOUND where it was not there).
  std::array<absl::Status, 3> DeleteKeyEach(const std::string& key_id);

 private:
  AdminCluster() = default;
  absl::Status RpcError(int party, const char* what, const grpc::Status& st) const;
  void SetDeadline(grpc::ClientContext* ctx) const;

  Config cfg_;
  std::array<std::shared_ptr<grpc::Channel>, 3> channels_;
  std::array<std::unique_ptr<kmpc::v1::Admin::Stub>, 3> stubs_;
};

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_CLUSTER_H_
