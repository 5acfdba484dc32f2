#include "store/share_store.h"

#include <stdlib.h>
#include <unistd.h>

#include <random>

#include "gtest/gtest.h"

namespace kmpc::store {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/kmpc-store-test-XXXXXX";
  char* d = mkdtemp(tmpl);
  return d ? d : "";
}

KeyId Id(uint8_t b) {
  KeyId id;
  id.fill(b);
  return id;
}

TEST(ShareStoreTest, PutGetListDelete) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<uint8_t> shares = {1, 2, 3, 4, 5};
  KeyMeta meta{Id(7), Cipher::kAes256, 3, "alice@EXAMPLE.COM"};
  ASSERT_TRUE((*store)->Put(meta, shares, false).ok());
  EXPECT_EQ((*store)->Put(meta, shares, false).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*store)->Put(meta, shares, true).ok());
  auto rec = (*store)->Get(Id(7));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->meta.cipher, Cipher::kAes256);
  EXPECT_EQ(rec->meta.kvno, 3u);
  EXPECT_EQ(rec->meta.label, "alice@EXAMPLE.COM");
  EXPECT_EQ(std::vector<uint8_t>(rec->shares.span().begin(), rec->shares.span().end()),
            shares);
  EXPECT_EQ((*store)->Get(Id(8)).status().code(), absl::StatusCode::kNotFound);
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(*(*store)->Count(), 1u);
  EXPECT_TRUE((*store)->Delete(Id(7)).ok());
  EXPECT_EQ((*store)->Delete(Id(7)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*(*store)->Count(), 0u);
}

TEST(ShareStoreTest, KeyIdSize) {
  std::vector<uint8_t> b(31);
  EXPECT_EQ(KeyIdFromBytes(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.resize(32);
  EXPECT_TRUE(KeyIdFromBytes(b).ok());
}

TEST(ShareStoreTest, DecodeHostileRecords) {
  KeyMeta meta{Id(1), Cipher::kAes128, 1, "x"};
  std::vector<uint8_t> shares(100, 9);
  std::vector<uint8_t> good = EncodeRecord(meta, shares);
  ASSERT_TRUE(DecodeRecord(Id(1), good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeRecord(Id(1), absl::MakeConstSpan(good.data(), n)).ok()) << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(DecodeRecord(Id(1), longer).ok());
  std::mt19937 rng(2);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> v = good;
    v[rng() % v.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    (void)DecodeRecord(Id(1), v);
    std::vector<uint8_t> r(rng() % 64);
    for (auto& x : r) x = rng();
    (void)DecodeRecord(Id(1), r);
  }
}

}  // namespace
}  // namespace kmpc::store
