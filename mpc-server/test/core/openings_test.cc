// No message depends on an unconfirmed opening (verify.h, "Openings").
//
// The attack: party i sends its predecessor i-1 a shifted share of an
// opened value (a coin of the check, or a value opened during the batch
// and then used as a public input, as the agreement's ctr0 is). Party i-1
// alone opens c ^ d; party i learns the true value from party i+1, which
// opened it too. Party i-1 derives its next messages (to party i+1) from
// the wrong value; if party i+1 went on, its opening of the check's last
// claim to party i would be interpolated from those messages: a relation
// of the shares party i lacks, learnt from a batch that then fails.
//
// Three parties in one process, with fixed PRSS keys, so that an honest
// run and an attacked run draw the same randomness; party i+1's messages
// are recorded in both. This file is built twice (core.cmake):
//  - kmpc_core_openings_test, against the check as it is: party i+1
//    compares party i-1's acknowledgement at the next coin with its own
//    hash, goes silent (zeros), and fails; its last opening carries
//    nothing;
//  - kmpc_core_openings_unconfirmed_test, against a copy of verify.cc
//    compiled with KMPC_TEST_UNCONFIRMED_OPENINGS (the acknowledgement
//    hashed, not compared): party i+1's last opening differs from the
//    honest run's, i.e. depends on party i-1's diverged messages, and is
//    sent before any party fails (the test has teeth).
// The control, in both: shifting the check's last coin changes nothing
// party i+1 sends before the compare round (no message follows it but the
// opening, computed from what party i+1 held before).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "net/memory_ring.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "share/replicated.h"
#include "tap_channel.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::RunParties;

#ifdef KMPC_TEST_UNCONFIRMED_OPENINGS
constexpr bool kConfirmed = false;
#else
constexpr bool kConfirmed = true;
#endif

constexpr size_t kLayers = 2;
constexpr size_t kWords = 300;  // per AND layer: A halves and steps
constexpr size_t kGf = 300;     // GF(2^128) products: B halves

using Tap = ::kmpc::testing::TapChannel;

struct Transcript {
  std::array<absl::Status, 3> st;
  std::array<std::vector<std::vector<uint8_t>>, 3> sent;  // by party
  std::vector<std::vector<uint8_t>> successor;           // what party i+1 sent
  std::vector<size_t> cheater_sizes;                     // the sizes party i sent
};

// One batch: a value opened among the parties and used as a public input
// (XORed into the first AND layer's x, as ctr0 enters the AES), kLayers
// AND layers, one layer of kGf GF(2^128) products, then Verify. Party
// `cheater` XORs `delta` into its message number `shift_at` (the share of
// an opening it sends its predecessor, or an acknowledgement).
Transcript RunBatch(int cheater, std::optional<uint64_t> shift_at,
                    std::vector<uint8_t> delta = {0x01},
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  net::InMemoryRing ring(timeout);
  std::array<std::unique_ptr<Tap>, 3> tap;
  for (int i = 0; i < 3; ++i) tap[i] = std::make_unique<Tap>(ring.party(i));
  if (shift_at) tap[cheater]->Shift(*shift_at, std::move(delta));
  uint8_t keys[3][16];
  for (int k = 0; k < 3; ++k) std::memset(keys[k], 0x31 + k, 16);
  Transcript out;
  out.st = RunParties([&](int i) -> absl::Status {
    Prss prss(i, keys[i], keys[(i + 1) % 3]);
    Rep3 r(*tap[i], prss);
    MulLog log;
    r.set_log(&log);
    uint8_t v0[8], v1[8], v[8];
    prss.RandomShares(v0, v1, 8);
    absl::Status st = r.Reveal(v0, v1, v);  // logged (AddOpened)
    uint64_t pub;
    std::memcpy(&pub, v, 8);
    std::vector<uint64_t> x0(kWords), x1(kWords), y0(kWords), y1(kWords), z0(kWords), z1(kWords);
    auto bytes = [](std::vector<uint64_t>& w) { return reinterpret_cast<uint8_t*>(w.data()); };
    for (size_t layer = 0; layer < kLayers && st.ok(); ++layer) {
      prss.RandomShares(bytes(x0), bytes(x1), 8 * kWords);
      prss.RandomShares(bytes(y0), bytes(y1), 8 * kWords);
      for (size_t j = 0; layer == 0 && j < kWords; ++j) {
        if (share::HoldsPublicIn(i, 0)) x0[j] ^= pub;
        if (share::HoldsPublicIn(i, 1)) x1[j] ^= pub;
      }
      st = r.And(x0, x1, y0, y1, absl::MakeSpan(z0), absl::MakeSpan(z1));
    }
    std::vector<uint8_t> a0(16 * kGf), a1(16 * kGf), b0(16 * kGf), b1(16 * kGf), c0(16 * kGf),
        c1(16 * kGf);
    prss.RandomShares(a0.data(), a1.data(), a0.size());
    prss.RandomShares(b0.data(), b1.data(), b0.size());
    if (st.ok()) st = r.GfMul(a0, a1, b0, b1, absl::MakeSpan(c0), absl::MakeSpan(c1));
    if (st.ok()) st = Verifier::Verify(r, log);
    r.set_log(nullptr);
    return st;
  });
  for (int i = 0; i < 3; ++i) out.sent[i] = tap[i]->sent();
  out.successor = out.sent[(cheater + 1) % 3];
  for (const auto& m : out.sent[cheater]) out.cheater_sizes.push_back(m.size());
  return out;
}

