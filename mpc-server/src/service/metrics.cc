#include "service/metrics.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kmpc::service {

void Metrics::RecordBatch(const char* kind, bool ok, uint64_t jobs,
                          uint64_t aes_blocks, uint64_t ring_bytes,
                          uint64_t ring_messages, absl::Duration latency) {
  int k = std::strcmp(kind, "run") == 0 ? 0 : 1;
  (ok ? ok_[k] : failed_[k]).fetch_add(1);
  if (ok) {
    jobs_.fetch_add(jobs);
    aes_blocks_.fetch_add(aes_blocks);
  }
  ring_bytes_.fetch_add(ring_bytes);
  ring_messages_.fetch_add(ring_messages);
  double s = absl::ToDoubleSeconds(latency);
  size_t b = 0;
  while (b < kBucketsSeconds.size() && s > kBucketsSeconds[b]) ++b;
  buckets_[b].fetch_add(1);
  latency_us_sum_.fetch_add(absl::ToInt64Microseconds(latency));
}

std::string Metrics::Render(int party) const {
  std::string out;
  const std::string p = absl::StrCat("party=\"", party, "\"");
  absl::StrAppend(&out, "# TYPE kmpc_batches_total counter\n");
  const char* kinds[2] = {"run", "finalize"};
  for (int k = 0; k < 2; ++k) {
    absl::StrAppend(&out, "kmpc_batches_total{", p, ",kind=\"", kinds[k],
                    "\",result=\"ok\"} ", ok_[k].load(), "\n");
    absl::StrAppend(&out, "kmpc_batches_total{", p, ",kind=\"", kinds[k],
                    "\",result=\"error\"} ", failed_[k].load(), "\n");
  }
  absl::StrAppend(&out, "# TYPE kmpc_batches_rejected_total counter\n",
                  "kmpc_batches_rejected_total{", p, "} ", rejected_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_jobs_total counter\nkmpc_jobs_total{", p,
                  "} ", jobs_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_aes_blocks_total counter\nkmpc_aes_blocks_total{",
                  p, "} ", aes_blocks_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_integrity_failures_total counter\n",
                  "kmpc_integrity_failures_total{", p, "} ",
                  integrity_failures_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_ring_bytes_sent_total counter\n",
                  "kmpc_ring_bytes_sent_total{", p, "} ", ring_bytes_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_ring_messages_sent_total counter\n",
                  "kmpc_ring_messages_sent_total{", p, "} ",
                  ring_messages_.load(), "\n");
  absl::StrAppend(&out, "# TYPE kmpc_batch_latency_seconds histogram\n");
  uint64_t cum = 0;
  for (size_t b = 0; b < kBucketsSeconds.size(); ++b) {
    cum += buckets_[b].load();
    absl::StrAppend(&out, "kmpc_batch_latency_seconds_bucket{", p, ",le=\"",
                    absl::StrFormat("%g", kBucketsSeconds[b]), "\"} ", cum, "\n");
  }
  cum += buckets_[kBucketsSeconds.size()].load();
  absl::StrAppend(&out, "kmpc_batch_latency_seconds_bucket{", p,
                  ",le=\"+Inf\"} ", cum, "\n");
  absl::StrAppend(&out, "kmpc_batch_latency_seconds_sum{", p, "} ",
                  absl::StrFormat("%.6f", latency_us_sum_.load() / 1e6), "\n");
  absl::StrAppend(&out, "kmpc_batch_latency_seconds_count{", p, "} ", cum, "\n");
  return out;
}

}  // namespace kmpc::service
