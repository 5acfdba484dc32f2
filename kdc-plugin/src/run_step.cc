#include "run_step.h"

#include <syslog.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/reveal.h"
#include "contract.h"
#include "cts_items.h"
#include "finalize_step.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

void RunStep::Start(std::shared_ptr<BatchStep> batch, std::vector<size_t> idx) {
  if (batch->FailIfPartyDown(idx)) return;
  auto step = std::make_shared<RunStep>(std::move(batch), std::move(idx));
  if (absl::Status st = step->Build(); !st.ok()) {
    step->Scrub();
    step->b_.FailOpen(st, &step->idx_);
    return;
  }
  step->Send();
}

RunStep::RunStep(std::shared_ptr<BatchStep> batch, std::vector<size_t> idx)
    : batch_(std::move(batch)),
      b_(*batch_),
      arena_(StepArenaOptions()),
      req_(*google::protobuf::Arena::CreateMessage<pb::RunRequest>(&arena_)),
      party_req_{&req_, &req_, &req_},
      resp_(&arena_),
      idx_(std::move(idx)) {}

void RunStep::Send() {
  started_ = absl::Now();
  b_.host().Count(StepEvent::kRunSent, idx_.size());
  auto self = shared_from_this();
  for (int p = 0; p < kParties; ++p)
    b_.host().transport()->Run(p, *party_req_[p], &resp_[p], b_.deadline(),
                               [self, p](CallStatus s) { self->OnCall(p, s); });
}

void RunStep::OnCall(int p, const CallStatus& s) {
  st_[p] = s.status;
  if (s.refusal == pb::BATCH_INTEGRITY_CHECK_FAILED &&
      !deviation_.exchange(true, std::memory_order_acq_rel))
    b_.host().Count(StepEvent::kDeviation, 1);
  if (s.refusal == pb::BATCH_BREAKER_OPEN) b_.host().Count(StepEvent::kBreakerOpen, 1);
  if (!s.ok()) b_.PartyFailed(p, s, idx_);
  if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) OnAnswers();
}

namespace {

// A Run request job's inputs by type (the key, usage and links are set by
// the caller); true if its message or plaintext is dealt as shares.
bool SetJobInputs(const Job& job, pb::Job* j) {
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // The plaintext never leaves the KDC: only its length, and under
      // an aes*-cts cipher its shares, dealt by DealShares (cts_items.h).
      j->set_length(static_cast<uint32_t>(job.input.size()));
      if (!job.splice.empty()) {
        j->set_splice_length(static_cast<uint32_t>(job.splice.size()));
        j->set_splice_offset(job.splice_offset);
      }
      return CtsJob(job);
    case pb::JOB_CHECKSUM:
    case pb::JOB_VERIFY_CHECKSUM:
      // The message only as shares (enctype.md invariant 5); of a checksum
      // to verify, its ctr0 only: the tag is dealt after the message
      // (kmpc.proto JOB_VERIFY_CHECKSUM).
      j->set_length(static_cast<uint32_t>(job.input.size()));
      if (job.type == pb::JOB_VERIFY_CHECKSUM)
        j->set_checksum(job.checksum.substr(0, contract::kCtr0Size));
      return true;
    case pb::JOB_PAD:
      j->set_length(static_cast<uint32_t>(job.pad_length));
      if (!job.checksum.empty()) j->set_checksum(job.checksum);
      return false;
    default:  // DECRYPT: the ciphertext
      if (CtsJob(job)) {
        // C || T as shares, its length in the clear (cts_items.h).
        j->set_length(static_cast<uint32_t>(job.input.size()));
        return true;
      }
      j->set_data(job.input.data(), job.input.size());
      return false;
  }
}

}  // namespace

