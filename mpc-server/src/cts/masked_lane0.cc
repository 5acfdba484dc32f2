// The one-lane walk of EvaluateMaskedAll (masked_run.h): a lone request's
// job, its values one byte a slot (m in bit 0, the two share components in
// bits 1 and 2), so that a slot's three components are one load and a
// Run's values fit in the cache (a spliced reply's 70,567 slots: 69 KiB
// against 1.6 MiB of words). It computes bit 0 of every word the word walk
// (masked_eval.cc) computes, from the same PRSS draws, and the message
// carries only bit 0 of a one-lane job's words (Packing), so both walks
// send the same messages. It writes its bits of a message straight into
// the packed words (Message::px, py, po from word at / oat: item i at bit
// i % 64 of word i / 64, the word walk's Packing of a one-lane job) and
// reads pz and popened the same way.
#include <algorithm>
#include <cstdint>

#include "cts/masked_run.h"

namespace kmpc::cts::masked_run {
namespace {

constexpr uint8_t kM = 1;           // bit 0: the public m
constexpr uint8_t kLambdaBits = 6;  // bits 1, 2: s_0, s_1

// Component c (0 or 1) of a byte as a word's bit 0, and back.
inline uint64_t Bit(uint8_t v, int c) { return (v >> (1 + c)) & 1; }
inline uint8_t Comps(uint64_t s0, uint64_t s1) {
  return static_cast<uint8_t>(((s0 & 1) << 1) | ((s1 & 1) << 2));
}

// A product operand's byte (masked.h kProductRef): its lambda bits.
inline uint8_t Lambda(const JobState& j, uint32_t r) {
  return (r & Mp::kProductRef) ? j.p1[r & ~Mp::kProductRef] : (j.v1[r] & kLambdaBits);
}

// A masked gate's share (masked.h) as lambda bits: its form's table of
// the terms whose c_S(m) is 1 where the leaves' opened bits are x
// (MaskedProgram::form_on), each adding its lambda_S; pub_bits: the
// components that hold public constants (share/replicated.h
// HoldsPublicIn), which the empty S's term adds.
uint8_t GateShare(const Mp& p, const Mp::Gate& g, const JobState& j, uint8_t pub_bits) {
  const Mp::Form& f = p.forms[g.form];
  const uint32_t* leaves = p.leaves.data() + g.leaf_at;
  const uint32_t* products = p.gate_products.data() + g.product_at;
  const Mp::Term* terms = p.terms.data() + f.term_at;
  uint32_t x = 0;
  for (uint32_t i = 0; i < f.n; ++i) x |= static_cast<uint32_t>(j.v1[leaves[i]] & kM) << i;
  uint8_t a = 0;
  for (uint64_t on = p.form_on[64 * size_t{g.form} + (x & 63)]; on != 0; on &= on - 1) {
    const Mp::Term& tm = terms[__builtin_ctzll(on)];
    a ^= tm.s == 0 ? pub_bits : Lambda(j, LambdaRef(tm, leaves, products));
  }
  return a;
}

// Item i of a job's packed bits from word `at` on: set (after the words
// are zeroed) or read.
class PackedBits {
 public:
  PackedBits(uint64_t* w, size_t items) : w_(w) { std::fill_n(w, (items + 63) / 64, 0); }
  void Put(size_t i, uint64_t bit) { w_[i >> 6] |= bit << (i & 63); }

