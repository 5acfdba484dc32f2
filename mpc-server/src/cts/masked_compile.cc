// CompileMasked (masked.h): which wires a run computes and in which form,
// the mask products and their levels, and each gate's terms.
#include <algorithm>
#include <array>
#include <functional>
#include <queue>
#include <utility>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cts/masked.h"
#include "cts/truth_table.h"
#include "protocol/sha256.h"

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
  // A form's index by its n, need_r and terms' (r, s).
  absl::flat_hash_map<std::vector<uint64_t>, uint32_t> form_of;
  std::vector<int> product_level;
  // Product q's operands at [3q + 1, 3q + 3) (3q: q itself).
  std::vector<uint32_t> product_ops;

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
      for (int i = 0; i < len; ++i) sub[i] = key[from + i];
      return Mp::kProductRef | Product(sub, len);
    };
    const uint32_t a = part(0, na), b = part(na, n - na);
    const uint32_t id = static_cast<uint32_t>(product_level.size());
    product_level.push_back(level);
    product_of.emplace(key, id);
    product_ops.insert(product_ops.end(), {id, a, b});
    return id;
  }

  // A masked gate's terms (masked.h): its normal form's coefficients by S.
  void AddGate(const LutGate& g, const std::vector<uint32_t>& slot_of) {
    const int n = static_cast<int>(g.leaves.size());
    const uint32_t full = 1u << n;
    const uint64_t anf = Anf(g.table, n);
    Mp::Gate out;
    out.root = slot_of[g.root];
    out.leaf_at = static_cast<uint32_t>(p.leaves.size());
    out.product_at = static_cast<uint32_t>(p.gate_products.size());
    for (uint32_t l : g.leaves) p.leaves.push_back(slot_of[l]);
    // r[S]: the monomials T \ S of every T >= S in the normal form.
    std::array<uint64_t, 64> r{};
    for (uint64_t ts = anf; ts != 0; ts &= ts - 1) {
      const uint32_t tt = __builtin_ctzll(ts);
      for (uint32_t s = tt;; s = (s - 1) & tt) {  // every S within T
        r[s] |= uint64_t{1} << (tt & ~s);
        if (s == 0) break;
      }
    }
    uint64_t need_r = 1;
    std::vector<uint64_t> key{static_cast<uint64_t>(n), 0};  // key[1]: need_r
    for (uint32_t s = 0; s < full; ++s) {
      if (r[s] == 0) continue;
      key.insert(key.end(), {r[s], s});
      const int size = __builtin_popcount(s);
      if (size >= 2) {
        ProductKey pk;
        pk.fill(kNone);
        int k = 0;
        for (int i = 0; i < n; ++i)
          if (s & (1u << i)) pk[k++] = slot_of[g.leaves[i]];
        for (int i = 1; i < k; ++i)  // insertion sort: k <= kMaxLutInputs
          for (int j = i; j > 0 && pk[j - 1] > pk[j]; --j) std::swap(pk[j - 1], pk[j]);
        p.gate_products.push_back(Product(pk, k));
      }
      for (uint64_t rs = r[s]; rs != 0; rs &= rs - 1) {
        for (uint32_t q = __builtin_ctzll(rs); q != 0; q &= q - 1) need_r |= uint64_t{1} << q;
      }
    }
    key[1] = need_r;
    out.form = FormOf(key);
    p.gates.push_back(out);
  }

  // The form of key (n, need_r, then each term's r and s), added if new;
  // each term's product, if its S has two or more leaves, is the next in
  // the gate's list (AddGate pushes them in term order).
  uint32_t FormOf(const std::vector<uint64_t>& key) {
    auto [it, added] = form_of.try_emplace(key, static_cast<uint32_t>(p.forms.size()));
    if (!added) return it->second;
    Mp::Form f;
    f.n = static_cast<uint16_t>(key[0]);
    f.need_r = key[1];
    f.term_at = static_cast<uint32_t>(p.terms.size());
    f.terms = static_cast<uint16_t>((key.size() - 2) / 2);
    for (size_t k = 2; k < key.size(); k += 2) {
      const uint8_t s = static_cast<uint8_t>(key[k + 1]);
      p.terms.push_back({key[k], s, static_cast<uint8_t>(f.products)});
      f.products += __builtin_popcount(s) >= 2;
    }
    p.forms.push_back(f);
    return it->second;
  }
};

constexpr uint32_t kInf = ~uint32_t{0};

