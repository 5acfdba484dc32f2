#include "client/channels.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/base/internal/sysinfo.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"

namespace kmpc::client {

// The certificate check of a cluster's three channels, and its record.
// gRPC runs the check after it verified the server's chain to the
// cluster's CA (a certificate of another CA fails there and never reaches
// it); the channel's TLS target name says which party the server must be.
//
// The record: gRPC 1.51 hands the client a failed connection's cause only
// as a code and a message (the subchannel's last error), so the link from
// a failed call to this check's refusal is the refusal itself. Each
// refusal names this check's mark for the party (a random nonce of this
// object), and the check counts its refusals per party. A failure is the
// wrong party only if the check refused on that party's channel and the
// failure is such a refusal (it carries the mark): a later failure of
// another kind (the server down, an untrusted certificate), whose
// handshake the check never saw, carries no mark, so the record never
// needs clearing and never speaks for another failure. No server can
// forge the mark: it never leaves this process before the refusal.
class PartyCheck {
 public:
  PartyCheck() {
    unsigned char r[12];
    if (RAND_bytes(r, sizeof(r)) != 1) {
      // Uniqueness, not secrecy, is what the mark needs.
      const uint64_t t = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
      std::memcpy(r, &t, sizeof(t));
      std::memset(r + sizeof(t), 0x5a, sizeof(r) - sizeof(t));
    }
    nonce_ = absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(r), sizeof(r)));
  }

  // The verdict on a server's certificate with DNS SANs `dns` on the
  // channel whose TLS target name is `target`.
  grpc::Status Check(absl::string_view target,
                     const std::vector<grpc::string_ref>& dns) {
    int party = -1;
    for (int i = 0; i < kParties; ++i)
      if (target == PartyTlsName(i)) party = i;
    if (party < 0)
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat("no MPC party is named ", target));
    for (const grpc::string_ref& d : dns)
      if (absl::string_view(d.data(), d.size()) == target)
        return grpc::Status::OK;
    refusals_[party].fetch_add(1, std::memory_order_relaxed);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("the server's certificate does not name ",
                                     target, Mark(party)));
  }

  // Whether `failure` (a failed call's message) on `party`'s channel is
  // one of this check's refusals.
  bool Refused(int party, absl::string_view failure) const {
    return party >= 0 && party < kParties &&
           refusals_[party].load(std::memory_order_relaxed) > 0 &&
           absl::StrContains(failure, Mark(party));
  }

  int refusals(int party) const {
    return refusals_[party].load(std::memory_order_relaxed);
  }

  // `failure` without the party's mark.
  std::string Unmarked(int party, absl::string_view failure) const {
    return absl::StrReplaceAll(failure, {{Mark(party), ""}});
  }

 private:
  std::string Mark(int party) const {
    return absl::StrCat(" [party check ", nonce_, "/", party, "]");
  }

  std::string nonce_;
  std::array<std::atomic<int>, kParties> refusals_{};
};

namespace {

// gRPC's form of PartyCheck: synchronous, so never cancelled. gRPC owns
// it (ExternalCertificateVerifier::Create); the record is shared.
class PartyCheckVerifier
    : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit PartyCheckVerifier(std::shared_ptr<PartyCheck> check)
      : check_(std::move(check)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/,
              grpc::Status* sync_status) override {
    const grpc::string_ref t = request->target_name();
    *sync_status =
        check_->Check(absl::string_view(t.data(), t.size()), request->dns_names());
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::shared_ptr<PartyCheck> check_;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// Never prompts for a pass phrase: the key files are unencrypted (gRPC
// takes no pass phrase either).
int NoPassphrase(char*, int, int, void*) { return -1; }

std::unique_ptr<BIO, BioFree> MemBio(const std::string& s) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(s.data(), static_cast<int>(s.size())));
}

// The first certificate of a PEM text; nullptr if there is none.
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  auto bio = MemBio(pem);
  std::unique_ptr<X509, X509Free> x(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)
          : nullptr);
  ERR_clear_error();
  return x;
}

