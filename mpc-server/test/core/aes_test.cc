// Plaintext bitsliced AES: FIPS-197 appendix C, OpenSSL with a different
// key per lane, all three S-box circuits, both kernels; the S-box exhaustively;
// bit transposition round trip. AES on shares among three parties vs
// OpenSSL, and its communication.
#include "aes/aes.h"

#include <gtest/gtest.h>

#include <cstring>

#include "aes/key_expansion.h"
#include "rep3_cluster.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::aes {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;

struct Param {
  SboxCircuit circuit;
  bool avx2;
};

class AesPlainTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { prev_ = ForceAvx2(GetParam().avx2); }
  void TearDown() override { ForceAvx2(prev_); }
  bool prev_ = false;
};

TEST_P(AesPlainTest, Fips197AppendixC) {
  const auto pt = Hex("00112233445566778899aabbccddeeff");
  struct {
    const char* key;
    const char* ct;
  } cases[] = {
      {"000102030405060708090a0b0c0d0e0f", "69c4e0d86a7b0430d8cdb78070b4c55a"},
      {"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
       "8ea2b7ca516745bfeafc49904b496089"},
  };
  for (const auto& c : cases) {
    const auto key = Hex(c.key);
    auto rk = ExpandKey(key);
    ASSERT_TRUE(rk.ok());
    uint8_t out[16];
    PlainLane lane{rk->data(), key.size() == 16 ? 10 : 14, pt.data(), out};
    ASSERT_TRUE(EncryptPlain({&lane, 1}, GetParam().circuit).ok());
    EXPECT_EQ(ToHex(out), c.ct);
  }
}

TEST_P(AesPlainTest, KeyExpansionMatchesFips197AppendixA) {
  auto rk = ExpandKey(Hex("2b7e151628aed2a6abf7158809cf4f3c"));
  ASSERT_TRUE(rk.ok());
  EXPECT_EQ(ToHex(absl::MakeConstSpan(rk->data() + 160, 16)),
            "d014f9a8c9ee2589e13f0cc8b6630ca6");
}

TEST_P(AesPlainTest, SboxExhaustive) {
  // Key all zero with round keys all zero except we only check SubBytes via
  // one round? Simpler: AES with 256 different lanes whose first byte runs
  // over all values, compared to OpenSSL.
  const auto key = Random(16);
  auto rk = ExpandKey(key);
  std::vector<uint8_t> in(256 * 16), out(256 * 16);
  for (int v = 0; v < 256; ++v) {
    for (int p = 0; p < 16; ++p) in[16 * v + p] = static_cast<uint8_t>(v + 7 * p);
  }
  std::vector<PlainLane> lanes;
  for (int v = 0; v < 256; ++v) {
    lanes.push_back({rk->data(), 10, &in[16 * v], &out[16 * v]});
  }
  ASSERT_TRUE(EncryptPlain(lanes, GetParam().circuit).ok());
  for (int v = 0; v < 256; ++v) {
    EXPECT_EQ(ToHex(absl::MakeConstSpan(&out[16 * v], 16)),
              ToHex(OpensslAes(key, &in[16 * v])))
        << v;
  }
}

TEST_P(AesPlainTest, RandomKeysPerLaneVsOpenssl) {
  for (size_t n : {1, 3, 63, 64, 65, 130, 511, 700, 4097 + 64}) {
    std::vector<std::vector<uint8_t>> keys, rks;
    std::vector<uint8_t> in = Random(16 * n), out(16 * n);
    std::vector<PlainLane> lanes;
    for (size_t l = 0; l < n; ++l) {
      // Mix AES-128 and AES-256; every few lanes share a key.
      if (l % 5 != 1) {
        keys.push_back(Random((l % 3 == 0) ? 32 : 16));
        rks.push_back(*ExpandKey(keys.back()));
      }
      lanes.push_back({rks.back().data(), keys.back().size() == 16 ? 10 : 14,
                       &in[16 * l], &out[16 * l]});
    }
    ASSERT_TRUE(EncryptPlain(lanes, GetParam().circuit).ok());
    size_t k = 0;
    for (size_t l = 0; l < n; ++l) {
      if (l % 5 != 1) k = (l == 0) ? 0 : k + 1;
      ASSERT_EQ(ToHex(absl::MakeConstSpan(&out[16 * l], 16)),
                ToHex(OpensslAes(keys[k], &in[16 * l])))
          << "n=" << n << " lane " << l;
    }
  }
}

TEST_P(AesPlainTest, SameKeyManyLanes) {
  const auto key = Random(32);
  auto rk = ExpandKey(key);
  const size_t n = 1000;
  std::vector<uint8_t> in = Random(16 * n), out(16 * n);
  std::vector<PlainLane> lanes;
  for (size_t l = 0; l < n; ++l) lanes.push_back({rk->data(), 14, &in[16 * l], &out[16 * l]});
  ASSERT_TRUE(EncryptPlain(lanes, GetParam().circuit).ok());
  for (size_t l = 0; l < n; l += 37) {
    EXPECT_EQ(ToHex(absl::MakeConstSpan(&out[16 * l], 16)),
              ToHex(OpensslAes(key, &in[16 * l])));
  }
}

