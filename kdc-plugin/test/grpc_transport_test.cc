// GrpcTransport against in-process gRPC servers over mTLS (deploy/
// gen-certs.sh's certificates): a first connection that fails transiently
// does not fail the call; a server of the wrong party is refused at once,
// and only that failure is read as one (the same party down afterwards is
// waited for as a failed first connection); a party down from the start fails calls by their deadline, then at once; a
// party that goes down after it was connected fails them at once; Shutdown
// ends a call that waits for a connection.
#include "grpc_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "batch_error.h"
#include "party_server.h"
#include "test_util.h"  // mpc-server/test/server: MakeTestCerts, FreeLoopbackPort
#include "openssl_at_exit.h"

namespace kmpc::kdc {
namespace {

using kmpc::testing::FreeLoopbackPort;

using kmpc::testing::ReadFile;
using kmpc::testing::StartPartyServer;

class TransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(kmpc::testing::MakeTestCerts("kdc-transport"));
    ASSERT_FALSE(dir_->empty()) << "deploy/gen-certs.sh failed";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Certs() { return *dir_ + "/certs"; }

  // Party 0 at `port`; parties 1 and 2 at ports nobody listens on (the
  // tests call party 0 only).
  std::unique_ptr<GrpcTransport> Make(int port) {
    std::array<std::string, 3> servers = {
        absl::StrCat("127.0.0.1:", port),
        absl::StrCat("127.0.0.1:", FreeLoopbackPort()),
        absl::StrCat("127.0.0.1:", FreeLoopbackPort())};
    auto t = GrpcTransport::Create(servers, Certs() + "/ca.pem",
                                   Certs() + "/kdc.pem", Certs() + "/kdc.key");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // One Run to party 0; its status and how long it took.
  static absl::Status RunOnce(GrpcTransport* t, absl::Duration deadline,
                              absl::Duration* took) {
    kmpc::v1::RunRequest req;
    kmpc::v1::RunResponse resp;
    std::promise<absl::Status> p;
    const absl::Time t0 = absl::Now();
    t->Run(0, req, &resp, t0 + deadline,
           [&p](CallStatus s) { p.set_value(std::move(s.status)); });
    absl::Status s = p.get_future().get();
    *took = absl::Now() - t0;
    return s;
  }

  // Runs on party 0 (deadline 800 ms each) until a call's failure is no
  // longer `was` (gRPC reports the channel's last connection failure until
  // it tried again), at most 10 s; the last call's status.
  static absl::Status NextCause(GrpcTransport* t,
                                bool (*was)(const absl::Status&)) {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    absl::Status s;
    absl::Duration took;
    do {
      s = RunOnce(t, absl::Milliseconds(800), &took);
      if (!was(s)) break;
      absl::SleepFor(absl::Milliseconds(50));
    } while (absl::Now() < end);
    return s;
  }

  static std::string* dir_;
};
std::string* TransportTest::dir_ = nullptr;

// A KeyOps server that answers every call with `answer` (OK by default),
// presenting the certificate of party `cert_party`.
class FakeParty {
 public:
  FakeParty(const std::string& certs, int cert_party, int port,
            grpc::Status answer = grpc::Status::OK) {
    svc_.answer = std::move(answer);
    server_ = StartPartyServer(certs, cert_party, port, &svc_);
  }
  ~FakeParty() { server_->Shutdown(std::chrono::system_clock::now()); }
  int calls() const { return svc_.calls.load(); }

