#include "grpc_transport.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kmpc::kdc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.empty())
    return absl::FailedPreconditionError(absl::StrCat(path, " is empty"));
  return s;
}

// The TLS name the certificate of party i carries (and only it): SAN
// DNS:kmpc-party-<i>, deploy/gen-certs.sh.
std::string PartyTlsName(int i) { return absl::StrCat("kmpc-party-", i); }

absl::Status FromGrpc(int party, const std::string& server,
                      const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const std::string& msg = s.error_message();
  // The TLS handshake found a certificate of our CA, but not party
  // <party>'s: the servers are listed out of order, or another party sits
  // at this address. The request was not sent.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
      msg.find("Peer name") != std::string::npos)
    return absl::PermissionDeniedError(absl::StrCat(
        "the server at position ", party, " (", server, ") is not party ",
        party, ": its certificate is not ", PartyTlsName(party),
        "'s (list the servers in party order 0, 1, 2): ", msg));
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), msg);
}

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

// A gRPC thread must never see an exception (it would end the KDC); a job
// whose completion was lost that way fails at the batch deadline instead.
void Invoke(const Transport::Done& done, absl::Status s) {
  try {
    done(std::move(s));
  } catch (...) {
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    const std::array<std::string, 3>& servers, const std::string& ca,
    const std::string& cert, const std::string& key) {
  grpc::SslCredentialsOptions o;
  auto ca_pem = ReadPem(ca);
  if (!ca_pem.ok()) return ca_pem.status();
  auto cert_pem = ReadPem(cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem(key);
  if (!key_pem.ok()) return key_pem.status();
  o.pem_root_certs = std::move(*ca_pem);
  o.pem_cert_chain = std::move(*cert_pem);
  o.pem_private_key.swap(*key_pem);
  auto creds = grpc::SslCredentials(o);
  OPENSSL_cleanse(o.pem_private_key.data(), o.pem_private_key.size());
  if (creds == nullptr)
    return absl::FailedPreconditionError("cannot build TLS credentials");

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // A restarted server must be usable again within a second or so, not
  // after gRPC's default exponential backoff (up to two minutes). The
  // "min reconnect backoff" is also the timeout of one connection attempt
  // (TCP + TLS handshake), so it stays generous for a loaded machine.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Detect a dead peer on an idle connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // One connection per server and channel: the three channels must not be
  // merged with another channel of this process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);

  std::unique_ptr<GrpcTransport> t(new GrpcTransport());
  for (int i = 0; i < 3; ++i) {
    t->servers_[i] = servers[i];
    // Party identity: the server at position i must present party i's
    // certificate (SAN DNS:kmpc-party-<i>), checked in the TLS handshake
    // before any request is sent; the shared SANs (127.0.0.1, localhost)
    // are on all three certificates and would let any party stand in for
    // another (and collect the other parties' messages).
    grpc::ChannelArguments a = args;
    a.SetSslTargetNameOverride(PartyTlsName(i));
    t->channels_[i] = grpc::CreateCustomChannel(servers[i], creds, a);
    t->stubs_[i] = kmpc::v1::KeyOps::NewStub(t->channels_[i]);
    // Start connecting now, so the first login does not pay for it.
    t->channels_[i]->GetState(/*try_to_connect=*/true);
  }
  return t;
}

GrpcTransport::~GrpcTransport() { Shutdown(); }

std::string GrpcTransport::PartyName(int party) const {
  if (party < 0 || party > 2) return absl::StrCat("party ", party);
  return absl::StrCat("party ", party, " (", servers_[party], ")");
}

bool GrpcTransport::Begin(const std::shared_ptr<grpc::ClientContext>& ctx) {
  std::lock_guard<std::mutex> l(mu_);
  if (shutdown_) return false;
  calls_.insert(ctx);
  return true;
}

void GrpcTransport::End(const std::shared_ptr<grpc::ClientContext>& ctx) {
  {
    std::lock_guard<std::mutex> l(mu_);
    calls_.erase(ctx);
  }
  cv_.notify_all();
}

void GrpcTransport::Run(int party, const kmpc::v1::RunRequest& req,
                        kmpc::v1::RunResponse* resp, absl::Time deadline,
                        Done done) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(ToChrono(deadline));
  if (!Begin(ctx)) {
    done(absl::CancelledError("the kdcmpc module is shutting down"));
    return;
  }
  stubs_[party]->async()->Run(
      ctx.get(), &req, resp,
      [this, party, ctx, done = std::move(done)](grpc::Status s) {
        Invoke(done, FromGrpc(party, servers_[party], s));
        End(ctx);
      });
}

void GrpcTransport::Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                             kmpc::v1::FinalizeResponse* resp,
                             absl::Time deadline, Done done) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(ToChrono(deadline));
  if (!Begin(ctx)) {
    done(absl::CancelledError("the kdcmpc module is shutting down"));
    return;
  }
  stubs_[party]->async()->Finalize(
      ctx.get(), &req, resp,
      [this, party, ctx, done = std::move(done)](grpc::Status s) {
        Invoke(done, FromGrpc(party, servers_[party], s));
        End(ctx);
      });
}

void GrpcTransport::Shutdown() {
  std::set<std::shared_ptr<grpc::ClientContext>> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    shutdown_ = true;
    calls = calls_;
  }
  // Outside the lock: a cancelled call's callback may run at once.
  for (const auto& c : calls) c->TryCancel();
  calls.clear();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return calls_.empty(); });
}

}  // namespace kmpc::kdc
