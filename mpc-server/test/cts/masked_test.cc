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

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "../cheat.h"
#include "cheat_ring.h"
#include "cts/sha1.h"
#include "cts_testing.h"
#include "rep3_cluster.h"
#include "masked_testing.h"
#include "protocol/sha256.h"
#include "tap_channel.h"
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

// One lane (a lone request's: masked_eval.cc's one-lane walk), a few,
// a full word and more.
void ExpectMatchesClear(const Case& c, const char* what, std::array<protocol::Rep3*, 3> rep3) {
  for (size_t n : {1, 3, 64, 100}) {
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
  ExpectMatchesClear(Make(testing::Aes256BlockProgram(), 6), "AES-256 block", Ptrs(cl));
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

// A compiled program's lists hold no spare capacity: a server bounds its
// masked programs' memory by their sizes (cts_program_cache.cc).
TEST(Masked, ListsHoldNoSpareCapacity) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const MaskedProgram& p = c.mp;
  EXPECT_EQ(p.gates.capacity(), p.gates.size());
  EXPECT_EQ(p.terms.capacity(), p.terms.size());
  EXPECT_EQ(p.forms.capacity(), p.forms.size());
  EXPECT_EQ(p.gate_products.capacity(), p.gate_products.size());
  EXPECT_EQ(p.form_on.capacity(), p.form_on.size());
  EXPECT_EQ(p.form_on.size(), 64 * p.forms.size());
  EXPECT_EQ(p.leaves.capacity(), p.leaves.size());
  EXPECT_EQ(p.round.capacity(), p.round.size());
  size_t words = 0, spare = 0;
  for (const MaskedProgram::Round& r : p.round) {
    for (const std::vector<uint32_t>* v : {&r.draws, &r.lambda_xors, &r.products, &r.rep3,
                                           &r.opens, &r.local, &r.xors}) {
      words += v->size();
      spare += v->capacity() - v->size();
    }
  }
  EXPECT_GT(words, 10000u);
  EXPECT_EQ(spare, 0u);
}

// Programs of different depth and lanes in the same messages (a one-lane
// job's packed bits beside wider jobs' words), checked in the run (every
// ~5,000 words) and at the end.
TEST(Masked, JobsShareMessages) {
  ::kmpc::testing::Rep3Cluster cl;
  const Case a = Make(testing::Sha1CompressionProgram(), 6), b = Make(testing::AdderProgram(), 4);
  const std::vector<Bytes> la = RandomLanes(70, a.p.inputs / 8, 1);
  const std::vector<Bytes> lb = RandomLanes(5, b.p.inputs / 8, 2);
  const std::vector<Bytes> lc = RandomLanes(1, a.p.inputs / 8, 3);
  std::array<absl::Status, 3> st;
  const auto got = testing::RunMaskedAll(Ptrs(cl), {&a.mp, &b.mp, &a.mp},
                                         {Deal(la), Deal(lb), Deal(lc)}, true, &st, 5000);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got[0], testing::RunClear(a.p, la));
  EXPECT_EQ(got[1], testing::RunClear(b.p, lb));
  EXPECT_EQ(got[2], testing::RunClear(a.p, lc));
}

using CheatCluster = ::kmpc::testing::CheatRing;

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


// ---- Review 2026-11-29 (docs/reviews/2026-11-29-masked-gates.md) ----

// Three parties on the in-memory ring, the cheater's channel a TapChannel
// (its every message sent and received kept; one outgoing message shifted).
class TapCluster {
 public:
  explicit TapCluster(int cheater, std::vector<uint8_t> setup_shift = {}) {
    tap_ = std::make_unique<::kmpc::testing::TapChannel>(ring_.party(cheater));
    if (!setup_shift.empty()) tap_->Shift(0, std::move(setup_shift));  // Prss::Setup's k_i
    for (int i = 0; i < 3; ++i) ch_[i] = i == cheater ? tap_.get() : &ring_.party(i);
    ::kmpc::testing::SetUpParties(ch_, prss_, rep3_);
  }
  ::kmpc::testing::TapChannel& tap() { return *tap_; }
  std::array<protocol::Rep3*, 3> rep3() { return {rep3_[0].get(), rep3_[1].get(), rep3_[2].get()}; }

