#include "admin/cluster.h"

#include <openssl/crypto.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"

namespace kmpc::admin {
namespace pb = kmpc::v1;
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f)
    return absl::NotFoundError(absl::StrCat("cannot read the ", what, " ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs f(i) for the three servers in parallel.
template <typename F>
auto OnAll(F f) -> std::array<decltype(f(0)), 3> {
  std::array<std::future<decltype(f(0))>, 3> fs;
  for (int i = 0; i < 3; ++i) fs[i] = std::async(std::launch::async, f, i);
  return {fs[0].get(), fs[1].get(), fs[2].get()};
}

void Wipe(std::string* s) { OPENSSL_cleanse(s->data(), s->size()); }

// The TLS name the certificate of party i carries (and only it).
std::string PartyTlsName(int i) { return absl::StrCat("kmpc-party-", i); }

}  // namespace

absl::StatusOr<std::unique_ptr<AdminCluster>> AdminCluster::Connect(const Config& cfg) {
  if (absl::Status st = CheckClusterConfig(cfg); !st.ok()) return st;
  auto ca = ReadPem(cfg.ca, "CA certificate");
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem(cfg.cert, "client certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(cfg.key, "client private key");
  if (!key.ok()) return key.status();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = *ca;
  o.pem_cert_chain = *cert;
  o.pem_private_key = *key;
  Wipe(&*key);
  auto creds = grpc::SslCredentials(o);
  Wipe(&o.pem_private_key);
  std::unique_ptr<AdminCluster> c(new AdminCluster());
  c->cfg_ = cfg;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  for (int i = 0; i < 3; ++i) {
    // Party identity: the server at position i must present party i's
    // certificate (SAN DNS:kmpc-party-<i>, deploy/gen-certs.sh), checked in
    // the TLS handshake, before any request (PutKey: a share) is sent. The
    // shared SANs (127.0.0.1, localhost) are on all three certificates and
    // would let any party stand in for another.
    grpc::ChannelArguments a = args;
    a.SetSslTargetNameOverride(PartyTlsName(i));
    c->channels_[i] = grpc::CreateCustomChannel(cfg.servers[i], creds, a);
    c->stubs_[i] = pb::Admin::NewStub(c->channels_[i]);
  }
  return c;
}

std::string AdminCluster::Describe(int party) const {
  return absl::StrCat("server ", party, " (", cfg_.servers[party], ")");
}

void AdminCluster::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(cfg_.timeout_ms));
}

absl::Status AdminCluster::RpcError(int party, const char* what,
                                    const grpc::Status& st) const {
  const std::string who = Describe(party);
  const std::string& msg = st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // The server's certificate is valid (our CA) but not party <party>'s:
      // a wrong server order, or another party at this address. Nothing
      // was sent to it.
      if (absl::StrContains(msg, "Peer name"))
        return absl::PermissionDeniedError(absl::StrCat(
            "the server at position ", party, " (", cfg_.servers[party],
            ") is not party ", party, ": its certificate is not ",
            PartyTlsName(party), "'s (list the servers in party order 0, 1, "
            "2; nothing was sent to it): ", msg));
      // gRPC reports a failed TLS handshake as UNAVAILABLE too; the usual
      // cause is a client certificate not issued by the cluster's CA (or a
      // server certificate not issued by ours).
      if (absl::StrContains(msg, "andshake") || absl::StrContains(msg, "SSL") ||
          absl::StrContains(msg, "ertificate") || absl::StrContains(msg, "TLS"))
        return absl::UnauthenticatedError(absl::StrCat(
            who, ": TLS handshake failed (is --ca the cluster's CA, and our "
                 "client certificate issued by it?): ", msg));
      // A server that does not trust our client certificate aborts the
      // handshake, which the client sees as a closed socket.
      if (absl::StrContains(msg, "Socket closed") ||
          absl::StrContains(msg, "Connection reset"))
        return absl::UnauthenticatedError(absl::StrCat(
            who, " closed the connection during the TLS handshake (does it "
                 "trust our client certificate? it must be issued by the "
                 "cluster's CA): ", msg));
      return absl::UnavailableError(
          absl::StrCat(who, " is unreachable: ", msg));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrCat(
          who, " did not answer ", what, " within ", cfg_.timeout_ms, " ms"));
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(absl::StrCat(
          who, " refused our certificate for the Admin service (",
          msg, "); use the admin client certificate"));
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(absl::StrCat(
          who, " did not accept our client certificate: ", msg));
    default:
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat(who, ": ", what, " failed: ", msg));
  }
}

std::array<absl::StatusOr<pb::HealthResponse>, 3> AdminCluster::Health() {
  return OnAll([&](int i) -> absl::StatusOr<pb::HealthResponse> {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::HealthResponse r;
    grpc::Status st = stubs_[i]->Health(&ctx, pb::HealthRequest(), &r);
    if (!st.ok()) return RpcError(i, "Health", st);
    return r;
  });
}

std::array<absl::StatusOr<std::vector<pb::KeyInfo>>, 3> AdminCluster::ListKeys() {
  return OnAll([&](int i) -> absl::StatusOr<std::vector<pb::KeyInfo>> {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::ListKeysResponse r;
    grpc::Status st = stubs_[i]->ListKeys(&ctx, pb::ListKeysRequest(), &r);
    if (!st.ok()) return RpcError(i, "ListKeys", st);
    return std::vector<pb::KeyInfo>(r.keys().begin(), r.keys().end());
  });
}

