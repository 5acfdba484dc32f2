// The aes*-cts part of a Run's plan (batch_state.h): each live aes*-cts
// job's task (engine/cts_jobs.h), its dealt material and program, within
// the batch's bounds; and, once the AES pass has made the signing pads,
// the ticket tasks' KDC-signature inputs. RunCtsTasks (cts_jobs.h) then
// runs the tasks.
#ifndef KMPC_ENGINE_CTS_PLAN_H_
#define KMPC_ENGINE_CTS_PLAN_H_

#include <string>

#include "absl/status/status.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// The dealt material of an aes*-cts job (t.type, t.cf2_bytes set) into t:
// its usage's, K's PRF material under a FAST key (cts.h Cf2EncryptProgram),
// and for a reply's PA-REQ-ENC-PA-REP splice (contract::CheckCtsJob admits
// it on a dealt-key usage-3 ENCRYPT only) the usage-56 checksum material.
// Empty, or why the job fails JOB_UNKNOWN_USAGE: a usage in a direction
// the KDC does not use (engine.h kCts*Usages) or no material dealt for it.
// Public, and alike on every party (their key views agreed).
std::string FindCtsMaterial(const Job& job, const KeyShares& key, CtsTask& t);

// The aes*-cts jobs' tasks (engine/cts_jobs.h), in job order: each live
// one's dealt material (none for its usage: JOB_UNKNOWN_USAGE, that job
// alone) and program. All public and decided alike on the three parties:
// the key views agreed (same dealing, hence the same material). In
// malicious mode the batch must stay within protocol/verify.h's bound on
// Verifies: the AES part's (EngineOptions::MaxWavesPerBatch) plus the
// circuits' (CtsCost::Verifies) plus the verdicts' and the last; a batch
// over it is refused (INVALID_ARGUMENT, in step) before any AND.
absl::Status PlanCts(const RunContext& ctx, BatchState& b);

// The KDC signature's inputs of every ticket task (cts.h
// TicketClassProgram): the pad's ctr0 (public, in the component that holds
// it), H^2, and L = A' H^3 ^ lens H ^ AES_K(c0) for the 12-byte server
// signature (enctype.md "Keyed checksum"): GHASH with the signature's
// block zero, linear in the powers, so each component is computed from
// this party's components alone; the signature's block times H^2 is the
// circuit's. After the AES pass and the powers (tags.h ComputeTags).
void FillTicketSignatures(const RunContext& ctx, BatchState& b);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_CTS_PLAN_H_
