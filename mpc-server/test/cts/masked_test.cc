// Circuits run as k-input gates over masked wires on three in-process
// parties (cts/masked.h): the opened outputs against the clear engine for
// a SHA-1 compression, an AES-256 block and an adder at k = 2, 4, 6, with
// few and many lanes, one job and several in the same messages, with and
// without the malicious check; the messages a run takes against the
// mapping's depth; and a cheating party that flips one mask product, one
// Rep3 gate's product or one opened component is caught (the check fails
// at an honest party).
#include "cts/masked.h"

#include <gtest/gtest.h>

#include <random>

#include "../cheat.h"
#include "cheat_ring.h"
#include "cts/aes_circuit.h"
#include "cts/sha1.h"
#include "cts_testing.h"
#include "rep3_cluster.h"
#include "masked_testing.h"
#include "sha1_programs.h"

namespace kmpc::cts {
namespace {

using testing::Bytes;
using testing::Views;

struct Case {
  Program p;
  MaskedProgram mp;
  LutFigures fig;
};

Case Make(Program p, int k) {
  Case c;
  c.p = std::move(p);
  const LutMap m = MapLuts(c.p, LutOptions{k});
  auto mp = CompileMasked(m);
  EXPECT_TRUE(mp.ok()) << mp.status();
  if (mp.ok()) c.mp = std::move(*mp);
  c.fig = m.fig;
  return c;
}

Program Aes256Block() {
  Circuit c;
  RoundKeys k;
  k.nr = 14;
  k.bits = c.Inputs(128 * 15);
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  return c.Compile();
}

std::vector<Bytes> RandomLanes(size_t n, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Bytes> out(n, Bytes(bytes));
  for (Bytes& b : out)
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return out;
}

std::vector<Views> Deal(const std::vector<Bytes>& lanes) {
  std::vector<Views> v;
  for (const Bytes& b : lanes) v.push_back(testing::DealViews(b));
  return v;
}

std::array<protocol::Rep3*, 3> Ptrs(::kmpc::testing::Rep3Cluster& cl) {
  return {cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()};
}

void ExpectMatchesClear(const Case& c, const char* what, std::array<protocol::Rep3*, 3> rep3) {
  for (size_t n : {3, 64, 100}) {
    const std::vector<Bytes> lanes = RandomLanes(n, c.p.inputs / 8, static_cast<uint32_t>(n));
    const std::vector<Bytes> want = testing::RunClear(c.p, lanes);
    for (bool malicious : {false, true}) {
      std::array<absl::Status, 3> st;
      const auto got = testing::RunMaskedAll(rep3, {&c.mp}, {Deal(lanes)}, malicious, &st);
      for (const auto& s : st) ASSERT_TRUE(s.ok()) << what << ": " << s;
      for (size_t l = 0; l < n; ++l)
        ASSERT_EQ(got[0][l], want[l]) << what << " lanes " << n << " lane " << l << " malicious " << malicious << " k " << c.fig.k;
    }
  }
}

TEST(Masked, Sha1CompressionMatchesTheClearEngine) {
  ::kmpc::testing::Rep3Cluster cl;
  for (int k : {2, 4, 6}) {
    const Case c = Make(testing::Sha1CompressionProgram(), k);
    ExpectMatchesClear(c, "SHA-1 compression", Ptrs(cl));
  }
}

TEST(Masked, Aes256BlockAndAdderMatchTheClearEngine) {
  ::kmpc::testing::Rep3Cluster cl;
  ExpectMatchesClear(Make(Aes256Block(), 6), "AES-256 block", Ptrs(cl));
  for (int k : {3, 6}) ExpectMatchesClear(Make(testing::AdderProgram(), k), "adder", Ptrs(cl));
}

// The messages of a run are the mask products' levels and the gate
// layers, no more: a SHA-1 compression at k = 6 in 3 + 244.
TEST(Masked, MessagesAreTheMappingsDepth) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  EXPECT_LE(c.mp.rounds, c.mp.prep_rounds + c.fig.depth);
  EXPECT_LE(c.mp.prep_rounds, 3);
  EXPECT_LE(c.mp.rounds, 247);
  EXPECT_LT(c.mp.rounds, c.p.depth / 2 + 10);
  EXPECT_EQ(c.mp.ands, c.fig.hybrid_products + c.fig.rep3_gates);
}

// Two programs of different depth and lanes in the same messages, checked
// in the run (every ~5,000 words) and at the end.
TEST(Masked, JobsShareMessages) {
  ::kmpc::testing::Rep3Cluster cl;
  const Case a = Make(testing::Sha1CompressionProgram(), 6), b = Make(testing::AdderProgram(), 4);
  const std::vector<Bytes> la = RandomLanes(70, a.p.inputs / 8, 1);
  const std::vector<Bytes> lb = RandomLanes(5, b.p.inputs / 8, 2);
  std::array<absl::Status, 3> st;
  const auto got = testing::RunMaskedAll(Ptrs(cl), {&a.mp, &b.mp}, {Deal(la), Deal(lb)}, true, &st, 5000);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got[0], testing::RunClear(a.p, la));
  EXPECT_EQ(got[1], testing::RunClear(b.p, lb));
}

