// The multiplication log (protocol/mul_log.h) alone: products appended in
// order and counted, the log emptied between waves and batches, and the
// buffers it keeps from one batch to the next bounded. That the check
// finds every error in it, on live lanes only: verify_test.cc.
#include "protocol/mul_log.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kmpc::protocol {
namespace {

// AND words go in order: each append returns where its words start, and
// their z1 is where AndZ1At says; GF(2^128) products are counted apart.
TEST(MulLog, AppendsInOrder) {
  MulLog log;
  EXPECT_TRUE(log.empty());
  std::vector<uint64_t> w(10, 7), z1(10, 9);
  EXPECT_EQ(log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), 10), 0u);
  log.SetAndZ1(0, z1.data(), 10);
  EXPECT_EQ(log.AndZ1At(0)[9], 9u);
  uint64_t* out[5];
  const size_t at = log.AppendAnd(5, 64, out);
  EXPECT_EQ(at, 10u);
  for (int k = 0; k < 5; ++k) out[k][4] = k;
  log.AndZ1At(at)[4] = 42;
  EXPECT_EQ(log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), 3, 5), 15u);
  EXPECT_EQ(log.and_words(), 18u);
  EXPECT_EQ(log.AndZ1At(at)[4], 42u);
  EXPECT_EQ(log.AndZ1At(0)[0], 9u);
  EXPECT_EQ(log.gf_products(), 0u);
  const std::vector<uint8_t> g(16 * 2, 1);
  log.AddGf(g.data(), g.data(), g.data(), g.data(), g.data(), g.data(), 2);
  EXPECT_EQ(log.gf_products(), 2u);
  EXPECT_FALSE(log.empty());
}

// Rewind empties the log for the next wave; a deviation seen outside the
// log stays marked until Clear, at the end of the batch.
TEST(MulLog, RewindAndClearEmptyIt) {
  MulLog log;
  std::vector<uint64_t> w(4, 1);
  const std::vector<uint8_t> g(16, 1);
  log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), 4);
  log.AddGf(g.data(), g.data(), g.data(), g.data(), g.data(), g.data(), 1);
  log.MarkDeviated();
  log.Rewind();
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(log.and_words(), 0u);
  EXPECT_EQ(log.gf_products(), 0u);
  EXPECT_TRUE(log.deviated());
  EXPECT_EQ(log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), 4), 0u);
  log.Clear();
  EXPECT_TRUE(log.empty());
  EXPECT_FALSE(log.deviated());
}

// The log keeps its buffers for the next batch up to
// MulLog::kMaxRetainedBytes; ReleaseExcess frees them above it.
TEST(MulLog, ReleasesBuffersOverTheBound) {
  MulLog log;
  const size_t n = 4096;
  std::vector<uint64_t> w(n, 0x5a5a5a5a5a5a5a5aull);
  for (int k = 0; k < 8; ++k) {  // 32,768 words: ~1.5 MiB with doubling
    const size_t at = log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), n);
    log.SetAndZ1(at, w.data(), n);
  }
  EXPECT_EQ(log.and_words(), 8 * n);
  log.Clear();
  const size_t small = log.retained_bytes();
  EXPECT_GE(small, 6 * 8 * 8 * n);
  log.ReleaseExcess();
  EXPECT_EQ(log.retained_bytes(), small) << "a small batch's buffers are kept";
  // Past the bound: (kMaxRetainedBytes / 48 bytes per gate word) + 4096
  // words of gate log (six 8-byte arrays).
  const size_t big = MulLog::kMaxRetainedBytes / (6 * 8 * n) + 1;
  for (size_t k = 0; k < big; ++k) {
    const size_t at = log.AddAnd(w.data(), w.data(), w.data(), w.data(), w.data(), n);
    log.SetAndZ1(at, w.data(), n);
  }
  log.Clear();
  EXPECT_GT(log.retained_bytes(), MulLog::kMaxRetainedBytes);
  log.ReleaseExcess();
  EXPECT_EQ(log.retained_bytes(), 0u);
}

// A vector grown by wiping::Reserve keeps its elements; WipeAndFree
// leaves it empty with no buffer.
TEST(MulLog, WipingVectorsKeepWhatTheyHold) {
  std::vector<uint64_t> v = {1, 2, 3};
  wiping::Reserve(v, 100);
  EXPECT_GE(v.capacity(), 100u);
  EXPECT_EQ(v, (std::vector<uint64_t>{1, 2, 3}));
  const size_t cap = v.capacity();
  wiping::Reserve(v, 10);  // room enough: unchanged
  EXPECT_EQ(v.capacity(), cap);
  wiping::WipeAndFree(v);
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(v.capacity(), 0u);
}

}  // namespace
}  // namespace kmpc::protocol
