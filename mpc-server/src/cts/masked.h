// A compiled circuit run as k-input gates over masked wires, on
// replicated shares: the protocol of docs/design/masked-gates.md, from a
// mapping (lut_map.h).
//
// Values. Every wire the run computes has a slot of three words per lane
// word: a public word m and two share components s (this party's
// components of a replicated sharing). The wire's value is m ^ s_0 ^ s_1 ^
// s_2, so XOR is local on all three words and any slot can be read as
// plain shares (m folded into the component that holds public constants,
// share/replicated.h HoldsPublicIn). A *masked* wire has m = v ^ lambda
// opened to all three parties and s the shares of lambda:
//   - an input: m = 0, lambda = the input's shares (nothing opened);
//   - the constants: m = 0 or all-ones, lambda = 0;
//   - a masked gate's root that a later masked gate reads: lambda drawn
//     from the parties' PRSS keys before the first message that reads it,
//     m opened;
//   - an XOR of masked wires.
// Every other wire (a Rep3 gate's root, a masked gate's root that no
// masked gate reads, an XOR with such an operand) has m = 0 and s its
// shares.
//
// Rounds. Every mask product lambda_S (|S| >= 2, S inside a monomial of
// some masked gate's normal form) is a Rep3 AND of two smaller ones (or of
// leaves' lambdas): level 1 for pairs, 2 for three or four leaves, 3 for
// five or six, in the last message before its first reader (a leaf's
// lambda does not depend on the data: it is drawn or computed before the
// first message that reads it), so layer 1 waits for at most 3. Gate
// layer L (lut_map.h LutGate::layer) then runs in message prep_rounds + L
// (no message for a layer none of whose gates is opened or Rep3): its
// Rep3 gates' ANDs and its opened gates'
// components in one message (Rep3 AND and opening both send one word per
// word to party i-1 and receive one from party i+1). A gate's share is
//   f(m ^ lambda) = XOR over S of c_S(m) lambda_S,
//   c_S(m) = XOR over monomials T of f with T >= S of AND_{i in T \ S} m_i,
// local once its leaves' m are opened and its products are held.
//
// Lanes: a job of fewer than 64 lanes (one word per wire) sends only its
// lanes' bits of each word (masked_eval.cc Packing); a job of one lane (a
// lone request's) holds each value in one byte and computes lane 0 alone
// (masked_lane0.cc), the only lane it sends or reads back.
//
// Malicious security: every Rep3 AND (mask products and Rep3 gates) is
// logged in the MulLog and every opened word hashed into its opened-values
// hash, so the distributed check (protocol/verify.h) rejects a wrong
// product and the compare round a wrong opened component; a check runs
// once the log holds verify_words AND words, and the caller checks the
// rest before opening anything, as cts::ShareEngine. Messages after an
// opening carry fresh PRSS components the receiver cannot compute (a
// zero-sharing's, a drawn lambda's), so one computed from a shifted
// opening tells it nothing (docs/design/masked-gates.md, "Build"); and
// every message carries its sender's view (a hash of what it opened
// before it), which the receiver compares with its own, so that an honest
// party learns of a shifted opening one message later, before it hashes
// anything computed from it towards the cheater (masked_run.h
// kViewWords; docs/reviews/2026-11-29-masked-gates.md).
#ifndef KMPC_CTS_MASKED_H_
#define KMPC_CTS_MASKED_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cts/circuit.h"
#include "cts/lut_map.h"
#include "protocol/rep3.h"

namespace kmpc::cts {

struct MaskedProgram {
  size_t inputs = 0;
  size_t outputs = 0;
  size_t slots = 0;     // value slots (3 words per lane word each)
  size_t products = 0;  // mask product slots (2 words per lane word each)
  int prep_rounds = 0;  // messages of the mask products before layer 1
  int rounds = 0;       // ring messages of a run
  size_t ands = 0;      // Rep3 ANDs per lane (mask products and Rep3 gates)
  size_t opened = 0;    // opened bits per lane
  // SHA-256 of everything below: the parties run a program only if theirs
  // agree (engine/cts_jobs.cc), so builds that map differently never mix.
  std::array<uint8_t, 32> digest{};
  std::vector<uint32_t> input_slot, output_slot;