 private:
  struct Svc : kmpc::v1::KeyOps::Service {
    grpc::Status Run(grpc::ServerContext*, const kmpc::v1::RunRequest*,
                     kmpc::v1::RunResponse*) override {
      ++calls;
      return answer;
    }
    // Echoes every item with a tag share of its job id.
    grpc::Status Sign(grpc::ServerContext*, const kmpc::v1::SignRequest* req,
                      kmpc::v1::SignResponse* resp) override {
      ++calls;
      if (!answer.ok()) return answer;
      for (const auto& it : req->items()) {
        auto* r = resp->add_results();
        r->set_run_batch_id(it.run_batch_id());
        r->set_job_id(it.job_id());
        r->set_status(kmpc::v1::JOB_OK);
        resp->mutable_tag_shares()->append(16, static_cast<char>(it.job_id()));
      }
      return grpc::Status::OK;
    }
    grpc::Status answer;
    std::atomic<int> calls{0};
  };
  Svc svc_;
  std::unique_ptr<grpc::Server> server_;
};

// Listens on `port`; returns the listening socket, -1 on failure.
int Listen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(fd, 8) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(TransportTest, TransientFailureOfTheFirstConnectionDoesNotFailTheCall) {
  // The first connection is accepted and dropped during the TLS handshake
  // (as the KDC saw "Handshake read failed", or the client "connect: No
  // such file or directory" from gRPC 1.51's errno handling); then the
  // party's real server comes up on the same port.
  const int port = FreeLoopbackPort();
  const int lfd = Listen(port);
  ASSERT_GE(lfd, 0);
  std::atomic<int> dropped{0};
  std::unique_ptr<FakeParty> party;
  std::thread server([&] {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 10000) == 1) {
      int c = accept(lfd, nullptr, nullptr);
      if (c >= 0) {
        ++dropped;
        close(c);
      }
    }
    close(lfd);
    party = std::make_unique<FakeParty>(Certs(), 0, port);
  });
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  absl::Duration took;
  absl::Status s = RunOnce(t.get(), absl::Seconds(10), &took);
  server.join();
  EXPECT_EQ(dropped.load(), 1);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(party->calls(), 1);
  EXPECT_LT(took, absl::Seconds(5));
  // Connected now: the next call needs no waiting either.
  EXPECT_TRUE(RunOnce(t.get(), absl::Seconds(10), &took).ok());
  EXPECT_EQ(party->calls(), 2);
}

TEST_F(TransportTest, ServerOfAnotherPartyIsRefusedAtOnce) {
  const int port = FreeLoopbackPort();
  FakeParty party(Certs(), /*cert_party=*/1, port);
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  absl::Duration took;
  absl::Status s = RunOnce(t.get(), absl::Seconds(10), &took);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find(absl::StrCat("the server at position 0 (127.0.0.1:",
                                          port, ") is not party 0")),
            std::string::npos)
      << s;
  EXPECT_LT(took, absl::Seconds(2));  // not waiting for a connection
  EXPECT_EQ(party.calls(), 0);
}

// Only the failure the certificate check refused is the wrong party: after
// a server of another party, the same position's server down is a failed
// connection again, which the first-connect wait still waits for, and then
// a self-signed server there one as well (a refusal that outlived its
// failure made both kPermissionDenied, which is never waited for).
TEST_F(TransportTest, WrongPartyThenDownThenUntrustedEachHasItsOwnCause) {
  const int port = FreeLoopbackPort();
  auto party = std::make_unique<FakeParty>(Certs(), /*cert_party=*/1, port);
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  absl::Duration took;
  absl::Status s = RunOnce(t.get(), absl::Seconds(10), &took);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(party->calls(), 0);

  party.reset();
  s = NextCause(t.get(), [](const absl::Status& x) { return absl::IsPermissionDenied(x); });
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("Connection refused"), std::string::npos) << s;
  EXPECT_NE(s.message().find("no connection after waiting"), std::string::npos) << s;

  const std::string self_signed = kmpc::testing::MakeSelfSignedPartyCerts(Certs(), 0);
  ASSERT_FALSE(self_signed.empty()) << "openssl req failed";
  party = std::make_unique<FakeParty>(self_signed, 0, port);
  s = NextCause(t.get(), [](const absl::Status& x) {
    return x.message().find("Connection refused") != absl::string_view::npos;
  });
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(s.message().find("is not party"), std::string::npos) << s;
  EXPECT_EQ(party->calls(), 0);

  // Party 0 itself: the calls reach it.
  party = std::make_unique<FakeParty>(Certs(), 0, port);
  s = NextCause(t.get(), [](const absl::Status& x) { return !x.ok(); });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(party->calls(), 1);
}

