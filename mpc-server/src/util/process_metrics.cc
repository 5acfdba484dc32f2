#include "util/process_metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace kmpc::util {

double ResidentBytes() {
  // statm: size resident shared text lib data dt, in pages (proc(5)).
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  const struct mallinfo2 mi = mallinfo2();
  std::vector<prometheus::ClientMetric::Label> labels;
  for (const auto& [k, v] : labels_) labels.push_back({k, v});
  auto gauge = [&](const char* name, const char* help, double value) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    m.label = labels;
    m.gauge.value = value;
    f.metric.push_back(std::move(m));
    return f;
  };
  return {
      gauge("kmpc_malloc_arena_bytes",
            "malloc heap obtained with sbrk (mallinfo2 arena)",
            static_cast<double>(mi.arena)),
      gauge("kmpc_malloc_mmap_bytes",
            "malloc heap in mmap'ed chunks (mallinfo2 hblkhd)",
            static_cast<double>(mi.hblkhd)),
      gauge("kmpc_malloc_in_use_bytes",
            "malloc bytes allocated and not freed (mallinfo2 uordblks)",
            static_cast<double>(mi.uordblks)),
      gauge("process_resident_memory_bytes",
            "resident set size (/proc/self/statm)", ResidentBytes()),
  };
}

}  // namespace kmpc::util
