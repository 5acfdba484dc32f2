// The in-process ring the scheduler and service tests run on
// (service/memory_scheduler_ring.h): party i sends to party i-1 in order,
// control and data messages on one link, receives bounded by their
// deadline or recv_timeout, and a Reset at either end closing the link as
// a TLS ring's connection would be closed.
#include "service/memory_scheduler_ring.h"

#include <cstdint>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kmpc::service {
namespace {

using Bytes = std::vector<uint8_t>;

absl::Time Soon() { return absl::Now() + absl::Seconds(2); }

TEST(MemorySchedulerRingTest, ControlMessagesArriveAtThePreviousPartyInOrder) {
  MemorySchedulerRings rings(2, absl::Milliseconds(200));
  WorkerRing& from1 = rings.party(1).worker(0);
  WorkerRing& at0 = rings.party(0).worker(0);
  EXPECT_FALSE(at0.InboundReadable(absl::ZeroDuration()));
  ASSERT_TRUE(from1.SendControl(5, Bytes{1, 2}).ok());
  ASSERT_TRUE(from1.SendControl(6, Bytes{3}).ok());
  EXPECT_TRUE(at0.InboundReadable(absl::ZeroDuration()));
  // Another worker's link and the other direction stay empty.
  EXPECT_FALSE(rings.party(0).worker(1).InboundReadable(absl::Milliseconds(10)));
  EXPECT_FALSE(rings.party(2).worker(0).InboundReadable(absl::Milliseconds(10)));
  uint32_t seq = 0;
  auto m = at0.RecvControl(&seq, Soon());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, (Bytes{1, 2}));
  EXPECT_EQ(seq, 5u);
  m = at0.RecvControl(&seq, Soon());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, Bytes{3});
  EXPECT_EQ(seq, 6u);
  EXPECT_EQ(rings.party(0).party(), 0);
  EXPECT_EQ(rings.party(2).workers(), 2);
}

TEST(MemorySchedulerRingTest, DataMessagesKeepTheirSizeAndKindAndAreCounted) {
  MemorySchedulerRings rings(1, absl::Milliseconds(200));
  net::RingChannel& send2 = rings.party(2).worker(0).data();
  net::RingChannel& recv1 = rings.party(1).worker(0).data();
  ASSERT_TRUE(send2.SendToPrev(Bytes{9, 8, 7, 6}).ok());
  Bytes out(4);
  ASSERT_TRUE(recv1.RecvFromNext(absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, (Bytes{9, 8, 7, 6}));
  WorkerRing::Counters c = rings.party(2).worker(0).counters();
  EXPECT_EQ(c.bytes, 4u);
  EXPECT_EQ(c.messages, 1u);
  // A message of another size, or a control message where data is due.
  ASSERT_TRUE(send2.SendToPrev(Bytes{1, 2, 3}).ok());
  EXPECT_EQ(recv1.RecvFromNext(absl::MakeSpan(out)).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(rings.party(2).worker(0).SendControl(1, Bytes{1, 2, 3, 4}).ok());
  EXPECT_EQ(recv1.RecvFromNext(absl::MakeSpan(out)).code(), absl::StatusCode::kDataLoss);
  // Nothing sent: the receive gives up after recv_timeout.
  const absl::Time t0 = absl::Now();
  absl::Status st = recv1.RecvFromNext(absl::MakeSpan(out));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.message(), "timed out")) << st;
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(150));
}

TEST(MemorySchedulerRingTest, AResetAtTheReceiverDropsTheLinkUntilTheSenderReconnects) {
  MemorySchedulerRings rings(1, absl::Milliseconds(200));
  WorkerRing& from1 = rings.party(1).worker(0);
  WorkerRing& at0 = rings.party(0).worker(0);
  ASSERT_TRUE(from1.SendControl(1, Bytes{1}).ok());
  const uint64_t gen = at0.generation();
  at0.Reset();
  EXPECT_NE(at0.generation(), gen);
  EXPECT_FALSE(at0.InboundReadable(absl::Milliseconds(10)));  // dropped
  absl::Status st = from1.SendControl(2, Bytes{2});
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.message(), "reset")) << st;
  ASSERT_TRUE(from1.Connect(Soon()).ok());
  ASSERT_TRUE(from1.SendControl(3, Bytes{3}).ok());
  uint32_t seq = 0;
  auto m = at0.RecvControl(&seq, Soon());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(seq, 3u);
}

TEST(MemorySchedulerRingTest, AResetAtTheSenderFailsTheReceiverAtOnceAfterWhatWasSent) {
  MemorySchedulerRings rings(1, absl::Seconds(30));
  WorkerRing& from1 = rings.party(1).worker(0);
  WorkerRing& at0 = rings.party(0).worker(0);
  ASSERT_TRUE(from1.SendControl(1, Bytes{1}).ok());
  from1.Reset();
  uint32_t seq = 0;
  auto m = at0.RecvControl(&seq, Soon());  // sent before the reset: read
  ASSERT_TRUE(m.ok()) << m.status();
  const absl::Time t0 = absl::Now();
  m = at0.RecvControl(&seq, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(m.status().message(), "reset")) << m.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));  // not the deadline
}

TEST(MemorySchedulerRingTest, ShutdownFailsReceivesAndConnects) {
  MemorySchedulerRings rings(1, absl::Seconds(30));
  rings.Shutdown();
  uint32_t seq = 0;
  auto m = rings.party(0).worker(0).RecvControl(&seq, Soon());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(rings.party(1).worker(0).Connect(Soon()).ok());
  EXPECT_FALSE(rings.party(1).worker(0).SendControl(1, Bytes{1}).ok());
  EXPECT_FALSE(rings.party(2).AllConnected());
}

}  // namespace
}  // namespace kmpc::service
