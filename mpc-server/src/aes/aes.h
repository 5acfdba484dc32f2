// Bitsliced AES-128 / AES-256 encryption (forward only) for many blocks at
// once, each block ("lane") with its own key, in the clear or on
// replicated shares. Round keys are inputs (no key schedule inside the
// MPC); ExpandKey (key_expansion.h) produces them for the dealer.
//
// The circuit is written once (circuit.h) over an abstract AND engine and
// instantiated for the clear engine (known-answer tests) and the
// replicated-share engine; the kernels are compiled for AVX-512 and for
// AVX2 and picked at run time.
#ifndef KMPC_AES_AES_H_
#define KMPC_AES_AES_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "protocol/rep3.h"

namespace kmpc::aes {

// S-box circuits: two of Boyar and Peralta's, and a depth-3 one.
enum class SboxCircuit : uint8_t {
  // "A depth-16 circuit for the AES S-box" (Boyar, Peralta, SEC 2012):
  // 34 AND, AND depth 4 (9 + 3 + 4 + 18 ANDs per layer).
  kDepth4 = 0,
  // "A new combinational logic minimization technique with applications to
  // cryptology" (Boyar, Peralta, SEA 2010), as in BearSSL aes_ct: 32 AND,
  // AND depth 6 (9 + 1 + 2 + 1 + 1 + 18).
  kDepth6 = 1,
  // AND depth 3, the least possible (x^254 has algebraic degree 7): the
  // inversion in the tower field GF((2^4)^2) as d^-1 = d^6 * d^8 for the
  // norm d, 51 AND (9 + 24 + 18); derived and checked exhaustively by
  // tools/sbox3_gen.py. A quarter fewer ring rounds than kDepth4 for half
  // again as many AND bits: for latency-bound batches.
  kDepth3 = 2,
};
int AndsPerSbox(SboxCircuit c);
int AndDepth(SboxCircuit c);

struct PlainLane {
  const uint8_t* round_keys;  // (nr+1)*16 bytes
  int nr;                     // 10 or 14
  const uint8_t* in;          // 16 bytes
  uint8_t* out;               // 16 bytes (may equal in)
};

// out = AES_k(in) for every lane, in the clear. Lanes with different nr
// are allowed.
absl::Status EncryptPlain(absl::Span<const PlainLane> lanes,
                          SboxCircuit circuit = SboxCircuit::kDepth4);

// Scratch memory reused across calls (one per worker): the bitsliced
// state of a whole batch. Contents are wiped after every call.
class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  uint64_t* Get(size_t words);

 private:
  std::unique_ptr<uint64_t[]> buf_;
  size_t size_ = 0;
};

struct SharedLane {
  const uint8_t* round_keys[2];  // this party's two share components
  int nr;                        // 10 or 14
  const uint8_t* in;             // public 16-byte input block
  uint8_t* out[2];               // this party's two output share components
};

struct SharedOptions {
  // Lanes per chunk (multiple of 64): within a wave, in every AND layer all
  // chunks send before the first chunk receives, so one chunk's message is
  // on the wire while the next computes.
  size_t chunk_lanes = 4096;
  // Lanes per wave: waves run one after the other (each nr * AndDepth
  // rounds), bounding the working set to about 300 bytes per lane.
  size_t wave_lanes = 8192;
  // With a MulLog on the context (malicious security): the products so far
  // are verified at the first AND-layer boundary where the log holds at
  // least this many AND words (protocol::MulLog::kVerifyWords).
  size_t verify_words = protocol::MulLog::kVerifyWords;
};

// The same on shares, among the three parties of ctx (all three call it
// with the same lanes' nr pattern, circuit and options). AND layers per
// wave: nr * AndDepth(circuit) (both key sizes run side by side). Fails
// only on channel errors, after which the ring is out of step.
absl::Status EncryptShared(protocol::Rep3& ctx,
                           absl::Span<const SharedLane> lanes,
                           SboxCircuit circuit, const SharedOptions& options,
                           Workspace* workspace = nullptr);

// Bit transposition (exposed for tests). Layout, shared by all kernels:
// a group of 64*wn lanes is stored as 8 bit planes ("wires") of 16*wn
// words; in wire j (bit j, 0 = least significant), word 16*w + p holds bit
// j of byte p (FIPS-197 input order, p = row + 4*column) of lanes 64*w ..
// 64*w+63, lane l at bit l%64: words[j*16*wn + 16*(l/64) + p]. The 16
// bytes of a lane group are adjacent so that ShiftRows and MixColumns stay
// inside one 128-byte tile. Lanes beyond `blocks.size()` are zero.
void BlocksToPlanes(absl::Span<const uint8_t* const> blocks, size_t wn,
                    uint64_t* planes);
void PlanesToBlocks(const uint64_t* planes, size_t wn,
                    absl::Span<uint8_t* const> blocks);

// "avx512" or "avx2".
const char* KernelName();
// Force the AVX2 kernels (benchmarks); returns the previous setting.
bool ForceAvx2(bool force);

}  // namespace kmpc::aes

#endif  // KMPC_AES_AES_H_