class CheatCluster : public ::kmpc::testing::CheatRing {
 public:
  explicit CheatCluster(int cheater) : CheatRing(cheater, std::chrono::milliseconds(5000)) {}
  std::array<protocol::Rep3*, 3> rep3() { return {rep3_[0].get(), rep3_[1].get(), rep3_[2].get()}; }
};

// The byte offset in message r (1-based) of its first opened word, and of
// its first Rep3 gate's product: the layout EvaluateMaskedAll sends (one
// job: the mask products, the Rep3 gates, then the opened components).
size_t OpenAt(const MaskedProgram& p, size_t r, size_t wn) {
  const auto& rd = p.round[r];
  return 8 * wn * (rd.products.size() / 3 + rd.rep3.size() / 4);
}

// A party flips one bit of one mask product (message 1 or 2), one Rep3
// gate's product, or one opened component; an honest party's check fails.
TEST(Masked, AFlippedProductOrOpenedComponentIsCaught) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const std::vector<Bytes> lanes = RandomLanes(3, c.p.inputs / 8, 9);
  const std::vector<Views> in = Deal(lanes);
  size_t rep3_round = 0, open_round = 0;
  for (size_t r = c.mp.prep_rounds + 2; r < c.mp.round.size(); ++r) {
    if (rep3_round == 0 && !c.mp.round[r].rep3.empty()) rep3_round = r;
    if (open_round == 0 && !c.mp.round[r].opens.empty() && r > c.mp.round.size() / 2)
      open_round = r;
  }
  ASSERT_NE(rep3_round, 0u);
  ASSERT_NE(open_round, 0u);
  struct Flip {
    const char* what;
    size_t message, offset;
  };
  const std::vector<Flip> flips = {
      {"a pair's mask product", 1, 8 * 5},
      {"a wider mask product", 2, 8 * 3 + 1},
      {"a Rep3 gate's product", rep3_round,
       8 * (c.mp.round[rep3_round].products.size() / 3)},
      {"an opened component", open_round, OpenAt(c.mp, open_round, 1) + 8 * 2},
  };
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheatCluster cl(cheater);
    std::array<absl::Status, 3> st;
    const auto honest = testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(honest[0], testing::RunClear(c.p, lanes));
    for (const Flip& f : flips) {
      // Message m of a run is the cheater's m-th send from now (0-based).
      cl.cheat().Arm(f.message - 1, f.offset, 0x01);
      testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
      ASSERT_TRUE(cl.cheat().fired()) << f.what;
      cl.cheat().Disarm();
      int caught = 0;
      for (int i = 0; i < 3; ++i) caught += i != cheater && protocol::IsIntegrityFailure(st[i]);
      EXPECT_GE(caught, 1) << f.what << ", cheater " << cheater << ": " << st[0] << " / "
                           << st[1] << " / " << st[2];
    }
  }
}

// Without the check a flipped opened component goes through unnoticed
// (the outputs differ): the test above would fail without the log.
TEST(Masked, WithoutTheCheckAFlipChangesTheOutput) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const std::vector<Bytes> lanes = RandomLanes(3, c.p.inputs / 8, 9);
  CheatCluster cl(1);
  size_t r = c.mp.prep_rounds + 5;
  while (c.mp.round[r].opens.empty()) ++r;
  cl.cheat().Arm(r - 1, OpenAt(c.mp, r, 1), 0x01);
  std::array<absl::Status, 3> st;
  const auto got = testing::RunMaskedAll(cl.rep3(), {&c.mp}, {Deal(lanes)}, false, &st);
  ASSERT_TRUE(cl.cheat().fired());
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(got[0], testing::RunClear(c.p, lanes));
}

// Review of the packing and of the check's coverage past the live lanes.
// The cheater's send index of message r (1-based) of a run of one job: the
// rounds before it that send anything (a round with no AND and no opening
// sends nothing).
uint64_t SendOf(const MaskedProgram& p, size_t r) {
  uint64_t k = 0;
  for (size_t q = 1; q < r; ++q) {
    const auto& rd = p.round[q];
    k += !rd.products.empty() || !rd.rep3.empty() || !rd.opens.empty();
  }
  return k;
}

