// The coin ordering of the multiplication check (verify.cc, Coin) against
// an adaptive cheater that reads ahead on the one-way ring.
//
// The attack: party i adds an error D to one logged GF(2^128) product
// (its message of the product layer), then, before sending its message of
// the first compression, tries to receive ahead its successor's next
// messages, up to its share of coin c2. Knowing c2, it knows the weights
// w'_k of the products and w''_m of the mask (verify.h, round 3), whose
// product z'' it reshares in that very message: it adds
// delta = w'_k D / w''_m to its part of z'', and the GF(2^128) proof's
// claim, sum_k w'_k z_k + w''_m z'', is the true one again (the errors
// cancel), so every later step and the final c = f g hold.
//
// This file is built twice (core.cmake):
//  - kmpc_core_readahead_test, against the check as it is: every coin
//    is opened after a round of acknowledgements, so party i+1 sends its
//    share of c2 only after party i-1 received party i's message. The
//    read-ahead gets the round's message and the acknowledgement, never
//    the coin's opening before the send (it waits kWait for it in vain;
//    the opening arrives after the send), and the error is detected;
//  - kmpc_core_readahead_oneround_test, against a copy of verify.cc
//    compiled with KMPC_TEST_ONE_ROUND_COIN (each coin opened in one
//    round, no acknowledgement): the same cheater reads the coin ahead,
//    adapts, and the check passes on a wrong product (the test has teeth).
// In both, the same read-ahead without the adaptation is detected (the
// product error is real). A second test arms the read-ahead at every
// message a coin challenges, with no error: the opening comes ahead of the
// send only without the acknowledgements.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../cheat.h"
#include "cheat_ring.h"
#include "absl/strings/str_cat.h"
#include "net/memory_ring.h"
#include "protocol/dzkp.h"
#include "protocol/prf.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::CheatingChannel;
using ::kmpc::testing::RunParties;

#ifdef KMPC_TEST_ONE_ROUND_COIN
constexpr bool kAcknowledged = false;
constexpr size_t kCoinMessages = 1;  // the opening
#else
constexpr bool kAcknowledged = true;
constexpr size_t kCoinMessages = 2;  // the acknowledgement, the opening
#endif

constexpr size_t kLayers = 2;
constexpr size_t kWords = 70;  // per AND layer
constexpr size_t kGf = 5;      // GF(2^128) products, in message kLayers
// How long the cheater waits for the coin before it must send.
constexpr auto kWait = std::chrono::milliseconds(1000);

class Cluster : public ::kmpc::testing::CheatRing {
 public:
  explicit Cluster(int cheater) : CheatRing(cheater, std::chrono::milliseconds(10000)) {}
  // The cheater's PRSS (read on the cheater's thread only, inside Adapt).
  const Prss& cheater_prss() const { return *prss_[cheater_]; }

  // kLayers AND layers and one layer of kGf GF(2^128) products on random
  // shared inputs, logged, then Verify. One status per party.
  std::array<absl::Status, 3> Run() { return RunCheck(kLayers, kWords, 64, kGf); }

  int CaughtBy(const std::array<absl::Status, 3>& st) const {
    int caught = 0;
    for (int i = 0; i < 3; ++i) caught += i != cheater_ && IsIntegrityFailure(st[i]);
    return caught;
  }
};

