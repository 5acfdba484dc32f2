// Transport over gRPC with mTLS (the KDC client certificate), callback API:
// the three calls of a step run in parallel without a thread per call.
#ifndef KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_
#define KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_

#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "kmpc.grpc.pb.h"
#include "transport.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace kmpc::kdc {

class GrpcTransport : public Transport {
 public:
  // Reads the PEM files; never logs or keeps the private key beyond the
  // channel credentials.
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Create(
      const std::array<std::string, 3>& servers, const std::string& ca,
      const std::string& cert, const std::string& key);
  ~GrpcTransport() override;  // Shutdown()

  void Run(int party, const kmpc::v1::RunRequest& req,
           kmpc::v1::RunResponse* resp, absl::Time deadline,
           Done done) override;
  void Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                kmpc::v1::FinalizeResponse* resp, absl::Time deadline,
                Done done) override;
  std::string PartyName(int party) const override;

  // Cancels calls in flight and waits until every callback has returned;
  // later calls fail at once with kCancelled.
  void Shutdown();

 private:
  GrpcTransport() = default;
  // Registers a call; false once shutting down.
  bool Begin(const std::shared_ptr<grpc::ClientContext>& ctx);
  void End(const std::shared_ptr<grpc::ClientContext>& ctx);

  std::array<std::string, 3> servers_;
  std::array<std::shared_ptr<grpc::Channel>, 3> channels_;
  std::array<std::unique_ptr<kmpc::v1::KeyOps::Stub>, 3> stubs_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;
  std::set<std::shared_ptr<grpc::ClientContext>> calls_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_
