// The cluster client library against in-process Admin servers over mTLS
// (deploy/gen-certs.sh's certificates): the PEM files' errors name the file
// and never quote a key; a server presenting another party's certificate
// is refused before any request reaches it, found by the certificate
// check's own record (never by gRPC's message text), and only for the
// failure the check refused; a PutKey that fails on one server is taken
// off every server that stored it or may have.
#include "client/admin_client.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/channels.h"
#include "fake_admin.h"
#include "party_server.h"
#include "test_util.h"  // mpc-server/test/server: MakeTestCerts, FreeLoopbackPort

namespace kmpc::client {
namespace {

namespace pb = kmpc::v1;
using kmpc::testing::FreeLoopbackPort;

using kmpc::testing::ReadFile;
using kmpc::testing::FakeAdmin;
using kmpc::testing::PutBehaviour;
using kmpc::testing::StartPartyServer;

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

class ClusterClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(kmpc::testing::MakeTestCerts("cluster-client"));
    ASSERT_FALSE(dir_->empty()) << "deploy/gen-certs.sh failed";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Dir() { return *dir_; }
  static std::string Certs() { return *dir_ + "/certs"; }

  // Three fake servers; position i presents party cert_party[i]'s
  // certificate.
  void StartServers(std::array<int, 3> cert_party = {0, 1, 2}) {
    for (int i = 0; i < 3; ++i) {
      ports_[i] = FreeLoopbackPort();
      servers_[i] = std::make_unique<FakeAdmin>(Certs(), cert_party[i], ports_[i]);
    }
  }

  ClusterConfig Config() const {
    ClusterConfig c;
    for (int i = 0; i < 3; ++i) c.servers[i] = absl::StrCat("127.0.0.1:", ports_[i]);
    c.ca = Certs() + "/ca.pem";
    c.cert = Certs() + "/admin.pem";
    c.key = Certs() + "/admin.key";
    c.rpc_timeout = absl::Seconds(10);
    return c;
  }

