#include "gate_book.h"

#include <syslog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "cts_items.h"
#include "prepared.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

namespace {

// An aes*-cts gate DECRYPT whose plaintext is a PA-ENC-TS-ENC (a
// PA-ENC-TIMESTAMP, a FAST challenge): what the freshness cache keeps.
bool CtsTimestampGate(const Job& job) {
  return job.type == pb::JOB_DECRYPT && contract::CtsCipher(job.cipher) &&
         (job.usage == kTimestampUsage || job.usage == kChallengeUsage);
}

absl::Span<const uint8_t> Input(const Job& job) {
  return absl::MakeConstSpan(job.input.data(), job.input.size());
}

}  // namespace

GateBook::Claim& GateBook::Claim::operator=(Claim&& o) noexcept {
  if (this != &o) {
    Release();
    cache_ = std::move(o.cache_);
    digest_ = std::move(o.digest_);
    o.cache_.reset();
  }
  return *this;
}

void GateBook::Claim::Release() {
  if (cache_ != nullptr) cache_->Unclaim(digest_);
  cache_.reset();
  digest_.clear();
}

GateBook::GateBook(const BatcherOptions& o, size_t clusters,
                   std::shared_ptr<GateFreshness> freshness)
    : unproven_per_minute_(o.cts_unproven_per_minute),
      freshness_(freshness != nullptr ? std::move(freshness)
                                      : std::make_shared<GateFreshness>()),
      failures_(o.gate_failures, o.gate_failure_window),
      clusters_(std::max<size_t>(clusters, 1)) {
  const double unproven = static_cast<double>(o.cts_unproven_per_minute);
  const double tokens = static_cast<double>(o.speculate_max / 2);
  for (Cluster& c : clusters_) {
    c.unproven = Budget{unproven, unproven, unproven / 60.0, absl::Time()};
    c.tokens = Budget{tokens, tokens, kBudgetRefillPerSec, absl::Time()};
    ProveUsualGates(c);
  }
}

// The timestamps of MIT's and Heimdal's kinit (conf || PA-ENC-TS-ENC of 42
// to 44 bytes: microseconds of one to three bytes) under both key sizes,
// which the servers compile at start (mpc-server cts_jobs.h UsualShapes).
void GateBook::ProveUsualGates(Cluster& c) {
  for (int nr : {10, 14})
    for (uint64_t n : {42, 43, 44})
      c.proven.Prove(contract::MakeCtsShape(pb::JOB_DECRYPT, nr, n, 0, 0));
}

GateBook::Admission GateBook::Admit(const Job& job, absl::Time now, Claim* claim) {
  Admission a;
  a.decision = Decision::kRefuse;
  const bool timestamp = CtsTimestampGate(job);
  if (timestamp && freshness_->Seen(job.key_id, Input(job), now)) {
    a.why = ReplayedGateError(
        "a replayed timestamp: this ciphertext verified before within the clock skew");
    return a;
  }
  // An admitted gate holds a slot of the failure bound until its verdict.
  a.why = failures_.Admit(job, now);
  if (!a.why.ok()) return a;
  if (claim != nullptr && timestamp) {
    std::optional<std::string> d = freshness_->Claim(job.key_id, Input(job));
    if (!d) {
      a.why = ReplayedGateError("a copy of a timestamp whose first copy is still being verified");
      return a;
    }
    claim->Release();
    claim->cache_ = freshness_;
    claim->digest_ = std::move(*d);
  }
  a.decision = Decision::kSend;
  return a;
}

// One token for each given aes*-cts DECRYPT (a timestamp or FAST
// challenge, or a ticket presented back: the header ticket of a renewal,
// an S4U2Proxy evidence ticket; each of a length the client chooses) of a
// shape no verified gate proved: the servers compile a program per such
// shape, so unauthenticated requests of varied lengths could otherwise
// make them compile at will. All of them, or the exchange is refused.
bool GateBook::TakeUnprovenLocked(Cluster& c, const std::vector<PendingJob>& jobs,
                                  absl::Time now) {
  if (unproven_per_minute_ == 0) return true;
  for (const PendingJob& q : jobs) {
    if (q.job.type != pb::JOB_DECRYPT || !q.figures.cts) continue;
    if (c.proven.Has(q.figures.program)) continue;
    if (!c.unproven.Take(now)) {
      ++c.counts.unproven_refused;
      return false;
    }
  }
  return true;
}