 private:
  net::InMemoryRing ring_{std::chrono::milliseconds(5000)};
  std::unique_ptr<::kmpc::testing::TapChannel> tap_;
  std::array<net::RingChannel*, 3> ch_{};
  std::array<std::optional<protocol::Prss>, 3> prss_;
  std::array<std::unique_ptr<protocol::Rep3>, 3> rep3_;
};

// A chain of four two-leaf AND gates, compiled by hand as CompileMasked
// lays a program out, on inputs x0 .. x3 (wires 0, 8, 16, 24: bit 0 of
// bytes 0 .. 3 of a 4-byte lane): g = x0 x1 (layer 1, message 2), h = g x2
// (message 3), k = h x3 (message 4), each opened (a later gate reads it),
// and out = k x0 (local, never opened; output wire 0). Each gate's pair
// product goes in the message before its own.
MaskedProgram AndChain() {
  MaskedProgram p;
  p.inputs = 32;
  p.outputs = 8;
  p.slots = 10;  // 0, 1 the constants, 2 .. 5 the inputs, 6 .. 9 the gates
  p.products = 4;
  p.prep_rounds = 1;
  p.rounds = 4;
  p.ands = 4;
  p.opened = 3;
  p.input_slot.assign(32, ~uint32_t{0});
  for (uint32_t i = 0; i < 4; ++i) p.input_slot[8 * i] = 2 + i;
  p.output_slot = {9, 0, 0, 0, 0, 0, 0, 0};
  const uint32_t root[4] = {6, 7, 8, 9};
  const uint32_t leaves[4][2] = {{2, 3}, {6, 4}, {7, 5}, {8, 2}};
  // One form: x_a x_b = m_a m_b ^ m_b lambda_a ^ m_a lambda_b ^ lambda_ab.
  MaskedProgram::Form f;
  f.need_r = 0xF;
  f.n = 2;
  f.terms = 4;
  f.products = 1;
  p.forms.push_back(f);
  p.terms = {{0b1000, 0}, {0b0100, 1}, {0b0010, 2}, {0b0001, 3}};
  for (uint32_t g = 0; g < 4; ++g) {
    MaskedProgram::Gate gt;
    gt.root = root[g];
    gt.leaf_at = 2 * g;
    gt.product_at = g;
    p.gates.push_back(gt);
    p.leaves.insert(p.leaves.end(), {leaves[g][0], leaves[g][1]});
    p.gate_products.push_back(g);
  }
  FillFormTable(p);
  p.round.resize(6);
  p.round[1].products = {0, 2, 3};
  for (uint32_t g = 0; g < 3; ++g) {
    MaskedProgram::Round& r = p.round[2 + g];
    r.draws = {root[g]};
    r.products = {g + 1, root[g], leaves[g + 1][1]};
    r.opens = {g};
  }
  p.round[5].local = {3};
  return p;
}

// SHA-256 of opened words in order, as the MulLog hashes them (one packed
// word a message for one lane and one opened gate): a Coin's
// acknowledgement (verify.cc).
std::array<uint8_t, 32> AckOf(const std::array<uint64_t, 3>& words) {
  protocol::Sha256 h;
  for (const uint64_t& w : words) h.Update(&w, 1);
  std::array<uint8_t, 32> out{};
  EXPECT_TRUE(h.Peek(out).ok());
  return out;
}

struct AckLeak {
  int trials = 0, caught = 0, learned = 0, released = 0;
};

