// The gate book: what the KDC module knows and decides about its gates, in
// one class, one per module (module.cc makes it; its clusters' dispatchers
// share it). A gate is the DECRYPT an exchange's other jobs are released
// on (PendingJob::gate): a PA-ENC-TIMESTAMP, a FAST challenge, a ticket
// presented back. The book holds
//  - the freshness cache (freshness.h), injected: the module's one, so
//    that a copy of a gate verified on one cluster is caught on another;
//  - the failure bound on wrong passwords per key id (gate_failures.h);
//  - per cluster (each cluster's servers compile their own programs): the
//    aes*-cts shapes its verified gates proved, the compile budget for
//    unproven ones (docs/reviews/2026-11-26-splice-and-cts-refresh.md,
//    "Unauthenticated program churn"; planner.h, "Proven shapes"), and
//    the bucket of budget tokens for plans with a gate (planner.h,
//    "Limits");
//  - per exchange: the shapes its gate proves, its token, the jobs held
//    back until its gate verified, and the copy of the gate they go
//    behind (Regate).
//
// Two calls. Admit: a job is sent, held or refused; before any cluster
// (module.cc) a gate replayed, claimed in flight or past the failure bound
// is refused; on a cluster (Planner::Admit, at an exchange's begin) a
// given aes*-cts DECRYPT of an unproven shape takes a compile token or its
// exchange is refused, and a gated aes*-cts job of an unproven shape is
// held, with the jobs then prepared for its exchange. Verdict: a step
// reports every job it completes (BatchStep::Complete); a gate's verdict
// (its tag, and an aes*-cts PA-ENC-TS-ENC's freshness) says which held-back
// jobs to release (queued as one group behind the gate's copy) or fail.
//
// Invariants:
//  - A held-back job goes only after its gate verified, led by a copy of
//    the gate's DECRYPT (PendingJob::regate) on which it stays gated; never
//    after a failed gate, nor on another cluster without its gate.
//  - A verified aes*-cts timestamp or challenge proves shapes and releases
//    jobs only if fresh (freshness.h); a replayed one fails as the cluster
//    being unavailable, never as a wrong password.
//  - A gate proves its exchange's shapes on its own cluster only; a failed
//    gate leaves them as they were (ProvenShapes says why).
//  - At most ProvenShapes::kProvenShapes shapes are proven per cluster,
//    fewer than a server keeps compiled.
//  - A budget token is given back only when its exchange's gate verified.
//
// Thread-safe: one mutex, held across no call out of the book (the
// freshness cache and the failure bound lock on their own).
#ifndef KMPC_KDC_PLUGIN_GATE_BOOK_H_
#define KMPC_KDC_PLUGIN_GATE_BOOK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batcher.h"
#include "compile_budget.h"
#include "contract.h"
#include "freshness.h"
#include "gate_failures.h"
#include "job.h"

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

class GateBook {
 public:
  // A gate claimed in flight (GateFreshness::Claim) until this goes: a
  // copy of it is refused meanwhile.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept { *this = std::move(o); }
    Claim& operator=(Claim&& o) noexcept;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { Release(); }
    bool held() const { return cache_ != nullptr; }

