// A compiled circuit re-mapped into k-input gates over masked wires: the
// instrument of the round study (docs/design/cts-circuits.md, "Fewer
// rounds: gates of more inputs").
//
// Masked evaluation (ABY2.0, Patra, Schneider, Suresh, Yalame, USENIX
// Security 2021, section 3; the 3PC of BLAZE and SWIFT): a wire v that
// crosses a round is held as a public masked value m_v = v ^ lambda_v,
// lambda_v shared; XOR is local on both parts. A gate computing any
// function f of k such wires expands f's algebraic normal form:
//   f(x) = sum over monomials T of prod_{i in T} (m_i ^ lambda_i)
//        = sum over T, S within T of (prod_{i in T \ S} m_i) lambda_S,
// so each party holds a share of f(x) once it holds shares of every mask
// product lambda_S = prod_{i in S} lambda_i, |S| >= 2, S inside some
// monomial (the down-closure of the normal form). Those products do not
// depend on the data: Rep3 ANDs, all of a circuit's at once in
// ceil(log2 |S|) rounds. The gate's output is opened as m_out = f(x) ^
// lambda_out with a fresh lambda_out: one round whatever k. A circuit's
// online rounds are therefore its depth in k-input gates, XORs free; its
// cost is one opened bit per gate and one Rep3 AND per mask product.
//
// An input x enters with lambda_x = x (its shares) and m_x = 0, so no
// round opens it; products of inputs are then products of the inputs'
// shares, all held when the run starts.
//
// The mapping is depth-optimal over the circuit's own structure (cut
// enumeration with priority cuts: Cong and Ding, FlowMap, IEEE TCAD 1994;
// Mishchenko, Cho, Chatterjee, Brayton, ICCAD 2007), XORs free, then each
// gate's cut chosen for the fewest mask products within its required time.
#ifndef KMPC_CTS_LUT_MAP_H_
#define KMPC_CTS_LUT_MAP_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "cts/circuit.h"

namespace kmpc::cts {

// The gate graph a Program computes, recovered from its slot schedule:
// node 0 and 1 the constants, 2 .. 2 + inputs - 1 the inputs in order,
// then one node per XOR and AND in evaluation (topological) order.
struct Netlist {
  enum Op : uint8_t { kZero, kOne, kIn, kXor, kAnd };
  std::vector<Op> op;
  std::vector<uint32_t> a, b;     // operands (XOR, AND)
  std::vector<uint32_t> outputs;  // the node of each program output
  size_t inputs = 0;
};
Netlist NetlistOf(const Program& p);

inline constexpr int kMaxLutInputs = 6;  // a gate's table fits 64 bits

struct LutOptions {
  int k = 4;               // inputs per gate, 2 .. kMaxLutInputs
  int cuts_per_node = 8;   // priority cuts kept per node
  // The rounds the gates may take (0: the fewest this mapping finds): a
  // program that runs beside a deeper one in the same rounds (a login's
  // timestamp beside its reply) has that one's depth as slack, which the
  // cover spends on gates of fewer mask products.
  int depth_target = 0;
};

// One k-input gate: its root (an AND node), its leaves (opened wires,
// inputs, or XORs of them) and its function as a truth table over the
// leaves (bit j: leaf i takes bit i of j).
struct LutGate {
  uint32_t root = 0;
  std::vector<uint32_t> leaves;
  uint64_t table = 0;
  int layer = 0;  // online round that opens it (1 = first)
  // Two leaves and no masked gate reads it (through XORs): it can run as a
  // plain Rep3 AND on the leaves' shares (a masked wire's shares are its
  // m in one component XOR its lambda), one bit and no mask product, its
  // output shared, never opened.
  bool rep3 = false;
};

struct LutFigures {
  int k = 0;
  int depth = 0;          // online rounds: layers of gates
  int prep_depth = 0;     // rounds of the mask products
  size_t gates = 0;       // opened bits per lane
  size_t products = 0;    // distinct mask products (Rep3 ANDs) per lane
  std::array<size_t, kMaxLutInputs + 1> products_by_size{};
  // Gates left as Rep3 ANDs, and the mask products the others need: the
  // hybrid sends gates + hybrid_products bits per lane.
  size_t rep3_gates = 0;
  size_t hybrid_products = 0;
  size_t ands = 0;        // the source circuit's ANDs, for comparison
  int and_depth = 0;      // and its AND depth
};

struct LutMap {
  Netlist net;
  std::vector<LutGate> gates;
  LutFigures fig;
};

LutMap MapLuts(const Program& p, const LutOptions& o);

// The cuts the cover chooses among (for tests): each XOR's and AND's
// priority cuts as enumerated, trivial cuts left out. Tables are over the
// leaves (leaf i = variable i), masked to the leaf count.
struct LutCut {
  uint32_t root = 0;
  std::vector<uint32_t> leaves;
  uint64_t merged_table = 0;  // built up the merges from the operands' cuts
  // True when no leaf may lie among the nodes the merges computed through
  // (by a one-bit-per-node signature): merged_table is then the cone's
  // function, and the cover prices it; otherwise it walks the cone.
  bool carried = false;
  uint64_t table = 0;  // what the cover prices: the root's function
};
std::vector<LutCut> EnumerateCuts(const Netlist& net, const LutOptions& o);

// The mask products a gate needs: every S (as a bit set over its leaves)
// with |S| >= 2 inside some monomial of the table's normal form over n
// leaves.
std::vector<uint32_t> MaskProducts(uint64_t table, int n);

// The mapped circuit evaluated as the protocol would, in the clear on one
// 64-lane word per input (lane l at bit l): masks drawn from seed, every
// gate's share computed from the mask products its normal form names (and
// no other), opened, XORed on. Returns one word per program output.
std::vector<uint64_t> EvaluateMasked(const LutMap& m, absl::Span<const uint64_t> in,
                                     uint64_t seed);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_LUT_MAP_H_
