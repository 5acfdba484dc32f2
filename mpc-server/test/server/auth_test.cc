// Client authorization (service/auth.h) over real gRPC + mutual TLS: one
// server with the Admin and KeyOps services, clients with certificates
// from deploy/gen-certs.sh, revocations written by `gen-certs.sh --revoke`.
#include "service/auth.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kmpc.grpc.pb.h"
#include "net/tls_conn.h"
#include "service/services.h"
#include "store/share_store.h"
#include "test_util.h"

namespace kmpc::service {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& data) {
  std::ofstream f(path + ".tmp");
  f << data;
  f.close();
  ASSERT_EQ(rename((path + ".tmp").c_str(), path.c_str()), 0);
}

int GenCerts(const std::string& args) {
  std::string cmd = "bash " KMPC_SOURCE_DIR "/deploy/gen-certs.sh " + args + " >/dev/null";
  return system(cmd.c_str());
}

class AuthTest : public ::testing::Test {
 protected:
  // Certificates made once; each test revokes in its own copy.
  static void SetUpTestSuite() {
    base_ = new std::string(::kmpc::testing::MakeTestCerts("auth-test-base"));
    ASSERT_FALSE(base_->empty());
    // Replacements with the same CNs (what an administrator issues after
    // revoking a stolen certificate).
    ASSERT_EQ(GenCerts(*base_ + "/certs --client admin-new kmpc-admin"), 0);
    ASSERT_EQ(GenCerts(*base_ + "/certs --client kdc-new kmpc-kdc"), 0);
    other_ = new std::string(::kmpc::testing::MakeTestCerts("auth-test-other"));
    ASSERT_FALSE(other_->empty());
  }
  static void TearDownTestSuite() {
    for (std::string* d : {base_, other_}) {
      if (d != nullptr && !d->empty()) (void)system(("rm -rf " + *d).c_str());
      delete d;
    }
  }

  void SetUp() override {
    char tmpl[] = "/tmp/kmpc-auth-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    certs_ = dir_ + "/certs";
    ASSERT_EQ(system(("cp -a " + *base_ + "/certs " + certs_).c_str()), 0);
    auto st = store::ShareStore::Open(dir_ + "/store", size_t{16} << 20);
    ASSERT_TRUE(st.ok()) << st.status();
    store_ = std::move(*st);
    keys_ = std::make_unique<KeyCache>(store_.get(), 0);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    std::string cmd = "rm -rf " + dir_;
    (void)system(cmd.c_str());
  }

  // Serves Admin and KeyOps (no ring: the calls used here never reach it).
  void Serve(ClientPolicy keyops, ClientPolicy admin) {
    ServiceOptions o;
    o.keyops_clients = std::move(keyops);
    o.admin_clients = std::move(admin);
    keyops_svc_ = std::make_unique<KeyOpsService>(o, keys_.get(), nullptr, &metrics_);
    admin_svc_ = std::make_unique<AdminService>(o, store_.get(), keys_.get(), nullptr,
                                                &metrics_);
    grpc::SslServerCredentialsOptions so(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    so.pem_root_certs = Slurp(certs_ + "/ca.pem");
    so.pem_key_cert_pairs.push_back(
        {Slurp(certs_ + "/party-0.key"), Slurp(certs_ + "/party-0.pem")});
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(so), &port_);
    b.RegisterService(keyops_svc_.get());
    b.RegisterService(admin_svc_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& name) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Slurp(certs_ + "/ca.pem");
    o.pem_private_key = Slurp(certs_ + "/" + name + ".key");
    o.pem_cert_chain = Slurp(certs_ + "/" + name + ".pem");
    grpc::ChannelArguments a;
    a.SetSslTargetNameOverride("kmpc-party-0");
    return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port_),
                                     grpc::SslCredentials(o), a);
  }

  // Admin.ListKeys as certificate `name`.
  grpc::Status ListKeys(const std::string& name) {
    return ListKeysOn(Channel(name));
  }
  static grpc::Status ListKeysOn(const std::shared_ptr<grpc::Channel>& ch) {
    auto stub = v1::Admin::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListKeysRequest req;
    v1::ListKeysResponse resp;
    return stub->ListKeys(&ctx, req, &resp);
  }
  // KeyOps.Finalize with an empty request as `name`: INVALID_ARGUMENT once
  // authorized (the request is checked after the caller).
  grpc::Status Finalize(const std::string& name) {
    auto stub = v1::KeyOps::NewStub(Channel(name));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::FinalizeRequest req;
    v1::FinalizeResponse resp;
    return stub->Finalize(&ctx, req, &resp);
  }
  // KeyOps.Sign with an empty request as `name`: INVALID_ARGUMENT once
  // authorized, like Finalize.
  grpc::Status Sign(const std::string& name) {
    auto stub = v1::KeyOps::NewStub(Channel(name));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SignRequest req;
    v1::SignResponse resp;
    return stub->Sign(&ctx, req, &resp);
  }

  std::shared_ptr<RevocationList> Crl() {
    auto crl = RevocationList::Open(certs_ + "/crl.pem", certs_ + "/ca.pem");
    EXPECT_TRUE(crl.ok()) << crl.status();
    if (!crl.ok()) return nullptr;
    (*crl)->set_poll_interval(absl::ZeroDuration());
    return *crl;
  }

  ClientPolicy Policy(const std::string& list, std::shared_ptr<RevocationList> crl) {
    auto p = ParseClientPolicy(list, std::move(crl));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : ClientPolicy{};
  }

  static std::string* base_;
  static std::string* other_;  // another CA's certificates and CRL
  std::string dir_, certs_;
  std::unique_ptr<store::ShareStore> store_;
  std::unique_ptr<KeyCache> keys_;
  Metrics metrics_;
  std::unique_ptr<KeyOpsService> keyops_svc_;
  std::unique_ptr<AdminService> admin_svc_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

