// TLS connections of the ring (net/tls_conn.h) on loopback with
// deploy/gen-certs.sh's certificates: mutual authentication, the expected
// party's identity enforced on the dialer's side, check_peer refusing a
// peer, data both ways, and the poll helpers.
#include "net/tls_conn.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace kmpc::net {
namespace {

absl::Time In(absl::Duration d) { return absl::Now() + d; }

class TlsConnTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new std::string(kmpc::testing::MakeTestCerts("tls-conn-test") + "/certs");
    ASSERT_NE(*certs_, "/certs");
  }
  static TlsFiles Files(int party) {
    const std::string n = absl::StrCat(*certs_, "/party-", party);
    return {n + ".pem", n + ".key", *certs_ + "/ca.pem", nullptr};
  }
  void SetUp() override {
    lfd_ = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(lfd_, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(lfd_, 4), 0);
    socklen_t len = sizeof(a);
    getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    addr_ = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  }
  void TearDown() override { close(lfd_); }
  // Accepts one connection as `party` with check (may be null).
  std::future<absl::StatusOr<std::unique_ptr<TlsConn>>> AcceptAs(
      int party, std::function<absl::Status(X509*)> check = nullptr) {
    return std::async(std::launch::async,
                      [this, party, check]() -> absl::StatusOr<std::unique_ptr<TlsConn>> {
                        TlsFiles f = Files(party);
                        f.check_peer = check;
                        auto ctx = TlsContext::Create(f, /*server=*/true);
                        if (!ctx.ok()) return ctx.status();
                        server_ctx_ = std::move(*ctx);
                        int fd = accept(lfd_, nullptr, nullptr);
                        if (fd < 0) return absl::InternalError("accept");
                        return TlsConn::Accept(*server_ctx_, fd, In(absl::Seconds(5)));
                      });
  }

  static std::string* certs_;
  int lfd_ = -1;
  std::string addr_;
  std::unique_ptr<TlsContext> server_ctx_;
};
std::string* TlsConnTest::certs_ = nullptr;

TEST(TlsConnNames, PartyIdentityAndRemainingMs) {
  EXPECT_EQ(PartyIdentity(2), "kmpc-party-2");
  EXPECT_EQ(RemainingMs(absl::Now() - absl::Seconds(1)), 0);
  const int ms = RemainingMs(In(absl::Milliseconds(250)));
  EXPECT_GT(ms, 200);
  EXPECT_LE(ms, 251);
}

TEST_F(TlsConnTest, MutualAuthenticationAndDataBothWays) {
  auto accepted = AcceptAs(1);
  auto ctx = TlsContext::Create(Files(2), /*server=*/false);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto dialed = TlsConn::Dial(**ctx, addr_, PartyIdentity(1), In(absl::Seconds(5)));
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*dialed)->peer_identity(), "kmpc-party-1");
  EXPECT_EQ((*server)->peer_identity(), "kmpc-party-2");
  EXPECT_TRUE((*server)->RecheckPeer().ok());  // no check_peer: OK
  const std::vector<uint8_t> msg(100000, 0x3c);  // several TLS records
  auto w = std::async(std::launch::async, [&] {
    return (*dialed)->WriteAll(msg.data(), msg.size(), In(absl::Seconds(5)));
  });
  std::vector<uint8_t> in(msg.size());
  ASSERT_TRUE((*server)->ReadAll(in.data(), in.size(), In(absl::Seconds(5))).ok());
  ASSERT_TRUE(w.get().ok());
  EXPECT_EQ(in, msg);
  const uint8_t back[3] = {1, 2, 3};
  ASSERT_TRUE((*server)->WriteAll(back, 3, In(absl::Seconds(5))).ok());
  uint8_t got[3] = {};
  ASSERT_TRUE((*dialed)->ReadAll(got, 3, In(absl::Seconds(5))).ok());
  EXPECT_EQ(got[2], 3);
  // Nothing more comes: a read gives up at its deadline.
  EXPECT_FALSE((*dialed)->ReadAll(got, 1, In(absl::Milliseconds(100))).ok());
}

TEST_F(TlsConnTest, AServerOfAnotherPartyIsRefusedByTheDialer) {
  auto accepted = AcceptAs(0);
  auto ctx = TlsContext::Create(Files(2), /*server=*/false);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto dialed = TlsConn::Dial(**ctx, addr_, PartyIdentity(1), In(absl::Seconds(5)));
  ASSERT_FALSE(dialed.ok());
  EXPECT_TRUE(absl::StrContains(dialed.status().message(), "kmpc-party-0") ||
              absl::StrContains(dialed.status().message(), "kmpc-party-1"))
      << dialed.status();
  accepted.wait();
}

TEST_F(TlsConnTest, CheckPeerRefusesTheHandshake) {
  auto accepted = AcceptAs(1, [](X509*) {
    return absl::PermissionDeniedError("revoked");
  });
  auto ctx = TlsContext::Create(Files(2), /*server=*/false);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto dialed = TlsConn::Dial(**ctx, addr_, PartyIdentity(1), In(absl::Seconds(5)));
  auto server = accepted.get();
  EXPECT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "revoked")) << server.status();
}

TEST_F(TlsConnTest, MissingCertificateFilesAreAnError) {
  TlsFiles f = Files(1);
  f.cert = *certs_ + "/no-such.pem";
  EXPECT_FALSE(TlsContext::Create(f, /*server=*/true).ok());
}

}  // namespace
}  // namespace kmpc::net