GateBook::Admission GateBook::Admit(size_t cluster, uint64_t id, std::vector<PendingJob>* jobs,
                                    bool token, absl::Time now) {
  Admission a;
  std::lock_guard<std::mutex> l(mu_);
  Cluster& c = clusters_.at(cluster);
  if (!TakeUnprovenLocked(c, *jobs, now)) {
    a.decision = Decision::kRefuse;
    a.why = absl::ResourceExhaustedError(
        "over the compile budget: an aes*-cts timestamp, challenge or presented "
        "ticket of a length no verified exchange proved yet "
        "(cts_unproven_per_minute)");
    return a;
  }
  Exchange& x = exchanges_[id];
  x.cluster = cluster;
  if (token) a.token = x.token = c.tokens.Take(now);
  const size_t given = jobs->size();
  HoldLocked(c, x, jobs);
  if (jobs->size() < given) a.decision = Decision::kHold;
  if (!x.token && x.shapes.empty() && x.deferred.empty()) exchanges_.erase(id);
  return a;
}

// The gate's own shape is proven with the rest when it verifies, and so is
// a second ticket's given with it (an S4U2Proxy evidence ticket, gated by
// its header ticket): its compile was paid for by a token, and the
// exchange's client holds a ticket that verified. A gated aes*-cts job of
// a shape no verified gate proved waits for this one's verdict: out of the
// gate's Run, and gated again in the later one on a copy of the gate. What
// is prepared for the later items goes with it (gated again on the gate's
// copy, still one group: its pads link to its ticket's keystream), so that
// nothing is prepared for a wrong password, and what is prepared is held
// from the Run after which the KDC submits the later items.
void GateBook::HoldLocked(Cluster& c, Exchange& x, std::vector<PendingJob>* jobs) {
  for (const PendingJob& q : *jobs)
    if (!q.prepared && q.job.type == pb::JOB_DECRYPT && q.figures.cts)
      x.shapes.push_back(q.figures.program);
  for (auto it = jobs->begin(); it != jobs->end();) {
    bool hold = it->prepared && !x.deferred.empty();
    if (!it->prepared && it->gated && it->figures.cts) {
      x.shapes.push_back(it->figures.program);
      hold = !c.proven.Has(it->figures.program);
      if (hold) ++c.counts.deferred;
    }
    if (!hold) {
      ++it;
      continue;
    }
    x.deferred.push_back(std::move(*it));
    it = jobs->erase(it);
  }
  if (x.deferred.empty() || x.regate) return;
  for (const PendingJob& q : *jobs)
    if (q.gate) x.regate = Regate(q);
}

absl::Status GateBook::Fresh(const PendingJob& q, absl::Status* status, const SecureBytes& out,
                             absl::Time now, Outcome* o) {
  using V = GateFreshness::Verdict;
  switch (freshness_->Check(q.job.key_id, Input(q.job),
                            absl::MakeConstSpan(out.data(), out.size()), now)) {
    case V::kFresh:
      return absl::OkStatus();
    case V::kSkewed:
      return absl::DataLossError("its timestamp is outside the KDC's clock skew");
    case V::kFull:
      o->log_level = LOG_WARNING;
      o->log = absl::StrCat("the aes*-cts replay cache is full (", GateFreshness::kMaxEntries,
                            " gates within the clock skew): login refused");
      *status = absl::ResourceExhaustedError("the aes*-cts gates' replay cache is full");
      return *status;
    case V::kReplayed:
      break;
  }
  o->log_level = LOG_NOTICE;
  o->log = absl::StrCat("a replayed aes*-cts ",
                        q.job.usage == kChallengeUsage ? "FAST challenge" : "PA-ENC-TIMESTAMP",
                        " (verified before within the clock skew) refused");
  *status = ReplayedGateError(
      "a replayed timestamp: this ciphertext verified before within the clock skew");
  return *status;
}