std::string* AuthTest::base_ = nullptr;
std::string* AuthTest::other_ = nullptr;

TEST_F(AuthTest, RevokedCertificatesRefusedFreshOnesWork) {
  auto crl = Crl();
  ASSERT_NE(crl, nullptr);
  EXPECT_EQ(crl->revoked_count(), 0u);
  Serve(Policy("kmpc-kdc", crl), Policy("kmpc-admin", crl));
  // Before the revocation: both work; a channel kept across it.
  auto admin_channel = Channel("admin");
  ASSERT_TRUE(ListKeysOn(admin_channel).ok());
  EXPECT_EQ(Finalize("kdc").error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/admin.pem " + certs_ +
                     "/kdc.pem"),
            0);
  // The server notices the changed file on the next call (no restart).
  grpc::Status st = ListKeysOn(admin_channel);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "the client certificate has been revoked");
  EXPECT_EQ(crl->revoked_count(), 2u);
  EXPECT_EQ(ListKeys("admin").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Finalize("kdc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Sign("kdc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The replacements, same CNs, other serials: accepted.
  EXPECT_TRUE(ListKeys("admin-new").ok());
  EXPECT_EQ(Finalize("kdc-new").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Sign("kdc-new").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Revocation does not make a CN acceptable to the other service.
  EXPECT_EQ(ListKeys("kdc-new").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Sign("admin-new").error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, BadOrOlderCrlKeepsTheOneInForce) {
  const std::string path = certs_ + "/crl.pem";
  const std::string empty_crl = Slurp(path);
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/admin.pem"), 0);
  auto crl = Crl();
  ASSERT_NE(crl, nullptr);
  Serve(Policy("kmpc-kdc", crl), Policy("kmpc-admin", crl));
  EXPECT_EQ(ListKeys("admin").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string revoking_crl = Slurp(path);

  // Garbage, an older CRL (rollback), a CRL of another CA, a removed file:
  // each is refused and the admin certificate stays revoked.
  for (const std::string& bad :
       {std::string("not a CRL\n"), empty_crl, Slurp(*other_ + "/certs/crl.pem"),
        std::string()}) {
    if (bad.empty()) {
      ASSERT_EQ(unlink(path.c_str()), 0);
    } else {
      Spit(path, bad);
    }
    EXPECT_FALSE(crl->Reload().ok());
    EXPECT_EQ(ListKeys("admin").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(ListKeys("admin-new").ok());
  }
  Spit(path, revoking_crl);
  EXPECT_TRUE(crl->Reload().ok());
  EXPECT_EQ(crl->revoked_count(), 1u);
}

TEST_F(AuthTest, OpenRejectsBadCrlFiles) {
  const std::string ca = certs_ + "/ca.pem";
  auto missing = RevocationList::Open(dir_ + "/nope.pem", ca);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos);
  Spit(dir_ + "/junk.pem", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
  auto junk = RevocationList::Open(dir_ + "/junk.pem", ca);
  EXPECT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("no PEM"), std::string::npos) << junk.status();
  auto foreign = RevocationList::Open(*other_ + "/certs/crl.pem", ca);
  EXPECT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("not signed by a CA of --ca"),
            std::string::npos)
      << foreign.status();
  EXPECT_TRUE(RevocationList::Open(certs_ + "/crl.pem", ca).ok());
}

TEST_F(AuthTest, PinnedFingerprintMismatchRefused) {
  auto fp = CertificateSha256Hex(Slurp(certs_ + "/admin.pem"));
  ASSERT_TRUE(fp.ok());
  // The pin as openssl prints it (upper case, colons).
  std::string colons;
  for (size_t i = 0; i < fp->size(); i += 2)
    absl::StrAppend(&colons, i ? ":" : "", absl::AsciiStrToUpper(fp->substr(i, 2)));
  Serve(Policy("kmpc-kdc", nullptr), Policy("kmpc-admin,sha256:" + colons, nullptr));
  EXPECT_TRUE(ListKeys("admin").ok());
  grpc::Status st = ListKeys("admin-new");  // right CN, another certificate
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(st.error_message(),
            "client 'kmpc-admin' may not call Admin: its certificate is not one of "
            "the pinned ones");
  EXPECT_EQ(ListKeys("kdc").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // No pins on KeyOps: any kmpc-kdc certificate of the CA.
  EXPECT_EQ(Finalize("kdc-new").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// The ring: a revoked party certificate is refused by the accepting and by
// the dialing end (net::TlsFiles::check_peer -> RevocationList::CheckPeer).
TEST_F(AuthTest, RingRefusesRevokedPartyCertificate) {
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/party-1.pem"), 0);
  auto crl = Crl();
  ASSERT_NE(crl, nullptr);
  auto files = [&](int party, bool check) {
    std::string c = certs_ + "/party-" + std::to_string(party);
    net::TlsFiles f{c + ".pem", c + ".key", certs_ + "/ca.pem"};
    if (check) f.check_peer = [crl](X509* peer) { return crl->CheckPeer(peer); };
    return f;
  };
  // One TLS connection from `dialer` to `acceptor`; returns both statuses.
  auto connect = [&](int dialer, bool dialer_checks, int acceptor, bool acceptor_checks) {
    auto sctx = net::TlsContext::Create(files(acceptor, acceptor_checks), true);
    auto cctx = net::TlsContext::Create(files(dialer, dialer_checks), false);
    EXPECT_TRUE(sctx.ok() && cctx.ok());
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    listen(lfd, 1);
    auto accepted = std::async(std::launch::async, [&] {
      int fd = accept(lfd, nullptr, nullptr);
      return net::TlsConn::Accept(**sctx, fd, absl::Now() + absl::Seconds(5)).status();
    });
    absl::Status dialed =
        net::TlsConn::Dial(**cctx, absl::StrCat("127.0.0.1:", ntohs(a.sin_port)),
                           net::PartyIdentity(acceptor), absl::Now() + absl::Seconds(5))
            .status();
    absl::Status acc = accepted.get();
    close(lfd);
    return std::pair{dialed, acc};
  };
  // Party 0 accepts party 2 but not the revoked party 1.
  EXPECT_TRUE(connect(2, true, 0, true).second.ok());
  absl::Status refused = connect(1, false, 0, true).second;
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_NE(refused.message().find("revoked"), std::string::npos) << refused;
  // Party 0 dialing a server that presents party 1's revoked certificate.
  absl::Status dialed = connect(0, true, 1, false).first;
  EXPECT_EQ(dialed.code(), absl::StatusCode::kUnauthenticated) << dialed;
  // Without the check (no --crl) the same connection is accepted.
  EXPECT_TRUE(connect(1, false, 0, false).second.ok());
}

// A certificate of the test CA (signed with ca-private/ca.key) whose issuer
// name is the CA's subject "CN=kmpc-test-ca" written as a PrintableString
// (the CA's own subject, and so the CRL's issuer, is a UTF8String): equal
// names for X509_NAME_cmp and for chain verification, different DER.
X509* CertWithPrintableIssuer(const std::string& certs, long serial) {
  FILE* kf = fopen((certs + "/ca-private/ca.key").c_str(), "r");
  if (kf == nullptr) return nullptr;
  EVP_PKEY* ca_key = PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr);
  fclose(kf);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* c = X509_new();
  X509_NAME* issuer = X509_NAME_new();
  X509_NAME* subject = X509_NAME_new();
  bool ok = ca_key != nullptr && key != nullptr && c != nullptr &&
            X509_set_version(c, X509_VERSION_3) == 1 &&
            ASN1_INTEGER_set(X509_get_serialNumber(c), serial) == 1 &&
            X509_NAME_add_entry_by_NID(
                issuer, NID_commonName, V_ASN1_PRINTABLESTRING,
                reinterpret_cast<const unsigned char*>("kmpc-test-ca"), -1, -1, 0) == 1 &&
            X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                                       reinterpret_cast<const unsigned char*>("kmpc-admin"),
                                       -1, -1, 0) == 1 &&
            X509_set_issuer_name(c, issuer) == 1 && X509_set_subject_name(c, subject) == 1 &&
            X509_gmtime_adj(X509_getm_notBefore(c), -60) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(c), 3600) != nullptr &&
            X509_set_pubkey(c, key) == 1 && X509_sign(c, ca_key, EVP_sha256()) > 0;
  X509_NAME_free(issuer);
  X509_NAME_free(subject);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
  if (!ok) {
    X509_free(c);
    return nullptr;
  }
  return c;
}

std::string NameDerOf(const X509_NAME* n) {
  unsigned char* der = nullptr;
  int len = i2d_X509_NAME(n, &der);
  std::string out(reinterpret_cast<char*>(der), len > 0 ? len : 0);
  OPENSSL_free(der);
  return out;
}

// Revocation is looked up by the issuer *name*, not its DER bytes: a
// certificate whose issuer is the CRL's issuer in another encoding is still
// found revoked (it used to pass: fail-open).
TEST_F(AuthTest, RevocationMatchesIssuerNamesNotTheirEncoding) {
  X509* cert = CertWithPrintableIssuer(certs_, 0x7e57);
  ASSERT_NE(cert, nullptr);
  X509* ca = nullptr;
  {
    FILE* f = fopen((certs_ + "/ca.pem").c_str(), "r");
    ASSERT_NE(f, nullptr);
    ca = PEM_read_X509(f, nullptr, nullptr, nullptr);
    fclose(f);
  }
  ASSERT_NE(ca, nullptr);
  // The premise: equal names, different bytes.
  ASSERT_EQ(X509_NAME_cmp(X509_get_issuer_name(cert), X509_get_subject_name(ca)), 0);
  ASSERT_NE(NameDerOf(X509_get_issuer_name(cert)), NameDerOf(X509_get_subject_name(ca)));
  X509_free(ca);
  const std::string path = dir_ + "/printable.pem";
  {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(PEM_write_X509(f, cert), 1);
    fclose(f);
  }
  auto crl = Crl();
  ASSERT_NE(crl, nullptr);
  EXPECT_TRUE(crl->CheckPeer(cert).ok());
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + path), 0);  // openssl verify accepts it
  ASSERT_TRUE(crl->Reload().ok());
  EXPECT_EQ(crl->revoked_count(), 1u);
  absl::Status st = crl->CheckPeer(cert);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(crl->IsRevoked(X509_get_issuer_name(cert), "7E57"));
  X509_free(cert);
}

// CRLs are ordered by their CRL Number, and the highest one accepted per CA
// is kept in a state file: after a restart, a validly signed older CRL (e.g.
// the empty one written with the CA) is refused.
TEST_F(AuthTest, OlderCrlRefusedAfterRestart) {
  const std::string path = certs_ + "/crl.pem", ca = certs_ + "/ca.pem";
  const std::string state = dir_ + "/state/crl-numbers";  // dir made on demand
  const std::string empty_crl = Slurp(path);
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/admin.pem"), 0);
  {
    auto crl = RevocationList::Open(path, ca, state);
    ASSERT_TRUE(crl.ok()) << crl.status();
    EXPECT_EQ((*crl)->revoked_count(), 1u);
  }
  EXPECT_NE(Slurp(state).find(" 1001\n"), std::string::npos) << Slurp(state);
  Spit(path, empty_crl);  // CRL Number 1000
  auto old = RevocationList::Open(path, ca, state);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kInvalidArgument) << old.status();
  EXPECT_NE(old.status().message().find("CRL Number 1000, lower than 1001"),
            std::string::npos)
      << old.status();
  // What protects is the record: a server without it takes the old file.
  EXPECT_TRUE(RevocationList::Open(path, ca, dir_ + "/other-state").ok());
  // A newer CRL is accepted and recorded.
  ASSERT_EQ(GenCerts(certs_ + " --crl"), 0);
  auto newer = RevocationList::Open(path, ca, state);
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ((*newer)->revoked_count(), 1u);
  EXPECT_NE(Slurp(state).find(" 1002\n"), std::string::npos) << Slurp(state);
  // A new CA of the same name (another key) starts its own sequence.
  auto other = RevocationList::Open(*other_ + "/certs/crl.pem", *other_ + "/certs/ca.pem",
                                    state);
  EXPECT_TRUE(other.ok()) << other.status();
  // A damaged record stops the start rather than being ignored.
  Spit(state, "zz 12\n");
  auto damaged = RevocationList::Open(path, ca, state);
  EXPECT_NE(damaged.status().message().find("remove the file"), std::string::npos)
      << damaged.status();
}