  std::unique_ptr<AdminClient> Client(const ClusterConfig& cfg) {
    auto c = AdminClient::Connect(cfg);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  [[noreturn]] static void ExitRemovingDir(int code) {
    std::error_code ec;
    std::filesystem::remove_all(Dir(), ec);
    std::_Exit(code);
  }

  static std::string KeyId(char fill) { return std::string(32, fill); }

  std::array<int, 3> ports_{};
  std::array<std::unique_ptr<FakeAdmin>, 3> servers_;
  static std::string* dir_;
};
std::string* ClusterClientTest::dir_ = nullptr;

const std::array<uint8_t, 16> kKey = {1, 2, 3, 4, 5, 6, 7, 8,
                                      9, 10, 11, 12, 13, 14, 15, 16};

TEST_F(ClusterClientTest, PemErrorsNameTheFileAndNeverQuoteTheKey) {
  ports_ = {1, 2, 3};
  const std::string key_text = ReadFile(Certs() + "/admin.key");
  ASSERT_FALSE(key_text.empty());
  auto expect_error = [&](const ClusterConfig& cfg, const std::string& want) {
    auto c = ClusterChannels::Open(cfg);
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().find("PRIVATE KEY"), std::string::npos);
    EXPECT_EQ(c.status().message().find(key_text.substr(30, 20)), std::string::npos);
  };
  ClusterConfig cfg = Config();
  cfg.ca = Dir() + "/missing-ca.pem";
  expect_error(cfg, "cannot read the CA certificate " + cfg.ca +
                        ": No such file or directory");
  cfg = Config();
  cfg.cert = Dir() + "/empty.pem";
  Write(cfg.cert, "");
  expect_error(cfg, "the client certificate " + cfg.cert + " is empty");
  cfg = Config();
  cfg.ca = Dir() + "/not-pem.pem";
  Write(cfg.ca, "hello\n");
  expect_error(cfg, "the CA certificate " + cfg.ca + " holds no PEM block");
  cfg = Config();
  cfg.cert = cfg.key;  // a key where the certificate belongs
  expect_error(cfg, "the client certificate " + cfg.cert +
                        " holds no X.509 certificate");
  cfg = Config();
  cfg.key = cfg.cert;  // a certificate where the key belongs
  expect_error(cfg, "the client private key " + cfg.key +
                        " is not an unencrypted PEM private key");
  cfg = Config();
  cfg.key = Certs() + "/kdc.key";  // another certificate's key
  expect_error(cfg, "the client private key " + cfg.key +
                        " does not belong to the client certificate " + cfg.cert);
  cfg = Config();
  cfg.key = Certs();  // a directory
  expect_error(cfg, "cannot read the client private key " + cfg.key);
  // The good files.
  EXPECT_TRUE(ClusterChannels::Open(Config()).ok());
}

// errno in a thread right after it waited for an absl Mutex behind another
// waiter. The first such wait of a process (Debian's abseil 20220623: a
// thread enqueued behind a waiter reads its scheduling priority, and the
// cycle clock's frequency, computed once) opens kFreqFile. gRPC 1.51 reads
// a failed connect's errno only after such waits (channels.cc), so an
// ENOENT left here became a connect error. Up to `rounds` tries, in case a
// loaded machine let the first waiter in late; ENOENT ends them.
constexpr char kFreqFile[] = "/sys/devices/system/cpu/cpu0/tsc_freq_khz";

int ErrnoAfterWaitingBehindAWaiter(int rounds) {
  int e = 0;
  for (int r = 0; r < rounds && e != ENOENT; ++r) {
    absl::Mutex mu;
    absl::Notification held;
    std::thread holder([&] {
      mu.Lock();
      held.Notify();
      absl::SleepFor(absl::Milliseconds(300));
      mu.Unlock();
    });
    held.WaitForNotification();
    std::thread first([&] {
      mu.Lock();
      mu.Unlock();
    });
    absl::SleepFor(absl::Milliseconds(100));  // first is queued by now
    errno = 0;
    mu.Lock();
    e = errno;
    mu.Unlock();
    holder.join();
    first.join();
  }
  return e;
}

// Each runs in a fresh process (death tests, "threadsafe" style re-runs the
// binary), where no contended wait has happened yet. The child leaves by
// _Exit (no atexit handlers with gRPC's threads running), so it removes
// its own SetUpTestSuite directory first.
TEST_F(ClusterClientTest, AFirstQueuedWaitLeavesEnoentWhereTheFileIsAbsent) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool absent = access(kFreqFile, F_OK) != 0;
        const bool enoent = ErrnoAfterWaitingBehindAWaiter(5) == ENOENT;
        ExitRemovingDir(enoent == absent ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(ClusterClientTest, OpenLeavesNoStaleEnoentForAFailedConnect) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // No connection is made (connect_wait 0), so the ports need no server.
        if (!ClusterChannels::Open(Config()).ok()) ExitRemovingDir(2);
        ExitRemovingDir(ErrnoAfterWaitingBehindAWaiter(5) == ENOENT ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(ClusterClientTest, CallerMayNotSetTheTargetName) {
  ports_ = {1, 2, 3};
  ChannelOptions o;
  o.args.SetSslTargetNameOverride("localhost");
  auto c = ClusterChannels::Open(Config(), o);
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
}

// A wrong server is what the certificate check refused, not what gRPC's
// message says: a failure whose text names a "Peer name" (gRPC's words for
// a host name mismatch) on a channel whose check refused nothing is no
// wrong party.
TEST_F(ClusterClientTest, WrongPartyIsTheChecksRecordNotTheMessageText) {
  ports_ = {1, 2, 3};
  auto c = ClusterChannels::Open(Config());
  ASSERT_TRUE(c.ok()) << c.status();
  const grpc::Status st(grpc::StatusCode::UNAVAILABLE,
                        "Peer name kmpc-party-1 does not match kmpc-party-0");
  EXPECT_EQ(c->Classify(0, st), RpcFailure::kUnreachable);
  const absl::Status e = c->RpcError(0, "Admin", "Health", st);
  EXPECT_TRUE(absl::IsUnavailable(e)) << e;
  EXPECT_EQ(c->WrongPartyRefusals(0), 0);
  EXPECT_EQ(c->Classify(0, grpc::Status::OK), RpcFailure::kNone);
  EXPECT_EQ(c->Classify(0, grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "")),
            RpcFailure::kPermissionDenied);
}

// The three channels of a fresh client make their first connections at
// once (Health calls the three servers in parallel), each with its own TLS
// security connector: every one has its certificates when it handshakes.
// (With one certificate provider for the three channels, gRPC 1.51 handed
// the certificates to a second channel's connector only after the first
// channel's, and a connector that handshook meanwhile failed with "Failed
// to create security handshaker".)
TEST_F(ClusterClientTest, ChannelsConnectingAtOnceAllHandshake) {
  StartServers();
  for (int round = 0; round < 40; ++round) {
    auto c = Client(Config());
    ASSERT_NE(c, nullptr);
    auto h = c->Health();
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(h[i].ok()) << "round " << round << ": " << h[i].status();
  }
}

TEST_F(ClusterClientTest, PinnedPartiesAnswer) {
  StartServers();
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->CheckReachable().ok());
}

TEST_F(ClusterClientTest, ServerWithAnotherPartysCertificateIsRefused) {
  // Positions 0 and 1 swapped: each presents a valid certificate of the
  // cluster's CA, but not its position's party's.
  StartServers({1, 0, 2});
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  auto h = c->Health();
  for (int i : {0, 1}) {
    ASSERT_FALSE(h[i].ok());
    EXPECT_GE(c->channels().WrongPartyRefusals(i), 1);
    EXPECT_TRUE(absl::IsPermissionDenied(h[i].status())) << h[i].status();
    // The check's mark is its own: it does not reach the message.
    EXPECT_EQ(h[i].status().message().find("party check"), std::string::npos)
        << h[i].status();
    EXPECT_NE(h[i].status().message().find(absl::StrCat(
                  "the server at position ", i, " (127.0.0.1:", ports_[i],
                  ") is not party ", i)),
              std::string::npos)
        << h[i].status();
  }
  EXPECT_TRUE(h[2].ok()) << h[2].status();
  EXPECT_EQ(c->channels().WrongPartyRefusals(2), 0);
  std::array<absl::Status, 3> each;
  absl::Status st = c->PutKey(engine::Cipher::kAes128, kKey, {KeyId('a'), 1, "x"}, &each);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_TRUE(absl::IsPermissionDenied(each[0])) << each[0];
  // No request (no share) reached the wrong parties.
  EXPECT_EQ(servers_[0]->calls(), 0);
  EXPECT_EQ(servers_[1]->calls(), 0);
  // Party 2 took its share, and gave it back.
  EXPECT_FALSE(servers_[2]->Has(KeyId('a')));
  EXPECT_GE(servers_[2]->deletes(), 1);
}

// Calls Health until position 0's failure is no longer `was` (gRPC
// reports a channel's last connection failure until it tried again), at
// most 10 s; returns position 0's last status.
absl::Status NextCause(AdminClient* c, bool (*was)(const absl::Status&)) {
  const absl::Time end = absl::Now() + absl::Seconds(10);
  absl::Status st;
  do {
    st = c->Health()[0].status();
    if (!was(st)) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < end);
  return st;
}

// The check's record speaks only for the failure it refused: after a
// wrong server, the same position's server down is unreachable, and then
// a self-signed server there a failed TLS handshake, each reported as
// what it is (a record that outlived its refusal turned both into "not
// party 0", kPermissionDenied, and so disabled the KDC module's
// first-connect wait, which only waits for kUnavailable).
TEST_F(ClusterClientTest, WrongPartyThenDownThenUntrustedEachHasItsOwnCause) {
  StartServers({1, 1, 2});
  ChannelOptions o;
  o.args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  o.args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  auto c = AdminClient::Connect(Config(), o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string at0 = absl::StrCat("127.0.0.1:", ports_[0]);
  absl::Status st = (*c)->Health()[0].status();
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_NE(st.message().find("the server at position 0 (" + at0 + ") is not party 0"),
            std::string::npos)
      << st;
  const int refused = (*c)->channels().WrongPartyRefusals(0);
  EXPECT_GE(refused, 1);

  servers_[0].reset();
  st = NextCause(c->get(), [](const absl::Status& s) { return absl::IsPermissionDenied(s); });
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find("server 0 (" + at0 + ") is unreachable"), std::string::npos)
      << st;

  const std::string self_signed = kmpc::testing::MakeSelfSignedPartyCerts(Certs(), 0);
  ASSERT_FALSE(self_signed.empty()) << "openssl req failed";
  servers_[0] = std::make_unique<FakeAdmin>(self_signed, 0, ports_[0]);
  st = NextCause(c->get(), [](const absl::Status& s) { return absl::IsUnavailable(s); });
  EXPECT_TRUE(absl::IsUnauthenticated(st)) << st;
  EXPECT_NE(st.message().find("server 0 (" + at0 + "): TLS handshake failed"),
            std::string::npos)
      << st;
  // Neither later failure was a refusal of the check; nothing was sent.
  EXPECT_EQ((*c)->channels().WrongPartyRefusals(0), refused);
  EXPECT_EQ(servers_[0]->calls(), 0);
}

TEST_F(ClusterClientTest, PutKeyStoresPartyIsViewOnServerI) {
  StartServers();
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->PutKey(engine::Cipher::kAes128, kKey, {KeyId('b'), 2, "y"}).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(servers_[i]->Has(KeyId('b')));
    EXPECT_EQ(servers_[i]->PartyOf(KeyId('b')), i);
    EXPECT_EQ(servers_[i]->deletes(), 0);
  }
  EXPECT_TRUE(c->DeleteKey(KeyId('b')).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(servers_[i]->Has(KeyId('b')));
  // Gone everywhere: deleting again is done, each server says NOT_FOUND.
  EXPECT_TRUE(c->DeleteKey(KeyId('b')).ok());
  auto each = c->DeleteKeyEach(KeyId('b'));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(absl::IsNotFound(each[i])) << each[i];
}

TEST_F(ClusterClientTest, PutKeyFailingOnOneServerIsDeletedFromAllThree) {
  StartServers();
  servers_[1]->set_put(PutBehaviour::kFail);
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  std::array<absl::Status, 3> each;
  absl::Status st = c->PutKey(engine::Cipher::kAes256,
                              std::array<uint8_t, 32>{}, {KeyId('c'), 1, "z"}, &each);
  EXPECT_TRUE(absl::IsInternal(st)) << st;
  EXPECT_TRUE(each[0].ok() && each[2].ok());
  EXPECT_TRUE(absl::IsInternal(each[1])) << each[1];
  const std::string who = absl::StrCat("server 1 (127.0.0.1:", ports_[1], ")");
  EXPECT_NE(st.message().find(who + ": PutKey failed: disk full"), std::string::npos) << st;
  EXPECT_NE(st.message().find("the shares already stored on server 0, 2 were "
                              "removed again"),
            std::string::npos)
      << st;
  EXPECT_EQ(st.message().find("WARNING"), std::string::npos) << st;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(servers_[i]->Has(KeyId('c'))) << i;
    EXPECT_EQ(servers_[i]->deletes(), 1) << i;  // the failed one is asked too
  }
}

