// One batch inside Engine::RunBatch (engine.h), as its phases see it: the
// jobs, their public plan, their secret shares, the AES output, and the
// protocol context the phases compute with. Each phase is a function of
// (RunContext, BatchState&) in a file of its own:
//   keys.h             the contract check, this party's key for every job,
//                      its key view and what the three views decide;
//   batch_agreement.h  digests and key views compared on the ring, the
//                      first ctr0 draw riding along, the dealt-copy check;
//   pads.h             ctr0 draws, linked pads' counters, the pads' zero
//                      shares and the verification pads' products;
//   cts_plan.h         the aes*-cts jobs' tasks and the tickets' signature
//                      inputs;
//   aes_phase.h        one bitsliced AES pass over every lane;
//   tags.h             powers of H, T' on shares, the masked tag checks,
//                      the aes*-cts verdicts and the gates' budget;
//   collect.h          the per-job results and the conditional release.
// Public facts (JobPlan) and secret buffers (JobSecrets, AesOutput) live
// apart; the secret ones are wiped on every way out (their destructors).
#ifndef KMPC_ENGINE_BATCH_STATE_H_
#define KMPC_ENGINE_BATCH_STATE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "aes/aes.h"
#include "engine/agreement.h"
#include "engine/cts_jobs.h"
#include "engine/engine.h"
#include "engine/gate_budget.h"
#include "net/channel.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"

namespace kmpc::engine {

using Block = std::array<uint8_t, 16>;

// A usage as the 4 big-endian bytes that lead a ctr-mpc tag's GHASH input.
inline std::array<uint8_t, 4> UsageBe(uint32_t usage) {
  return {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
          static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage)};
}

// The public facts of one job inside RunBatch: its outcome so far, its key,
// where its lanes are, the public GHASH input and tag. No secrets.
struct JobPlan {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  bool live() const { return status == pb::JOB_OK && key != nullptr; }
  void Fail(pb::JobStatus s, std::string why) {
    status = s;
    detail = std::move(why);
    key.reset();
  }
  std::shared_ptr<const KeyShares> key;
  uint8_t key_view = kViewNone;
  pb::Cipher cipher = pb::CIPHER_UNSPECIFIED;  // the job's (Job::cipher)
  bool needs_ctr0 = false;  // the cluster picks it
  bool ctr0_drawn = false;
  bool check = false;       // masked zero test of T' ^ T
  Block ctr0{};
  uint64_t nks = 0;               // keystream blocks
  size_t lane0 = 0;               // lane of AES_K(c0); keystream follows
  // Public GHASH input blocks; for a shared message (CHECKSUM, VERIFY) the
  // message blocks are zero here and enter as shared products.
  std::vector<uint8_t> ghash_in;
  size_t m = 0;                   // GHASH blocks = powers needed
  size_t shared_blocks = 0;       // blocks of a shared message D
  Block tag{};                    // DECRYPT: the public tag to check against
  // An aes*-cts job (engine/cts_jobs.h): no AES lane, no GHASH; its task
  // in BatchState::cts once planned (PlanCts), else -1.
  bool cts = false;
  int64_t cts_task = -1;
  bool aes() const { return live() && !cts; }
  // A password-derived key's gated AS reply (GatedUserReply): counted in
  // the key's releases when released; over_rate: this party's
  // CtsReleaseLimiter says the key is past its bound; over_budget: a gate
  // DECRYPT this party's GateRun refused (both in the key view). deal:
  // the key's KeyShares::Origin, what both count by.
  bool gated_reply = false;
  bool over_rate = false;
  bool over_budget = false;
  DealId deal{};
  // Under a password-derived key (KeyKind): a job gated on a stale
  // timestamp is withheld (Collect). A random key's reply is no verifier,
  // and the servers compute it ungated anyway (CheckUserGate).
  bool user_key = false;
};

// One job's secret shares inside RunBatch; wiped when the batch ends.
struct JobSecrets {
  std::array<std::vector<uint8_t>, 2> powers;  // H^1..H^m if m > stored
  std::array<Block, 2> tprime{};               // shares of T' (or the tag)
  Block zero{};                                // PAD: z_party
  // Verification PAD (pads.h): shares of r*H^1..r*H^m, r*AES_K(c0) and r,
  // for a fresh shared random r.
  std::array<std::vector<uint8_t>, 2> rpowers;
  std::array<Block, 2> rmask{}, r{};
  ~JobSecrets();
};

// Share comp (0, 1) of the powers of H job p's tag uses: the ones it
// computed (ExtendPowers) if it needs more than the stored ones.
inline const uint8_t* PowersOf(const JobPlan& p, const JobSecrets& s, int comp) {
  return p.m > static_cast<size_t>(kStoredHPowers) ? s.powers[comp].data()
                                                   : p.key->h_powers[comp].data();
}

// Shares of AES_K(c0) and of the keystream of every lane, wiped on
// destruction (every way out of a batch).
struct AesOutput {
  std::array<std::vector<uint8_t>, 2> out;
  ~AesOutput();
  const uint8_t* Lane(int comp, size_t lane) const { return &out[comp][16 * lane]; }
};

// One RunBatch: the inputs, the public plan and the secret buffers.
struct BatchState {
  // plan and secrets hold one entry per job; `gates` reserves the gate
  // DECRYPTs' budget in `budget` (gate_budget.h).
  BatchState(uint64_t seq, absl::Span<const Job> jobs, GateBudget* budget);

  uint64_t seq = 0;
  absl::Span<const Job> jobs;
  std::vector<JobPlan> plan;
  std::vector<JobSecrets> secrets;
  AesOutput aes;
  size_t nlanes = 0;
  std::vector<bool> pass;  // tag checks that held
  // aes*-cts DECRYPTs whose timestamp is outside the skew (StaleTimestamp):
  // released themselves if their tag held, never the jobs gated on them.
  std::vector<bool> stale;
  std::vector<CtsTask> cts;  // the live aes*-cts jobs, in job order
  // The distinct shapes of `cts` and the sum of their bytes (PlanCtsJob,
  // CtsProgramCache::ShapeBytes, EngineOptions::cts_batch_bytes).
  std::set<CtsProgramCache::Shape> cts_shapes;
  uint64_t cts_shape_bytes = 0;
  std::unique_ptr<GateRun> gates;  // the gate DECRYPTs' reservations
  // The agreement saw a forwarded message fail its tag (agreement.h
  // ForwardTag): RunBatch fails the batch as an integrity failure once it
  // has run in step.
  bool deviated = false;
};

// What the phases of a Run compute with: the engine's ring, PRSS and Rep3
// (whose log, when set, is `log`: malicious mode, protocol/verify.h), its
// options, the server's release bound and the AES kernels' scratch. The
// references are the engine's own; a context lives for one RunBatch.
struct RunContext {
  net::RingChannel& channel;
  protocol::Prss& prss;
  protocol::Rep3& rep3;
  protocol::MulLog& log;
  const EngineOptions& options;
  CtsReleaseLimiter& limiter;
  aes::Workspace& workspace;

  int party() const { return prss.party(); }
  // Every product and opening is logged for the check (malicious mode).
  bool logging() const { return rep3.log() != nullptr; }
};

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_BATCH_STATE_H_