// Two CRLs with the same lastUpdate second: the lower CRL Number is older
// (the one-second lastUpdate used to let it replace the newer one).
TEST_F(AuthTest, SameLastUpdateOlderNumberRefused) {
  const std::string path = certs_ + "/crl.pem";
  // openssl ca as gen-certs runs it, with a fixed lastUpdate.
  auto gencrl = [&](const std::string& out) {
    return system(("openssl ca -config " + certs_ + "/ca-private/ca.cnf -gencrl "
                   "-crl_lastupdate 20260101000000Z -out " + out + " 2>/dev/null")
                      .c_str());
  };
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/admin.pem"), 0);
  ASSERT_EQ(gencrl(dir_ + "/a.pem"), 0);  // admin revoked
  ASSERT_EQ(GenCerts(certs_ + " --revoke " + certs_ + "/kdc.pem"), 0);
  ASSERT_EQ(gencrl(path), 0);  // admin and kdc revoked, same lastUpdate
  auto crl = Crl();
  ASSERT_NE(crl, nullptr);
  EXPECT_EQ(crl->revoked_count(), 2u);
  Spit(path, Slurp(dir_ + "/a.pem"));
  absl::Status st = crl->Reload();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("lower than"), std::string::npos) << st;
  EXPECT_EQ(crl->revoked_count(), 2u);  // the kdc stays revoked
}