// The rounds' lists over logical slots (Builder::slot order), products by
// level, before the slots are packed.
absl::Status Emit(Builder& b, const std::vector<uint32_t>& slot_of,
                  const std::vector<uint32_t>& masked_index, std::vector<uint32_t>& ready) {
  const Netlist& net = b.net;
  Mp& p = b.p;
  const uint32_t prep = static_cast<uint32_t>(p.prep_rounds);
  ready.assign(b.size(), 0);
  for (uint32_t v = 0; v < b.size(); ++v) {
    const uint32_t s = slot_of[v];
    if (net.op[v] == Netlist::kIn && s != kNone) p.input_slot[net.a[v]] = s;
    if (s == kNone) continue;
    if (net.op[v] == Netlist::kXor) {
      ready[v] = std::max(ready[net.a[v]], ready[net.b[v]]);
      auto& xs = p.round[ready[v]].xors;
      xs.insert(xs.end(), {s, slot_of[net.a[v]], slot_of[net.b[v]]});
      continue;
    }
    if (net.op[v] != Netlist::kAnd) continue;
    const uint32_t g = b.gate_of[v];
    const LutGate& lg = b.m.gates[g];
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
    } else {
      r.local.push_back(masked_index[g]);
    }
  }
  return absl::OkStatus();
}

// Each product in the last message before its first reader (as late as
// possible: its slot, and its leaves' masks, live the shortest).
absl::Status ScheduleProducts(Builder& b) {
  Mp& p = b.p;
  std::vector<uint32_t> need(b.product_level.size(), kInf);
  auto gate_needs = [&](uint32_t g, uint32_t r) {
    const Mp::Gate& gt = p.gates[g];
    for (size_t k = 0; k < p.forms[gt.form].products; ++k) {
      const uint32_t q = p.gate_products[gt.product_at + k];
      need[q] = std::min(need[q], r - 1);
    }
  };
  for (uint32_t r = 0; r < p.round.size(); ++r) {
    for (uint32_t g : p.round[r].opens) gate_needs(g, r);
    for (uint32_t g : p.round[r].local) gate_needs(g, r);
  }
  std::vector<uint32_t> at(need.size());
  for (uint32_t q = static_cast<uint32_t>(need.size()); q-- > 0;) {  // parts before wholes
    const uint32_t* t = &b.product_ops[3 * q];
    if (need[q] == kInf || need[q] < static_cast<uint32_t>(b.product_level[q]))
      return absl::InternalError("CompileMasked: a mask product has no room");
    at[q] = need[q];
    for (int i = 1; i < 3; ++i) {
      if (t[i] & Mp::kProductRef) {
        const uint32_t o = t[i] & ~Mp::kProductRef;
        need[o] = std::min(need[o], need[q] - 1);
      }
    }
  }
  for (uint32_t q = 0; q < need.size(); ++q) {
    const uint32_t* t = &b.product_ops[3 * q];
    p.round[at[q]].products.insert(p.round[at[q]].products.end(), {t[0], t[1], t[2]});
  }
  return absl::OkStatus();
}

// Interval packing: item i occupies a slot from def[i] to last[i]
// (phase times); a slot is reused by an item defined strictly after its
// last read. Items [0, pinned) keep slots of their own. Deterministic:
// ties by item number.
std::vector<uint32_t> Pack(const std::vector<uint64_t>& def, const std::vector<uint64_t>& last,
                           size_t pinned, size_t* count) {
  std::vector<uint32_t> order(def.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin() + pinned, order.end(),
                   [&](uint32_t x, uint32_t y) { return def[x] < def[y]; });
  std::vector<uint32_t> phys(def.size(), kNone);
  using Busy = std::pair<uint64_t, uint32_t>;  // (last read, slot)
  std::priority_queue<Busy, std::vector<Busy>, std::greater<Busy>> busy;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> free_slots;
  uint32_t next = 0;
  for (uint32_t i : order) {
    while (!busy.empty() && busy.top().first < def[i]) {
      free_slots.push(busy.top().second);
      busy.pop();
    }
    if (i < pinned || free_slots.empty()) {
      phys[i] = next++;
    } else {
      phys[i] = free_slots.top();
      free_slots.pop();
    }
    if (i >= pinned) busy.push({last[i], phys[i]});
  }
  *count = next;
  return phys;
}


