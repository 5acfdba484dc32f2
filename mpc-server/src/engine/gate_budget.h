// The servers' bound on the password oracle of a user's gate
// (docs/security-model.md, "The servers' failure budget"). A gate DECRYPT
// (GateDecrypt) answers whether a ciphertext was made under a user's
// password-derived key: its verdict (JOB_OK or JOB_INTEGRITY_FAILED) goes
// back to the KDC, so whoever holds the KDC's client certificate could
// test password guesses online at the cluster's speed. Each server counts
// the gate DECRYPTs that failed, per deal (KeyShares::origin_deal_id, so
// that RefreshKeys copies of one key count together), and refuses:
//   - per Run: more than GateBudgetOptions::per_run gate DECRYPTs of one
//     deal in one batch;
//   - per window: any gate DECRYPT of a deal whose failures in its window
//     (GateBudgetOptions::window, from the window's first failure) plus
//     the gate DECRYPTs in flight reach failures_per_window, until the
//     window ends.
// A refused gate DECRYPT is not computed: the job fails JOB_RATE_LIMITED
// before any round, alike on every party (the engine puts this party's
// "refused" into its key view, and any party's refusal fails the job on
// all three, keys.h DecideKey). A failure is counted only after the
// verdict is opened among the servers, and before any result leaves them.
//
// Invariants:
//  - Failures + reservations in flight never pass failures_per_window
//    within a window, whatever number of batches run at once (Reserve
//    counts a gate DECRYPT in flight until Settle).
//  - Fail closed across restarts: every counted failure is appended to
//    `state_file` (one line per change, fdatasync'd) before Settle
//    returns; Load() at start-up reads it back (the last line of a deal
//    wins). The file is rewritten whole (a new file renamed into place)
//    at Load and when it holds many more lines than live deals.
//  - Public figures only: deal ids (not secret, engine.h KeyShares), times
//    and counts.
// Thread-safe: a server's workers share one GateBudget (EngineOptions).
#ifndef KMPC_ENGINE_GATE_BUDGET_H_
#define KMPC_ENGINE_GATE_BUDGET_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace kmpc::engine {

using DealId = std::array<uint8_t, 16>;

// Whether `job` is a gate DECRYPT under `key`: a password-derived key's
// DECRYPT of the PA-ENC-TIMESTAMP (usage 1 under the dealt key) or of the
// client's FAST challenge (usage 54 under a FAST key), under any cipher
// (aes*-cts or aes*-ctr-mpc).
bool GateDecrypt(const Job& job, const KeyShares& key);

struct GateBudgetOptions {
  // Gate DECRYPTs of one deal in one batch; 0: no cap.
  uint32_t per_run = 4;
  // Failed gate DECRYPTs of one deal per window; 0: no bound.
  uint32_t failures_per_window = 100;
  absl::Duration window = absl::Hours(1);
  // Where the counts persist (engine_flags.cc: STORE_DIR/gate-failures);
  // empty: in memory only (tests).
  std::string state_file;
  // What GateRun reads the time from; null: absl::Now (tests move it).
  std::function<absl::Time()> clock;
};

class GateBudget {
 public:
  explicit GateBudget(GateBudgetOptions options = {});

  // At start-up: reads `state_file` (a missing file is an empty budget),
  // drops the windows that ended by `now` and rewrites the file with the
  // rest. INTERNAL if it exists but cannot be read or rewritten.
  absl::Status Load(absl::Time now = absl::Now());

  // One more gate DECRYPT of `deal` in flight, if its window's failures
  // plus those in flight are below failures_per_window; else false and
  // nothing counted.
  bool Reserve(const DealId& deal, absl::Time now);
  // The end of a reservation: failed (the verdict opened as a failure)
  // counts one failure in the deal's window (starting one if none runs)
  // and persists it; else the reservation is dropped.
  void Settle(const DealId& deal, bool failed, absl::Time now);

  // Failures counted in `deal`'s window at `now`.
  uint32_t Failures(const DealId& deal, absl::Time now) const;
  uint32_t per_run() const { return options_.per_run; }
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }
  // The last error writing state_file (OK if none): the count is then
  // held in memory only until the next write succeeds.
  absl::Status write_status() const;

 private:
  struct Entry {
    absl::Time start;  // the window's first failure
    uint32_t failures = 0;
    uint32_t pending = 0;  // reserved, not settled
  };
  bool Expired(const Entry& e, absl::Time now) const;
  void PersistLocked(const DealId& deal, const Entry& e, absl::Time now);
  absl::Status RewriteLocked(absl::Time now);

  const GateBudgetOptions options_;
  mutable std::mutex mu_;
  std::map<DealId, Entry> entries_;
  size_t lines_ = 0;  // lines in state_file since its last rewrite
  absl::Status write_status_;
};

// One batch's gate DECRYPTs (batch_state.h): takes each one's reservation,
// counts the batch's per deal against per_run, and settles each with its
// verdict; reservations never settled (the job failed before its verdict,
// or the batch before the verdicts) are dropped when it dies.
class GateRun {
 public:
  explicit GateRun(GateBudget* budget) : budget_(budget) {}
  ~GateRun();
  GateRun(const GateRun&) = delete;
  GateRun& operator=(const GateRun&) = delete;

  // Job j, a gate DECRYPT of `deal`: false (refused) past per_run gate
  // DECRYPTs of the deal in this batch or when the budget refuses.
  bool Take(size_t j, const DealId& deal);
  // Job j's verdict, opened among the servers; a job Take did not admit
  // is ignored.
  void Settle(size_t j, bool passed);

 private:
  GateBudget* const budget_;
  std::map<DealId, uint32_t> in_run_;
  std::map<size_t, DealId> open_;
};

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_GATE_BUDGET_H_
