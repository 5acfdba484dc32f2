// The job engine (engine.h): Create, and RunBatch as one Run of named
// phases over a BatchState (batch_state.h), each a function of the batch
// and the engine's protocol context (RunContext) in a file of its own:
//   LookupKeys      keys.h: contract check, this party's key for every job;
//   AgreeOnBatch    batch_agreement.h: digests of the public inputs and key
//                   views compared on the ring (agreement.h), first ctr0
//                   draw riding along; then what a user's key may not run
//                   fails (user_key_rule.h) and, semi-honest, the dealt
//                   copies are compared (CheckDealing);
//   DrawCounters    pads.h: ctr0 for jobs the agreement drew none for (one
//                   reveal), linked pads' counters;
//   PlanCts         cts_plan.h: the aes*-cts jobs' tasks and programs;
//   RunAes          aes_phase.h: one bitsliced AES pass over every block;
//   ComputeTags     tags.h: H-power extension and T' = GHASH ^ AES_K(c0)
//                   on shares; the aes*-cts tasks (cts_jobs.h) then run,
//                   or, where none needs them (no signed ticket) and the
//                   pass is small, run beside the two as their host
//                   (ride.h: RunAes and ComputeTags' messages ride in the
//                   tasks' first rounds);
//   CheckTags       tags.h: one GF(2^128) multiplication round and one
//                   reveal round; the aes*-cts verdicts; the gates' budget;
//   Collect         collect.h: the per-job results.
// See engine.h and docs/design/enctype.md.
#include "engine/engine.h"

#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/aes_phase.h"
#include "engine/batch_agreement.h"
#include "engine/batch_state.h"
#include "engine/collect.h"
#include "engine/cts_plan.h"
#include "engine/keys.h"
#include "engine/pads.h"
#include "engine/ride.h"
#include "engine/tags.h"
#include "protocol/gf128.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// The GHASH input of FINALIZE's tag over C, after the checks every
// FINALIZE makes (the state's party, usage and length; enough powers).
absl::StatusOr<std::vector<uint8_t>> FinalizeInput(
    const EncryptState& state, uint32_t usage,
    absl::Span<const uint8_t> ciphertext) {
  if (state.party < 0 || state.party > 2) {
    return absl::InvalidArgumentError("FINALIZE: state has no party");
  }
  if (usage != state.usage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FINALIZE: usage ", usage, " differs from the encryption's ", state.usage));
  }
  // At most the keystream's length: a KDC may use a prefix of it (its
  // speculative keystream is sized by a bound); the tag covers that C.
  const uint64_t n = contract::CeilBlocks(ciphertext.size());
  if (n > state.nblocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FINALIZE: ciphertext of ", ciphertext.size(), " bytes is ", n,
        " blocks, the encryption produced only ", state.nblocks));
  }
  std::vector<uint8_t> x = protocol::GhashInput(UsageBe(usage), ciphertext);
  if (state.NumPowers() < x.size() / 16) {
    return absl::InvalidArgumentError("FINALIZE: state lacks powers of H");
  }
  return x;
}

}  // namespace

absl::Status FinalizeShare(const EncryptState& state, uint32_t usage,
                           absl::Span<const uint8_t> ciphertext,
                           std::array<uint8_t, 16>& share) {
  absl::StatusOr<std::vector<uint8_t>> x = FinalizeInput(state, usage, ciphertext);
  if (!x.ok()) return x.status();
  // Component s_party only: GHASH is linear in the powers of H, so the
  // three components XOR to GHASH_H(A, C) ^ AES_K(c0).
  protocol::GhashWithPowers(*x, state.Powers(0), share.data());
  for (int b = 0; b < 16; ++b) share[b] ^= state.mask[0][b];
  return absl::OkStatus();
}

