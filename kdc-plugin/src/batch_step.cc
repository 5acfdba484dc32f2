#include "batch_step.h"

#include <openssl/rand.h>
#include <syslog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "contract.h"
#include "cts_items.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

absl::StatusOr<std::string> RandomId() {
  std::string id(contract::kBatchIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()),
                 static_cast<int>(id.size())) != 1)
    return absl::InternalError(
        "the random generator failed (RAND_bytes): no fresh batch id");
  return id;
}

google::protobuf::ArenaOptions StepArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 32768;
  return o;
}

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

What::What(const char* value, int k) {
  std::snprintf(text, sizeof(text), "%s of job %d", value, k);
}

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

client::PartyNamer BatchStep::Namer() const {
  return [this](int p) { return Party(p); };
}

void BatchStep::Expire() {
  FailOpen(absl::UnavailableError(absl::StrFormat(
               "the MPC cluster did not answer within %d ms",
               absl::ToInt64Milliseconds(host_->options().deadline))),
           nullptr);
}

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
  GateBook::Outcome gate;  // what a gate's verdict releases or fails
  {
    std::lock_guard<std::mutex> l(mu_);
    PendingJob& e = jobs_[i];
    if (e.done) return;
    e.done = true;
    // Every job to the gate book, once: a gate's verdict (a replayed
    // timestamp fails here, its plaintext wiped).
    gate = host_->gates().Verdict(e, &st, out, absl::Now());
    if (!st.ok()) out = SecureBytes();
    if (!st.ok() && !e.prepared) ++failed_;
    finished = --open_ == 0;
    deliver = !e.prepared;
    if (e.prepared) lost.emplace_back(e.exchange_id, e.item);
    r.token = e.token;
    r.status = std::move(st);
    r.output = std::move(out);
  }
  if (!gate.log.empty())
    host_->Log(gate.log_level, absl::StrCat("kdcmpc: batch #", seq_, ": ", gate.log));
  // A verified gate's released jobs are queued before its result goes; a
  // failed gate's held-back jobs complete after it.
  const bool verified = r.status.ok();
  if (verified) Settle(std::move(gate));
  if (deliver)
    host_->Deliver(std::move(r));
  else if (!lost.empty())
    host_->PreparedLost(lost, /*sent=*/true);
  if (!verified) Settle(std::move(gate));
  if (finished) Finish();
}

void BatchStep::Settle(GateBook::Outcome gate) {
  if (!gate.release.empty()) host_->Release(std::move(gate.release));
  std::vector<std::pair<uint64_t, int>> lost;  // never sent
  for (const PendingJob& q : gate.fail)
    if (q.prepared) lost.emplace_back(q.exchange_id, q.item);
  if (!lost.empty()) host_->PreparedLost(lost, /*sent=*/false);
  for (const PendingJob& q : gate.fail) {
    if (q.prepared) continue;
    Result r;
    r.token = q.token;
    r.status = gate.why;
    host_->Deliver(std::move(r));
  }
}  // `gate` wipes the failed jobs' inputs (SecureBytes)

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
  if (!lost.empty()) host_->PreparedLost(lost, /*sent=*/true);
  if (finished) Finish();
}

bool BatchStep::IsDone(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  return jobs_[i].done;
}

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
