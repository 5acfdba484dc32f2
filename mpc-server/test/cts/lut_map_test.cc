// Circuits re-mapped into k-input gates over masked wires (cts/lut_map.h):
// the mask products of known functions, the recovered gate graph against
// the program, and every mapping evaluated as the protocol would (masks,
// products, openings) against the clear engine on random lanes, for the
// 32-bit adder, a SHA-1 compression and an AES-256 block.
#include "cts/lut_map.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "cts/aes_circuit.h"
#include "cts/sha1.h"

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

TEST(LutMap, AdderMapsExactly) {
  Circuit c;
  Word a, b;
  for (auto& w : a) w = c.Input();
  for (auto& w : b) w = c.Input();
  const Word s = AddWords(c, a, b);
  c.Output(Bits(s.begin(), s.end()));
  ExpectMapsExactly(c.Compile(), "32-bit adder");
}

TEST(LutMap, Sha1CompressionMapsExactly) {
  Circuit c;
  const Sha1State h = StateFromBytes(c.Inputs(160));
  const Sha1State out = Sha1Compress(c, h, c.Inputs(512));
  Bits bits;
  for (const Word& w : out) AppendBigEndian(w, bits);
  c.Output(bits);
  ExpectMapsExactly(c.Compile(), "SHA-1 compression");
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
