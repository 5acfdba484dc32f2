#include "client/channels.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/base/internal/sysinfo.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kmpc::client {
namespace {

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

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClusterConfig& cfg) {
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
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = std::move(*ca);
  o.pem_cert_chain = std::move(*cert);
  o.pem_private_key.swap(*key);
  auto creds = grpc::SslCredentials(o);
  OPENSSL_cleanse(o.pem_private_key.data(), o.pem_private_key.size());
  if (creds == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot build TLS credentials from ", cfg.ca, ", ", cfg.cert, " and ",
        cfg.key));
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
  auto creds = ClientCredentials(cfg);
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
  for (int i = 0; i < kParties; ++i) {
    grpc::ChannelArguments a = opts.args;
    a.SetSslTargetNameOverride(PartyTlsName(i));
    c.channels_[i] = grpc::CreateCustomChannel(cfg.servers[i], *creds, a);
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

absl::Status ClusterChannels::RpcError(int party, absl::string_view service,
                                       absl::string_view method,
                                       const grpc::Status& st,
                                       absl::string_view refused_hint) const {
  const std::string who = Describe(party);
  const std::string& msg = st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OkStatus();
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
          who, " did not answer ", method, " within ",
          absl::ToInt64Milliseconds(cfg_.rpc_timeout), " ms"));
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(absl::StrCat(
          who, " refused our certificate for the ", service, " service (", msg,
          ")", refused_hint.empty() ? "" : "; ", refused_hint));
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(absl::StrCat(
          who, " did not accept our client certificate: ", msg));
    default:
      // grpc::StatusCode and absl::StatusCode share their values.
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat(who, ": ", method, " failed: ", msg));
  }
}

}  // namespace kmpc::client