absl::Status AdminCluster::CheckReachable() {
  auto h = Health();
  for (int i = 0; i < 3; ++i)
    if (!h[i].ok()) return h[i].status();
  for (int i = 0; i < 3; ++i)
    if (h[i]->party() != static_cast<uint32_t>(i))
      return absl::FailedPreconditionError(absl::StrCat(
          Describe(i), " says it is party ", h[i]->party(),
          ": list the servers in party order (0, 1, 2)"));
  return absl::OkStatus();
}

absl::Status AdminCluster::PutKey(engine::Cipher cipher, absl::Span<const uint8_t> key,
                                  const std::string& key_id, uint32_t kvno,
                                  const std::string& label) {
  if (key_id.size() != kKeyIdLen) return absl::InvalidArgumentError("bad key id length");
  auto views = engine::DealKey(cipher, key);
  if (!views.ok())
    return absl::InternalError(absl::StrCat("dealer: ", views.status().message()));
  std::array<pb::PutKeyRequest, 3> reqs;
  for (int i = 0; i < 3; ++i) {
    pb::KeyInfo* info = reqs[i].mutable_info();
    info->set_key_id(key_id);
    info->set_cipher(cipher == engine::Cipher::kAes128 ? pb::CIPHER_AES128
                                                       : pb::CIPHER_AES256);
    info->set_kvno(kvno);
    info->set_label(label);
    reqs[i].set_party(i);
    std::vector<uint8_t> ser = (*views)[i].Serialize();
    reqs[i].set_shares(ser.data(), ser.size());
    OPENSSL_cleanse(ser.data(), ser.size());
    reqs[i].set_replace(false);
  }
  // The three views die (and are wiped) here; only the requests hold shares.
  views = absl::InternalError("wiped");
  auto st = OnAll([&](int i) -> grpc::Status {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::PutKeyResponse r;
    return stubs_[i]->PutKey(&ctx, reqs[i], &r);
  });
  for (auto& r : reqs) Wipe(r.mutable_shares());
  std::vector<std::string> errors;
  int first_failed = -1;
  for (int i = 0; i < 3; ++i) {
    if (st[i].ok()) continue;
    if (first_failed < 0) first_failed = i;
    errors.push_back(std::string(RpcError(i, "PutKey", st[i]).message()));
  }
  if (first_failed < 0) return absl::OkStatus();
  absl::Status err = RpcError(first_failed, "PutKey", st[first_failed]);
  // All-or-nothing: take the new key id off every server. A server whose
  // PutKey failed in transit (timed out, connection lost) may have stored
  // it all the same, so every server is asked; NOT_FOUND is the expected
  // answer from those that refused it.
  auto del = DeleteKeyEach(key_id);
  std::vector<std::string> removed_from, left_on;
  for (int i = 0; i < 3; ++i) {
    bool gone = del[i].ok() || del[i].code() == absl::StatusCode::kNotFound;
    if (st[i].ok())
      (gone ? removed_from : left_on).push_back(absl::StrCat(i));
    else if (!gone && st[i].error_code() != grpc::StatusCode::UNAVAILABLE &&
             st[i].error_code() != grpc::StatusCode::PERMISSION_DENIED &&
             st[i].error_code() != grpc::StatusCode::UNAUTHENTICATED &&
             st[i].error_code() != grpc::StatusCode::INVALID_ARGUMENT &&
             st[i].error_code() != grpc::StatusCode::ALREADY_EXISTS)
      left_on.push_back(absl::StrCat(i, " (maybe)"));
  }
  std::string msg = absl::StrJoin(errors, "; ");
  if (!removed_from.empty())
    absl::StrAppend(&msg, "; the shares already stored on server ",
                    absl::StrJoin(removed_from, ", "), " were removed again");
  if (!left_on.empty())
    absl::StrAppend(&msg, "; WARNING: could not remove key id ",
                    absl::BytesToHexString(key_id), " from server ",
                    absl::StrJoin(left_on, ", "),
                    " (nothing refers to it; `kmpc-admin status --kdb` lists it)");
  return absl::Status(err.code(), msg);
}

std::array<absl::Status, 3> AdminCluster::DeleteKeyEach(const std::string& key_id) {
  auto st = OnAll([&](int i) -> grpc::Status {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::DeleteKeyRequest d;
    d.set_key_id(key_id);
    pb::DeleteKeyResponse r;
    return stubs_[i]->DeleteKey(&ctx, d, &r);
  });
  std::array<absl::Status, 3> out;
  for (int i = 0; i < 3; ++i)
    if (!st[i].ok())
      out[i] = st[i].error_code() == grpc::StatusCode::NOT_FOUND
                   ? absl::NotFoundError("not found")
                   : RpcError(i, "DeleteKey", st[i]);
  return out;
}

absl::Status AdminCluster::DeleteKey(const std::string& key_id) {
  auto st = DeleteKeyEach(key_id);
  for (int i = 0; i < 3; ++i)
    if (!st[i].ok() && st[i].code() != absl::StatusCode::kNotFound) return st[i];
  return absl::OkStatus();
}

}  // namespace kmpc::admin
