// The one-lane walk (cts/masked_lane0.cc) against the word walk it stands
// in for (masked_eval.cc, MaskedJob::word_walk): from the same PRSS keys,
// every message each party sends is the same byte for byte, and so are
// the outputs, which are the clear engine's; semi-honest and with the
// check: a SHA-1 compression at k = 2, 4 and 6, an adder and an AES-256
// block at k = 6 (masked and Rep3 gates, local gates, products of up to
// six leaves), one-lane jobs beside others of every width in the same
// messages, and a Rep3 gate with each of its negations. Beside them, masked_test.cc runs
// one lane against the clear engine and its cheating parties at one
// lane.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cts/lut_map.h"
#include "cts/masked.h"
#include "net/memory_ring.h"
#include "cts_testing.h"
#include "masked_testing.h"
#include "sha1_programs.h"
#include "tap_channel.h"
#include "test_util.h"

namespace kmpc::cts {
namespace {

using testing::Bytes;
using testing::Views;

// One job of a run: a program and its lanes' views.
struct Lanes {
  const MaskedProgram* p;
  std::vector<Views> views;
};

struct Transcript {
  std::array<::kmpc::testing::TapChannel::Msgs, 3> sent;
  // out[i][job][lane]: party i's output components; words[i][job]: its
  // raw output words (component 0).
  std::array<testing::PartyOutputs, 3> out;
  std::array<std::vector<std::vector<uint64_t>>, 3> words;
  std::array<absl::Status, 3> st;
};

// Three parties with fixed PRSS keys run the jobs in the same messages,
// each one-lane job on the one-lane walk or (word_walk) on the word walk;
// every message each party sends is kept. With a log, the check runs
// whenever it holds verify_words AND words, and at the end.
Transcript RunJobs(const std::vector<Lanes>& jobs, bool word_walk, bool malicious,
                   size_t verify_words = protocol::MulLog::kVerifyWords) {
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
  std::vector<const MaskedProgram*> programs;
  std::vector<std::vector<Views>> views;
  for (const Lanes& l : jobs) {
    programs.push_back(l.p);
    views.push_back(l.views);
  }
  Transcript t;
  std::array<protocol::MulLog, 3> logs;
  t.st = ::kmpc::testing::RunParties([&](int i) {
    return testing::RunMaskedParty(*rep3[i], programs, i, views,
                                   malicious ? &logs[i] : nullptr, verify_words, t.out[i],
                                   word_walk, &t.words[i]);
  });
  for (int i = 0; i < 3; ++i) t.sent[i] = tap[i]->sent();
  return t;
}

// Both walks of the same jobs: the same messages from every party and the
// same outputs. The one-lane walk ran where a job has one lane: its output
// words hold lane 0 alone, where the word walk leaves other lanes' bits
// (masks drawn for all 64) in some.
void ExpectBothWalksAgree(const std::vector<Lanes>& jobs, bool malicious, size_t verify_words,
                          const std::string& what) {
  const Transcript one = RunJobs(jobs, false, malicious, verify_words);
  const Transcript word = RunJobs(jobs, true, malicious, verify_words);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(one.st[i].ok()) << what << ": " << one.st[i];
    ASSERT_TRUE(word.st[i].ok()) << what << ": " << word.st[i];
    EXPECT_EQ(one.sent[i], word.sent[i]) << what << ": party " << i;
    EXPECT_EQ(one.out[i], word.out[i]) << what << ": party " << i;
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (jobs[k].views.size() != 1) continue;
    auto high = [&](const Transcript& t) {
      bool any = false;
      for (int i = 0; i < 3; ++i)
        for (uint64_t w : t.words[i][k]) any = any || (w >> 1) != 0;
      return any;
    };
    EXPECT_FALSE(high(one)) << what << ": job " << k << " did not run the one-lane walk";
    if (jobs[k].p->outputs >= 64) EXPECT_TRUE(high(word)) << what << ": job " << k;
  }
}

// The opened outputs of job k's lanes (empty where the copies disagree).
std::vector<Bytes> Opened(const Transcript& t, size_t k) {
  std::vector<size_t> n(t.out[0].size());
  for (size_t j = 0; j < n.size(); ++j) n[j] = t.out[0][j].size();
  return testing::OpenOutputs(t.out, n)[k];
}

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

void ExpectSameAsTheWordWalk(const Program& p, int k, uint32_t seed) {
  auto mp = CompileMasked(MapLuts(p, LutOptions{k}));
  ASSERT_TRUE(mp.ok()) << mp.status();
  const Bytes in = RandomBytes(p.inputs / 8, seed);
  const std::vector<Lanes> jobs{{&*mp, {testing::DealViews(in)}}};
  for (bool malicious : {false, true}) {
    const std::string what = "k " + std::to_string(k) + " malicious " + std::to_string(malicious);
    ExpectBothWalksAgree(jobs, malicious, protocol::MulLog::kVerifyWords, what);
    EXPECT_EQ(Opened(RunJobs(jobs, false, malicious), 0), testing::RunClear(p, {in})) << what;
  }
}

TEST(MaskedLane0, SendsWhatTheWordWalkSends) {
  for (int k : {2, 4, 6})
    ExpectSameAsTheWordWalk(testing::Sha1CompressionProgram(), k, static_cast<uint32_t>(k));
  ExpectSameAsTheWordWalk(testing::AdderProgram(), 6, 7);
  ExpectSameAsTheWordWalk(testing::Aes256BlockProgram(), 6, 8);
}

// One-lane jobs beside a three-lane one and each other in the same
// messages, at other offsets than 0, with the check run every ~2,000 AND
// words as well as at the end.
TEST(MaskedLane0, SendsWhatTheWordWalkSendsBesideOtherJobs) {
  const Program sha = testing::Sha1CompressionProgram(), add = testing::AdderProgram();
  auto ms = CompileMasked(MapLuts(sha, LutOptions{6}));
  auto ma = CompileMasked(MapLuts(add, LutOptions{4}));
  ASSERT_TRUE(ms.ok() && ma.ok());
  std::vector<Bytes> three;
  for (uint32_t s = 0; s < 3; ++s) three.push_back(RandomBytes(sha.inputs / 8, 20 + s));
  const Bytes a = RandomBytes(add.inputs / 8, 30), b = RandomBytes(sha.inputs / 8, 31);
  std::vector<Views> tv;
  for (const Bytes& x : three) tv.push_back(testing::DealViews(x));
  const std::vector<Lanes> jobs{{&*ms, tv}, {&*ma, {testing::DealViews(a)}},
                                {&*ms, {testing::DealViews(b)}}};
  for (bool malicious : {false, true}) {
    ExpectBothWalksAgree(jobs, malicious, 2000, "malicious " + std::to_string(malicious));
    const Transcript t = RunJobs(jobs, false, malicious, 2000);
    EXPECT_EQ(Opened(t, 0), testing::RunClear(sha, three));
    EXPECT_EQ(Opened(t, 1), testing::RunClear(add, {a}));
    EXPECT_EQ(Opened(t, 2), testing::RunClear(sha, {b}));
  }
}

// A program of one Rep3 gate with negations neg (not: (a ^ n0)(b ^ n1) ^
// n2, bit i of not n_i) on input wires 0 and 8 (bit 0 of bytes 0 and 1),
// output wire 0.
MaskedProgram Rep3GateProgram(uint32_t neg) {
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
  p.round[1].rep3 = {4, 2, 3, neg};
  return p;
}

// A Rep3 gate with each of its negations, which mapped programs may not
// all hold.
TEST(MaskedLane0, ARep3GateWithEachNegationSendsWhatTheWordWalkSends) {
  for (uint32_t neg = 0; neg < 8; ++neg) {
    const MaskedProgram p = Rep3GateProgram(neg);
    for (uint32_t x = 0; x < 4; ++x) {
      const uint32_t xa = x & 1, xb = x >> 1;
      const uint32_t want = ((xa ^ (neg & 1)) & (xb ^ ((neg >> 1) & 1))) ^ (neg >> 2);
      const std::vector<Lanes> jobs{
          {&p, {testing::DealViews(Bytes{static_cast<uint8_t>(xa), static_cast<uint8_t>(xb)})}}};
      for (bool malicious : {false, true}) {
        const std::string what = "not " + std::to_string(neg) + " x " + std::to_string(x);
        ExpectBothWalksAgree(jobs, malicious, protocol::MulLog::kVerifyWords, what);
        EXPECT_EQ(Opened(RunJobs(jobs, false, malicious), 0),
                  std::vector<Bytes>{Bytes{static_cast<uint8_t>(want)}})
            << what;
      }
    }
  }
}

// One-lane jobs in every place of a message beside jobs of every width:
// packing jobs of 2 to 63 lanes, a 64-lane job (a whole word, packed or
// not), a two-word job, each other, and jobs of fewer rounds (a round
// where a one-lane job has items and the others none, and the reverse):
// a one-lane job writes its bits into the packed words itself, at its
// own offset, and the messages stay the word walk's.
TEST(MaskedLane0, OneLaneJobsBesideJobsOfEveryWidthSendWhatTheWordWalkSends) {
  const Program sha = testing::Sha1CompressionProgram(), add = testing::AdderProgram(),
                aes = testing::Aes256BlockProgram();
  auto s6 = CompileMasked(MapLuts(sha, LutOptions{6}));
  auto s2 = CompileMasked(MapLuts(sha, LutOptions{2}));
  auto a4 = CompileMasked(MapLuts(add, LutOptions{4}));
  auto e6 = CompileMasked(MapLuts(aes, LutOptions{6}));
  ASSERT_TRUE(s6.ok() && s2.ok() && a4.ok() && e6.ok());
  const MaskedProgram gate = Rep3GateProgram(5);
  uint32_t seed = 100;
  auto views = [&](const Program& p, size_t n) {
    std::vector<Views> v;
    for (size_t i = 0; i < n; ++i) v.push_back(testing::DealViews(RandomBytes(p.inputs / 8, seed++)));
    return v;
  };
  // 0-4 one lane; 5-9 64, 63, 5, 65 and 2 lanes.
  const std::vector<Lanes> pool{
      {&*s6, views(sha, 1)},  {&*a4, views(add, 1)},  {&*s2, views(sha, 1)},
      {&*e6, views(aes, 1)},  {&gate, {testing::DealViews(Bytes{1, 0})}},
      {&*s6, views(sha, 64)}, {&*a4, views(add, 63)}, {&*s2, views(sha, 5)},
      {&*a4, views(add, 65)}, {&*e6, views(aes, 2)}};
  std::vector<std::vector<int>> mixes{{5, 4},       {4, 5},          {1, 5, 1},   {8, 1, 4},
                                      {0, 6, 0, 5}, {4, 1, 6, 4, 7}, {4, 4, 4, 8}};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<int> m(2 + rng() % 5);
    for (int& k : m) k = static_cast<int>(rng() % 3 == 0 ? 5 + rng() % 5 : rng() % 5);
    mixes.push_back(m);
  }
  for (const std::vector<int>& m : mixes) {
    std::vector<Lanes> jobs;
    std::string what = "jobs";
    for (int k : m) {
      jobs.push_back(pool[k]);
      what += " " + std::to_string(k);
    }
    for (bool malicious : {false, true})
      ExpectBothWalksAgree(jobs, malicious, 1000, what + " malicious " + std::to_string(malicious));
  }
}

