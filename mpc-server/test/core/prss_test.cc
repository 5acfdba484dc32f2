// Three parties in one process over the in-memory ring: PRSS, AND layers,
// GF(2^128) products, reveal, and AES on shares vs OpenSSL.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>

#include "aes/aes.h"
#include "aes/key_expansion.h"
#include "net/memory_ring.h"
#include "protocol/gf128.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using ::kmpc::testing::ToHex;

// Three set-up PRSS instances on one ring.
struct Cluster {
  net::InMemoryRing ring;
  std::array<std::optional<Prss>, 3> prss;
  std::array<std::unique_ptr<Rep3>, 3> rep3;
  Cluster() {
    auto st = RunParties([&](int i) -> absl::Status {
      auto p = Prss::Setup(ring.party(i));
      if (!p.ok()) return p.status();
      prss[i].emplace(std::move(*p));
      return absl::OkStatus();
    });
    for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
    for (int i = 0; i < 3; ++i) rep3[i] = std::make_unique<Rep3>(ring.party(i), *prss[i]);
  }
};

std::vector<uint8_t> Open3(const std::array<share::View, 3>& v) {
  auto o = share::Open(v);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : std::vector<uint8_t>{};
}

TEST(Prf, IsAes128CtrBothImplementations) {
  const auto key = Random(16);
  for (bool aesni : {false, true}) {
    const bool prev = PrfForceAesNi(aesni);
    Prf f(key.data());
    for (size_t n : {1, 3, 4, 5, 8, 15, 16, 17, 40, 73}) {
      std::vector<uint8_t> out(16 * n);
      const uint64_t ctr = 0xfffffffffffffff0ull + n;  // crosses 2^64 wrap
      f.Fill(ctr, n, out.data());
      for (size_t i = 0; i < n; ++i) {
        uint8_t block[16] = {0};
        const uint64_t c = ctr + i;
        std::memcpy(block, &c, 8);  // little-endian counter, bytes 8..15 zero
        ASSERT_EQ(ToHex(absl::MakeConstSpan(&out[16 * i], 16)),
                  ToHex(OpensslAes(key, block)))
            << PrfImplementation() << " n=" << n << " i=" << i;
      }
      // FillXor2 = Fill(a) ^ Fill(b).
      const auto key2 = Random(16);
      Prf g(key2.data());
      std::vector<uint8_t> x(16 * n), y(16 * n), z(16 * n);
      f.Fill(ctr, n, x.data());
      g.Fill(ctr, n, y.data());
      Prf::FillXor2(f, g, ctr, n, z.data());
      for (size_t k = 0; k < z.size(); ++k) ASSERT_EQ(z[k], x[k] ^ y[k]);
    }
    PrfForceAesNi(prev);
  }
}

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

struct SharedParam {
  aes::SboxCircuit circuit;
  bool avx2;
};

class SharedAesTest : public ::testing::TestWithParam<SharedParam> {
 protected:
  void SetUp() override { prev_ = aes::ForceAvx2(GetParam().avx2); }
  void TearDown() override { aes::ForceAvx2(prev_); }
  bool prev_ = false;
};

TEST_P(SharedAesTest, MatchesOpenssl) {
  Cluster c;
  for (size_t n : {1, 65, 300}) {
    const size_t nkeys = 7;
    std::vector<std::vector<uint8_t>> keys;
    std::vector<std::array<share::View, 3>> rk;
    for (size_t k = 0; k < nkeys; ++k) {
      keys.push_back(Random(k % 2 ? 32 : 16));
      auto e = aes::ExpandKey(keys.back());
      ASSERT_TRUE(e.ok());
      auto v = share::Deal(*e);
      ASSERT_TRUE(v.ok());
      rk.push_back(std::move(*v));
    }
    std::vector<uint8_t> in = Random(16 * n);
    std::array<share::View, 3> out;
    auto st = RunParties([&](int i) {
      out[i].comp[0].resize(16 * n);
      out[i].comp[1].resize(16 * n);
      std::vector<aes::SharedLane> lanes(n);
      for (size_t l = 0; l < n; ++l) {
        const size_t k = (l / 3) % nkeys;
        lanes[l] = {{rk[k][i].comp[0].data(), rk[k][i].comp[1].data()},
                    keys[k].size() == 16 ? 10 : 14,
                    &in[16 * l],
                    {&out[i].comp[0][16 * l], &out[i].comp[1][16 * l]}};
      }
      aes::SharedOptions o;
      o.chunk_lanes = 128;
      o.wave_lanes = 192;
      return aes::EncryptShared(*c.rep3[i], lanes, GetParam().circuit, o);
    });
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
    auto ct = Open3(out);
    ASSERT_EQ(ct.size(), 16 * n);
    for (size_t l = 0; l < n; ++l) {
      const size_t k = (l / 3) % nkeys;
      ASSERT_EQ(ToHex(absl::MakeConstSpan(&ct[16 * l], 16)),
                ToHex(OpensslAes(keys[k], &in[16 * l])))
          << "n=" << n << " lane " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Circuits, SharedAesTest,
    ::testing::Values(SharedParam{aes::SboxCircuit::kDepth4, false},
                      SharedParam{aes::SboxCircuit::kDepth6, false},
                      SharedParam{aes::SboxCircuit::kDepth4, true},
                      SharedParam{aes::SboxCircuit::kDepth6, true}),
    [](const ::testing::TestParamInfo<SharedParam>& p) {
      return std::string(p.param.circuit == aes::SboxCircuit::kDepth4 ? "Depth4"
                                                                      : "Depth6") +
             (p.param.avx2 ? "Avx2" : "Native");
    });

TEST(SharedAes, BytesPerBlock) {
  // 1 bit per AND per party: AES-128 with 64 lanes, 34-AND S-box:
  // 10 rounds * 16 S-boxes * 34 ANDs * 64 lanes / 8 bytes.
  Cluster c;
  auto e = aes::ExpandKey(Random(16));
  auto v = share::Deal(*e);
  std::vector<uint8_t> in = Random(16 * 64);
  uint64_t before[3];
  for (int i = 0; i < 3; ++i) before[i] = c.ring.bytes_sent(i);
  std::array<std::vector<uint8_t>, 3> o0, o1;
  auto st = RunParties([&](int i) {
    o0[i].resize(16 * 64);
    o1[i].resize(16 * 64);
    std::vector<aes::SharedLane> lanes(64);
    for (int l = 0; l < 64; ++l) {
      lanes[l] = {{(*v)[i].comp[0].data(), (*v)[i].comp[1].data()}, 10,
                  &in[16 * l], {&o0[i][16 * l], &o1[i][16 * l]}};
    }
    return aes::EncryptShared(*c.rep3[i], lanes, aes::SboxCircuit::kDepth4, aes::SharedOptions{});
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.ring.bytes_sent(i) - before[i], 10u * 16 * 34 * 64 / 8);
  }
}

TEST(Ring, ReceiveTimesOutAndSizeMismatchIsDataLoss) {
  net::InMemoryRing ring(std::chrono::milliseconds(50));
  uint8_t buf[4];
  EXPECT_EQ(ring.party(0).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kUnavailable);
  uint8_t msg[3] = {1, 2, 3};
  ASSERT_TRUE(ring.party(1).SendToPrev(msg).ok());
  EXPECT_EQ(ring.party(0).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kDataLoss);
  ring.Shutdown();
  EXPECT_EQ(ring.party(2).RecvFromNext(absl::MakeSpan(buf)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kmpc::protocol
