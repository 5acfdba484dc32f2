#include "batch_step.h"

#include <openssl/rand.h>
#include <syslog.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <google/protobuf/arena.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/reveal.h"
#include "contract.h"
#include "cts_items.h"
#include "freshness.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

namespace {

constexpr int kParties = client::kParties;

// A fresh batch or request id. The servers key their one-use states by
// it (ENCRYPT states, pads): an id that repeats would meet a state of an
// earlier batch, so there is no fallback (a counter repeats across KDC
// worker processes and restarts); INTERNAL fails the step instead.
absl::StatusOr<std::string> RandomId() {
  std::string id(contract::kBatchIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()),
                 static_cast<int>(id.size())) != 1)
    return absl::InternalError(
        "the random generator failed (RAND_bytes): no fresh batch id");
  return id;
}

// A step's request and its three responses live on one protobuf arena: a
// response holds a share pair per job (hundreds of small strings), and
// allocating and freeing them one by one, on the gRPC threads, among the
// KDC's own allocations costs the KDC CPU per login under load (glibc's
// bins and consolidation). Blocks stay below 64 KB, glibc's threshold for
// consolidating on free. The shares are wiped (Scrub*) before the arena
// goes.
google::protobuf::ArenaOptions StepArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 32768;
  return o;
}

// kParties messages on an arena, used like std::array<M, kParties>.
template <class M>
class OnArena {
 public:
  explicit OnArena(google::protobuf::Arena* arena) {
    for (auto& m : p_) m = google::protobuf::Arena::CreateMessage<M>(arena);
  }
  M& operator[](size_t i) { return *p_[i]; }
  const M& operator[](size_t i) const { return *p_[i]; }
  M* const* begin() const { return p_.data(); }
  M* const* end() const { return p_.data() + p_.size(); }

 private:
  std::array<M*, kParties> p_;
};

}  // namespace

// At most kMaxDetail bytes of `detail`, every byte outside printable ASCII
// (control characters, newlines, escapes, UTF-8) as '?', and "..." where
// it was cut: a server's words go into KDC logs and krb5 error texts, and
// a deviating server must not forge log lines or flood them.
std::string SafeDetail(absl::string_view detail) {
  constexpr size_t kMaxDetail = 256;
  std::string out(detail.substr(0, kMaxDetail));
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  if (detail.size() > kMaxDetail) out += "...";
  return out;
}

namespace {

// "UNAVAILABLE: connection refused", or the refusal "BATCH_...: detail"
// (the server's text through SafeDetail).
std::string Describe(const CallStatus& s) {
  if (s.refused()) return SafeDetail(s.status.message());
  return absl::StrCat(absl::StatusCodeToString(s.status.code()), ": ",
                      SafeDetail(s.status.message()));
}

// A per-job failure the three servers agreed on; OK for JOB_OK and
// JOB_INTEGRITY_FAILED (the job's type decides what those mean).
absl::Status JobFailure(const pb::JobResult& r) {
  // The status's own text first; the servers' detail only through
  // SafeDetail (party 0's, a server's words).
  const std::string detail = SafeDetail(r.detail());
  switch (r.status()) {
    case pb::JOB_UNKNOWN_KEY:
      return absl::NotFoundError(absl::StrCat(
          "the MPC cluster holds no shares for this key id (", detail, ")"));
    case pb::JOB_WRONG_CIPHER:
      return absl::PermissionDeniedError(absl::StrCat(
          "the MPC cluster holds this key id for another enctype (", detail,
          ")"));
    case pb::JOB_MALFORMED:
      return absl::InvalidArgumentError(
          absl::StrCat("the MPC cluster failed the job (JOB_MALFORMED: ",
                       detail, ")"));
    case pb::JOB_KEY_INCONSISTENT:
      return absl::UnavailableError(absl::StrCat(
          "the MPC servers hold inconsistent shares of this key "
          "(JOB_KEY_INCONSISTENT: ",
          detail, ")"));
    case pb::JOB_UNKNOWN_USAGE:
      return absl::UnavailableError(absl::StrCat(
          "the MPC cluster holds no dealt material for this key usage "
          "(JOB_UNKNOWN_USAGE: ",
          detail, ")"));
    case pb::JOB_RATE_LIMITED:
      // Not a cluster failure (no failover: the other cluster counts its
      // own releases): KRB5KDC_ERR_SVC_UNAVAILABLE for this login.
      return absl::ResourceExhaustedError(absl::StrCat(
          "the MPC cluster bounds this user's AS replies per minute (JOB_RATE_LIMITED: ",
          detail, ")"));
    case pb::JOB_WITHHELD:
      // A gated job whose gate did not verify, nothing revealed: the
      // gate's verdict, as kdcmpc_plugin.h's KRB5_KDCMPC_ITEM_GATED says
      // (kUnauthenticated: KRB5KRB_AP_ERR_BAD_INTEGRITY; counted apart
      // from the gate's own integrity failure, cause "withheld").
      return absl::UnauthenticatedError(absl::StrCat(
          "the MPC cluster withheld the result (JOB_WITHHELD: ", detail,
          ")"));
    default:
      return absl::OkStatus();
  }
}

// Deals job's message, and for a VERIFY_CHECKSUM the presented tag t'
// after it, as one value into the parties' flat buffers (kmpc.proto
// RunRequest.data_shares, SignRequest.data_shares): t' is a PAC
// signature, bytes of a ticket's plaintext, so no server sees it whole.
absl::Status DealShared(const Job& job, client::DealRandom* random,
                        const std::array<std::string*, kParties>& flat) {
  const size_t n = SharedBytes(job);
  if (!job.splice.empty()) {
    // P || D (kmpc.proto Job.splice_length): D is public, dealt as shares
    // all the same, so the servers see no window of either.
    if (!job.cf2_half.empty() || job.type != pb::JOB_ENCRYPT)
      return absl::InvalidArgumentError("a splice on a job that cannot take one");
    SecureBytes value(job.input.begin(), job.input.end());
    value.insert(value.end(), job.splice.begin(), job.splice.end());
    if (value.size() != n) return absl::InvalidArgumentError("a spliced job's shares of the wrong size");
    return client::DealFlat(absl::MakeConstSpan(value.data(), n), random->Take(n), flat);
  }
  if (!job.cf2_half.empty()) {
    // A FAST key's KDC half, then an ENCRYPT's plaintext or a DECRYPT's
    // C || T, as one value (cts_items.h).
    SecureBytes value(job.cf2_half.begin(), job.cf2_half.end());
    value.insert(value.end(), job.input.begin(), job.input.end());
    if (value.size() != n) return absl::InvalidArgumentError("a FAST key's shares of the wrong size");
    return client::DealFlat(absl::MakeConstSpan(value.data(), n), random->Take(n), flat);
  }
  if (job.type != pb::JOB_VERIFY_CHECKSUM)
    return client::DealFlat(
        absl::MakeConstSpan(job.input.data(), job.input.size()),
        random->Take(n), flat);
  if (job.checksum.size() != contract::kChecksumSize)
    return absl::InvalidArgumentError("checksum must be ctr0 || tag");
  SecureBytes value(n);
  std::copy(job.input.begin(), job.input.end(), value.begin());
  std::memcpy(value.data() + job.input.size(),
              job.checksum.data() + contract::kCtr0Size, contract::kTagSize);
  return client::DealFlat(absl::MakeConstSpan(value.data(), n),
                          random->Take(n), flat);
}

// "keystream of job 3", without a heap allocation per job.
struct What {
  char text[48];
  What(const char* value, int k) {
    std::snprintf(text, sizeof(text), "%s of job %d", value, k);
  }
};

}  // namespace

