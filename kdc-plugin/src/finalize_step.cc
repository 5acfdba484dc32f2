#include "finalize_step.h"

#include <syslog.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/reveal.h"
#include "contract.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

FinalizeStep::FinalizeStep(std::shared_ptr<BatchStep> batch, RerunJobs rerun)
    : batch_(std::move(batch)),
      b_(*batch_),
      rerun_jobs_(rerun),
      arena_(StepArenaOptions()),
      req_(*google::protobuf::Arena::CreateMessage<pb::FinalizeRequest>(&arena_)),
      resp_(&arena_) {}

void FinalizeStep::Add(size_t i, absl::string_view run_batch_id,
                       uint64_t job_id, const uint8_t* c, size_t len) {
  pb::FinalizeItem* item = req_.add_items();
  item->set_run_batch_id(std::string(run_batch_id));
  item->set_job_id(job_id);
  item->set_ciphertext(c, len);
  idx_.push_back(i);
}

void FinalizeStep::Start(std::shared_ptr<FinalizeStep> step) {
  if (step->idx_.empty()) return;
  BatchStep& b = step->b_;
  absl::StatusOr<std::string> id = RandomId();
  if (!id.ok()) {
    b.FailOpen(id.status(), &step->idx_);
    return;
  }
  step->req_.set_batch_id(*std::move(id));
  step->req_.set_wire_version(contract::kWireVersion);
  // (A finalize_only step is not re-run then: the party is still down.)
  if (b.FailIfPartyDown(step->idx_)) return;
  step->started_ = absl::Now();
  b.host().Count(StepEvent::kFinalizeSent, step->idx_.size());
  for (int p = 0; p < kParties; ++p)
    b.host().transport()->Finalize(
        p, step->req_, &step->resp_[p], b.deadline(),
        [step, p](CallStatus s) { step->OnCall(p, s); });
}

void FinalizeStep::OnCall(int p, const CallStatus& s) {
  st_[p] = s.status;
  if (!s.ok()) {
    if (rerun_jobs_ == nullptr)
      b_.PartyFailed(p, s, idx_);
    else if (!rerun_.exchange(true, std::memory_order_acq_rel))
      Rerun(p, s);
  }
  if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) OnAnswers();
}

void FinalizeStep::OnAnswers() {
  b_.figures().finalize_us = absl::ToInt64Microseconds(absl::Now() - started_);
  for (const auto& s : st_)
    if (!s.ok()) {
      Scrub();  // tag shares of the parties that answered
      return;  // re-run (finalize_only) or failed (PartyFailed) already
    }
  absl::Status bad = CheckAnswers();
  if (bad.ok()) bad = CombineTags();
  Scrub();
  if (!bad.ok()) {
    b_.Reject(bad, idx_);
    return;
  }
  for (size_t i : idx_) b_.Complete(i, absl::OkStatus(), std::move(b_.job(i).output));
}

absl::Status FinalizeStep::CheckAnswers() const {
  const int n = req_.items_size();
  if (absl::Status st = kdc::CheckAnswers(
          b_, resp_, req_.batch_id(), n, "items",
          [this](const pb::FinalizeResult& r, int k) {
            return r.job_id() == req_.items(k).job_id() &&
                   r.run_batch_id() == req_.items(k).run_batch_id();
          });
      !st.ok())
    return st;
  for (int p = 0; p < kParties; ++p)
    if (resp_[p].tags().size() != contract::kTagSize * static_cast<size_t>(n))
      return absl::AbortedError(absl::StrCat(b_.Party(p), " returned ",
                                             resp_[p].tags().size(),
                                             " bytes of tag shares for ", n,
                                             " items"));
  return absl::OkStatus();
}

// No duplicate copy to compare (wire version 4: one additive share t_p per
// server), so a server that deviates can only make that tag wrong (the
// ticket then fails its own check where it is presented).
absl::Status FinalizeStep::CombineTags() {
  const client::PartyNamer namer = b_.Namer();
  constexpr size_t kT = contract::kTagSize;
  for (int k = 0; k < req_.items_size(); ++k) {
    std::array<absl::string_view, kParties> s;
    for (int p = 0; p < kParties; ++p)
      s[p] = absl::string_view(resp_[p].tags()).substr(kT * k, kT);
    SecureBytes& out = b_.job(idx_[k]).output;  // ctr0 || C || T
    if (absl::Status st = client::CombineAdditive(
            s, absl::MakeSpan(out.data() + out.size() - kT, kT),
            What("tag", k).text, namer);
        !st.ok())
      return st;
  }
  return absl::OkStatus();
}

// A finalize_only step failed (most likely BATCH_UNKNOWN_ENCRYPT: a server
// no longer holds the ENCRYPT state). The servers take a request's states
// all or nothing and revealed no tag, so the jobs are simply encrypted
// again, as ordinary ENCRYPT jobs with a fresh counter range. Safe while
// the other parties' answers are still on their way: OnAnswers only
// scrubs a step that has a failed party.
void FinalizeStep::Rerun(int party, const CallStatus& first) {
  if (absl::Now() >= b_.deadline()) return;  // Expire fails them (or did)
  // Never run again on a cluster that reported a deviation or whose
  // breaker is open (a ring-free Finalize has neither today; a server's
  // word is enough to stop): the jobs fail, the router may go elsewhere.
  if (first.refusal == pb::BATCH_INTEGRITY_CHECK_FAILED ||
      first.refusal == pb::BATCH_BREAKER_OPEN) {
    b_.PartyFailed(party, first, idx_);
    return;
  }
  std::vector<size_t> again;
  for (size_t i : idx_) {
    if (b_.IsDone(i)) continue;  // the deadline passed meanwhile
    PendingJob& e = b_.job(i);
    e.finalize_only = false;
    e.output.clear();
    e.run_batch_id.clear();
    again.push_back(i);
  }
  if (again.empty()) return;
  b_.host().Count(StepEvent::kFinalizeOnlyRerun, again.size());
  b_.host().Log(LOG_WARNING,
                absl::StrCat("kdcmpc: batch #", b_.seq(), ": FINALIZE of ",
                             again.size(), " prepared keystream(s) failed on "
                             "MPC ", b_.Party(party), " (", Describe(first),
                             "); re-running them"));
  rerun_jobs_(batch_, std::move(again));
}

void FinalizeStep::Scrub() {
  for (auto* r : resp_) Cleanse(r->mutable_tags());
}

}  // namespace kmpc::kdc
