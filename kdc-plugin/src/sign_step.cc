#include "sign_step.h"

#include <syslog.h>

#include <algorithm>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/reveal.h"
#include "contract.h"
#include "run_step.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

SignStep::SignStep(std::shared_ptr<BatchStep> batch)
    : batch_(std::move(batch)),
      b_(*batch_),
      arena_(StepArenaOptions()),
      req_(&arena_),
      resp_(&arena_),
      idx_(b_.size()) {
  for (size_t i = 0; i < idx_.size(); ++i) idx_[i] = i;
}

void SignStep::Start(std::shared_ptr<BatchStep> batch) {
  auto step = std::make_shared<SignStep>(std::move(batch));
  BatchStep& b = step->b_;
  if (b.FailIfPartyDown(step->idx_)) return;
  if (absl::Status st = step->Build(); !st.ok()) {
    step->Scrub();
    b.FailOpen(st, &step->idx_);
    return;
  }
  b.host().Count(StepEvent::kSignSent, step->idx_.size());
  for (int p = 0; p < kParties; ++p)
    b.host().transport()->Sign(
        p, step->req_[p], &step->resp_[p], b.deadline(),
        [step, p](CallStatus s) {
          step->st_[p] = std::move(s);
          if (step->left_.fetch_sub(1, std::memory_order_acq_rel) == 1)
            step->OnAnswers();
        });
}

