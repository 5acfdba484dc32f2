// What EvaluateMaskedAll's two walks share (masked.h): masked_eval.cc
// runs the messages and the jobs of whole lane words, masked_lane0.cc a
// lone request's one-lane job, whose values it holds one byte each.
// Internal to those two files.
#ifndef KMPC_CTS_MASKED_RUN_H_
#define KMPC_CTS_MASKED_RUN_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cts/masked.h"
#include "protocol/prss.h"
#include "share/replicated.h"

namespace kmpc::cts::masked_run {

using Mp = MaskedProgram;

// Wipes every buffer it holds on destruction (they hold shares).
struct Buffers {
  std::vector<std::vector<uint64_t>*> all;
  std::vector<std::vector<uint8_t>*> bytes;
  ~Buffers() {
    for (auto* b : all) share::Wipe(b->data(), 8 * b->capacity());
    for (auto* b : bytes) share::Wipe(b->data(), b->capacity());
  }
};

// One job's values. A job of whole lane words (live > 1): slot s at [3 * s
// * wn, + 3 * wn) of vals as m, s_0, s_1 (wn words each); product q at [2 *
// q * wn, + 2 * wn) of prods as s_0, s_1. A one-lane job (live == 1,
// masked_lane0.cc): slot s is byte s of v1, bit 0 its m, bits 1 and 2 its
// s_0 and s_1 (kLambdaBits); product q is byte q of p1, bits 1 and 2.
struct JobState {
  const MaskedJob* job;
  size_t wn;
  int live;
  std::vector<uint64_t> vals, prods;
  std::vector<uint8_t> v1, p1;
  // Words per wire known at compile time (WN != 0) or not (WN = 0).
  template <size_t WN>
  uint64_t* M(uint32_t s) {
    return vals.data() + 3 * s * (WN ? WN : wn);
  }
  template <size_t WN>
  uint64_t* C(uint32_t s, int c) {
    return vals.data() + (3 * s + 1 + c) * (WN ? WN : wn);
  }
  // A product operand's component c (masked.h kProductRef).
  template <size_t WN>
  const uint64_t* R(uint32_t r, int c) {
    if (r & Mp::kProductRef) return prods.data() + (2 * (r & ~Mp::kProductRef) + c) * (WN ? WN : wn);
    return C<WN>(r, c);
  }
};

// Where a term's lambda_S is (JobState::R): leaf s's slot when S = {s},
// else the gate's product (masked.h Term; products: the gate's list). S
// empty: the public word, not read.
inline uint32_t LambdaRef(const Mp::Term& tm, const uint32_t* leaves, const uint32_t* products) {
  return (tm.s & (tm.s - 1)) == 0 ? leaves[__builtin_ctz(tm.s)]
                                  : Mp::kProductRef | products[tm.product];
}

// The view in every message of a malicious Run: the first kViewWords
// words of the sender's hash of all it opened before this message
// (MulLog::OpenedDigest). A party whose successor's view differs from its
// own marks the log deviated (its next check fails and starts silent,
// verify.cc ConfirmedRing) and sends zeros from then on. Without it the
// check's first acknowledgement would hash openings two layers past a
// shifted one, which a cheater can tell apart by a secret bit
// (docs/reviews/2026-11-29-masked-gates.md): an honest party now learns
// of the shift one message after it, before it hashes anything the bit
// reaches towards the cheater.
constexpr size_t kViewWords = 2;

// One message's words, every job's at its Layout offset (masked_eval.cc),
// then packed (Packing); a one-lane job on masked_lane0.cc's walk writes
// and reads only the packed words, its item i at bit i % 64 of word i / 64
// from its packed offset.
struct Message {
  std::array<std::vector<uint64_t>, 2> x, y, z, o;
  std::vector<uint64_t> send, recv, opened;
  // The same packed (Packing: at most as many words).
  std::array<std::vector<uint64_t>, 2> px, py, pz, po;
  std::vector<uint64_t> popened;
  std::vector<uint64_t> r0, r1;  // masks drawn before a message
  // Sized once for the largest message (a reallocation would leave shares
  // behind in freed memory).
  void Fit(size_t ands, size_t opens) {
    for (int c = 0; c < 2; ++c) {
      for (auto* v : {&x[c], &y[c], &z[c], &px[c], &py[c], &pz[c]}) v->resize(ands);
      o[c].resize(opens);
      po[c].resize(opens);
    }
    send.resize(ands + opens + kViewWords);
    recv.resize(ands + opens + kViewWords);
    opened.resize(opens);
    popened.resize(opens);
  }
  void Register(Buffers& b) {
    for (int c = 0; c < 2; ++c)
      for (auto* v : {&x[c], &y[c], &z[c], &o[c], &px[c], &py[c], &pz[c], &po[c]})
        b.all.push_back(v);
    for (auto* v : {&send, &recv, &opened, &popened, &r0, &r1}) b.all.push_back(v);
  }
};

// The one-lane walk (masked_lane0.cc): what masked_eval.cc's word walk
// computes for lane 0 of a one-word job, bit for bit, from the same PRSS
// draws, so the messages are the same whichever walk a party runs. at and
// oat: the job's first packed word of the ANDs' and the openings' items.
void Lane0Load(JobState& j, Buffers& bufs);
void Lane0Lambdas(JobState& j, const Mp::Round& rd, protocol::Prss& prss, Message& msg);
void Lane0Gather(JobState& j, const Mp::Round& rd, int party, Message& msg, size_t at,
                 size_t oat);
void Lane0Scatter(JobState& j, const Mp::Round& rd, int party, const Message& msg, size_t at,
                  size_t oat);
void Lane0Outputs(JobState& j, int party);

}  // namespace kmpc::cts::masked_run

#endif  // KMPC_CTS_MASKED_RUN_H_
