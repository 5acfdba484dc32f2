// CompileMasked (masked.h): which wires a run computes and in which form,
// the mask products and their levels, and each gate's terms.
#include <algorithm>
#include <array>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cts/masked.h"

namespace kmpc::cts {
namespace {

constexpr uint32_t kNone = ~uint32_t{0};
using Mp = MaskedProgram;

// A product's leaves (slots, ascending, padded with kNone).
using ProductKey = std::array<uint32_t, kMaxLutInputs>;

struct Builder {
  const LutMap& m;
  const Netlist& net;
  Mp p;
  std::vector<uint32_t> gate_of, slot, ready;
  std::vector<bool> needed, masked, opened;
  absl::flat_hash_map<ProductKey, uint32_t> product_of;
  std::vector<int> product_level;
  // Per level: (dst, a, b) product triples.
  std::vector<std::vector<uint32_t>> by_level = std::vector<std::vector<uint32_t>>(4);

  explicit Builder(const LutMap& map) : m(map), net(map.net) {}

  size_t size() const { return net.op.size(); }
  bool Masked(uint32_t g) const { return !m.gates[g].rep3; }

  // Marks v and, through XORs, what it reads.
  void Mark(std::vector<bool>& mark, uint32_t v) {
    std::vector<uint32_t> stack{v};
    while (!stack.empty()) {
      const uint32_t u = stack.back();
      stack.pop_back();
      if (mark[u]) continue;
      mark[u] = true;
      if (net.op[u] == Netlist::kXor) {
        stack.push_back(net.a[u]);
        stack.push_back(net.b[u]);
      }
    }
  }

  absl::Status Classify() {
    gate_of.assign(size(), kNone);
    for (size_t g = 0; g < m.gates.size(); ++g)
      gate_of[m.gates[g].root] = static_cast<uint32_t>(g);
    needed.assign(size(), false);
    std::vector<bool> wants_mask(size(), false);
    for (uint32_t v : net.outputs) Mark(needed, v);
    for (size_t g = 0; g < m.gates.size(); ++g) {
      for (uint32_t l : m.gates[g].leaves) {
        Mark(needed, l);
        if (Masked(g)) Mark(wants_mask, l);
      }
    }
    masked.assign(size(), false);
    opened.assign(size(), false);
    for (uint32_t v = 0; v < size(); ++v) {
      const Netlist::Op op = net.op[v];
      if (op == Netlist::kAnd && needed[v] && gate_of[v] == kNone)
        return absl::InternalError("CompileMasked: a wire inside a gate is read");
      if (op == Netlist::kAnd && wants_mask[v]) {
        if (gate_of[v] == kNone || !Masked(gate_of[v]))
          return absl::InternalError("CompileMasked: a masked gate reads a Rep3 gate");
        opened[v] = masked[v] = true;
      } else if (op == Netlist::kXor) {
        masked[v] = masked[net.a[v]] && masked[net.b[v]];
      } else if (op != Netlist::kAnd) {
        masked[v] = true;
      }
      if (wants_mask[v] && !masked[v])
        return absl::InternalError("CompileMasked: a masked gate's leaf is not masked");
    }
    for (uint32_t v = 0; v < size(); ++v) {
      if (gate_of[v] != kNone && !needed[v]) continue;
      if (needed[v] || v < 2) slot.push_back(v);
    }
    return absl::OkStatus();
  }

  // The product of leaf slots key[0 .. n) (n >= 2), made with its parts.
  uint32_t Product(const ProductKey& key, int n) {
    auto it = product_of.find(key);
    if (it != product_of.end()) return it->second;
    const int level = n <= 2 ? 1 : n <= 4 ? 2 : 3;
    const int na = 1 << (level - 1);
    auto part = [&](int from, int len) -> uint32_t {
      if (len == 1) return key[from];
      ProductKey sub;
      sub.fill(kNone);
      std::copy_n(key.begin() + from, len, sub.begin());
      return Mp::kProductRef | Product(sub, len);
    };
    const uint32_t a = part(0, na), b = part(na, n - na);
    const uint32_t id = static_cast<uint32_t>(product_level.size());
    product_level.push_back(level);
    product_of.emplace(key, id);
    by_level[level].insert(by_level[level].end(), {id, a, b});
    return id;
  }

  // A masked gate's terms (masked.h): its normal form's coefficients by S.
  void AddGate(const LutGate& g, const std::vector<uint32_t>& slot_of) {
    const int n = static_cast<int>(g.leaves.size());
    const uint32_t full = 1u << n;
    uint64_t anf = g.table & (full == 64 ? ~uint64_t{0} : (uint64_t{1} << full) - 1);
    for (int i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < full; ++j)
        if (j & (1u << i)) anf ^= ((anf >> (j ^ (1u << i))) & 1) << j;
    }
    Mp::Gate out;
    out.root = slot_of[g.root];
    out.n = static_cast<uint16_t>(n);
    out.leaf_at = static_cast<uint32_t>(p.leaves.size());
    out.term_at = static_cast<uint32_t>(p.terms.size());
    out.need_r = 1;
    for (uint32_t l : g.leaves) p.leaves.push_back(slot_of[l]);
    for (uint32_t s = 0; s < full; ++s) {
      Mp::Term t;
      for (uint32_t tt = 0; tt < full; ++tt)
        if ((tt & s) == s && ((anf >> tt) & 1)) t.r |= uint64_t{1} << (tt & ~s);
      if (t.r == 0) continue;
      t.s = static_cast<uint8_t>(s);
      const int size = __builtin_popcount(s);
      if (size >= 2) {
        ProductKey key;
        key.fill(kNone);
        int k = 0;
        for (int i = 0; i < n; ++i)
          if (s & (1u << i)) key[k++] = slot_of[g.leaves[i]];
        std::sort(key.begin(), key.begin() + k);
        t.product = Product(key, k);
      }
      for (uint64_t rs = t.r; rs != 0; rs &= rs - 1) {
        for (uint32_t r = __builtin_ctzll(rs); r != 0; r &= r - 1) out.need_r |= uint64_t{1} << r;
      }
      p.terms.push_back(t);
    }
    out.terms = static_cast<uint16_t>(p.terms.size() - out.term_at);
    p.gates.push_back(out);
  }
};

}  // namespace

