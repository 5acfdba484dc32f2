// protocol/prss.h: three parties in one process over the in-memory ring:
// zero-shares sum to zero, random shares are consistent replicated shares.
#include <gtest/gtest.h>

#include <vector>

#include "protocol/prss.h"
#include "rep3_cluster.h"
#include "share/replicated.h"

namespace kmpc::protocol {
namespace {

using Cluster = ::kmpc::testing::Rep3Cluster;
using ::kmpc::testing::Open3;

TEST(Prss, ZeroSharesSumToZeroAndAreNotZero) {
  Cluster c;
  std::array<std::vector<uint8_t>, 3> z;
  for (int i = 0; i < 3; ++i) {
    z[i].resize(1000);
    c.prss[i]->ZeroShare(z[i].data(), z[i].size());
  }
  std::vector<uint8_t> sum(1000, 0);
  for (int i = 0; i < 3; ++i) {
    for (size_t k = 0; k < 1000; ++k) sum[k] ^= z[i][k];
  }
  EXPECT_EQ(sum, std::vector<uint8_t>(1000, 0));
  EXPECT_NE(z[0], std::vector<uint8_t>(1000, 0));
  EXPECT_NE(z[0], z[1]);
  // Ids never repeat: the next draw differs.
  std::vector<uint8_t> again(1000);
  c.prss[0]->ZeroShare(again.data(), again.size());
  EXPECT_NE(again, z[0]);
}

TEST(Prss, RandomSharesAreConsistent) {
  Cluster c;
  std::array<share::View, 3> v;
  for (int i = 0; i < 3; ++i) {
    v[i].comp[0].resize(40);
    v[i].comp[1].resize(40);
    c.prss[i]->RandomShares(v[i].comp[0].data(), v[i].comp[1].data(), 40);
  }
  auto r = Open3(v);  // checks the two copies of every share agree
  EXPECT_NE(r, std::vector<uint8_t>(40, 0));
}

}  // namespace
}  // namespace kmpc::protocol
