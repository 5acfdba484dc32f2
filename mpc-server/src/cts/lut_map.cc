// The mapping's invariants (see lut_map.h for what it computes):
// - Node v's cuts sit at [Begin(v), End(v)) of one arena (leaves and
//   arrival in pool_, table and signature in func_): its priority cuts,
//   then the cut of its own operands if the priority cuts left it out,
//   then its trivial cut {v} (for a constant: no leaf). An AND's (and an
//   input's) stay for the cover; an XOR's block is reused once the last
//   node reading the XOR has its own cuts.
// - A cut's leaves are sorted; its arrival is its latest leaf's label.
// - A cut's table is its root's function with leaf i as variable i, built
//   up the merges (each child's table stretched to the merged leaves, then
//   ANDed or XORed) and independent of variables n .. 5, so the same
//   64-bit word serves every leaf count; `inner` is a one-bit-per-node
//   signature (a Bloom filter) of the nodes the merges computed through.
// - The merged table is the cone's own function (the walk from the root
//   that stops at the leaves) whenever no leaf is among the nodes computed
//   through; where the signature says one may be, the cover walks the cone
//   instead. Both are exact, so the mapping is the cone walk's mapping.
// - Candidates are every distinct union of an operand cut pair within k
//   leaves, in pair order, first occurrence kept, ranked by std::sort on
//   (arrival, leaf count): the same sequence and the same comparisons as
//   sorting the cuts themselves, so ties fall the same way. (A stable
//   sort ranks ties otherwise and changes the figures.)
#include "cts/lut_map.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "cts/rank_first.h"
#include "cts/truth_table.h"

