// net/memory_ring.h: the in-memory ring the core tests run three parties
// on: a receive times out, a message of another size than expected is
// DATA_LOSS, and a shut-down ring fails every receive.
#include "net/memory_ring.h"

#include <gtest/gtest.h>

#include <chrono>

namespace kmpc::net {
namespace {

TEST(Ring, ReceiveTimesOutAndSizeMismatchIsDataLoss) {
  net::InMemoryRing ring(std::chrono::milliseconds(50));
  uint8_t buf[4];
  EXPECT_EQ(ring.party(0).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kUnavailable);
  uint8_t msg[3] = {1, 2, 3};
  ASSERT_TRUE(ring.party(1).SendToPrev(msg).ok());
  EXPECT_EQ(ring.party(0).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kDataLoss);
  ring.Shutdown();
  EXPECT_EQ(ring.party(2).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kmpc::net
