// The multiplication check redraws a coin whose challenge is an
// interpolation node of the compression it drives, or whose mask weight
// is zero (protocol/verify.h, step 5): otherwise the opened f or g would
// be a public linear combination of wire values. Such coins come with
// probability below 2^-55, so this binary is built with a copy of
// verify.cc compiled with KMPC_TEST_COIN_HOOK (core.cmake), whose hooks
// let the test overwrite one opened coin, the same way on every party, or
// zero A's mask weight as the redraw sees it. Three honest parties on the
// in-memory ring; the test counts the coins each party draws.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "../cheat.h"
#include "cheat_ring.h"
#include "protocol/dzkp.h"
#include "protocol/verify.h"

namespace kmpc::protocol {
namespace {

struct Forcing {
  std::atomic<int> draws[3] = {0, 0, 0};
  std::atomic<int> mask_views[3] = {0, 0, 0};
  int force_draw = -1;  // each party's draw (from 0) to overwrite
  uint64_t low = 0;     // its bytes 0..7 (A's challenge)
  bool high_zero = false;  // and zero bytes 8..15 (B's challenge = low)
  bool zero_mask = false;  // A's mask weight zero in the first c2 draw
  std::atomic<int> gf_mask_views[3] = {0, 0, 0};
  bool zero_gf_mask = false;  // B's mask weight zero in the first c2 draw
  void Reset() {
    for (int i = 0; i < 3; ++i) draws[i] = 0, mask_views[i] = 0, gf_mask_views[i] = 0;
    force_draw = -1, low = 0, high_zero = false, zero_mask = false, zero_gf_mask = false;
  }
};
Forcing forcing;

}  // namespace

void TestCoinHook(int party, uint8_t coin[16]) {
  if (forcing.draws[party]++ != forcing.force_draw) return;
  std::memcpy(coin, &forcing.low, 8);
  if (forcing.high_zero) std::memset(coin + 8, 0, 8);
}

void TestMaskWeightHook(int party, dzkp::F64& wm) {
  if (forcing.zero_mask && forcing.mask_views[party]++ == 0) wm.v = 0;
}

void TestGfMaskWeightHook(int party, uint8_t wm[16]) {
  if (forcing.zero_gf_mask && forcing.gf_mask_views[party]++ == 0) std::memset(wm, 0, 16);
}

namespace {

// Three AND layers of `words` words (70: G = 16, 897 elements, two steps
// by 4 to the tail; 0: no AND proof) and five GF(2^128) products (proof
// B).
std::array<absl::Status, 3> RunHonest(size_t words, size_t gf) {
  ::kmpc::testing::CheatRing ring(0, std::chrono::milliseconds(5000));
  return ring.RunCheck(3, words, 64, gf);
}

// Coins drawn by each party in one check, all equal; every party ok.
int CheckedDraws(const char* what, size_t words = 70, size_t gf = 5) {
  const auto st = RunHonest(words, gf);
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << what << ": " << s;
  EXPECT_EQ(forcing.draws[0], forcing.draws[1]) << what;
  EXPECT_EQ(forcing.draws[1], forcing.draws[2]) << what;
  return forcing.draws[0];
}

class CoinRedraw : public ::testing::Test {
 protected:
  void SetUp() override {
    forcing.Reset();
    baseline_ = CheckedDraws("baseline");
    // c1, c2, at least one compression, the tail.
    ASSERT_GE(baseline_, 4);
    forcing.Reset();
  }
  int baseline_ = 0;
};

// A compression coin equal to e_1 (a node of a halving, of a step and of
// the tail, for A and, with its high half zero, for B) is drawn again:
// one coin more, and the check still passes. Draws 0 and 1 are c1 and c2
// (c2's challenge interpolates the groups, not the mask).
TEST_F(CoinRedraw, ANodeChallengeIsRedrawn) {
  for (int k = 2; k < baseline_; ++k) {
    for (bool high_zero : {false, true}) {
      forcing.Reset();
      forcing.force_draw = k, forcing.low = 1, forcing.high_zero = high_zero;
      EXPECT_EQ(CheckedDraws("node"), baseline_ + 1) << "draw " << k;
    }
  }
  // The last node of each kind is redrawn, the first value past it kept:
  // draws 2 .. baseline_ - 2 are steps by 4 (nodes e_0 .. e_3), the last
  // one the tail (e_0 .. e_128).
  auto expect = [&](int k, uint64_t low, int draws, const char* what) {
    forcing.Reset();
    forcing.force_draw = k, forcing.low = low;
    EXPECT_EQ(CheckedDraws(what), draws) << what << ", draw " << k;
  };
  for (int k = 2; k < baseline_ - 1; ++k) {
    expect(k, 3, baseline_ + 1, "step e_3");
    expect(k, 4, baseline_, "step past its nodes");
  }
  expect(baseline_ - 1, 128, baseline_ + 1, "tail e_128");
  expect(baseline_ - 1, 129, baseline_, "tail past its nodes");
}

// Above 32,769 elements A halves (nodes e_0, e_1), and above 129 GF(2^128)
// products B does too: 3 layers of 11,000 words (33,001 elements) and 200
// products. Draw 2 is a halving of both.
TEST_F(CoinRedraw, HalvingNodesAreRedrawn) {
  forcing.Reset();
  const int draws = CheckedDraws("halving baseline", 11000, 200);
  ASSERT_GE(draws, 5);
  auto expect = [&](uint64_t low, bool high_zero, int n, const char* what) {
    forcing.Reset();
    forcing.force_draw = 2, forcing.low = low, forcing.high_zero = high_zero;
    EXPECT_EQ(CheckedDraws(what, 11000, 200), n) << what;
  };
  expect(1, false, draws + 1, "A's halving e_1");
  expect(2, false, draws, "A past its halving nodes");
  expect(2, true, draws, "A and B past their halving nodes");
}

// Proof B alone (no AND word): its challenge, all 128 bits of the coin, is
// redrawn when it is a node (e_1 of a halving and of the tail), not when
// only its low half is.
TEST_F(CoinRedraw, BAloneRedrawsItsNodes) {
  forcing.Reset();
  const int b_draws = CheckedDraws("B baseline", 0);
  ASSERT_GE(b_draws, 3);  // c1, c2, the tail
  for (int k = 2; k < b_draws; ++k) {
    forcing.Reset();
    forcing.force_draw = k, forcing.low = 1, forcing.high_zero = true;
    EXPECT_EQ(CheckedDraws("B node", 0), b_draws + 1) << "draw " << k;
    forcing.Reset();
    forcing.force_draw = k, forcing.low = 1, forcing.high_zero = false;
    EXPECT_EQ(CheckedDraws("B no node", 0), b_draws) << "draw " << k;
  }
}

// A challenge that is no node is used as drawn.
TEST_F(CoinRedraw, OtherChallengesAreKept) {
  for (int k = 2; k < baseline_; ++k) {
    forcing.Reset();
    forcing.force_draw = k, forcing.low = (uint64_t{1} << 40) + 5;
    EXPECT_EQ(CheckedDraws("no node"), baseline_) << "draw " << k;
  }
}

// A zero mask weight from c2 is drawn again, A's and B's.
TEST_F(CoinRedraw, AZeroMaskWeightIsRedrawn) {
  forcing.zero_mask = true;
  EXPECT_EQ(CheckedDraws("zero mask weight"), baseline_ + 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(forcing.mask_views[i], 2) << "party " << i;
  forcing.Reset();
  forcing.zero_gf_mask = true;
  EXPECT_EQ(CheckedDraws("zero GF mask weight"), baseline_ + 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(forcing.gf_mask_views[i], 2) << "party " << i;
}

}  // namespace
}  // namespace kmpc::protocol
