#include "cts/lut_map.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace kmpc::cts {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr int kFar = std::numeric_limits<int>::max() / 2;

// Variable i's column of a truth table over 6 variables.
constexpr uint64_t kVar[kMaxLutInputs] = {
    0xAAAAAAAAAAAAAAAAull, 0xCCCCCCCCCCCCCCCCull, 0xF0F0F0F0F0F0F0F0ull,
    0xFF00FF00FF00FF00ull, 0xFFFF0000FFFF0000ull, 0xFFFFFFFF00000000ull};

uint64_t TableMask(int n) { return n >= 6 ? ~uint64_t{0} : (uint64_t{1} << (1u << n)) - 1; }

struct Cut {
  std::array<uint32_t, kMaxLutInputs> leaf;
  uint8_t n = 0;
  int arrival = 0;  // the latest leaf's availability
};

bool operator==(const Cut& x, const Cut& y) {
  return x.n == y.n && std::equal(x.leaf.begin(), x.leaf.begin() + x.n, y.leaf.begin());
}

// Sorted union of two cuts; false when it exceeds k leaves.
bool Merge(const Cut& x, const Cut& y, int k, Cut* out) {
  int i = 0, j = 0, n = 0;
  while (i < x.n || j < y.n) {
    uint32_t v;
    if (j >= y.n || (i < x.n && x.leaf[i] < y.leaf[j])) {
      v = x.leaf[i++];
    } else if (i >= x.n || y.leaf[j] < x.leaf[i]) {
      v = y.leaf[j++];
    } else {
      v = x.leaf[i++];
      ++j;
    }
    if (n == k) return false;
    out->leaf[n++] = v;
  }
  out->n = static_cast<uint8_t>(n);
  return true;
}

class Mapper {
 public:
  Mapper(const Netlist& net, const LutOptions& o) : net_(net), o_(o) {}
  void Label();
  void Cover(LutMap& m);

 private:
  Cut Trivial(uint32_t v) const;
  std::vector<Cut> Candidates(uint32_t v) const;
  uint64_t Table(uint32_t root, const Cut& c) const;
  size_t Cost(uint32_t root, const Cut& c) const;

  const Netlist& net_;
  LutOptions o_;
  std::vector<int> label_;
  std::vector<std::vector<Cut>> cuts_;  // per node: priority cuts, then the trivial one
};

Cut Mapper::Trivial(uint32_t v) const {
  Cut c;
  if (net_.op[v] != Netlist::kZero && net_.op[v] != Netlist::kOne) {
    c.leaf[0] = v;
    c.n = 1;
  }
  c.arrival = label_[v];
  return c;
}