namespace {

// AES lanes of the Run's ctr-mpc jobs (RunAes places 1 + nks a job).
size_t AesLanes(const BatchState& b) {
  size_t n = 0;
  for (const JobPlan& w : b.plan)
    if (w.aes()) n += 1 + w.nks;
  return n;
}

// Whether RunAes and ComputeTags ride along the aes*-cts tasks (ride.h):
// a public rule on the agreed batch, alike on every party. Some AES and
// some task; no signed ticket (FillTicketSignatures reads ComputeTags'
// pads into its task); and a pass of at most kRideMaxAesLanes lanes (a
// few logins' tickets: the rider's log, checked with the host's, stays
// small), while a storm's large Runs keep the phases in turn on one
// thread (their rounds are many and their AES pass no longer small).
constexpr size_t kRideMaxAesLanes = 512;
bool RidesAlong(const BatchState& b) {
  if (b.cts.empty()) return false;
  for (const CtsTask& t : b.cts)
    if (t.ticket) return false;
  const size_t lanes = AesLanes(b);
  return lanes > 0 && lanes <= kRideMaxAesLanes;
}

// Malicious security (protocol/verify.h): while it lives, every product and
// opening is logged, to be verified before a value depending on it is
// opened (CheckTags) or released (Collect); it leaves the log empty and
// drops a large batch's buffers.
struct LogScope {
  protocol::Rep3& rep3;
  protocol::MulLog& log;
  LogScope(protocol::Rep3& r, protocol::MulLog& l, bool on) : rep3(r), log(l) {
    if (on) rep3.set_log(&log);
  }
  ~LogScope() {
    rep3.set_log(nullptr);
    log.Clear();
    log.ReleaseExcess();
  }
};

}  // namespace

class Engine::Impl {
 public:
  Impl(net::RingChannel& channel, protocol::Prss prss, EngineOptions options)
      : channel_(channel),
        ride_(channel_),
        prss_(std::move(prss)),
        rep3_(ride_, prss_),
        options_(options),
        limiter_(options_.release_limiter != nullptr ? options_.release_limiter
                                                     : std::make_shared<CtsReleaseLimiter>()),
        budget_(options_.gate_budget != nullptr ? options_.gate_budget
                                                : std::make_shared<GateBudget>()) {}

  int party() const { return prss_.party(); }
  size_t verify_retained_bytes() const {
    return log_.retained_bytes() + rider_log_.retained_bytes();
  }

  absl::StatusOr<BatchResult> RunBatch(uint64_t batch_seq,
                                       absl::Span<const Job> jobs,
                                       const KeyLookup& lookup) {
    if (broken_) {
      return absl::FailedPreconditionError(
          "engine unusable after a ring failure: create a new Engine on a "
          "fresh ring");
    }
    BatchState b(batch_seq, jobs, budget_.get());
    absl::StatusOr<BatchResult> r = Run(b, lookup);
    // A deviation seen in the agreement (a forwarded message whose tag
    // failed) fails the batch as an integrity failure, whatever came after
    // it: the rest of the batch ran in step with the originator's view,
    // or, if the originator itself deviated, the ring may have broken.
    if (b.deviated) r = protocol::IntegrityFailure();
    // ABORTED / FAILED_PRECONDITION (agreement) and INVALID_ARGUMENT (batch
    // too large) are decided identically by all parties with the ring in
    // step; anything else came from the channel.
    if (!r.ok() && r.status().code() != absl::StatusCode::kAborted &&
        r.status().code() != absl::StatusCode::kFailedPrecondition &&
        r.status().code() != absl::StatusCode::kInvalidArgument) {
      broken_ = true;
    }
    return r;  // b's secret buffers are wiped when it goes
  }


 private:
  // One batch's phases on b, with b.deviated set by the agreement.
  absl::StatusOr<BatchResult> Run(BatchState& b, const KeyLookup& lookup);
  // RunAes, ComputeTags and the aes*-cts tasks: in turn, or the first two
  // riding along the tasks (RidesAlong).
  absl::Status RunAesTagsAndCts(const RunContext& ctx, BatchState& b);

  net::RingChannel& channel_;
  // The ring as the Run's phases see it: channel_, carrying a rider's
  // messages while one runs (ride.h).
  RideAlong ride_;
  protocol::Prss prss_;
  protocol::Rep3 rep3_;
  EngineOptions options_;
  // The server's per-deal bounds (EngineOptions::release_limiter,
  // gate_budget), or this engine's own.
  std::shared_ptr<CtsReleaseLimiter> limiter_;
  std::shared_ptr<GateBudget> budget_;
  aes::Workspace workspace_;
  protocol::MulLog log_;
  // The rider's products (malicious mode), moved into log_ after it.
  protocol::MulLog rider_log_;
  // Set after a channel failure: the parties may be out of step (PRSS
  // counters, half-read messages), so the engine refuses further batches.
  bool broken_ = false;
};