// Whether an honest party failed the check, and the outputs otherwise.
struct Outcome {
  int caught = 0;
  bool all_ok = true;
  std::vector<std::vector<Bytes>> got;
};

Outcome RunFlip(const MaskedProgram& mp, const std::vector<Views>& in, int cheater,
                uint64_t send, size_t offset, uint8_t mask) {
  CheatCluster cl(cheater);
  cl.cheat().Arm(send, offset, mask);
  std::array<absl::Status, 3> st;
  Outcome o;
  o.got = testing::RunMaskedAll(cl.rep3(), {&mp}, {in}, true, &st);
  EXPECT_TRUE(cl.cheat().fired());
  for (int i = 0; i < 3; ++i) {
    o.caught += i != cheater && protocol::IsIntegrityFailure(st[i]);
    o.all_ok = o.all_ok && st[i].ok();
  }
  return o;
}

// A one-word job of 3 live lanes sends 3 bits per gate, packed; the bits
// of the last packed word past them (no lane) are zero on every party. A
// cheater who sets such a bit in the products' or the openings' part is
// caught: the packed AND words are checked on all 64 bits (the pad's x, y
// and the XOR of its z are zero) and the packed opened words are hashed
// as received. The same for a job of 70 lanes (two words a wire, not
// packed): a flip in lane 63 of the second word (no task) is caught too.
TEST(Masked, FlipsPastTheLiveLanesAreCaught) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  for (size_t lanes : {size_t{3}, size_t{70}}) {
    const std::vector<Bytes> clear = RandomLanes(lanes, c.p.inputs / 8, 11);
    const std::vector<Views> in = Deal(clear);
    const std::vector<Bytes> want = testing::RunClear(c.p, clear);
    const size_t wn = testing::WordsFor(lanes);
    size_t r = c.mp.prep_rounds + 3;
    while (c.mp.round[r].opens.empty() || c.mp.round[r].rep3.empty()) ++r;
    const auto& rd = c.mp.round[r];
    const size_t ands = rd.products.size() / 3 + rd.rep3.size() / 4, opens = rd.opens.size();
    // Byte offsets of a bit past the live lanes in the ANDs' part and in
    // the openings' part of message r.
    size_t and_off, open_off;
    if (lanes < 64) {
      const size_t n = (ands * lanes + 63) / 64, m = (opens * lanes + 63) / 64;
      ASSERT_NE(ands * lanes % 64, 0u);
      ASSERT_NE(opens * lanes % 64, 0u);
      and_off = 8 * (n - 1) + 7;             // bit 63 of the last AND word
      open_off = 8 * (n + m - 1) + 7;        // bit 63 of the last opened word
    } else {
      and_off = 8 * 1 + 7;                   // gate 0's second word, lane 127
      open_off = 8 * (wn * ands + 1) + 7;    // opened gate 0's second word, lane 127
    }
    for (int cheater = 0; cheater < 3; ++cheater) {
      for (size_t off : {and_off, open_off}) {
        const Outcome o = RunFlip(c.mp, in, cheater, SendOf(c.mp, r), off, 0x80);
        EXPECT_GE(o.caught, 1) << "lanes " << lanes << " cheater " << cheater << " offset "
                               << off;
        if (o.all_ok) EXPECT_EQ(o.got[0], want) << "accepted and wrong";
      }
    }
  }
}

// No selective failure: which honest party fails an opened component's
// flip depends on what was sent, not on the data (two inputs, the same
// flip, the same verdicts).
TEST(Masked, AFlippedOpeningFailsTheSamePartiesWhateverTheData) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  size_t r = c.mp.round.size() / 2;
  while (c.mp.round[r].opens.empty()) ++r;
  for (int cheater = 0; cheater < 3; ++cheater) {
    std::array<std::array<bool, 3>, 2> failed{};
    for (uint32_t seed : {21u, 22u}) {
      const std::vector<Views> in = Deal(RandomLanes(3, c.p.inputs / 8, seed));
      CheatCluster cl(cheater);
      cl.cheat().Arm(SendOf(c.mp, r), OpenAt(c.mp, r, 1) + 1, 0x04);
      std::array<absl::Status, 3> st;
      testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
      ASSERT_TRUE(cl.cheat().fired());
      for (int i = 0; i < 3; ++i) failed[seed - 21][i] = protocol::IsIntegrityFailure(st[i]);
    }
    EXPECT_EQ(failed[0], failed[1]) << "cheater " << cheater;
    int honest_failed = 0;
    for (int i = 0; i < 3; ++i) honest_failed += i != cheater && failed[0][i];
    EXPECT_GE(honest_failed, 1) << "cheater " << cheater;
  }
}

}  // namespace
}  // namespace kmpc::cts