TEST_F(ClusterClientTest, TimedOutPutKeyIsDeletedThere) {
  StartServers();
  // Server 2 stores the key but answers after the deadline: the client
  // cannot tell it from a PutKey that stored nothing.
  servers_[2]->set_put(PutBehaviour::kStoreThenHang);
  ClusterConfig cfg = Config();
  cfg.rpc_timeout = absl::Milliseconds(1500);
  auto c = Client(cfg);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->CheckReachable().ok());  // connected before the timed call
  absl::Status st = c->PutKey(engine::Cipher::kAes128, kKey, {KeyId('d'), 1, ""});
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  EXPECT_NE(st.message().find(absl::StrCat("server 2 (127.0.0.1:", ports_[2],
                                           ") did not answer PutKey within 1500 ms")),
            std::string::npos)
      << st;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(servers_[i]->Has(KeyId('d'))) << i;
  EXPECT_EQ(st.message().find("WARNING"), std::string::npos) << st;
}

TEST_F(ClusterClientTest, FailedPutKeyLeavesAnEarlierKeyUnderTheIdAlone) {
  StartServers();
  // Server 1 holds an earlier key under the id: it answers ALREADY_EXISTS,
  // stores nothing, and its key must survive the clean-up.
  servers_[1]->Preload(KeyId('e'));
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  absl::Status st = c->PutKey(engine::Cipher::kAes128, kKey, {KeyId('e'), 1, ""});
  EXPECT_TRUE(absl::IsAlreadyExists(st)) << st;
  EXPECT_TRUE(servers_[1]->Has(KeyId('e')));
  EXPECT_EQ(servers_[1]->PartyOf(KeyId('e')), -1);
  EXPECT_EQ(servers_[1]->deletes(), 0);
  EXPECT_FALSE(servers_[0]->Has(KeyId('e')));
  EXPECT_FALSE(servers_[2]->Has(KeyId('e')));
}

TEST_F(ClusterClientTest, UnreachableServerIsNamed) {
  StartServers();
  servers_[2].reset();
  auto c = Client(Config());
  ASSERT_NE(c, nullptr);
  absl::Status st = c->CheckReachable();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find(absl::StrCat("server 2 (127.0.0.1:", ports_[2],
                                           ") is unreachable")),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace kmpc::client
