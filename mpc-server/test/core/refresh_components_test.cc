// engine/refresh_components.h: an aes*-cts key's layout encoded and decoded
// strictly, within its bounds; a key's components in their wire order and
// taken back from the exchange's buffers; the digests a refresh derives
// (the metadata digest, the new dealing id, the check's context).
#include "engine/refresh_components.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <array>
#include <string>
#include <vector>

#include "contract.h"
#include "test_util.h"

namespace kmpc::engine::refresh {
namespace {

using Bytes = std::vector<uint8_t>;

KeyShares CtsKey(int party = 0) {
  auto views = DealKey(Cipher::kAes128Cts, Bytes(16, 4));
  EXPECT_TRUE(views.ok()) << views.status();
  return (*views)[party];
}

TEST(RefreshComponentsTest, LayoutRoundTripsAndIsTheKeys) {
  const KeyShares key = CtsKey();
  const CtsLayout l = LayoutOf(key);
  ASSERT_EQ(l.size(), key.cts.size());
  ASSERT_FALSE(l.empty());
  size_t bytes = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].kind, key.cts[i].kind);
    EXPECT_EQ(l[i].usage, key.cts[i].usage);
    EXPECT_EQ(l[i].len, key.cts[i].share[0].size());
    bytes += l[i].len;
  }
  EXPECT_EQ(MaterialBytes(l), bytes);
  EXPECT_TRUE(UsableLayout(l));
  Bytes enc = {0xee};  // decoded from an offset
  EncodeLayout(l, enc);
  EXPECT_EQ(enc.size(), 1 + 1 + kCtsSlotBytes * l.size());
  size_t pos = 1;
  const auto back = DecodeLayout(enc, pos);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(pos, enc.size());
  ASSERT_EQ(back->size(), l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ((*back)[i].kind, l[i].kind);
    EXPECT_EQ((*back)[i].usage, l[i].usage);
    EXPECT_EQ((*back)[i].len, l[i].len);
  }
  // Truncated anywhere: refused.
  for (size_t n = 1; n < enc.size(); ++n) {
    const Bytes cut(enc.begin(), enc.begin() + n);
    size_t p = 1;
    EXPECT_FALSE(DecodeLayout(cut, p).has_value()) << n;
  }
  EXPECT_TRUE(LayoutOf(*DealKey(Cipher::kAes128, Bytes(16, 4))->data()).empty());
}

TEST(RefreshComponentsTest, UnusableLayoutsAreRefused) {
  const CtsLayout ok = {{CtsKind::kUsage, 1, 100}, {CtsKind::kChecksum, 1, 40}};
  EXPECT_TRUE(UsableLayout(ok));
  EXPECT_TRUE(UsableLayout({}));
  EXPECT_FALSE(UsableLayout({{CtsKind::kUsage, 1, 100}, {CtsKind::kUsage, 1, 40}}));
  EXPECT_FALSE(UsableLayout({{CtsKind::kUsage, 1, 0}}));
  EXPECT_FALSE(UsableLayout({{static_cast<CtsKind>(9), 1, 10}}));
  EXPECT_FALSE(UsableLayout({{CtsKind::kUsage, 1, kMaxCtsMaterialBytes + 1}}));
  CtsLayout many;
  for (uint32_t u = 0; u <= kMaxCtsSlots; ++u) many.push_back({CtsKind::kUsage, u, 1});
  EXPECT_FALSE(UsableLayout(many));
  // Decoding checks the same.
  Bytes enc;
  EncodeLayout({{CtsKind::kUsage, 1, 8}, {CtsKind::kUsage, 1, 8}}, enc);
  size_t pos = 0;
  EXPECT_FALSE(DecodeLayout(enc, pos).has_value());
}

