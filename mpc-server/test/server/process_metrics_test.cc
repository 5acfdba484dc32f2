// Process memory for Prometheus (util/process_metrics.h): the four gauges,
// their labels, and values that move with the process's own allocations.
#include "util/process_metrics.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace kmpc::util {
namespace {

std::map<std::string, double> Gauges(const ProcessMetrics& m,
                                     std::map<std::string, std::string>* labels) {
  std::map<std::string, double> out;
  for (const auto& f : m.Collect()) {
    EXPECT_EQ(f.type, prometheus::MetricType::Gauge) << f.name;
    EXPECT_EQ(f.metric.size(), 1u) << f.name;
    if (f.metric.empty()) continue;
    out[f.name] = f.metric[0].gauge.value;
    for (const auto& l : f.metric[0].label) (*labels)[l.name] = l.value;
  }
  return out;
}

TEST(ProcessMetricsTest, FourGaugesWithTheConstantLabels) {
  ProcessMetrics m(std::map<std::string, std::string>{{"party", "2"}});
  std::map<std::string, std::string> labels;
  auto g = Gauges(m, &labels);
  for (const char* name : {"kmpc_malloc_arena_bytes", "kmpc_malloc_mmap_bytes",
                           "kmpc_malloc_in_use_bytes", "process_resident_memory_bytes"})
    EXPECT_TRUE(g.count(name)) << name;
  EXPECT_EQ(labels["party"], "2");
  EXPECT_GT(g["process_resident_memory_bytes"], 0);
  EXPECT_GT(g["kmpc_malloc_in_use_bytes"], 0);
}

TEST(ProcessMetricsTest, InUseAndResidentFollowAnAllocation) {
  ProcessMetrics m;
  std::map<std::string, std::string> labels;
  const double in_use0 = Gauges(m, &labels)["kmpc_malloc_in_use_bytes"];
  const double mmap0 = Gauges(m, &labels)["kmpc_malloc_mmap_bytes"];
  const double rss0 = ResidentBytes();
  // 64 MiB, touched: above glibc's mmap threshold, so an mmap'ed chunk.
  const size_t n = size_t{64} << 20;
  char* p = static_cast<char*>(std::malloc(n));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, n);
  auto g = Gauges(m, &labels);
  EXPECT_GE(g["kmpc_malloc_mmap_bytes"] - mmap0, n);
  EXPECT_GE(g["kmpc_malloc_in_use_bytes"] + g["kmpc_malloc_mmap_bytes"] -
                in_use0 - mmap0, n);
  EXPECT_GT(ResidentBytes() - rss0, n / 2);
  std::free(p);
  EXPECT_LT(Gauges(m, &labels)["kmpc_malloc_mmap_bytes"], mmap0 + n);
}

}  // namespace
}  // namespace kmpc::util