// Reads of a logical slot's words, in phase times (message r: 2r before
// it, 2r + 1 after), and the rounds whose lists read it.
struct Uses {
  std::vector<uint32_t> first;  // the first round that reads its lambda
  std::vector<uint64_t> last;   // the last phase time that reads it
  std::vector<uint64_t> plast;  // per product
  void Read(uint32_t s, uint32_t r, int post) {
    first[s] = std::min(first[s], r);
    last[s] = std::max<uint64_t>(last[s], 2 * uint64_t{r} + post);
  }
  void ReadRef(uint32_t ref, uint32_t r, int post) {
    if (ref & Mp::kProductRef) {
      uint64_t& l = plast[ref & ~Mp::kProductRef];
      l = std::max<uint64_t>(l, 2 * uint64_t{r} + post);
    } else {
      Read(ref, r, post);
    }
  }
};

void GateReads(const Mp& p, uint32_t g, uint32_t r, int post, bool root, Uses& u) {
  const Mp::Gate& gt = p.gates[g];
  if (root) u.Read(gt.root, r, post);
  const Mp::Form& f = p.forms[gt.form];
  for (uint32_t i = 0; i < f.n; ++i) u.Read(p.leaves[gt.leaf_at + i], r, post);
  for (size_t k = 0; k < f.products; ++k)
    u.ReadRef(Mp::kProductRef | p.gate_products[gt.product_at + k], r, post);
}

Uses CollectUses(const Mp& p, size_t slots, size_t products) {
  Uses u;
  u.first.assign(slots, kInf);
  u.last.assign(slots, 0);
  u.plast.assign(products, 0);
  for (uint32_t r = 0; r < p.round.size(); ++r) {
    const Mp::Round& rd = p.round[r];
    for (size_t k = 0; k < rd.products.size(); k += 3) {
      u.ReadRef(rd.products[k + 1], r, 0);
      u.ReadRef(rd.products[k + 2], r, 0);
    }
    for (size_t k = 0; k < rd.rep3.size(); k += 4) {
      u.Read(rd.rep3[k + 1], r, 0);
      u.Read(rd.rep3[k + 2], r, 0);
    }
    for (uint32_t g : rd.opens) GateReads(p, g, r, 0, true, u);
    for (uint32_t g : rd.local) GateReads(p, g, r, 1, false, u);
    for (size_t k = 0; k < rd.xors.size(); k += 3) {
      u.Read(rd.xors[k + 1], r, 1);
      u.Read(rd.xors[k + 2], r, 1);
    }
  }
  for (uint32_t s : p.output_slot) u.last[s] = ~uint64_t{0};
  return u;
}

// Where a slot's words begin (its def time) and the lists that write them
// first: an opened root's lambda is drawn, and a masked XOR's lambda
// computed, before the first message that reads it; every other slot is
// written after the message that makes it ready.
std::vector<uint64_t> PlaceLambdas(Mp& p, const std::vector<uint32_t>& ready,
                                   const std::vector<uint8_t>& kind, Uses& u) {
  const size_t n = ready.size();
  std::vector<std::array<uint32_t, 2>> ops(n, {kNone, kNone});
  for (const Mp::Round& rd : p.round)
    for (size_t k = 0; k < rd.xors.size(); k += 3) ops[rd.xors[k]] = {rd.xors[k + 1], rd.xors[k + 2]};
  std::vector<bool> pass(n, false);
  for (size_t s = n; s-- > 0;) {  // readers before what they read
    if (kind[s] != 2 || u.first[s] > ready[s]) continue;
    pass[s] = true;
    u.Read(ops[s][0], u.first[s], 0);
    u.Read(ops[s][1], u.first[s], 0);
  }
  std::vector<uint64_t> def(n, 0);
  for (uint32_t s = 0; s < n; ++s) {
    if (kind[s] == 0) continue;  // a constant or an input: loaded first
    const uint64_t after = 2 * uint64_t{ready[s]} + 1;
    if (kind[s] == 3 || pass[s]) {
      def[s] = 2 * uint64_t{u.first[s]};
      auto& list = kind[s] == 3 ? p.round[u.first[s]].draws : p.round[u.first[s]].lambda_xors;
      if (kind[s] == 3) {
        list.push_back(s);
      } else {
        list.insert(list.end(), {s, ops[s][0], ops[s][1]});
      }
    } else {
      def[s] = after;
    }
    u.last[s] = std::max(u.last[s], after);
  }
  return def;
}