TEST(RefreshComponentsTest, ComponentsInWireOrderAndTakenBack) {
  const KeyShares key = CtsKey(1);
  for (int k = 0; k < 2; ++k) {
    const auto c = Components(key, k);
    ASSERT_EQ(c.size(), 2 + key.cts.size());
    EXPECT_EQ(c[0], &key.round_keys[k]);
    EXPECT_EQ(c[1], &key.h_powers[k]);
    EXPECT_EQ(c[2], &key.cts[0].share[k]);
  }
  EXPECT_EQ(ComponentBytes(key), RoundKeyBytes(key.cipher) + kHPowerBytes +
                                     MaterialBytes(LayoutOf(key)));
  Buffers b;
  b.out = {0xaa};  // taken from an offset
  b.in = {0xbb};
  for (const auto* c : Components(key, 0)) b.out.insert(b.out.end(), c->begin(), c->end());
  for (const auto* c : Components(key, 1)) b.in.insert(b.in.end(), c->begin(), c->end());
  KeyShares back;
  size_t pos = 1;
  TakeComponents(b, RoundKeyBytes(key.cipher), kHPowerBytes, LayoutOf(key), pos, back);
  EXPECT_EQ(pos, b.out.size());
  EXPECT_EQ(back.round_keys, key.round_keys);
  EXPECT_EQ(back.h_powers, key.h_powers);
  ASSERT_EQ(back.cts.size(), key.cts.size());
  for (size_t i = 0; i < key.cts.size(); ++i) {
    EXPECT_EQ(back.cts[i].kind, key.cts[i].kind);
    EXPECT_EQ(back.cts[i].usage, key.cts[i].usage);
    EXPECT_EQ(back.cts[i].share, key.cts[i].share);
  }
}

TEST(RefreshComponentsTest, DigestIsSha256OfWhatWasFed) {
  Digest d;
  d.Update("ab", 2);
  d.U64(0x0102030405060708);
  d.Str("xyz");
  std::array<uint8_t, 32> got;
  ASSERT_TRUE(d.Final(got).ok());
  const Bytes fed = {'a', 'b', 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 3, 'x', 'y', 'z'};
  std::array<uint8_t, 32> want;
  SHA256(fed.data(), fed.size(), want.data());
  EXPECT_EQ(got, want);
}

TEST(RefreshComponentsTest, MetaDigestCoversAnAesCtsKeysLayout) {
  std::array<uint8_t, 32> plain, want, a, b;
  ASSERT_TRUE(MetaDigest(false, "meta", {}, plain).ok());
  SHA256(reinterpret_cast<const uint8_t*>("meta"), 4, want.data());
  EXPECT_EQ(plain, want);  // a ctr-mpc key's: SHA-256(public_meta)
  const CtsLayout l = {{CtsKind::kUsage, 1, 100}};
  CtsLayout other = l;
  other[0].usage = 3;
  ASSERT_TRUE(MetaDigest(true, "meta", l, a).ok());
  ASSERT_TRUE(MetaDigest(true, "meta", other, b).ok());
  EXPECT_NE(a, b);
  EXPECT_NE(a, plain);
}

TEST(RefreshComponentsTest, NewDealIdAndCheckContextBindTheRun) {
  const Bytes batch = {1, 2, 3};
  RefreshItem item{std::string(contract::kKeyIdSize, 'o'), std::string(contract::kKeyIdSize, 'n')};
  const std::array<uint8_t, 16> old{};
  std::array<uint8_t, 16> d1, d2, d3;
  ASSERT_TRUE(NewDealId(batch, 5, item, old.data(), d1).ok());
  ASSERT_TRUE(NewDealId(batch, 5, item, old.data(), d2).ok());
  EXPECT_EQ(d1, d2);  // the same on the three parties
  ASSERT_TRUE(NewDealId(batch, 6, item, old.data(), d3).ok());
  EXPECT_NE(d1, d3);
  item.new_key_id[0] = 'm';
  ASSERT_TRUE(NewDealId(batch, 5, item, old.data(), d3).ok());
  EXPECT_NE(d1, d3);

  const Bytes c = CheckContext(batch, 0x0102, kNoRebuild);
  const std::string tag = "kmpc-refresh-run-v1";
  ASSERT_EQ(c.size(), tag.size() + 1 + batch.size() + 8 + 1);
  EXPECT_EQ(std::string(c.begin(), c.begin() + tag.size()), tag);
  EXPECT_EQ(c[tag.size() + 1], 1);                  // the batch id
  EXPECT_EQ(c[c.size() - 3], 0x01);                 // seq, big-endian
  EXPECT_EQ(c[c.size() - 2], 0x02);
  EXPECT_EQ(c.back(), 0);                           // kNoRebuild + 1
  EXPECT_EQ(CheckContext(batch, 0x0102, 2).back(), 3);
}

}  // namespace
}  // namespace kmpc::engine::refresh
