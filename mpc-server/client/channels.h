// mTLS channels to the three MPC servers, as every client of the cluster
// makes them (kmpc-admin, kmpc-mpc-client, the KDC module): the client's
// PEM files, and one channel per party pinned to that party's certificate.
//
// Party pinning: the server at position i of the list must present party
// i's certificate, the only one with SAN DNS:kmpc-party-<i>
// (deploy/gen-certs.sh). Each channel's TLS target name is that name, and
// the channels' certificate check (after gRPC verified the chain to the
// cluster's CA) demands it as a DNS SAN, so the TLS handshake refuses any
// other certificate of the cluster's CA before a request (a PutKey: a
// share) is sent. The shared SANs (127.0.0.1, localhost) are on all three
// certificates and would let any party stand in for another.
//
// A wrong server is a typed cause (RpcFailure::kWrongParty), never read
// from gRPC's wording: the check keeps a record of its own refusals, and a
// failed call is the wrong party only if its failure is one of them
// (PartyCheck, channels.cc).
#ifndef KMPC_CLIENT_CHANNELS_H_
#define KMPC_CLIENT_CHANNELS_H_

#include <array>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cluster_config.h"  // ClusterConfig
#include "client/reveal.h"  // kParties

namespace kmpc::client {

// The TLS name only party i's certificate carries: "kmpc-party-<i>".
std::string PartyTlsName(int party);

// Reads the PEM file `path`; `what` names it in errors ("CA certificate",
// "client private key"). Fails (kFailedPrecondition) on a file that cannot
// be read, is empty or holds no PEM block; the message names the file and
// never quotes its contents.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view what);

// The certificate check of a cluster's channels, and its record of the
// servers it refused as another party's (channels.cc).
class PartyCheck;

// gRPC client credentials from cfg's PEM files (read once), for the three
// channels of a cluster, party 0, 1, 2: each with a certificate provider
// of its own (channels.cc says why), all with one certificate check,
// `check`, which names the party from the channel's TLS target name
// (PartyTlsName). Checks what gRPC would only find in the first handshake:
// the CA file and the certificate parse as X.509 certificates, the key as
// an unencrypted private key, and the key belongs to the certificate. Each
// error names the file. The private key's PEM text is wiped once gRPC
// holds it.
absl::StatusOr<std::array<std::shared_ptr<grpc::ChannelCredentials>, kParties>>
ClientCredentials(const ClusterConfig& cfg, std::shared_ptr<PartyCheck> check);

// What a failed call to one party's server met: the one reading of a
// grpc::Status on the client side, which each client maps to its own
// statuses (ClusterChannels::RpcError; the KDC module's transport).
enum class RpcFailure {
  kNone,               // the call succeeded
  kWrongParty,         // the certificate check refused the server's
                       // certificate as another party's: nothing was sent
  kTlsHandshake,       // another failed TLS handshake (a CA mismatch)
  kClosedInHandshake,  // the server closed the connection in the handshake
                       // (it does not trust our certificate)
  kUnreachable,        // no connection
  kDeadlineExceeded,
  kCancelled,
  kPermissionDenied,   // the server refused our certificate for the service
  kUnauthenticated,    // the server did not accept our client certificate
  kServerError,        // the server's own error (any other code)
};

// The arguments every cluster channel starts from: messages up to 256 MiB
// both ways (the largest batch), and a subchannel pool of the channel's
// own, so the three connections are never shared with another channel of
// the process (one built with another certificate or target name).
grpc::ChannelArguments DefaultChannelArguments();

struct ChannelOptions {
  // The caller's arguments (usually DefaultChannelArguments() plus its
  // own: reconnect backoff, keepalive). The library adds each party's TLS
  // target name; `args` must not set one.
  grpc::ChannelArguments args = DefaultChannelArguments();
  // > 0: start the three connections at once and wait up to this long for
  // them before Open returns (never an error: a party that is down or
  // refuses us fails the first call). gRPC retries a connection attempt
  // that fails transiently only while the channel is used; a first call
  // made right away can fail on such a failure instead. (gRPC 1.51 can
  // report a connect() in progress as failed with a stale errno: Open
  // removes the one source of it seen in a VM, see channels.cc, but a
  // packaged kmpc-admin in a chroot still met one, reported as "No such
  // file or directory": the wait is what retries it.)
  // 0: channels connect on their first call (the KDC module: see
  // kdc-plugin/src/grpc_transport.cc).
  absl::Duration connect_wait = absl::ZeroDuration();
};

// The three pinned channels and what names their failures.
class ClusterChannels {
 public:
  // Reads the PEM files and creates the channels (no connection is made
  // unless opts.connect_wait > 0).
  static absl::StatusOr<ClusterChannels> Open(const ClusterConfig& cfg,
                                              const ChannelOptions& opts = {});

  const std::shared_ptr<grpc::Channel>& channel(int party) const {
    return channels_[party];
  }
  const std::string& server(int party) const { return cfg_.servers[party]; }
  const ClusterConfig& config() const { return cfg_; }

  // "server 1 (127.0.0.1:7001)"
  std::string Describe(int party) const;

  // ctx's deadline: now + cfg.rpc_timeout.
  void SetDeadline(grpc::ClientContext* ctx) const;

  // What the call to `party` that ended with `st` met. kWrongParty only
  // for a failure the certificate check itself refused on that party's
  // channel (a later failure of another kind, a server down or a
  // certificate that is not our CA's, is read as what it is).
  RpcFailure Classify(int party, const grpc::Status& st) const;

  // How many servers the certificate check refused on `party`'s channel
  // as another party's.
  int WrongPartyRefusals(int party) const;

  // kPermissionDenied: the server at position `party` is not party
  // `party` (kWrongParty); `st`'s message, without the check's mark, is
  // appended.
  absl::Status WrongPartyError(int party, const grpc::Status& st) const;

  // A failed call `method` ("PutKey") of `service` ("Admin") to `party`
  // as a status naming the server and the kind of failure (Classify):
  //   kPermissionDenied  the server is not party `party` (its certificate
  //                      is another party's; nothing was sent to it), or
  //                      it refused our certificate for the service (then
  //                      `refused_hint`, if any, is appended);
  //   kUnauthenticated   the TLS handshake failed (CA mismatch either way),
  //                      or the server did not accept our certificate;
  //   kUnavailable       unreachable;
  //   kDeadlineExceeded  no answer within rpc_timeout;
  //   otherwise          the server's own error, with its code.
  // The server's message is kept (it never carries key material).
  absl::Status RpcError(int party, absl::string_view service,
                        absl::string_view method, const grpc::Status& st,
                        absl::string_view refused_hint = {}) const;

 private:
  ClusterConfig cfg_;
  std::array<std::shared_ptr<grpc::Channel>, kParties> channels_;
  std::shared_ptr<PartyCheck> check_;  // shared with the credentials
};

}  // namespace kmpc::client

#endif  // KMPC_CLIENT_CHANNELS_H_