TEST_F(TransportTest, PartyDownFromTheStartFailsByTheDeadlineThenAtOnce) {
  const int port = FreeLoopbackPort();  // nobody listens
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  absl::Duration took;
  const absl::Time first = absl::Now();
  absl::Status s = RunOnce(t.get(), absl::Milliseconds(800), &took);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("no connection after waiting"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("Connection refused"), std::string::npos) << s;
  EXPECT_LT(took, absl::Seconds(2));
  // After the grace, calls to the never-connected party fail at once.
  absl::SleepFor(first + GrpcTransport::kFirstConnectGrace - absl::Now() +
                 absl::Milliseconds(100));
  s = RunOnce(t.get(), absl::Seconds(10), &took);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_F(TransportTest, PartyDownAfterItWasConnectedFailsAtOnce) {
  const int port = FreeLoopbackPort();
  auto party = std::make_unique<FakeParty>(Certs(), 0, port);
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  absl::Duration took;
  ASSERT_TRUE(RunOnce(t.get(), absl::Seconds(10), &took).ok());
  party.reset();
  absl::Status s = RunOnce(t.get(), absl::Seconds(10), &took);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_LT(took, absl::Seconds(2));
}

// A server's typed refusal (BatchError in the status details) arrives as
// it is: its code, not a gRPC code cast to an absl code; a failure
// without one is the transport's (kUnavailable).
TEST_F(TransportTest, TypedRefusalArrivesWithItsCode) {
  const int port = FreeLoopbackPort();
  FakeParty party(Certs(), 0, port,
                  contract::BatchErrorStatus(kmpc::v1::BATCH_OVERLOADED,
                                             "queue full"));
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  kmpc::v1::RunRequest req;
  kmpc::v1::RunResponse resp;
  std::promise<CallStatus> p;
  t->Run(0, req, &resp, absl::Now() + absl::Seconds(10),
         [&p](CallStatus s) { p.set_value(std::move(s)); });
  CallStatus s = p.get_future().get();
  EXPECT_TRUE(s.refused());
  EXPECT_EQ(s.refusal, kmpc::v1::BATCH_OVERLOADED);
  EXPECT_EQ(s.status.message(), "BATCH_OVERLOADED: queue full");

  const int port2 = FreeLoopbackPort();
  FakeParty plain(Certs(), 0, port2,
                  grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "big"));
  auto t2 = Make(port2);
  ASSERT_NE(t2, nullptr);
  std::promise<CallStatus> p2;
  t2->Run(0, req, &resp, absl::Now() + absl::Seconds(10),
          [&p2](CallStatus s) { p2.set_value(std::move(s)); });
  CallStatus s2 = p2.get_future().get();
  EXPECT_FALSE(s2.refused());
  EXPECT_TRUE(absl::IsUnavailable(s2.status)) << s2.status;
}

// KeyOps.Sign goes to the party's server like Run, its answer into resp.
TEST_F(TransportTest, SignReachesTheServer) {
  const int port = FreeLoopbackPort();
  FakeParty party(Certs(), 0, port);
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  kmpc::v1::SignRequest req;
  req.set_request_id(std::string(16, 'r'));
  auto* item = req.add_items();
  item->set_run_batch_id(std::string(16, 'b'));
  item->set_job_id(7);
  kmpc::v1::SignResponse resp;
  std::promise<CallStatus> p;
  t->Sign(0, req, &resp, absl::Now() + absl::Seconds(10),
          [&p](CallStatus s) { p.set_value(std::move(s)); });
  CallStatus s = p.get_future().get();
  ASSERT_TRUE(s.ok()) << s.status;
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).job_id(), 7u);
  EXPECT_EQ(resp.tag_shares(), std::string(16, '\x07'));
  EXPECT_EQ(party.calls(), 1);
}

TEST_F(TransportTest, ShutdownEndsACallWaitingForItsFirstConnection) {
  const int port = FreeLoopbackPort();  // nobody listens
  auto t = Make(port);
  ASSERT_NE(t, nullptr);
  kmpc::v1::RunRequest req;
  kmpc::v1::RunResponse resp;
  std::promise<absl::Status> p;
  const absl::Time t0 = absl::Now();
  t->Run(0, req, &resp, t0 + absl::Seconds(30),
         [&p](CallStatus s) { p.set_value(std::move(s.status)); });
  absl::SleepFor(absl::Milliseconds(500));  // failed once, now waiting
  t->Shutdown();
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  absl::Status s = f.get();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

}  // namespace
}  // namespace kmpc::kdc