absl::Status RunStep::Build() {
  absl::StatusOr<std::string> id = RandomId();
  if (!id.ok()) return id.status();
  req_.set_batch_id(*std::move(id));
  req_.set_wire_version(contract::kWireVersion);
  // The servers check an aes*-cts gate's timestamp against this clock
  // (kmpc.proto RunRequest.now_unix), the KDC's, which MIT's own skew
  // check uses too.
  req_.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req_.mutable_jobs()->Reserve(static_cast<int>(idx_.size()));
  // The gate DECRYPT of each planned exchange's group in this request (a
  // group may hold two DECRYPTs, u2u: its gate is the one marked so): its
  // jobs marked gated are released by the servers only if it holds
  // (kmpc.proto Job.release_if_ok).
  // A held-back Run's gate is a copy of it (PendingJob::regate).
  std::map<uint64_t, size_t> group_decrypt;
  for (size_t i : idx_)
    if (b_.job(i).group != 0 && b_.job(i).job.type == pb::JOB_DECRYPT &&
        ((b_.job(i).gate && !b_.job(i).prepared) || b_.job(i).regate))
      group_decrypt[b_.job(i).group] = i;
  // The prepared ticket ENCRYPT of each group in this request: a linked
  // PAD of the group takes its counter from it (Job.pad_after).
  std::map<uint64_t, size_t> group_ticket;
  for (size_t i : idx_)
    if (b_.job(i).prepared && b_.job(i).group != 0 &&
        b_.job(i).job.type == pb::JOB_ENCRYPT && b_.job(i).job.usage == 2)
      group_ticket[b_.job(i).group] = i;
  // The signing PAD of each ticket signed in the cluster in this request
  // (dispatcher.cc Submit): the ticket names it (Job.sign_pad).
  std::map<uint64_t, size_t> group_sign_pad;
  for (size_t i : idx_)
    if (b_.job(i).ticket_pad) group_sign_pad[b_.job(i).group] = i;
  std::vector<int> shared;  // request jobs whose message is dealt
  for (size_t i : idx_) {
    const Job& job = b_.job(i).job;
    pb::Job* j = req_.add_jobs();
    j->set_job_id(i);
    if (b_.job(i).group != 0 && b_.job(i).gated) {
      auto g = group_decrypt.find(b_.job(i).group);
      // A gated job never goes without its gate (the dispatcher never
      // cuts a group: a bug elsewhere): the step fails closed.
      if (g == group_decrypt.end())
        return absl::InternalError("a gated job without its gate DECRYPT in the Run request");
      j->set_release_if_ok(g->second);
    }
    if (b_.job(i).link_pad) {
      auto t = group_ticket.find(b_.job(i).group);
      if (t != group_ticket.end()) {
        j->set_pad_after(t->second);
        j->set_pad_slot(b_.job(i).pad_slot);
      }
    }
    if (!job.sign_key_id.empty()) {
      auto s = group_sign_pad.find(b_.job(i).group);
      // A ticket never goes without its PAD (one group; a re-run of the
      // ticket alone fails closed).
      if (s == group_sign_pad.end())
        return absl::InternalError("a ticket signed in the cluster without its PAD in the Run");
      j->set_sign_pad(s->second);
    }
    j->set_key_id(job.key_id);
    j->set_cipher(job.cipher);
    j->set_usage(job.usage);
    j->set_type(job.type);
    // A FAST key: its KDC half is dealt below with the job's input
    // (cts_items.h).
    if (job.cts_key != pb::CTS_KEY_DEALT) j->set_cts_key(job.cts_key);
    if (SetJobInputs(job, j)) shared.push_back(req_.jobs_size() - 1);
  }
  return DealShares(shared);
}

