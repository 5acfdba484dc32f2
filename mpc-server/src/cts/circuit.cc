#include "cts/circuit.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "protocol/verify.h"
#include "share/replicated.h"
#include "util/transpose.h"

namespace kmpc::cts {
namespace {

constexpr uint32_t kNoSlot = std::numeric_limits<uint32_t>::max();

// Slots reused once their value's last reader has run.
class SlotPool {
 public:
  explicit SlotPool(uint32_t reserved) : next_(reserved) {}
  uint32_t Take() {
    if (free_.empty()) return next_++;
    const uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void Give(uint32_t s) { free_.push_back(s); }
  uint32_t size() const { return next_; }

 private:
  uint32_t next_;
  std::vector<uint32_t> free_;
};

}  // namespace

Circuit::Circuit() {
  gates_.push_back({kConst, 0, 0});
  gates_.push_back({kConst, 1, 0});
  depth_.assign(2, 0);
}

Wire Circuit::Add(Op op, Wire a, Wire b, int depth) {
  gates_.push_back({op, a, b});
  depth_.push_back(depth);
  return static_cast<Wire>(gates_.size() - 1);
}

Wire Circuit::Input() {
  gates_.push_back({kIn, static_cast<Wire>(inputs_++), 0});
  depth_.push_back(0);
  return static_cast<Wire>(gates_.size() - 1);
}

Bits Circuit::Inputs(size_t n) {
  Bits b(n);
  for (auto& w : b) w = Input();
  return b;
}

Bits Circuit::Constant(absl::Span<const uint8_t> bytes) {
  Bits b(8 * bytes.size());
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = ((bytes[i / 8] >> (i % 8)) & 1) ? kOne : kZero;
  }
  return b;
}

Wire Circuit::Xor(Wire a, Wire b) {
  if (a == kZero) return b;
  if (b == kZero) return a;
  if (a == b) return kZero;
  if (a == kOne && b == kOne) return kZero;
  return Add(kXorOp, a, b, std::max(depth_[a], depth_[b]));
}

Wire Circuit::And(Wire a, Wire b) {
  if (a == kZero || b == kZero) return kZero;
  if (a == kOne) return b;
  if (b == kOne) return a;
  if (a == b) return a;
  return Add(kAndOp, a, b, 1 + std::max(depth_[a], depth_[b]));
}

Bits Circuit::Xor(const Bits& a, const Bits& b) {
  Bits r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = Xor(a[i], b[i]);
  return r;
}

std::vector<bool> Circuit::Live() const {
  std::vector<bool> live(gates_.size(), false);
  for (Wire w : outputs_) live[w] = true;
  for (size_t g = gates_.size(); g-- > 2;) {
    if (!live[g] || (gates_[g].op != kXorOp && gates_[g].op != kAndOp)) continue;
    live[gates_[g].a] = true;
    live[gates_[g].b] = true;
  }
  return live;
}

// Evaluation order: the inputs (group 0); then per depth d its AND layer
// (one group: all read before any is written) and its XORs (one group
// each, in creation order, which is topological). pos: a live gate's
// group; last: the group of its last reader (outputs: never).
Circuit::Schedule Circuit::MakeSchedule() const {
  const std::vector<bool> live = Live();
  Schedule s;
  for (size_t g = 2; g < gates_.size(); ++g) {
    if (live[g]) s.depth = std::max(s.depth, static_cast<int>(depth_[g]));
  }
  s.and_at.resize(s.depth + 1);
  s.xor_at.resize(s.depth + 1);
  s.live_input.assign(inputs_, false);
  for (size_t g = 2; g < gates_.size(); ++g) {
    if (!live[g]) continue;
    if (gates_[g].op == kAndOp) s.and_at[depth_[g]].push_back(static_cast<Wire>(g));
    if (gates_[g].op == kXorOp) s.xor_at[depth_[g]].push_back(static_cast<Wire>(g));
  }
  s.pos.assign(gates_.size(), 0);
  s.last.assign(gates_.size(), 0);
  uint64_t at = 1;
  for (int d = 0; d <= s.depth; ++d) {
    for (Wire g : s.and_at[d]) s.pos[g] = at;
    if (!s.and_at[d].empty()) ++at;
    for (Wire g : s.xor_at[d]) s.pos[g] = at++;
  }
  for (size_t g = 2; g < gates_.size(); ++g) {
    if (!live[g]) continue;
    if (gates_[g].op == kIn) s.live_input[gates_[g].a] = true;
    if (gates_[g].op != kXorOp && gates_[g].op != kAndOp) continue;
    s.last[gates_[g].a] = std::max(s.last[gates_[g].a], s.pos[g]);
    s.last[gates_[g].b] = std::max(s.last[gates_[g].b], s.pos[g]);
  }
  for (Wire w : outputs_) s.last[w] = std::numeric_limits<uint64_t>::max();
  return s;
}

// Slots: a group takes its gates' slots, then gives back those of the
// values it read last, so no group writes a slot it still reads.
Program Circuit::Compile() const {
  const Schedule s = MakeSchedule();
  Program p;
  p.inputs = inputs_;
  p.outputs = outputs_.size();
  p.depth = s.depth;
  SlotPool pool(2);
  std::vector<uint32_t> slot(gates_.size(), kNoSlot);
  slot[kZero] = 0;
  slot[kOne] = 1;
  p.input_slot.assign(inputs_, kNoSlot);
  for (size_t g = 2; g < gates_.size(); ++g) {
    if (gates_[g].op == kIn && s.live_input[gates_[g].a]) {
      slot[g] = pool.Take();
      p.input_slot[gates_[g].a] = slot[g];
    }
  }
  // Once per value: several readers of one AND group share its position.
  auto release = [&](Wire w, uint64_t now) {
    if (w > kOne && s.last[w] == now && slot[w] != kNoSlot) {
      pool.Give(slot[w]);
      slot[w] = kNoSlot;
    }
  };
  p.layers.resize(s.depth + 1);
  for (int d = 0; d <= s.depth; ++d) {
    for (Wire g : s.and_at[d]) {
      slot[g] = pool.Take();
      p.layers[d].ands.insert(p.layers[d].ands.end(),
                              {slot[g], slot[gates_[g].a], slot[gates_[g].b]});
    }
    for (Wire g : s.and_at[d]) {
      release(gates_[g].a, s.pos[g]);
      release(gates_[g].b, s.pos[g]);
    }
    for (Wire g : s.xor_at[d]) {
      slot[g] = pool.Take();
      p.layers[d].xors.insert(p.layers[d].xors.end(),
                              {slot[g], slot[gates_[g].a], slot[gates_[g].b]});
      release(gates_[g].a, s.pos[g]);
      release(gates_[g].b, s.pos[g]);
    }
    p.ands += s.and_at[d].size();
    p.xors += s.xor_at[d].size();
  }
  for (Wire w : outputs_) p.output_slot.push_back(slot[w]);
  p.slots = pool.size();
  return p;
}

absl::Status ClearEngine::AndLayer(std::array<const uint64_t*, 2> x,
                                   std::array<const uint64_t*, 2> y,
                                   std::array<uint64_t*, 2> z, size_t n) {
  for (size_t i = 0; i < n; ++i) z[0][i] = x[0][i] & y[0][i];
  return absl::OkStatus();
}

uint64_t ShareEngine::OneWord(int c) const {
  return share::HoldsPublicIn(ctx_.party(), c) ? ~uint64_t{0} : 0;
}

bool ShareEngine::Stage(size_t n, Operands* out) {
  protocol::MulLog* log = ctx_.log();
  if (log == nullptr) return false;
  uint64_t* w[5];
  const size_t at = log->AppendAnd(n, 64, w);
  *out = Operands{{w[0], w[1]}, {w[2], w[3]}, {w[4], log->AndZ1At(at)}};
  staged_ = true;
  return true;
}

absl::Status ShareEngine::AndLayer(std::array<const uint64_t*, 2> x,
                                   std::array<const uint64_t*, 2> y,
                                   std::array<uint64_t*, 2> z, size_t n) {
  if (staged_) {
    staged_ = false;
    return ctx_.AndUnlogged(x[0], x[1], y[0], y[1], z[0], z[1], n);
  }
  return ctx_.And(absl::MakeConstSpan(x[0], n), absl::MakeConstSpan(x[1], n),
                  absl::MakeConstSpan(y[0], n), absl::MakeConstSpan(y[1], n),
                  absl::MakeSpan(z[0], n), absl::MakeSpan(z[1], n));
}

// After the products were read (a check rewinds the log).
absl::Status ShareEngine::EndLayer() {
  protocol::MulLog* log = ctx_.log();
  if (log != nullptr && log->and_words() >= verify_words_) {
    return protocol::Verifier::Verify(ctx_, *log);
  }
  return absl::OkStatus();
}

namespace {

// Scratch of one evaluation: every job's slot values and an AND layer's
// operands; wiped on destruction (they hold shares). A job's slot s holds
// its comps x wn words contiguously, component c at [(s * comps + c) * wn,
// + wn), so one pass over a gate list serves both components.
struct Scratch {
  std::vector<std::vector<uint64_t>> v;
  std::array<std::vector<uint64_t>, 2> x, y, z;
  ~Scratch() {
    for (auto& b : v) share::Wipe(b.data(), 8 * b.size());
    for (auto* a : {&x, &y, &z}) {
      for (auto& b : *a) share::Wipe(b.data(), 8 * b.capacity());
    }
  }
};

// b holding at least n words (contents unspecified; its size is its
// capacity, so a layer larger than the last is no zero-fill); storage it
// leaves is wiped first (an AND layer's operands are shares).
void Fit(std::vector<uint64_t>& b, size_t n) {
  if (n > b.capacity()) {
    share::Wipe(b.data(), 8 * b.capacity());
    b.clear();
    b.reserve(std::max(n, 2 * b.capacity()));
  }
  if (b.size() < n) b.resize(b.capacity());
}

// Lanes of a job's last word when they do not fill it (a shape of 40
// logins: 40; of 100: 36), else 0. That word of each gate goes into the
// layer's packed bit string as that many bits, gate after gate, a gate
// straddling two words where it falls: on the ring and in the malicious
// check's log a lane costs a bit per AND, and no dead lane is sent or
// checked (a batch of shapes of 30, 11 and 3 logins: 44 bits per three
// gates, not three words).
size_t TailBits(const Job& j) {
  const size_t tail = j.lanes % 64;
  if (j.lanes == 0 || tail == 0 || j.wn == 0 || j.lanes <= 64 * (j.wn - 1)) return 0;
  return tail;
}

// Two words as one register (SSE2, NEON: the GCC / Clang vector
// extension); memcpy in and out, so no alignment is assumed.
typedef uint64_t Words2 __attribute__((vector_size(16)));

// N words from s to d (distinct), N known at compile time.
template <size_t N>
inline void CopyWords(uint64_t* d, const uint64_t* s) {
  if constexpr (N >= 2) {
    Words2 t;
    std::memcpy(&t, s, 16);
    std::memcpy(d, &t, 16);
    CopyWords<N - 2>(d + 2, s + 2);
  } else if constexpr (N == 1) {
    d[0] = s[0];
  }
}

// d = a ^ b over N words (d is a, b or neither, never a partial overlap).
template <size_t N>
inline void XorWords(uint64_t* d, const uint64_t* a, const uint64_t* b) {
  if constexpr (N >= 2) {
    Words2 x, y;
    std::memcpy(&x, a, 16);
    std::memcpy(&y, b, 16);
    x ^= y;
    std::memcpy(d, &x, 16);
    XorWords<N - 2>(d + 2, a + 2, b + 2);
  } else if constexpr (N == 1) {
    d[0] = a[0] ^ b[0];
  }
}

// The gate walks of an unpacked job, with C components of WN words per
// slot known at compile time, so a gate's words move as a few register
// loads and stores rather than a library call per gate; WN = 0: wn given
// at run time, plain loops.
template <int C, size_t WN>
struct Walk {
  // Operands of the AND gates (dst, a, b triples) into x[c] / y[c] from
  // word `at` on: each gate's full words (all wn, or the first wn - 1
  // when `tail`: the last goes into the packed string, TailBits).
  static void Gather(const std::vector<uint32_t>& ands, const uint64_t* v, size_t wn_rt,
                     bool tail, std::array<uint64_t*, 2> x, std::array<uint64_t*, 2> y,
                     size_t at) {
    const size_t wn = WN != 0 ? WN : wn_rt, cw = C * wn, full = wn - tail;
    for (size_t g = 0; g < ands.size(); g += 3, at += full) {
      const uint64_t* a = v + ands[g + 1] * cw;
      const uint64_t* b = v + ands[g + 2] * cw;
      for (int c = 0; c < C; ++c) {
        if constexpr (WN != 0) {
          if (tail) {
            CopyWords<WN - 1>(x[c] + at, a + c * WN);
            CopyWords<WN - 1>(y[c] + at, b + c * WN);
          } else {
            CopyWords<WN>(x[c] + at, a + c * WN);
            CopyWords<WN>(y[c] + at, b + c * WN);
          }
        } else {
          for (size_t w = 0; w < full; ++w) {
            x[c][at + w] = a[c * wn + w];
            y[c][at + w] = b[c * wn + w];
          }
        }
      }
    }
  }

