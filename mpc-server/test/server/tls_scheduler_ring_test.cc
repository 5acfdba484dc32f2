// The TLS ring as the scheduler sees it (service/tls_scheduler_ring.cc,
// MakeTlsSchedulerRing): three rings on loopback with deploy/gen-certs.sh's
// certificates, each wrapped; party, workers and receive timeout from the
// ring's options, and a worker's data, control, counters and reset reaching
// the TLS channel underneath.
#include <array>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "net/tls_ring.h"
#include "service/ring.h"
#include "test_util.h"

namespace kmpc::service {
namespace {

absl::Time In(absl::Duration d) { return absl::Now() + d; }

class TlsSchedulerRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = kmpc::testing::MakeTestCerts("sched-ring-test") + "/certs";
    ASSERT_NE(certs_, "/certs");
    int ports[3];
    for (int& p : ports) p = kmpc::testing::FreeLoopbackPort();
    for (int i = 0; i < 3; ++i) {
      net::TlsRingOptions o;
      o.party = i;
      o.workers = 2;
      o.listen_addr = absl::StrCat("127.0.0.1:", ports[i]);
      o.prev_addr = absl::StrCat("127.0.0.1:", ports[(i + 2) % 3]);
      const std::string name = absl::StrCat("party-", i);
      o.tls = {certs_ + "/" + name + ".pem", certs_ + "/" + name + ".key",
               certs_ + "/ca.pem"};
      o.recv_timeout = absl::Milliseconds(1500);
      o.connect_timeout = absl::Seconds(3);
      auto r = net::TlsRing::Start(o);
      ASSERT_TRUE(r.ok()) << r.status();
      tls_[i] = std::move(*r);
      rings_[i] = MakeTlsSchedulerRing(tls_[i].get());
    }
  }
  // Connects worker 0 of the three parties at once (each dials its
  // previous party and accepts its next).
  void ConnectAll() {
    std::array<std::future<absl::Status>, 3> fs;
    for (int i = 0; i < 3; ++i)
      fs[i] = std::async(std::launch::async, [this, i] {
        return rings_[i]->worker(0).Connect(In(absl::Seconds(5)));
      });
    for (auto& f : fs) ASSERT_TRUE(f.get().ok());
  }

  std::string certs_;
  std::unique_ptr<net::TlsRing> tls_[3];
  std::unique_ptr<SchedulerRing> rings_[3];
};

TEST_F(TlsSchedulerRingTest, ReportsTheRingsOptions) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rings_[i]->party(), i);
    EXPECT_EQ(rings_[i]->workers(), 2);
    EXPECT_EQ(rings_[i]->recv_timeout(), absl::Milliseconds(1500));
    EXPECT_EQ(&rings_[i]->worker(1).data(), tls_[i]->channel(1));
  }
}

TEST_F(TlsSchedulerRingTest, ControlAndDataGoThroughTheTlsChannel) {
  ConnectAll();
  WorkerRing& from1 = rings_[1]->worker(0);
  WorkerRing& at0 = rings_[0]->worker(0);
  EXPECT_TRUE(from1.connected());
  from1.BeginBatch(4, In(absl::Seconds(5)));
  at0.BeginBatch(4, In(absl::Seconds(5)));
  const std::vector<uint8_t> ctl = {1, 2, 3};
  ASSERT_TRUE(from1.SendControl(4, ctl).ok());
  const std::vector<uint8_t> data(1000, 0x5a);
  ASSERT_TRUE(from1.data().SendToPrev(data).ok());
  ASSERT_TRUE(from1.Flush(In(absl::Seconds(5))).ok());
  EXPECT_TRUE(at0.InboundReadable(absl::Seconds(5)));
  uint32_t seq = 0;
  auto got = at0.RecvControl(&seq, In(absl::Seconds(5)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, ctl);
  EXPECT_EQ(seq, 4u);
  std::vector<uint8_t> in(data.size());
  ASSERT_TRUE(at0.data().RecvFromNext(absl::MakeSpan(in)).ok());
  EXPECT_EQ(in, data);
  WorkerRing::Counters c = from1.counters();
  EXPECT_GE(c.bytes, data.size());
  EXPECT_GE(c.messages, 1u);
  EXPECT_GT(c.tcp_bytes, data.size());  // TLS records on the wire
}

TEST_F(TlsSchedulerRingTest, ResetDropsTheLinkAndANewGenerationFollows) {
  ConnectAll();
  WorkerRing& w = rings_[1]->worker(0);
  const uint64_t gen = w.generation();
  w.Reset();
  EXPECT_FALSE(w.connected());
  ConnectAll();
  EXPECT_TRUE(w.connected());
  EXPECT_NE(w.generation(), gen);
}

}  // namespace
}  // namespace kmpc::service