absl::StatusOr<BatchResult> Engine::Impl::Run(BatchState& b, const KeyLookup& lookup) {
  const RunContext ctx{ride_, prss_, rep3_, log_, options_, *limiter_, workspace_};
  LookupKeys(ctx, b, lookup);
  // From here on, in malicious mode, every product and opening is logged.
  const LogScope scope(rep3_, log_, options_.malicious);
  if (absl::Status s = AgreeOnBatch(ctx, b); !s.ok()) return s;
  ApplyUserKeyRule(b);
  if (!options_.malicious && AnyDealt(b)) {
    if (absl::Status s = CheckDealing(ctx, b); !s.ok()) return s;
  }
  if (b.deviated) {
    // A forwarded header or view failed its tag: the headers this party
    // decided on may not be its peers' (an honest successor whose key view
    // differs may have revealed, as its ctr0 shares, PRSS components of
    // ids this party would go on to use as masks). Every id revealed in
    // the agreement is below counter_before + 2^32 (u32 counters), so past
    // 2^40 more no message this party sends in this batch is masked by a
    // revealed component. The batch fails (RunBatch); the engine is
    // replaced after it, so the skip never reaches another batch.
    prss_.Skip(uint64_t{1} << 40);
  }
  if (absl::Status s = DrawCounters(ctx, b); !s.ok()) return s;
  LinkPads(b);
  if (absl::Status s = PlanCts(ctx, b); !s.ok()) return s;
  if (absl::Status s = RunAesTagsAndCts(ctx, b); !s.ok()) return s;
  if (absl::Status s = CheckTags(ctx, b); !s.ok()) return s;
  if (absl::Status s = OpenCtsVerdicts(ctx, b); !s.ok()) return s;
  SettleGates(b);
  DrawPadZeros(ctx, b);
  if (ctx.logging() && !log_.empty()) {
    if (absl::Status s = protocol::Verifier::Verify(rep3_, log_); !s.ok()) return s;
  }
  return Collect(ctx, b);
}

absl::Status Engine::Impl::RunAesTagsAndCts(const RunContext& ctx, BatchState& b) {
  const bool loaded = b.cts.size() > options_.cts_masked_max_jobs ||
                      (options_.busy && options_.busy());
  bool rep3 = loaded;
  if (options_.cts_loaded_at != nullptr && options_.cts_masked_calm > absl::ZeroDuration()) {
    const absl::Time now = absl::Now();
    if (loaded) options_.cts_loaded_at->store(absl::ToUnixNanos(now));
    rep3 = rep3 || now - absl::FromUnixNanos(options_.cts_loaded_at->load()) <
                       options_.cts_masked_calm;
  }
  const uint64_t masked_max = rep3 ? 0 : options_.cts_masked_max_and_words;
  auto cts = [&] {
    return RunCtsTasks(rep3_, prss_, options_.verify_words, absl::MakeSpan(b.cts), masked_max);
  };
  auto in_turn = [&]() -> absl::Status {
    if (absl::Status s = RunAes(ctx, b); !s.ok()) return s;
    if (absl::Status s = ComputeTags(ctx, b); !s.ok()) return s;
    FillTicketSignatures(ctx, b);
    return cts();
  };
  if (!RidesAlong(b)) return in_turn();
  // The rider's PRSS keys: a fresh random value's two components, k'_j =
  // F(k_j, id) for an id the Run's own PRSS never uses again, so each is
  // known to the two parties that hold k_j (prss.h) and the rider's ids
  // are not the host's. Its Rep3 and log are its own (ride.h).
  std::array<uint8_t, 16> k0, k1;
  prss_.RandomShares(k0.data(), k1.data(), k0.size());
  protocol::Prss rider_prss(party(), k0.data(), k1.data());
  share::Wipe(k0.data(), k0.size());
  share::Wipe(k1.data(), k1.size());
  struct ClearRiderLog {
    protocol::MulLog& log;
    ~ClearRiderLog() {
      log.Clear();
      log.ReleaseExcess();
    }
  } clear_rider_log{rider_log_};
  const bool logging = ctx.logging();
  // The rider runs no check of its own (the AES kernel's at verify_words):
  // its log holds no opening, so a check there would not confirm the
  // agreement's openings (ctr0) before its own last one (verify.h), nor
  // start silent after a deviation this party saw. Its products are
  // checked with the host's, in the Run's next check (MulLog::Append).
  EngineOptions rider_options = options_;
  rider_options.verify_words = std::numeric_limits<uint32_t>::max();
  // Every return below ends the rider first (it uses this frame's locals).
  struct EndRide {
    RideAlong& ride;
    ~EndRide() {
      if (ride.riding()) (void)ride.Join(true);
    }
  } end_ride{ride_};
  const bool riding = ride_.Start([&](net::RingChannel& ch) -> absl::Status {
    protocol::Rep3 rep3(ch, rider_prss);
    if (logging) rep3.set_log(&rider_log_);
    const RunContext rider{ch, rider_prss, rep3, rider_log_, rider_options, *limiter_,
                           workspace_};
    if (absl::Status s = RunAes(rider, b); !s.ok()) return s;
    return ComputeTags(rider, b);
  });
  // No thread: the parties that rode expect this one's combined messages,
  // so the Run fails here, the engine with it (not an in-step status:
  // RunBatch), and the server's next Run starts on a fresh ring.
  if (!riding) return absl::ResourceExhaustedError("no thread for the Run's AES and tags");
  absl::Status st = cts();
  absl::Status rode = ride_.Join(!st.ok());
  if (!st.ok()) return st;
  if (!rode.ok()) return rode;
  // The check after the tasks covers the rider's products too.
  return logging ? log_.Append(rider_log_) : absl::OkStatus();
}

