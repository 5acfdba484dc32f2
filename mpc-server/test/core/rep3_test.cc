// protocol/rep3.h: three parties in one process over the in-memory ring:
// an AND layer (one message of n words per party), shared GF(2^128)
// products against the SP 800-38D bit-by-bit reference, reveal, and the
// local GF(2^128) operations on shares.
#include "protocol/rep3.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "protocol/gf128.h"
#include "rep3_cluster.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using Cluster = ::kmpc::testing::Rep3Cluster;
using ::kmpc::testing::Open3;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;

TEST(Rep3, AndLayer) {
  Cluster c;
  const size_t n = 37;
  auto xb = Random(8 * n), yb = Random(8 * n);
  auto vx = share::Deal(xb), vy = share::Deal(yb);
  ASSERT_TRUE(vx.ok() && vy.ok());
  std::array<share::View, 3> vz;
  auto words = [](std::vector<uint8_t>& b) {
    return absl::MakeSpan(reinterpret_cast<uint64_t*>(b.data()), b.size() / 8);
  };
  auto st = RunParties([&](int i) {
    vz[i].comp[0].resize(8 * n);
    vz[i].comp[1].resize(8 * n);
    return c.rep3[i]->And(words((*vx)[i].comp[0]), words((*vx)[i].comp[1]),
                          words((*vy)[i].comp[0]), words((*vy)[i].comp[1]),
                          words(vz[i].comp[0]), words(vz[i].comp[1]));
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  auto z = Open3(vz);
  for (size_t k = 0; k < 8 * n; ++k) ASSERT_EQ(z[k], xb[k] & yb[k]);
  // One message of n words per party.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.ring.bytes_sent(i), 16u + 8 * n);
}

TEST(Rep3, GfMulAndReveal) {
  Cluster c;
  const size_t n = 5;
  auto xb = Random(16 * n), yb = Random(16 * n);
  auto vx = share::Deal(xb), vy = share::Deal(yb);
  ASSERT_TRUE(vx.ok() && vy.ok());
  std::array<share::View, 3> vz;
  std::array<std::vector<uint8_t>, 3> opened;
  auto st = RunParties([&](int i) {
    vz[i].comp[0].resize(16 * n);
    vz[i].comp[1].resize(16 * n);
    absl::Status s = c.rep3[i]->GfMul((*vx)[i].comp[0], (*vx)[i].comp[1],
                                      (*vy)[i].comp[0], (*vy)[i].comp[1],
                                      absl::MakeSpan(vz[i].comp[0]),
                                      absl::MakeSpan(vz[i].comp[1]));
    if (!s.ok()) return s;
    opened[i].resize(16 * n);
    return c.rep3[i]->Reveal(vz[i].comp[0], vz[i].comp[1],
                             absl::MakeSpan(opened[i]));
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  auto z = Open3(vz);
  for (size_t j = 0; j < n; ++j) {
    Block a, b;
    std::memcpy(a.data(), &xb[16 * j], 16);
    std::memcpy(b.data(), &yb[16 * j], 16);
    const Block p = GfMulReference(a, b);
    EXPECT_EQ(0, std::memcmp(p.data(), &z[16 * j], 16));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(opened[i], z);
}

TEST(Rep3, LocalGfOpsOnShares) {
  const size_t n = 3;
  auto xb = Random(16 * n), cb = Random(16);
  auto vx = share::Deal(xb);
  ASSERT_TRUE(vx.ok());
  std::array<share::View, 3> vm = *vx, vs = *vx;
  for (int i = 0; i < 3; ++i) {
    Rep3::GfMulPublic(cb, (*vx)[i].comp[0], (*vx)[i].comp[1],
                      absl::MakeSpan(vm[i].comp[0]), absl::MakeSpan(vm[i].comp[1]));
    Rep3::GfSquare((*vx)[i].comp[0], (*vx)[i].comp[1], absl::MakeSpan(vs[i].comp[0]),
                   absl::MakeSpan(vs[i].comp[1]));
  }
  auto m = Open3(vm), sq = Open3(vs);
  Block c;
  std::memcpy(c.data(), cb.data(), 16);
  for (size_t j = 0; j < n; ++j) {
    Block a;
    std::memcpy(a.data(), &xb[16 * j], 16);
    EXPECT_EQ(0, std::memcmp(GfMulReference(a, c).data(), &m[16 * j], 16));
    EXPECT_EQ(0, std::memcmp(GfMulReference(a, a).data(), &sq[16 * j], 16));
  }
}

}  // namespace
}  // namespace kmpc::protocol
