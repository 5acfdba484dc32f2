// The tags of a Run (batch_state.h), after the AES pass: the powers of H a
// job needs beyond the stored ones, T' = GHASH_H(A, C) ^ AES_K(c0) on
// shares, the masked zero tests of the presented tags (with the
// verification pads' products in the same round, pads.h), the aes*-cts
// DECRYPTs' verdicts, and the gate DECRYPTs' verdicts counted into the
// server's failure budget (gate_budget.h).
#ifndef KMPC_ENGINE_TAGS_H_
#define KMPC_ENGINE_TAGS_H_

#include "absl/status/status.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// Powers of H beyond the stored ones, by doubling: H^(a+1..2a) =
// H^a * H^(1..a), one multiplication round per doubling for all jobs
// (into JobSecrets::powers of every live job with m > kStoredHPowers).
absl::Status ExtendPowers(const RunContext& ctx, BatchState& b);

// T' = GHASH_H(A, C) ^ AES_K(c0) on shares for every job but ENCRYPT (whose
// tag FINALIZE computes once the KDC has C) and PAD, after ExtendPowers.
// GHASH = sum_j X_j * H^(m-j+1) (SP 800-38D, 6.4): public blocks times the
// shared powers are local; each block of a shared message D times its
// shared power is a shared x shared product, all of the batch in one GfMul
// round (Araki et al., CCS 2016, section 2.2: local cross terms plus a
// zero-share, resharing to i-1), then summed locally per job.
absl::Status ComputeTags(const RunContext& ctx, BatchState& b);

// Masked zero test of DECRYPT / VERIFY_CHECKSUM tags: reveal r * (T' ^ T)
// for a fresh shared random r; zero iff the tag holds (except with
// probability 2^-128). Sets b.pass for every job.
absl::Status CheckTags(const RunContext& ctx, BatchState& b);

// The aes*-cts DECRYPTs' mismatch bits, opened among the servers only
// after every AND so far is verified (malicious mode; the opening is then
// compared like every other): the one value a DECRYPT opens before the
// release, and it reveals only whether the tag held (RFC 3961 section
// 5.3's verdict, which the KDC learns anyway). Sets their b.pass and
// b.stale.
absl::Status OpenCtsVerdicts(const RunContext& ctx, BatchState& b);

// Every gate DECRYPT's verdict (GateDecrypt), opened alike on every party
// by now (CheckTags, OpenCtsVerdicts), counted into this server's failure
// budget before any result leaves it (gate_budget.h).
void SettleGates(BatchState& b);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_TAGS_H_
