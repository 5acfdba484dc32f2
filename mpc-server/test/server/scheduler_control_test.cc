// The scheduler's control messages (service/scheduler_control.h): their
// 32-byte layout both ways, every malformed one refused, sequence numbers
// across the wrap, and the leader's wait for a reply and its abort on the
// in-memory ring (0 sends to 2, receives from 1).
#include "service/scheduler_control.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "service/memory_scheduler_ring.h"

namespace kmpc::service::scheduling {
namespace {

Control Sample() {
  Control c;
  c.type = kPropose;
  c.kind = BatchKind::kRefresh;
  c.status = kStatusMissing;
  c.status_party = 2;
  c.flags = kFlagSession;
  for (size_t i = 0; i < c.id.size(); ++i) c.id[i] = static_cast<uint8_t>(0xa0 + i);
  c.age_ms = 0x01020304;
  c.wait_ms = 5;
  return c;
}

TEST(SchedulerControl, EncodesItsLayoutAndDecodesBack) {
  const std::vector<uint8_t> m = Encode(Sample());
  ASSERT_EQ(m.size(), kControlSize);
  ASSERT_EQ(kControlSize, 32u);
  EXPECT_EQ(m[0], kPropose);
  EXPECT_EQ(m[1], static_cast<uint8_t>(BatchKind::kRefresh));
  EXPECT_EQ(m[2], kStatusMissing);
  EXPECT_EQ(m[3], 2);
  EXPECT_EQ(m[4], kFlagSession);
  EXPECT_EQ(m[8], 0xa0);
  EXPECT_EQ(m[23], 0xaf);
  EXPECT_EQ((std::vector<uint8_t>(m.begin() + 24, m.end())),
            (std::vector<uint8_t>{1, 2, 3, 4, 0, 0, 0, 5}));  // big-endian
  absl::StatusOr<Control> c = Decode(m);
  ASSERT_TRUE(c.ok()) << c.status();
  const Control s = Sample();
  EXPECT_EQ(c->type, s.type);
  EXPECT_EQ(c->kind, s.kind);
  EXPECT_EQ(c->status, s.status);
  EXPECT_EQ(c->status_party, s.status_party);
  EXPECT_EQ(c->flags, s.flags);
  EXPECT_EQ(c->id, s.id);
  EXPECT_EQ(c->age_ms, s.age_ms);
  EXPECT_EQ(c->wait_ms, s.wait_ms);
}

// Any other size, type, kind (a FINALIZE, kind 2, never goes on the ring),
// status, party, flag, a retry that is no COMMIT or comes with go, or a
// nonzero padding byte is DATA_LOSS.
TEST(SchedulerControl, RefusesEveryMalformedMessage) {
  const std::vector<uint8_t> good = Encode(Sample());
  ASSERT_TRUE(Decode(good).ok());
  std::vector<std::vector<uint8_t>> bad = {
      std::vector<uint8_t>(good.begin(), good.end() - 1), good, good, good, good, good,
      good, good, good, good, good, good};
  bad[1].push_back(0);
  bad[2][0] = 3;                   // type
  bad[3][1] = 2;                   // kind: FINALIZE
  bad[4][1] = 0;
  bad[5][2] = kStatusBreaker + 1;  // status
  bad[6][3] = 3;                   // party
  bad[7][4] = 8;                   // flags
  bad[8][4] = kFlagRetry;          // retry on a PROPOSE
  bad[9][0] = kCommit;             // retry with go
  bad[9][4] = kFlagRetry | kFlagGo;
  bad[10][5] = 1;                  // padding
  bad[11][7] = 1;
  for (size_t k = 0; k < bad.size(); ++k)
    EXPECT_TRUE(absl::IsDataLoss(Decode(bad[k]).status())) << k;
  std::vector<uint8_t> retry = good;
  retry[0] = kCommit;
  retry[4] = kFlagRetry;
  EXPECT_TRUE(Decode(retry).ok());
}

TEST(SchedulerControl, SequenceNumbersWrap) {
  EXPECT_TRUE(SeqBefore(1, 2));
  EXPECT_FALSE(SeqBefore(2, 1));
  EXPECT_FALSE(SeqBefore(7, 7));
  EXPECT_TRUE(SeqBefore(0xffffffffu, 0));
  EXPECT_FALSE(SeqBefore(0, 0xffffffffu));
  EXPECT_TRUE(SeqBefore(0xfffffff0u, 5));
}

TEST(SchedulerControl, MillisecondsAreClamped) {
  EXPECT_EQ(Ms(-absl::Seconds(1)), 0u);
  EXPECT_EQ(Ms(absl::ZeroDuration()), 0u);
  EXPECT_EQ(Ms(absl::Microseconds(1500)), 1u);
  EXPECT_EQ(Ms(absl::Seconds(3)), 3000u);
  EXPECT_EQ(Ms(absl::Hours(24 * 100)), UINT32_MAX);
}

// The leader skips a late reply to an earlier proposal, takes its own, and
// refuses a reply naming another batch; a wait that runs out aborts the
// proposal towards party 2 (a COMMIT with neither go nor retry).
TEST(SchedulerControl, AwaitReplySkipsLateRepliesAndAbandonsOnTimeout) {
  MemorySchedulerRings rings(1, absl::Seconds(1));
  WorkerRing& leader = rings.party(0).worker(0);
  WorkerRing& from1 = rings.party(1).worker(0);
  WorkerRing& at2 = rings.party(2).worker(0);
  const absl::Time soon = absl::Now() + absl::Seconds(5);
  for (WorkerRing* w : {&leader, &from1, &at2}) ASSERT_TRUE(w->Connect(soon).ok());
  Control propose = Sample();
  propose.status = kStatusOk;
  propose.status_party = 0;
  ASSERT_TRUE(from1.SendControl(9, Encode(propose)).ok());  // a late reply
  ASSERT_TRUE(from1.SendControl(10, Encode(propose)).ok());
  absl::StatusOr<Control> back = AwaitReply(leader, 10, propose, soon);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, propose.id);

  Control other = propose;
  other.id[0] ^= 1;
  ASSERT_TRUE(from1.SendControl(11, Encode(other)).ok());
  EXPECT_TRUE(absl::IsDataLoss(AwaitReply(leader, 11, propose, soon).status()));

  EXPECT_FALSE(AwaitReply(leader, 12, propose, absl::Now() + absl::Milliseconds(50)).ok());
  uint32_t seq = 0;
  auto abort = at2.RecvControl(&seq, soon);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(seq, 12u);
  absl::StatusOr<Control> a = Decode(*abort);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->type, kCommit);
  EXPECT_EQ(a->flags, 0);
  EXPECT_EQ(a->status, kStatusOk);
  EXPECT_EQ(a->id, propose.id);
}

}  // namespace
}  // namespace kmpc::service::scheduling
