// The aes*-cts gate (docs/reviews/2026-11-26-splice-and-cts-refresh.md,
// "Unauthenticated program churn"; planner.h, "Proven shapes"): the servers compile a program per
// aes*-cts shape (contract::CtsShape), and a gated reply's shape follows
// lengths the client chooses. This class holds all of the KDC module's
// state about it, per cluster: the shapes proven by verified gates, the
// compile budget for unproven gate lengths, and per planned exchange the
// shapes its gate proves and the jobs held back until it verified.
//
// The planner asks it when it admits an exchange (TakeUnproven, HoldBack,
// HoldPrepared) and when the gate's verdict comes (Verified, Failed); the
// dispatcher when a queued gate leaves its cluster (Drop); the router and
// the dispatcher for what a held-back job completes with (DeferredFailure,
// HeldBackFailure).
//
// Invariants:
//  - A held-back job goes only after its gate verified, led by a copy of
//    the gate's DECRYPT (PendingJob::regate) on which it stays gated; never
//    after a failed gate, nor on another cluster without its gate.
//  - A failed gate leaves its shapes proven (ProvenShapes says why).
//  - At most ProvenShapes::kProvenShapes shapes are proven, fewer than a
//    server keeps compiled.
//
// Not thread-safe: every method runs under the dispatcher's mutex.
#ifndef KMPC_KDC_PLUGIN_CTS_GATE_H_
#define KMPC_KDC_PLUGIN_CTS_GATE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "compile_budget.h"
#include "contract.h"
#include "job.h"
#include "prepared.h"

namespace kmpc::kdc {

// The kProvenShapes aes*-cts shapes most recently proven, least recently
// proven first out. Fewer than a server keeps compiled
// (contract::kCtsProgramsKept, beside the timestamps' few), so that
// a proven shape's program is still compiled when a wrong password uses
// it. A failed gate leaves its shapes proven (a wrong password would
// otherwise push the next honest login of the shape to two Runs): a
// proven program the servers evicted all the same (another KDC's logins,
// FAST programs, tickets) was evicted by a compile, so wrong passwords
// cause at most one compile per eviction (docs/reviews/2026-11-26-splice-
// and-cts-refresh.md, review3 finding C). Since the request is dealt padded (contract.h
// SpliceDealtBytes) a realm's logins have few shapes.
class ProvenShapes : public RecentlyProven<contract::CtsShape, 24> {
 public:
  static constexpr size_t kProvenShapes = kCapacity;
  static_assert(kProvenShapes < contract::kCtsProgramsKept);
};

class CtsGate {
 public:
  // unproven_per_minute: BatcherOptions::cts_unproven_per_minute.
  explicit CtsGate(uint64_t unproven_per_minute);

  // The compile budget: whether the given jobs of a new exchange may go,
  // taking a token for each aes*-cts DECRYPT (a timestamp or FAST
  // challenge, or a ticket presented back: the header ticket of a renewal,
  // an S4U2Proxy evidence ticket; each of a length the client chooses) of
  // a shape no verified gate proved. The servers compile a program per such shape, so
  // unauthenticated requests of varied lengths could otherwise make them
  // compile at will; a shape is proven when its gate verifies (Verified),
  // and the usual timestamps' shapes (the servers' precompiled ones) from
  // the start. False (and counted) when the budget is spent: the caller
  // refuses the exchange. A budget of 0: no limit.
  bool TakeUnproven(const std::vector<PendingJob>& given, absl::Time now);
  // Exchange `id` is admitted with `given` (marked gate and gated): the
  // shapes of its aes*-cts gate and gated jobs are noted (proven when the
  // gate verifies), and the gated ones of an unproven shape are moved out
  // of *given, held back.
  void HoldBack(uint64_t id, std::vector<PendingJob>* given);
  // With a job of `id` held back, the jobs prepared for the plan's later
  // items are held back too (moved out of *prepared, never sent for a
  // wrong password), behind a copy of the gate among `given`.
  void HoldPrepared(uint64_t id, const std::vector<PendingJob>& given,
                    std::vector<PendingJob>* prepared);
  // Exchange `id`'s gate verified: its shapes are proven and its held-back
  // jobs appended to *release, the gate's copy first, as one group.
  void Verified(uint64_t id, std::vector<PendingJob>* release);
  // Exchange `id`'s gate failed: its held-back jobs, taken out (its shapes
  // stay proven, ProvenShapes).
  std::vector<PendingJob> Failed(uint64_t id);
  // Exchange `id`'s held-back jobs, taken out: its gate left this
  // cluster's queue (Dispatcher::TakeQueued), or failed.
  std::vector<PendingJob> Drop(uint64_t id);
  // Exchange `id` ended: what was held back for it is wiped.
  void End(uint64_t id) { exchanges_.erase(id); }
  // Forgets every exchange and proven shape but the usual timestamps'.
  void Clear();

  // What a held-back job completes with when its gate failed with `why`: a
  // tag that did not hold (kDataLoss) withholds it as the servers would
  // (kUnauthenticated, JOB_WITHHELD); another failure is HeldBackFailure.
  static absl::Status DeferredFailure(const absl::Status& why);
  // What a held-back job completes with when its gate's Run failed on its
  // cluster or left it (failover): never a status the router retries.
  static absl::Status HeldBackFailure(absl::string_view why);

  const ProvenShapes& proven() const { return proven_; }
  struct Counts {
    // Gated aes*-cts jobs of unproven shapes held back from the gate's
    // Run; of them, sent after it verified.
    uint64_t deferred = 0, deferred_sent = 0;
    // Exchanges refused by the compile budget (TakeUnproven).
    uint64_t unproven_refused = 0;
  };
  const Counts& counts() const { return counts_; }

  // A copy of the given gate DECRYPT `gate` to send again with jobs gated
  // on it in a later Run (PendingJob::regate): the deferred jobs, and an
  // item that runs alone after a miss (Planner::Take).
  static PendingJob Regate(const PendingJob& gate);

 private:
  struct Exchange {
    // The shapes of its given, gated aes*-cts jobs and its gate's (proven
    // when the gate verifies).
    std::vector<contract::CtsShape> shapes;
    // Held back until then, with the jobs prepared for its later items.
    std::vector<PendingJob> deferred;
    // With deferred jobs: their gate again (PendingJob::regate), sent
    // first with them.
    std::optional<PendingJob> regate;
  };
  void ProveUsualGates();

  const uint64_t unproven_per_minute_;
  std::unordered_map<uint64_t, Exchange> exchanges_;
  ProvenShapes proven_;
  Budget unproven_budget_;  // TakeUnproven
  Counts counts_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_CTS_GATE_H_
