// The multiplication check (protocol/verify.h) among three parties over
// the in-memory ring, one of them through the cheating-server harness:
// honest logs pass; an additive error on any AND word, lane and layer or
// on any GF(2^128) product is caught, as is any error in any message of
// the check itself (coins, compressions, the opening, the compare), sent
// in order or late.
#include "protocol/verify.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../cheat.h"
#include "cheat_ring.h"
#include "absl/strings/str_cat.h"
#include "net/memory_ring.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::CheatingChannel;
using ::kmpc::testing::RunParties;

constexpr size_t kLayers = 3;
constexpr size_t kWords = 70;  // per AND layer: 2 full groups and a part
constexpr size_t kGf = 5;      // GF(2^128) products

class CheckCluster : public ::kmpc::testing::CheatRing {
 public:
  explicit CheckCluster(int cheater) : CheatRing(cheater, std::chrono::milliseconds(2000)) {}

  // kLayers AND layers (CheatRing::RunCheck).
  std::array<absl::Status, 3> Run(size_t words = kWords, int live = 64, size_t gf = kGf) {
    return RunCheck(kLayers, words, live, gf);
  }

  // At least one honest party reports a detected deviation.
  void ExpectCaught(const std::array<absl::Status, 3>& st, const std::string& what) {
    int caught = 0;
    for (int i = 0; i < 3; ++i) {
      if (i != cheater_ && IsIntegrityFailure(st[i])) ++caught;
    }
    EXPECT_GE(caught, 1) << what << ": " << st[0] << " / " << st[1] << " / " << st[2];
  }
};

TEST(Verify, HonestLogsPass) {
  CheckCluster c(0);
  for (int k = 0; k < 3; ++k) {
    for (const absl::Status& s : c.Run()) EXPECT_TRUE(s.ok()) << s;
  }
}

// One bit of one party's message of an AND layer is an additive error on
// one gate (word, lane) of that layer; of the GF(2^128) layer, on one
// product. Every word of every layer and every product, from each party.
TEST(Verify, EveryProductErrorIsCaught) {
  std::mt19937_64 rng(0x76657269);
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheckCluster c(cheater);
    for (size_t layer = 0; layer <= kLayers; ++layer) {
      const bool gf = layer == kLayers;
      const size_t items = gf ? kGf : kWords;
      for (size_t item = 0; item < items; ++item) {
        const size_t width = gf ? 16 : 8;
        const size_t off = item * width + rng() % width;
        c.cheat().Arm(layer, off, static_cast<uint8_t>(1u << (rng() % 8)));
        const auto st = c.Run();
        ASSERT_TRUE(c.cheat().fired());
        c.ExpectCaught(st, absl::StrCat("party ", cheater, " layer ", layer, " byte ", off));
        c.cheat().Disarm();
      }
    }
    for (const absl::Status& s : c.Run()) EXPECT_TRUE(s.ok()) << s;
  }
}

// Words logged with fewer live lanes: an error on a live lane of any word
// is caught, one on a lane past them is not looked at (it reaches no
// output), and the packed log of a few live lanes per word passes.
TEST(Verify, OnlyLiveLanesAreChecked) {
  const int live = 5;
  CheckCluster c(1);
  for (const absl::Status& s : c.Run(kWords, live)) EXPECT_TRUE(s.ok()) << s;
  for (size_t word : {size_t{0}, size_t{33}, kWords - 1}) {
    for (int lane : {0, 4, 5, 63}) {
      c.cheat().Arm(1, 8 * word + lane / 8, static_cast<uint8_t>(1u << (lane % 8)));
      const auto st = c.Run(kWords, live);
      ASSERT_TRUE(c.cheat().fired());
      const std::string what = absl::StrCat("word ", word, " lane ", lane);
      if (lane < live) {
        c.ExpectCaught(st, what);
      } else {
        for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << what << ": " << s;
      }
      c.cheat().Disarm();
    }
  }
}

// A log of GF(2^128) products only (no AND word: no first-compression
// groups): an honest log passes, an error on any product is caught.
TEST(Verify, GfProductsAlone) {
  for (const absl::Status& s : CheckCluster(1).Run(0)) EXPECT_TRUE(s.ok()) << s;
  for (size_t item = 0; item < kGf; ++item) {
    CheckCluster c(1);
    // Messages: kLayers empty AND layers, then the GF(2^128) layer.
    c.cheat().Arm(kLayers, 16 * item + 5, 0x08);
    const auto st = c.Run(0);
    ASSERT_TRUE(c.cheat().fired());
    c.ExpectCaught(st, absl::StrCat("GF product ", item));
  }
}

// The check's own messages grow with log2 of the log, not with it: 16
// times the AND words (both in the range of groups of 32 words) adds one
// halving and one step by 4 of the GF(2^64) proof and nothing else: 1,200
// words are 38 groups, 2,433 elements (<= kStepFrom: three steps to 39);
// 19,200 words 38,401 elements (one halving to 19,201, then four steps to
// 76). A halving reshares 16 bytes, a step 48 (2K - 2 = 6 values); each
// has a coin (its 32-byte acknowledgement and 16-byte opening).
TEST(Verify, CommunicationIsLogarithmic) {
  CheckCluster c(0);
  auto check_bytes = [&](size_t words) {
    const uint64_t before = c.cheat().sent();
    for (const absl::Status& s : c.Run(words)) EXPECT_TRUE(s.ok()) << s;
    const auto& sizes = c.cheat().sizes();
    size_t total = 0;
    for (size_t k = before + kLayers + 1; k < sizes.size(); ++k) total += sizes[k];
    return total;
  };
  ASSERT_EQ(dzkp::GroupWordsFor(kLayers * 400), 32);
  ASSERT_EQ(dzkp::GroupWordsFor(kLayers * 400 * 16), 32);
  const size_t small = check_bytes(400), large = check_bytes(400 * 16);
  static_assert(dzkp::kStepFrom >= 2433 && dzkp::kStepFrom < 38401);
  EXPECT_EQ(large - small, (16u + 32 + 16) + (8u * (2 * dzkp::kStepWords - 2) + 32 + 16));
  // 6,144 of them the last compression's 256 values of each proof; vs 3 *
  // 6,400 * 8 bytes of AND messages.
  EXPECT_LT(large, 8192u);
}

