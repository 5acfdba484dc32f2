// Three TLS ring endpoints in one process on loopback, with certificates
// from deploy/gen-certs.sh.
#include "net/tls_ring.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace kmpc::net {
namespace {

using ::kmpc::testing::FreeLoopbackPort;

class TlsRingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new std::string(::kmpc::testing::MakeTestCerts("ring-test") + "/certs");
    ASSERT_NE(*certs_, "/certs");
  }

  void SetUp() override {
    for (int i = 0; i < 3; ++i) ports_[i] = FreeLoopbackPort();
  }

  TlsRingOptions Options(int party, int workers = 1,
                         const std::string& cert_party = "") {
    TlsRingOptions o;
    o.party = party;
    o.workers = workers;
    o.listen_addr = absl::StrCat("127.0.0.1:", ports_[party]);
    o.prev_addr = absl::StrCat("127.0.0.1:", ports_[(party + 2) % 3]);
    std::string name = cert_party.empty() ? absl::StrCat("party-", party) : cert_party;
    o.tls = {*certs_ + "/" + name + ".pem", *certs_ + "/" + name + ".key",
             *certs_ + "/ca.pem"};
    o.recv_timeout = absl::Seconds(2);
    o.connect_timeout = absl::Seconds(3);
    if (const char* spin = getenv("KMPC_RING_SPIN_US")) o.spin_us = atoi(spin);
    return o;
  }

  void StartAll(int workers = 1) {
    for (int i = 0; i < 3; ++i) {
      auto r = TlsRing::Start(Options(i, workers));
      ASSERT_TRUE(r.ok()) << r.status();
      rings_[i] = std::move(*r);
    }
  }

  // Runs f(party) on three threads and collects the statuses.
  template <typename F>
  std::array<absl::Status, 3> OnAll(F f) {
    std::array<std::future<absl::Status>, 3> fs;
    for (int i = 0; i < 3; ++i) fs[i] = std::async(std::launch::async, f, i);
    std::array<absl::Status, 3> out;
    for (int i = 0; i < 3; ++i) out[i] = fs[i].get();
    return out;
  }

  static std::string* certs_;
  int ports_[3];
  std::unique_ptr<TlsRing> rings_[3];
};
std::string* TlsRingTest::certs_ = nullptr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

