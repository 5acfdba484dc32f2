// Counters and pads of a Run (batch_state.h): the ctr0 values the cluster
// draws (never the KDC), a linked PAD's counter after its ENCRYPT's, every
// PAD's zero share, and a verification PAD's products with a fresh shared
// random r (PadState::verify_only), which ride on the tag checks' round
// (tags.h CheckTags).
#ifndef KMPC_ENGINE_PADS_H_
#define KMPC_ENGINE_PADS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// A drawn ctr0 (public, opened among the servers) made valid without
// another round: if its range c0 .. c0 + max(n, kLinkedPadOffset +
// kPadSlots) (every linked pad's slot, Job::pad_slot) would
// touch the all-zero block (c0 = 0 or c0 > 2^128 - 1 - that; probability
// below 2^-106 for an honest draw), its top bit is flipped, which puts it
// in [2^127 - 2^21, 2^127], valid for every job and a linked pad. A
// deterministic function of the opened value: parties that opened the same
// value use the same counter, and parties that opened different values (a
// cheater's share) stay in step and are caught by the compare view, where
// the opened value was logged. A redraw instead would be a round that only
// the parties seeing the bad value run, desynchronising the ring.
void FixCounter(Block& ctr0, uint64_t n);

// ctr0 for ENCRYPT and CHECKSUM: a fresh PRSS random value revealed among
// the servers (never chosen by the KDC), made valid by FixCounter. The
// first draw rides on the agreement (batch_agreement.h); this one (one
// reveal) serves the jobs it drew none for (different key views). Which
// jobs those are is public and agreed, so every party runs the same
// rounds.
absl::Status DrawCounters(const RunContext& ctx, BatchState& b);

// A linked PAD's counter (Job::pad_after): its ENCRYPT's drawn ctr0 +
// kLinkedPadOffset + pad_slot. The pad fails (withheld, nothing computed)
// with its ENCRYPT, or if the sum would leave the counter range
// (probability 2^-111). Public values only: every party decides alike.
void LinkPads(BatchState& b);

// A fresh zero-share z_i for every PAD job of the batch, live or not: the
// jobs are the same on the three parties (the agreement), so their PRSS
// counters stay in step.
void DrawPadZeros(const RunContext& ctx, BatchState& b);

// Verification pads (PadState::verify_only): shares of r*H^k (k = 1..m)
// and r*AES_K(c0) for a fresh shared random r per pad (PRSS), their
// products in the GfMul round of CheckTags (logged and checked in
// malicious mode like every product), kept with r instead of the powers
// and the pad. A verify item (SignItem.verify) then sums to
// r * (T ^ t'): zero iff the presented tag t' is the tag T, uniform
// otherwise, also to the KDC together with one server, which holds two of
// r's three shares. Liveness is public, so the parties draw alike.
// Returns the products needed (m + 1 per pad) and lists the pads.
size_t VerifyPadInputs(const BatchState& b, std::vector<size_t>* pads);
// The factors from byte `off` on: r (drawn here) against H^1..H^m, then
// AES_K(c0), per pad.
void FillVerifyPads(const RunContext& ctx, BatchState& b, const std::vector<size_t>& pads,
                    size_t off, std::vector<uint8_t>* x0, std::vector<uint8_t>* x1,
                    std::vector<uint8_t>* y0, std::vector<uint8_t>* y1);
// The products from byte `off` on into each pad's secrets.
void TakeVerifyPads(BatchState& b, const std::vector<size_t>& pads, size_t off,
                    const std::vector<uint8_t>& z0, const std::vector<uint8_t>& z1);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_PADS_H_