std::vector<Cut> Mapper::Candidates(uint32_t v) const {
  std::vector<Cut> out;
  for (const Cut& x : cuts_[net_.a[v]]) {
    for (const Cut& y : cuts_[net_.b[v]]) {
      Cut c;
      if (!Merge(x, y, o_.k, &c)) continue;
      c.arrival = 0;
      for (int i = 0; i < c.n; ++i) c.arrival = std::max(c.arrival, label_[c.leaf[i]]);
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  }
  std::sort(out.begin(), out.end(), [](const Cut& x, const Cut& y) {
    return x.arrival != y.arrival ? x.arrival < y.arrival : x.n < y.n;
  });
  // The cut of the node's own operands stays whatever its depth: the
  // cheapest gate, which the cover takes where the node has slack.
  Cut fanin;  // the operands' trivial cuts are their lists' last
  const bool has_fanin =
      Merge(cuts_[net_.a[v]].back(), cuts_[net_.b[v]].back(), o_.k, &fanin);
  if (out.size() > static_cast<size_t>(o_.cuts_per_node)) out.resize(o_.cuts_per_node);
  if (has_fanin) {
    fanin.arrival = std::max(label_[net_.a[v]], label_[net_.b[v]]);
    if (std::find(out.begin(), out.end(), fanin) == out.end()) out.push_back(fanin);
  }
  return out;
}

// Labels: the round in which each node's masked value is available (AND:
// the best cut's latest leaf + 1; XOR: free).
void Mapper::Label() {
  const size_t n = net_.op.size();
  label_.assign(n, 0);
  cuts_.assign(n, {});
  for (uint32_t v = 0; v < n; ++v) {
    const Netlist::Op op = net_.op[v];
    if (op == Netlist::kXor || op == Netlist::kAnd) {
      cuts_[v] = Candidates(v);
      label_[v] = op == Netlist::kXor
                      ? std::max(label_[net_.a[v]], label_[net_.b[v]])
                      : 1 + cuts_[v].front().arrival;
    }
    cuts_[v].push_back(Trivial(v));
  }
}

// The cone's function over the cut's leaves (leaf i = variable i).
uint64_t Mapper::Table(uint32_t root, const Cut& c) const {
  absl::flat_hash_map<uint32_t, uint64_t> tt;
  tt[0] = 0;
  tt[1] = ~uint64_t{0};
  for (int i = 0; i < c.n; ++i) tt[c.leaf[i]] = kVar[i];
  std::vector<uint32_t> stack{root};
  while (!stack.empty()) {
    const uint32_t v = stack.back();
    if (tt.contains(v)) {
      stack.pop_back();
      continue;
    }
    const uint32_t a = net_.a[v], b = net_.b[v];
    const bool ready = tt.contains(a) && tt.contains(b);
    if (!ready) {
      if (net_.op[v] == Netlist::kIn) return 0;  // not a cut of root: cannot happen
      if (!tt.contains(a)) stack.push_back(a);
      if (!tt.contains(b)) stack.push_back(b);
      continue;
    }
    tt[v] = net_.op[v] == Netlist::kXor ? tt[a] ^ tt[b] : tt[a] & tt[b];
    stack.pop_back();
  }
  return tt[root] & TableMask(c.n);
}

size_t Mapper::Cost(uint32_t root, const Cut& c) const {
  return 1 + MaskProducts(Table(root, c), c.n).size();
}

// Required times from the outputs back; each needed AND takes, among its
// cuts that meet its required time, the one with the fewest mask products.
void Mapper::Cover(LutMap& m) {
  const size_t n = net_.op.size();
  int depth = 0;
  for (uint32_t v : net_.outputs) depth = std::max(depth, label_[v]);
  depth = std::max(depth, o_.depth_target);
  std::vector<int> req(n, kFar);
  for (uint32_t v : net_.outputs) req[v] = depth;
  for (uint32_t v = static_cast<uint32_t>(n); v-- > 2;) {
    if (req[v] == kFar) continue;
    if (net_.op[v] == Netlist::kXor) {
      req[net_.a[v]] = std::min(req[net_.a[v]], req[v]);
      req[net_.b[v]] = std::min(req[net_.b[v]], req[v]);
    }
    if (net_.op[v] != Netlist::kAnd) continue;
    const Cut* best = nullptr;
    size_t best_cost = 0;
    for (const Cut& c : cuts_[v]) {
      if (c.n == 1 && c.leaf[0] == v) continue;  // the trivial cut
      if (c.arrival + 1 > req[v]) continue;
      const size_t cost = Cost(v, c);
      if (best == nullptr || cost < best_cost) best = &c, best_cost = cost;
    }
    LutGate g;
    g.root = v;
    g.leaves.assign(best->leaf.begin(), best->leaf.begin() + best->n);
    g.table = Table(v, *best);
    for (uint32_t l : g.leaves) req[l] = std::min(req[l], req[v] - 1);
    m.gates.push_back(std::move(g));
  }
  std::reverse(m.gates.begin(), m.gates.end());
}

// Layers as scheduled: a gate opens one round after its latest leaf.
void Schedule(LutMap& m) {
  const Netlist& net = m.net;
  std::vector<int> avail(net.op.size(), 0);
  absl::flat_hash_map<uint32_t, size_t> gate_of;
  for (size_t i = 0; i < m.gates.size(); ++i) gate_of[m.gates[i].root] = i;
  for (uint32_t v = 2; v < net.op.size(); ++v) {
    if (net.op[v] == Netlist::kXor) avail[v] = std::max(avail[net.a[v]], avail[net.b[v]]);
    if (net.op[v] != Netlist::kAnd) continue;
    auto it = gate_of.find(v);
    if (it == gate_of.end()) continue;
    LutGate& g = m.gates[it->second];
    for (uint32_t l : g.leaves) g.layer = std::max(g.layer, avail[l]);
    avail[v] = ++g.layer;
    m.fig.depth = std::max(m.fig.depth, g.layer);
  }
}

// Readers come after what they read (gates in root order): a gate is Rep3
// when no masked gate has marked it; a masked gate marks its leaves and
// the gates under them through XORs.
void MarkRep3(LutMap& m) {
  const Netlist& net = m.net;
  std::vector<bool> read_masked(net.op.size(), false);
  std::vector<uint32_t> stack;
  for (size_t i = m.gates.size(); i-- > 0;) {
    LutGate& g = m.gates[i];
    g.rep3 = g.leaves.size() <= 2 && !read_masked[g.root];
    if (g.rep3) continue;
    stack.assign(g.leaves.begin(), g.leaves.end());
    while (!stack.empty()) {
      const uint32_t v = stack.back();
      stack.pop_back();
      if (read_masked[v]) continue;
      read_masked[v] = true;
      if (net.op[v] == Netlist::kXor) stack.insert(stack.end(), {net.a[v], net.b[v]});
    }
  }
}

void Count(LutMap& m) {
  MarkRep3(m);
  absl::flat_hash_set<std::array<uint32_t, kMaxLutInputs>> seen, hybrid;
  size_t largest = 1;
  for (const LutGate& g : m.gates) {
    m.fig.rep3_gates += g.rep3;
    for (uint32_t s : MaskProducts(g.table, static_cast<int>(g.leaves.size()))) {
      std::array<uint32_t, kMaxLutInputs> key;
      key.fill(kNone);
      int n = 0;
      for (size_t i = 0; i < g.leaves.size(); ++i)
        if ((s >> i) & 1) key[n++] = g.leaves[i];
      if (seen.insert(key).second) ++m.fig.products_by_size[n];
      if (!g.rep3) hybrid.insert(key);
      largest = std::max(largest, static_cast<size_t>(n));
    }
  }
  m.fig.products = seen.size();
  m.fig.hybrid_products = hybrid.size();
  m.fig.gates = m.gates.size();
  while ((size_t{1} << m.fig.prep_depth) < largest) ++m.fig.prep_depth;
}

}  // namespace