TEST_F(TlsRingTest, LargeSimultaneousExchangeDoesNotDeadlock) {
  StartAll();
  const size_t n = 8 << 20;  // far above the socket buffers
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(1);
    std::vector<uint8_t> out(n), in(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 7 + p);
    for (int round = 0; round < 3; ++round) {
      if (auto s = ch->Exchange(out, absl::MakeSpan(in)); !s.ok()) return s;
      int next = (p + 1) % 3;
      for (size_t i = 0; i < n; i += 4093)
        if (in[i] != static_cast<uint8_t>(i * 7 + next))
          return absl::InternalError("wrong data");
    }
    // A receive may return with our own output still queued: the end of a
    // batch flushes (the scheduler does this after every batch).
    return ch->Flush(In(absl::Seconds(5)));
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, QueuedSendsBeyondSocketBuffersThenReceive) {
  // The engine sends every chunk of an AND layer before its first receive:
  // SendToPrev must queue what the kernel cannot take, never fail or block.
  StartAll();
  const size_t n = 3 << 20;
  const int k = 6;  // 18 MiB queued per party
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(3);
    std::vector<uint8_t> out(n), in(n);
    for (int m = 0; m < k; ++m) {
      std::fill(out.begin(), out.end(), static_cast<uint8_t>(p * 16 + m));
      if (auto s = ch->SendToPrev(out); !s.ok()) return s;
    }
    for (int m = 0; m < k; ++m) {
      if (auto s = ch->RecvFromNext(absl::MakeSpan(in)); !s.ok()) return s;
      if (in[0] != ((p + 1) % 3) * 16 + m || in[n - 1] != in[0])
        return absl::InternalError("wrong data");
    }
    return ch->Flush(In(absl::Seconds(5)));
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, ManySmallRoundsAndSeparateWorkers) {
  StartAll(2);
  auto st = OnAll([&](int p) -> absl::Status {
    for (int w = 0; w < 2; ++w) {
      TlsRingChannel* ch = rings_[p]->channel(w);
      if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    }
    absl::Time t0 = absl::Now();
    const int rounds = 500;
    for (int w = 0; w < 2; ++w) {
      TlsRingChannel* ch = rings_[p]->channel(w);
      ch->BeginBatch(42 + w);
      for (int r = 0; r < rounds; ++r) {
        uint8_t out[8] = {static_cast<uint8_t>(p), static_cast<uint8_t>(r),
                          static_cast<uint8_t>(w)};
        uint8_t in[8];
        if (auto s = ch->Exchange(out, in); !s.ok()) return s;
        if (in[0] != (p + 1) % 3 || in[1] != static_cast<uint8_t>(r) || in[2] != w)
          return absl::InternalError("wrong data");
      }
    }
    if (p == 0)
      std::printf("ring round trip: %.1f us per exchange\n",
                  absl::ToDoubleMicroseconds(absl::Now() - t0) / (2 * rounds));
    return absl::OkStatus();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, MessagesAroundRecordBoundariesArriveIntact) {
  // A frame travels as its header plus the first 16,368 payload bytes in
  // one 16 KiB TLS record, then the rest; records pass through the buffered
  // socket BIO (many per read(), many per send()). Every byte of messages
  // just around those boundaries, sent back to back, must arrive in order,
  // with control frames in between.
  StartAll();
  const std::vector<size_t> sizes = {1,     15,    16,    16367, 16368, 16369,
                                     16383, 16384, 16385, 32752, 32753,
                                     65536, 262143, 262144, 262145, 1 << 20};
  auto fill = [](std::vector<uint8_t>& v, int party, size_t m) {
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<uint8_t>((i * 131 + i / 251 + m * 17 + party) & 0xff);
  };
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(9);
    std::vector<uint8_t> out, in, want;
    for (size_t m = 0; m < sizes.size(); ++m) {  // all sent before any read
      out.resize(sizes[m]);
      fill(out, p, m);
      if (auto s = ch->SendToPrev(out); !s.ok()) return s;
    }
    const int next = (p + 1) % 3;
    for (size_t m = 0; m < sizes.size(); ++m) {
      in.assign(sizes[m], 0);
      want.resize(sizes[m]);
      fill(want, next, m);
      if (auto s = ch->RecvFromNext(absl::MakeSpan(in)); !s.ok()) return s;
      if (in != want)
        return absl::InternalError(absl::StrCat("message ", m, " (", sizes[m],
                                                " bytes) corrupted"));
    }
    const uint8_t ctl[3] = {7, static_cast<uint8_t>(p), 9};
    if (auto s = ch->SendControl(77, ctl); !s.ok()) return s;
    uint32_t seq = 0;
    auto got = ch->RecvControl(&seq, In(absl::Seconds(5)));
    if (!got.ok()) return got.status();
    if (seq != 77 || got->size() != 3 || (*got)[1] != next)
      return absl::InternalError("wrong control frame");
    return ch->Flush(In(absl::Seconds(5)));
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, MismatchedFramesAreDataLoss) {
  StartAll();
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(p == 2 ? 8 : 7);  // party 2 is in another batch
    uint8_t out[16] = {0}, in[16];
    return ch->Exchange(out, in);
  });
  // Party 1 receives from party 2 (wrong seq); party 0 from party 1 (ok or
  // lost, since party 1 drops its connections on the error).
  EXPECT_EQ(st[1].code(), absl::StatusCode::kDataLoss) << st[1];
  // Wrong length.
  st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(9);
    std::vector<uint8_t> out(p == 1 ? 17 : 16), in(16);
    return ch->Exchange(out, absl::MakeSpan(in));
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kDataLoss) << st[0];
  // Everyone recovers for the next batch.
  st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(10);
    uint8_t out[16] = {0}, in[16];
    return ch->Exchange(out, in);
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, DeadPeerIsUnavailableWithinDeadlineThenRejoins) {
  StartAll();
  auto st = OnAll([&](int p) -> absl::Status {
    return rings_[p]->channel(0)->Connect(In(absl::Seconds(5)));
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  // Party 2 is silent (hung): party 1 times out.
  absl::Time t0 = absl::Now();
  rings_[1]->channel(0)->BeginBatch(1);
  uint8_t in[16];
  absl::Status s = rings_[1]->channel(0)->RecvFromNext(in);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  // Party 2 goes away entirely: party 1's reconnect attempts fail cleanly.
  rings_[2].reset();
  rings_[0]->channel(0)->Reset();
  // Party 2 restarts on the same port; all three reconnect and work.
  auto r = TlsRing::Start(Options(2));
  ASSERT_TRUE(r.ok()) << r.status();
  rings_[2] = std::move(*r);
  st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(2);
    uint8_t out[16] = {static_cast<uint8_t>(p)}, in[16];
    if (auto s = ch->Exchange(out, in); !s.ok()) return s;
    return in[0] == (p + 1) % 3 ? absl::OkStatus() : absl::InternalError("data");
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TlsRingTest, KilledPeerMidExchangeFailsFast) {
  StartAll();
  auto st = OnAll([&](int p) -> absl::Status {
    return rings_[p]->channel(0)->Connect(In(absl::Seconds(5)));
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    rings_[2]->channel(0)->Reset();  // closes both of party 2's connections
  });
  absl::Time t0 = absl::Now();
  rings_[1]->channel(0)->BeginBatch(1);
  uint8_t in[16];
  absl::Status s = rings_[1]->channel(0)->RecvFromNext(in);
  killer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
}

TEST_F(TlsRingTest, WrongPeerIdentityIsRejected) {
  // Party 1 presents party 0's certificate: party 0 (its prev) sees the
  // wrong identity when dialled... here party 2 dials a "party 1" that is
  // really kmpc-party-0.
  for (int i = 0; i < 3; ++i) {
    auto r = TlsRing::Start(Options(i, 1, i == 1 ? "party-0" : ""));
    ASSERT_TRUE(r.ok()) << r.status();
    rings_[i] = std::move(*r);
  }
  absl::Status s = rings_[2]->channel(0)->Connect(In(absl::Seconds(2)));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // Party 0 never accepts the impostor's connection.
  s = rings_[0]->channel(0)->Connect(In(absl::Seconds(1)));
  EXPECT_FALSE(s.ok());
}

// A stale error left in the thread's OpenSSL queue by unrelated code must
// not turn a receive's SSL_ERROR_WANT_READ into a failure (SSL_get_error
// reads the queue): the channel empties it before its TLS calls, also where
// it skips the clear on an already empty queue.
TEST_F(TlsRingTest, StaleOpenSslErrorDoesNotFailARound) {
  StartAll(1);
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(7);
    for (int r = 0; r < 20; ++r) {
      ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);  // as a failed unrelated call
      if (ERR_peek_error() == 0) return absl::InternalError("no error queued");
      // Party 0 comes late, so the others' receives wait (WANT_READ).
      if (p == 0) absl::SleepFor(absl::Milliseconds(2));
      uint8_t out[4] = {static_cast<uint8_t>(p), static_cast<uint8_t>(r)};
      uint8_t in[4];
      if (auto s = ch->Exchange(out, in); !s.ok()) return s;
      if (in[0] != (p + 1) % 3 || in[1] != r) return absl::InternalError("wrong data");
    }
    return absl::OkStatus();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

// With spinning on and a peer that always answers later than spin_us, every
// spin runs out into the sleeping poll: the rounds still complete and carry
// the right data.
TEST_F(TlsRingTest, SlowPeerWithSpinningOnStillExchanges) {
  for (int i = 0; i < 3; ++i) {
    TlsRingOptions o = Options(i, 1);
    o.spin_us = 50;
    auto r = TlsRing::Start(o);
    ASSERT_TRUE(r.ok()) << r.status();
    rings_[i] = std::move(*r);
  }
  auto st = OnAll([&](int p) -> absl::Status {
    TlsRingChannel* ch = rings_[p]->channel(0);
    if (auto s = ch->Connect(In(absl::Seconds(5))); !s.ok()) return s;
    ch->BeginBatch(9);
    for (int r = 0; r < 40; ++r) {
      if (p == 1) absl::SleepFor(absl::Microseconds(400));
      uint8_t out[16] = {static_cast<uint8_t>(p), static_cast<uint8_t>(r)};
      uint8_t in[16];
      if (auto s = ch->Exchange(out, in); !s.ok()) return s;
      if (in[0] != (p + 1) % 3 || in[1] != r) return absl::InternalError("wrong data");
    }
    return absl::OkStatus();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace kmpc::net