absl::Status SignStep::Build() {
  const absl::StatusOr<std::string> request_id = RandomId();
  if (!request_id.ok()) return request_id.status();
  for (int p = 0; p < kParties; ++p) {
    req_[p].set_request_id(*request_id);
    req_[p].set_wire_version(contract::kWireVersion);
  }
  size_t total = 0;
  for (size_t i : idx_) total += SharedBytes(b_.job(i).job);
  client::DealRandom random;  // one draw for every item's message
  if (absl::Status st = random.Draw(total); !st.ok()) return st;
  std::array<std::string*, kParties> flat;
  for (int p = 0; p < kParties; ++p) {
    flat[p] = req_[p].mutable_data_shares();
    flat[p]->reserve(2 * total);
  }
  for (size_t i : idx_) {
    const PendingJob& e = b_.job(i);
    for (int p = 0; p < kParties; ++p) {
      pb::SignItem* item = req_[p].add_items();
      item->set_run_batch_id(e.run_batch_id);
      item->set_job_id(e.run_job_id);
      item->set_usage(e.job.usage);
      item->set_length(static_cast<uint32_t>(e.job.input.size()));
      if (e.job.type == pb::JOB_VERIFY_CHECKSUM) item->set_verify(true);
      if (!e.chain_batch_id.empty()) {
        item->mutable_chain()->set_run_batch_id(e.chain_batch_id);
        item->mutable_chain()->set_job_id(e.chain_job_id);
      }
    }
    // The message (and a verify item's presented tag) as shares, dealt
    // afresh for this item (enctype.md invariant 5), as a Run's.
    if (absl::Status st = DealShared(e.job, &random, flat); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Every server answers alone and at once; a job's tag is combined only
// when all three answered JOB_OK for it. Anything else re-runs the job as
// an ordinary CHECKSUM: the servers that did answer used the pad up
// (kmpc.proto SignItem), and their tag shares are wiped uncombined.
void SignStep::OnAnswers() {
  std::string why = CheckAnswers();
  std::vector<size_t> rerun, recheck;
  size_t not_ok = 0;  // items some server answered other than JOB_OK
  if (!why.empty()) {
    rerun = idx_;
  } else {
    for (int k = 0; k < static_cast<int>(idx_.size()); ++k)
      not_ok += !Settle(k, &why, &rerun, &recheck);
  }
  if (not_ok > 0) b_.host().Count(StepEvent::kSignAnswersFailed, not_ok);
  Scrub();
  if (!rerun.empty() || !recheck.empty())
    Rerun(std::move(rerun), why, std::move(recheck));
}

std::string SignStep::CheckAnswers() {
  const int n = static_cast<int>(idx_.size());
  for (int p = 0; p < kParties; ++p) {
    if (!st_[p].ok()) return absl::StrCat("MPC ", b_.Party(p), ": ", Describe(st_[p]));
    absl::Status st = CheckAnswer(
        b_, p, resp_[p], /*id=*/{}, n, "items",
        [this, p](const pb::SignResult& r, int k) {
          return r.job_id() == req_[p].items(k).job_id() &&
                 r.run_batch_id() == req_[p].items(k).run_batch_id();
        });
    if (!st.ok()) return std::string(st.message());
    if (std::string why = TagSharesProblem(p); !why.empty()) return why;
    SliceTagShares(p);
  }
  return {};
}

bool SignStep::Settle(int k, std::string* why, std::vector<size_t>* rerun,
                      std::vector<size_t>* recheck) {
  const size_t i = idx_[k];
  bool ok = true;
  for (int p = 0; p < kParties; ++p) {
    const pb::SignResult& r = resp_[p].results(k);
    if (r.status() == pb::JOB_OK) continue;
    ok = false;
    if (why->empty())
      *why = absl::StrCat(b_.Party(p), ": ", pb::JobStatus_Name(r.status()),
                          " (", SafeDetail(r.detail()), ")");
  }
  PendingJob& e = b_.job(i);
  if (ok && e.job.type == pb::JOB_VERIFY_CHECKSUM && !b_.IsDone(i)) {
    absl::Status st = CheckVerifyAnswer(k);
    if (st.ok()) {
      b_.Complete(i, std::move(st), {});
      return ok;
    }
    if (absl::IsDataLoss(st)) {  // never final: the Run decides
      b_.set_recheck(i);
      recheck->push_back(i);
      return ok;
    }
    if (why->empty()) *why = std::string(st.message());
  } else if (ok && e.output.size() == contract::kCtr0Size && !b_.IsDone(i)) {
    absl::Status st = CombineSigned(k, b_.Namer());
    if (st.ok()) {
      b_.Complete(i, absl::OkStatus(), std::move(e.output));
      return ok;
    }
    if (why->empty()) *why = std::string(st.message());
  }
  rerun->push_back(i);
  return ok;
}

// Item k's signature from the three tag shares into its job's output
// (ctr0 || tag); for a chained item (kmpc.proto SignItem.chain) also the
// second, sig_2 = ctr0_2 || tag_2 over sig_1, kept for the CHECKSUM of
// sig_1 (planner.h, chained signatures) before the KDC has sig_1.
absl::Status SignStep::CombineSigned(int k, const client::PartyNamer& namer) {
  PendingJob& e = b_.job(idx_[k]);
  const bool chained = ChainedItem(k);
  const size_t tk = contract::kTagSize;
  std::array<absl::string_view, kParties> t1, t2;
  for (int p = 0; p < kParties; ++p) {
    t1[p] = tag_[p][k].substr(0, tk);
    if (chained) t2[p] = tag_[p][k].substr(tk);
  }
  e.output.resize(contract::kChecksumSize);
  absl::Status st = client::CombineAdditive(
      t1, absl::MakeSpan(e.output.data() + contract::kCtr0Size, tk), "tag", namer);
  if (!st.ok() || !chained) return st;
  ChainedSignature c;
  c.checksum.resize(contract::kChecksumSize);
  std::copy(e.chain_ctr0.begin(), e.chain_ctr0.end(), c.checksum.begin());
  st = client::CombineAdditive(
      t2, absl::MakeSpan(c.checksum.data() + contract::kCtr0Size, tk), "tag", namer);
  if (!st.ok()) return st;
  c.key_id = e.job.key_id;
  c.cipher = e.job.cipher;
  c.usage = e.job.usage;
  c.message.assign(e.output.begin(), e.output.end());
  c.expires = absl::Now() + kChainedTtl;
  c.exchange_id = e.exchange_id;
  c.item = e.chain_item;
  b_.host().KeepChained(std::move(c));
  return absl::OkStatus();
}

// A verify item's answers (kmpc.proto SignItem.verify): additive
// shares of r * (T ^ t'), so the tag holds iff they XOR to zero. OK,
// DataLoss (it does not: as a Run's VERIFY_CHECKSUM), or Aborted for
// answers of the wrong size (the job then runs as an ordinary
// VERIFY_CHECKSUM).
absl::Status SignStep::CheckVerifyAnswer(int k) const {
  uint8_t acc = 0;
  for (size_t b = 0; b < contract::kTagSize; ++b) {
    uint8_t x = 0;
    for (int p = 0; p < kParties; ++p) {
      const absl::string_view s = tag_[p][k];
      if (s.size() != contract::kTagSize)
        return absl::AbortedError("verify answers of the wrong size");
      x ^= static_cast<uint8_t>(s[b]);
    }
    acc |= x;
  }
  return acc == 0 ? absl::OkStatus()
                  : absl::DataLossError("checksum did not verify");
}

void SignStep::Rerun(std::vector<size_t> rerun, const std::string& why,
                     std::vector<size_t> recheck) {
  if (absl::Now() >= b_.deadline()) return;  // Expire fails them (or did)
  std::vector<size_t> again;
  size_t reruns = 0;
  for (const auto* list : {&rerun, &recheck})
    for (size_t i : *list) {
      if (b_.IsDone(i)) continue;
      PendingJob& e = b_.job(i);
      e.sign = false;
      e.output.clear();
      e.run_batch_id.clear();
      // A chain's second pad is spent (or refused) with the first: its
      // CHECKSUM, when it comes, takes a pad or runs as usual.
      if (!e.chain_batch_id.empty()) b_.host().Count(StepEvent::kPadsWasted, 1);
      e.chain_batch_id.clear();
      e.chain_ctr0.clear();
      again.push_back(i);
      reruns += list == &rerun;
    }
  if (again.empty()) return;
  if (reruns > 0) {
    b_.host().Count(StepEvent::kSignRerun, reruns);
    // Warning: a server that answers other than JOB_OK (or not at all)
    // costs a Run per item; a deviating one shows here.
    b_.host().Log(LOG_WARNING,
               absl::StrCat("kdcmpc: batch #", b_.seq(), ": Sign of ", reruns,
                            " checksum(s) under a pad failed (",
                            why, "); running them"));
  }
  if (reruns < again.size())
    b_.host().Log(LOG_INFO,
               absl::StrCat("kdcmpc: batch #", b_.seq(), ": ",
                            again.size() - reruns,
                            " ring-free verify item(s) refused the presented "
                            "tag; re-checking in a Run"));
  RunStep::Start(batch_, std::move(again));
}

// Why party p's tag share buffer is not exactly one tag per JOB_OK result
// (kmpc.proto SignResponse.tag_shares); empty when it is. A short or long
// buffer would pair a result with another result's share.
std::string SignStep::TagSharesProblem(int p) const {
  const pb::SignResponse& r = resp_[p];
  size_t tags = 0, ok = 0;
  for (int k = 0; k < r.results_size(); ++k) {
    if (r.results(k).status() != pb::JOB_OK) continue;
    ++ok;
    tags += ChainedItem(k) ? 2 : 1;
  }
  if (r.tag_shares().size() == tags * contract::kTagSize) return {};
  return absl::StrCat(b_.Party(p), " returned ", r.tag_shares().size(),
                      " bytes of tag shares for ", ok, " JOB_OK results (",
                      contract::kTagSize, " bytes each, twice for a chained one)");
}

// Whether item k chains a second signature (SignItem.chain).
bool SignStep::ChainedItem(int k) const {
  return !b_.job(idx_[k]).chain_batch_id.empty();
}

// Party p's tag shares, one per JOB_OK result in order (kmpc.proto
// SignResponse.tag_shares; TagSharesProblem checked the size).
void SignStep::SliceTagShares(int p) {
  const pb::SignResponse& r = resp_[p];
  contract::FlatReader flat(r.tag_shares());
  tag_[p].assign(r.results_size(), absl::string_view());
  for (int k = 0; k < r.results_size(); ++k)
    if (r.results(k).status() == pb::JOB_OK)
      tag_[p][k] = flat.Take(contract::kTagSize * (ChainedItem(k) ? 2 : 1));
}

void SignStep::Scrub() {
  for (auto* r : req_) Cleanse(r->mutable_data_shares());
  for (auto* r : resp_) Cleanse(r->mutable_tag_shares());
}

}  // namespace kmpc::kdc