Netlist NetlistOf(const Program& p) {
  Netlist net;
  net.inputs = p.inputs;
  net.op = {Netlist::kZero, Netlist::kOne};
  net.a.assign(2, 0);
  net.b.assign(2, 0);
  std::vector<uint32_t> node(p.slots, kNone);
  node[0] = 0;
  node[1] = 1;
  auto add = [&](Netlist::Op op, uint32_t a, uint32_t b) {
    net.op.push_back(op);
    net.a.push_back(a);
    net.b.push_back(b);
    return static_cast<uint32_t>(net.op.size() - 1);
  };
  for (size_t i = 0; i < p.inputs; ++i) {
    const uint32_t v = add(Netlist::kIn, static_cast<uint32_t>(i), 0);
    if (p.input_slot[i] != kNone) node[p.input_slot[i]] = v;
  }
  std::vector<std::array<uint32_t, 3>> layer;
  for (const Program::Layer& l : p.layers) {
    layer.clear();
    for (size_t i = 0; i < l.ands.size(); i += 3)  // all read before any is written
      layer.push_back({l.ands[i], node[l.ands[i + 1]], node[l.ands[i + 2]]});
    for (const auto& [dst, a, b] : layer) node[dst] = add(Netlist::kAnd, a, b);
    for (size_t i = 0; i < l.xors.size(); i += 3)
      node[l.xors[i]] = add(Netlist::kXor, node[l.xors[i + 1]], node[l.xors[i + 2]]);
  }
  for (uint32_t s : p.output_slot) net.outputs.push_back(node[s]);
  return net;
}