// The cheater P flips its opened component of g (lane 0) to P-1 and runs
// the protocol honestly otherwise. P-1 opens g shifted and sends P+1 its
// component of h computed from it; P+1 opens h, then k, from those, so its
// view of k is, in P's terms (s_j: component j of a wire),
//   m_k(P+1) = m_k(P) ^ x2_P x3_{P+1} ^ (x2 ^ x2_{P+1}) x3_P,
// m_k(P) being P's own view; the check's first acknowledgement (verify.cc
// Coin) then sends P the hash of P+1's view before anyone compared
// anything. With x3_P = 1, P learns x2 (an input bit whose component
// x2_{P+2} it lacks) from the two candidate hashes. Counts, over `n` random
// lanes per cheater, how often P learned x2 and how often an honest party
// caught the flip.
AckLeak RunAckLeak(int n) {
  const MaskedProgram p = AndChain();
  std::mt19937 rng(0x61636b);
  AckLeak r;
  for (int cheater = 0; cheater < 3; ++cheater) {
    for (int t = 0; t < n; ++t) {
      std::array<Bytes, 3> s;  // components s_0, s_1, s_2 (bytes 0x00 or 0xFF)
      for (Bytes& c : s) {
        c.resize(4);
        for (uint8_t& b : c) b = (rng() & 1) ? 0xFF : 0x00;
      }
      s[cheater][3] = 0xFF;  // x3_P = 1: P chose its flip where that holds
      Views v;
      for (int i = 0; i < 3; ++i) v[i].comp = {s[i], s[(i + 1) % 3]};
      TapCluster cl(cheater);
      const size_t base = cl.tap().sent().size();  // after Prss::Setup
      // Message 2 (the cheater's second send): one packed AND word, then
      // the opened word; bit 0 of the latter is g's component, lane 0.
      cl.tap().Shift(base + 1, {0, 0, 0, 0, 0, 0, 0, 0, 0x01});
      std::array<absl::Status, 3> st;
      const auto got = testing::RunMaskedAll(cl.rep3(), {&p}, {{v}}, true, &st);
      ++r.trials;
      const int next = (cheater + 1) % 3;
      r.caught += protocol::IsIntegrityFailure(st[next]) ? 1 : 0;
      r.released += st[0].ok() && st[1].ok() && st[2].ok() ? 1 : 0;
      const auto& sent = cl.tap().sent();
      const auto& recv = cl.tap().received();
      if (sent.size() <= base + 4 || recv.size() <= base + 4 || recv[base + 4].size() != 32) {
        ADD_FAILURE() << "no acknowledgement after the run";
        continue;
      }
      // P's own view (m_g, m_h, m_k), from its own acknowledgement; where
      // the honest code P runs went silent itself (its successor's view
      // differed), every view P could hold.
      int own = -1;
      for (int w = 0; w < 8; ++w) {
        const auto a = AckOf({uint64_t(w & 1), uint64_t((w >> 1) & 1), uint64_t((w >> 2) & 1)});
        if (std::equal(a.begin(), a.end(), sent[base + 4].begin())) own = w;
      }
      const uint64_t x2p = s[cheater][2] & 1, x2n = s[next][2] & 1;
      const uint64_t x3p = s[cheater][3] & 1, x3n = s[next][3] & 1;
      const uint64_t x2 = (s[0][2] ^ s[1][2] ^ s[2][2]) & 1;  // the secret
      const auto is = [&](const std::array<uint8_t, 32>& a) {
        return std::equal(a.begin(), a.end(), recv[base + 4].begin());
      };
      bool learned = false;
      for (int w = own < 0 ? 0 : own; w < (own < 0 ? 8 : own + 1); ++w) {
        const uint64_t mg = w & 1, mh = (w >> 1) & 1, mk = (w >> 2) & 1;
        std::array<std::array<uint8_t, 32>, 2> cand;
        for (uint64_t guess : {0, 1})
          cand[guess] = AckOf({mg, mh ^ x2p, mk ^ (x2p & x3n) ^ ((guess ^ x2n) & x3p)});
        learned = learned || (is(cand[x2]) && !is(cand[x2 ^ 1]));
      }
      r.learned += learned ? 1 : 0;
      (void)got;
    }
  }
  return r;
}

