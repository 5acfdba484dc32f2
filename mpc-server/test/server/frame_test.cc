#include "net/frame.h"

#include <random>

#include "gtest/gtest.h"

namespace kmpc::net {
namespace {

TEST(FrameTest, RoundTrip) {
  uint8_t buf[kFrameHeaderSize];
  EncodeFrameHeader({FrameType::kData, 7, 3, 1234}, buf);
  FrameHeader h;
  ASSERT_TRUE(DecodeFrameHeader(buf, &h).ok());
  EXPECT_EQ(h.type, FrameType::kData);
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(h.step, 3u);
  EXPECT_EQ(h.length, 1234u);
  EXPECT_TRUE(CheckDataFrame(h, 7, 3, 1234).ok());
  EXPECT_EQ(CheckDataFrame(h, 8, 3, 1234).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(CheckDataFrame(h, 7, 4, 1234).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(CheckDataFrame(h, 7, 3, 1235).code(), absl::StatusCode::kDataLoss);
}

TEST(FrameTest, RejectsMalformed) {
  uint8_t buf[kFrameHeaderSize];
  EncodeFrameHeader({FrameType::kControl, 1, 0, 10}, buf);
  FrameHeader h;
  uint8_t bad[kFrameHeaderSize];
  for (int i : {0, 1, 2, 3}) {
    std::copy(buf, buf + kFrameHeaderSize, bad);
    bad[i] ^= 0x40;
    EXPECT_EQ(DecodeFrameHeader(bad, &h).code(), absl::StatusCode::kDataLoss) << i;
  }
  EncodeFrameHeader({FrameType::kControl, 1, 0, kMaxControlPayload + 1}, bad);
  EXPECT_EQ(DecodeFrameHeader(bad, &h).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeFrameHeader(absl::MakeConstSpan(buf, 5), &h).code(),
            absl::StatusCode::kDataLoss);
  ASSERT_TRUE(DecodeFrameHeader(buf, &h).ok());
  EXPECT_EQ(CheckDataFrame(h, 1, 0, 10).code(), absl::StatusCode::kDataLoss);
}

TEST(FrameTest, RandomBytesNeverCrash) {
  std::mt19937 rng(1);
  FrameHeader h;
  for (int i = 0; i < 100000; ++i) {
    uint8_t b[kFrameHeaderSize];
    for (auto& x : b) x = rng();
    (void)DecodeFrameHeader(b, &h);
  }
}

}  // namespace
}  // namespace kmpc::net