 private:
  uint64_t* w_;
};
inline uint64_t GetPacked(const uint64_t* w, size_t i) { return (w[i >> 6] >> (i & 63)) & 1; }

uint8_t PubBits(int party) {
  return Comps(share::HoldsPublicIn(party, 0), share::HoldsPublicIn(party, 1));
}

// XORs (dst, a, b) of the whole bytes, or (LAMBDAS) of the lambda bits
// only, dst's m kept.
template <bool LAMBDAS>
void Xors(const std::vector<uint32_t>& xs, JobState& j) {
  uint8_t* v = j.v1.data();
  for (size_t k = 0; k < xs.size(); k += 3) {
    const uint8_t s = v[xs[k + 1]] ^ v[xs[k + 2]];
    v[xs[k]] = LAMBDAS ? static_cast<uint8_t>((v[xs[k]] & kM) | (s & kLambdaBits)) : s;
  }
}

}  // namespace

void Lane0Load(JobState& j, Buffers& bufs) {
  const Mp& p = *j.job->program;
  bufs.bytes.push_back(&j.v1);
  bufs.bytes.push_back(&j.p1);
  j.v1.assign(p.slots, 0);
  j.p1.assign(p.products, 0);
  j.v1[1] = kM;  // slot 1: the constant 1
  for (size_t i = 0; i < p.inputs; ++i) {
    const uint32_t s = p.input_slot[i];
    if (s == ~uint32_t{0}) continue;
    j.v1[s] = static_cast<uint8_t>((j.v1[s] & kM) | Comps(j.job->in[0][i], j.job->in[1][i]));
  }
  if (!p.round.empty()) Xors<false>(p.round[0].xors, j);
}

void Lane0Lambdas(JobState& j, const Mp::Round& rd, protocol::Prss& prss, Message& msg) {
  const size_t n = rd.draws.size();
  if (n != 0) {
    // A word a draw, as the word walk draws them: the same PRSS stream.
    prss.RandomShares(reinterpret_cast<uint8_t*>(msg.r0.data()),
                      reinterpret_cast<uint8_t*>(msg.r1.data()), 8 * n);
    for (size_t i = 0; i < n; ++i) {
      uint8_t& d = j.v1[rd.draws[i]];
      d = static_cast<uint8_t>((d & kM) | Comps(msg.r0[i], msg.r1[i]));
    }
  }
  Xors<true>(rd.lambda_xors, j);
}

void Lane0Gather(JobState& j, const Mp::Round& rd, int party, Message& msg, size_t at,
                 size_t oat) {
  const size_t np = rd.products.size() / 3, ands = np + rd.rep3.size() / 4;
  PackedBits x0(msg.px[0].data() + at, ands), x1(msg.px[1].data() + at, ands),
      y0(msg.py[0].data() + at, ands), y1(msg.py[1].data() + at, ands);
  for (size_t i = 0; i < np; ++i) {
    const uint8_t a = Lambda(j, rd.products[3 * i + 1]), b = Lambda(j, rd.products[3 * i + 2]);
    x0.Put(i, Bit(a, 0));
    x1.Put(i, Bit(a, 1));
    y0.Put(i, Bit(b, 0));
    y1.Put(i, Bit(b, 1));
  }
  const uint64_t pub0 = share::HoldsPublicIn(party, 0) ? 1 : 0;
  const uint64_t pub1 = share::HoldsPublicIn(party, 1) ? 1 : 0;
  for (size_t i = np, k = 0; k < rd.rep3.size(); k += 4, ++i) {
    const uint8_t a = j.v1[rd.rep3[k + 1]], b = j.v1[rd.rep3[k + 2]];
    const uint64_t na = (a & kM) ^ (rd.rep3[k + 3] & 1), nb = (b & kM) ^ ((rd.rep3[k + 3] >> 1) & 1);
    x0.Put(i, Bit(a, 0) ^ (pub0 & na));
    x1.Put(i, Bit(a, 1) ^ (pub1 & na));
    y0.Put(i, Bit(b, 0) ^ (pub0 & nb));
    y1.Put(i, Bit(b, 1) ^ (pub1 & nb));
  }
  const Mp& p = *j.job->program;
  const uint8_t pub_bits = PubBits(party);
  PackedBits o0(msg.po[0].data() + oat, rd.opens.size()), o1(msg.po[1].data() + oat, rd.opens.size());
  for (size_t k = 0; k < rd.opens.size(); ++k) {
    const Mp::Gate& g = p.gates[rd.opens[k]];
    const uint8_t o = GateShare(p, g, j, pub_bits) ^ (j.v1[g.root] & kLambdaBits);
    o0.Put(k, Bit(o, 0));
    o1.Put(k, Bit(o, 1));
  }
}

void Lane0Scatter(JobState& j, const Mp::Round& rd, int party, const Message& msg, size_t at,
                  size_t oat) {
  const uint64_t *z0 = msg.pz[0].data() + at, *z1 = msg.pz[1].data() + at;
  const size_t np = rd.products.size() / 3;
  for (size_t i = 0; i < np; ++i)
    j.p1[rd.products[3 * i]] = Comps(GetPacked(z0, i), GetPacked(z1, i));
  for (size_t i = np, k = 0; k < rd.rep3.size(); k += 4, ++i) {
    const uint8_t m = rd.rep3[k + 3] & 4 ? kM : 0;
    j.v1[rd.rep3[k]] = static_cast<uint8_t>(m | Comps(GetPacked(z0, i), GetPacked(z1, i)));
  }
  const Mp& p = *j.job->program;
  const uint64_t* opened = msg.popened.data() + oat;
  for (size_t k = 0; k < rd.opens.size(); ++k) {
    uint8_t& d = j.v1[p.gates[rd.opens[k]].root];
    d = static_cast<uint8_t>((d & kLambdaBits) | GetPacked(opened, k));
  }
  const uint8_t pub_bits = PubBits(party);
  for (uint32_t g : rd.local) {
    const uint32_t root = p.gates[g].root;
    j.v1[root] &= kLambdaBits;  // m = 0 before the share, as the word walk
    j.v1[root] = GateShare(p, p.gates[g], j, pub_bits);
  }
  Xors<false>(rd.xors, j);
}

void Lane0Outputs(JobState& j, int party) {
  const Mp& p = *j.job->program;
  for (int c = 0; c < 2; ++c) {
    const uint64_t pub = share::HoldsPublicIn(party, c) ? 1 : 0;
    for (size_t i = 0; i < p.outputs; ++i) {
      const uint8_t v = j.v1[p.output_slot[i]];
      j.job->out[c][i] = Bit(v, c) ^ (pub & v & kM);
    }
  }
}

}  // namespace kmpc::cts::masked_run