absl::Status RunStep::DealShares(const std::vector<int>& shared) {
  if (shared.empty()) return absl::OkStatus();
  // Parties 1 and 2 get copies made before any share is set (so no
  // request holds another party's shares), then each job's message is
  // dealt afresh into the three requests.
  for (int p = 1; p < kParties; ++p) {
    party_req_[p] =
        google::protobuf::Arena::CreateMessage<pb::RunRequest>(&arena_);
    party_req_[p]->CopyFrom(req_);
  }
  // One draw of the generator for every message of the request, each
  // message its own slice (client::DealRandom), dealt in job order into
  // each party's flat buffer.
  size_t total = 0;
  for (int k : shared) total += SharedBytes(b_.job(idx_[k]).job);
  client::DealRandom random;
  if (absl::Status st = random.Draw(total); !st.ok()) return st;
  std::array<std::string*, kParties> flat;
  for (int p = 0; p < kParties; ++p) {
    flat[p] = party_req_[p]->mutable_data_shares();
    flat[p]->reserve(2 * total);
  }
  for (int k : shared)
    if (absl::Status st = DealShared(b_.job(idx_[k]).job, &random, flat);
        !st.ok())
      return st;
  return absl::OkStatus();
}

void RunStep::OnAnswers() {
  b_.figures().run_us = absl::ToInt64Microseconds(absl::Now() - started_);
  for (const auto& s : st_)
    if (!s.ok()) {
      Scrub();  // shares of the parties that answered
      return;  // the jobs failed already (PartyFailed)
    }
  b_.host().Count(StepEvent::kBreakerClosed, 1);  // all three served it
  absl::Status bad = CheckAnswers();
  if (bad.ok()) bad = Reveal();
  if (!bad.ok()) {
    Scrub();
    b_.Reject(bad, idx_);
    return;
  }
  b_.figures().blocks += resp_[0].stats().aes_blocks();
  if (b_.host().options().debug) {
    uint64_t q = 0, c = 0;
    for (const auto* r : resp_) {
      q = std::max<uint64_t>(q, r->stats().queue_us());
      c = std::max<uint64_t>(c, r->stats().compute_us());
    }
    b_.figures().AddRun(resp_[0].stats(), q, c);
  }
  // Prepared keystreams and pads first: the KDC may submit the jobs they
  // are for as soon as it has the gate DECRYPT's result.
  HoldPrepared();
  auto fin = std::make_shared<FinalizeStep>(batch_, /*rerun=*/nullptr);
  CompleteJobs(fin.get());
  Scrub();
  FinalizeStep::Start(fin);
}

// The public parts of the three answers; names the parties, never a share.
absl::Status RunStep::CheckAnswers() {
  const int n = req_.jobs_size();
  if (absl::Status st = kdc::CheckAnswers(
          b_, resp_, req_.batch_id(), n, "jobs",
          [this](const pb::JobResult& r, int k) {
            return r.job_id() == req_.jobs(k).job_id();
          });
      !st.ok())
    return st;
  // The statuses are public: all three must agree on each.
  for (int k = 0; k < n; ++k)
    for (int p = 1; p < kParties; ++p)
      if (resp_[p].results(k).status() != resp_[0].results(k).status())
        return absl::AbortedError(absl::StrCat(
            b_.Party(p), " and ", b_.Party(0),
            " disagree on the public result of job ", k));
  if (absl::Status s = LayOut(); !s.ok()) return s;
  for (int k = 0; k < n; ++k)
    if (absl::Status s = CheckJobResult(k); !s.ok()) return s;
  return absl::OkStatus();
}

