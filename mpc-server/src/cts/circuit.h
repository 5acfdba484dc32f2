// A small bitsliced boolean-circuit layer: circuits are built once as a
// gate list (XOR, AND, constants, inputs) and evaluated over an abstract
// AND engine, in the clear (known-answer tests, gate counts) or on
// replicated shares (Rep3::And), with the same code.
//
// Data layout. A circuit is evaluated on many lanes at once (one login or
// block per lane): every wire holds wn 64-bit words per share component,
// lane l at bit l % 64 of word l / 64. XOR is local; the ANDs are
// scheduled as soon as possible (a gate's AND depth is one more than its
// deepest operand's for an AND, the deepest operand's for an XOR) and
// evaluated layer by layer: all ANDs of a layer are prepared, exchanged in
// one message and finalized (the MP-SPDZ prepare / exchange / finalize
// rhythm, protocol/rep3.h), so a circuit's ring rounds are its AND depth.
//
// Public constants are folded while building (x ^ 0 = x, x & 0 = 0,
// x & 1 = x, x ^ x = 0, x & x = x): an AND with a public bit costs
// nothing. The constant 1 is shared as (1, 0, 0) (share/replicated.h).
//
// Byte strings: Bits b of n bytes has 8n wires, b[8k + j] = bit j (0 =
// least significant) of byte k.
#ifndef KMPC_CTS_CIRCUIT_H_
#define KMPC_CTS_CIRCUIT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protocol/rep3.h"

namespace kmpc::cts {

using Wire = uint32_t;
inline constexpr Wire kZero = 0;
inline constexpr Wire kOne = 1;

using Bits = std::vector<Wire>;

struct MaskedProgram;

// A program's run as k-input gates over masked wires (masked.h), compiled
// after the program itself (on a background thread: it takes longer), so
// read and set under a lock; null until then.
class MaskedHandle {
 public:
  std::shared_ptr<const MaskedProgram> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return p_;
  }
  void set(std::shared_ptr<const MaskedProgram> p) {
    std::lock_guard<std::mutex> lock(mu_);
    p_ = std::move(p);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const MaskedProgram> p_;
};

// A compiled circuit: only the gates an output depends on, layered by AND
// depth, each gate's value in a slot that is reused once its last reader
// has run (a few thousand live slots however long the circuit).
struct Program {
  size_t inputs = 0;
  size_t outputs = 0;
  size_t slots = 0;
  size_t ands = 0;  // AND gates (per lane)
  size_t xors = 0;  // XOR gates (per lane)
  int depth = 0;    // AND layers = ring rounds
  std::vector<uint32_t> input_slot;
  std::vector<uint32_t> output_slot;
  // layers[d]: AND layer d (empty for d = 0) as (dst, a, b) slot triples,
  // then the XORs whose depth is d, in an order that respects their
  // dependencies.
  struct Layer {
    std::vector<uint32_t> ands;
    std::vector<uint32_t> xors;
  };
  std::vector<Layer> layers;
  std::shared_ptr<MaskedHandle> masked = std::make_shared<MaskedHandle>();
};

class Circuit {
 public:
  Circuit();

  // A new input wire; inputs are numbered 0, 1, ... in creation order.
  Wire Input();
  Bits Inputs(size_t n);
  // Public constant bits of a byte string (wires kZero / kOne).
  static Bits Constant(absl::Span<const uint8_t> bytes);

  Wire Xor(Wire a, Wire b);
  Wire Not(Wire a) { return Xor(a, kOne); }
  Wire And(Wire a, Wire b);
  Wire Or(Wire a, Wire b) { return Xor(Xor(a, b), And(a, b)); }
  Bits Xor(const Bits& a, const Bits& b);

  // Outputs are numbered in call order.
  void Output(Wire w) { outputs_.push_back(w); }
  void Output(const Bits& b) {
    outputs_.insert(outputs_.end(), b.begin(), b.end());
  }

  // AND depth of a wire (0 for inputs and constants).
  int depth(Wire w) const { return depth_[w]; }
  size_t inputs() const { return inputs_; }

  Program Compile() const;

 private:
  enum Op : uint8_t { kConst, kIn, kXorOp, kAndOp };
  struct Gate {
    Op op;
    Wire a, b;
  };
  Wire Add(Op op, Wire a, Wire b, int depth);
  // The gates some output depends on.
  std::vector<bool> Live() const;
  struct Schedule {
    int depth = 0;
    std::vector<std::vector<Wire>> and_at, xor_at;  // live gates per depth
    std::vector<uint64_t> pos, last;                // per gate (circuit.cc)
    std::vector<bool> live_input;                   // per input number
  };
  Schedule MakeSchedule() const;

