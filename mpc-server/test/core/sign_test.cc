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

// The three parties' ChainedSignShare of a message dealt afresh: the XOR
// of their first halves (tag_1) and of their second halves (tag_2); each
// party's 32 bytes in *shares_out.
std::pair<Bytes, Bytes> ChainAll(const std::array<std::shared_ptr<PadState>, 3>& p1,
                                 const std::array<std::shared_ptr<PadState>, 3>& p2,
                                 uint32_t usage, const Bytes& d,
                                 std::array<Bytes, 3>* shares_out = nullptr) {
  auto dealt = share::Deal(d);
  EXPECT_TRUE(dealt.ok());
  Bytes t1(16, 0), t2(16, 0);
  for (int i = 0; i < 3; ++i) {
    auto t = ChainedSignShare(*p1[i], *p2[i], usage, (*dealt)[i].comp[0], (*dealt)[i].comp[1]);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    if (shares_out != nullptr) (*shares_out)[i].assign(t->begin(), t->end());
    for (int k = 0; k < 16; ++k) {
      t1[k] ^= (*t)[k];
      t2[k] ^= (*t)[16 + k];
    }
  }
  return {t1, t2};
}

// A chain's tag_2 is the reference checksum (enctype_reference.h, GHASH
// bit by bit) of sig_1 = ctr0_1 || tag_1 under pad 2's ctr0, and tag_1
// the reference's over D: AES-128 and AES-256, messages of whole and
// partial blocks, empty, and beyond the key's stored powers (dealt ones).
TEST(Sign, ChainedTagIsTheChecksumOfTheFirstSignature) {
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len);
    for (uint32_t len : {0, 1, 15, 16, 17, 32, 100, 960, 1000}) {
      const Bytes c1 = Random(16), c2 = Random(16), d = Random(len);
      // Pad 1 with room for two more powers (len + 32 bytes), pad 2 for 32.
      auto p1 = DealPad(key, c1, 17, len + 32);
      auto p2 = DealPad(key, c2, 17, 32);
      const Bytes sig1 = RefChecksum(key, 17, c1, d);
      const Bytes sig2 = RefChecksum(key, 17, c2, sig1);
      auto [t1, t2] = ChainAll(p1, p2, 17, d);
      EXPECT_EQ(ToHex(t1), ToHex(Bytes(sig1.begin() + 16, sig1.end()))) << key_len << " " << len;
      EXPECT_EQ(ToHex(t2), ToHex(Bytes(sig2.begin() + 16, sig2.end()))) << key_len << " " << len;
    }
  }
}

// Each party's t_2,i alone is masked by pad 2's zero-sharing: it is not
// the tag, nor any party's component of AES_K(ctr0_2) (which two servers
// hold), and a fresh zero-sharing changes every share but not their XOR.
TEST(Sign, ChainedTagSharesAreMaskedByTheSecondPad) {
  const Bytes key = Random(32), c1 = Random(16), c2 = Random(16), d = Random(77);
  auto p1 = DealPad(key, c1, 17, 77 + 32);
  auto p2 = DealPad(key, c2, 17, 32);
  std::array<Bytes, 3> a, b;
  auto [t1, t2] = ChainAll(p1, p2, 17, d, &a);
  const Bytes r = Random(48);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 16; ++k)
      p2[i]->zero[k] = r[16 * i + k] ^ r[16 * ((i + 1) % 3) + k];
  auto [u1, u2] = ChainAll(p1, p2, 17, d, &b);
  EXPECT_EQ(ToHex(u2), ToHex(t2));
  EXPECT_EQ(ToHex(u1), ToHex(t1));
  for (int i = 0; i < 3; ++i) {
    const Bytes s2(a[i].begin() + 16, a[i].end()), s2b(b[i].begin() + 16, b[i].end());
    EXPECT_NE(ToHex(s2), ToHex(t2));
    EXPECT_NE(ToHex(s2), ToHex(s2b)) << "t_2," << i << " does not depend on pad 2's zero";
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_NE(ToHex(s2), ToHex(Bytes(p2[j]->mask[k].begin(), p2[j]->mask[k].end())));
  }
}

// ChainedSignShare refuses (nothing computed) pads of another key,
// cipher, usage or party, a verification pad, a second pad shorter than
// 32 bytes, and a first pad without two more powers than D needs.
TEST(Sign, ChainOfMismatchedPadsIsRefused) {
  const Bytes key = Random(16), d = Random(40);
  auto dealt = share::Deal(d);
  ASSERT_TRUE(dealt.ok());
  const auto& s0 = (*dealt)[0].comp[0];
  const auto& s1 = (*dealt)[0].comp[1];
  auto refused = [&](const PadState& a, const PadState& b) {
    return ChainedSignShare(a, b, 17, s0, s1).status().code() ==
           absl::StatusCode::kInvalidArgument;
  };
  auto p1 = DealPad(key, Random(16), 17, 200);
  auto p2 = DealPad(key, Random(16), 17, 32);
  EXPECT_TRUE(ChainedSignShare(*p1[0], *p2[0], 17, s0, s1).ok());
  p2[0]->key_id = "another";
  EXPECT_TRUE(refused(*p1[0], *p2[0]));
  p2[0]->key_id = p1[0]->key_id;
  p2[0]->cipher = Cipher::kAes256;
  EXPECT_TRUE(refused(*p1[0], *p2[0]));
  p2[0]->cipher = p1[0]->cipher;
  p2[0]->usage = 18;
  EXPECT_TRUE(refused(*p1[0], *p2[0]));
  p2[0]->usage = 17;
  EXPECT_TRUE(refused(*p1[0], *p2[1]));  // another party's pad
  p2[0]->verify_only = true;
  EXPECT_TRUE(refused(*p1[0], *p2[0]));
  p2[0]->verify_only = false;
  EXPECT_TRUE(ChainedSignShare(*p1[0], *p2[0], 18, s0, s1).status().code() ==
              absl::StatusCode::kInvalidArgument);  // usage not the pads'
  auto short2 = DealPad(key, Random(16), 17, 31);
  EXPECT_TRUE(refused(*p1[0], *short2[0]));
  // 1000 bytes need 65 powers: dealt for exactly that, no room for 67.
  const Bytes big = Random(1000);
  auto bd = share::Deal(big);
  ASSERT_TRUE(bd.ok());
  auto exact = DealPad(key, Random(16), 17, 1000);
  ASSERT_EQ(exact[0]->NumPowers(), 65u);
  EXPECT_EQ(ChainedSignShare(*exact[0], *p2[0], 17, (*bd)[0].comp[0], (*bd)[0].comp[1])
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SignShare(*exact[0], 17, (*bd)[0].comp[0], (*bd)[0].comp[1]).ok());
}

}  // namespace
}  // namespace kmpc::engine