// The flat buffers' layout from the agreed statuses (kmpc.proto
// RunResponse.ctr0s, .shares); every party's buffers must be exactly that
// long, and the ctr0s (public) the same on all three.
absl::Status RunStep::LayOut() {
  const int n = req_.jobs_size();
  ctr0_at_.assign(n, std::string::npos);
  share_at_.assign(n, 0);
  share_len_.assign(n, 0);
  size_t c = 0, s = 0;
  for (int k = 0; k < n; ++k) {
    const pb::JobStatus st = resp_[0].results(k).status();
    const Job& job = b_.job(idx_[k]).job;
    if (contract::ResultHasCtr0(ShapeOf(job), st)) {
      ctr0_at_[k] = c;
      c += contract::kCtr0Size;
    }
    share_at_[k] = s;
    share_len_[k] = contract::RevealedShareBytes(ShapeOf(job), st);
    s += 2 * share_len_[k];
  }
  for (int p = 0; p < kParties; ++p) {
    const pb::RunResponse& r = resp_[p];
    if (r.ctr0s().size() != c || r.shares().size() != s)
      return absl::AbortedError(absl::StrCat(
          b_.Party(p), " returned ", r.ctr0s().size(), " bytes of counters and ",
          r.shares().size(), " of shares for results that take ", c, " and ",
          s));
    if (r.ctr0s() != resp_[0].ctr0s())
      return absl::AbortedError(absl::StrCat(
          b_.Party(p), " and ", b_.Party(0), " disagree on the counters"));
  }
  return absl::OkStatus();
}

// Result k's ctr0 (empty: none), party 0's copy (LayOut: all agree).
absl::string_view RunStep::Ctr0(int k) const {
  if (ctr0_at_[k] == std::string::npos) return {};
  return absl::string_view(resp_[0].ctr0s())
      .substr(ctr0_at_[k], contract::kCtr0Size);
}

absl::Status RunStep::CheckJobResult(int k) const {
  const pb::JobResult& r0 = resp_[0].results(k);
  if (!JobFailure(r0).ok()) return absl::OkStatus();  // fails the job only
  const Job& job = b_.job(idx_[k]).job;
  const bool ok = r0.status() == pb::JOB_OK;
  const bool verdict = ok || r0.status() == pb::JOB_INTEGRITY_FAILED;
  if (CtsJob(job)) return CtsCheckResult(job, r0.status(), k);
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // Invariant 4 (enctype.md) is the cluster's to keep; a counter range
      // through the all-zero block is refused here as well.
      if (ok && contract::CounterRangeOk(
                    Ctr0(k), contract::CeilBlocks(job.input.size())))
        return absl::OkStatus();
      return absl::AbortedError(absl::StrCat(
          "malformed ENCRYPT result (status or ctr0) for job ", k));
    case pb::JOB_CHECKSUM:
    case pb::JOB_PAD:
      if (ok && contract::CounterRangeOk(Ctr0(k), 0))
        return absl::OkStatus();
      return absl::AbortedError(absl::StrCat(
          "malformed ", contract::JobTypeName(job.type),
          " result (status or ctr0) for job ", k));
    default:  // DECRYPT, VERIFY_CHECKSUM: a verdict
      if (verdict) return absl::OkStatus();
      return absl::AbortedError(absl::StrCat("malformed ",
                                             contract::JobTypeName(job.type),
                                             " result for job ", k));
  }
}

// Checks both copies of every share and reveals every value into its job's
// output, before any job completes: one disagreement rejects the batch.
absl::Status RunStep::Reveal() {
  const client::PartyNamer namer = b_.Namer();
  const int n = req_.jobs_size();
  for (int k = 0; k < n; ++k) {
    const pb::JobResult& r0 = resp_[0].results(k);
    if (r0.status() != pb::JOB_OK) continue;
    PendingJob& e = b_.job(idx_[k]);
    // A verdict only; a pad's ctr0 only.
    if (e.job.type == pb::JOB_VERIFY_CHECKSUM || e.job.type == pb::JOB_PAD)
      continue;
    const size_t len = share_len_[k];
    std::array<client::ShareView, kParties> s;
    const bool tag = e.job.type == pb::JOB_CHECKSUM;
    for (int p = 0; p < kParties; ++p) {
      const absl::string_view flat = resp_[p].shares();
      s[p] = {flat.substr(share_at_[k], len),
              flat.substr(share_at_[k] + len, len)};
    }
    // The output's layout (PendingJob::output): the value goes after ctr0
    // for an ordinary ENCRYPT and a CHECKSUM.
    size_t at = 0;
    if (CtsJob(e.job)) {
      e.output.resize(len);  // the value itself (cts_items.h)
    } else if (e.job.type == pb::JOB_ENCRYPT && !e.prepared) {
      e.output.resize(contract::kCiphertextOverhead + len);
      at = contract::kCtr0Size;
    } else if (tag) {
      e.output.resize(contract::kCtr0Size + len);
      at = contract::kCtr0Size;
    } else {
      e.output.resize(len);
    }
    const absl::string_view ctr0 = Ctr0(k);
    if (ctr0.size() < at)
      return absl::AbortedError(absl::StrCat("no ctr0 for job ", k));
    std::copy(ctr0.begin(), ctr0.begin() + at, e.output.begin());
    absl::Status st = client::Reveal(
        s, absl::MakeSpan(e.output.data() + at, len),
        What(tag ? "tag" : "keystream", k).text, namer);
    if (!st.ok()) return absl::AbortedError(st.message());
  }
  return absl::OkStatus();
}

