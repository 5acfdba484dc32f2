// The log-linear histogram: bucket edges, quantiles, merging.
#include "histogram.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace kmpc::storm {
namespace {

TEST(HistogramTest, BucketsTileTheRange) {
  // Consecutive buckets meet exactly, and every value lands in the bucket
  // whose [Lower, Upper] holds it.
  for (int i = 0; i + 1 < Histogram::kBuckets; i++) {
    ASSERT_EQ(Histogram::UpperOf(i) + 1, Histogram::LowerOf(i + 1)) << i;
  }
  std::mt19937_64 rng(7);
  for (int n = 0; n < 100000; n++) {
    uint64_t v = rng() >> (rng() % 64);
    if (v >= (uint64_t{1} << 41)) continue;
    int i = Histogram::IndexOf(v);
    ASSERT_LE(Histogram::LowerOf(i), v);
    ASSERT_GE(Histogram::UpperOf(i), v);
  }
}

TEST(HistogramTest, RelativeErrorBelowOneSixtyFourth) {
  for (int i = 2 * Histogram::kSub; i < Histogram::kBuckets; i++) {
    double lo = static_cast<double>(Histogram::LowerOf(i));
    double hi = static_cast<double>(Histogram::UpperOf(i));
    ASSERT_LT((hi - lo) / lo, 1.0 / 64) << i;
  }
}

TEST(HistogramTest, QuantilesOfAUniformRun) {
  Histogram h;
  for (uint64_t v = 1; v <= 10000; v++) h.Record(v);
  EXPECT_EQ(h.Count(), 10000u);
  EXPECT_EQ(h.Min(), 1u);
  EXPECT_EQ(h.Max(), 10000u);
  EXPECT_NEAR(h.Mean(), 5000.5, 1e-9);
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double want = q * 10000;
    EXPECT_NEAR(static_cast<double>(h.Quantile(q)), want, want / 64 + 1) << q;
  }
  EXPECT_EQ(h.Quantile(1.0), 10000u);
}

TEST(HistogramTest, MergeAddsCounts) {
  Histogram a, b;
  for (int i = 0; i < 100; i++) a.Record(100);
  for (int i = 0; i < 100; i++) b.Record(5000);
  a.Merge(b);
  EXPECT_EQ(a.Count(), 200u);
  EXPECT_EQ(a.Min(), 100u);
  EXPECT_EQ(a.Max(), 5000u);
  EXPECT_EQ(a.Quantile(0.5), 100u);
  EXPECT_GE(a.Quantile(0.51), 5000u - 5000u / 64);
  Histogram empty;
  a.Merge(empty);
  EXPECT_EQ(a.Count(), 200u);
}

TEST(HistogramTest, HugeValuesClampToTheLastBucket) {
  Histogram h;
  h.Record(UINT64_MAX / 2);
  EXPECT_EQ(Histogram::IndexOf(UINT64_MAX / 2), Histogram::kBuckets - 1);
  EXPECT_EQ(h.Count(), 1u);
}

}  // namespace
}  // namespace kmpc::storm