// The cheater's messages that open a coin: a 16-byte share right after a
// 32-byte acknowledgement.
std::vector<uint64_t> CoinOpenings(const std::vector<size_t>& sizes) {
  std::vector<uint64_t> at;
  for (size_t j = 1; j < sizes.size(); ++j)
    if (sizes[j] == 16 && sizes[j - 1] == 32) at.push_back(j);
  return at;
}

bool AllZero(const std::vector<uint8_t>& m) {
  for (uint8_t b : m)
    if (b != 0) return false;
  return true;
}

std::string Show(const std::array<absl::Status, 3>& st) {
  return absl::StrCat(st[0].ToString(), " / ", st[1].ToString(), " / ", st[2].ToString());
}

// Party i+1's last opening (the check's f, g and claims of both proofs):
// its message before the compare round.
const std::vector<uint8_t>& LastOpening(const Transcript& r) {
  return r.successor[r.successor.size() - 2];
}

// Checks one attacked run against the honest one. confirmed_later: a coin
// follows the shifted opening (every one but the check's last), whose
// acknowledgement confirms it; used: the predecessor computes from the
// shifted value (a coin always; a public input only where it holds a
// public component: share::HoldsPublicIn).
void ExpectOutcome(const Transcript& honest, const Transcript& bad, int cheater,
                   bool confirmed_later, bool used, const std::string& what) {
  const int succ = (cheater + 1) % 3;
  ASSERT_EQ(bad.successor.size(), honest.successor.size()) << what;
  ASSERT_EQ(LastOpening(bad).size(), 72u) << what;  // 24 (A) + 48 (B)
  EXPECT_TRUE(IsIntegrityFailure(bad.st[succ]) || IsIntegrityFailure(bad.st[(cheater + 2) % 3]))
      << what << Show(bad.st);
  if (kConfirmed && confirmed_later) {
    // Silent from the next coin on: its last opening carries nothing.
    EXPECT_TRUE(AllZero(LastOpening(bad))) << what;
    EXPECT_TRUE(IsIntegrityFailure(bad.st[succ])) << what << Show(bad.st);
  } else if (confirmed_later && used) {
    // The leak: computed from the predecessor's diverged messages, sent.
    EXPECT_NE(LastOpening(bad), LastOpening(honest)) << what;
    EXPECT_FALSE(AllZero(LastOpening(bad))) << what;
  } else {
    EXPECT_EQ(LastOpening(bad), LastOpening(honest)) << what;
  }
}

TEST(Openings, ShiftedCoinReachesNoMessageOfTheHonestSuccessor) {
  for (int cheater = 0; cheater < 3; ++cheater) {
    const Transcript honest = RunBatch(cheater, std::nullopt);
    for (const absl::Status& s : honest.st) ASSERT_TRUE(s.ok()) << s;
    const std::vector<uint64_t> coins = CoinOpenings(honest.cheater_sizes);
    // c1, c2, at least one halving (B) and one step (A), the tail's coin.
    ASSERT_GE(coins.size(), 5u);
    for (size_t k = 0; k < coins.size(); ++k) {
      const Transcript bad = RunBatch(cheater, coins[k]);
      ExpectOutcome(honest, bad, cheater, k + 1 < coins.size(), true,
                    absl::StrCat("party ", cheater, " coin ", k, " of ", coins.size(), ": "));
    }
  }
}