void RunStep::HoldPrepared() {
  const int n = req_.jobs_size();
  std::set<uint64_t> failed_groups;  // their gate did not decrypt
  for (int k = 0; k < n; ++k) {
    const PendingJob& e = b_.job(idx_[k]);
    if (e.job.type == pb::JOB_DECRYPT && e.group != 0 &&
        resp_[0].results(k).status() != pb::JOB_OK)
      failed_groups.insert(e.group);
  }
  std::vector<HeldKeystream> held;
  size_t pads_lost = 0;
  // Counted from the answer, not from the Run's start: a Run slowed by a
  // compile (or a loaded host) must not outlive what it prepared. Safe
  // against the servers' TTLs (--encrypt_state_ttl_ms 10 s, --pad_ttl_ms
  // 30 s), which start when each server stored the state, before it
  // answered; a stale keystream only costs a re-run (batcher.h).
  const absl::Time answered = absl::Now();
  const absl::Time expires = answered + b_.host().options().speculate_ttl;
  size_t prepared = 0;
  for (int k = 0; k < n; ++k) prepared += b_.job(idx_[k]).prepared;
  // Room for the prepared jobs only: a HeldKeystream per job of a large
  // batch is hundreds of KB, which glibc maps and unmaps afresh.
  held.reserve(prepared);
  std::vector<size_t> prepared_idx;
  prepared_idx.reserve(prepared);
  for (int k = 0; k < n; ++k) {
    const size_t i = idx_[k];
    PendingJob& e = b_.job(i);
    if (!e.prepared) continue;
    if (e.regate || e.ticket_pad) {  // a gate's copy, a spent pad: nothing to keep
      prepared_idx.push_back(i);
      continue;
    }
    const pb::JobResult& r = resp_[0].results(k);
    // Kept for the job of its plan item, unless the exchange's gate failed
    // (the servers drop the state after their TTL).
    if (r.status() == pb::JOB_OK && !failed_groups.count(e.group) &&
        !b_.IsDone(i)) {
      HeldKeystream h;
      h.pad = e.job.type == pb::JOB_PAD;
      h.verify = h.pad && !e.job.checksum.empty();
      h.pad_length = e.job.pad_length;
      h.key_id = e.job.key_id;
      h.cipher = e.job.cipher;
      h.usage = e.job.usage;
      h.run_batch_id = req_.batch_id();
      h.run_job_id = i;
      h.ctr0 = std::string(Ctr0(k));
      h.keystream = std::move(e.output);
      h.expires = h.verify ? std::min(expires, answered + kVerifyPadTtl)
                           : expires;
      h.exchange_id = e.exchange_id;
      h.item = e.item;
      held.push_back(std::move(h));
    } else if (e.job.type == pb::JOB_PAD) {
      ++pads_lost;
    }
    prepared_idx.push_back(i);
  }
  if (!held.empty()) b_.host().HoldKeystreams(std::move(held));
  b_.CompletePrepared(prepared_idx);
  if (pads_lost > 0) b_.host().Count(StepEvent::kPadsWasted, pads_lost);
}