template <typename F>
void RemapSlots(Mp& p, F&& f) {
  for (uint32_t& s : p.input_slot) s = s == kNone ? kNone : f(s);
  for (uint32_t& s : p.output_slot) s = f(s);
  for (Mp::Gate& g : p.gates) g.root = f(g.root);
  for (uint32_t& s : p.leaves) s = f(s);
  for (Mp::Round& rd : p.round) {
    for (size_t k = 0; k < rd.rep3.size(); k += 4)
      for (int i = 0; i < 3; ++i) rd.rep3[k + i] = f(rd.rep3[k + i]);
    for (uint32_t& s : rd.xors) s = f(s);
    for (uint32_t& s : rd.lambda_xors) s = f(s);
    for (uint32_t& s : rd.draws) s = f(s);
  }
}

// Packs the logical slots and the products into as few as their lifetimes
// allow. kind per logical slot: 0 constant or input, 1 shared, 2 masked
// XOR, 3 opened root.
void PackSlots(Mp& p, const std::vector<uint32_t>& ready, const std::vector<uint8_t>& kind,
               size_t products) {
  Uses u = CollectUses(p, ready.size(), products);
  const std::vector<uint64_t> def = PlaceLambdas(p, ready, kind, u);
  const std::vector<uint32_t> phys = Pack(def, u.last, 2, &p.slots);
  std::vector<uint64_t> pdef(products, 0);
  for (uint32_t r = 0; r < p.round.size(); ++r)
    for (size_t k = 0; k < p.round[r].products.size(); k += 3)
      pdef[p.round[r].products[k]] = 2 * uint64_t{r} + 1;
  const std::vector<uint32_t> pphys = Pack(pdef, u.plast, 0, &p.products);
  auto ref = [&](uint32_t x) {
    return x & Mp::kProductRef ? Mp::kProductRef | pphys[x & ~Mp::kProductRef] : phys[x];
  };
  for (Mp::Round& rd : p.round) {
    for (size_t k = 0; k < rd.products.size(); k += 3) {
      rd.products[k] = pphys[rd.products[k]];
      rd.products[k + 1] = ref(rd.products[k + 1]);
      rd.products[k + 2] = ref(rd.products[k + 2]);
    }
  }
  for (uint32_t& q : p.gate_products) q = pphys[q];
  RemapSlots(p, [&](uint32_t s) { return phys[s]; });
}

}  // namespace

namespace {

// The version of the run's messages (masked_eval.cc), in every digest: 2
// since each message carries its sender's view. Servers whose runs send
// other messages hold other digests, so their agreement picks Rep3 ANDs
// (engine/cts_jobs.cc) instead of failing on a message's size.
constexpr uint64_t kMessagesVersion = 2;

absl::Status Digest(Mp& p) {
  protocol::Sha256 h;
  h.Update(&kMessagesVersion, 1);
  auto words = [&](const std::vector<uint32_t>& v) {
    const uint64_t n = v.size();
    h.Update(&n, 1);
    h.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(v.data()), 4 * v.size()));
  };
  const uint64_t head[] = {p.inputs, p.outputs, p.slots, p.products,
                           static_cast<uint64_t>(p.prep_rounds), p.round.size()};
  h.Update(head, 6);
  words(p.input_slot);
  words(p.output_slot);
  words(p.leaves);
  words(p.gate_products);
  const uint64_t counts[] = {p.gates.size(), p.forms.size(), p.terms.size(), p.form_on.size()};
  h.Update(counts, 4);  // so that no list's end can pass for the next one's start
  for (const Mp::Gate& g : p.gates) {
    const uint64_t v[] = {g.root, g.leaf_at, g.form, g.product_at};
    h.Update(v, 4);
  }
  for (const Mp::Form& f : p.forms) {
    const uint64_t v[] = {f.need_r, f.term_at, f.n, f.terms, f.products};
    h.Update(v, 5);
  }
  for (const Mp::Term& t : p.terms) {
    const uint64_t v[] = {t.r, t.s, t.product};
    h.Update(v, 3);
  }
  h.Update(p.form_on.data(), p.form_on.size());
  for (const Mp::Round& r : p.round) {
    for (const auto* l : {&r.draws, &r.lambda_xors, &r.products, &r.rep3, &r.opens, &r.local,
                          &r.xors})
      words(*l);
  }
  return h.Final(p.digest);
}

