// Circuits re-mapped into k-input gates over masked wires (cts/lut_map.h):
// the mask products of known functions and against a direct count over
// the normal form, the cuts' tables against their cones walked node by
// node, the recovered gate graph against the program, and every mapping
// evaluated as the protocol would (masks, products, openings) against the
// clear engine on random lanes, for the 32-bit adder, a SHA-1 compression
// and an AES-256 block.
#include "cts/lut_map.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "absl/container/flat_hash_map.h"

#include "cts/aes_circuit.h"
#include "cts/sha1.h"
#include "sha1_programs.h"

namespace kmpc::cts {
namespace {

// Truth tables over 3 variables (bit j: variable i = bit i of j).
constexpr uint64_t kA = 0xAA, kB = 0xCC, kC = 0xF0;

TEST(MaskProducts, OfKnownFunctions) {
  EXPECT_EQ(MaskProducts(kA & kB & 0xF, 2), (std::vector<uint32_t>{0b11}));
  EXPECT_TRUE(MaskProducts((kA ^ kB) & 0xF, 2).empty());  // XOR: none
  // AND3 needs every pair and the triple.
  EXPECT_EQ(MaskProducts(kA & kB & kC, 3),
            (std::vector<uint32_t>{0b011, 0b101, 0b110, 0b111}));
  // Majority = ab ^ ac ^ bc: the pairs, not the triple.
  EXPECT_EQ(MaskProducts((kA & kB) ^ (kA & kC) ^ (kB & kC), 3),
            (std::vector<uint32_t>{0b011, 0b101, 0b110}));
  // a ^ (b & c): only bc.
  EXPECT_EQ(MaskProducts(kA ^ (kB & kC), 3), (std::vector<uint32_t>{0b110}));
}

// The mask products straight from the definition: the normal form's
// coefficients one entry at a time, then every S of two or more variables
// inside a monomial.
std::vector<uint32_t> ReferenceProducts(uint64_t table, int n) {
  const uint64_t mask = n >= 6 ? ~uint64_t{0} : (uint64_t{1} << (1u << n)) - 1;
  uint64_t anf = table & mask;
  for (int i = 0; i < n; ++i) {
    for (uint32_t t = 0; t < (1u << n); ++t)
      if ((t >> i) & 1) anf ^= ((anf >> (t ^ (1u << i))) & 1) << t;
  }
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < (1u << n); ++s) {
    if (__builtin_popcount(s) < 2) continue;
    for (uint32_t t = 0; t < (1u << n); ++t) {
      if ((t & s) == s && ((anf >> t) & 1)) {
        out.push_back(s);
        break;
      }
    }
  }
  return out;
}

TEST(MaskProducts, EqualTheDefinitionOnEveryTableOfFourAndRandomWider) {
  for (int n = 0; n <= 4; ++n) {
    for (uint64_t t = 0; t < (uint64_t{1} << (1u << n)); ++t)
      ASSERT_EQ(MaskProducts(t, n), ReferenceProducts(t, n)) << "n=" << n << " t=" << t;
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    uint64_t t = rng();
    if (i % 2) t &= rng() & rng();  // sparser normal forms too
    for (int n = 4; n <= kMaxLutInputs; ++n)
      ASSERT_EQ(MaskProducts(t, n), ReferenceProducts(t, n)) << "n=" << n << " t=" << t;
  }
}

// The cone's function over the leaves, walked from the root down and
// stopped at the leaves (leaf i = variable i), one node at a time.
uint64_t ConeFunction(const Netlist& net, uint32_t root, const std::vector<uint32_t>& leaves) {
  constexpr uint64_t kVar[kMaxLutInputs] = {
      0xAAAAAAAAAAAAAAAAull, 0xCCCCCCCCCCCCCCCCull, 0xF0F0F0F0F0F0F0F0ull,
      0xFF00FF00FF00FF00ull, 0xFFFF0000FFFF0000ull, 0xFFFFFFFF00000000ull};
  absl::flat_hash_map<uint32_t, uint64_t> tt = {{0, 0}, {1, ~uint64_t{0}}};
  for (size_t i = 0; i < leaves.size(); ++i) tt[leaves[i]] = kVar[i];
  std::vector<uint32_t> stack{root};
  while (!stack.empty()) {
    const uint32_t v = stack.back();
    if (tt.contains(v)) {
      stack.pop_back();
      continue;
    }
    const uint32_t a = net.a[v], b = net.b[v];
    if (net.op[v] == Netlist::kIn) {
      ADD_FAILURE() << "input " << v << " under root " << root << " is not a leaf";
      return 0;
    }
    if (!tt.contains(a) || !tt.contains(b)) {
      if (!tt.contains(a)) stack.push_back(a);
      if (!tt.contains(b)) stack.push_back(b);
      continue;
    }
    tt[v] = net.op[v] == Netlist::kXor ? tt[a] ^ tt[b] : tt[a] & tt[b];
    stack.pop_back();
  }
  const size_t n = leaves.size();
  return tt[root] & (n >= 6 ? ~uint64_t{0} : (uint64_t{1} << (1u << n)) - 1);
}

std::vector<uint64_t> RandomWords(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> w(n);
  for (auto& x : w) x = rng();
  return w;
}

std::vector<uint64_t> Clear(const Program& p, const std::vector<uint64_t>& in) {
  std::vector<uint64_t> out(p.outputs);
  ClearEngine e;
  EXPECT_TRUE(Evaluate(p, e, 1, {absl::MakeConstSpan(in), {}}, {absl::MakeSpan(out), {}}).ok());
  return out;
}

// Each k: the mapping evaluated with masks equals the program; its depth
// is at most the program's AND depth.
void ExpectMapsExactly(const Program& p, const char* what) {
  const std::vector<uint64_t> in = RandomWords(p.inputs, 7);
  const std::vector<uint64_t> want = Clear(p, in);
  for (int k = 2; k <= kMaxLutInputs; ++k) {
    const LutMap m = MapLuts(p, LutOptions{k});
    EXPECT_EQ(EvaluateMasked(m, in, 100 + k), want) << what << " k=" << k;
    EXPECT_LE(m.fig.depth, p.depth) << what << " k=" << k;
    if (k == 2) {  // every gate a Rep3 AND: the hybrid is today's circuit
      EXPECT_EQ(m.fig.rep3_gates, m.fig.gates) << what;
      EXPECT_EQ(m.fig.hybrid_products, 0u) << what;
    }
    EXPECT_LE(m.fig.hybrid_products, m.fig.products) << what << " k=" << k;
    std::printf("%s k=%d: %d rounds online (+%d mask-product), %zu gates, %zu products "
                "(source: %zu ANDs, %d rounds)\n",
                what, k, m.fig.depth, m.fig.prep_depth, m.fig.gates, m.fig.products,
                m.fig.ands, m.fig.and_depth);
  }
}

using testing::AdderProgram;
using testing::Sha1CompressionProgram;

// The table the cover prices is the cone's function for random cuts of a
// SHA-1 compression at k = 4 and 6, and so is the merged one wherever the
// signature lets the cover use it (most cuts).
TEST(LutMap, CutTablesAreTheConesFunctions) {
  const Netlist net = NetlistOf(Sha1CompressionProgram());
  std::mt19937_64 rng(5);
  for (int k : {4, 6}) {
    const std::vector<LutCut> cuts = EnumerateCuts(net, LutOptions{k});
    size_t carried = 0, checked = 0;
    for (const LutCut& c : cuts) carried += c.carried;
    for (size_t i = 0; i < cuts.size(); ++i) {
      if (rng() % 16 != 0) continue;
      const LutCut& c = cuts[i];
      const uint64_t want = ConeFunction(net, c.root, c.leaves);
      ASSERT_EQ(c.table, want) << "k=" << k << " root " << c.root;
      if (c.carried) {
        ASSERT_EQ(c.merged_table, want) << "k=" << k << " root " << c.root;
      }
      ++checked;
    }
    EXPECT_GT(checked, 1000u);
    EXPECT_GT(carried * 2, cuts.size()) << "k=" << k;
    std::printf("k=%d: %zu cuts, %zu carried, %zu checked\n", k, cuts.size(), carried, checked);
  }
}

// More priority cuts per node: operand cut lists with more than 64
// distinct leaves (bit sets of a run-time width), tables and mapping exact.
TEST(LutMap, MoreCutsPerNodeMapExactly) {
  const Program p = Sha1CompressionProgram();
  const Netlist net = NetlistOf(p);
  const LutOptions o{6, 24};
  std::mt19937_64 rng(9);
  for (const LutCut& c : EnumerateCuts(net, o)) {
    if (rng() % 64 != 0) continue;
    ASSERT_EQ(c.table, ConeFunction(net, c.root, c.leaves)) << "root " << c.root;
  }
  const std::vector<uint64_t> in = RandomWords(p.inputs, 8);
  const LutMap m = MapLuts(p, o);
  EXPECT_EQ(EvaluateMasked(m, in, 12), Clear(p, in));
  EXPECT_LE(m.fig.depth, 244);  // no deeper than with 8 cuts a node
}

// A leaf inside the cone the merges computed through: u = p & q is a leaf
// of the cut {p, q, u, w, z} of v = (u & w) & (u ^ z), merged first from
// {p, q, w} under u & w, which computes through u, and {u, z} under u ^ z.
// The merged table (p & q & w & (u ^ z)) is not the cone's (u & w & ~z):
// the cover walks the cone.
TEST(LutMap, ALeafInsideTheMergedConeIsWalked) {
  Circuit c;
  const Bits x = c.Inputs(4);  // p q w z
  const Wire u = c.And(x[0], x[1]);
  c.Output(c.And(c.And(u, x[2]), c.Xor(u, x[3])));
  const Netlist net = NetlistOf(c.Compile());
  const uint32_t v = net.outputs[0];
  bool found = false;
  for (const LutCut& cut : EnumerateCuts(net, LutOptions{5})) {
    if (cut.root != v || cut.leaves.size() != 5) continue;
    found = true;
    EXPECT_FALSE(cut.carried);
    EXPECT_NE(cut.merged_table, cut.table);
    EXPECT_EQ(cut.table, ConeFunction(net, v, cut.leaves));
  }
  EXPECT_TRUE(found);
}

TEST(LutMap, NetlistHasTheProgramsGates) {
  Circuit c;
  const Bits x = c.Inputs(3);
  c.Output(c.Xor(c.And(x[0], x[1]), c.Not(x[2])));
  const Netlist net = NetlistOf(c.Compile());
  ASSERT_EQ(net.outputs.size(), 1u);
  const uint32_t out = net.outputs[0];
  EXPECT_EQ(net.op[out], Netlist::kXor);
  size_t ands = 0;
  for (auto op : net.op) ands += op == Netlist::kAnd;
  EXPECT_EQ(ands, 1u);
}

TEST(LutMap, AdderMapsExactly) { ExpectMapsExactly(AdderProgram(), "32-bit adder"); }

TEST(LutMap, Sha1CompressionMapsExactly) {
  ExpectMapsExactly(Sha1CompressionProgram(), "SHA-1 compression");
}

TEST(LutMap, Aes256BlockMapsExactly) {
  Circuit c;
  RoundKeys k;
  k.nr = 14;
  k.bits = c.Inputs(128 * 15);
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  ExpectMapsExactly(c.Compile(), "AES-256 block");
}

// A wrong table (a product the count leaves out) is caught by the masked
// evaluation: the instrument can fail.
TEST(LutMap, AWrongTableIsCaught) {
  Circuit c;
  const Bits x = c.Inputs(3);
  c.Output(c.And(c.And(x[0], x[1]), x[2]));
  const Program p = c.Compile();
  LutMap m = MapLuts(p, LutOptions{3});
  ASSERT_EQ(m.gates.size(), 1u);
  const std::vector<uint64_t> in = RandomWords(3, 1);
  EXPECT_EQ(EvaluateMasked(m, in, 2), Clear(p, in));
  m.gates[0].table ^= 0x80;  // no longer AND3
  EXPECT_NE(EvaluateMasked(m, in, 2), Clear(p, in));
}

// A two-leaf gate that a wider gate reads is masked (its value is opened);
// one that only an output reads stays a Rep3 AND. At k = 3 the top gate
// reads a and b directly (2 rounds, where (a & b) first would take 3).
TEST(LutMap, Rep3OnlyWhereNoMaskedGateReads) {
  Circuit c;
  const Bits x = c.Inputs(5);
  const Wire a = c.And(x[0], x[1]), b = c.And(x[2], x[3]);
  c.Output(c.And(c.And(a, b), x[4]));
  c.Output(c.And(x[0], x[4]));
  const Program p = c.Compile();
  const LutMap m = MapLuts(p, LutOptions{3});
  EXPECT_EQ(m.fig.depth, 2);
  ASSERT_EQ(m.gates.size(), 4u);
  size_t wide = 0;
  for (const LutGate& g : m.gates) {
    if (g.leaves.size() != 3) continue;
    ++wide;
    EXPECT_FALSE(g.rep3);
  }
  EXPECT_EQ(wide, 1u);
  EXPECT_EQ(m.fig.rep3_gates, 1u);  // the lone AND; a and b are opened
  const std::vector<uint64_t> in = RandomWords(5, 3);
  EXPECT_EQ(EvaluateMasked(m, in, 4), Clear(p, in));
}

}  // namespace
}  // namespace kmpc::cts
