#include "cts_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cts_items.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

CtsGate::CtsGate(uint64_t unproven_per_minute)
    : unproven_per_minute_(unproven_per_minute),
      unproven_budget_{static_cast<double>(unproven_per_minute),
                       static_cast<double>(unproven_per_minute),
                       unproven_per_minute / 60.0, absl::Time()} {
  ProveUsualGates();
}

// The timestamps of MIT's and Heimdal's kinit (conf || PA-ENC-TS-ENC of 42
// to 44 bytes: microseconds of one to three bytes) under both key sizes,
// which the servers compile at start (mpc-server cts_jobs.h UsualShapes).
void CtsGate::ProveUsualGates() {
  for (int nr : {10, 14})
    for (uint64_t n : {42, 43, 44}) proven_.Prove(contract::MakeCtsShape(pb::JOB_DECRYPT, nr, n, 0, 0));
}

bool CtsGate::TakeUnproven(const std::vector<PendingJob>& given, absl::Time now) {
  if (unproven_per_minute_ == 0) return true;
  for (const PendingJob& q : given) {
    if (q.job.type != pb::JOB_DECRYPT || !CtsJob(q.job)) continue;
    if (proven_.Has(contract::CtsShapeOf(ShapeOf(q.job)))) continue;
    if (!unproven_budget_.Take(now)) {
      ++counts_.unproven_refused;
      return false;
    }
  }
  return true;
}

void CtsGate::HoldBack(uint64_t id, std::vector<PendingJob>* given) {
  Exchange x;
  // The gate's own shape is proven with the rest when it verifies
  // (TakeUnproven), and so is a second ticket's given with it (an
  // S4U2Proxy evidence ticket, gated by its header ticket): its compile was
  // paid for by a token, and the exchange's client holds a ticket that
  // verified.
  for (const PendingJob& q : *given)
    if (q.job.type == pb::JOB_DECRYPT && CtsJob(q.job))
      x.shapes.push_back(contract::CtsShapeOf(ShapeOf(q.job)));
  // A gated aes*-cts job of a shape no verified gate proved waits for this
  // one's verdict: out of the gate's Run, and gated again in the later one
  // on a copy of the gate (regate).
  for (auto it = given->begin(); it != given->end();) {
    if (it->gated && CtsJob(it->job)) {
      const contract::CtsShape shape = contract::CtsShapeOf(ShapeOf(it->job));
      x.shapes.push_back(shape);
      if (!proven_.Has(shape)) {
        x.deferred.push_back(std::move(*it));
        it = given->erase(it);
        ++counts_.deferred;
        continue;
      }
    }
    ++it;
  }
  if (!x.shapes.empty() || !x.deferred.empty()) exchanges_[id] = std::move(x);
}

// What the later items need goes with the held-back job, after the gate
// verified (gated again on the gate's copy, still one group: its pads link
// to its ticket's keystream): nothing is prepared for a wrong password, and
// what is prepared is held from the Run after which the KDC submits the
// later items.
void CtsGate::HoldPrepared(uint64_t id, const std::vector<PendingJob>& given,
                           std::vector<PendingJob>* prepared) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() || it->second.deferred.empty()) return;
  Exchange& x = it->second;
  for (PendingJob& q : *prepared) x.deferred.push_back(std::move(q));
  prepared->clear();
  for (const PendingJob& q : given)
    if (q.gate) x.regate = Regate(q);
}

PendingJob CtsGate::Regate(const PendingJob& gate) {
  PendingJob r;
  r.job = gate.job;  // the same ciphertext, dealt afresh when it goes
  r.blocks = gate.blocks;
  r.group = gate.group;
  r.exchange_id = gate.exchange_id;
  r.prepared = true;
  r.regate = true;
  return r;
}

void CtsGate::Verified(uint64_t id, std::vector<PendingJob>* release) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return;
  Exchange& x = it->second;
  for (const contract::CtsShape& shape : x.shapes) proven_.Prove(shape);
  x.shapes.clear();
  if (x.deferred.empty()) return;
  const absl::Time now = absl::Now();
  if (x.regate) {
    // First: the group's gate in the later Run (BuildRunRequest).
    x.regate->enqueued = now;
    release->push_back(std::move(*x.regate));
    x.regate.reset();
  }
  for (PendingJob& q : x.deferred) {
    q.enqueued = now;
    if (!q.prepared) ++counts_.deferred_sent;
    release->push_back(std::move(q));
  }
  x.deferred.clear();
}

std::vector<PendingJob> CtsGate::Failed(uint64_t id) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return {};
  it->second.shapes.clear();  // proven stays proven (ProvenShapes)
  return Drop(id);
}

std::vector<PendingJob> CtsGate::Drop(uint64_t id) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return {};
  std::vector<PendingJob> deferred = std::move(it->second.deferred);
  it->second.deferred.clear();
  it->second.regate.reset();
  return deferred;
}

void CtsGate::Clear() {
  exchanges_.clear();  // SecureBytes wipes the held-back jobs' inputs
  proven_.Clear();
  ProveUsualGates();
}

absl::Status CtsGate::DeferredFailure(const absl::Status& why) {
  if (absl::IsDataLoss(why))
    return absl::UnauthenticatedError(
        "the MPC cluster withheld the result (its gate did not verify: the job was never sent)");
  // Not a status the router fails over (router.cc ClusterFailure): on
  // another cluster the job would run as an ordinary one, without its gate.
  return HeldBackFailure(why.message());
}

// kCancelled: the KDC answers KRB5KDC_ERR_SVC_UNAVAILABLE as for the
// gate's own cluster failure (module.cc), and the router does not resend it.
absl::Status CtsGate::HeldBackFailure(absl::string_view why) {
  return absl::CancelledError(absl::StrCat(
      "its gate did not complete on this MPC cluster (", why,
      "): a job held back for it is not sent elsewhere without it"));
}

}  // namespace kmpc::kdc
