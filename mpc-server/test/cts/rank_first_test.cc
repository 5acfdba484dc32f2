// cts/rank_first.h against the implementation it reproduces: the first
// places of std::sort (this toolchain's libstdc++) on the same keys, ties
// included, for random, sorted, reversed and all-equal inputs of every
// size around the partition threshold (16) and well past it.
#include "cts/rank_first.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kmpc::cts {
namespace {

bool RankLess(uint64_t x, uint64_t y) { return (x >> 32) < (y >> 32); }

// keys[i]: rank `rank(i)` in the high half, index i in the low one.
template <typename F>
std::vector<uint64_t> Keys(size_t n, F rank) {
  std::vector<uint64_t> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = (uint64_t{rank(i)} << 32) | i;
  return k;
}

void ExpectStdSortPrefix(const std::vector<uint64_t>& keys, size_t keep) {
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end(), RankLess);
  std::vector<uint64_t> work = keys, out(keep + 1, ~uint64_t{0});
  const size_t m = RankFirst(work.data(), work.size(), keep, out.data());
  ASSERT_EQ(m, std::min(keys.size(), keep));
  for (size_t i = 0; i < m; ++i)
    ASSERT_EQ(out[i], sorted[i]) << "place " << i << " of " << keys.size() << ", keep "
                                 << keep;
  EXPECT_EQ(out[keep], ~uint64_t{0}) << "wrote past keep";
}

TEST(RankFirst, TheFirstPlacesOfStdSortTiesIncluded) {
  std::mt19937_64 rng(20261129);
  for (size_t n : {0, 1, 2, 15, 16, 17, 18, 33, 64, 100, 257, 1000, 4096}) {
    for (size_t keep : {1, 2, 5, 8, 16, 40, 5000}) {
      for (uint32_t ranks : {1u, 3u, 12u, 1000u}) {  // 1: all tie
        std::uniform_int_distribution<uint32_t> r(0, ranks - 1);
        ExpectStdSortPrefix(Keys(n, [&](size_t) { return r(rng); }), keep);
      }
      ExpectStdSortPrefix(Keys(n, [](size_t i) { return static_cast<uint32_t>(i / 3); }), keep);
      ExpectStdSortPrefix(Keys(n, [n](size_t i) { return static_cast<uint32_t>((n - i) / 2); }),
                          keep);
    }
  }
}

TEST(RankFirst, KeepingNothingWritesNothing) {
  std::vector<uint64_t> keys = Keys(40, [](size_t i) { return static_cast<uint32_t>(i % 7); });
  uint64_t out = 7;
  EXPECT_EQ(RankFirst(keys.data(), keys.size(), 0, &out), 0u);
  EXPECT_EQ(out, 7u);
}

}  // namespace
}  // namespace kmpc::cts