// The flip itself is caught: P+1 (whose successor P-1 opened g shifted)
// fails the check, and the Run releases nothing.
TEST(Masked, AFlipTwoLayersBeforeTheCheckIsCaught) {
  const MaskedProgram p = AndChain();  // first, unshifted: the program is right
  for (int x = 0; x < 16; ++x) {
    Bytes lane(4);
    for (int i = 0; i < 4; ++i) lane[i] = ((x >> i) & 1) ? 0xFF : 0x00;
    TapCluster cl(0);
    std::array<absl::Status, 3> st;
    const auto got = testing::RunMaskedAll(cl.rep3(), {&p}, {{testing::DealViews(lane)}}, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(got[0][0].size(), 1u);
    EXPECT_EQ(got[0][0][0] != 0, x == 15) << "x " << x;
  }
  const AckLeak r = RunAckLeak(4);
  EXPECT_EQ(r.caught, r.trials);
  EXPECT_EQ(r.released, 0);
}

// The review's finding (2026-11-29): the hash of the opened values that
// the check's first acknowledgement sends is, at P+1, a function of a
// secret input bit and of what P knows, so without the per-message view
// (masked_run.h kViewWords) P learned that bit from every batch that
// then failed. With it P+1 sees P-1's shifted view one message after the
// shift and its acknowledgements start silent.
TEST(Masked, TheAcknowledgementAfterAShiftedOpeningTellsTheCheaterNothing) {
  const AckLeak r = RunAckLeak(8);
  EXPECT_EQ(r.caught, r.trials);
  EXPECT_EQ(r.learned, 0) << "the cheater learned x2 in " << r.learned << " of " << r.trials
                          << " aborted batches";
}

// A lone login's job (one live lane: masked_eval.cc Packing's one-lane
// path) with one bit flipped: the first pair's, 3-4 leaves' and 5-6
// leaves' mask product, a Rep3 gate's product, an opened
// component in the first and in the last gate layer that opens, and the
// pad past the lane in the last packed opened word. Each is caught by an
// honest party; a run that all accept is right.
TEST(Masked, OneLaneFlipsAreCaughtAtEveryLevel) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const std::vector<Bytes> clear = RandomLanes(1, c.p.inputs / 8, 31);
  const std::vector<Views> in = Deal(clear);
  const std::vector<Bytes> want = testing::RunClear(c.p, clear);
  const auto& rd = c.mp.round;
  auto and_words = [&](size_t r) { return (rd[r].products.size() / 3 + rd[r].rep3.size() / 4 + 63) / 64; };
  size_t first_open = 0, last_open = 0, rep3 = 0;
  for (size_t r = 1; r < rd.size(); ++r) {
    if (!rd[r].opens.empty()) {
      if (first_open == 0) first_open = r;
      last_open = r;
    }
    if (rep3 == 0 && !rd[r].rep3.empty()) rep3 = r;
  }
  ASSERT_NE(first_open, 0u);
  ASSERT_NE(rep3, 0u);
  ASSERT_NE(rd[last_open].opens.size() % 64, 0u);
  struct Flip {
    const char* what;
    size_t round, offset;
    uint8_t mask;
  };
  // The first product of each level (1: pairs, 2: 3-4 leaves, 3: 5-6),
  // its level from its operands' (slots are reused: a product slot's level
  // is its last writer's). One lane, packed: item q is bit q of the ANDs.
  std::vector<Flip> flips;
  const char* level_name[4] = {"", "a pair's product", "a 3-4 leaves' product",
                               "a 5-6 leaves' product"};
  std::vector<int> level(c.mp.products, 0);
  std::array<bool, 4> seen{};
  for (size_t r = 1; r < rd.size(); ++r) {
    std::vector<std::pair<uint32_t, int>> made;
    for (size_t k = 0; k < rd[r].products.size(); k += 3) {
      int l = 1;
      for (int i = 1; i < 3; ++i) {
        const uint32_t ref = rd[r].products[k + i];
        if (ref & MaskedProgram::kProductRef) l = std::max(l, level[ref & ~MaskedProgram::kProductRef] + 1);
      }
      made.push_back({rd[r].products[k], l});
      const size_t q = k / 3;
      if (l <= 3 && !seen[l]) {
        seen[l] = true;
        flips.push_back({level_name[l], r, q / 8, static_cast<uint8_t>(1u << (q % 8))});
      }
    }
    for (const auto& [slot, l] : made) level[slot] = l;
  }
  ASSERT_TRUE(seen[1] && seen[2] && seen[3]);
  // One lane, packed: item q is bit q of the ANDs; the Rep3 gates follow the
  // products.
  const size_t q = rd[rep3].products.size() / 3;
  flips.push_back({"a Rep3 gate's product", rep3, q / 8, static_cast<uint8_t>(1u << (q % 8))});
  flips.push_back({"the first opened layer", first_open, 8 * and_words(first_open), 0x01});
  flips.push_back({"the last opened layer", last_open, 8 * and_words(last_open), 0x01});
  const size_t last_word = (rd[last_open].opens.size() + 63) / 64 - 1;
  flips.push_back({"the pad past the lane", last_open,
                   8 * (and_words(last_open) + last_word) + 7, 0x80});
  for (int cheater = 0; cheater < 3; ++cheater) {
    for (const Flip& f : flips) {
      const Outcome o = RunFlip(c.mp, in, cheater, SendOf(c.mp, f.round), f.offset, f.mask);
      EXPECT_GE(o.caught, 1) << f.what << " (message " << f.round << "), cheater " << cheater;
      if (o.all_ok) EXPECT_EQ(o.got[0], want) << f.what << ": accepted and wrong";
    }
  }
}

