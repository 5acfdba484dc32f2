// kmpc-mpc-server's engine flags and the options they make (engine_flags.h).
#include "engine_flags.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "engine/cts_jobs.h"
#include "engine/gate_budget.h"
#include "util/log.h"

// The engine settings' defaults are EngineOptions' (engine.h says why).
ABSL_FLAG(int, chunk_lanes,
          static_cast<int>(kmpc::engine::EngineOptions{}.chunk_lanes),
          "engine pipeline chunk in AES blocks (one ring message per AND layer "
          "per chunk); 0 = the engine's default");
ABSL_FLAG(int, small_sbox_min_blocks,
          static_cast<int>(kmpc::engine::EngineOptions{}.small_sbox_min_blocks),
          "batches of at least this many AES blocks use the 32-AND S-box of "
          "AND depth 6 (fewer bytes), smaller ones the 34-AND S-box of depth "
          "4 (fewer rounds)");
ABSL_FLAG(int, depth3_max_blocks, -1,
          "batches of at most this many AES blocks use the 51-AND S-box of "
          "AND depth 3 (fewest rounds: latency-bound batches); 0 = never; "
          "-1 = the mode's default (256 semi-honest, 0 malicious)");
ABSL_FLAG(std::string, security, "malicious",
          "malicious (the default: security with abort against one deviating "
          "server, every product and opening is verified, protocol/verify.h) "
          "or semi-honest (Araki et al., CCS 2016: private while every server "
          "follows the protocol; faster); all three servers must run the same");
ABSL_FLAG(int, wave_lanes, 0,
          "engine wave in AES blocks (>= chunk_lanes); 0 = the engine's default");
ABSL_FLAG(bool, cts_precompile, true,
          "compile in the background at start the aes*-cts programs of the usual "
          "kinit timestamps and of every shape this server compiled before "
          "(STORE_DIR/cts-programs), and a timestamp's other usual length "
          "behind a login's compile of one, so that first logins do not wait "
          "for them");
ABSL_FLAG(bool, cts_masked_gates, true,
          "also compile each aes*-cts program as 6-input gates over masked wires "
          "(background thread, idle priority; up to 1 GiB of them held) and run a "
          "small batch on an otherwise idle server that way once all three servers "
          "hold its programs: about half the ring rounds, which set a login's latency "
          "once the servers sit in different rooms (docs/design/masked-gates.md); "
          "false keeps every batch on Rep3 ANDs, on this server and so on all three");
ABSL_FLAG(int64_t, cts_masked_max_and_words,
          static_cast<int64_t>(kmpc::engine::EngineOptions::kCtsMaskedMaxAndWords),
          "with --cts_masked_gates, run a batch's aes*-cts programs over masked wires only "
          "while its Rep3 AND words (each shape's program ANDs x its lane words) are at most "
          "this and no other batch is in flight on this server; larger batches and "
          "batches beside others (a busy realm's, where CPU bounds the peak) keep Rep3 ANDs. "
          "The default takes one login's or TGS's batch of up to 64 of a shape; servers in "
          "different rooms, whose rounds cost more than the CPU, may raise it. 0 = never");
ABSL_FLAG(int64_t, cts_masked_max_jobs,
          static_cast<int64_t>(kmpc::engine::EngineOptions::kCtsMaskedMaxJobs),
          "with --cts_masked_gates, and only while the batch holds at most this many "
          "aes*-cts jobs: one request's (a login's 2, a FAST login's 3, a TGS's 1). More "
          "is requests that queued together, a realm at load, where masked wires' CPU "
          "(~1.9-2.5x a lane word) would lower the peak: those keep Rep3 ANDs. 0 = never");
ABSL_FLAG(absl::Duration, cts_masked_calm, absl::Seconds(2),
          "with --cts_masked_gates, and only once this server has run no batch past "
          "--cts_masked_max_jobs nor beside another for this long (e.g. 2s; 0 = no "
          "memory): the small batches of a loaded realm's short lulls keep Rep3 ANDs");
ABSL_FLAG(int, cts_skew_s, static_cast<int>(kmpc::engine::EngineOptions{}.cts_skew_s),
          "the clock skew of a user's timestamp or FAST challenge (the gate of "
          "its aes*-cts AS reply), checked on shares against the KDC's clock: "
          "outside it nothing gated on it is released (MIT's clockskew; all "
          "three servers must run the same)");
