// Client authorization of the gRPC services: who may call KeyOps and Admin.
//
// gRPC's TLS layer has already verified the client's certificate chain
// against --ca (mutual TLS, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_
// AND_VERIFY). On every RPC, Authorize() then checks, from the call's
// AuthContext:
//   1. revocation: the leaf certificate ("x509_pem_cert") is not listed in
//      the CRL given with --crl (a PEM file signed by a CA of --ca; reloaded
//      when the file changes, checked at most once a second, or on SIGHUP);
//      a revoked certificate gets UNAUTHENTICATED;
//   2. the allow-list: the subject CN ("x509_common_name") is one of the
//      service's names and, when the list also holds "sha256:<hex>" pins,
//      the certificate's SHA-256 fingerprint (over its DER, as
//      `openssl x509 -noout -fingerprint -sha256` prints it) is one of them;
//      otherwise PERMISSION_DENIED.
// Denials are logged (CN, serial, fingerprint, peer address, reason; at
// most once per 10 s per certificate and reason); the status sent back says
// only which rule failed.
//
// The ring (net/tls_conn) asks RevocationList::CheckPeer after each TLS
// handshake, so a revoked party certificate cannot (re)connect, and again
// for both ring connections before each batch (TlsRingChannel::Connect), so
// a connection made before the revocation is dropped at the next batch.
//
// Why in the application and not in the TLS handshake: Debian's gRPC 1.51
// offers CRLs only through the experimental TlsServerCredentialsOptions::
// set_crl_directory (a hashed directory read by OpenSSL's hash_dir lookup,
// which caches a CRL once read, so an updated CRL is not seen without a
// restart); grpc::experimental::CrlProvider (reloadable) arrived in 1.59.
// A revoked client can therefore still complete a TLS handshake, but no RPC.
#ifndef KMPC_SERVICE_AUTH_H_
#define KMPC_SERVICE_AUTH_H_

#include <grpcpp/grpcpp.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kmpc::service {

using Sha256 = std::array<uint8_t, 32>;

// A CRL file issued by the cluster CA, kept current.
class RevocationList {
 public:
  // Loads `crl_path` (one or more PEM "X509 CRL" blocks), each of which must
  // be signed by a certificate of `ca_path` whose subject is the CRL's
  // issuer and carry a CRL Number extension. An error names the file and
  // what is wrong with it. A CA of `ca_path` without a CRL in the file is
  // logged (WARNING): its certificates are not checked for revocation.
  //
  // Rollback: per CA, a CRL whose CRL Number is lower than the highest one
  // accepted before is refused (as is a file that no longer holds a CRL of
  // a CA whose CRL was accepted). `state_path` (kmpc-mpc-server:
  // STORE_DIR/crl-numbers) keeps those highest numbers across restarts
  // (written atomically after each accepted CRL, its directory created
  // 0700 if missing); empty: in memory only. A start with an older CRL
  // than the state file records fails.
  static absl::StatusOr<std::shared_ptr<RevocationList>> Open(
      const std::string& crl_path, const std::string& ca_path,
      const std::string& state_path = "");

  // Reads the file again (SIGHUP). On any error (unreadable, unsigned, older
  // than the loaded one) the loaded list stays in force and the error is
  // returned.
  absl::Status Reload();

  // Whether the certificate with this issuer and serial (hex, as BN_bn2hex)
  // is revoked. The issuer is matched to a CRL's issuer with X509_NAME_cmp
  // (canonical form: the same name in another string type or case matches
  // too), not by its DER bytes. Reloads first when the file changed
  // (checked at most once per `poll`).
  bool IsRevoked(const X509_NAME* issuer, const std::string& serial_hex);

  // The ring's check of a verified peer certificate (net::TlsFiles::
  // check_peer): UNAUTHENTICATED, and a log line, when it is revoked.
  absl::Status CheckPeer(X509* cert);

  size_t revoked_count();  // entries of the loaded CRLs (logs, tests)
  void set_poll_interval(absl::Duration d) { poll_ = d; }

 private:
  struct IssuerCrl {
    std::shared_ptr<X509_NAME> issuer;  // the CRL's issuer (a copy)
    std::string ca_key;   // the signing CA (state file key: CaKey in auth.cc)
    std::string number;   // highest CRL Number (hex, no leading zeros)
    std::set<std::string> serials;      // revoked serials (hex)
  };
  struct Snapshot {
    std::vector<IssuerCrl> crls;  // one per issuer and CA (CRLs merged)
    std::string newest_last_update;  // "YYYYMMDDHHMMSSZ" (logs)
    size_t count = 0;
    std::map<std::string, std::string> ca_names;  // ca_key -> subject, all CAs
    std::vector<std::string> cas_without_crl;      // CAs that signed no CRL
  };
  RevocationList(std::string crl_path, std::string ca_pem, std::string state_path)
      : crl_path_(std::move(crl_path)),
        ca_pem_(std::move(ca_pem)),
        state_path_(std::move(state_path)) {}
  absl::Status ReadStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  absl::Status WriteStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  absl::StatusOr<std::shared_ptr<const Snapshot>> Parse(const std::string& pem) const;
  // Merges CRL number n, signed by the CA of ca_key, into snap.
  absl::Status AddCrl(X509_CRL* crl, int n, const std::string& ca_key,
                      const std::string& now_key, Snapshot& snap) const;
  absl::Status LoadLocked(bool forced) ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  void PollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);

  const std::string crl_path_;
  const std::string ca_pem_;
  const std::string state_path_;
  absl::Duration poll_ = absl::Seconds(1);
  // Two locks, so that a reload (read, parse, verify, fsync of the state
  // file) never holds up the authorizations: load_mu_ serializes loads and
  // guards what only they use; mu_ guards the snapshot the checks read,
  // swapped in at the end of a load.
  absl::Mutex load_mu_;
  // ca_key -> highest CRL Number accepted (hex); from state_path_ at Open.
  std::map<std::string, std::string> highest_ ABSL_GUARDED_BY(load_mu_);
  struct stat seen_ ABSL_GUARDED_BY(load_mu_) {};  // file identity last attempted
  absl::Mutex mu_;
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(mu_);
  absl::Time last_poll_ ABSL_GUARDED_BY(mu_);
};

// One service's allow-list (--keyops_clients / --admin_clients) and the
// server's CRL.
struct ClientPolicy {
  std::vector<std::string> names;  // certificate CNs allowed
  std::vector<Sha256> pins;        // empty: any certificate with such a CN
  std::shared_ptr<RevocationList> crl;  // null: no revocation check
};

// Parses "cn1,cn2,sha256:AB:12:...,sha256:ab12..." (fingerprints in hex,
// colons optional, either case). INVALID_ARGUMENT for an empty list, a pin
// that is not 32 bytes of hex, or pins without any CN.
absl::StatusOr<ClientPolicy> ParseClientPolicy(absl::string_view list,
                                               std::shared_ptr<RevocationList> crl);

// The check of every RPC (see above); `service` names it in messages.
absl::Status Authorize(grpc::ServerContext* ctx, const ClientPolicy& policy,
                       const char* service);
// The same on an AuthContext (tests); `peer` is only logged.
absl::Status AuthorizePeer(const grpc::AuthContext* ac, const ClientPolicy& policy,
                           const char* service, const std::string& peer);

// Hex SHA-256 fingerprint of a PEM certificate ("ab12..."); tests, tools.
absl::StatusOr<std::string> CertificateSha256Hex(const std::string& pem);

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_AUTH_H_