// No selective failure for a flipped product either: a pair's mask product
// and a Rep3 gate's product, flipped alike over two inputs, fail the same
// honest parties (the check's verdict depends on what was sent, not on the
// data).
TEST(Masked, AFlippedProductFailsTheSamePartiesWhateverTheData) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  size_t rep3 = c.mp.prep_rounds + 1;
  while (c.mp.round[rep3].rep3.empty()) ++rep3;
  // 3 live lanes a word, packed: item q's lane 0 is bit 3 q of the ANDs.
  const size_t first_rep3 = 3 * (c.mp.round[rep3].products.size() / 3);
  size_t first = 1;  // the first message with a mask product
  while (c.mp.round[first].products.empty()) ++first;
  const std::vector<std::pair<size_t, size_t>> at = {{first, 0}, {rep3, first_rep3}};
  for (const auto& [r, bit] : at) {
    for (int cheater = 0; cheater < 3; ++cheater) {
      std::array<std::array<bool, 3>, 2> failed{};
      for (uint32_t seed : {41u, 42u}) {
        const std::vector<Views> in = Deal(RandomLanes(3, c.p.inputs / 8, seed));
        CheatCluster cl(cheater);
        cl.cheat().Arm(SendOf(c.mp, r), bit / 8, static_cast<uint8_t>(1u << (bit % 8)));
        std::array<absl::Status, 3> st;
        testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
        ASSERT_TRUE(cl.cheat().fired());
        for (int i = 0; i < 3; ++i) failed[seed - 41][i] = protocol::IsIntegrityFailure(st[i]);
      }
      EXPECT_EQ(failed[0], failed[1]) << "message " << r << ", cheater " << cheater;
      int honest = 0;
      for (int i = 0; i < 3; ++i) honest += i != cheater && failed[0][i];
      EXPECT_GE(honest, 1) << "message " << r << ", cheater " << cheater;
    }
  }
}

