// The last phase of a Run (batch_state.h): every job's result from its
// plan, its secrets and the AES output, and the conditional release
// (Job::release_if_ok). What a result carries is moved out of the batch
// (a state's computed powers, an aes*-cts output), not copied; what stays
// is wiped with the batch.
#ifndef KMPC_ENGINE_COLLECT_H_
#define KMPC_ENGINE_COLLECT_H_

#include "engine/batch_state.h"

namespace kmpc::engine {

// The batch's results, in job order: per job its status and what it
// releases (keystream and ctr0, tag shares, an EncryptState or a
// PadState, an aes*-cts output). A job released on another
// (Job::release_if_ok) whose condition did not verify, or verified on a
// stale timestamp under a password-derived key, ends JOB_WITHHELD with
// nothing in it, and gives back the release token it took (LookupKeys).
// The same statuses on every party, as every job's status is.
BatchResult Collect(const RunContext& ctx, BatchState& b);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_COLLECT_H_