absl::StatusOr<MaskedProgram> CompileMasked(const LutMap& map) {
  Builder b(map);
  const Netlist& net = map.net;
  if (absl::Status st = b.Classify(); !st.ok()) return st;
  Mp& p = b.p;
  std::vector<uint32_t> slot_of(b.size(), kNone);
  for (size_t i = 0; i < b.slot.size(); ++i) slot_of[b.slot[i]] = static_cast<uint32_t>(i);
  p.slots = b.slot.size();
  // Masked gates first: their products fix the preparation's rounds.
  std::vector<uint32_t> masked_index(map.gates.size(), kNone);
  for (size_t g = 0; g < map.gates.size(); ++g) {
    const LutGate& lg = map.gates[g];
    if (lg.rep3 || !b.needed[lg.root]) continue;
    masked_index[g] = static_cast<uint32_t>(p.gates.size());
    b.AddGate(lg, slot_of);
  }
  p.products = b.product_level.size();
  for (int q = 3; q >= 1 && p.prep_rounds == 0; --q)
    if (!b.by_level[q].empty()) p.prep_rounds = q;
  const uint32_t prep = static_cast<uint32_t>(p.prep_rounds);
  int layers = 0;
  for (const LutGate& g : map.gates) layers = std::max(layers, g.layer);
  p.round.resize(prep + layers + 1);
  for (int q = 1; q <= p.prep_rounds; ++q) p.round[q].products = std::move(b.by_level[q]);
  // Ready times (the message after which a wire is held) and the lists.
  std::vector<uint32_t> ready(b.size(), 0);
  for (uint32_t v = 0; v < b.size(); ++v) {
    const uint32_t s = slot_of[v];
    if (net.op[v] == Netlist::kIn && s != kNone) {
      if (p.input_slot.size() <= net.a[v]) p.input_slot.resize(net.a[v] + 1, kNone);
      p.input_slot[net.a[v]] = s;
    }
    if (s == kNone) continue;
    if (net.op[v] == Netlist::kXor) {
      ready[v] = std::max(ready[net.a[v]], ready[net.b[v]]);
      auto& xs = p.round[ready[v]].xors;
      xs.insert(xs.end(), {s, slot_of[net.a[v]], slot_of[net.b[v]]});
      if (b.masked[v]) p.lambda_xors.insert(p.lambda_xors.end(), {s, slot_of[net.a[v]], slot_of[net.b[v]]});
      continue;
    }
    if (net.op[v] != Netlist::kAnd) continue;
    const uint32_t g = b.gate_of[v];
    const LutGate& lg = map.gates[g];
    ready[v] = prep + static_cast<uint32_t>(lg.layer);
    for (uint32_t l : lg.leaves) {
      if (ready[l] >= ready[v])
        return absl::InternalError(absl::StrCat("CompileMasked: gate at ", v, " reads its layer"));
    }
    MaskedProgram::Round& r = p.round[ready[v]];
    if (lg.rep3) {
      // f(x, y) = a0 ^ a1 x ^ a2 y ^ xy = (x ^ a2)(y ^ a1) ^ a0 ^ a1 a2.
      const uint32_t t = static_cast<uint32_t>(lg.table & 0xF);
      const uint32_t a0 = t & 1, a1 = (t ^ (t >> 1)) & 1, a2 = (t ^ (t >> 2)) & 1;
      if (lg.leaves.size() != 2 || ((t ^ (t >> 1) ^ (t >> 2) ^ (t >> 3)) & 1) == 0)
        return absl::InternalError("CompileMasked: a Rep3 gate is not an AND of two leaves");
      r.rep3.insert(r.rep3.end(), {s, slot_of[lg.leaves[0]], slot_of[lg.leaves[1]],
                                   a2 | a1 << 1 | (a0 ^ (a1 & a2)) << 2});
    } else if (b.opened[v]) {
      r.opens.push_back(masked_index[g]);
      p.random_slots.push_back(s);
    } else {
      r.local.push_back(masked_index[g]);
    }
  }
  p.inputs = net.inputs;
  p.input_slot.resize(net.inputs, kNone);
  p.outputs = net.outputs.size();
  for (uint32_t v : net.outputs) p.output_slot.push_back(slot_of[v]);
  for (size_t r = 0; r < p.round.size(); ++r) {
    const Mp::Round& rd = p.round[r];
    p.ands += rd.products.size() / 3 + rd.rep3.size() / 4;
    p.opened += rd.opens.size();
    if (!rd.products.empty() || !rd.rep3.empty() || !rd.opens.empty())
      p.rounds = static_cast<int>(r);
  }
  return std::move(b.p);
}

}  // namespace kmpc::cts