// Review of the per-message view (masked_run.h kViewWords), on a
// compiled SHA-1 program, one lane: P flips an opened component (or its
// view words) in message k0, at distances 0 .. 3 and more from the
// Run's check. What P receives from P+1 is never a hash of openings P
// cannot compute: P+1's views up to k0 + 1 are P's own (both hash the
// true openings), later ones and the whole check (bar 16-byte coin
// shares) are zeros.
TEST(Masked, AfterAShiftedOpeningTheSuccessorSendsOnlyViewsTheCheaterKnows) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const std::vector<Views> in = Deal(RandomLanes(1, c.p.inputs / 8, 61));
  const auto& rd = c.mp.round;
  const size_t msgs = SendOf(c.mp, rd.size());
  auto words = [&](size_t r, bool ands) {
    const size_t n = ands ? rd[r].products.size() / 3 + rd[r].rep3.size() / 4 : rd[r].opens.size();
    return (n + 63) / 64;  // one lane: packed
  };
  std::vector<size_t> at;  // rounds with openings: the last four, a middle one, the first
  for (size_t r = rd.size() - 1; r >= 1 && at.size() < 4; --r)
    if (!rd[r].opens.empty()) at.push_back(r);
  for (size_t from : {size_t{1}, rd.size() / 2}) {
    size_t r = from;
    while (rd[r].opens.empty()) ++r;
    at.push_back(r);
  }
  std::set<size_t> dists;
  auto in_chain = [](int seed) {
    Bytes lane(4);
    for (int i = 0; i < 4; ++i) lane[i] = ((seed + 5 * i) & 2) ? 0xFF : 0x00;
    return testing::DealViews(lane);
  };
  for (int cheater = 0; cheater < 3; ++cheater)
    for (size_t r : at)
      for (bool view : {false, true}) {
        const size_t k0 = SendOf(c.mp, r), len = 8 * (words(r, true) + words(r, false)) + 16;
        std::vector<uint8_t> delta(view ? len : 8 * words(r, true) + 1, 0);
        delta[view ? len - 16 : 8 * words(r, true)] = 0x01;
        TapCluster cl(cheater);
        const size_t base = cl.tap().sent().size();
        cl.tap().Shift(base + k0, delta);
        std::array<absl::Status, 3> st;
        testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
        const std::string what = "cheater " + std::to_string(cheater) + " message " +
                                 std::to_string(k0) + " of " + std::to_string(msgs) +
                                 (view ? " (view)" : "");
        EXPECT_TRUE(protocol::IsIntegrityFailure(st[(cheater + 1) % 3])) << what;
        const auto& sent = cl.tap().sent();
        const auto& recv = cl.tap().received();
        ASSERT_GT(recv.size(), base + msgs) << what;
        ASSERT_EQ(recv[base + k0].size(), len) << what;
        dists.insert(msgs - 1 - k0);
        for (size_t k = 0; k < msgs; ++k) {
          const auto& m = recv[base + k];
          const std::vector<uint8_t> v(m.end() - 16, m.end());
          std::vector<uint8_t> own(sent[base + k].end() - 16, sent[base + k].end());
          if (view && k == k0) own[0] ^= 0x01;  // the tap keeps what P sent
          if (k <= k0 + 1)
            EXPECT_EQ(v, own) << what << ", view in message " << k;
          else
            EXPECT_EQ(v, std::vector<uint8_t>(16, 0)) << what << ", view in message " << k;
        }
        if (k0 + 1 == msgs) {  // the check right after: P+1's hash of the true openings
          EXPECT_EQ(recv[base + msgs], sent[base + msgs]) << what;
          continue;
        }
        for (size_t k = base + msgs; k < recv.size(); ++k)
          if (recv[k].size() != 16)  // bar coin shares, all zeros
            EXPECT_EQ(recv[k], std::vector<uint8_t>(recv[k].size(), 0))
                << what << ", check message " << k - base - msgs;
      }
  EXPECT_TRUE(dists.count(1) && dists.count(2) && dists.count(3));
  // Distance 0 (the last message opens: the hand-built chain's k): P+1's
  // acknowledgement is P's own.
  const MaskedProgram p = AndChain();
  for (int cheater = 0; cheater < 3; ++cheater) {
    TapCluster cl(cheater);
    const size_t base = cl.tap().sent().size();
    cl.tap().Shift(base + 3, {0, 0, 0, 0, 0, 0, 0, 0, 0x01});
    std::array<absl::Status, 3> st;
    testing::RunMaskedAll(cl.rep3(), {&p}, {{in_chain(cheater)}}, true, &st);
    EXPECT_TRUE(protocol::IsIntegrityFailure(st[(cheater + 1) % 3])) << cheater;
    ASSERT_GT(cl.tap().received().size(), base + 4);
    EXPECT_EQ(cl.tap().received()[base + 4], cl.tap().sent()[base + 4]) << cheater;
  }
}

// A cheater whose PRSS key k_i, as its predecessor holds it, is not the
// one it uses (it sent another at Prss::Setup): every mask it draws,
// every zero-sharing and the check's coins are inconsistent with the
// honest copies. Caught; nothing released.
TEST(Masked, APartyWithAnotherKeyThanItsPredecessorsIsCaught) {
  const Case c = Make(testing::Sha1CompressionProgram(), 6);
  const std::vector<Bytes> clear = RandomLanes(1, c.p.inputs / 8, 51);
  const std::vector<Views> in = Deal(clear);
  for (int cheater = 0; cheater < 3; ++cheater) {
    TapCluster cl(cheater, {0x01});
    std::array<absl::Status, 3> st;
    testing::RunMaskedAll(cl.rep3(), {&c.mp}, {in}, true, &st);
    int caught = 0;
    for (int i = 0; i < 3; ++i) caught += i != cheater && protocol::IsIntegrityFailure(st[i]);
    EXPECT_GE(caught, 1) << "cheater " << cheater << ": " << st[0] << " / " << st[1] << " / "
                         << st[2];
  }
}

}  // namespace
}  // namespace kmpc::cts