// The cheater's adaptation of its first-compression message, given the
// messages read ahead (the round's, [the acknowledgement,] its successor's
// share of c2) and the error on product `item` (GCM bytes, err[16]). The
// message ends with the GF(2^128) proof's mask product (verify.cc,
// FirstLevelProof); c2 keys the PRF whose blocks 1 .. kGf + 1 are the
// products' weights and the mask's (FoldGfProducts). Returns false when
// the coin share was not among them (nothing to adapt to).
bool CancelAtCoin(const Prss& prss, size_t item, const uint8_t err[16], std::vector<uint8_t>& msg,
                  const std::vector<std::vector<uint8_t>>& ahead) {
  if (ahead.size() < kCoinMessages + 1 || ahead.back().size() != 16) return false;
  // Party i's own components of c2: its PRSS's next draw (Coin draws
  // right after this message's round and, with acknowledgements, theirs).
  Prss next = prss;
  uint8_t s0[16], s1[16], coin[16];
  next.RandomShares(s0, s1, 16);
  for (int b = 0; b < 16; ++b) coin[b] = s0[b] ^ s1[b] ^ ahead.back()[b];
  std::vector<uint8_t> w(16 * (kGf + 1));
  Prf(coin).Fill(1, kGf + 1, w.data());
  const dzkp::Fe wk = dzkp::Load(w.data() + 16 * item), wm = dzkp::Load(w.data() + 16 * kGf);
  // w'_k D + w''_m delta = 0 (characteristic 2).
  const dzkp::Fe delta = dzkp::Mul(dzkp::Mul(wk, dzkp::FromGcm(err)), dzkp::Inv(wm));
  uint8_t d[16];
  dzkp::Store(d, delta);
  for (int b = 0; b < 16; ++b) msg[msg.size() - 16 + b] ^= d[b];
  return true;
}

struct Outcome {
  std::array<absl::Status, 3> st;
  size_t before_send = 0, received = 0;
  bool adapted = false;
};

// One run: party `cheater` errs on product `item`, reads ahead at its
// first-compression message (step `fc` of the run, `sizes` its dry run's
// messages), waiting at most `wait`, and, if `adapt`, cancels the error at
// the coin.
Outcome Attack(Cluster& c, size_t fc, const std::vector<size_t>& sizes, size_t item, bool adapt,
               std::chrono::milliseconds wait) {
  uint8_t err[16] = {};
  const size_t byte = (7 * item + 3) % 16;
  err[byte] = static_cast<uint8_t>(1u << (item % 8));
  c.cheat().Arm(kLayers, 16 * item + byte, err[byte]);
  const std::vector<size_t> ahead(sizes.begin() + fc, sizes.begin() + fc + kCoinMessages + 1);
  Outcome o;
  CheatingChannel::Adapt f = [&](std::vector<uint8_t>& msg,
                                 const std::vector<std::vector<uint8_t>>& got) {
    if (adapt) o.adapted = CancelAtCoin(c.cheater_prss(), item, err, msg, got);
  };
  c.cheat().ArmReadAhead(fc, ahead, wait, f);
  o.st = c.Run();
  EXPECT_TRUE(c.cheat().fired());
  c.cheat().Disarm();
  o.before_send = c.cheat().ahead_before_send();
  o.received = c.cheat().ahead_received();
  return o;
}

std::string Show(const Outcome& o) {
  return absl::StrCat(o.st[0].ToString(), " / ", o.st[1].ToString(), " / ", o.st[2].ToString(),
                      "; ahead before the send ", o.before_send, " of ", kCoinMessages + 1);
}

