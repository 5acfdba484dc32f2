// service/key_cache.h over a real share store: shares are parsed once and
// cached; a record of another party's view, of another cipher than its
// metadata says, or that does not parse is refused (and not cached), with
// an error naming the key id only; failures are not cached, and an
// Invalidate makes the next Get read the store again. (The race of an
// Invalidate during a load is services_test's
// KeyCacheInvalidateDuringLoadIsNotLost.)
#include "service/key_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

namespace kmpc::service {
namespace {

using Bytes = std::vector<uint8_t>;

class KeyCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::ShareStore::Open(::kmpc::testing::MakeTempDir("key-cache-test"));
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }

  // Deals a fresh AES-128 key; stores view `party` under id byte `b`.
  std::array<engine::KeyShares, 3> Store(uint8_t b, int party,
                                         store::Cipher meta_cipher = store::Cipher::kAes128) {
    auto views = engine::DealKey(engine::Cipher::kAes128, Bytes(16, b));
    EXPECT_TRUE(views.ok());
    store::KeyMeta meta;
    meta.key_id.fill(b);
    meta.cipher = meta_cipher;
    EXPECT_TRUE(store_->Put(meta, (*views)[party].Serialize(), true).ok());
    return *std::move(views);
  }
  static std::string Id(uint8_t b) { return std::string(32, static_cast<char>(b)); }

  std::unique_ptr<store::ShareStore> store_;
};

TEST_F(KeyCacheTest, LoadsOnceAndKeepsTheParsedShares) {
  KeyCache cache(store_.get(), 1);
  auto dealt = Store(7, 1);
  auto a = cache.Get(Id(7));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->party, 1);
  EXPECT_EQ((*a)->deal_id, dealt[1].deal_id);
  EXPECT_EQ((*a)->round_keys[0], dealt[1].round_keys[0]);
  EXPECT_EQ((*a)->h_powers[1], dealt[1].h_powers[1]);
  // Cached: the same object, even after the store changed behind the
  // cache's back (the services call Invalidate on every change).
  auto redealt = Store(7, 1);
  auto b = cache.Get(Id(7));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->get(), a->get());
  cache.Invalidate(Id(7));
  auto c = cache.Get(Id(7));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->deal_id, redealt[1].deal_id);
  // AsLookup is the engine's view of the same cache.
  auto d = cache.AsLookup()(Id(7));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->get(), c->get());
}

TEST_F(KeyCacheTest, RefusesAnotherPartysViewOrCipher) {
  KeyCache cache(store_.get(), 0);
  Store(1, 2);  // party 2's view in party 0's store
  auto other = cache.Get(Id(1));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  store::KeyId kid;
  kid.fill(1);
  EXPECT_NE(other.status().message().find(store::KeyIdHex(kid)), std::string::npos)
      << other.status();
  Store(2, 0, store::Cipher::kAes256);  // AES-128 shares, AES-256 metadata
  EXPECT_EQ(cache.Get(Id(2)).status().code(), absl::StatusCode::kFailedPrecondition);
  // Not cached: once the right view is stored, it is served.
  Store(1, 0);
  EXPECT_TRUE(cache.Get(Id(1)).ok());
}

TEST_F(KeyCacheTest, CorruptSharesAreDataLossAndNotEchoed) {
  KeyCache cache(store_.get(), 0);
  store::KeyMeta meta;
  meta.key_id.fill(3);
  Bytes junk(300, 0x5c);  // not "KMPCKS..."
  ASSERT_TRUE(store_->Put(meta, junk, false).ok());
  auto got = cache.Get(Id(3));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("do not parse"), std::string::npos);
  // The error names the key id, never the stored bytes.
  EXPECT_EQ(got.status().message().find("5c5c"), std::string::npos) << got.status();
}

TEST_F(KeyCacheTest, UnknownAndMalformedIds) {
  KeyCache cache(store_.get(), 0);
  EXPECT_EQ(cache.Get(std::string(31, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Get(std::string(33, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Get(Id(9)).status().code(), absl::StatusCode::kNotFound);
  // A miss is not cached: a key stored since is found without Invalidate.
  Store(9, 0);
  EXPECT_TRUE(cache.Get(Id(9)).ok());
}

}  // namespace
}  // namespace kmpc::service