TEST_P(AesPlainTest, TranspositionRoundTrip) {
  for (size_t n : {1, 64, 100, 256}) {
    const size_t wn = (n + 63) / 64 + 1;
    std::vector<uint8_t> in = Random(16 * n), back(16 * n, 0);
    std::vector<const uint8_t*> ip;
    std::vector<uint8_t*> op;
    for (size_t l = 0; l < n; ++l) {
      ip.push_back(&in[16 * l]);
      op.push_back(&back[16 * l]);
    }
    std::vector<uint64_t> planes(128 * wn, ~uint64_t{0});
    BlocksToPlanes(ip, wn, planes.data());
    // Spot-check the documented layout: bit j of byte p of lane l.
    for (size_t l = 0; l < n; l += 7) {
      for (int p = 0; p < 16; ++p) {
        for (int j = 0; j < 8; ++j) {
          const uint64_t word = planes[j * 16 * wn + 16 * (l / 64) + p];
          ASSERT_EQ((word >> (l % 64)) & 1, (in[16 * l + p] >> j) & 1u);
        }
      }
    }
    // Padding lanes are zero.
    for (int p = 0; p < 16; ++p) {
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(planes[j * 16 * wn + 16 * (wn - 1) + p], 0u);
      }
    }
    PlanesToBlocks(planes.data(), wn, op);
    EXPECT_EQ(in, back);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Circuits, AesPlainTest,
    ::testing::Values(Param{SboxCircuit::kDepth3, false},
                      Param{SboxCircuit::kDepth4, false},
                      Param{SboxCircuit::kDepth6, false},
                      Param{SboxCircuit::kDepth3, true},
                      Param{SboxCircuit::kDepth4, true},
                      Param{SboxCircuit::kDepth6, true}),
    [](const ::testing::TestParamInfo<Param>& p) {
      return "Depth" + std::to_string(AndDepth(p.param.circuit)) +
             (p.param.avx2 ? "Avx2" : "Native");
    });

TEST(AesMeta, CircuitFigures) {
  EXPECT_EQ(AndsPerSbox(SboxCircuit::kDepth3), 51);
  EXPECT_EQ(AndDepth(SboxCircuit::kDepth3), 3);
  EXPECT_EQ(AndsPerSbox(SboxCircuit::kDepth4), 34);
  EXPECT_EQ(AndDepth(SboxCircuit::kDepth4), 4);
  EXPECT_EQ(AndsPerSbox(SboxCircuit::kDepth6), 32);
  EXPECT_EQ(AndDepth(SboxCircuit::kDepth6), 6);
}

TEST(AesMeta, RejectsBadRounds) {
  uint8_t b[16] = {0}, rk[16 * 15] = {0};
  PlainLane lane{rk, 12, b, b};
  EXPECT_EQ(EncryptPlain({&lane, 1}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kmpc::aes

// AES on shares (EncryptShared) among three parties over the in-memory
// ring: against OpenSSL with several keys, both S-box circuits and both
// kernels; its communication, one bit per AND per party.
namespace kmpc::protocol {
namespace {

using Cluster = ::kmpc::testing::Rep3Cluster;
using ::kmpc::testing::Open3;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using ::kmpc::testing::ToHex;

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
    ::testing::Values(SharedParam{aes::SboxCircuit::kDepth3, false},
                      SharedParam{aes::SboxCircuit::kDepth4, false},
                      SharedParam{aes::SboxCircuit::kDepth6, false},
                      SharedParam{aes::SboxCircuit::kDepth3, true},
                      SharedParam{aes::SboxCircuit::kDepth4, true},
                      SharedParam{aes::SboxCircuit::kDepth6, true}),
    [](const ::testing::TestParamInfo<SharedParam>& p) {
      return "Depth" + std::to_string(aes::AndDepth(p.param.circuit)) +
             (p.param.avx2 ? "Avx2" : "Native");
    });

class SharedAesCost : public ::testing::TestWithParam<aes::SboxCircuit> {};

TEST_P(SharedAesCost, BytesAndMessagesPerBlock) {
  // 1 bit per AND per party: AES-128 with 64 lanes: 10 rounds * 16
  // S-boxes * ANDs per S-box * 64 lanes / 8 bytes, in one message per AND
  // layer (10 * AND depth).
  const aes::SboxCircuit circuit = GetParam();
  Cluster c;
  auto e = aes::ExpandKey(Random(16));
  auto v = share::Deal(*e);
  std::vector<uint8_t> in = Random(16 * 64);
  uint64_t before[3], msgs[3];
  for (int i = 0; i < 3; ++i) {
    before[i] = c.ring.bytes_sent(i);
    msgs[i] = c.ring.messages_sent(i);
  }
  std::array<std::vector<uint8_t>, 3> o0, o1;
  auto st = RunParties([&](int i) {
    o0[i].resize(16 * 64);
    o1[i].resize(16 * 64);
    std::vector<aes::SharedLane> lanes(64);
    for (int l = 0; l < 64; ++l) {
      lanes[l] = {{(*v)[i].comp[0].data(), (*v)[i].comp[1].data()}, 10,
                  &in[16 * l], {&o0[i][16 * l], &o1[i][16 * l]}};
    }
    return aes::EncryptShared(*c.rep3[i], lanes, circuit, aes::SharedOptions{});
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  const uint64_t ands = static_cast<uint64_t>(aes::AndsPerSbox(circuit));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.ring.bytes_sent(i) - before[i], 10u * 16 * ands * 64 / 8);
    EXPECT_EQ(c.ring.messages_sent(i) - msgs[i],
              10u * static_cast<uint64_t>(aes::AndDepth(circuit)));
  }
}

INSTANTIATE_TEST_SUITE_P(Circuits, SharedAesCost,
                         ::testing::Values(aes::SboxCircuit::kDepth3,
                                           aes::SboxCircuit::kDepth4,
                                           aes::SboxCircuit::kDepth6),
                         [](const ::testing::TestParamInfo<aes::SboxCircuit>& p) {
                           return "Depth" + std::to_string(aes::AndDepth(p.param));
                         });

}  // namespace
}  // namespace kmpc::protocol