// A CRL without a CRL Number cannot be ordered: refused.
TEST_F(AuthTest, CrlWithoutNumberRefused) {
  ASSERT_EQ(GenCerts(certs_ + " --crl"), 0);  // writes ca-private/ca.cnf here
  std::string cnf = Slurp(certs_ + "/ca-private/ca.cnf");
  cnf = cnf.substr(0, cnf.find("crlnumber =")) + cnf.substr(cnf.find("\n", cnf.find("crlnumber =")) + 1);
  Spit(dir_ + "/nonum.cnf", cnf);
  ASSERT_EQ(system(("openssl ca -config " + dir_ + "/nonum.cnf -gencrl -out " + dir_ +
                    "/nonum.pem 2>/dev/null")
                       .c_str()),
            0);
  auto crl = RevocationList::Open(dir_ + "/nonum.pem", certs_ + "/ca.pem");
  EXPECT_FALSE(crl.ok());
  EXPECT_NE(crl.status().message().find("no valid CRL Number"), std::string::npos)
      << crl.status();
}

// A CA of --ca without a CRL in the file is logged at load: revocation is
// not checked for its certificates (not an error: the file may cover only
// some of the CAs).
TEST_F(AuthTest, CaWithoutCrlIsLogged) {
  const std::string two_cas = dir_ + "/two-cas.pem";
  Spit(two_cas, Slurp(certs_ + "/ca.pem") + Slurp(*other_ + "/certs/ca.pem"));
  for (bool both : {false, true}) {
    ::testing::internal::CaptureStderr();
    auto crl = RevocationList::Open(certs_ + "/crl.pem", both ? two_cas : certs_ + "/ca.pem");
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(crl.ok()) << crl.status();
    EXPECT_EQ(log.find("certificate 1 of the CA file"), std::string::npos) << log;
    EXPECT_EQ(log.find("holds no CRL of the CA /CN=kmpc-test-ca (certificate 2 of the CA "
                       "file): certificates it issued are NOT checked for revocation") !=
                  std::string::npos,
              both)
        << log;
  }
}