// A verified aes*-cts gate proves its exchange's shapes and releases what
// was held back for it only if fresh: a skewed one completes (MIT's check
// then answers KRB_AP_ERR_SKEW); a replayed one (a copy that passed Admit
// while its first was in flight: a racing attacker, or the user's own
// retransmission once MIT's lookaside forgot it) fails as
// kResourceExhausted, which the KDC answers KDC_ERR_SVC_UNAVAILABLE: never
// as a wrong password (MIT's lockout counts KDC_ERR_PREAUTH_FAILED, so a
// copy of someone's login would lock them out), and never as a cluster
// failure (status_class.h: not counted toward the router's failover). A
// ticket presented back (usage 2, cts_items.h) carries no timestamp: the
// KDC checks its times and authenticator (MIT's kdc_rd_ap_req).
GateBook::Outcome GateBook::Verdict(const PendingJob& q, absl::Status* status,
                                    const SecureBytes& out, absl::Time now) {
  Outcome fresh;
  const bool gate = q.gate && q.exchange_id != 0 && q.job.type == pb::JOB_DECRYPT;
  absl::Status verdict = *status;
  if (gate && status->ok() && q.figures.cts && q.job.usage != contract::kTicketUsage)
    verdict = Fresh(q, status, out, now, &fresh);
  // A gate DECRYPT's slot released; a wrong password (a tag that did not
  // hold) counted toward the failure bound.
  failures_.Done(q.job, absl::IsDataLoss(*status), now);
  if (!gate) return fresh;
  Outcome o = Verdict(q.exchange_id, verdict, now);
  o.log_level = fresh.log_level;
  o.log = std::move(fresh.log);
  return o;
}

GateBook::Outcome GateBook::Verdict(uint64_t id, const absl::Status& verdict, absl::Time now) {
  Outcome o;
  std::lock_guard<std::mutex> l(mu_);
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return o;
  Exchange& x = it->second;
  if (!verdict.ok()) {
    x.shapes.clear();  // proven stays proven (ProvenShapes)
    o.fail = std::move(x.deferred);
    x.deferred.clear();
    x.regate.reset();
    o.why = DeferredFailure(verdict);
    return o;
  }
  Cluster& c = clusters_[x.cluster];
  for (const contract::CtsShape& shape : x.shapes) c.proven.Prove(shape);
  x.shapes.clear();
  if (x.token) {
    x.token = false;
    c.tokens.GiveBack(1);
  }
  if (x.deferred.empty()) return o;
  if (x.regate) {
    // First: the group's gate in the later Run (BuildRunRequest).
    x.regate->enqueued = now;
    o.release.push_back(std::move(*x.regate));
    x.regate.reset();
  }
  for (PendingJob& q : x.deferred) {
    q.enqueued = now;
    if (!q.prepared) ++c.counts.deferred_sent;
    o.release.push_back(std::move(q));
  }
  x.deferred.clear();
  return o;
}

void GateBook::End(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  exchanges_.erase(id);  // SecureBytes wipes the held-back jobs' inputs
}

void GateBook::Clear(size_t cluster) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = exchanges_.begin(); it != exchanges_.end();)
    it = it->second.cluster == cluster ? exchanges_.erase(it) : std::next(it);
  Cluster& c = clusters_.at(cluster);
  c.proven.Clear();
  ProveUsualGates(c);
}

void GateBook::set_skew(absl::Duration skew) { freshness_->set_skew(skew); }

GateBook::Counts GateBook::counts(size_t cluster) const {
  std::lock_guard<std::mutex> l(mu_);
  return clusters_.at(cluster).counts;
}

bool GateBook::Proven(size_t cluster, const contract::CtsShape& shape) const {
  std::lock_guard<std::mutex> l(mu_);
  return clusters_.at(cluster).proven.Has(shape);
}

PendingJob GateBook::Regate(const PendingJob& gate) {
  PendingJob r;
  r.job = gate.job;  // the same ciphertext, dealt afresh when it goes
  r.figures = gate.figures;
  r.blocks = gate.blocks;
  r.group = gate.group;
  r.exchange_id = gate.exchange_id;
  r.prepared = true;
  r.regate = true;
  return r;
}

absl::Status GateBook::DeferredFailure(const absl::Status& why) {
  if (absl::IsDataLoss(why))
    return absl::UnauthenticatedError(
        "the MPC cluster withheld the result (its gate did not verify: the job was never sent)");
  // Not a status the router fails over (router.cc ClusterFailure): on
  // another cluster the job would run as an ordinary one, without its gate.
  return HeldBackFailure(why.message());
}

// kCancelled: the KDC answers KRB5KDC_ERR_SVC_UNAVAILABLE as for the
// gate's own cluster failure (module.cc), and the router does not resend it.
absl::Status GateBook::HeldBackFailure(absl::string_view why) {
  return absl::CancelledError(absl::StrCat(
      "its gate did not complete on this MPC cluster (", why,
      "): a job held back for it is not sent elsewhere without it"));
}

}  // namespace kmpc::kdc