  // The products from z[c] (word `at` on, as Gather) into the gates' slots.
  static void Scatter(const std::vector<uint32_t>& ands, uint64_t* v, size_t wn_rt,
                      bool tail, std::array<const uint64_t*, 2> z, size_t at) {
    const size_t wn = WN != 0 ? WN : wn_rt, cw = C * wn, full = wn - tail;
    for (size_t g = 0; g < ands.size(); g += 3, at += full) {
      uint64_t* d = v + ands[g] * cw;
      for (int c = 0; c < C; ++c) {
        if constexpr (WN != 0) {
          if (tail) {
            CopyWords<WN - 1>(d + c * WN, z[c] + at);
          } else {
            CopyWords<WN>(d + c * WN, z[c] + at);
          }
        } else {
          for (size_t w = 0; w < full; ++w) d[c * wn + w] = z[c][at + w];
        }
      }
    }
  }

  // wn words from s to d.
  static void Copy(uint64_t* d, const uint64_t* s, size_t wn_rt) {
    if constexpr (WN != 0) {
      CopyWords<WN>(d, s);
    } else {
      std::copy_n(s, wn_rt, d);
    }
  }

  // The XOR gates, in order (a gate may read an earlier one's slot; its
  // own slot is neither operand: Compile takes it before releasing them).
  static void Xors(const std::vector<uint32_t>& xors, uint64_t* v, size_t wn_rt) {
    const size_t cw = C * (WN != 0 ? WN : wn_rt);
    for (size_t k = 0; k < xors.size(); k += 3) {
      uint64_t* d = v + xors[k] * cw;
      const uint64_t* a = v + xors[k + 1] * cw;
      const uint64_t* b = v + xors[k + 2] * cw;
      if constexpr (WN != 0) {
        XorWords<C * WN>(d, a, b);
      } else {
        for (size_t w = 0; w < cw; ++w) d[w] = a[w] ^ b[w];
      }
    }
  }
};

// Calls f with the Walk specialised on the job's wn (1..8; the run-time
// one past that) and components (2 on shares, 1 in the clear).
template <int C, typename F>
void WithWalk(size_t wn, F&& f) {
  switch (wn) {
    case 1: return f(Walk<C, 1>());
    case 2: return f(Walk<C, 2>());
    case 3: return f(Walk<C, 3>());
    case 4: return f(Walk<C, 4>());
    case 5: return f(Walk<C, 5>());
    case 6: return f(Walk<C, 6>());
    case 7: return f(Walk<C, 7>());
    case 8: return f(Walk<C, 8>());
    default: return f(Walk<C, 0>());
  }
}

template <typename F>
void WithWalk(int comps, size_t wn, F&& f) {
  if (comps == 2) {
    WithWalk<2>(wn, f);
  } else {
    WithWalk<1>(wn, f);
  }
}

// AND layer d of every job that has one, as one engine call (one message):
// the jobs' full words (wn per gate, or wn - 1 with a TailBits word), in
// job and gate order, then the packed bit string of their last words
// (TailBits bits per gate), zero past its end. AND is bitwise, so which
// bit carries which gate changes nothing but the count of words; every
// party lays it out alike (from the programs and lane counts only).
absl::Status RunAndLayer(absl::Span<const Job> jobs, size_t d, Engine& e, Scratch& s) {
  const int comps = e.comps();
  size_t words = 0, packed_bits = 0;
  for (const Job& j : jobs) {
    if (d >= j.program->layers.size()) continue;
    const size_t gates = j.program->layers[d].ands.size() / 3, tail = TailBits(j);
    words += gates * (j.wn - (tail != 0));
    packed_bits += gates * tail;
  }
  const size_t total = words + (packed_bits + 63) / 64;
  if (total == 0) return absl::OkStatus();
  const size_t c1 = comps - 1;
  Operands ops;
  if (!e.Stage(total, &ops)) {
    for (int c = 0; c < comps; ++c) {
      Fit(s.x[c], total);
      Fit(s.y[c], total);
      Fit(s.z[c], total);
    }
    ops = Operands{{s.x[0].data(), s.x[c1].data()},
                   {s.y[0].data(), s.y[c1].data()},
                   {s.z[0].data(), s.z[c1].data()}};
  }
  // Packed words are OR-ed together; full ones are all written.
  for (int c = 0; c < comps; ++c) {
    std::fill(ops.x[c] + words, ops.x[c] + total, 0);
    std::fill(ops.y[c] + words, ops.y[c] + total, 0);
  }
  const std::array<uint64_t*, 2> x = ops.x, y = ops.y, z = ops.z;
  size_t at = 0, bit = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (d >= jobs[k].program->layers.size()) continue;
    const std::vector<uint32_t>& ands = jobs[k].program->layers[d].ands;
    const uint64_t* v = s.v[k].data();
    const size_t wn = jobs[k].wn, cw = comps * wn, tail = TailBits(jobs[k]);
    WithWalk(comps, wn, [&](auto walk) { walk.Gather(ands, v, wn, tail != 0, x, y, at); });
    at += ands.size() / 3 * (wn - (tail != 0));
    if (tail == 0) continue;
    for (size_t g = 0; g < ands.size(); g += 3, bit += tail) {
      for (int c = 0; c < comps; ++c) {
        PutBits(x[c] + words, bit, tail, v[ands[g + 1] * cw + c * wn + wn - 1]);
        PutBits(y[c] + words, bit, tail, v[ands[g + 2] * cw + c * wn + wn - 1]);
      }
    }
  }
  absl::Status st = e.AndLayer({x[0], x[1]}, {y[0], y[1]}, z, total);
  if (!st.ok()) return st;
  at = 0;
  bit = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (d >= jobs[k].program->layers.size()) continue;
    const std::vector<uint32_t>& ands = jobs[k].program->layers[d].ands;
    uint64_t* v = s.v[k].data();
    const size_t wn = jobs[k].wn, cw = comps * wn, tail = TailBits(jobs[k]);
    WithWalk(comps, wn,
             [&](auto walk) { walk.Scatter(ands, v, wn, tail != 0, {z[0], z[1]}, at); });
    at += ands.size() / 3 * (wn - (tail != 0));
    if (tail == 0) continue;
    for (size_t g = 0; g < ands.size(); g += 3, bit += tail) {
      for (int c = 0; c < comps; ++c)
        v[ands[g] * cw + c * wn + wn - 1] = GetBits(z[c] + words, bit, tail);
    }
  }
  return e.EndLayer();
}