  std::vector<Gate> gates_;
  std::vector<int32_t> depth_;
  std::vector<Wire> outputs_;
  size_t inputs_ = 0;
};

// An AND layer's operand and product words, per share component.
struct Operands {
  std::array<uint64_t*, 2> x, y, z;
};

// The AND engine the evaluator runs on: kComps share components per wire
// (1 in the clear, 2 on replicated shares). Per layer the evaluator calls
// Stage, writes the operands, calls AndLayer, reads the products, then
// calls EndLayer.
class Engine {
 public:
  virtual ~Engine() = default;
  virtual int comps() const = 0;
  // The words of the public constant 1 in component c.
  virtual uint64_t OneWord(int c) const = 0;
  // Room of the engine's own for the next layer's n words, so that the
  // operands are written once where the engine keeps them; false: the
  // caller's buffers.
  virtual bool Stage(size_t /*n*/, Operands* /*out*/) { return false; }
  // One AND layer over n words: z[c] = the products of x and y.
  virtual absl::Status AndLayer(std::array<const uint64_t*, 2> x,
                                std::array<const uint64_t*, 2> y,
                                std::array<uint64_t*, 2> z, size_t n) = 0;
  // The layer's products have been read: the staged words may move.
  virtual absl::Status EndLayer() { return absl::OkStatus(); }
};

class ClearEngine : public Engine {
 public:
  int comps() const override { return 1; }
  uint64_t OneWord(int /*c*/) const override { return ~uint64_t{0}; }
  absl::Status AndLayer(std::array<const uint64_t*, 2> x,
                        std::array<const uint64_t*, 2> y,
                        std::array<uint64_t*, 2> z, size_t n) override;
};

// One party of three: ANDs as Rep3::And, every AND word logged in
// ctx.log() when one is set (malicious security, protocol/verify.h). With
// a log, a layer's operands are staged in the log itself (MulLog
// ::AppendAnd) and its products computed and received there, so no word
// is copied into it.
// Once the log holds verify_words AND words after a layer, the products so
// far are verified (Verifier::Verify; every party decides alike: they log
// the same words), as the AES kernel does (aes.h SharedOptions), so a long
// circuit's log stays bounded; the caller verifies the rest before opening
// anything. A login's ~0.5M AND words per lane group make ~8 checks, far
// below the per-batch bound of verify.h.
class ShareEngine : public Engine {
 public:
  explicit ShareEngine(protocol::Rep3& ctx,
                       size_t verify_words = protocol::MulLog::kVerifyWords)
      : ctx_(ctx), verify_words_(verify_words) {}
  int comps() const override { return 2; }
  uint64_t OneWord(int c) const override;
  bool Stage(size_t n, Operands* out) override;
  absl::Status AndLayer(std::array<const uint64_t*, 2> x,
                        std::array<const uint64_t*, 2> y,
                        std::array<uint64_t*, 2> z, size_t n) override;
  absl::Status EndLayer() override;

 private:
  protocol::Rep3& ctx_;
  size_t verify_words_;
  bool staged_ = false;  // the next AndLayer's operands are in the log
};

// Runs p on wn words per wire: in[c] holds p.inputs * wn words (input i at
// [i * wn, (i + 1) * wn)), out[c] receives p.outputs * wn words. Scratch
// holding shares is wiped before returning. Fails on channel errors (the
// ring is then out of step) and on wrong sizes.
absl::Status Evaluate(const Program& p, Engine& e, size_t wn,
                      std::array<absl::Span<const uint64_t>, 2> in,
                      std::array<absl::Span<uint64_t>, 2> out);

// Several programs in the same rounds: AND layer d of every job is one
// engine call (one message), so the run takes the deepest job's AND depth
// and the sum of their ANDs; each job has its own lanes (wn words per
// wire) and shape (a login's timestamp decryption beside its reply's
// encryption, or logins of different message lengths). Sizes as Evaluate.
// lanes: how many lanes (bits 0 .. lanes-1 of each word, wn == 1) the job
// uses; 0 = all of them. When they do not fill the job's last word, that
// word's AND operands go packed (its lanes' bits per gate, several gates to
// a word) on the ring; the outputs' bits past `lanes` are then unspecified.
struct Job {
  const Program* program;
  size_t wn;
  std::array<absl::Span<const uint64_t>, 2> in;
  std::array<absl::Span<uint64_t>, 2> out;
  size_t lanes = 0;
};
absl::Status EvaluateAll(absl::Span<const Job> jobs, Engine& e);

// Packed lanes on the ring (EvaluateAll's last words, masked_eval.cc's
// jobs of few lanes): the low `width` (1..63) bits of v OR-ed into the bit
// string w at bit `at` (w zeroed beforehand; a gate may straddle two
// words), and read back.
inline void PutBits(uint64_t* w, size_t at, size_t width, uint64_t v) {
  v &= (uint64_t{1} << width) - 1;
  const size_t i = at / 64, sh = at % 64;
  w[i] |= v << sh;
  if (sh + width > 64) w[i + 1] |= v >> (64 - sh);
}
inline uint64_t GetBits(const uint64_t* w, size_t at, size_t width) {
  const size_t i = at / 64, sh = at % 64;
  uint64_t v = w[i] >> sh;
  if (sh + width > 64) v |= w[i + 1] << (64 - sh);
  return v & ((uint64_t{1} << width) - 1);
}

// Lane transposition: lane l's byte string (all the same length n) into
// 8n wires of wn words (wire 8k + j, lane l at bit l % 64 of word l / 64),
// and back. Lanes past lanes.size() are zero. The results hold what the
// lanes hold (shares, keys): the caller wipes them.
std::vector<uint64_t> PackLanes(absl::Span<const absl::Span<const uint8_t>> lanes,
                                size_t wn);
std::vector<uint8_t> UnpackLane(absl::Span<const uint64_t> words, size_t wn,
                                size_t lane);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_CIRCUIT_H_
