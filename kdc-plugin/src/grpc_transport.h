// Transport over gRPC with mTLS (the KDC client certificate), the
// completion-queue API with one thread of its own: the three calls of a
// step run in parallel without a thread per call, and an answer reaches its
// callback on the thread that read it (gRPC 1.51's callback API polls from
// two "nexting" threads of its own, which hand each completion between them
// before the callback runs: several wake-ups per answer).
//
// A party's connection is made by the first call to it. Calls fail fast
// (kUnavailable) when their party cannot be reached, except before the
// party was ever connected: a call whose fail-fast attempt failed less than
// kFirstConnectGrace after that party's first failure then waits for the
// connection (gRPC reconnects 100 ms after a failure, backing off up to
// 250 ms) until its own deadline. So one transient failure of the first
// connection does not fail a batch; a party that is down from the start
// fails calls at their deadline during that grace and at once after it,
// and a party that goes down later fails them at once. A server that is
// not the party of its position (kPermissionDenied) is never waited for.
#ifndef KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_
#define KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "kmpc.grpc.pb.h"
#include "transport.h"

namespace grpc {
class Channel;
class ClientContext;
class CompletionQueue;
class Status;
}  // namespace grpc

namespace kmpc::client {
class ClusterChannels;
}  // namespace kmpc::client

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
  void Sign(int party, const kmpc::v1::SignRequest& req,
            kmpc::v1::SignResponse* resp, absl::Time deadline,
            Done done) override;
  std::string PartyName(int party) const override;
  // kUnavailable while a party that was connected once has its channel in
  // TRANSIENT_FAILURE (gRPC's reconnect backoff runs meanwhile; a channel
  // gone IDLE is asked to reconnect).
  absl::Status Reachable(int party) override;

  // How long after the first failed connection to a party (before it was
  // ever connected) failed calls still wait for the connection.
  static constexpr absl::Duration kFirstConnectGrace = absl::Seconds(2);

  // Cancels calls in flight and waits until every callback has returned
  // and released its call; later calls fail at once with kCancelled.
  void Shutdown();

 private:
  GrpcTransport() = default;
  // A call's context, counted until it is destroyed (Shutdown waits).
  std::shared_ptr<grpc::ClientContext> NewContext();
  // Registers a call; false once shutting down.
  bool Begin(const std::shared_ptr<grpc::ClientContext>& ctx);
  void End(const std::shared_ptr<grpc::ClientContext>& ctx);

  // Starts the unary call on ctx, with a completion callback (run on the
  // completion-queue thread).
  using Issue = std::function<void(grpc::ClientContext*,
                                   std::function<void(grpc::Status)>)>;
  // A KeyOps stub's PrepareAsync<Method>.
  template <class Req, class Resp>
  using Prepare = std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> (
      kmpc::v1::KeyOps::Stub::*)(grpc::ClientContext*, const Req&,
                                 grpc::CompletionQueue*);
  // Run, Finalize and Sign: one unary call to party through prepare.
  template <class Req, class Resp>
  void Call(int party, const Req& req, Resp* resp, absl::Time deadline,
            Done done, Prepare<Req, Resp> prepare);
  // The completion-queue thread: runs each finished call's callback.
  void Poll();
  // One attempt of a call: fail fast (first_failure OK), or, after that
  // failed while the party had never been connected, waiting for the
  // connection (wait_for_ready) until the deadline.
  void Attempt(int party, absl::Time deadline,
               std::shared_ptr<const Issue> issue, Done done,
               absl::Status first_failure);
  // Whether a failed fail-fast attempt is made again, waiting: the party
  // was never connected and its first failure is less than
  // kFirstConnectGrace old.
  bool RetryFirstConnect(int party, const absl::Status& s);
  void NoteConnected(int party, const absl::Status& s);

  std::unique_ptr<grpc::CompletionQueue> cq_;
  std::thread cq_thread_;

  std::array<std::string, 3> servers_;
  // The pinned channels, and what reads a failed call (Classify).
  std::unique_ptr<kmpc::client::ClusterChannels> cluster_;
  std::array<std::shared_ptr<grpc::Channel>, 3> channels_;
  std::array<std::unique_ptr<kmpc::v1::KeyOps::Stub>, 3> stubs_;
  // Party i's channel has been READY once: from then on calls fail fast.
  std::array<std::atomic<bool>, 3> connected_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;
  std::set<std::shared_ptr<grpc::ClientContext>> calls_;
  int contexts_ = 0;  // NewContext's not yet destroyed
  // First failed attempt to a party never connected (InfinitePast: none).
  std::array<absl::Time, 3> first_failure_{absl::InfinitePast(),
                                           absl::InfinitePast(),
                                           absl::InfinitePast()};
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_GRPC_TRANSPORT_H_