// Sizes checked; the constants and inputs in their slots.
absl::Status Load(absl::Span<const Job> jobs, Engine& e, Scratch& s) {
  const int comps = e.comps();
  s.v.resize(jobs.size());
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = jobs[k];
    const Program& p = *j.program;
    for (int c = 0; c < comps; ++c) {
      if (j.in[c].size() != p.inputs * j.wn || j.out[c].size() != p.outputs * j.wn) {
        return absl::InvalidArgumentError("cts::Evaluate: wrong input or output size");
      }
    }
    const size_t wn = j.wn, cw = comps * wn;
    s.v[k].assign(p.slots * cw, 0);
    uint64_t* v = s.v[k].data();
    for (int c = 0; c < comps; ++c) {
      std::fill_n(v + (comps + c) * wn, wn, e.OneWord(c));
      const uint64_t* in = j.in[c].data();
      WithWalk(comps, wn, [&](auto walk) {
        for (size_t i = 0; i < p.inputs; ++i) {
          if (p.input_slot[i] == kNoSlot) continue;
          walk.Copy(v + p.input_slot[i] * cw + c * wn, in + i * wn, wn);
        }
      });
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EvaluateAll(absl::Span<const Job> jobs, Engine& e) {
  Scratch s;
  if (absl::Status st = Load(jobs, e, s); !st.ok()) return st;
  const int comps = e.comps();
  size_t layers = 0;
  for (const Job& j : jobs) layers = std::max(layers, j.program->layers.size());
  for (size_t d = 0; d < layers; ++d) {
    if (absl::Status st = RunAndLayer(jobs, d, e, s); !st.ok()) return st;
    for (size_t k = 0; k < jobs.size(); ++k) {
      if (d >= jobs[k].program->layers.size()) continue;
      const std::vector<uint32_t>& xors = jobs[k].program->layers[d].xors;
      uint64_t* v = s.v[k].data();
      const size_t wn = jobs[k].wn;
      WithWalk(comps, wn, [&](auto walk) { walk.Xors(xors, v, wn); });
    }
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = jobs[k];
    const size_t wn = j.wn, cw = comps * wn;
    const uint64_t* v = s.v[k].data();
    for (int c = 0; c < comps; ++c) {
      uint64_t* out = j.out[c].data();
      WithWalk(comps, wn, [&](auto walk) {
        for (size_t i = 0; i < j.program->outputs; ++i)
          walk.Copy(out + i * wn, v + j.program->output_slot[i] * cw + c * wn, wn);
      });
    }
  }
  return absl::OkStatus();
}

absl::Status Evaluate(const Program& p, Engine& e, size_t wn,
                      std::array<absl::Span<const uint64_t>, 2> in,
                      std::array<absl::Span<uint64_t>, 2> out) {
  const Job job{&p, wn, in, out};
  return EvaluateAll(absl::MakeConstSpan(&job, 1), e);
}

// Eight lanes at a time (a group of 8 never straddles a word): byte k of
// each as one 8 x 8 bit matrix, transposed into wires 8k .. 8k + 7.
std::vector<uint64_t> PackLanes(absl::Span<const absl::Span<const uint8_t>> lanes,
                                size_t wn) {
  const size_t n = lanes.empty() ? 0 : lanes[0].size();
  std::vector<uint64_t> words(8 * n * wn, 0);
  for (size_t l0 = 0; l0 < lanes.size(); l0 += 8) {
    const size_t m = std::min<size_t>(8, lanes.size() - l0);
    uint64_t* base = words.data() + l0 / 64;
    const size_t sh = l0 % 64;
    for (size_t k = 0; k < n; ++k) {
      uint64_t x = 0;
      for (size_t i = 0; i < m; ++i) x |= uint64_t{lanes[l0 + i][k]} << (8 * i);
      x = util::Transpose8(x);
      for (size_t j = 0; j < 8; ++j) base[(8 * k + j) * wn] |= ((x >> (8 * j)) & 0xff) << sh;
    }
  }
  return words;
}

std::vector<uint8_t> UnpackLane(absl::Span<const uint64_t> words, size_t wn,
                                size_t lane) {
  std::vector<uint8_t> out(words.size() / wn / 8, 0);
  for (size_t i = 0; i < 8 * out.size(); ++i) {
    const uint64_t bit = (words[i * wn + lane / 64] >> (lane % 64)) & 1;
    out[i / 8] |= static_cast<uint8_t>(bit << (i % 8));
  }
  return out;
}

}  // namespace kmpc::cts
