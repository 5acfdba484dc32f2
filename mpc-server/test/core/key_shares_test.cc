// engine/key_shares.cc: the dealer and the store encoding of one party's
// view of a key. The three views recombine to the FIPS-197 key schedule and
// to the powers of H = AES_K(0^128) (GCM, SP 800-38D), checked against
// published values and the bit-by-bit GF(2^128) reference; replicated
// shares are consistent (party i's second share is party i+1's first);
// Parse is the strict inverse of Serialize.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/engine.h"
#include "protocol/gf128.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using Bytes = std::vector<uint8_t>;

// The value shared by the three views: share s is component k of party
// (s - k) mod 3; component 0 of the three parties are shares 0, 1, 2.
Bytes Recombine(const std::array<KeyShares, 3>& v, bool round_keys) {
  Bytes out = round_keys ? v[0].round_keys[0] : v[0].h_powers[0];
  for (int i = 1; i < 3; ++i) {
    const Bytes& c = round_keys ? v[i].round_keys[0] : v[i].h_powers[0];
    for (size_t k = 0; k < out.size(); ++k) out[k] ^= c[k];
  }
  return out;
}

std::string Block(const Bytes& b, size_t i) {
  return ToHex(absl::MakeConstSpan(b.data() + 16 * i, 16));
}

TEST(KeySharesTest, DealtViewsRecombineToTheFips197Schedule) {
  // FIPS-197 Appendix A.1 (AES-128) and A.3 (AES-256): first and last
  // round keys.
  struct Case {
    Cipher cipher;
    const char* key;
    const char* last;
  } cases[] = {
      {Cipher::kAes128, "2b7e151628aed2a6abf7158809cf4f3c",
       "d014f9a8c9ee2589e13f0cc8b6630ca6"},
      {Cipher::kAes256,
       "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
       "fe4890d1e6188d0b046df344706c631e"},
  };
  for (const Case& c : cases) {
    const Bytes key = Hex(c.key);
    auto v = DealKey(c.cipher, key);
    ASSERT_TRUE(v.ok()) << v.status();
    const Bytes rk = Recombine(*v, true);
    ASSERT_EQ(rk.size(), 16 * static_cast<size_t>(NumRounds(c.cipher) + 1));
    EXPECT_EQ(Block(rk, 0), ToHex(absl::MakeConstSpan(key.data(), 16)));
    EXPECT_EQ(Block(rk, NumRounds(c.cipher)), c.last);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE((*v)[i].Validate().ok());
      EXPECT_EQ((*v)[i].party, i);
      EXPECT_EQ((*v)[i].cipher, c.cipher);
      EXPECT_EQ((*v)[i].deal_id, (*v)[0].deal_id);
    }
  }
}

TEST(KeySharesTest, HPowersAreThePowersOfTheGcmHashKey) {
  // H = AES_K(0^128) for the zero key: GCM specification (McGrew and
  // Viega), test cases 1 (AES-128) and 13 (AES-256).
  struct Case {
    Cipher cipher;
    size_t key_bytes;
    const char* h;
  } cases[] = {{Cipher::kAes128, 16, "66e94bd4ef8a2c3b884cfa59ca342b2e"},
               {Cipher::kAes256, 32, "dc95c078a2408989ad48a21492842087"}};
  for (const Case& c : cases) {
    auto v = DealKey(c.cipher, Bytes(c.key_bytes, 0));
    ASSERT_TRUE(v.ok()) << v.status();
    const Bytes hp = Recombine(*v, false);
    ASSERT_EQ(hp.size(), 16 * static_cast<size_t>(kStoredHPowers));
    EXPECT_EQ(Block(hp, 0), c.h);
    protocol::Block h, power;
    std::copy(hp.begin(), hp.begin() + 16, h.begin());
    power = h;
    for (int k = 1; k < kStoredHPowers; ++k) {
      power = protocol::GfMulReference(power, h);
      ASSERT_EQ(Block(hp, k), ToHex(power)) << "H^" << k + 1;
    }
  }
}