// One channel's TLS credentials: a certificate provider of its own (the
// CA; our certificate and a copy of the key, wiped here once the provider
// holds it), and the cluster's one certificate check: gRPC verifies the
// server's chain to the CA, then the check the party's name. gRPC's own
// host name check is off: the check is the pin, per channel.
//
// A provider per channel, not one for the three: gRPC 1.51 hands a
// provider's certificates to the security connectors that watch it, and
// when the channels make their first connections at once (AdminClient's
// calls to the three servers in parallel), a connector that started
// watching while another's first watch was still fetching them got them
// only after its handshake began, which then failed ("Failed to create
// security handshaker": tls_security_connector.cc, whose wait for initial
// credentials is unimplemented in 1.51). A provider watched by one
// connector delivers within that connector's construction.
std::shared_ptr<grpc::ChannelCredentials> TlsCredentialsOf(
    const std::string& ca, const std::string& cert, const std::string& key,
    std::shared_ptr<grpc::experimental::CertificateVerifier> verifier) {
  namespace gx = grpc::experimental;
  std::vector<gx::IdentityKeyCertPair> identity(1);
  identity[0].private_key = key;
  identity[0].certificate_chain = cert;
  auto provider = std::make_shared<gx::StaticDataCertificateProvider>(ca, identity);
  OPENSSL_cleanse(identity[0].private_key.data(), identity[0].private_key.size());
  gx::TlsChannelCredentialsOptions o;
  o.set_certificate_provider(std::move(provider));
  o.watch_root_certs();
  o.watch_identity_key_cert_pairs();
  o.set_verify_server_certs(true);
  o.set_certificate_verifier(std::move(verifier));
  o.set_check_call_host(false);
  return gx::TlsCredentials(o);
}

}  // namespace

std::string PartyTlsName(int party) {
  return absl::StrCat("kmpc-party-", party);
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view what) {
  if (path.empty())
    return absl::FailedPreconditionError(absl::StrCat("no ", what, " file given"));
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the ", what, " ", path, ": ", std::strerror(errno)));
  struct stat sb;
  if (fstat(fileno(f.get()), &sb) != 0 || !S_ISREG(sb.st_mode))
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the ", what, " ", path, ": not a regular file"));
  // Room for the whole file up front: a string that grew while reading a
  // private key would leave unwiped copies in freed memory.
  std::string s;
  s.reserve(static_cast<size_t>(sb.st_size) + 1);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) {
    if (s.size() + n > s.capacity()) {  // the file grew while read
      OPENSSL_cleanse(buf, sizeof(buf));
      OPENSSL_cleanse(s.data(), s.size());
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot read the ", what, " ", path, ": it changed while read"));
    }
    s.append(buf, n);
  }
  OPENSSL_cleanse(buf, sizeof(buf));
  if (std::ferror(f.get())) {
    OPENSSL_cleanse(s.data(), s.size());
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (s.empty())
    return absl::FailedPreconditionError(
        absl::StrCat("the ", what, " ", path, " is empty"));
  if (!absl::StrContains(s, "-----BEGIN ")) {
    OPENSSL_cleanse(s.data(), s.size());
    return absl::FailedPreconditionError(
        absl::StrCat("the ", what, " ", path, " holds no PEM block"));
  }
  return s;
}