// Every message of the check itself (after the products: coin, first
// compression, coin, halvings, opening, compare), at several offsets,
// sent in order and late (after receiving that round's message).
TEST(Verify, EveryMessageOfTheCheckIsCovered) {
  std::mt19937_64 rng(0x636865636b);
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheckCluster c(cheater);
    const uint64_t before = c.cheat().sent();
    for (const absl::Status& s : c.Run()) ASSERT_TRUE(s.ok()) << s;
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
    // kLayers + 1 product messages, then the check's: coin c1 (its
    // acknowledgement, its opening), the first compression, coin c2, 3
    // per halving, the last compression and its coin, the opening, the
    // compare.
    ASSERT_GE(sizes.size(), kLayers + 1 + 10);
    EXPECT_EQ(sizes[kLayers + 1], 32u);                          // c1's acknowledgement
    EXPECT_EQ(sizes[kLayers + 2], 16u);                          // coin c1
    const int g = dzkp::GroupWordsFor(kLayers * kWords);
    // h values and the GF(2^64) mask's product, the GF(2^128) mask's.
    EXPECT_EQ(sizes[kLayers + 3], 8u * (2 * g - 1) + 16u);
    EXPECT_EQ(sizes[kLayers + 4], 32u);                          // c2's acknowledgement
    // The last compression: 2T - 2 values of each proof, then its coin.
    EXPECT_EQ(sizes[sizes.size() - 5], (8u + 16u) * (dzkp::kTailHPoints - 1));
    EXPECT_EQ(sizes[sizes.size() - 4], 32u);
    EXPECT_EQ(sizes[sizes.size() - 3], 16u);
    EXPECT_EQ(sizes[sizes.size() - 2], 24u + 48u);               // f, g, claim of each
    EXPECT_EQ(sizes.back(), 32u);                                // compare
    for (size_t s = kLayers + 1; s < sizes.size(); ++s) {
      for (int k = 0; k < 3; ++k) {
        const size_t off = k == 0 ? 0 : rng() % sizes[s];
        const bool late = k == 2;
        c.cheat().Arm(s, off, static_cast<uint8_t>(1u << (rng() % 8)), late);
        const auto st = c.Run();
        ASSERT_TRUE(c.cheat().fired());
        c.ExpectCaught(st, absl::StrCat("party ", cheater, " step ", s, "/", sizes.size(), " (",
                                        sizes[s], " bytes) offset ", off, late ? " late" : ""));
        c.cheat().Disarm();
      }
    }
    for (const absl::Status& s : c.Run()) EXPECT_TRUE(s.ok()) << s;
  }
}

// More GF(2^128) products than the last compression takes (so their
// proof halves in the same rounds as the AND proof, and in rounds of its
// own once the AND proof's vectors are short): an honest log passes, an
// error on products at either end is caught, and so is an error at any
// offset of every message of the check, from each party.
TEST(Verify, BothProofsHalveInTheSameRounds) {
  constexpr size_t kManyGf = 300;  // 301 elements: 2 halvings to 76
  constexpr size_t kFewWords = 20;  // 60 words, 4 groups: 257 elements, 1 halving
  std::mt19937_64 rng(0x626f7468);
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheckCluster c(cheater);
    const uint64_t before = c.cheat().sent();
    for (const absl::Status& s : c.Run(kFewWords, 64, kManyGf)) ASSERT_TRUE(s.ok()) << s;
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
    // Products, 2 coins (2 messages each: acknowledgement, opening), the
    // first compression, 2 halvings (a reshare, the first with both
    // proofs: 16 + 32 bytes, then 32, and a coin), the last compression,
    // its coin, the opening, the compare.
    ASSERT_EQ(dzkp::GroupWordsFor(kLayers * kFewWords), 16);
    ASSERT_EQ(sizes.size(), kLayers + 1 + 5 + 3 * 2 + 5);
    EXPECT_EQ(sizes[kLayers + 6], 48u + 32u);  // A steps by 4 (48), B halves (32)
    EXPECT_EQ(sizes[kLayers + 9], 32u);
    for (size_t item : {size_t{0}, kManyGf - 1}) {
      c.cheat().Arm(kLayers, 16 * item + 3, 0x20);
      const auto st = c.Run(kFewWords, 64, kManyGf);
      ASSERT_TRUE(c.cheat().fired());
      c.ExpectCaught(st, absl::StrCat("party ", cheater, " GF product ", item));
      c.cheat().Disarm();
    }
    for (size_t s = kLayers + 1; s < sizes.size(); ++s) {
      const size_t off = rng() % sizes[s];
      c.cheat().Arm(s, off, static_cast<uint8_t>(1u << (rng() % 8)), s % 2 == 0);
      const auto st = c.Run(kFewWords, 64, kManyGf);
      ASSERT_TRUE(c.cheat().fired());
      c.ExpectCaught(st, absl::StrCat("party ", cheater, " step ", s, " offset ", off));
      c.cheat().Disarm();
    }
    for (const absl::Status& s : c.Run(kFewWords, 64, kManyGf)) EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace kmpc::protocol