namespace kmpc::cts {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr int kFar = std::numeric_limits<int>::max() / 2;

uint64_t NodeBit(uint32_t v) { return uint64_t{1} << ((v * 0x9E3779B97F4A7C15ull) >> 58); }

int Popcount(uint64_t x) {  // without the popcnt instruction
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

// What the merges read (32 bytes); the cut's function is kept apart.
struct Cut {
  std::array<uint32_t, kMaxLutInputs> leaf;
  int arrival = 0;  // the latest leaf's label
  uint8_t n = 0;
};

struct CutFunc {
  uint64_t table = 0;  // the root's function over the leaves, as merged
  uint64_t inner = 0;  // signature of the nodes the merges computed through
};

bool SameLeaves(const Cut& x, const Cut& y) {
  return x.n == y.n && std::equal(x.leaf.begin(), x.leaf.begin() + x.n, y.leaf.begin());
}

// Sorted union of two cuts' leaves and where each one's leaves went;
// false when it exceeds k leaves.
bool Merge(const Cut& x, const Cut& y, int k, Cut* out, int* px, int* py) {
  int i = 0, j = 0, n = 0;
  while (i < x.n || j < y.n) {
    if (n == k) return false;
    if (j >= y.n || (i < x.n && x.leaf[i] < y.leaf[j])) {
      px[i] = n;
      out->leaf[n++] = x.leaf[i++];
    } else if (i >= x.n || y.leaf[j] < x.leaf[i]) {
      py[j] = n;
      out->leaf[n++] = y.leaf[j++];
    } else {
      px[i] = py[j] = n;
      out->leaf[n++] = x.leaf[i++];
      ++j;
    }
  }
  out->n = static_cast<uint8_t>(n);
  return true;
}

// A table over m leaves with leaf i moved to variable pos[i] (increasing),
// highest first, onto variables the table ignores.
uint64_t Stretch(uint64_t t, int m, const int* pos) {
  for (int i = m - 1; i >= 0; --i)
    if (pos[i] != i) t = SwapVars(t, i, pos[i]);
  return t;
}

// A merged candidate before it is kept: its leaf count and arrival, and
// the pair of operand cuts (offsets in the operands' lists) that first
// gave it. Its leaves are a bit set in Gather's scratch.
struct Candidate {
  int arrival;
  uint32_t n;
  uint32_t xi, yi;
};

class Mapper {
 public:
  // keep_all: every node's cuts outlive Label (else an XOR's go once its
  // last reader has its own).
  Mapper(const Netlist& net, const LutOptions& o, bool keep_all = false)
      : net_(net), o_(o), keep_all_(keep_all) {}
  void Label();
  void Cover(LutMap& m);
  // Node v's cuts: pool_ and func_ at [Begin(v), End(v)).
  uint32_t Begin(uint32_t v) const { return begin_[v]; }
  uint32_t End(uint32_t v) const { return end_[v]; }
  const Cut& CutAt(uint32_t i) const { return pool_[i]; }
  const CutFunc& FuncAt(uint32_t i) const { return func_[i]; }
  bool Carried(uint32_t i) const;
  uint64_t PricedTable(uint32_t root, uint32_t i);

 private:
  void Gather(uint32_t v);
  size_t Number(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye);
  template <bool kPopcnt>
  void GatherWords(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye);
  template <size_t W, bool kPopcnt>
  void GatherSets(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye, size_t w);
  void GatherFast(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye, size_t w);
  void GatherPortable(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye, size_t w);
  void Keep(uint32_t v);
  void Add(uint32_t v, uint32_t x, uint32_t y, int arrival);
  void Open(uint32_t v);
  void Close(uint32_t v);
  bool Recycled(uint32_t v) const { return !keep_all_ && net_.op[v] == Netlist::kXor; }
  uint64_t Walk(uint32_t root, const Cut& c);

  const Netlist& net_;
  LutOptions o_;
  bool keep_all_;
  std::vector<int> label_;
  // The arena: an AND's (or input's) cuts packed where they were made; an
  // XOR's in a block of cuts_per_node + 2 that returns to free_ once its
  // last reader (last_read_) is labelled.
  std::vector<Cut> pool_;
  std::vector<CutFunc> func_;
  std::vector<uint32_t> begin_, end_, last_read_, free_;
  // Scratch of Gather and Keep: the operands' leaves numbered locally
  // (local_[leaf]: the number, kNone outside Number; numbered_: the leaf of
  // each number), each operand cut and candidate a bit set of w words over
  // the numbers, candidates found again by an open-addressed table (valid
  // under slot_stamp_; slot_word_ the one-word sets).
  std::vector<uint32_t> local_, numbered_;
  std::vector<uint64_t> slot_word_;
  std::vector<uint64_t> sets_, cand_sets_, order_;
  std::vector<Candidate> cand_;
  size_t cands_ = 0;
  std::vector<uint32_t> slot_mark_, slot_index_, fit_;
  uint32_t slot_stamp_ = 0;
  std::vector<uint64_t> walk_table_;  // scratch of Walk, valid where stamped
  std::vector<uint32_t> walk_stamp_, walk_stack_;
  uint32_t epoch_ = 0;
};

// Bumps a scratch table's stamp, clearing its marks when they could repeat.
void NextStamp(std::vector<uint32_t>& mark, size_t size, uint32_t& stamp) {
  if (mark.size() < size || ++stamp == 0) {
    mark.assign(std::max(size, mark.size()), 0);
    stamp = 1;
  }
}

// Numbers the distinct leaves of the operand cuts [xb, xe) then [yb, ye)
// in order of appearance and writes each cut's bit set (w words) to
// sets_; returns w. One pass while the numbers fit a word, a second to
// write wider sets.
size_t Mapper::Number(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye) {
  if (local_.size() != net_.op.size()) local_.assign(net_.op.size(), kNone);
  const size_t cuts = xe - xb + ye - yb;
  sets_.resize(cuts);
  numbered_.resize(cuts * kMaxLutInputs);
  uint32_t next = 0;
  uint64_t* set = sets_.data();
  for (auto [b, e] : {std::pair{xb, xe}, std::pair{yb, ye}}) {
    for (uint32_t i = b; i < e; ++i) {
      uint64_t bits = 0;
      for (int l = 0; l < pool_[i].n; ++l) {
        const uint32_t leaf = pool_[i].leaf[l];
        const uint32_t old = local_[leaf];
        const bool fresh = old == kNone;
        const uint32_t id = fresh ? next : old;
        local_[leaf] = id;
        numbered_[next] = leaf;  // kept only when fresh
        next += fresh;
        bits |= uint64_t{id < 64} << (id & 63);
      }
      *set++ = bits;
    }
  }
  size_t w = 1;
  if (next > 64) {
    w = (next + 63) / 64;
    sets_.assign(cuts * w, 0);
    set = sets_.data();
    for (auto [b, e] : {std::pair{xb, xe}, std::pair{yb, ye}}) {
      for (uint32_t i = b; i < e; ++i, set += w) {
        for (int l = 0; l < pool_[i].n; ++l) {
          const uint32_t id = local_[pool_[i].leaf[l]];
          set[id >> 6] |= uint64_t{1} << (id & 63);
        }
      }
    }
  }
  for (uint32_t i = 0; i < next; ++i) local_[numbered_[i]] = kNone;
  return w;
}

// Every distinct union of an operand cut pair within k leaves, in the
// order the pairs give them (first occurrence kept), over the bit sets
// Number wrote (W words, or w when W is 0); kPopcnt: count bits with the
// instruction, inlined into a caller compiled for it.
template <size_t W, bool kPopcnt>
[[gnu::always_inline]] inline void Mapper::GatherSets(uint32_t xb, uint32_t xe, uint32_t yb,
                                                      uint32_t ye, size_t w) {
  if constexpr (W != 0) w = W;
  const size_t nx = xe - xb, ny = ye - yb, slots = std::bit_ceil(2 * nx * ny);
  NextStamp(slot_mark_, slots, slot_stamp_);
  slot_index_.resize(slot_mark_.size());
  if (cand_.size() < nx * ny) cand_.resize(nx * ny);
  if (cand_sets_.size() < (nx * ny + 1) * w) cand_sets_.resize((nx * ny + 1) * w);
  cands_ = 0;
  const uint64_t* xset = sets_.data();
  const uint64_t* yset = xset + nx * w;
  for (uint32_t i = 0; i < nx; ++i, xset += w) {
    const int xa = pool_[xb + i].arrival;
    for (uint32_t j = 0; j < ny; ++j) {
      uint64_t* u = &cand_sets_[cands_ * w];  // taken only if new
      int n = 0;
      uint64_t h = 0;
      for (size_t t = 0; t < w; ++t) {
        u[t] = xset[t] | yset[j * w + t];
        n += kPopcnt ? __builtin_popcountll(u[t]) : Popcount(u[t]);
        h = (h ^ u[t]) * 0x9E3779B97F4A7C15ull;
      }
      if (n > o_.k) continue;
      size_t slot = (h >> 32) & (slots - 1);
      while (slot_mark_[slot] == slot_stamp_ &&
             !std::equal(u, u + w, &cand_sets_[slot_index_[slot] * w]))
        slot = (slot + 1) & (slots - 1);
      if (slot_mark_[slot] == slot_stamp_) continue;  // a repeat
      slot_mark_[slot] = slot_stamp_;
      slot_index_[slot] = static_cast<uint32_t>(cands_);
      cand_[cands_++] = {std::max(xa, pool_[yb + j].arrival), static_cast<uint32_t>(n), i, j};
    }
  }
}

// GatherSets for one-word sets: the pairs within k leaves listed first,
// then each found again or added.
template <bool kPopcnt>
[[gnu::always_inline]] inline void Mapper::GatherWords(uint32_t xb, uint32_t xe, uint32_t yb,
                                                       uint32_t ye) {
  const size_t nx = xe - xb, ny = ye - yb, slots = std::bit_ceil(2 * nx * ny);
  const int shift = 64 - std::countr_zero(slots);
  NextStamp(slot_mark_, slots, slot_stamp_);
  slot_word_.resize(slot_mark_.size());
  if (cand_.size() < nx * ny) cand_.resize(nx * ny);
  if (fit_.size() < ny) fit_.resize(ny);
  cands_ = 0;
  const uint64_t* yset = sets_.data() + nx;
  for (uint32_t i = 0; i < nx; ++i) {
    const uint64_t x = sets_[i];
    size_t fits = 0;
    for (uint32_t j = 0; j < ny; ++j) {
      const uint64_t u = x | yset[j];
      fit_[fits] = j;
      fits += (kPopcnt ? __builtin_popcountll(u) : Popcount(u)) <= o_.k;
    }
    const int xa = pool_[xb + i].arrival;
    for (size_t f = 0; f < fits; ++f) {
      const uint32_t j = fit_[f];
      const uint64_t u = x | yset[j];
      size_t slot = shift == 64 ? 0 : (u * 0x9E3779B97F4A7C15ull) >> shift;
      while (slot_mark_[slot] == slot_stamp_ && slot_word_[slot] != u)
        slot = (slot + 1) & (slots - 1);
      if (slot_mark_[slot] == slot_stamp_) continue;  // a repeat
      slot_mark_[slot] = slot_stamp_;
      slot_word_[slot] = u;
      const uint32_t n = kPopcnt ? __builtin_popcountll(u) : Popcount(u);
      cand_[cands_++] = {std::max(xa, pool_[yb + j].arrival), n, i, j};
    }
  }
}

__attribute__((target("popcnt"))) void Mapper::GatherFast(uint32_t xb, uint32_t xe,
                                                          uint32_t yb, uint32_t ye, size_t w) {
  if (w == 1) {  // up to 64 distinct leaves: every node of the study at 8 cuts
    GatherWords<true>(xb, xe, yb, ye);
  } else {
    GatherSets<0, true>(xb, xe, yb, ye, w);
  }
}

void Mapper::GatherPortable(uint32_t xb, uint32_t xe, uint32_t yb, uint32_t ye, size_t w) {
  if (w == 1) {
    GatherWords<false>(xb, xe, yb, ye);
  } else {
    GatherSets<0, false>(xb, xe, yb, ye, w);
  }
}

void Mapper::Gather(uint32_t v) {
  static const bool have_popcnt = __builtin_cpu_supports("popcnt");
  const uint32_t a = net_.a[v], b = net_.b[v];
  const size_t w = Number(Begin(a), End(a), Begin(b), End(b));
  if (have_popcnt) {
    GatherFast(Begin(a), End(a), Begin(b), End(b), w);
  } else {
    GatherPortable(Begin(a), End(a), Begin(b), End(b), w);
  }
}

// Appends v's cut merged from operand cuts x and y (pool indices).
void Mapper::Add(uint32_t v, uint32_t x, uint32_t y, int arrival) {
  Cut c;
  int px[kMaxLutInputs], py[kMaxLutInputs];
  Merge(pool_[x], pool_[y], kMaxLutInputs, &c, px, py);
  c.arrival = arrival;
  const uint64_t tx = Stretch(func_[x].table, pool_[x].n, px);
  const uint64_t ty = Stretch(func_[y].table, pool_[y].n, py);
  pool_[end_[v]] = c;
  func_[end_[v]++] = {net_.op[v] == Netlist::kXor ? tx ^ ty : tx & ty,
                      NodeBit(v) | func_[x].inner | func_[y].inner};
}

// The best cuts_per_node candidates by (arrival, leaf count), then the cut
// of the node's own operands whatever its depth: the cheapest gate, which
// the cover takes where the node has slack.
void Mapper::Keep(uint32_t v) {
  order_.resize(cands_ + o_.cuts_per_node);
  for (uint32_t i = 0; i < cands_; ++i) {
    order_[i] = (static_cast<uint64_t>(cand_[i].arrival) << 35) |
                (static_cast<uint64_t>(cand_[i].n) << 32) | i;
  }
  uint64_t* const top = order_.data() + cands_;
  const size_t kept = RankFirst(order_.data(), cands_, o_.cuts_per_node, top);
  const uint32_t a = net_.a[v], b = net_.b[v];
  for (size_t r = 0; r < kept; ++r) {
    const Candidate& c = cand_[static_cast<uint32_t>(top[r])];
    Add(v, Begin(a) + c.xi, Begin(b) + c.yi, c.arrival);
  }
  const uint32_t ta = End(a) - 1, tb = End(b) - 1;  // the operands' trivial cuts
  Cut fanin;
  int px[kMaxLutInputs], py[kMaxLutInputs];
  if (!Merge(pool_[ta], pool_[tb], o_.k, &fanin, px, py)) return;
  for (uint32_t i = Begin(v); i < End(v); ++i)
    if (SameLeaves(pool_[i], fanin)) return;
  Add(v, ta, tb, std::max(label_[a], label_[b]));
}

// Room for node v's cuts: a free block for an XOR, else the arena's end.
void Mapper::Open(uint32_t v) {
  if (Recycled(v) && !free_.empty()) {
    begin_[v] = end_[v] = free_.back();
    free_.pop_back();
    return;
  }
  begin_[v] = end_[v] = static_cast<uint32_t>(pool_.size());
  pool_.resize(pool_.size() + o_.cuts_per_node + 2);  // priority, operands', trivial
  func_.resize(pool_.size());
}

// Node v's cuts complete: a packed list gives back the room it left; the
// XORs v was the last to read (and v, read by none) free their blocks.
void Mapper::Close(uint32_t v) {
  if (!Recycled(v)) {
    pool_.resize(End(v));
    func_.resize(End(v));
  } else if (last_read_[v] == kNone) {
    free_.push_back(Begin(v));
  }
  if (net_.op[v] != Netlist::kXor && net_.op[v] != Netlist::kAnd) return;
  const uint32_t a = net_.a[v], b = net_.b[v];
  if (Recycled(a) && last_read_[a] == v) free_.push_back(Begin(a));
  if (b != a && Recycled(b) && last_read_[b] == v) free_.push_back(Begin(b));
}

// Labels: the round in which each node's masked value is available (AND:
// the best cut's latest leaf + 1; XOR: free).
void Mapper::Label() {
  const size_t n = net_.op.size();
  label_.assign(n, 0);
  begin_.assign(n, 0);
  end_.assign(n, 0);
  last_read_.assign(n, kNone);
  for (uint32_t v = 0; v < n; ++v) {
    if (net_.op[v] == Netlist::kXor || net_.op[v] == Netlist::kAnd)
      last_read_[net_.a[v]] = last_read_[net_.b[v]] = v;
  }
  // Only Open grows the arena, before v's cuts are made; the rest reach
  // cuts by index, so growing may move them.
  pool_.clear();
  pool_.reserve(3 * n);
  func_.clear();
  func_.reserve(3 * n);
  free_.clear();
  for (uint32_t v = 0; v < n; ++v) {
    const Netlist::Op op = net_.op[v];
    Open(v);
    if (op == Netlist::kXor || op == Netlist::kAnd) {
      Gather(v);
      Keep(v);
      label_[v] = op == Netlist::kXor ? std::max(label_[net_.a[v]], label_[net_.b[v]])
                                      : 1 + pool_[Begin(v)].arrival;
    }
    Cut c;  // the trivial cut
    CutFunc f;
    if (op != Netlist::kZero && op != Netlist::kOne) {
      c.leaf[0] = v;
      c.n = 1;
      f.table = kVar[0];
    } else {
      f.table = op == Netlist::kOne ? ~uint64_t{0} : 0;
    }
    c.arrival = label_[v];
    pool_[end_[v]] = c;
    func_[end_[v]++] = f;
    Close(v);
  }
}

// True when no leaf is among the nodes the merges computed through: the
// carried table is then the cone's function.
bool Mapper::Carried(uint32_t i) const {
  uint64_t leaves = 0;
  for (int l = 0; l < pool_[i].n; ++l) leaves |= NodeBit(pool_[i].leaf[l]);
  return (leaves & func_[i].inner) == 0;
}

// The cone's function over the cut's leaves (leaf i = variable i), walked
// from the root down to the leaves.
uint64_t Mapper::Walk(uint32_t root, const Cut& c) {
  if (walk_stamp_.size() != net_.op.size()) {
    walk_stamp_.assign(net_.op.size(), 0);
    walk_table_.assign(net_.op.size(), 0);
  }
  NextStamp(walk_stamp_, net_.op.size(), epoch_);
  const uint32_t e = epoch_;
  auto set = [&](uint32_t v, uint64_t t) {
    walk_stamp_[v] = e;
    walk_table_[v] = t;
  };
  set(0, 0);
  set(1, ~uint64_t{0});
  for (int i = 0; i < c.n; ++i) set(c.leaf[i], kVar[i]);
  walk_stack_.assign(1, root);
  while (!walk_stack_.empty()) {
    const uint32_t v = walk_stack_.back();
    if (walk_stamp_[v] == e) {
      walk_stack_.pop_back();
      continue;
    }
    const uint32_t a = net_.a[v], b = net_.b[v];
    const bool has_a = walk_stamp_[a] == e, has_b = walk_stamp_[b] == e;
    if (!has_a || !has_b) {
      if (net_.op[v] == Netlist::kIn) return 0;  // not a cut of root: cannot happen
      if (!has_a) walk_stack_.push_back(a);
      if (!has_b) walk_stack_.push_back(b);
      continue;
    }
    const uint64_t ta = walk_table_[a], tb = walk_table_[b];
    set(v, net_.op[v] == Netlist::kXor ? ta ^ tb : ta & tb);
    walk_stack_.pop_back();
  }
  return walk_table_[root] & TableMask(c.n);
}

uint64_t Mapper::PricedTable(uint32_t root, uint32_t i) {
  return Carried(i) ? func_[i].table & TableMask(pool_[i].n) : Walk(root, pool_[i]);
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
    uint32_t best = kNone;
    uint64_t best_table = 0;
    int best_cost = 0;
    for (uint32_t i = Begin(v); i < End(v) - 1; ++i) {  // all but the trivial cut
      if (pool_[i].arrival + 1 > req[v]) continue;
      const uint64_t table = PricedTable(v, i);
      const int cost = 1 + Popcount(ProductSet(table, pool_[i].n));
      if (best == kNone || cost < best_cost) best = i, best_cost = cost, best_table = table;
    }
    const Cut& c = pool_[best];
    LutGate g;
    g.root = v;
    g.leaves.assign(c.leaf.begin(), c.leaf.begin() + c.n);
    g.table = best_table;
    for (uint32_t l : g.leaves) req[l] = std::min(req[l], req[v] - 1);
    m.gates.push_back(std::move(g));
  }
  std::reverse(m.gates.begin(), m.gates.end());
}

// Layers as scheduled: a gate opens one round after its latest leaf.
void Schedule(LutMap& m) {
  const Netlist& net = m.net;
  std::vector<int> avail(net.op.size(), 0);
  std::vector<uint32_t> gate_of(net.op.size(), kNone);
  for (size_t i = 0; i < m.gates.size(); ++i)
    gate_of[m.gates[i].root] = static_cast<uint32_t>(i);
  for (uint32_t v = 2; v < net.op.size(); ++v) {
    if (net.op[v] == Netlist::kXor) avail[v] = std::max(avail[net.a[v]], avail[net.b[v]]);
    if (net.op[v] != Netlist::kAnd || gate_of[v] == kNone) continue;
    LutGate& g = m.gates[gate_of[v]];
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

// A mask product as the sorted leaves it multiplies (kNone past the last).
using ProductKey = std::array<uint32_t, kMaxLutInputs>;
struct ProductHash {
  size_t operator()(const ProductKey& k) const {
    uint64_t h = 0;
    for (uint32_t x : k) h = (h ^ x) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
  }
};

// Each distinct product counted once, by size, and once more among the
// hybrid's if a masked gate needs it.
void Count(LutMap& m) {
  MarkRep3(m);
  absl::flat_hash_map<ProductKey, bool, ProductHash> seen;  // -> a masked gate needs it
  seen.reserve(3 * m.gates.size());
  size_t largest = 1;
  for (const LutGate& g : m.gates) {
    m.fig.rep3_gates += g.rep3;
    for (uint64_t s = ProductSet(g.table, static_cast<int>(g.leaves.size())); s != 0;
         s &= s - 1) {
      const int set = __builtin_ctzll(s);
      ProductKey key;
      key.fill(kNone);
      int n = 0;
      for (size_t i = 0; i < g.leaves.size(); ++i)
        if ((set >> i) & 1) key[n++] = g.leaves[i];
      const auto [it, fresh] = seen.try_emplace(key, false);
      if (fresh) ++m.fig.products_by_size[n];
      if (!g.rep3 && !it->second) {
        it->second = true;
        ++m.fig.hybrid_products;
      }
      largest = std::max(largest, static_cast<size_t>(n));
    }
  }
  m.fig.products = seen.size();
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
  std::vector<uint32_t> out;
  for (uint64_t s = ProductSet(table, n); s != 0; s &= s - 1)
    out.push_back(static_cast<uint32_t>(__builtin_ctzll(s)));
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

std::vector<LutCut> EnumerateCuts(const Netlist& net, const LutOptions& o) {
  Mapper mapper(net, o, /*keep_all=*/true);
  mapper.Label();
  std::vector<LutCut> out;
  for (uint32_t v = 2; v < net.op.size(); ++v) {
    if (net.op[v] != Netlist::kXor && net.op[v] != Netlist::kAnd) continue;
    for (uint32_t i = mapper.Begin(v); i < mapper.End(v) - 1; ++i) {  // not the trivial cut
      const Cut& c = mapper.CutAt(i);
      LutCut lc;
      lc.root = v;
      lc.leaves.assign(c.leaf.begin(), c.leaf.begin() + c.n);
      lc.carried = mapper.Carried(i);
      lc.merged_table = mapper.FuncAt(i).table & TableMask(c.n);
      lc.table = mapper.PricedTable(v, i);
      out.push_back(std::move(lc));
    }
  }
  return out;
}

namespace {

// A gate's share of f(x) from the opened m's and the products lambda_S,
// as each party computes it (here all three at once, in the clear).
uint64_t GateValue(const LutGate& g, const std::vector<uint64_t>& mv,
                   const std::vector<uint64_t>& lam) {
  const int n = static_cast<int>(g.leaves.size());
  const uint64_t allowed = ProductSet(g.table, n);
  const uint64_t anf = Anf(g.table, n);
  uint64_t out = 0;
  for (uint32_t t = 0; t < (1u << n); ++t) {
    if (!((anf >> t) & 1)) continue;
    for (uint32_t s = t;; s = (s - 1) & t) {  // every S within T
      uint64_t term = ~uint64_t{0};
      for (int i = 0; i < n; ++i) {
        if (((t & ~s) >> i) & 1) term &= mv[g.leaves[i]];
      }
      if (__builtin_popcount(s) >= 2 && !((allowed >> s) & 1))
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
  std::vector<uint32_t> gate_of(net.op.size(), kNone);
  for (size_t i = 0; i < m.gates.size(); ++i)
    gate_of[m.gates[i].root] = static_cast<uint32_t>(i);
  for (uint32_t v = 2; v < net.op.size(); ++v) {
    if (net.op[v] == Netlist::kIn) {
      lam[v] = in[net.a[v]];  // lambda_x = x, m_x = 0
      open[v] = true;
    } else if (net.op[v] == Netlist::kXor) {
      mv[v] = mv[net.a[v]] ^ mv[net.b[v]];
      lam[v] = lam[net.a[v]] ^ lam[net.b[v]];
      open[v] = open[net.a[v]] && open[net.b[v]];
    } else if (gate_of[v] != kNone) {
      const LutGate& g = m.gates[gate_of[v]];
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