absl::StatusOr<std::array<std::shared_ptr<grpc::ChannelCredentials>, kParties>>
ClientCredentials(const ClusterConfig& cfg, std::shared_ptr<PartyCheck> check) {
  auto ca = ReadPemFile(cfg.ca, "CA certificate");
  if (!ca.ok()) return ca.status();
  if (FirstCertificate(*ca) == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "the CA certificate ", cfg.ca, " holds no X.509 certificate"));
  auto cert = ReadPemFile(cfg.cert, "client certificate");
  if (!cert.ok()) return cert.status();
  auto x509 = FirstCertificate(*cert);
  if (x509 == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "the client certificate ", cfg.cert, " holds no X.509 certificate"));
  auto key = ReadPemFile(cfg.key, "client private key");
  if (!key.ok()) return key.status();
  {
    auto bio = MemBio(*key);
    std::unique_ptr<EVP_PKEY, PkeyFree> pkey(
        bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr)
            : nullptr);
    ERR_clear_error();
    absl::Status bad;
    if (pkey == nullptr)
      bad = absl::FailedPreconditionError(absl::StrCat(
          "the client private key ", cfg.key,
          " is not an unencrypted PEM private key"));
    else if (X509_check_private_key(x509.get(), pkey.get()) != 1)
      bad = absl::FailedPreconditionError(
          absl::StrCat("the client private key ", cfg.key,
                       " does not belong to the client certificate ", cfg.cert));
    ERR_clear_error();
    if (!bad.ok()) {
      OPENSSL_cleanse(key->data(), key->size());
      return bad;
    }
  }
  auto verifier =
      grpc::experimental::ExternalCertificateVerifier::Create<PartyCheckVerifier>(
          std::move(check));
  std::array<std::shared_ptr<grpc::ChannelCredentials>, kParties> creds;
  for (int i = 0; i < kParties; ++i)
    creds[i] = TlsCredentialsOf(*ca, *cert, *key, verifier);
  OPENSSL_cleanse(key->data(), key->size());
  for (const auto& c : creds)
    if (c == nullptr)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot build TLS credentials from ", cfg.ca, ", ", cfg.cert,
          " and ", cfg.key));
  return creds;
}

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

absl::StatusOr<ClusterChannels> ClusterChannels::Open(const ClusterConfig& cfg,
                                                      const ChannelOptions& opts) {
  for (int i = 0; i < kParties; ++i)
    if (cfg.servers[i].empty())
      return absl::InvalidArgumentError(
          absl::StrCat("no address for MPC server ", i));
  // The target name is the pin: a caller's own would replace it.
  const grpc_channel_args ca = opts.args.c_channel_args();
  for (size_t k = 0; k < ca.num_args; ++k)
    if (std::strcmp(ca.args[k].key, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG) == 0)
      return absl::InvalidArgumentError(
          "the channel arguments must not set the TLS target name (each "
          "party's channel is pinned to its own)");
  auto check = std::make_shared<PartyCheck>();
  auto creds = ClientCredentials(cfg, check);
  if (!creds.ok()) return creds.status();
  // gRPC 1.51 reads errno after connect() only after taking absl Mutexes
  // (tcp_client_posix.cc; fixed upstream in grpc/grpc#35064). The first
  // contended absl Mutex wait of a process computes the nominal CPU
  // frequency once, opening /sys/devices/system/cpu/cpu0/tsc_freq_khz,
  // which many VMs lack: the ENOENT it leaves was reported as the
  // connection's failure ("failed to connect to all addresses; last error:
  // UNKNOWN: ipv4:...: No such file or directory"). Computing it here,
  // before any channel exists, leaves no file for a later wait to open.
  (void)absl::base_internal::NominalCPUFrequency();
  ClusterChannels c;
  c.cfg_ = cfg;
  c.check_ = std::move(check);
  for (int i = 0; i < kParties; ++i) {
    grpc::ChannelArguments a = opts.args;
    a.SetSslTargetNameOverride(PartyTlsName(i));
    c.channels_[i] = grpc::CreateCustomChannel(cfg.servers[i], (*creds)[i], a);
  }
  if (opts.connect_wait > absl::ZeroDuration()) {
    for (int i = 0; i < kParties; ++i)
      c.channels_[i]->GetState(/*try_to_connect=*/true);
    const auto deadline = absl::ToChronoTime(absl::Now() + opts.connect_wait);
    for (int i = 0; i < kParties; ++i)
      (void)c.channels_[i]->WaitForConnected(deadline);
  }
  return c;
}

std::string ClusterChannels::Describe(int party) const {
  return absl::StrCat("server ", party, " (", cfg_.servers[party], ")");
}

void ClusterChannels::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + cfg_.rpc_timeout));
}

