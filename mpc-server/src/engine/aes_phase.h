// The AES phase of a Run (batch_state.h): one bitsliced pass
// (aes/aes.h EncryptShared) over every lane of every ctr-mpc job, per job
// AES_K(c0) then the keystream blocks c0+1 .. c0+nks, on shares.
#ifndef KMPC_ENGINE_AES_PHASE_H_
#define KMPC_ENGINE_AES_PHASE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/batch_state.h"

namespace kmpc::engine {

// ctr0 + i as a 128-bit big-endian counter block into out (16 bytes).
void CounterPlus(const uint8_t* ctr0, uint64_t i, uint8_t* out);

// Places every live ctr-mpc job's lanes (JobPlan::lane0, b.nlanes) and
// runs them into b.aes; INVALID_ARGUMENT (before any round, alike on
// every party) for a batch over kMaxBatchBlocks lanes. The S-box circuit
// is a public rule on the agreed batch (EngineOptions).
absl::Status RunAes(const RunContext& ctx, BatchState& b);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_AES_PHASE_H_