// A program whose forms have no table (built by hand without
// FillFormTable) is refused before any message, not read out of bounds.
TEST(MaskedLane0, AProgramWithoutItsFormsTableIsRefused) {
  MaskedProgram p;
  p.inputs = 8;
  p.outputs = 8;
  p.slots = 2;
  p.input_slot.assign(8, ~uint32_t{0});
  p.output_slot.assign(8, 0);
  p.round.resize(1);
  p.forms.push_back({});
  const std::vector<Lanes> jobs{{&p, {testing::DealViews(Bytes{1})}}};
  const Transcript t = RunJobs(jobs, false, false);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.st[i].code(), absl::StatusCode::kInvalidArgument) << t.st[i];
    EXPECT_TRUE(t.sent[i].empty());
  }
  FillFormTable(p);
  const Transcript u = RunJobs(jobs, false, false);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(u.st[i].ok()) << u.st[i];
}

// The test's own premise: with the same keys and dealing, another input
// bit (component s_0 flipped in both views that hold it) changes the
// messages, so the comparisons above would not pass walks that ignored
// the data.
TEST(MaskedLane0, AnotherInputSendsOtherMessages) {
  const Program p = testing::Sha1CompressionProgram();
  auto mp = CompileMasked(MapLuts(p, LutOptions{6}));
  ASSERT_TRUE(mp.ok()) << mp.status();
  const Views a = testing::DealViews(Bytes(p.inputs / 8, 0x11));
  Views b = a;
  b[0].comp[0][0] ^= 1;  // s_0: party 0's first component, party 2's second
  b[2].comp[1][0] ^= 1;
  const Transcript ta = RunJobs({{&*mp, {a}}}, false, false);
  const Transcript tb = RunJobs({{&*mp, {b}}}, false, false);
  ASSERT_TRUE(ta.st[0].ok() && tb.st[0].ok());
  EXPECT_NE(ta.sent[0], tb.sent[0]);
}

}  // namespace
}  // namespace kmpc::cts