// ---- The CRL parser (RevocationList::Parse) on CRLs made by `openssl ca`
// for a one-key test CA: the checks a CRL must pass before its revocations
// are trusted, and how several CRLs of one file combine.

class CrlParseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::kmpc::testing::MakeTempDir("crl-parse-test");
    ASSERT_FALSE(dir_.empty());
    ASSERT_EQ(Run("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " +
                  dir_ + "/ca.key"),
              0);
  }
  static int Run(const std::string& cmd) {
    return system((cmd + " >/dev/null 2>&1").c_str());
  }
  // A CA certificate of the one key, with keyUsage `ku` ("" for none).
  std::string Ca(const std::string& name, const std::string& ku) {
    const std::string pem = dir_ + "/" + name + ".pem";
    EXPECT_EQ(Run("openssl req -x509 -new -key " + dir_ + "/ca.key -out " + pem +
                  " -subj /CN=kmpc-crl-test-ca -days 2 -addext "
                  "basicConstraints=critical,CA:TRUE" +
                  (ku.empty() ? "" : " -addext keyUsage=critical," + ku)),
              0);
    return pem;
  }
  // A CRL signed by the key (issuer: the CA certificate `ca`), numbered
  // `number`, revoking the hex `serials`, with the extra CRL extension
  // line `ext` and `openssl ca` options `args`.
  std::string Crl(const std::string& name, const std::string& ca, int number,
                  const std::vector<std::string>& serials, const std::string& ext = "",
                  const std::string& args = "") {
    std::string index;
    for (const std::string& s : serials)
      absl::StrAppend(&index, "R\t301231235959Z\t200101000000Z\t", s, "\tunknown\t/CN=x\n");
    Spit(dir_ + "/index.txt", index);
    Spit(dir_ + "/crlnumber", absl::StrCat(absl::Hex(number, absl::kZeroPad2), "\n"));
    Spit(dir_ + "/ca.cnf", absl::StrCat("[ca]\ndefault_ca = c\n[c]\ndatabase = ", dir_,
                                        "/index.txt\ncrlnumber = ", dir_,
                                        "/crlnumber\ndefault_md = sha256\n"
                                        "default_crl_days = 1\ncrl_extensions = ext\n"
                                        "[ext]\nauthorityKeyIdentifier = keyid:always\n",
                                        ext, "\n"));
    const std::string out = dir_ + "/" + name + ".crl";
    EXPECT_EQ(Run("openssl ca -batch -config " + dir_ + "/ca.cnf -gencrl -keyfile " + dir_ +
                  "/ca.key -cert " + ca + " -out " + out + " " + args),
              0);
    return out;
  }
  std::string dir_;
};