struct BatchStep::RunCall {
  google::protobuf::Arena arena{StepArenaOptions()};
  // Party 0's request; its public fields are every party's.
  pb::RunRequest& req =
      *google::protobuf::Arena::CreateMessage<pb::RunRequest>(&arena);
  // What party p is sent: `req` itself, unless the batch carries a
  // checksum message (CHECKSUM, VERIFY_CHECKSUM), whose shares differ per
  // party (kmpc.proto RunRequest.data_shares); then parties 1 and 2 get
  // copies of `req` with their own shares.
  std::array<pb::RunRequest*, kParties> party_req = {&req, &req, &req};
  OnArena<pb::RunResponse> resp{&arena};
  // Where result k's values are in the responses' flat buffers (kmpc.proto
  // RunResponse.ctr0s, .shares), from the public statuses (LayOut): its
  // ctr0 at ctr0_at[k] (npos: none), its shares at share_at[k], each
  // share_len[k] bytes.
  std::vector<size_t> ctr0_at, share_at, share_len;
  std::array<absl::Status, kParties> st;
  std::atomic<int> left{kParties};
  std::vector<size_t> idx;  // request job k is jobs_[idx[k]]
  absl::Time started;
  // A server refused it with BATCH_INTEGRITY_CHECK_FAILED (counted once).
  std::atomic<bool> deviation{false};
};

struct BatchStep::FinalizeCall {
  google::protobuf::Arena arena{StepArenaOptions()};
  pb::FinalizeRequest& req =
      *google::protobuf::Arena::CreateMessage<pb::FinalizeRequest>(&arena);
  OnArena<pb::FinalizeResponse> resp{&arena};
  std::array<absl::Status, kParties> st;
  std::atomic<int> left{kParties};
  std::vector<size_t> idx;  // item k is jobs_[idx[k]]
  bool finalize_only = false;
  // A finalize_only call's jobs are re-run once, from the first failing
  // party's answer (not after all three: the others may take until the
  // deadline, e.g. a peer waiting for the restarted server).
  std::atomic<bool> rerun{false};
  absl::Time started;
};

BatchStep::BatchStep(std::shared_ptr<StepHost> host, uint64_t seq,
                     std::vector<PendingJob> jobs, absl::Time start,
                     StepKind kind)
    : host_(std::move(host)),
      seq_(seq),
      kind_(kind),
      start_(start),
      deadline_(start + host_->options().deadline),
      jobs_(std::move(jobs)),
      open_(jobs_.size()),
      recheck_(jobs_.size(), 0) {}

std::string BatchStep::Party(int p) const {
  return host_->transport()->PartyName(p);
}

absl::Status BatchStep::PartyOrderError(int p, uint32_t answered) const {
  return absl::AbortedError(absl::StrCat(
      "the server listed as party ", p, " (", Party(p), ") answered as party ",
      answered, ": list the servers in party order"));
}

void BatchStep::Start() {
  if (kind_ == StepKind::kSign) {
    StartSign();
    return;
  }
  std::vector<size_t> run;
  auto fin = std::make_shared<FinalizeCall>();
  fin->finalize_only = true;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const PendingJob& e = jobs_[i];
    if (!e.finalize_only) {
      run.push_back(i);
      continue;
    }
    pb::FinalizeItem* item = fin->req.add_items();
    item->set_run_batch_id(e.run_batch_id);
    item->set_job_id(e.run_job_id);
    item->set_ciphertext(e.output.data() + contract::kCtr0Size,
                         e.job.input.size());
    fin->idx.push_back(i);
  }
  if (!fin->idx.empty()) {
    absl::StatusOr<std::string> id = RandomId();
    if (id.ok()) {
      fin->req.set_batch_id(*std::move(id));
      fin->req.set_wire_version(contract::kWireVersion);
      StartFinalize(fin);
    } else {
      FailOpen(id.status(), &fin->idx);
    }
  }
  if (!run.empty()) StartRun(std::move(run));
}

void BatchStep::Expire() {
  FailOpen(absl::UnavailableError(absl::StrFormat(
               "the MPC cluster did not answer within %d ms",
               absl::ToInt64Milliseconds(host_->options().deadline))),
           nullptr);
}

// ---------------------------------------------------------------- Run step

// A party known to be down fails the step's jobs before anything is sent
// (Transport::Reachable): the other two servers are not left holding a
// batch that cannot run. True if so.
bool BatchStep::FailIfPartyDown(const std::vector<size_t>& idx) {
  for (int p = 0; p < kParties; ++p) {
    absl::Status st = host_->transport()->Reachable(p);
    if (st.ok()) continue;
    PartyFailed(p, CallStatus(std::move(st)), idx);
    return true;
  }
  return false;
}