TEST(Openings, ShiftedBatchOpeningReachesNoMessageOfTheHonestSuccessor) {
  for (int cheater = 0; cheater < 3; ++cheater) {
    const Transcript honest = RunBatch(cheater, std::nullopt);
    for (const absl::Status& s : honest.st) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(honest.cheater_sizes[0], 8u);  // the batch's opening
    const Transcript bad = RunBatch(cheater, 0);
    const int pred = (cheater + 2) % 3;
    const bool used = share::HoldsPublicIn(pred, 0) || share::HoldsPublicIn(pred, 1);
    ExpectOutcome(honest, bad, cheater, true, used,
                  absl::StrCat("party ", cheater, " opening: "));
  }
}

// Without an attack both builds agree with each other's honest transcript
// shape: the check still runs the rounds verify.h counts (no extra round).
TEST(Openings, HonestRunPasses) {
  const Transcript honest = RunBatch(0, std::nullopt);
  for (const absl::Status& s : honest.st) EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(AllZero(LastOpening(honest)));
}

// The cheater shows its predecessor alone a coin to redraw: it sends its
// share XOR the true coin (known to a cheater that waits for its
// successor's share), so that party i-1 opens 0, an interpolation node of
// every compression. Party i-1 alone draws again and the ring's messages
// no longer fit: the honest parties fail the batch as a detected
// deviation (verify.cc AsDeviation), not as a ring fault, so it counts
// toward the breaker.
TEST(Openings, PredecessorForcedToRedrawFailsAsADeviation) {
  const int cheater = 1, pred = 0, succ = 2;
  const Transcript honest = RunBatch(cheater, std::nullopt);
  for (const absl::Status& s : honest.st) ASSERT_TRUE(s.ok()) << s;
  const std::vector<uint64_t> coins = CoinOpenings(honest.cheater_sizes);
  ASSERT_GE(coins.size(), 5u);
  // A halving's or step's coin, and the last one (c1 and c2 redraw on
  // other predicates).
  for (uint64_t at : {coins[2], coins.back()}) {
    std::vector<uint8_t> coin(16, 0);
    for (int p = 0; p < 3; ++p)
      for (int k = 0; k < 16; ++k) coin[k] ^= honest.sent[p][at][k];
    const Transcript bad = RunBatch(cheater, at, coin, std::chrono::milliseconds(500));
    EXPECT_TRUE(IsIntegrityFailure(bad.st[succ])) << "message " << at << ": " << Show(bad.st);
    EXPECT_TRUE(IsIntegrityFailure(bad.st[pred])) << "message " << at << ": " << Show(bad.st);
  }
}

// A wrong acknowledgement at the check's last coin: the predecessor finds
// it differing from its own hash and goes silent, but still sends its
// share of that coin (a fresh PRSS value: verify.cc ConfirmedRing::
// PassNext), so the successor opens the true coin and its last opening is
// the honest run's; the compare round fails the batch.
TEST(Openings, WrongLastAcknowledgementLeavesTheLastOpeningHonest) {
  for (int cheater = 0; cheater < 3; ++cheater) {
    const Transcript honest = RunBatch(cheater, std::nullopt);
    for (const absl::Status& s : honest.st) ASSERT_TRUE(s.ok()) << s;
    const std::vector<uint64_t> coins = CoinOpenings(honest.cheater_sizes);
    const Transcript bad = RunBatch(cheater, coins.back() - 1);
    EXPECT_EQ(LastOpening(bad), LastOpening(honest)) << "party " << cheater;
    int caught = 0;
    for (int i = 0; i < 3; ++i) caught += i != cheater && IsIntegrityFailure(bad.st[i]);
    EXPECT_GE(caught, 1) << "party " << cheater << ": " << Show(bad.st);
  }
}

}  // namespace
}  // namespace kmpc::protocol