ABSL_FLAG(int, cts_releases_per_minute,
          static_cast<int>(kmpc::engine::EngineOptions{}.cts_releases_per_minute),
          "gated AS replies per minute of one password-derived aes*-cts key (a "
          "token bucket of this size, refilled over a minute); past it the "
          "reply fails alone (JOB_RATE_LIMITED); 0 = no bound");
ABSL_FLAG(int, gate_decrypts_per_run,
          static_cast<int>(kmpc::engine::GateBudgetOptions{}.per_run),
          "gate DECRYPTs (a user's PA-ENC-TIMESTAMP, usage 1, or FAST challenge, "
          "usage 54) of one key's dealing in one Run; the rest fail "
          "(JOB_RATE_LIMITED) uncomputed; 0 = no cap");
ABSL_FLAG(int, gate_failures_per_window,
          static_cast<int>(kmpc::engine::GateBudgetOptions{}.failures_per_window),
          "failed gate DECRYPTs of one key's dealing (its RefreshKeys copies "
          "with it) per --gate_failure_window_s; once reached, its gate "
          "DECRYPTs fail (JOB_RATE_LIMITED) uncomputed until the window ends. "
          "Counted in STORE_DIR/gate-failures across restarts; 0 = no bound");
ABSL_FLAG(int, gate_failure_window_s,
          static_cast<int>(absl::ToInt64Seconds(kmpc::engine::GateBudgetOptions{}.window)),
          "the window of --gate_failures_per_window, from its first failure "
          "(seconds)");
ABSL_FLAG(int, verify_words, 0,
          "--security=malicious: AND words per check inside an AES wave (all "
          "three servers must run the same); 0 = the engine's default, 65536");