TEST(KeySharesTest, ViewsAreReplicatedAndFreshlyRandom) {
  const Bytes key = Random(16);
  auto v = DealKey(Cipher::kAes128, key);
  auto w = DealKey(Cipher::kAes128, key);
  ASSERT_TRUE(v.ok() && w.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*v)[i].round_keys[1], (*v)[(i + 1) % 3].round_keys[0]);
    EXPECT_EQ((*v)[i].h_powers[1], (*v)[(i + 1) % 3].h_powers[0]);
    // Two dealings of one key share it with fresh randomness.
    EXPECT_NE((*v)[i].round_keys[0], (*w)[i].round_keys[0]);
    EXPECT_NE((*v)[i].h_powers[0], (*w)[i].h_powers[0]);
  }
  EXPECT_NE((*v)[0].deal_id, (*w)[0].deal_id);
  EXPECT_EQ(Recombine(*v, true), Recombine(*w, true));
  EXPECT_EQ(Recombine(*v, false), Recombine(*w, false));
}

TEST(KeySharesTest, DealKeyRefusesBadInput) {
  EXPECT_EQ(DealKey(Cipher::kAes256, Random(16)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DealKey(static_cast<Cipher>(7), Random(16)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DealKey(Cipher::kAes128, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KeySharesTest, ValidateChecksEveryField) {
  auto v = DealKey(Cipher::kAes128, Random(16));
  ASSERT_TRUE(v.ok());
  const KeyShares good = (*v)[1];
  ASSERT_TRUE(good.Validate().ok());
  KeyShares k = good;
  k.party = 3;
  EXPECT_FALSE(k.Validate().ok());
  k = good;
  k.cipher = Cipher::kAes256;  // round keys of AES-128
  EXPECT_FALSE(k.Validate().ok());
  k = good;
  k.round_keys[1].pop_back();
  EXPECT_FALSE(k.Validate().ok());
  k = good;
  k.h_powers[0].resize(16 * (kStoredHPowers + 1));
  EXPECT_FALSE(k.Validate().ok());
}

TEST(KeySharesTest, ParseNeverAcceptsJunk) {
  auto v = DealKey(Cipher::kAes128, Random(16));
  ASSERT_TRUE(v.ok());
  const Bytes s = (*v)[0].Serialize();
  for (size_t len = 0; len < s.size(); len += 7) {
    EXPECT_FALSE(KeyShares::Parse(absl::MakeConstSpan(s.data(), len)).ok()) << len;
  }
  for (int k = 0; k < 200; ++k) {
    const Bytes junk = Random(k * 5);
    EXPECT_FALSE(KeyShares::Parse(junk).ok());
  }
}

// What Admin.SetKeyKind takes from a key re-marked as a user's: the
// ticket (usage 2) and PAC signature (checksum usage 17) material, the
// rest of the dealing as it was; a user's key dealt as such has none.
TEST(KeySharesTest, DropServiceMaterialLeavesTheRestOfTheDealing) {
  const Bytes key = Random(32);
  auto all = DealKey(Cipher::kAes256Cts, key, KeyKind::kService);
  auto user = DealKey(Cipher::kAes256Cts, key, KeyKind::kUser);
  ASSERT_TRUE(all.ok() && user.ok());
  for (int i = 0; i < 3; ++i) {
    KeyShares& ks = (*all)[i];
    const auto deal_id = ks.deal_id;
    const size_t before = ks.cts.size();
    const Bytes usage1 = ks.FindCts(CtsKind::kUsage, 1)->share[0];
    EXPECT_EQ(DropServiceMaterial(ks), 2u);
    EXPECT_EQ(ks.cts.size(), before - 2);
    EXPECT_EQ(ks.FindCts(CtsKind::kUsage, 2), nullptr);
    EXPECT_EQ(ks.FindCts(CtsKind::kChecksum, 17), nullptr);
    ASSERT_NE(ks.FindCts(CtsKind::kUsage, 3), nullptr);
    ASSERT_NE(ks.FindCts(CtsKind::kChecksum, 56), nullptr);
    ASSERT_NE(ks.FindCts(CtsKind::kPrf, 0), nullptr);
    EXPECT_EQ(ks.FindCts(CtsKind::kUsage, 1)->share[0], usage1);
    EXPECT_EQ(ks.deal_id, deal_id);
    EXPECT_TRUE(ks.Validate().ok());
    auto back = KeyShares::Parse(ks.Serialize());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->cts.size(), ks.cts.size());
    EXPECT_EQ(DropServiceMaterial(ks), 0u);
    EXPECT_EQ(DropServiceMaterial((*user)[i]), 0u);
  }
}

TEST(KeySharesTest, SerializeParseStrict) {
  auto v = DealKey(Cipher::kAes256, Random(32));
  ASSERT_TRUE(v.ok());
  const Bytes s = (*v)[2].Serialize();
  auto p = KeyShares::Parse(s);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->party, 2);
  EXPECT_EQ(p->round_keys[1], (*v)[2].round_keys[1]);
  EXPECT_EQ(p->h_powers[0], (*v)[2].h_powers[0]);
  EXPECT_EQ(p->deal_id, (*v)[0].deal_id);
  Bytes shorter(s.begin(), s.end() - 1), longer = s;
  longer.push_back(0);
  EXPECT_EQ(KeyShares::Parse(shorter).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KeyShares::Parse(longer).status().code(), absl::StatusCode::kInvalidArgument);
  Bytes bad = s;
  bad[8] = 9;  // cipher
  EXPECT_FALSE(KeyShares::Parse(bad).ok());
  bad = s;
  bad[7] = 3;  // party
  EXPECT_FALSE(KeyShares::Parse(bad).ok());
  bad = s;
  bad[0] = 'X';
  EXPECT_FALSE(KeyShares::Parse(bad).ok());
  EXPECT_FALSE(KeyShares::Parse({}).ok());
  EXPECT_EQ(DealKey(Cipher::kAes128, Random(32)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Three views recombine to the round keys of the key.
  const Bytes key = Random(16);
  auto w = DealKey(Cipher::kAes128, key);
  ASSERT_TRUE(w.ok());
  Bytes rk0(16);
  for (int k = 0; k < 16; ++k) {
    rk0[k] = (*w)[0].round_keys[0][k] ^ (*w)[1].round_keys[0][k] ^ (*w)[2].round_keys[0][k];
  }
  EXPECT_EQ(rk0, key);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*w)[i].round_keys[1], (*w)[(i + 1) % 3].round_keys[0]);
}

// The origin deal id (KeyShares::Origin, what the per-deal bounds count
// by): a dealt key's is its deal_id, written as before (versions 1, 2); a
// RefreshKeys copy's differs and is written after deal_id (versions 3, 4);
// a version 3 or 4 record naming its own deal_id as origin is refused
// (one encoding per key).
TEST(KeySharesTest, OriginDealIdRoundTrips) {
  for (const Cipher c : {Cipher::kAes128, Cipher::kAes128Cts}) {
    auto v = DealKey(c, Random(16), KeyKind::kUser);
    ASSERT_TRUE(v.ok()) << v.status();
    KeyShares k = (*v)[1];
    EXPECT_EQ(k.Origin(), k.deal_id);
    const Bytes dealt = k.Serialize();
    EXPECT_EQ(dealt[6], IsCts(c) ? 2 : 1);
    const auto origin = k.deal_id;
    k.deal_id[0] ^= 0x5a;  // a copy's new dealing
    const Bytes copy = k.Serialize();
    EXPECT_EQ(copy[6], IsCts(c) ? 4 : 3);
    EXPECT_EQ(copy.size(), dealt.size() + 16);
    auto back = KeyShares::Parse(copy);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->Origin(), origin);
    EXPECT_EQ(back->deal_id, k.deal_id);
    EXPECT_EQ(back->round_keys, k.round_keys);
    EXPECT_EQ(back->Serialize(), copy);
    Bytes own = copy;
    std::copy(own.begin() + 11, own.begin() + 27, own.begin() + 27);  // origin = deal_id
    EXPECT_FALSE(KeyShares::Parse(own).ok());
    // Unset (all zero): the deal_id.
    k.origin_deal_id = {};
    EXPECT_EQ(k.Origin(), k.deal_id);
    EXPECT_EQ(k.Serialize()[6], IsCts(c) ? 2 : 1);
  }
}

}  // namespace
}  // namespace kmpc::engine