std::vector<uint32_t> MaskProducts(uint64_t table, int n) {
  // Moebius transform: the normal form's coefficient of monomial T at bit T.
  uint64_t anf = table & TableMask(n);
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

LutMap MapLuts(const Program& p, const LutOptions& o) {
  LutMap m;
  m.net = NetlistOf(p);
  m.fig.k = o.k;
  m.fig.ands = p.ands;
  m.fig.and_depth = p.depth;
  Mapper mapper(m.net, o);
  mapper.Label();
  mapper.Cover(m);
  Schedule(m);
  Count(m);
  return m;
}

namespace {

// A gate's share of f(x) from the opened m's and the products lambda_S,
// as each party computes it (here all three at once, in the clear).
uint64_t GateValue(const LutGate& g, const std::vector<uint64_t>& mv,
                   const std::vector<uint64_t>& lam) {
  const int n = static_cast<int>(g.leaves.size());
  const std::vector<uint32_t> allowed = MaskProducts(g.table, n);
  uint64_t anf = g.table & TableMask(n);
  for (int i = 0; i < n; ++i) {
    for (uint32_t t = 0; t < (1u << n); ++t)
      if ((t >> i) & 1) anf ^= ((anf >> (t ^ (1u << i))) & 1) << t;
  }
  uint64_t out = 0;
  for (uint32_t t = 0; t < (1u << n); ++t) {
    if (!((anf >> t) & 1)) continue;
    for (uint32_t s = t;; s = (s - 1) & t) {  // every S within T
      uint64_t term = ~uint64_t{0};
      for (int i = 0; i < n; ++i) {
        if (((t & ~s) >> i) & 1) term &= mv[g.leaves[i]];
      }
      if (__builtin_popcount(s) >= 2 &&
          std::find(allowed.begin(), allowed.end(), s) == allowed.end())
        return 0;  // a product the count left out: the check below fails
      for (int i = 0; i < n; ++i) {
        if ((s >> i) & 1) term &= lam[g.leaves[i]];
      }
      out ^= term;
      if (s == 0) break;
    }
  }
  return out;
}

}  // namespace

std::vector<uint64_t> EvaluateMasked(const LutMap& m, absl::Span<const uint64_t> in,
                                     uint64_t seed) {
  const Netlist& net = m.net;
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> mv(net.op.size(), 0), lam(net.op.size(), 0);
  std::vector<bool> open(net.op.size(), false);
  mv[1] = ~uint64_t{0};
  open[0] = open[1] = true;
  absl::flat_hash_map<uint32_t, size_t> gate_of;
  for (size_t i = 0; i < m.gates.size(); ++i) gate_of[m.gates[i].root] = i;
  for (uint32_t v = 2; v < net.op.size(); ++v) {
    if (net.op[v] == Netlist::kIn) {
      lam[v] = in[net.a[v]];  // lambda_x = x, m_x = 0
      open[v] = true;
    } else if (net.op[v] == Netlist::kXor) {
      mv[v] = mv[net.a[v]] ^ mv[net.b[v]];
      lam[v] = lam[net.a[v]] ^ lam[net.b[v]];
      open[v] = open[net.a[v]] && open[net.b[v]];
    } else if (auto it = gate_of.find(v); it != gate_of.end()) {
      const LutGate& g = m.gates[it->second];
      for (uint32_t l : g.leaves)
        if (!open[l]) return {};  // a leaf not yet opened: a wrong cover
      lam[v] = rng();
      mv[v] = GateValue(g, mv, lam) ^ lam[v];
      open[v] = true;
    }
  }
  std::vector<uint64_t> out;
  for (uint32_t v : net.outputs) {
    if (!open[v]) return {};
    out.push_back(mv[v] ^ lam[v]);
  }
  return out;
}

}  // namespace kmpc::cts