// The lists at their sizes: a server bounds its masked programs' memory by
// their sizes (engine/cts_program_cache.cc MaskedProgramBytes), and lists
// built by push_back hold up to twice that.
void ShrinkToFit(Mp& p) {
  p.input_slot.shrink_to_fit();
  p.output_slot.shrink_to_fit();
  p.gates.shrink_to_fit();
  p.leaves.shrink_to_fit();
  p.forms.shrink_to_fit();
  p.terms.shrink_to_fit();
  p.gate_products.shrink_to_fit();
  p.form_on.shrink_to_fit();
  for (Mp::Round& r : p.round) {
    for (std::vector<uint32_t>* v : {&r.draws, &r.lambda_xors, &r.products, &r.rep3, &r.opens,
                                     &r.local, &r.xors})
      v->shrink_to_fit();
  }
  p.round.shrink_to_fit();
}

}  // namespace

void FillFormTable(MaskedProgram& p) {
  p.form_on.clear();
  p.form_on.reserve(64 * p.forms.size());
  for (const Mp::Form& f : p.forms) {
    for (uint32_t x = 0; x < 64; ++x) {
      // Monomial R is 1 where the leaves' m are x iff R lies within x: bit
      // R of ones is clear where R holds a leaf i whose m is 0 (kVar[i]).
      uint64_t ones = ~uint64_t{0}, on = 0;
      for (int i = 0; i < kMaxLutInputs; ++i)
        if (((x >> i) & 1) == 0) ones &= ~kVar[i];
      for (uint32_t t = 0; t < f.terms; ++t)
        if (__builtin_parityll(p.terms[f.term_at + t].r & ones)) on |= uint64_t{1} << t;
      p.form_on.push_back(x >> f.n == 0 ? on : 0);
    }
  }
}

absl::StatusOr<MaskedProgram> CompileMasked(const LutMap& map) {
  Builder b(map);
  const Netlist& net = map.net;
  if (absl::Status st = b.Classify(); !st.ok()) return st;
  Mp& p = b.p;
  std::vector<uint32_t> slot_of(b.size(), kNone);
  for (size_t i = 0; i < b.slot.size(); ++i) slot_of[b.slot[i]] = static_cast<uint32_t>(i);
  // Masked gates first: their products fix the preparation's rounds.
  std::vector<uint32_t> masked_index(map.gates.size(), kNone);
  for (size_t g = 0; g < map.gates.size(); ++g) {
    const LutGate& lg = map.gates[g];
    if (lg.rep3 || !b.needed[lg.root]) continue;
    masked_index[g] = static_cast<uint32_t>(p.gates.size());
    b.AddGate(lg, slot_of);
  }
  for (int level : b.product_level) p.prep_rounds = std::max(p.prep_rounds, level);
  int layers = 0;
  for (const LutGate& g : map.gates) layers = std::max(layers, g.layer);
  p.round.resize(p.prep_rounds + layers + 1);
  p.inputs = net.inputs;
  p.input_slot.assign(net.inputs, kNone);
  std::vector<uint32_t> ready;
  if (absl::Status st = Emit(b, slot_of, masked_index, ready); !st.ok()) return st;
  if (absl::Status st = ScheduleProducts(b); !st.ok()) return st;
  p.outputs = net.outputs.size();
  for (uint32_t v : net.outputs) p.output_slot.push_back(slot_of[v]);
  std::vector<uint32_t> slot_ready(b.slot.size());
  std::vector<uint8_t> kind(b.slot.size());
  for (size_t i = 0; i < b.slot.size(); ++i) {
    const uint32_t v = b.slot[i];
    slot_ready[i] = ready[v];
    const Netlist::Op op = net.op[v];
    kind[i] = op != Netlist::kXor && op != Netlist::kAnd ? 0
              : b.opened[v]                              ? 3
              : op == Netlist::kXor && b.masked[v]       ? 2
                                                         : 1;
  }
  PackSlots(p, slot_ready, kind, b.product_level.size());
  for (size_t r = 0; r < p.round.size(); ++r) {
    const Mp::Round& rd = p.round[r];
    p.ands += rd.products.size() / 3 + rd.rep3.size() / 4;
    p.opened += rd.opens.size();
    if (!rd.products.empty() || !rd.rep3.empty() || !rd.opens.empty())
      p.rounds = static_cast<int>(r);
  }
  FillFormTable(p);
  ShrinkToFit(p);
  if (absl::Status st = Digest(p); !st.ok()) return st;
  return std::move(b.p);
}

}  // namespace kmpc::cts