Job::~Job() {
  for (auto& s : data_shares) share::Wipe(s);
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::Status EngineOptions::Validate() const {
  if (chunk_lanes == 0 || chunk_lanes % 64 != 0) {
    return absl::InvalidArgumentError("chunk_lanes must be a positive multiple of 64");
  }
  if (wave_lanes < chunk_lanes) {
    return absl::InvalidArgumentError("wave_lanes must be >= chunk_lanes");
  }
  if (verify_words == 0) {
    return absl::InvalidArgumentError("verify_words must be > 0");
  }
  if (cts_batch_bytes == 0) {
    return absl::InvalidArgumentError("cts_batch_bytes must be > 0");
  }
  if (cts_skew_s == 0 || cts_skew_s > 86400) {
    return absl::InvalidArgumentError("cts_skew_s must be 1 to 86400 seconds");
  }
  // Malicious mode: protocol/verify.h's per-batch soundness (< 2^-40)
  // takes at most kMaxVerifiesPerBatch Verifies. A batch of the largest
  // size (contract::kMaxBatchBlocks) runs ceil(blocks / wave_lanes) waves,
  // each with at most one Verify per AND layer (AES-256 with the 32-AND
  // S-box: 14 x 6 layers) and one at its end, and two more follow (tags,
  // batch end). With --verify_words=1 every layer boundary checks.
  if (malicious) {
    const uint64_t waves = (contract::kMaxBatchBlocks + wave_lanes - 1) / wave_lanes;
    const uint64_t verifies = waves * (kMaxAndLayersPerWave + 1) + 2;
    if (verifies > kMaxVerifiesPerBatch)
      return absl::InvalidArgumentError(absl::StrCat(
          "--wave_lanes=", wave_lanes, " with --security=malicious: a batch of ",
          contract::kMaxBatchBlocks, " blocks runs ", waves, " waves, up to ",
          verifies, " checks, over the ", kMaxVerifiesPerBatch,
          " that keep a cheat's chance below 2^-40 per batch (protocol/verify.h); "
          "use --wave_lanes of at least ",
          (contract::kMaxBatchBlocks + MaxWavesPerBatch() - 1) / MaxWavesPerBatch()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    net::RingChannel& channel, EngineOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (channel.party() < 0 || channel.party() > 2) {
    return absl::InvalidArgumentError("channel party must be 0, 1 or 2");
  }
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  return std::unique_ptr<Engine>(new Engine(
      std::make_unique<Impl>(channel, std::move(*prss), options)));
}

int Engine::party() const { return impl_->party(); }

size_t Engine::verify_retained_bytes() const { return impl_->verify_retained_bytes(); }

absl::StatusOr<BatchResult> Engine::RunBatch(uint64_t batch_seq,
                                             absl::Span<const Job> jobs,
                                             const KeyLookup& lookup) {
  return impl_->RunBatch(batch_seq, jobs, lookup);
}

}  // namespace kmpc::engine