// RFC 5280 4.2.1.3: a CA whose keyUsage lacks cRLSign cannot sign CRLs;
// the same key with cRLSign, or with no keyUsage at all, can.
TEST_F(CrlParseTest, SignerMustBeAllowedToSignCrls) {
  const std::string no_crl_sign = Ca("no-crl-sign", "keyCertSign");
  const std::string crl_sign = Ca("crl-sign", "keyCertSign,cRLSign");
  const std::string no_ku = Ca("no-ku", "");
  const std::string crl = Crl("one", crl_sign, 1, {"0A"});
  auto refused = RevocationList::Open(crl, no_crl_sign, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is not signed by a CA of --ca"),
            std::string::npos)
      << refused.status();
  for (const std::string& ca : {crl_sign, no_ku}) {
    auto ok = RevocationList::Open(crl, ca, "");
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->revoked_count(), 1u);
  }
}

TEST_F(CrlParseTest, DeltaCrlRefused) {
  const std::string ca = Ca("ca", "keyCertSign,cRLSign");
  // deltaCRLIndicator (RFC 5280 5.2.4, OID 2.5.29.27), base CRL number 1.
  const std::string delta = Crl("delta", ca, 2, {"0B"}, "2.5.29.27 = critical,DER:02:01:01");
  auto crl = RevocationList::Open(delta, ca, "");
  EXPECT_EQ(crl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(crl.status().message().find("delta CRLs are not supported"), std::string::npos)
      << crl.status();
}

// An expired CRL (nextUpdate passed) is still loaded: its revocations stay
// in force, with a warning to issue a fresh one.
TEST_F(CrlParseTest, ExpiredCrlStaysInForceWithAWarning) {
  const std::string ca = Ca("ca", "keyCertSign,cRLSign");
  const std::string old = Crl("old", ca, 3, {"0A", "0C"}, "",
                              "-crl_lastupdate 20200101000000Z "
                              "-crl_nextupdate 20200102000000Z");
  ::testing::internal::CaptureStderr();
  auto crl = RevocationList::Open(old, ca, "");
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(crl.ok()) << crl.status();
  EXPECT_EQ((*crl)->revoked_count(), 2u);
  EXPECT_NE(log.find("CRL 1 expired (nextUpdate 20200102000000Z)"), std::string::npos)
      << log;
}

// Several CRLs of one CA in one file: their revocations add up (each serial
// counted once), whatever the order of their CRL Numbers.
TEST_F(CrlParseTest, CrlsOfOneCaAreMerged) {
  const std::string ca = Ca("ca", "keyCertSign,cRLSign");
  const std::string first = Slurp(Crl("first", ca, 1, {"0A", "0B"}));
  const std::string second = Slurp(Crl("second", ca, 2, {"0B", "0C", "0D"}));
  for (const std::string& both : {first + second, second + first}) {
    Spit(dir_ + "/both.crl", both);
    auto crl = RevocationList::Open(dir_ + "/both.crl", ca, "");
    ASSERT_TRUE(crl.ok()) << crl.status();
    EXPECT_EQ((*crl)->revoked_count(), 4u);
  }
  // The highest CRL Number is the one remembered against rollback: CRL 1
  // alone is refused after the pair was accepted with the same state file.
  Spit(dir_ + "/both.crl", first + second);
  const std::string state = dir_ + "/crl-numbers";
  ASSERT_TRUE(RevocationList::Open(dir_ + "/both.crl", ca, state).ok());
  auto rolled_back = RevocationList::Open(dir_ + "/first.crl", ca, state);
  EXPECT_FALSE(rolled_back.ok());
  EXPECT_NE(rolled_back.status().message().find("an older CRL (rollback?)"),
            std::string::npos)
      << rolled_back.status();
}

TEST(ParseClientPolicyTest, Errors) {
  EXPECT_FALSE(ParseClientPolicy("", nullptr).ok());
  EXPECT_FALSE(ParseClientPolicy("kmpc-admin,sha256:abcd", nullptr).ok());
  EXPECT_FALSE(ParseClientPolicy(absl::StrCat("kmpc-admin,sha256:", std::string(63, 'a'),
                                              "g"),
                                 nullptr)
                   .ok());
  EXPECT_FALSE(ParseClientPolicy(absl::StrCat("sha256:", std::string(64, 'a')), nullptr)
                   .ok());  // pins alone admit no CN
  EXPECT_FALSE(ParseClientPolicy("kmpc-admin,md5:00", nullptr).ok());
  auto p = ParseClientPolicy(
      absl::StrCat(" kmpc-admin , other,SHA256:", std::string(64, 'A')), nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->names, (std::vector<std::string>{"kmpc-admin", "other"}));
  ASSERT_EQ(p->pins.size(), 1u);
  EXPECT_EQ(p->pins[0][0], 0xaa);
}

}  // namespace
}  // namespace kmpc::service
