// The deviation breaker: bounds how often one deviating server can make
// this server run (and abort) a batch. Every batch that fails here because
// the malicious check found a deviation (protocol::IsIntegrityFailure:
// BATCH_INTEGRITY_CHECK_FAILED, the check's or the agreement's) is one
// deviation of this server's ring. After `deviations` of them within
// `window`, the breaker opens: the scheduler refuses every ring batch (Run
// and refresh) with BATCH_BREAKER_OPEN, before anything of it is computed
// or sent on the ring, until an operator clears it (Admin.ResetBreaker,
// `kmpc-admin breaker-reset`).
//
// Why: the check confirms every opening before a ring message depends on
// it (protocol/verify.h, "Openings"), so an aborted batch should show the
// deviating server nothing; the breaker bounds what a flaw in that
// argument could give a cheater, which could otherwise abort without bound
// (the KDC and the clients retry). It turns "security with abort" into "a
// few aborts, then a stop an operator must look at". A confirmed
// deviation means the keys that batch used must be rotated, not only
// refreshed (docs/admin-guide.md).
//
// Invariants:
//  - open() is monotonic between Reset() calls: only Reset() closes it.
//  - Fail closed across restarts: when `state_file` is set, a trip is
//    written there (a new file renamed into place, fsync'd) as it opens; a
//    failed write is logged and the breaker stays open in memory. Load()
//    at start-up reopens a breaker whose file exists, so a restart does
//    not clear it silently.
//  - Only the server's operator clears a persisted trip: Reset() refuses
//    while the file exists, so the operator removes it on the server's
//    host first. The Admin certificate (Admin.ResetBreaker) is on the KDC
//    host: from it alone, an intruder there who also runs a deviating
//    server could reset the bound as often as it liked.
//  - Only public figures: counts and times, never anything of a batch.
// Thread-safe.
#ifndef KMPC_SERVICE_BREAKER_H_
#define KMPC_SERVICE_BREAKER_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kmpc::service {

class Metrics;

struct BreakerOptions {
  // Deviations within `window` that open the breaker; 0: it never opens
  // (the deviations are still counted and logged).
  int deviations = 3;
  absl::Duration window = absl::Minutes(10);
  // Where a trip is persisted (main.cc: STORE_DIR/breaker-open); empty:
  // in memory only (tests).
  std::string state_file;
};

class Breaker {
 public:
  // `metrics` (may be null) gets kmpc_deviations_total and the
  // kmpc_breaker_open gauge.
  explicit Breaker(BreakerOptions options, Metrics* metrics = nullptr);

  // At start-up: reopens the breaker if `state_file` exists (a trip from
  // before the restart). An error only if the file exists but cannot be
  // read (the breaker is then open all the same).
  absl::Status Load();

  // One detected deviation at `now`. True if it opened the breaker.
  bool RecordDeviation(absl::Time now = absl::Now());

  bool open() const;
  // "open since 2026-11-25T16:00:00Z after 3 deviations within 10m" (empty
  // when closed).
  std::string Detail() const;
  // Deviations counted since the process started.
  uint64_t deviations() const;

  // Closes the breaker and forgets the deviations in the window. Returns
  // the Detail() it cleared (empty: it was closed). FAILED_PRECONDITION,
  // and it stays open, while `state_file` exists (the operator's to
  // remove).
  absl::StatusOr<std::string> Reset();

  // The status a refused batch fails with (FAILED_PRECONDITION, carrying
  // kBreakerPayload; service/scheduler_queue.cc maps it to BATCH_BREAKER_OPEN).
  absl::Status RefusalStatus() const;
  static bool IsRefusal(const absl::Status& st);
  // The same refusal for a batch this server would have run but `party`
  // refused because its own breaker is open (scheduler.cc).
  static absl::Status PeerRefusal(int party);
  static constexpr char kBreakerPayload[] = "kmpc.v1/breaker-open";

 private:
  void Trip(absl::Time now, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BreakerOptions options_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  std::deque<absl::Time> recent_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::string detail_ ABSL_GUARDED_BY(mu_);
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_BREAKER_H_
