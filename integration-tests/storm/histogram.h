// Log-linear latency histogram in the manner of HdrHistogram (Gil Tene):
// every power of two [2^e, 2^(e+1)) is split into 2^kSubBits equal
// sub-buckets, so the relative error of any recorded value is below
// 2^-kSubBits (kSubBits = 6: 1.6%) while the whole range 1 us .. 2^40 us
// fits in ~2,200 counters.  Values are microseconds.
//
// One writer thread records; other threads may read concurrently for the
// progress line (relaxed atomics through std::atomic_ref: the figures are
// approximate while the storm runs and exact once the writer has joined).
#ifndef KMPC_STORM_HISTOGRAM_H_
#define KMPC_STORM_HISTOGRAM_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace kmpc::storm {

template <int kSubBits>
class LogLinearHistogram {
 public:
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kMaxExp = 40;  // values clamp at 2^41 - 1 us
  static constexpr int kBuckets = 2 * kSub + (kMaxExp - kSubBits) * kSub;

  LogLinearHistogram() : counts_(kBuckets, 0) {}

  static int IndexOf(uint64_t v) {
    if (v < static_cast<uint64_t>(2 * kSub)) return static_cast<int>(v);
    int e = 63 - __builtin_clzll(v);
    if (e > kMaxExp) return kBuckets - 1;
    int shift = e - kSubBits;
    return 2 * kSub + (e - kSubBits - 1) * kSub +
           static_cast<int>((v >> shift) - kSub);
  }
  // [Lower, Upper] of the values that land in bucket i.
  static uint64_t LowerOf(int i) {
    if (i < 2 * kSub) return static_cast<uint64_t>(i);
    int e = (i - 2 * kSub) / kSub + kSubBits + 1;
    int m = (i - 2 * kSub) % kSub;
    return (static_cast<uint64_t>(kSub + m)) << (e - kSubBits);
  }
  static uint64_t UpperOf(int i) {
    if (i < 2 * kSub) return static_cast<uint64_t>(i);
    int e = (i - 2 * kSub) / kSub + kSubBits + 1;
    return LowerOf(i) + (uint64_t{1} << (e - kSubBits)) - 1;
  }

  void Record(uint64_t v) {
    Bump(counts_[IndexOf(v)]);
    Bump(total_);
    Store(sum_, Load(sum_) + v);
    if (v > Load(max_)) Store(max_, v);
    if (Load(total_) == 1 || v < Load(min_)) Store(min_, v);
  }

  void Merge(const LogLinearHistogram& o) {
    for (int i = 0; i < kBuckets; i++) counts_[i] += Load(o.counts_[i]);
    uint64_t ot = Load(o.total_);
    if (ot == 0) return;
    if (total_ == 0 || Load(o.min_) < min_) min_ = Load(o.min_);
    total_ += ot;
    sum_ += Load(o.sum_);
    max_ = std::max(max_, Load(o.max_));
  }

  uint64_t Count() const { return Load(total_); }
  uint64_t Max() const { return Load(max_); }
  uint64_t Min() const { return Load(min_); }
  double Mean() const {
    uint64_t t = Load(total_);
    return t ? static_cast<double>(Load(sum_)) / t : 0.0;
  }
  uint64_t BucketCount(int i) const { return Load(counts_[i]); }

  // The smallest recorded value v such that at least q (0..1) of the values
  // are <= v, reported as the bucket's upper edge (HdrHistogram's
  // "highest equivalent value"), clamped to the true maximum.
  uint64_t Quantile(double q) const {
    uint64_t t = Load(total_);
    if (t == 0) return 0;
    uint64_t want = static_cast<uint64_t>(q * static_cast<double>(t) + 0.5);
    if (want < 1) want = 1;
    if (want > t) want = t;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; i++) {
      seen += Load(counts_[i]);
      if (seen >= want) return std::min(UpperOf(i), Load(max_));
    }
    return Load(max_);
  }

 private:
  static uint64_t Load(const uint64_t& x) {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(x))
        .load(std::memory_order_relaxed);
  }
  static void Store(uint64_t& x, uint64_t v) {
    std::atomic_ref<uint64_t>(x).store(v, std::memory_order_relaxed);
  }
  static void Bump(uint64_t& x) { Store(x, Load(x) + 1); }

  std::vector<uint64_t> counts_;
  uint64_t total_ = 0, sum_ = 0, max_ = 0, min_ = 0;
};

using Histogram = LogLinearHistogram<6>;     // whole-run latencies
using CoarseHistogram = LogLinearHistogram<4>;  // per-second rows (6%)

}  // namespace kmpc::storm

#endif  // KMPC_STORM_HISTOGRAM_H_
