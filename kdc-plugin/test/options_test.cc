// The module's [kdcmpc] options (options.h): parsing, defaults and the
// errors for bad values, with one cluster and with several.
#include "options.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

TEST(OptionsTest, ParsesAndRejects) {
  // Self-clocked batches by default (batcher.h).
  auto d = ParseOptions({"servers = h:1,h:2,h:3", "certs=/c"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->batcher.early_flush);
  EXPECT_EQ(d->batcher.max_inflight, 2);
  EXPECT_EQ(d->batcher.window, absl::Milliseconds(100));
  EXPECT_EQ(d->batcher.cts_window, absl::ZeroDuration());  // the hold is opt-in
  auto off = ParseOptions({"servers = h:1,h:2,h:3", "certs=/c", "early_flush=no"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->batcher.early_flush);
  auto o = ParseOptions({"servers = 127.0.0.1:1,127.0.0.1:2, 127.0.0.1:3",
                         "certs=/c", "batch_window_ms=50", "early_flush=true",
                         "deadline_ms=1500", "max_batch_jobs=9",
                         "max_batch_blocks=99", "debug=yes",
                         "max_queue_jobs=7", "speculate=off",
                         "speculate_ttl_ms=1500", "speculate_max=100",
                         "backlog_batch_jobs=33",
                         "backlog_batch_blocks=444", "max_inflight=3",
                         "cts_batch_window_ms=250"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->batcher.speculate);
  EXPECT_EQ(o->batcher.speculate_ttl, absl::Milliseconds(1500));
  EXPECT_EQ(o->batcher.speculate_max, 100u);
  EXPECT_EQ(BatcherOptions().speculate_max, 8192u);
  EXPECT_EQ(BatcherOptions().speculate_ttl, absl::Seconds(4));
  EXPECT_TRUE(BatcherOptions().speculate);
  EXPECT_EQ(o->servers[2], "127.0.0.1:3");
  EXPECT_EQ(o->ca, "/c/ca.pem");
  EXPECT_EQ(o->cert, "/c/kdc.pem");
  EXPECT_EQ(o->key, "/c/kdc.key");
  EXPECT_EQ(o->batcher.window, absl::Milliseconds(50));
  EXPECT_EQ(o->batcher.cts_window, absl::Milliseconds(250));
  EXPECT_TRUE(o->batcher.early_flush);
  EXPECT_EQ(o->batcher.deadline, absl::Milliseconds(1500));
  EXPECT_EQ(o->batcher.max_jobs, 9u);
  EXPECT_EQ(o->batcher.max_blocks, 99u);
  EXPECT_TRUE(o->batcher.debug);
  EXPECT_EQ(o->batcher.max_queue, 7u);
  EXPECT_EQ(o->batcher.backlog_jobs, 33u);
  EXPECT_EQ(o->batcher.backlog_blocks, 444u);
  EXPECT_EQ(o->batcher.max_inflight, 3);
  EXPECT_EQ(BatcherOptions().max_inflight, 2);
  EXPECT_EQ(o->metrics_addr, "");
  auto m = ParseOptions({"servers=h:1,h:2,h:3", "certs=/c",
                         "metrics_addr = 127.0.0.1:9100"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->metrics_addr, "127.0.0.1:9100");
  // Three relations instead of a list.
  EXPECT_TRUE(ParseOptions({"servers=h:1", "servers=h:2", "servers=h:3",
                            "ca=a", "cert=b", "key=c"})
                  .ok());
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"servers=h:1,h:2", "certs=/c"},
           {"servers=h:1,h:2,h", "certs=/c"},
           {"servers=h:1,h:2,h:3"},
           {"servers=h:1,h:2,h:3", "certs=/c", "batch_window_ms=-1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "early_flush=maybe"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate=2"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_ttl_ms=0"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_max=1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "speculate_ttl_ms=600000"},
           {"servers=h:1,h:2,h:3", "certs=/c", "bogus=1"},
           {"servers=h:1,h:2,h:3", "certs=/c", "backlog_batch_jobs=0"},
           {"servers=h:1,h:2,h:3", "certs=/c", "backlog_batch_blocks=x"},
           {"servers=h:1,h:2,h:3", "certs=/c", "noequals"},
           {"servers=h:1,h:2,h:3", "certs=/c", "metrics_addr=9100"},
           {"servers=h:1,h:2,h:3", "certs=/c", "metrics_addr=h:0"}}) {
    EXPECT_FALSE(ParseOptions(bad).ok()) << ::testing::PrintToString(bad);
  }
}

// Several clusters (options.h): numbered relations, later clusters
// inherit cluster 1's mTLS files unless they name their own.
TEST(OptionsTest, ParsesMoreClusters) {
  auto o = ParseOptions({"servers=a:1,a:2,a:3", "certs=/c",
                         "servers2 = b:1, b:2, b:3",
                         "servers3=c:1,c:2,c:3", "certs3=/d"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->clusters.size(), 3u);
  EXPECT_EQ(o->servers[0], "a:1");
  EXPECT_EQ(o->clusters[0].servers, o->servers);
  EXPECT_EQ(o->clusters[1].servers[1], "b:2");
  EXPECT_EQ(o->clusters[1].ca, "/c/ca.pem");
  EXPECT_EQ(o->clusters[2].key, "/d/kdc.key");
  auto one = ParseOptions({"servers=a:1,a:2,a:3", "certs=/c"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->clusters.size(), 1u);
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"servers=a:1,a:2,a:3", "certs=/c", "servers2=b:1,b:2"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers3=c:1,c:2,c:3"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers5=c:1,c:2,c:3"},
           {"servers=a:1,a:2,a:3", "certs=/c", "servers2=b:1,b:2,b:3",
            "ca2=/x"},
           {"servers=a:1,a:2,a:3", "certs=/c", "certs2=/d"}}) {
    EXPECT_FALSE(ParseOptions(bad).ok()) << ::testing::PrintToString(bad);
  }
}

}  // namespace
}  // namespace kmpc::kdc