RpcFailure ClusterChannels::Classify(int party, const grpc::Status& st) const {
  const std::string& msg = st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return RpcFailure::kNone;
    case grpc::StatusCode::UNAVAILABLE:
      // The certificate check refused the server as another party's (a
      // wrong server order, or another party at this address).
      if (check_ != nullptr && check_->Refused(party, msg))
        return RpcFailure::kWrongParty;
      // gRPC reports a failed TLS handshake as UNAVAILABLE too, with its
      // cause only in the text; the usual cause is a client certificate
      // not issued by the cluster's CA (or a server certificate not issued
      // by ours).
      if (absl::StrContains(msg, "andshake") || absl::StrContains(msg, "SSL") ||
          absl::StrContains(msg, "ertificate") || absl::StrContains(msg, "TLS"))
        return RpcFailure::kTlsHandshake;
      // A server that does not trust our client certificate aborts the
      // handshake, which the client sees as a closed socket.
      if (absl::StrContains(msg, "Socket closed") ||
          absl::StrContains(msg, "Connection reset"))
        return RpcFailure::kClosedInHandshake;
      return RpcFailure::kUnreachable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return RpcFailure::kDeadlineExceeded;
    case grpc::StatusCode::CANCELLED:
      return RpcFailure::kCancelled;
    case grpc::StatusCode::PERMISSION_DENIED:
      return RpcFailure::kPermissionDenied;
    case grpc::StatusCode::UNAUTHENTICATED:
      return RpcFailure::kUnauthenticated;
    default:
      return RpcFailure::kServerError;
  }
}

int ClusterChannels::WrongPartyRefusals(int party) const {
  if (check_ == nullptr || party < 0 || party >= kParties) return 0;
  return check_->refusals(party);
}

absl::Status ClusterChannels::WrongPartyError(int party,
                                              const grpc::Status& st) const {
  const std::string detail = check_ == nullptr
                                 ? st.error_message()
                                 : check_->Unmarked(party, st.error_message());
  return absl::PermissionDeniedError(absl::StrCat(
      "the server at position ", party, " (", cfg_.servers[party],
      ") is not party ", party, ": its certificate is not ", PartyTlsName(party),
      "'s (list the servers in party order 0, 1, 2; nothing was sent to it): ",
      detail));
}

absl::Status ClusterChannels::RpcError(int party, absl::string_view service,
                                       absl::string_view method,
                                       const grpc::Status& st,
                                       absl::string_view refused_hint) const {
  const std::string who = Describe(party);
  const std::string& msg = st.error_message();
  switch (Classify(party, st)) {
    case RpcFailure::kNone:
      return absl::OkStatus();
    case RpcFailure::kWrongParty:
      return WrongPartyError(party, st);
    case RpcFailure::kTlsHandshake:
      return absl::UnauthenticatedError(absl::StrCat(
          who, ": TLS handshake failed (is --ca the cluster's CA, and our "
               "client certificate issued by it?): ", msg));
    case RpcFailure::kClosedInHandshake:
      return absl::UnauthenticatedError(absl::StrCat(
          who, " closed the connection during the TLS handshake (does it "
               "trust our client certificate? it must be issued by the "
               "cluster's CA): ", msg));
    case RpcFailure::kUnreachable:
      return absl::UnavailableError(absl::StrCat(who, " is unreachable: ", msg));
    case RpcFailure::kDeadlineExceeded:
      return absl::DeadlineExceededError(absl::StrCat(
          who, " did not answer ", method, " within ",
          absl::ToInt64Milliseconds(cfg_.rpc_timeout), " ms"));
    case RpcFailure::kPermissionDenied:
      return absl::PermissionDeniedError(absl::StrCat(
          who, " refused our certificate for the ", service, " service (", msg,
          ")", refused_hint.empty() ? "" : "; ", refused_hint));
    case RpcFailure::kUnauthenticated:
      return absl::UnauthenticatedError(absl::StrCat(
          who, " did not accept our client certificate: ", msg));
    case RpcFailure::kCancelled:
    case RpcFailure::kServerError:
      break;
  }
  // grpc::StatusCode and absl::StatusCode share their values.
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(who, ": ", method, " failed: ", msg));
}

}  // namespace kmpc::client
