// Per-batch counters and a latency histogram in the Prometheus text format
// (served by the Admin.Metrics RPC). Only public figures: counts, sizes,
// durations; never anything derived from keys or plaintext.
#ifndef KMPC_SERVICE_METRICS_H_
#define KMPC_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace kmpc::service {

class Metrics {
 public:
  static constexpr std::array<double, 12> kBucketsSeconds = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5};

  // kind: "run" or "finalize".
  void RecordBatch(const char* kind, bool ok, uint64_t jobs, uint64_t aes_blocks,
                   uint64_t ring_bytes, uint64_t ring_messages,
                   absl::Duration latency);
  void RecordRejected() { rejected_.fetch_add(1); }
  void RecordIntegrityFailure() { integrity_failures_.fetch_add(1); }

  uint64_t batches_ok() const { return ok_[0] + ok_[1]; }
  uint64_t batches_failed() const { return failed_[0] + failed_[1]; }

  std::string Render(int party) const;

 private:
  std::atomic<uint64_t> ok_[2] = {0, 0};
  std::atomic<uint64_t> failed_[2] = {0, 0};
  std::atomic<uint64_t> jobs_{0};
  std::atomic<uint64_t> aes_blocks_{0};
  std::atomic<uint64_t> ring_bytes_{0};
  std::atomic<uint64_t> ring_messages_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> integrity_failures_{0};
  std::atomic<uint64_t> buckets_[kBucketsSeconds.size() + 1] = {};
  std::atomic<uint64_t> latency_us_sum_{0};
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_METRICS_H_