namespace kmpc::server {
namespace {

// --gate_decrypts_per_run, --gate_failures_per_window,
// --gate_failure_window_s (engine/gate_budget.h), persisted in
// STORE_DIR/gate-failures.
absl::StatusOr<engine::GateBudgetOptions> GateBudgetOptionsFromFlags(const std::string& store_dir) {
  engine::GateBudgetOptions g;
  const int per_run = absl::GetFlag(FLAGS_gate_decrypts_per_run);
  const int failures = absl::GetFlag(FLAGS_gate_failures_per_window);
  const int window = absl::GetFlag(FLAGS_gate_failure_window_s);
  if (per_run < 0 || failures < 0 || window <= 0)
    return absl::InvalidArgumentError(
        "--gate_decrypts_per_run and --gate_failures_per_window must be >= 0, "
        "--gate_failure_window_s positive");
  g.per_run = static_cast<uint32_t>(per_run);
  g.failures_per_window = static_cast<uint32_t>(failures);
  g.window = absl::Seconds(window);
  g.state_file = store_dir + "/gate-failures";
  return g;
}

// The aes*-cts gate's settings of the flags (engine.h cts_skew_s,
// cts_releases_per_minute).
absl::Status CtsOptionsFromFlags(const std::string& store_dir, engine::EngineOptions* o) {
  const int skew = absl::GetFlag(FLAGS_cts_skew_s);
  const int rate = absl::GetFlag(FLAGS_cts_releases_per_minute);
  if (skew <= 0 || skew > 86400)
    return absl::InvalidArgumentError("--cts_skew_s must be 1 to 86400");
  if (rate < 0) return absl::InvalidArgumentError("--cts_releases_per_minute must be >= 0");
  const int64_t masked_max = absl::GetFlag(FLAGS_cts_masked_max_and_words);
  if (masked_max < 0) return absl::InvalidArgumentError("--cts_masked_max_and_words must be >= 0");
  o->cts_masked_max_and_words = static_cast<uint64_t>(masked_max);
  const int64_t masked_jobs = absl::GetFlag(FLAGS_cts_masked_max_jobs);
  if (masked_jobs < 0) return absl::InvalidArgumentError("--cts_masked_max_jobs must be >= 0");
  o->cts_masked_max_jobs = static_cast<size_t>(masked_jobs);
  const absl::Duration calm = absl::GetFlag(FLAGS_cts_masked_calm);
  if (calm < absl::ZeroDuration()) return absl::InvalidArgumentError("--cts_masked_calm must be >= 0");
  o->cts_masked_calm = calm;
  o->cts_loaded_at = std::make_shared<std::atomic<int64_t>>(0);
  o->cts_skew_s = static_cast<uint32_t>(skew);
  o->cts_releases_per_minute = static_cast<uint32_t>(rate);
  // This server's per-deal bounds, shared by its workers (engine.h
  // EngineOptions); main loads the budget's counts once it holds the
  // store's lock (the file is in its directory).
  auto gate = GateBudgetOptionsFromFlags(store_dir);
  if (!gate.ok()) return gate.status();
  o->release_limiter = std::make_shared<engine::CtsReleaseLimiter>();
  o->gate_budget = std::make_shared<engine::GateBudget>(*gate);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(const std::string& store_dir) {
  engine::EngineOptions engine_options;
  if (absl::GetFlag(FLAGS_chunk_lanes) > 0)
    engine_options.chunk_lanes = absl::GetFlag(FLAGS_chunk_lanes);
  if (absl::GetFlag(FLAGS_wave_lanes) > 0)
    engine_options.wave_lanes = absl::GetFlag(FLAGS_wave_lanes);
  if (absl::GetFlag(FLAGS_verify_words) < 0)
    return absl::InvalidArgumentError("--verify_words must be >= 0");
  if (absl::GetFlag(FLAGS_verify_words) > 0)
    engine_options.verify_words = static_cast<uint32_t>(absl::GetFlag(FLAGS_verify_words));
  if (absl::GetFlag(FLAGS_small_sbox_min_blocks) < 0)
    return absl::InvalidArgumentError("--small_sbox_min_blocks must be >= 0");
  engine_options.small_sbox_min_blocks =
      static_cast<uint32_t>(absl::GetFlag(FLAGS_small_sbox_min_blocks));
  if (absl::GetFlag(FLAGS_depth3_max_blocks) < -1)
    return absl::InvalidArgumentError("--depth3_max_blocks must be >= -1");
  // Before Validate: what it accepts depends on the security mode.
  if (const std::string sec = absl::GetFlag(FLAGS_security); sec == "malicious") {
    engine_options.malicious = true;
  } else if (sec != "semi-honest") {
    return absl::InvalidArgumentError("--security must be semi-honest or malicious");
  }
  // The depth-3 S-box's default by mode (engine.h depth3_max_blocks says
  // why malicious servers default to never).
  const int depth3 = absl::GetFlag(FLAGS_depth3_max_blocks);
  engine_options.depth3_max_blocks =
      depth3 >= 0 ? static_cast<uint32_t>(depth3)
                  : (engine_options.malicious
                         ? 0
                         : engine::EngineOptions::kDepth3MaxBlocksSemiHonest);
  if (absl::Status s = CtsOptionsFromFlags(store_dir, &engine_options); !s.ok()) return s;
  if (absl::Status s = engine_options.Validate(); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk_lanes / --wave_lanes: ", s.message()));
  return engine_options;
}

std::string LoadGateBudget(const engine::EngineOptions& o) {
  absl::Status st = o.gate_budget->Load();
  return st.ok() ? "" : absl::StrCat("--gate_failures_per_window: ", st.message());
}

void StartCtsPrecompile(const std::string& store_dir) {
  auto& cache = engine::CtsProgramCache::Shared();
  cache.set_masked(absl::GetFlag(FLAGS_cts_masked_gates));
  cache.set_precompile(absl::GetFlag(FLAGS_cts_precompile));
  const std::string path = store_dir + "/cts-programs";
  std::vector<engine::CtsProgramCache::Shape> shapes = engine::CtsProgramCache::UsualShapes();
  for (const auto& s : engine::CtsProgramCache::ReadShapes(path)) {
    if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
  }
  cache.RecordShapesTo(path);
  if (!absl::GetFlag(FLAGS_cts_precompile)) return;
  KMPC_LOG(INFO) << "compiling " << shapes.size() << " aes*-cts programs in the background";
  cache.PrecompileInBackground(std::move(shapes));
}

}  // namespace kmpc::server
