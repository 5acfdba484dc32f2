// The agreement of a Run (batch_state.h; the wire format is agreement.h):
// the three parties compare digests of the batch's public inputs and of
// their key views before anything is computed, draw the first ctr0 values
// on the way, and fail the same jobs alike; in semi-honest mode the two
// holders of each dealt component then compare their copies.
#ifndef KMPC_ENGINE_BATCH_AGREEMENT_H_
#define KMPC_ENGINE_BATCH_AGREEMENT_H_

#include "absl/status/status.h"
#include "engine/agreement.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// The header's two digests: the public inputs (with the engine options that
// shape the rounds: servers whose --security, --small_sbox_min_blocks,
// --depth3_max_blocks, --chunk_lanes, --wave_lanes, (malicious) --verify_words or
// cts_batch_bytes (which aes*-cts jobs run) differ would
// run different circuits or message sizes and
// lose the ring's framing, so they refuse every batch instead) and this
// party's key views (keys.h EncodeKeyView).
absl::Status DigestBatch(const RunContext& ctx, const BatchState& b, AgreementHeader& h);

// Two rounds: everyone sends its header (AgreementHeader: digests, number n
// of counters it draws) to party i-1, then forwards what it got from i+1
// together with its half of the reveal of the n fresh ctr0 values (sized by
// the announced n, so the ring stays in step whatever the inputs).
// Afterwards every party holds all three headers and takes the same
// decision; on a refusal the PRSS counters are re-aligned to the largest n.
// Same inputs but different key views: two more rounds exchange the
// per-job views, and the counters are drawn afresh by DrawCounters
// (pads.h). A forwarded header or view whose tag fails sets b.deviated.
absl::Status AgreeOnBatch(const RunContext& ctx, BatchState& b);

// Whether a live job of b has dealt shares (Job::data_shares): public and
// agreed (the shares' lengths follow the jobs' shapes, which are in the
// agreement's digest; liveness is decided alike), so every party runs the
// dealing check's rounds, or none of them (a batch of keystream or ctr0
// jobs only has nothing dealt to compare).
bool AnyDealt(const BatchState& b);

// The dealt inputs (Job::data_shares) are the one input that differs
// between the parties: the KDC deals each component to the two parties that
// hold it, and nothing else ties the two copies together. In
// --security=semi-honest a KDC that deals them inconsistently makes the
// parties compute on values that differ between them, which can pass the
// servers' gate on a bogus timestamp (docs/reviews/2026-11-26-key-kinds-
// timestamps-shapes.md, finding 2). So, before any AND, each pair compares its copies
// of the one component it shares: party i sends party i-1 a digest of its
// component 0 (component i, which party i-1 holds as its component 1) and
// checks party i+1's digest against its own component 1. The digest goes
// to the one party that holds the same bytes and is never forwarded: party
// i+1, which holds the other two components, could test guesses of a
// low-entropy secret (a timestamp) against a digest of the third. It is
// keyed by a fresh PRSS value that only the pair holds (ForwardTagKeys:
// party i's k0 is party i-1's k1), so that no one else can test such
// guesses either. Two one-byte rounds then tell every party every pair's
// verdict, and all three refuse the batch alike (ABORTED, in step) before
// anything is computed on the copies. --security=malicious needs none of
// this: every AND on an inconsistent input fails the product check
// against the copies the neighbours hold (protocol/verify.h), and every
// opened value is compared, before anything is released.
absl::Status CheckDealing(const RunContext& ctx, const BatchState& b);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_BATCH_AGREEMENT_H_
