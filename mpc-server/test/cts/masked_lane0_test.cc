// The one-lane walk (cts/masked_lane0.cc) against the word walk it stands
// in for (masked_eval.cc, MaskedJob::word_walk): from the same PRSS keys,
// every message each party sends is the same byte for byte, and so are
// the outputs, which are the clear engine's; semi-honest and with the
// check, for programs at k = 2, 4 and 6 (a SHA-1 compression, an adder,
// an AES-256 block: masked and Rep3 gates, local gates, products of up to
// six leaves). Beside them, masked_test.cc runs one lane against the
// clear engine and its cheating parties at one lane.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "cts/aes_circuit.h"
#include "cts/lut_map.h"
#include "cts/masked.h"
#include "net/memory_ring.h"
#include "cts_testing.h"
#include "protocol/verify.h"
#include "sha1_programs.h"
#include "tap_channel.h"
#include "test_util.h"

namespace kmpc::cts {
namespace {

using testing::Bytes;
using testing::Views;

struct Transcript {
  std::array<::kmpc::testing::TapChannel::Msgs, 3> sent;
  std::array<std::array<Bytes, 2>, 3> out;  // each party's output components
  std::array<absl::Status, 3> st;
};

// Three parties with fixed PRSS keys run one lane of mp, on the one-lane
// walk or (word_walk) on the word walk; every message each sends is kept.
Transcript RunLane(const MaskedProgram& mp, const Views& lane, bool word_walk, bool malicious) {
  net::InMemoryRing ring{std::chrono::milliseconds(5000)};
  std::array<std::unique_ptr<::kmpc::testing::TapChannel>, 3> tap;
  std::array<std::optional<protocol::Prss>, 3> prss;
  std::array<std::unique_ptr<protocol::Rep3>, 3> rep3;
  std::array<std::array<uint8_t, 16>, 3> key;
  for (int i = 0; i < 3; ++i) key[i].fill(static_cast<uint8_t>(0x31 * (i + 1)));
  for (int i = 0; i < 3; ++i) {
    tap[i] = std::make_unique<::kmpc::testing::TapChannel>(ring.party(i));
    prss[i].emplace(i, key[i].data(), key[(i + 1) % 3].data());
    rep3[i] = std::make_unique<protocol::Rep3>(*tap[i], *prss[i]);
  }
  Transcript t;
  std::array<protocol::MulLog, 3> logs;
  t.st = ::kmpc::testing::RunParties([&](int i) {
    testing::PartyWords w(i, {{lane}}, {mp.outputs});
    MaskedJob job{&mp, w.wn[0], w.In(0), w.Out(0), w.lanes[0]};
    job.word_walk = word_walk;
    rep3[i]->set_log(malicious ? &logs[i] : nullptr);
    absl::Status st = EvaluateMaskedAll(absl::MakeConstSpan(&job, 1), *rep3[i]);
    if (st.ok() && malicious) st = protocol::Verifier::Verify(*rep3[i], logs[i]);
    rep3[i]->set_log(nullptr);
    std::vector<std::vector<std::array<Bytes, 2>>> out;
    w.Unpack(out);
    t.out[i] = out[0][0];
    return st;
  });
  for (int i = 0; i < 3; ++i) t.sent[i] = tap[i]->sent();
  return t;
}

Program Aes256Block() {
  Circuit c;
  RoundKeys k;
  k.nr = 14;
  k.bits = c.Inputs(128 * 15);
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  return c.Compile();
}

void ExpectSameAsTheWordWalk(const Program& p, int k, uint32_t seed) {
  auto mp = CompileMasked(MapLuts(p, LutOptions{k}));
  ASSERT_TRUE(mp.ok()) << mp.status();
  std::mt19937 rng(seed);
  Bytes in(p.inputs / 8);
  for (uint8_t& b : in) b = static_cast<uint8_t>(rng());
  const Bytes want = testing::RunClear(p, {in})[0];
  const Views lane = testing::DealViews(in);
  for (bool malicious : {false, true}) {
    const Transcript one = RunLane(*mp, lane, false, malicious);
    const Transcript word = RunLane(*mp, lane, true, malicious);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(one.st[i].ok()) << one.st[i];
      ASSERT_TRUE(word.st[i].ok()) << word.st[i];
      // More than the Prss-free run's own: the masked messages are there.
      EXPECT_GE(one.sent[i].size(), static_cast<size_t>(mp->rounds) - 1);
      EXPECT_EQ(one.sent[i], word.sent[i]) << "party " << i << " k " << k;
      EXPECT_EQ(one.out[i], word.out[i]) << "party " << i << " k " << k;
    }
    Views v;
    for (int i = 0; i < 3; ++i) v[i].comp = one.out[i];
    auto got = share::Open(v);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << "k " << k << " malicious " << malicious;
  }
}

TEST(MaskedLane0, SendsWhatTheWordWalkSends) {
  for (int k : {2, 4, 6})
    ExpectSameAsTheWordWalk(testing::Sha1CompressionProgram(), k, static_cast<uint32_t>(k));
  ExpectSameAsTheWordWalk(testing::AdderProgram(), 6, 7);
  ExpectSameAsTheWordWalk(Aes256Block(), 6, 8);
}

// A Rep3 gate with all three negations (not = 7: (a ^ 1)(b ^ 1) ^ 1, an
// OR), which the mapped programs above may not hold: a program of that one
// gate on input wires 0 and 8 (bit 0 of bytes 0 and 1), output wire 0.
TEST(MaskedLane0, ARep3GateWithItsNegationsSendsWhatTheWordWalkSends) {
  MaskedProgram p;
  p.inputs = 16;
  p.outputs = 8;
  p.slots = 5;  // 0, 1 the constants, 2 and 3 the inputs, 4 the gate
  p.rounds = 1;
  p.ands = 1;
  p.input_slot.assign(16, ~uint32_t{0});
  p.input_slot[0] = 2;
  p.input_slot[8] = 3;
  p.output_slot = {4, 0, 0, 0, 0, 0, 0, 0};
  p.round.resize(2);
  p.round[1].rep3 = {4, 2, 3, 7};
  for (int x = 0; x < 4; ++x) {
    const Views lane = testing::DealViews(Bytes{static_cast<uint8_t>(x & 1), static_cast<uint8_t>(x >> 1)});
    for (bool malicious : {false, true}) {
      const Transcript one = RunLane(p, lane, false, malicious);
      const Transcript word = RunLane(p, lane, true, malicious);
      Views v;
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(one.st[i].ok() && word.st[i].ok()) << one.st[i] << word.st[i];
        EXPECT_EQ(one.sent[i], word.sent[i]) << "party " << i << " x " << x;
        v[i].comp = one.out[i];
      }
      auto got = share::Open(v);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, Bytes{static_cast<uint8_t>(x != 0)}) << "x " << x;
    }
  }
}

// The test's own premise: with the same keys and dealing, another input
// bit (component s_0 flipped in both views that hold it) changes the
// messages, so the comparison above would not pass walks that ignored the
// data.
TEST(MaskedLane0, AnotherInputSendsOtherMessages) {
  const Program p = testing::Sha1CompressionProgram();
  auto mp = CompileMasked(MapLuts(p, LutOptions{6}));
  ASSERT_TRUE(mp.ok()) << mp.status();
  const Views a = testing::DealViews(Bytes(p.inputs / 8, 0x11));
  Views b = a;
  b[0].comp[0][0] ^= 1;  // s_0: party 0's first component, party 2's second
  b[2].comp[1][0] ^= 1;
  const Transcript ta = RunLane(*mp, a, false, false), tb = RunLane(*mp, b, false, false);
  ASSERT_TRUE(ta.st[0].ok() && tb.st[0].ok());
  EXPECT_NE(ta.sent[0], tb.sent[0]);
  EXPECT_EQ(ta.sent[0].front(), tb.sent[0].front());  // the first message: products only
}

}  // namespace
}  // namespace kmpc::cts
