// kmpc-mpc-server's engine flags (security mode, S-box and chunk sizes,
// the aes*-cts gate's bounds, masked Runs, the malicious check's words) and
// the engine options they make. main.cc parses the command line; the
// options are checked here, before anything starts, so that a bad value
// stops the server with one message instead of failing every batch.
#ifndef KMPC_ENGINE_FLAGS_H_
#define KMPC_ENGINE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"

ABSL_DECLARE_FLAG(int, chunk_lanes);
ABSL_DECLARE_FLAG(int, small_sbox_min_blocks);
ABSL_DECLARE_FLAG(int, depth3_max_blocks);
ABSL_DECLARE_FLAG(std::string, security);
ABSL_DECLARE_FLAG(int, wave_lanes);
ABSL_DECLARE_FLAG(bool, cts_precompile);
ABSL_DECLARE_FLAG(bool, cts_masked_gates);
ABSL_DECLARE_FLAG(int64_t, cts_masked_max_and_words);
ABSL_DECLARE_FLAG(int64_t, cts_masked_max_jobs);
ABSL_DECLARE_FLAG(absl::Duration, cts_masked_calm);
ABSL_DECLARE_FLAG(int, cts_skew_s);
ABSL_DECLARE_FLAG(int, cts_releases_per_minute);
ABSL_DECLARE_FLAG(int, gate_decrypts_per_run);
ABSL_DECLARE_FLAG(int, gate_failures_per_window);
ABSL_DECLARE_FLAG(int, gate_failure_window_s);
ABSL_DECLARE_FLAG(int, verify_words);

namespace kmpc::server {

// The engine settings of the flags, or an error whose message names the
// flag (the one main logs). The gate budget's state is
// STORE_DIR/gate-failures; its counts are loaded by LoadGateBudget.
absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(const std::string& store_dir);

// The failure budget's counts from before a restart (engine/gate_budget.h),
// read once main holds the store's lock: empty, or why the server stops.
std::string LoadGateBudget(const engine::EngineOptions& o);

// The aes*-cts programs a first login would otherwise compile inside its
// batch (engine/cts_jobs.h CtsProgramCache): the usual timestamp shapes and
// those this server compiled before, recorded in STORE_DIR/cts-programs;
// compiled in the background with --cts_precompile.
void StartCtsPrecompile(const std::string& store_dir);

}  // namespace kmpc::server

#endif  // KMPC_ENGINE_FLAGS_H_
