// RideAlong (engine/ride.h): a rider's messages on the host's exchanges,
// both protocols' values received as sent, the ring's message count the
// longer protocol's, and the ring still in step after a rider's end.
#include "engine/ride.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "net/memory_ring.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::RunParties;
using Bytes = std::vector<uint8_t>;

// Party p's message of round r of protocol `who`, of n bytes (the same n
// on every party, as every ring protocol here sends).
Bytes Msg(int who, int p, int r, size_t n) {
  Bytes m(n);
  for (size_t k = 0; k < n; ++k) m[k] = static_cast<uint8_t>(31 * who + 7 * p + 3 * r + k);
  return m;
}

// `rounds` exchanges of round-dependent sizes, each checking what came
// from the successor; `pipelined` sends two rounds before receiving them.
absl::Status Protocol(net::RingChannel& ch, int who, int rounds, bool pipelined,
                      std::chrono::microseconds think = {}) {
  const int p = ch.party(), next = (p + 1) % 3;
  auto size = [who](int r) { return static_cast<size_t>(1 + (r * 5 + who * 3) % 23); };
  for (int r = 0; r < rounds; ++r) {
    if (think.count() > 0) std::this_thread::sleep_for(think);
    if (pipelined && r + 1 < rounds) {
      if (absl::Status s = ch.SendToPrev(Msg(who, p, r, size(r))); !s.ok()) return s;
      if (absl::Status s = ch.SendToPrev(Msg(who, p, r + 1, size(r + 1))); !s.ok()) return s;
      for (int q = r; q <= r + 1; ++q) {
        Bytes in(size(q));
        if (absl::Status s = ch.RecvFromNext(absl::MakeSpan(in)); !s.ok()) return s;
        if (in != Msg(who, next, q, size(q))) return absl::DataLossError("pipelined: wrong");
      }
      ++r;
      continue;
    }
    Bytes in(size(r));
    const Bytes out = Msg(who, p, r, size(r));
    if (absl::Status s = ch.Exchange(out, absl::MakeSpan(in)); !s.ok()) return s;
    if (in != Msg(who, next, r, size(r))) return absl::DataLossError("wrong message");
  }
  return absl::OkStatus();
}

struct Case {
  int host, rider;
  bool pipelined;
};

TEST(RideAlong, BothProtocolsInStepOnTheLongerOnesMessages) {
  for (const Case c : {Case{40, 12, false}, Case{12, 40, false}, Case{30, 30, true},
                       Case{0, 9, false}, Case{9, 0, false}}) {
    net::InMemoryRing ring(std::chrono::milliseconds(20000));
    std::array<absl::Status, 3> rider{}, host{}, joined{};
    RunParties([&](int i) -> absl::Status {
      RideAlong ride(ring.party(i));
      // Party-dependent think times: the rider posts its sends at another
      // pace on each party, the batching stays the same.
      ride.Start([&, i](net::RingChannel& ch) {
        rider[i] = Protocol(ch, 1, c.rider, c.pipelined, std::chrono::microseconds(50 * i));
        return rider[i];
      });
      host[i] = Protocol(ride, 0, c.host, false);
      joined[i] = ride.Join(!host[i].ok());
      return absl::OkStatus();
    });
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(rider[i].ok()) << c.host << "/" << c.rider << " party " << i << ": " << rider[i];
      EXPECT_TRUE(host[i].ok()) << host[i];
      EXPECT_TRUE(joined[i].ok()) << joined[i];
      EXPECT_EQ(ring.messages_sent(i), static_cast<uint64_t>(std::max(c.host, c.rider)))
          << c.host << " host, " << c.rider << " rider rounds";
    }
  }
}

// A Run that ends early (a host failure alike on every party) aborts its
// rider: nothing more is sent, and the ring is in step for the next Run.
TEST(RideAlong, AnAbortedRiderLeavesTheRingInStep) {
  net::InMemoryRing ring(std::chrono::milliseconds(20000));
  std::array<absl::Status, 3> rider{}, joined{}, after{};
  RunParties([&](int i) -> absl::Status {
    RideAlong ride(ring.party(i));
    ride.Start([&, i](net::RingChannel& ch) {
      rider[i] = Protocol(ch, 1, 50, false, std::chrono::microseconds(20 * i));
      return rider[i];
    });
    (void)Protocol(ride, 0, 5, false);
    joined[i] = ride.Join(true);
    after[i] = Protocol(ride, 2, 7, false);
    return absl::OkStatus();
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rider[i].code(), absl::StatusCode::kAborted) << rider[i];
    EXPECT_TRUE(joined[i].ok()) << joined[i];
    EXPECT_TRUE(after[i].ok()) << "party " << i << ": " << after[i];
    EXPECT_EQ(ring.messages_sent(i), 12u);
  }
}

// A rider's own error (alike on every party) is Join's status.
TEST(RideAlong, TheRidersErrorIsJoinsStatus) {
  net::InMemoryRing ring(std::chrono::milliseconds(20000));
  std::array<absl::Status, 3> joined{};
  RunParties([&](int i) -> absl::Status {
    RideAlong ride(ring.party(i));
    ride.Start([](net::RingChannel& ch) -> absl::Status {
      if (absl::Status s = Protocol(ch, 1, 3, false); !s.ok()) return s;
      return absl::InvalidArgumentError("the rider's batch is too large");
    });
    if (absl::Status s = Protocol(ride, 0, 6, false); !s.ok()) return s;
    joined[i] = ride.Join(false);
    return absl::OkStatus();
  });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(joined[i].code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kmpc::engine
