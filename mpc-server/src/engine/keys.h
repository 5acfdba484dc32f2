// The first phase of a Run (batch_state.h): every job's contract check and
// public plan, this party's key for it, and its key view, which the
// agreement compares among the three parties (batch_agreement.h) and from
// which every party decides alike which jobs run (DecideKey).
#ifndef KMPC_ENGINE_KEYS_H_
#define KMPC_ENGINE_KEYS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "contract.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// One party's view of one job's key, compared among the three parties in
// the agreement: 1 code byte (KeyView, agreement.h; kViewNone for a job
// that failed its check), the cipher, the dealing id (not secret).
constexpr size_t kKeyViewBytes = 18;

// Bits 7 and 6 of a present view's cipher byte: this party's release
// bound for the key is reached (JobPlan::over_rate), its failure budget
// refused the gate DECRYPT (over_budget). Ciphers are below 0x40.
constexpr uint8_t kViewOverRate = 0x80, kViewOverBudget = 0x40;

// The job's shape as the contract checks it (proto/contract.h).
contract::JobShape ShapeOf(const Job& job);

// Whether job p is a PAD a ticket of the batch spends (Job::sign_pad).
bool SpentBySignature(absl::Span<const Job> jobs, size_t p);

// Every job's check (a failed one fails the job alike on all parties), its
// public plan and this party's key for it, with the key's release bound
// and gate budget taken (JobPlan::over_rate, over_budget). A key missing
// or unusable here fails only this job; the agreement compares the three
// parties' views of every job's key and fails the same jobs on all of them
// (engine.h, KeyLookup).
void LookupKeys(const RunContext& ctx, BatchState& b, const KeyLookup& lookup);

// On the agreed key views (their kind): what a user's aes*-ctr-mpc key
// may not run (user_key_rule.h CheckCtrUserKey) fails alike on every party
// before any AND.
void ApplyUserKeyRule(BatchState& b);

// This party's kKeyViewBytes view of w's key into out.
void EncodeKeyView(const JobPlan& w, uint8_t* out);

// The per-job outcome of the three parties' key views (views[p] is party
// p's kKeyViewBytes encoding): the same on every party since all three
// hold the same three views. Only a job whose key is present with the same
// cipher and dealing on all three parties, and dealt for the job's cipher,
// is computed; the others fail alone.
void DecideKey(JobPlan& w, const std::array<const uint8_t*, 3>& views);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_KEYS_H_
