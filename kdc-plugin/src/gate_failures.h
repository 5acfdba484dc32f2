// The module's own bound on wrong passwords (docs/security-model.md, "The
// servers' failure budget"): the MPC servers refuse a user key's gate
// DECRYPTs once --gate_failures_per_window of them failed within their
// window (mpc-server/src/engine/gate_budget.h), the right password's too.
// So that outsiders guessing through the KDC never reach that bound (and
// lock the user out of the cluster), the module stops a key first: once
// `limit` gate DECRYPTs under a key id failed (a tag that did not hold)
// within `window` (from the window's first failure), every new gate
// DECRYPT under it is refused before any Run (kResourceExhausted: the KDC
// answers KDC_ERR_SVC_UNAVAILABLE, which MIT's lockout does not count)
// until the window ends. MIT's own lockout (a policy's max_failure) stops
// a principal earlier where the realm sets one.
//
// Gates in flight count too: Admit reserves a slot per gate it lets go and
// Done releases it, so that a burst of wrong passwords sent at once (none
// of whose verdicts is back yet) is stopped at the limit, not after it.
// A slot whose gate never reports back (an exchange refused after its
// gate was admitted: planner capacity, the compile budget) lapses after
// kReservationTtl, longer than a gate's life in the module (deadline_ms,
// 3 s, and a held-back reply's regate within speculate_ttl_ms, 4 s) and
// short enough that such refusals keep a user out for seconds only.
//
// A gate DECRYPT here: a PA-ENC-TIMESTAMP (usage 1) or a FAST challenge
// (usage 54), under any cipher. One per module, in its gate book
// (gate_book.h: Admit reserves, Verdict reports): each krb5kdc worker (-w)
// and each KDC counts its own, so keep limit x workers x KDCs below the
// servers' --gate_failures_per_window (kdc.conf [kdcmpc] gate_failures).
// Public figures only (key ids, times, counts). Thread-safe.
#ifndef KMPC_KDC_PLUGIN_GATE_FAILURES_H_
#define KMPC_KDC_PLUGIN_GATE_FAILURES_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "job.h"

namespace kmpc::kdc {

// The gate DECRYPTs' key usages, each over a PA-ENC-TS-ENC: a
// PA-ENC-TIMESTAMP's (RFC 4120 section 5.2.7.2, KRB5_KEYUSAGE_AS_REQ_PA_ENC_TS)
// and the client's FAST encrypted challenge's (RFC 6113 section 5.4.6,
// KEY_USAGE_ENC_CHALLENGE_CLIENT).
inline constexpr uint32_t kTimestampUsage = 1;
inline constexpr uint32_t kChallengeUsage = 54;

class GateFailures {
 public:
  // Keys with failures in their window held at most; past it the oldest
  // windows are forgotten first (a flood of wrong passwords over many
  // names loses track of some: those keys then meet the servers' bound).
  static constexpr size_t kMaxKeys = size_t{1} << 18;
  // How long an admitted gate holds its slot without reporting back.
  static constexpr absl::Duration kReservationTtl = absl::Seconds(15);

  // limit, window: kdc.conf [kdcmpc] gate_failures (0: no bound),
  // gate_failure_window_s (BatcherOptions::gate_failures,
  // gate_failure_window).
  explicit GateFailures(uint64_t limit = 10, absl::Duration window = absl::Hours(1))
      : limit_(limit), window_(window) {}

  // Whether `job` is a gate DECRYPT (usage 1 or 54).
  static bool IsGate(const Job& job);
  // OK, or why a gate DECRYPT under job's key may not go now
  // (kResourceExhausted: its failures in the window and its gates in
  // flight reach the limit); OK for any other job. An admitted gate holds
  // a slot until Done (or kReservationTtl).
  absl::Status Admit(const Job& job, absl::Time now);
  // An admitted gate DECRYPT's verdict is back: its slot is released, and
  // `failed` (its tag did not hold) counts in its key's window.
  void Done(const Job& job, bool failed, absl::Time now);
  void Failed(const Job& job, absl::Time now) { Done(job, true, now); }
  // Failures counted for `key_id` at `now`.
  uint64_t Failures(const std::string& key_id, absl::Time now) const;
  // Gates admitted under `key_id` and not yet Done at `now`.
  size_t InFlight(const std::string& key_id, absl::Time now) const;

 private:
  struct Window {
    absl::Time start;
    uint64_t failures = 0;
    std::vector<absl::Time> in_flight;  // admission times, oldest first
  };
  bool Expired(const Window& w, absl::Time now) const { return now - w.start >= window_; }
  void PruneLocked(absl::Time now);
  static void LapseLocked(Window& w, absl::Time now);
  uint64_t FailuresLocked(const Window& w, absl::Time now) const {
    return w.failures == 0 || Expired(w, now) ? 0 : w.failures;
  }

  mutable std::mutex mu_;
  const uint64_t limit_;
  const absl::Duration window_;
  std::unordered_map<std::string, Window> keys_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_GATE_FAILURES_H_
