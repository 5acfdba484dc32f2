// Process memory as the process itself reports it, for Prometheus: read at
// each scrape, never by attaching to the process (a measurement must not be
// able to crash the measured process: malloc_trim called in the KDC through
// gdb once did).
//
//   kmpc_malloc_arena_bytes      mallinfo2().arena    heap from sbrk
//   kmpc_malloc_mmap_bytes       mallinfo2().hblkhd   heap in mmap'ed chunks
//   kmpc_malloc_in_use_bytes     mallinfo2().uordblks allocated and not freed
//   process_resident_memory_bytes  /proc/self/statm resident pages
//
// mallinfo2 (glibc >= 2.33, mallinfo(3)) walks every malloc arena under its
// lock: microseconds, once per scrape. Nothing here depends on a secret.
#ifndef KMPC_UTIL_PROCESS_METRICS_H_
#define KMPC_UTIL_PROCESS_METRICS_H_

#include <map>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kmpc::util {

class ProcessMetrics : public prometheus::Collectable {
 public:
  // Constant labels added to every sample (e.g. {"party", "0"}).
  explicit ProcessMetrics(std::map<std::string, std::string> labels = {})
      : labels_(std::move(labels)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::map<std::string, std::string> labels_;
};

// Resident set size in bytes from /proc/self/statm; 0 if unreadable.
double ResidentBytes();

}  // namespace kmpc::util

#endif  // KMPC_UTIL_PROCESS_METRICS_H_