void BatchStep::StartRun(std::vector<size_t> idx) {
  if (FailIfPartyDown(idx)) return;
  auto call = std::make_shared<RunCall>();
  call->idx = std::move(idx);
  if (absl::Status st = BuildRunRequest(call.get()); !st.ok()) {
    ScrubRun(call.get());
    FailOpen(st, &call->idx);
    return;
  }
  call->started = absl::Now();
  host_->Sending(StepKind::kRun, call->idx.size());
  auto self = shared_from_this();
  for (int p = 0; p < kParties; ++p) {
    host_->transport()->Run(
        p, *call->party_req[p], &call->resp[p], deadline_,
        [self, call, p](CallStatus s) {
          call->st[p] = s.status;
          if (s.refusal == pb::BATCH_INTEGRITY_CHECK_FAILED &&
              !call->deviation.exchange(true, std::memory_order_acq_rel))
            self->host_->DeviationDetected();
          if (s.refusal == pb::BATCH_BREAKER_OPEN) self->host_->BreakerSeen(true);
          if (!s.ok()) self->PartyFailed(p, s, call->idx);
          if (call->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
            self->OnRun(call);
        });
  }
}

namespace {

// A Run request job's inputs by type (the key, usage and links are set by
// the caller); true if its message or plaintext is dealt as shares.
bool SetJobInputs(const Job& job, pb::Job* j) {
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // The plaintext never leaves the KDC: only its length, and under
      // an aes*-cts cipher its shares, dealt by DealRunShares (cts_items.h).
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

absl::Status BatchStep::BuildRunRequest(RunCall* call) {
  absl::StatusOr<std::string> id = RandomId();
  if (!id.ok()) return id.status();
  call->req.set_batch_id(*std::move(id));
  call->req.set_wire_version(contract::kWireVersion);
  // The servers check an aes*-cts gate's timestamp against this clock
  // (kmpc.proto RunRequest.now_unix), the KDC's, which MIT's own skew
  // check uses too.
  call->req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  call->req.mutable_jobs()->Reserve(static_cast<int>(call->idx.size()));
  // The gate DECRYPT of each planned exchange's group in this request (a
  // group may hold two DECRYPTs, u2u: its gate is the one marked so): its
  // jobs marked gated are released by the servers only if it holds
  // (kmpc.proto Job.release_if_ok).
  // A held-back Run's gate is a copy of it (PendingJob::regate).
  std::map<uint64_t, size_t> group_decrypt;
  for (size_t i : call->idx)
    if (jobs_[i].group != 0 && jobs_[i].job.type == pb::JOB_DECRYPT &&
        ((jobs_[i].gate && !jobs_[i].prepared) || jobs_[i].regate))
      group_decrypt[jobs_[i].group] = i;
  // The prepared ticket ENCRYPT of each group in this request: a linked
  // PAD of the group takes its counter from it (Job.pad_after).
  std::map<uint64_t, size_t> group_ticket;
  for (size_t i : call->idx)
    if (jobs_[i].prepared && jobs_[i].group != 0 &&
        jobs_[i].job.type == pb::JOB_ENCRYPT && jobs_[i].job.usage == 2)
      group_ticket[jobs_[i].group] = i;
  std::vector<int> shared;  // request jobs whose message is dealt
  for (size_t i : call->idx) {
    const Job& job = jobs_[i].job;
    pb::Job* j = call->req.add_jobs();
    j->set_job_id(i);
    if (jobs_[i].group != 0 && jobs_[i].gated) {
      auto g = group_decrypt.find(jobs_[i].group);
      // A gated job never goes without its gate (the dispatcher never
      // cuts a group: a bug elsewhere): the step fails closed.
      if (g == group_decrypt.end())
        return absl::InternalError("a gated job without its gate DECRYPT in the Run request");
      j->set_release_if_ok(g->second);
    }
    if (jobs_[i].link_pad) {
      auto t = group_ticket.find(jobs_[i].group);
      if (t != group_ticket.end()) {
        j->set_pad_after(t->second);
        j->set_pad_slot(jobs_[i].pad_slot);
      }
    }
    j->set_key_id(job.key_id);
    j->set_cipher(job.cipher);
    j->set_usage(job.usage);
    j->set_type(job.type);
    // A FAST key: its KDC half is dealt below with the job's input
    // (cts_items.h).
    if (job.cts_key != pb::CTS_KEY_DEALT) j->set_cts_key(job.cts_key);
    if (SetJobInputs(job, j)) shared.push_back(call->req.jobs_size() - 1);
  }
  return DealRunShares(call, shared);
}

absl::Status BatchStep::DealRunShares(RunCall* call,
                                      const std::vector<int>& shared) {
  if (shared.empty()) return absl::OkStatus();
  // Parties 1 and 2 get copies made before any share is set (so no
  // request holds another party's shares), then each job's message is
  // dealt afresh into the three requests.
  for (int p = 1; p < kParties; ++p) {
    call->party_req[p] =
        google::protobuf::Arena::CreateMessage<pb::RunRequest>(&call->arena);
    call->party_req[p]->CopyFrom(call->req);
  }
  // One draw of the generator for every message of the request, each
  // message its own slice (client::DealRandom), dealt in job order into
  // each party's flat buffer.
  size_t total = 0;
  for (int k : shared) total += SharedBytes(jobs_[call->idx[k]].job);
  client::DealRandom random;
  if (absl::Status st = random.Draw(total); !st.ok()) return st;
  std::array<std::string*, kParties> flat;
  for (int p = 0; p < kParties; ++p) {
    flat[p] = call->party_req[p]->mutable_data_shares();
    flat[p]->reserve(2 * total);
  }
  for (int k : shared)
    if (absl::Status st = DealShared(jobs_[call->idx[k]].job, &random, flat);
        !st.ok())
      return st;
  return absl::OkStatus();
}

void BatchStep::OnRun(const std::shared_ptr<RunCall>& call) {
  figures_.run_us = absl::ToInt64Microseconds(absl::Now() - call->started);
  for (const auto& s : call->st)
    if (!s.ok()) {
      ScrubRun(call.get());  // shares of the parties that answered
      return;  // the jobs failed already (PartyFailed)
    }
  host_->BreakerSeen(false);  // all three served it
  absl::Status bad = CheckRunAnswers(*call);
  if (bad.ok()) bad = RevealRun(call.get());
  if (!bad.ok()) {
    ScrubRun(call.get());
    Reject(bad, call->idx);
    return;
  }
  figures_.blocks += call->resp[0].stats().aes_blocks();
  if (host_->options().debug) {
    uint64_t q = 0, c = 0;
    for (const auto* r : call->resp) {
      q = std::max<uint64_t>(q, r->stats().queue_us());
      c = std::max<uint64_t>(c, r->stats().compute_us());
    }
    figures_.AddRun(call->resp[0].stats(), q, c);
  }
  // Prepared keystreams and pads first: the KDC may submit the jobs they
  // are for as soon as it has the gate DECRYPT's result.
  HoldPrepared(*call);
  auto fin = std::make_shared<FinalizeCall>();
  CompleteRun(*call, fin.get());
  ScrubRun(call.get());
  if (fin->idx.empty()) return;
  absl::StatusOr<std::string> id = RandomId();
  if (!id.ok()) {
    FailOpen(id.status(), &fin->idx);
    return;
  }
  fin->req.set_batch_id(*std::move(id));
  fin->req.set_wire_version(contract::kWireVersion);
  StartFinalize(fin);
}

// The public parts of the three answers; names the parties, never a share.
absl::Status BatchStep::CheckRunAnswers(RunCall& call) const {
  const int n = call.req.jobs_size();
  for (int p = 0; p < kParties; ++p) {
    const pb::RunResponse& r = call.resp[p];
    if (std::string v = contract::WireVersionProblem(r.wire_version(), Party(p));
        !v.empty())
      return absl::AbortedError(v);
    if (r.party() != static_cast<uint32_t>(p))
      return PartyOrderError(p, r.party());
    if (r.batch_id() != call.req.batch_id())
      return absl::AbortedError(
          absl::StrCat(Party(p), " answered for another batch"));
    if (r.results_size() != n)
      return absl::AbortedError(absl::StrCat(
          Party(p), " returned ", r.results_size(), " results for ", n,
          " jobs"));
  }
  for (int k = 0; k < n; ++k) {
    const pb::JobResult& r0 = call.resp[0].results(k);
    for (int p = 0; p < kParties; ++p) {
      const pb::JobResult& r = call.resp[p].results(k);
      if (r.job_id() != call.req.jobs(k).job_id())
        return absl::AbortedError(
            absl::StrCat(Party(p), " returned results out of order"));
      if (r.status() != r0.status())
        return absl::AbortedError(absl::StrCat(
            Party(p), " and ", Party(0),
            " disagree on the public result of job ", k));
    }
  }
  if (absl::Status s = LayOut(&call); !s.ok()) return s;
  for (int k = 0; k < n; ++k)
    if (absl::Status s = CheckJobResult(call, k); !s.ok()) return s;
  return absl::OkStatus();
}

// The flat buffers' layout from the agreed statuses (kmpc.proto
// RunResponse.ctr0s, .shares); every party's buffers must be exactly that
// long, and the ctr0s (public) the same on all three.
absl::Status BatchStep::LayOut(RunCall* call) const {
  const int n = call->req.jobs_size();
  call->ctr0_at.assign(n, std::string::npos);
  call->share_at.assign(n, 0);
  call->share_len.assign(n, 0);
  size_t c = 0, s = 0;
  for (int k = 0; k < n; ++k) {
    const pb::JobStatus st = call->resp[0].results(k).status();
    const Job& job = jobs_[call->idx[k]].job;
    if (contract::ResultHasCtr0(ShapeOf(job), st)) {
      call->ctr0_at[k] = c;
      c += contract::kCtr0Size;
    }
    call->share_at[k] = s;
    call->share_len[k] = contract::RevealedShareBytes(ShapeOf(job), st);
    s += 2 * call->share_len[k];
  }
  for (int p = 0; p < kParties; ++p) {
    const pb::RunResponse& r = call->resp[p];
    if (r.ctr0s().size() != c || r.shares().size() != s)
      return absl::AbortedError(absl::StrCat(
          Party(p), " returned ", r.ctr0s().size(), " bytes of counters and ",
          r.shares().size(), " of shares for results that take ", c, " and ",
          s));
    if (r.ctr0s() != call->resp[0].ctr0s())
      return absl::AbortedError(absl::StrCat(
          Party(p), " and ", Party(0), " disagree on the counters"));
  }
  return absl::OkStatus();
}

// Result k's ctr0 (empty: none), party 0's copy (LayOut: all agree).
absl::string_view BatchStep::Ctr0(const RunCall& call, int k) {
  if (call.ctr0_at[k] == std::string::npos) return {};
  return absl::string_view(call.resp[0].ctr0s())
      .substr(call.ctr0_at[k], contract::kCtr0Size);
}

absl::Status BatchStep::CheckJobResult(const RunCall& call, int k) const {
  const pb::JobResult& r0 = call.resp[0].results(k);
  if (!JobFailure(r0).ok()) return absl::OkStatus();  // fails the job only
  const Job& job = jobs_[call.idx[k]].job;
  const bool ok = r0.status() == pb::JOB_OK;
  const bool verdict = ok || r0.status() == pb::JOB_INTEGRITY_FAILED;
  if (CtsJob(job)) return CtsCheckResult(job, r0.status(), k);
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // Invariant 4 (enctype.md) is the cluster's to keep; a counter range
      // through the all-zero block is refused here as well.
      if (ok && contract::CounterRangeOk(
                    Ctr0(call, k), contract::CeilBlocks(job.input.size())))
        return absl::OkStatus();
      return absl::AbortedError(absl::StrCat(
          "malformed ENCRYPT result (status or ctr0) for job ", k));
    case pb::JOB_CHECKSUM:
    case pb::JOB_PAD:
      if (ok && contract::CounterRangeOk(Ctr0(call, k), 0))
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
absl::Status BatchStep::RevealRun(RunCall* call) {
  const client::PartyNamer namer = [this](int p) { return Party(p); };
  const int n = call->req.jobs_size();
  for (int k = 0; k < n; ++k) {
    const pb::JobResult& r0 = call->resp[0].results(k);
    if (r0.status() != pb::JOB_OK) continue;
    PendingJob& e = jobs_[call->idx[k]];
    // A verdict only; a pad's ctr0 only.
    if (e.job.type == pb::JOB_VERIFY_CHECKSUM || e.job.type == pb::JOB_PAD)
      continue;
    const size_t len = call->share_len[k];
    std::array<client::ShareView, kParties> s;
    const bool tag = e.job.type == pb::JOB_CHECKSUM;
    for (int p = 0; p < kParties; ++p) {
      const absl::string_view flat = call->resp[p].shares();
      s[p] = {flat.substr(call->share_at[k], len),
              flat.substr(call->share_at[k] + len, len)};
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
    const absl::string_view ctr0 = Ctr0(*call, k);
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

void BatchStep::HoldPrepared(const RunCall& call) {
  const int n = call.req.jobs_size();
  std::set<uint64_t> failed_groups;  // their gate did not decrypt
  for (int k = 0; k < n; ++k) {
    const PendingJob& e = jobs_[call.idx[k]];
    if (e.job.type == pb::JOB_DECRYPT && e.group != 0 &&
        call.resp[0].results(k).status() != pb::JOB_OK)
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
  const absl::Time expires = answered + host_->options().speculate_ttl;
  size_t prepared = 0;
  for (int k = 0; k < n; ++k) prepared += jobs_[call.idx[k]].prepared;
  // Room for the prepared jobs only: a HeldKeystream per job of a large
  // batch is hundreds of KB, which glibc maps and unmaps afresh.
  held.reserve(prepared);
  std::vector<size_t> prepared_idx;
  prepared_idx.reserve(prepared);
  for (int k = 0; k < n; ++k) {
    const size_t i = call.idx[k];
    PendingJob& e = jobs_[i];
    if (!e.prepared) continue;
    if (e.regate) {  // a gate's copy: nothing to keep or deliver
      prepared_idx.push_back(i);
      continue;
    }
    const pb::JobResult& r = call.resp[0].results(k);
    // Kept for the job of its plan item, unless the exchange's gate failed
    // (the servers drop the state after their TTL).
    if (r.status() == pb::JOB_OK && !failed_groups.count(e.group) &&
        !IsDone(i)) {
      HeldKeystream h;
      h.pad = e.job.type == pb::JOB_PAD;
      h.verify = h.pad && !e.job.checksum.empty();
      h.pad_length = e.job.pad_length;
      h.key_id = e.job.key_id;
      h.cipher = e.job.cipher;
      h.usage = e.job.usage;
      h.run_batch_id = call.req.batch_id();
      h.run_job_id = i;
      h.ctr0 = std::string(Ctr0(call, k));
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
  if (!held.empty()) host_->HoldKeystreams(std::move(held));
  CompletePrepared(prepared_idx);
  if (pads_lost > 0) host_->PadsWasted(pads_lost);
}

// Completes what needs no Finalize; collects the ciphertexts that do.
void BatchStep::CompleteRun(const RunCall& call, FinalizeCall* fin) {
  const int n = call.req.jobs_size();
  for (int k = 0; k < n; ++k) {
    const size_t i = call.idx[k];
    PendingJob& e = jobs_[i];
    if (e.prepared) continue;  // HoldPrepared
    const pb::JobResult& r = call.resp[0].results(k);
    if (absl::Status f = JobFailure(r); !f.ok()) {
      Complete(i, std::move(f), {});
      continue;
    }
    const bool verified = r.status() == pb::JOB_OK;
    if (CtsJob(e.job)) {
      CompleteCts(i, verified);
      continue;
    }
    switch (e.job.type) {
      case pb::JOB_VERIFY_CHECKSUM:
        if (verified && recheck_[i]) VerifyDisagreed();
        Complete(i, verified ? absl::OkStatus()
                             : absl::DataLossError("checksum did not verify"),
                 {});
        break;
      case pb::JOB_DECRYPT: {
        if (!verified) {
          Complete(i, absl::DataLossError("ciphertext tag did not verify"), {});
          break;
        }
        if (e.gate && e.exchange_id != 0) host_->GateVerified(e.exchange_id);
        const uint8_t* c = e.job.input.data() + contract::kCtr0Size;
        for (size_t b = 0; b < e.output.size(); ++b) e.output[b] ^= c[b];
        Complete(i, absl::OkStatus(), std::move(e.output));
        break;
      }
      case pb::JOB_CHECKSUM:
        Complete(i, absl::OkStatus(), std::move(e.output));
        break;
      default: {  // ENCRYPT: C = P ^ KS, in place
        if (IsDone(i)) break;  // the batch already failed (deadline)
        const size_t len = e.job.input.size();
        uint8_t* c = e.output.data() + contract::kCtr0Size;
        for (size_t b = 0; b < len; ++b) c[b] ^= e.job.input[b];
        pb::FinalizeItem* item = fin->req.add_items();
        item->set_run_batch_id(call.req.batch_id());
        item->set_job_id(i);
        item->set_ciphertext(c, len);
        fin->idx.push_back(i);
      }
    }
  }
}

// An aes*-cts job of the Run (cts_items.h): no FINALIZE; a DECRYPT's tag
// that did not hold fails it as a ctr-mpc one does.
void BatchStep::CompleteCts(size_t i, bool verified) {
  PendingJob& e = jobs_[i];
  if (IsDone(i)) return;  // the batch already failed (deadline)
  if (!verified) {
    Complete(i, absl::DataLossError("ciphertext tag did not verify"), {});
    return;
  }
  absl::Status st = CtsResult(e.job, &e.output);
  if (st.ok() && e.job.type == pb::JOB_DECRYPT && e.gate && e.exchange_id != 0)
    st = GateFresh(e);
  Complete(i, st, st.ok() ? std::move(e.output) : SecureBytes{});
}

// A verified aes*-cts gate proves its exchange's shapes and releases what
// was held back for it only if fresh (freshness.h): a skewed one completes
// (MIT's check then answers KRB_AP_ERR_SKEW); a replayed one (a copy that
// passed the cache while its first was in flight: a racing attacker, or
// the user's own retransmission once MIT's lookaside forgot it) fails as
// kResourceExhausted, which the KDC answers KDC_ERR_SVC_UNAVAILABLE: never
// as a wrong password (MIT's lockout counts KDC_ERR_PREAUTH_FAILED, so a
// copy of someone's login would lock them out), and never as a cluster
// failure (status_class.h: not counted toward the router's failover).
absl::Status BatchStep::GateFresh(const PendingJob& e) {
  using V = GateFreshness::Verdict;
  const V v = GateFreshness::Shared().Check(
      e.job.key_id, absl::MakeConstSpan(e.job.input.data(), e.job.input.size()),
      absl::MakeConstSpan(e.output.data(), e.output.size()), absl::Now());
  if (v == V::kFresh) {
    host_->GateVerified(e.exchange_id);
    return absl::OkStatus();
  }
  if (v == V::kSkewed) {
    host_->GateFailed(e.exchange_id,
                      absl::DataLossError("its timestamp is outside the KDC's clock skew"));
    return absl::OkStatus();
  }
  if (v == V::kFull) {
    host_->Log(LOG_WARNING, absl::StrCat("kdcmpc: batch #", seq_, ": the aes*-cts replay "
                                         "cache is full (", GateFreshness::kMaxEntries,
                                         " gates within the clock skew): login refused"));
    return absl::ResourceExhaustedError("the aes*-cts gates' replay cache is full");
  }
  host_->Log(LOG_NOTICE, absl::StrCat("kdcmpc: batch #", seq_, ": a replayed aes*-cts ",
                                      e.job.usage == 54 ? "FAST challenge" : "PA-ENC-TIMESTAMP",
                                      " (verified before within the clock skew) refused"));
  return absl::ResourceExhaustedError(
      "a replayed timestamp: this ciphertext verified before within the clock skew");
}

void BatchStep::ScrubRun(RunCall* call) {
  // The shares dealt to each party (the transport is done with them: the
  // step's calls have all answered, or none was made).
  for (int p = 0; p < kParties; ++p) {
    if (p > 0 && call->party_req[p] == &call->req) continue;
    Cleanse(call->party_req[p]->mutable_data_shares());
  }
  for (auto* r : call->resp) Cleanse(r->mutable_shares());
}

// ----------------------------------------------------------- Finalize step

void BatchStep::StartFinalize(const std::shared_ptr<FinalizeCall>& fin) {
  // (A finalize_only call is not re-run then: the party is still down.)
  if (FailIfPartyDown(fin->idx)) return;
  fin->started = absl::Now();
  host_->Sending(StepKind::kFinalizeOnly, fin->idx.size());
  auto self = shared_from_this();
  for (int p = 0; p < kParties; ++p) {
    host_->transport()->Finalize(
        p, fin->req, &fin->resp[p], deadline_,
        [self, fin, p](CallStatus s) {
          fin->st[p] = s.status;
          if (!s.ok()) {
            if (!fin->finalize_only)
              self->PartyFailed(p, s, fin->idx);
            else if (!fin->rerun.exchange(true, std::memory_order_acq_rel))
              self->RerunFinalizeOnly(*fin, p, s);
          }
          if (fin->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
            self->OnFinalize(fin);
        });
  }
}

void BatchStep::OnFinalize(const std::shared_ptr<FinalizeCall>& fin) {
  figures_.finalize_us =
      absl::ToInt64Microseconds(absl::Now() - fin->started);
  for (const auto& s : fin->st)
    if (!s.ok()) {
      ScrubFinalize(fin.get());  // tag shares of the parties that answered
      return;  // re-run (finalize_only) or failed (PartyFailed) already
    }
  absl::Status bad = CheckFinalizeAnswers(*fin);
  const client::PartyNamer namer = [this](int p) { return Party(p); };
  const int n = fin->req.items_size();
  constexpr size_t kT = contract::kTagSize;
  // Each server's one additive share t_p of each tag (kmpc.proto
  // FinalizeResponse.tags, wire version 4): no duplicate copy to compare,
  // so a server that deviates can only make that tag wrong (the ticket
  // then fails its own check where it is presented).
  for (int k = 0; k < n && bad.ok(); ++k) {
    std::array<absl::string_view, kParties> s;
    for (int p = 0; p < kParties; ++p)
      s[p] = absl::string_view(fin->resp[p].tags()).substr(kT * k, kT);
    SecureBytes& out = jobs_[fin->idx[k]].output;  // ctr0 || C || T
    bad = client::CombineAdditive(
        s, absl::MakeSpan(out.data() + out.size() - contract::kTagSize,
                          contract::kTagSize),
        What("tag", k).text, namer);
  }
  ScrubFinalize(fin.get());
  if (!bad.ok()) {
    Reject(bad, fin->idx);
    return;
  }
  for (size_t i : fin->idx)
    Complete(i, absl::OkStatus(), std::move(jobs_[i].output));
}

absl::Status BatchStep::CheckFinalizeAnswers(const FinalizeCall& fin) const {
  const int n = fin.req.items_size();
  for (int p = 0; p < kParties; ++p) {
    const pb::FinalizeResponse& r = fin.resp[p];
    if (std::string v = contract::WireVersionProblem(r.wire_version(), Party(p));
        !v.empty())
      return absl::AbortedError(v);
    if (r.party() != static_cast<uint32_t>(p))
      return PartyOrderError(p, r.party());
    if (r.batch_id() != fin.req.batch_id())
      return absl::AbortedError(
          absl::StrCat(Party(p), " answered for another batch"));
    if (r.results_size() != n ||
        r.tags().size() != contract::kTagSize * static_cast<size_t>(n))
      return absl::AbortedError(absl::StrCat(
          Party(p), " returned ", r.results_size(), " results and ",
          r.tags().size(), " bytes of tag shares for ", n, " items"));
    for (int k = 0; k < n; ++k)
      if (r.results(k).job_id() != fin.req.items(k).job_id() ||
          r.results(k).run_batch_id() != fin.req.items(k).run_batch_id())
        return absl::AbortedError(
            absl::StrCat(Party(p), " returned tags out of order"));
  }
  return absl::OkStatus();
}

// A finalize_only call failed (most likely BATCH_UNKNOWN_ENCRYPT: a server
// no longer holds the ENCRYPT state). The servers take a request's states
// all or nothing and revealed no tag, so the jobs are simply encrypted
// again, as ordinary ENCRYPT jobs with a fresh counter range. Safe while
// the other parties' answers are still on their way: OnFinalize only
// scrubs a call that has a failed party.
void BatchStep::RerunFinalizeOnly(const FinalizeCall& fin, int party,
                                  const CallStatus& first) {
  if (absl::Now() >= deadline_) return;  // Expire fails them (or did)
  // Never run again on a cluster that reported a deviation or whose
  // breaker is open (a ring-free Finalize has neither today; a server's
  // word is enough to stop): the jobs fail, the router may go elsewhere.
  if (first.refusal == pb::BATCH_INTEGRITY_CHECK_FAILED ||
      first.refusal == pb::BATCH_BREAKER_OPEN) {
    PartyFailed(party, first, fin.idx);
    return;
  }
  std::vector<size_t> again;
  for (size_t i : fin.idx) {
    if (IsDone(i)) continue;  // the deadline passed meanwhile
    PendingJob& e = jobs_[i];
    e.finalize_only = false;
    e.output.clear();
    e.run_batch_id.clear();
    again.push_back(i);
  }
  if (again.empty()) return;
  host_->FinalizeOnlyRerun(again.size());
  host_->Log(LOG_WARNING,
             absl::StrCat("kdcmpc: batch #", seq_, ": FINALIZE of ",
                          again.size(), " prepared keystream(s) failed on "
                          "MPC ", Party(party), " (", Describe(first),
                          "); re-running them"));
  StartRun(std::move(again));
}

void BatchStep::ScrubFinalize(FinalizeCall* fin) {
  for (auto* r : fin->resp) Cleanse(r->mutable_tags());
}

// --------------------------------------------------------------- Sign step

struct BatchStep::SignCall {
  google::protobuf::Arena arena{StepArenaOptions()};
  OnArena<pb::SignRequest> req{&arena};  // one per party: its own shares
  OnArena<pb::SignResponse> resp{&arena};
  std::array<CallStatus, kParties> st;
  std::atomic<int> left{kParties};
  std::vector<size_t> idx;  // item k is jobs_[idx[k]]
  // Party p's tag share of item k (a slice of resp[p].tag_shares; empty
  // unless it answered JOB_OK with one), set by OnSign.
  std::array<std::vector<absl::string_view>, kParties> tag;
};

void BatchStep::StartSign() {
  std::vector<size_t> idx(jobs_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  if (FailIfPartyDown(idx)) return;
  auto call = std::make_shared<SignCall>();
  call->idx = std::move(idx);
  const absl::StatusOr<std::string> request_id = RandomId();
  if (!request_id.ok()) {
    FailOpen(request_id.status(), &call->idx);
    return;
  }
  for (int p = 0; p < kParties; ++p) {
    call->req[p].set_request_id(*request_id);
    call->req[p].set_wire_version(contract::kWireVersion);
  }
  size_t total = 0;
  for (size_t i : call->idx) total += SharedBytes(jobs_[i].job);
  client::DealRandom random;  // one draw for every item's message
  if (absl::Status st = random.Draw(total); !st.ok()) {
    FailOpen(st, &call->idx);
    return;
  }
  std::array<std::string*, kParties> flat;
  for (int p = 0; p < kParties; ++p) {
    flat[p] = call->req[p].mutable_data_shares();
    flat[p]->reserve(2 * total);
  }
  for (size_t i : call->idx) {
    const PendingJob& e = jobs_[i];
    for (int p = 0; p < kParties; ++p) {
      pb::SignItem* item = call->req[p].add_items();
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
    if (absl::Status st = DealShared(e.job, &random, flat); !st.ok()) {
      ScrubSign(call.get());
      FailOpen(st, &call->idx);
      return;
    }
  }
  host_->Sending(StepKind::kSign, call->idx.size());
  auto self = shared_from_this();
  for (int p = 0; p < kParties; ++p) {
    host_->transport()->Sign(
        p, call->req[p], &call->resp[p], deadline_,
        [self, call, p](CallStatus s) {
          call->st[p] = std::move(s);
          if (call->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
            self->OnSign(call);
        });
  }
}

// Every server answers alone and at once; a job's tag is combined only
// when all three answered JOB_OK for it. Anything else re-runs the job as
// an ordinary CHECKSUM: the servers that did answer used the pad up
// (kmpc.proto SignItem), and their tag shares are wiped uncombined.
void BatchStep::OnSign(const std::shared_ptr<SignCall>& call) {
  const int n = static_cast<int>(call->idx.size());
  std::string why;
  for (int p = 0; p < kParties && why.empty(); ++p) {
    const pb::SignResponse& r = call->resp[p];
    if (!call->st[p].ok())
      why = absl::StrCat("MPC ", Party(p), ": ", Describe(call->st[p]));
    else if (r.wire_version() != contract::kWireVersion)
      why = contract::WireVersionProblem(r.wire_version(), Party(p));
    else if (r.party() != static_cast<uint32_t>(p))
      why = std::string(PartyOrderError(p, r.party()).message());
    else if (r.results_size() != n)
      why = absl::StrCat(Party(p), " returned ", r.results_size(),
                         " results for ", n, " items");
    for (int k = 0; k < n && why.empty(); ++k)
      if (r.results(k).job_id() != call->req[p].items(k).job_id() ||
          r.results(k).run_batch_id() != call->req[p].items(k).run_batch_id())
        why = absl::StrCat(Party(p), " returned results out of order");
    if (why.empty()) why = TagSharesProblem(*call, p);
    if (why.empty()) SliceTagShares(call.get(), p);
  }
  std::vector<size_t> rerun, recheck;
  size_t not_ok = 0;  // items some server answered other than JOB_OK
  if (!why.empty()) {
    rerun = call->idx;
  } else {
    const client::PartyNamer namer = [this](int p) { return Party(p); };
    for (int k = 0; k < n; ++k) {
      const size_t i = call->idx[k];
      bool ok = true;
      for (int p = 0; p < kParties; ++p) {
        const pb::SignResult& r = call->resp[p].results(k);
        if (r.status() != pb::JOB_OK) {
          ok = false;
          if (why.empty())
            why = absl::StrCat(Party(p), ": ", pb::JobStatus_Name(r.status()),
                               " (", SafeDetail(r.detail()), ")");
        }
      }
      not_ok += !ok;
      PendingJob& e = jobs_[i];
      if (ok && e.job.type == pb::JOB_VERIFY_CHECKSUM && !IsDone(i)) {
        absl::Status st = CheckVerifyAnswer(*call, k);
        if (st.ok()) {
          Complete(i, std::move(st), {});
          continue;
        }
        if (absl::IsDataLoss(st)) {  // never final: the Run decides
          recheck_[i] = 1;
          recheck.push_back(i);
          continue;
        }
        if (why.empty()) why = std::string(st.message());
      } else if (ok && e.output.size() == contract::kCtr0Size && !IsDone(i)) {
        absl::Status st = CombineSigned(*call, k, namer);
        if (st.ok()) {
          Complete(i, absl::OkStatus(), std::move(e.output));
          continue;
        }
        if (why.empty()) why = std::string(st.message());
      }
      rerun.push_back(i);
    }
  }
  if (not_ok > 0) host_->SignAnswersFailed(not_ok);
  ScrubSign(call.get());
  if (!rerun.empty() || !recheck.empty())
    RerunSign(std::move(rerun), why, std::move(recheck));
}

// Item k's signature from the three tag shares into its job's output
// (ctr0 || tag); for a chained item (kmpc.proto SignItem.chain) also the
// second, sig_2 = ctr0_2 || tag_2 over sig_1, kept for the CHECKSUM of
// sig_1 (planner.h, chained signatures) before the KDC has sig_1.
absl::Status BatchStep::CombineSigned(const SignCall& call, int k,
                                      const client::PartyNamer& namer) {
  PendingJob& e = jobs_[call.idx[k]];
  const bool chained = ChainedItem(call, k);
  const size_t tk = contract::kTagSize;
  std::array<absl::string_view, kParties> t1, t2;
  for (int p = 0; p < kParties; ++p) {
    t1[p] = call.tag[p][k].substr(0, tk);
    if (chained) t2[p] = call.tag[p][k].substr(tk);
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
  host_->KeepChained(std::move(c));
  return absl::OkStatus();
}

// A verify item's answers (kmpc.proto SignItem.verify): additive
// shares of r * (T ^ t'), so the tag holds iff they XOR to zero. OK,
// DataLoss (it does not: as a Run's VERIFY_CHECKSUM), or Aborted for
// answers of the wrong size (the job then runs as an ordinary
// VERIFY_CHECKSUM).
absl::Status BatchStep::CheckVerifyAnswer(const SignCall& call, int k) const {
  uint8_t acc = 0;
  for (size_t b = 0; b < contract::kTagSize; ++b) {
    uint8_t x = 0;
    for (int p = 0; p < kParties; ++p) {
      const absl::string_view s = call.tag[p][k];
      if (s.size() != contract::kTagSize)
        return absl::AbortedError("verify answers of the wrong size");
      x ^= static_cast<uint8_t>(s[b]);
    }
    acc |= x;
  }
  return acc == 0 ? absl::OkStatus()
                  : absl::DataLossError("checksum did not verify");
}

void BatchStep::RerunSign(std::vector<size_t> rerun, const std::string& why,
                          std::vector<size_t> recheck) {
  if (absl::Now() >= deadline_) return;  // Expire fails them (or did)
  std::vector<size_t> again;
  size_t reruns = 0;
  for (const auto* list : {&rerun, &recheck})
    for (size_t i : *list) {
      if (IsDone(i)) continue;
      PendingJob& e = jobs_[i];
      e.sign = false;
      e.output.clear();
      e.run_batch_id.clear();
      // A chain's second pad is spent (or refused) with the first: its
      // CHECKSUM, when it comes, takes a pad or runs as usual.
      if (!e.chain_batch_id.empty()) host_->PadsWasted(1);
      e.chain_batch_id.clear();
      e.chain_ctr0.clear();
      again.push_back(i);
      reruns += list == &rerun;
    }
  if (again.empty()) return;
  if (reruns > 0) {
    host_->SignRerun(reruns);
    // Warning: a server that answers other than JOB_OK (or not at all)
    // costs a Run per item; a deviating one shows here.
    host_->Log(LOG_WARNING,
               absl::StrCat("kdcmpc: batch #", seq_, ": Sign of ", reruns,
                            " checksum(s) under a pad failed (",
                            why, "); running them"));
  }
  if (reruns < again.size())
    host_->Log(LOG_INFO,
               absl::StrCat("kdcmpc: batch #", seq_, ": ",
                            again.size() - reruns,
                            " ring-free verify item(s) refused the presented "
                            "tag; re-checking in a Run"));
  StartRun(std::move(again));
}

// A verify item's ring-free answers refused a signature the Run accepts:
// some server added an error to its answer (which one, additive shares do
// not tell). The ticket is accepted; the event is logged and counted.
void BatchStep::VerifyDisagreed() {
  host_->VerifyDisagreed();
  host_->Log(LOG_WARNING,
             absl::StrCat("kdcmpc: security event: batch #", seq_,
                          ": ring-free verify disagreed with the MPC check (a "
                          "checksum the servers' Sign answers refused verified "
                          "in a Run; one MPC server deviated); accepted"));
}

// Why party p's tag share buffer is not exactly one tag per JOB_OK result
// (kmpc.proto SignResponse.tag_shares); empty when it is. A short or long
// buffer would pair a result with another result's share.
std::string BatchStep::TagSharesProblem(const SignCall& call, int p) const {
  const pb::SignResponse& r = call.resp[p];
  size_t tags = 0, ok = 0;
  for (int k = 0; k < r.results_size(); ++k) {
    if (r.results(k).status() != pb::JOB_OK) continue;
    ++ok;
    tags += ChainedItem(call, k) ? 2 : 1;
  }
  if (r.tag_shares().size() == tags * contract::kTagSize) return {};
  return absl::StrCat(Party(p), " returned ", r.tag_shares().size(),
                      " bytes of tag shares for ", ok, " JOB_OK results (",
                      contract::kTagSize, " bytes each, twice for a chained one)");
}

// Whether item k of the call chains a second signature (SignItem.chain).
bool BatchStep::ChainedItem(const SignCall& call, int k) const {
  return !jobs_[call.idx[k]].chain_batch_id.empty();
}

// Party p's tag shares, one per JOB_OK result in order (kmpc.proto
// SignResponse.tag_shares; TagSharesProblem checked the size).
void BatchStep::SliceTagShares(SignCall* call, int p) const {
  const pb::SignResponse& r = call->resp[p];
  contract::FlatReader flat(r.tag_shares());
  call->tag[p].assign(r.results_size(), absl::string_view());
  for (int k = 0; k < r.results_size(); ++k)
    if (r.results(k).status() == pb::JOB_OK)
      call->tag[p][k] = flat.Take(contract::kTagSize * (ChainedItem(*call, k) ? 2 : 1));
}

void BatchStep::ScrubSign(SignCall* call) {
  for (auto* r : call->req) Cleanse(r->mutable_data_shares());
  for (auto* r : call->resp) Cleanse(r->mutable_tag_shares());
}

// -------------------------------------------------------------- Completion

// Fail fast: one failed party is enough to fail the call's jobs; the other
// two calls are left to finish or time out on their own. A refusal for a
// detected deviation marks the jobs' status (MarkDeviation, transport.h):
// the router never sends them to this cluster again.
void BatchStep::PartyFailed(int p, const CallStatus& s,
                            const std::vector<size_t>& idx) {
  absl::Status st = absl::UnavailableError(absl::StrCat(
      "MPC ", Party(p), s.refused() ? " refused the batch: " : " unreachable: ",
      Describe(s)));
  if (s.refusal == pb::BATCH_INTEGRITY_CHECK_FAILED) st = MarkDeviation(std::move(st));
  FailOpen(st, &idx);
}

void BatchStep::Reject(const absl::Status& bad,
                       const std::vector<size_t>& idx) {
  host_->Log(LOG_ERR, absl::StrCat("kdcmpc: batch #", seq_,
                                   " rejected: ", bad.message()));
  FailOpen(absl::UnavailableError(bad.message()), &idx);
}

void BatchStep::Complete(size_t i, absl::Status st, SecureBytes out) {
  bool finished, deliver;
  Result r;
  std::vector<std::pair<uint64_t, int>> lost;  // prepared, not held
  uint64_t failed_gate = 0;  // the exchange whose gate this failed
  absl::Status gate_status;
  {
    std::lock_guard<std::mutex> l(mu_);
    PendingJob& e = jobs_[i];
    if (e.done) return;
    e.done = true;
    if (!st.ok() && !e.prepared) ++failed_;
    finished = --open_ == 0;
    deliver = !e.prepared;
    if (e.prepared) lost.emplace_back(e.exchange_id, e.item);
    if (!st.ok() && e.gate && e.exchange_id != 0 && e.job.type == pb::JOB_DECRYPT) {
      failed_gate = e.exchange_id;
      gate_status = st;
    }
    r.token = e.token;
    r.status = std::move(st);
    r.output = std::move(out);
  }
  if (deliver)
    host_->Deliver(std::move(r));
  else if (!lost.empty())
    host_->PreparedLost(lost);
  if (failed_gate != 0) host_->GateFailed(failed_gate, gate_status);
  if (finished) Finish();
}

void BatchStep::CompletePrepared(const std::vector<size_t>& idx) {
  bool finished = false;
  // Those held are the planner's already (Lost ignores them).
  std::vector<std::pair<uint64_t, int>> lost;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i : idx) {
      PendingJob& e = jobs_[i];
      if (e.done) continue;
      e.done = true;
      lost.emplace_back(e.exchange_id, e.item);
      finished = --open_ == 0;
    }
  }
  if (!lost.empty()) host_->PreparedLost(lost);
  if (finished) Finish();
}

bool BatchStep::IsDone(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  return jobs_[i].done;
}

// Fails the open jobs among `only` (every open job when null); the first
// failure of the batch is logged.
void BatchStep::FailOpen(const absl::Status& st,
                         const std::vector<size_t>* only) {
  std::vector<size_t> open;
  bool log;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (only) {
      for (size_t i : *only)
        if (!jobs_[i].done) open.push_back(i);
    } else {
      for (size_t i = 0; i < jobs_.size(); ++i)
        if (!jobs_[i].done) open.push_back(i);
    }
    if (open.empty()) return;
    log = !failure_logged_;
    failure_logged_ = true;
  }
  if (log)
    host_->Log(LOG_ERR, absl::StrCat("kdcmpc: batch #", seq_, " of ",
                                     jobs_.size(), " jobs failed: ",
                                     st.message()));
  for (size_t i : open) Complete(i, st, {});
}

void BatchStep::Finish() {
  size_t failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    failed = failed_;
  }
  if (host_->options().debug) {
    absl::Duration queued = absl::ZeroDuration();
    uint64_t requested = 0;
    for (const PendingJob& e : jobs_) {
      queued = std::max(queued, start_ - e.enqueued);
      requested += JobBlocks(e.job);
    }
    host_->Log(LOG_DEBUG, DebugLine(seq_, jobs_.size(), failed, requested,
                                    queued, absl::Now() - start_, figures_));
  }
  host_->StepFinished(shared_from_this(), kind_,
                      figures_.blocks.load(), failed > 0);
}

}  // namespace kmpc::kdc
