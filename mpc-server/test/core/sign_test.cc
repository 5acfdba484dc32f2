// engine/sign.cc: ring-free signing with a pad (engine.h PadState,
// SignShare). Pads dealt in the clear from the shared vectors' ctr0 give
// the vectors' checksums and the reference's for random messages (up to
// 1000 bytes: more powers of H than a key stores); no party's share is the
// tag; malformed inputs are refused. (Pads drawn by a real Run:
// engine_test's Sign.PadsFromARunSignCorrectly.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "enctype_reference.h"
#include "engine/engine.h"
#include "protocol/gf128.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using reference::Const;
using reference::ReadFile;
using reference::RefChecksum;
using reference::Section;
using reference::SignAll;
using Bytes = std::vector<uint8_t>;

// The three parties' pads for `key` and a ctr0 chosen here, dealt in the
// clear (a dealer's view of what a PAD job leaves): shares of AES_K(c0),
// of H^1..H^m (the stored 64, or all m dealt afresh beyond them) and a
// zero-sharing z_i = r_i ^ r_{i+1}.
std::array<std::shared_ptr<PadState>, 3> DealPad(const Bytes& key, const Bytes& ctr0,
                                                 uint32_t usage, uint32_t max_length) {
  const Cipher cipher = key.size() == 16 ? Cipher::kAes128 : Cipher::kAes256;
  auto views = DealKey(cipher, key);
  EXPECT_TRUE(views.ok());
  const size_t m = protocol::GhashBlocks(5, max_length);
  std::array<share::View, 3> powers;
  if (m > static_cast<size_t>(kStoredHPowers)) {
    const uint8_t zero[16] = {0};
    const auto h16 = OpensslAes(key, zero);
    protocol::Block h, p;
    std::copy(h16.begin(), h16.end(), h.begin());
    p = h;
    Bytes all;
    for (size_t k = 1; k <= m; ++k) {
      all.insert(all.end(), p.begin(), p.end());
      p = protocol::GfMulReference(p, h);
    }
    auto dealt = share::Deal(all);
    EXPECT_TRUE(dealt.ok());
    powers = *dealt;
  }
  const auto e0 = OpensslAes(key, ctr0.data());
  auto mask = share::Deal(absl::MakeConstSpan(e0.data(), 16));
  EXPECT_TRUE(mask.ok());
  const Bytes r = Random(48);
  std::array<std::shared_ptr<PadState>, 3> out;
  for (int i = 0; i < 3; ++i) {
    auto pad = std::make_shared<PadState>();
    pad->party = i;
    pad->cipher = cipher;
    pad->usage = usage;
    pad->max_length = max_length;
    std::copy(ctr0.begin(), ctr0.end(), pad->ctr0.begin());
    for (int k = 0; k < 2; ++k)
      std::copy((*mask)[i].comp[k].begin(), (*mask)[i].comp[k].end(), pad->mask[k].begin());
    for (int b = 0; b < 16; ++b)
      pad->zero[b] = r[16 * i + b] ^ r[16 * ((i + 1) % 3) + b];
    if (m > static_cast<size_t>(kStoredHPowers)) {
      pad->h_powers = powers[i].comp;
    } else {
      pad->key = std::make_shared<const KeyShares>((*views)[i]);
    }
    out[i] = std::move(pad);
  }
  return out;
}

// Pads dealt from the vectors' ctr0: the three t_i XOR to the vectors'
// checksums, and to the reference for random messages (a 1000-byte one
// needs 65 powers: beyond the stored ones).
TEST(Sign, SharesOfDealtPadsGiveTheVectorsChecksums) {
  const std::string json = ReadFile(KMPC_VECTORS_PATH);
  auto cks = Section(json, "checksum");
  ASSERT_GE(cks.size(), 6u);
  std::set<size_t> key_sizes;
  for (auto& v : cks) {
    const Bytes key = Hex(v["key"]), ctr0 = Hex(v["ctr0"]), d = Hex(v["data"]);
    const uint32_t usage = std::stoul(v["usage"]);
    key_sizes.insert(key.size());
    const Bytes full = Hex(v["checksum"]);
    const Bytes want(full.begin() + 16, full.end());
    auto pads = DealPad(key, ctr0, usage, static_cast<uint32_t>(d.size()) + 40);
    std::array<Bytes, 3> t;
    EXPECT_EQ(ToHex(SignAll(Const(pads), usage, d, &t)), ToHex(want));
    // No party's share is the tag.
    for (int i = 0; i < 3; ++i) EXPECT_NE(ToHex(t[i]), ToHex(want));
  }
  EXPECT_EQ(key_sizes, (std::set<size_t>{16, 32}));
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len), ctr0 = Random(16);
    for (uint32_t len : {0, 1, 16, 17, 1000}) {
      auto pads = DealPad(key, ctr0, 77, len);
      const Bytes d = Random(len);
      const Bytes want = RefChecksum(key, 77, ctr0, d);
      EXPECT_EQ(ToHex(SignAll(Const(pads), 77, d)), ToHex(Bytes(want.begin() + 16, want.end())))
          << key_len << " " << len;
    }
  }
}

// SignShare refuses (nothing computed) a usage other than the pad's, a
// message longer than the pad's, and shares of different sizes.
TEST(Sign, MalformedInputsAreRefused) {
  auto pads = DealPad(Random(16), Random(16), 5, 20);
  const Bytes a(20, 1), b(19, 1), big(21, 1);
  EXPECT_EQ(SignShare(*pads[0], 6, a, a).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SignShare(*pads[0], 5, a, b).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SignShare(*pads[0], 5, big, big).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SignShare(*pads[0], 5, b, b).ok());  // shorter than the pad's: fine
  PadState empty;
  EXPECT_FALSE(SignShare(empty, 0, {}, {}).ok());
}

}  // namespace
}  // namespace kmpc::engine