TEST(ReadAhead, AdaptiveCheaterAndTheCoinOrdering) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(cheater);
    const uint64_t before = c.cheat().sent();
    for (const absl::Status& s : c.Run()) ASSERT_TRUE(s.ok()) << s;
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
    // The products' messages, coin c1's, then the first compression: the
    // GF(2^64) proof's h values and mask product, the GF(2^128) mask's.
    const size_t fc = kLayers + 1 + kCoinMessages;
    ASSERT_GT(sizes.size(), fc + kCoinMessages + 1);
    const int g = dzkp::GroupWordsFor(kLayers * kWords);
    ASSERT_EQ(sizes[fc], 8u * (2 * g - 1) + 16u);
    ASSERT_EQ(sizes[fc + kCoinMessages], 16u);  // c2's opening
    const size_t item = static_cast<size_t>(cheater) % kGf;
    const std::string who = absl::StrCat("party ", cheater, " product ", item, ": ");

    // The product error is real: the read-ahead alone does not hide it.
    const Outcome plain = Attack(c, fc, sizes, item, false, std::chrono::milliseconds(0));
    EXPECT_GE(c.CaughtBy(plain.st), 1) << who << Show(plain);

    const Outcome o = Attack(c, fc, sizes, item, true, kWait);
    if (kAcknowledged) {
      // (a) The round's message and the acknowledgement only: the
      // successor's share of c2 came after the send, and the error is
      // caught.
      EXPECT_EQ(o.before_send, kCoinMessages) << who << Show(o);
      EXPECT_EQ(o.received, kCoinMessages + 1) << who << Show(o);
      EXPECT_FALSE(o.adapted) << who << Show(o);
      EXPECT_GE(c.CaughtBy(o.st), 1) << who << Show(o);
    } else {
      // (b) Without the acknowledgements the coin is read ahead, the
      // error cancelled at it, and a wrong product passes.
      EXPECT_EQ(o.before_send, kCoinMessages + 1) << who << Show(o);
      EXPECT_TRUE(o.adapted) << who << Show(o);
      // A failure here with adapted set: the check's layout changed
      // (verify.cc FirstLevelProof, FoldGfProducts); update CancelAtCoin.
      for (const absl::Status& s : o.st) EXPECT_TRUE(s.ok()) << who << Show(o);
    }
    for (const absl::Status& s : c.Run()) EXPECT_TRUE(s.ok()) << who << "next batch: " << s;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("read-ahead attack, %s coins: %.2f s\n",
              kAcknowledged ? "acknowledged" : "one-round", secs);
}

// Every coin of the check, from each party: a read-ahead armed at the
// message a coin challenges (the last product layer for c1, each
// compression's reshare for the coin after it) gets the coin's opening
// before the send only without the acknowledgements. The challenged
// messages: the products' last message, then one every kCoinMessages + 1
// from the first compression to the last compression's reshare (the
// opening of the last f, g, c and the compare follow its coin).
TEST(ReadAhead, NoCoinIsReadAheadOfTheMessageItChallenges) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto wait = std::chrono::milliseconds(kAcknowledged ? 100 : 1000);
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(cheater);
    const uint64_t before = c.cheat().sent();
    for (const absl::Status& s : c.Run()) ASSERT_TRUE(s.ok()) << s;
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
    const size_t fc = kLayers + 1 + kCoinMessages, last = sizes.size() - 3 - kCoinMessages;
    ASSERT_EQ((last - fc) % (kCoinMessages + 1), 0u) << sizes.size();
    std::vector<size_t> challenged = {kLayers};
    for (size_t s = fc; s <= last; s += kCoinMessages + 1) challenged.push_back(s);
    ASSERT_GE(challenged.size(), 4u);  // c1, c2, a halving's, the last compression's
    for (size_t s : challenged) {
      const std::string what = absl::StrCat("party ", cheater, " step ", s, " of ", sizes.size());
      ASSERT_EQ(sizes[s + kCoinMessages], 16u) << what;  // the coin's opening
      const std::vector<size_t> ahead(sizes.begin() + s, sizes.begin() + s + kCoinMessages + 1);
      c.cheat().ArmReadAhead(s, ahead, wait, nullptr);
      for (const absl::Status& st : c.Run()) EXPECT_TRUE(st.ok()) << what << ": " << st;
      EXPECT_EQ(c.cheat().ahead_before_send(), kAcknowledged ? kCoinMessages : kCoinMessages + 1)
          << what;
      EXPECT_EQ(c.cheat().ahead_received(), kCoinMessages + 1) << what;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("read-ahead at every coin, %s coins: %.2f s\n",
              kAcknowledged ? "acknowledged" : "one-round", secs);
}

}  // namespace
}  // namespace kmpc::protocol