   private:
    friend class GateBook;
    void Release();
    std::shared_ptr<GateFreshness> cache_;
    std::string digest_;
  };

  enum class Decision { kSend, kHold, kRefuse };
  struct Admission {
    Decision decision = Decision::kSend;
    absl::Status why;    // kRefuse: what the caller refuses with
    bool token = false;  // a budget token was asked for and taken
  };
  struct Outcome {
    // Held back for a gate that verified: queue now, as one group, the
    // gate's copy first (its `enqueued` now).
    std::vector<PendingJob> release;
    // Held back for a gate that failed: never sent. A prepared one is
    // lost (Planner::Lost, not sent); the others complete with `why`.
    std::vector<PendingJob> fail;
    absl::Status why;
    // A line for the KDC's log (the step puts its batch before it), or
    // none (empty).
    int log_level = 0;
    std::string log;
  };
  struct Counts {
    // Gated aes*-cts jobs of unproven shapes held back from the gate's
    // Run; of them, sent after it verified.
    uint64_t deferred = 0, deferred_sent = 0;
    // Exchanges refused by the compile budget.
    uint64_t unproven_refused = 0;
  };

  // options: cts_unproven_per_minute (the compile budget, 0: no limit),
  // speculate_max (the token bucket: speculate_max / 2, refilled at
  // kBudgetRefillPerSec), gate_failures and gate_failure_window (the
  // failure bound). clusters: the module's. freshness: the module's cache
  // (null: one of the book's own).
  explicit GateBook(const BatcherOptions& options, size_t clusters = 1,
                    std::shared_ptr<GateFreshness> freshness = nullptr);

  // Before any cluster (module.cc, the KDC's thread), any job: a gate
  // DECRYPT is refused (kResourceExhausted) if it is an aes*-cts
  // PA-ENC-TS-ENC whose ciphertext verified before within the skew
  // (ReplayedGateError: it reaches no server, spends nothing of the
  // user's release bound), or if its key is past the failure bound;
  // admitted, it holds a slot of the bound until its verdict. With
  // `claim`, such an aes*-cts gate is also claimed in flight, held by
  // *claim (a copy of it is refused as a replay until *claim goes: its
  // job's final completion, or its exchange refused).
  Admission Admit(const Job& job, absl::Time now, Claim* claim = nullptr);
  // On `cluster` (Planner::Admit, under its dispatcher's lock): exchange
  // `id`'s given jobs, marked by the planner, then (a second call) the
  // jobs prepared for its later items. kRefuse: a given aes*-cts DECRYPT
  // of a shape no verified gate proved found the compile budget spent
  // (nothing of the exchange is kept). Else the jobs to hold are moved out
  // of *jobs (kHold): a gated aes*-cts job of an unproven shape, and every
  // job prepared for an exchange holding one; the rest go now. `token`:
  // the exchange asks a budget token (a plan with a gate and room for its
  // prepared work), given back when its gate verifies.
  Admission Admit(size_t cluster, uint64_t id, std::vector<PendingJob>* jobs, bool token,
                  absl::Time now);

  // A step completed job q with *status (a DECRYPT: its plaintext in
  // `out`). Every job is reported once (BatchStep::Complete). A gate
  // DECRYPT's slot of the failure bound is released, a tag that did not
  // hold counted. An exchange's gate (q.gate): verified, an aes*-cts
  // PA-ENC-TS-ENC is checked for freshness (skewed: its held-back jobs
  // fail, it completes; replayed, or the cache full: *status becomes
  // that failure, logged); then its exchange's verdict, as below.
  Outcome Verdict(const PendingJob& q, absl::Status* status, const SecureBytes& out,
                  absl::Time now);
  // Exchange `id`'s gate verified (`verdict` OK): its shapes are proven on
  // its cluster, its token given back, its held-back jobs released. Or
  // not (its tag, its freshness, its Run failed, it left its cluster's
  // queue): its held-back jobs fail, with DeferredFailure(verdict).
  Outcome Verdict(uint64_t id, const absl::Status& verdict, absl::Time now);

  // Exchange `id` ended: what was held back for it is wiped.
  void End(uint64_t id);
  // Forgets `cluster`'s exchanges and proven shapes but the usual
  // timestamps' (the dispatcher closing).
  void Clear(size_t cluster);
  // The KDC's clock skew (krb5.conf clockskew), for the freshness check.
  void set_skew(absl::Duration skew);
  Counts counts(size_t cluster) const;
  bool Proven(size_t cluster, const contract::CtsShape& shape) const;

  // A copy of the given gate DECRYPT `gate` to send again with jobs gated
  // on it in a later Run (PendingJob::regate): the held-back jobs, and an
  // item that runs alone after a miss (Planner::Take).
  static PendingJob Regate(const PendingJob& gate);
  // What a held-back job completes with when its gate failed with `why`: a
  // tag that did not hold (kDataLoss) withholds it as the servers would
  // (kUnauthenticated, JOB_WITHHELD); another failure is HeldBackFailure.
  static absl::Status DeferredFailure(const absl::Status& why);
  // What a held-back job completes with when its gate's Run failed on its
  // cluster or left it (failover): never a status the router retries.
  static absl::Status HeldBackFailure(absl::string_view why);

 private:
  struct Cluster {
    ProvenShapes proven;
    Budget unproven;  // the compile budget
    Budget tokens;    // the budget of plans with a gate
    Counts counts;
  };
  struct Exchange {
    size_t cluster = 0;
    bool token = false;  // holds a budget token
    // The shapes of its given aes*-cts DECRYPTs and gated jobs (proven
    // when the gate verifies).
    std::vector<contract::CtsShape> shapes;
    // Held back until then, with the jobs prepared for its later items.
    std::vector<PendingJob> deferred;
    // With deferred jobs: their gate again, sent first with them.
    std::optional<PendingJob> regate;
  };
  void ProveUsualGates(Cluster& c);
  bool TakeUnprovenLocked(Cluster& c, const std::vector<PendingJob>& jobs, absl::Time now);
  // Notes x's shapes and moves the jobs to hold from *jobs into x.
  void HoldLocked(Cluster& c, Exchange& x, std::vector<PendingJob>* jobs);
  // A verified aes*-cts PA-ENC-TS-ENC's freshness (freshness.h): OK, or
  // the failure its exchange's verdict takes; *status is changed and a
  // line logged (o) for a replayed one, or a full cache.
  absl::Status Fresh(const PendingJob& q, absl::Status* status, const SecureBytes& out,
                     absl::Time now, Outcome* o);

  const uint64_t unproven_per_minute_;
  const std::shared_ptr<GateFreshness> freshness_;
  GateFailures failures_;
  mutable std::mutex mu_;
  std::vector<Cluster> clusters_;
  std::unordered_map<uint64_t, Exchange> exchanges_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_GATE_BOOK_H_