// Completes what needs no Finalize; collects the ciphertexts that do.
void RunStep::CompleteJobs(FinalizeStep* fin) {
  const int n = req_.jobs_size();
  for (int k = 0; k < n; ++k) {
    const size_t i = idx_[k];
    PendingJob& e = b_.job(i);
    if (e.prepared) continue;  // HoldPrepared
    const pb::JobResult& r = resp_[0].results(k);
    if (absl::Status f = JobFailure(r); !f.ok()) {
      b_.Complete(i, std::move(f), {});
      continue;
    }
    const bool verified = r.status() == pb::JOB_OK;
    if (CtsJob(e.job)) {
      CompleteCts(i, verified);
      continue;
    }
    switch (e.job.type) {
      case pb::JOB_VERIFY_CHECKSUM:
        if (verified && b_.recheck(i)) VerifyDisagreed();
        b_.Complete(i, verified ? absl::OkStatus()
                             : absl::DataLossError("checksum did not verify"),
                 {});
        break;
      case pb::JOB_DECRYPT: {
        if (!verified) {
          b_.Complete(i, absl::DataLossError("ciphertext tag did not verify"), {});
          break;
        }
        const uint8_t* c = e.job.input.data() + contract::kCtr0Size;
        for (size_t b = 0; b < e.output.size(); ++b) e.output[b] ^= c[b];
        b_.Complete(i, absl::OkStatus(), std::move(e.output));
        break;
      }
      case pb::JOB_CHECKSUM:
        b_.Complete(i, absl::OkStatus(), std::move(e.output));
        break;
      default: {  // ENCRYPT: C = P ^ KS, in place
        if (b_.IsDone(i)) break;  // the batch already failed (deadline)
        const size_t len = e.job.input.size();
        uint8_t* c = e.output.data() + contract::kCtr0Size;
        for (size_t b = 0; b < len; ++b) c[b] ^= e.job.input[b];
        fin->Add(i, req_.batch_id(), i, c, len);
      }
    }
  }
}

// An aes*-cts job of the Run (cts_items.h): no FINALIZE; a DECRYPT's tag
// that did not hold fails it as a ctr-mpc one does. A gate's freshness is
// the gate book's, when the job completes (GateBook::Verdict).
void RunStep::CompleteCts(size_t i, bool verified) {
  PendingJob& e = b_.job(i);
  if (b_.IsDone(i)) return;  // the batch already failed (deadline)
  if (!verified) {
    b_.Complete(i, absl::DataLossError("ciphertext tag did not verify"), {});
    return;
  }
  absl::Status st = CtsResult(e.job, &e.output);
  b_.Complete(i, st, st.ok() ? std::move(e.output) : SecureBytes{});
}

void RunStep::Scrub() {
  // The shares dealt to each party (the transport is done with them: the
  // step's calls have all answered, or none was made).
  for (int p = 0; p < kParties; ++p) {
    if (p > 0 && party_req_[p] == &req_) continue;
    Cleanse(party_req_[p]->mutable_data_shares());
  }
  for (auto* r : resp_) Cleanse(r->mutable_shares());
}

// A verify item's ring-free answers refused a signature the Run accepts:
// some server added an error to its answer (which one, additive shares do
// not tell). The ticket is accepted; the event is logged and counted.
void RunStep::VerifyDisagreed() {
  b_.host().Count(StepEvent::kVerifyDisagreed, 1);
  b_.host().Log(LOG_WARNING,
             absl::StrCat("kdcmpc: security event: batch #", b_.seq(),
                          ": ring-free verify disagreed with the MPC check (a "
                          "checksum the servers' Sign answers refused verified "
                          "in a Run; one MPC server deviated); accepted"));
}

}  // namespace kmpc::kdc