  // A masked gate: its leaves' slots at leaves[leaf_at, + forms[form].n),
  // its form (its normal form's terms, shared by every gate of the same
  // one: a Run streams a gate's slots, not its terms), and the products of
  // its terms whose S has two or more leaves at gate_products[product_at,
  // + forms[form].products), in the form's term order.
  struct Gate {
    uint32_t root = 0;
    uint32_t leaf_at = 0, form = 0, product_at = 0;
  };
  // A gate's terms at terms[term_at, + terms); need_r: the monomials of
  // the leaves' m it reads (bit R: AND of m_i for i in R), closed under
  // dropping the lowest leaf.
  struct Form {
    uint64_t need_r = 0;
    uint32_t term_at = 0;
    uint16_t n = 0, terms = 0;
    uint16_t products = 0;  // its terms whose S has two or more leaves
  };
  // c_S(m) = XOR of the monomials in r; times lambda_S: the public word
  // when S is empty, leaf s's lambda when S = {s}, otherwise the gate's
  // product gate_products[product_at + product].
  struct Term {
    uint64_t r = 0;
    uint8_t s = 0;
    uint8_t product = 0;
  };
  std::vector<Gate> gates;
  std::vector<uint32_t> leaves;
  std::vector<Form> forms;
  std::vector<Term> terms;
  std::vector<uint32_t> gate_products;
  // form_on[64 * f + x], x the form's leaves' opened bits (bit i: leaf
  // i's m): bit t set where term t's c_S(m) is 1 (the one-lane walk reads
  // only those terms).
  std::vector<uint64_t> form_on;

  // A product operand: a slot's lambda, or (with kProductRef set) a product.
  static constexpr uint32_t kProductRef = uint32_t{1} << 31;
  // Slots are reused once their last reader has run (a slot's words live
  // from the first list that writes them to the last that reads them).
  struct Round {
    // Before the message: the opened roots whose lambda is drawn from PRSS
    // here (the first message that reads it), then the masked XORs (dst,
    // a, b) whose lambda is first read here.
    std::vector<uint32_t> draws;
    std::vector<uint32_t> lambda_xors;
    // Products as late as their first reader allows.
    std::vector<uint32_t> products;  // (dst product, a ref, b ref)
    // Rep3 gates (dst slot, a slot, b slot, not): dst = (a ^ not_0) &
    // (b ^ not_1) ^ not_2, not_i bit i of `not`.
    std::vector<uint32_t> rep3;
    std::vector<uint32_t> opens;     // gates opened in this message
    // After the message: gates whose share is the root's (never opened),
    // then the XORs (dst, a, b) whose operands are then all held.
    std::vector<uint32_t> local;
    std::vector<uint32_t> xors;
  };
  std::vector<Round> round;  // round[0]: before the first message
};

// Fills p.form_on from p.forms and p.terms (CompileMasked does; a program
// built by hand calls it once its forms are in).
void FillFormTable(MaskedProgram& p);

// The mapping's gates as a run over masked wires. Fails if a gate reads a
// wire of its own layer or later, or if an output is not computed.
absl::StatusOr<MaskedProgram> CompileMasked(const LutMap& m);

// Several programs' runs in the same ring messages (as EvaluateAll): the
// j-th message of every job is one exchange. in[c] holds inputs * wn
// words, out[c] receives outputs * wn words (this party's shares).
struct MaskedJob {
  const MaskedProgram* program;
  size_t wn;
  std::array<absl::Span<const uint64_t>, 2> in;
  std::array<absl::Span<uint64_t>, 2> out;
  size_t lanes = 0;  // live lanes of a one-word job (0: all 64)
  // A one-lane job runs the one-lane walk (masked_lane0.cc) unless set:
  // the tests' reference, the word walk, whose messages are the same.
  bool word_walk = false;
};
absl::Status EvaluateMaskedAll(absl::Span<const MaskedJob> jobs, protocol::Rep3& ctx,
                               size_t verify_words = protocol::MulLog::kVerifyWords);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_MASKED_H_
