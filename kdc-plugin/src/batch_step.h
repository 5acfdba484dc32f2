// One batch on its way through the cluster, and its jobs' completion. Each
// kind of step is a class of its own over the batch, in a layer above this
// one (kdc-plugin/README.md, "Layers"): the Run step (run_step.h: one
// RunRequest to all three servers, their answers checked and revealed),
// for its ENCRYPT jobs then the Finalize step (finalize_step.h: one
// FinalizeRequest per server, the tags combined); finalize_only jobs
// (their keystream came from a prepared ENCRYPT) go straight to a Finalize
// step of their own, and `sign` jobs (a CHECKSUM a pad of an earlier Run
// signs) to a Sign step of their own (sign_step.h). StartStep
// (start_step.h) starts a batch by its kind. All three check the servers'
// answers through one check (CheckAnswer below). BatchStep holds the
// batch's jobs and completes them, reporting each to the module's gate
// book (gate_book.h: a gate's verdict); the host (the dispatcher) hears of
// what the steps did through a few calls and one counter
// (StepHost::Count).
//
// Invariants:
//  - Every job completes exactly once (Complete checks `done`), through
//    the host, unless the host is stopped; a prepared job delivers
//    nothing (its keystream or pad goes to the planner).
//  - One server failing or refusing a step fails that step's open jobs at
//    once (kUnavailable): the step needs all three answers (a finalize_only
//    or Sign step re-runs them instead: finalize_step.h, sign_step.h). The
//    deadline fails every job still open (Expire).
//  - The public parts of the three answers (party, batch id, job ids,
//    statuses, ctr0) must agree, and every revealed value's share copies
//    must agree (client::Reveal), before any job of the step completes;
//    otherwise the whole step fails (kUnavailable) and is logged.
//  - Per-job statuses fail only their job: JOB_UNKNOWN_KEY kNotFound,
//    JOB_MALFORMED kInvalidArgument, JOB_KEY_INCONSISTENT kUnavailable,
//    JOB_WRONG_CIPHER kPermissionDenied, JOB_INTEGRITY_FAILED kDataLoss
//    (job.h).
//  - Shares are wiped (each step's Scrub) before a step's arena goes;
//    revealed values live only in SecureBytes.
//  - Other steps of the batch never depend on a finalize_only step.
#ifndef KMPC_KDC_PLUGIN_BATCH_STEP_H_
#define KMPC_KDC_PLUGIN_BATCH_STEP_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/arena.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batch_stats.h"
#include "batcher.h"
#include "client/reveal.h"
#include "contract.h"
#include "gate_book.h"
#include "job.h"
#include "prepared.h"
#include "transport.h"

namespace kmpc::kdc {

class BatchStep;

// A server's free text (a JobResult's or SignResult's detail, a refusal's
// message) made safe for KDC logs and krb5 error texts: at most 256 bytes
// ("..." where cut), printable ASCII only (anything else '?').
std::string SafeDetail(absl::string_view detail);

// What a step carries: a Run (then Finalize) batch, FINALIZE of
// prepared keystreams only, or Sign of pad-signed checksums.
enum class StepKind { kRun, kFinalizeOnly, kSign };

// What the steps tell the host to count (BatcherStats). n: how many.
enum class StepEvent {
  // A request of n items is about to go to the three servers: a Run, a
  // Finalize (after a Run as well), a Sign.
  kRunSent, kFinalizeSent, kSignSent,
  // n finalize_only jobs re-run as ordinary ENCRYPT jobs (their FINALIZE
  // failed), n Sign jobs re-run as ordinary CHECKSUM jobs.
  kFinalizeOnlyRerun, kSignRerun,
  // n pads drawn that will never be used (their Run failed, or their chain).
  kPadsWasted,
  // n Sign items that some server answered other than JOB_OK.
  kSignAnswersFailed,
  // A security event: a verify item refused a signature that the Run's
  // VERIFY_CHECKSUM accepted (a server deviated in the verify item).
  kVerifyDisagreed,
  // A security event: a server refused a Run with
  // BATCH_INTEGRITY_CHECK_FAILED (its check found that a server of the
  // cluster deviated); once per Run request, whichever servers refused.
  kDeviation,
  // The cluster's deviation breaker as the last Run saw it: open when a
  // server refused it with BATCH_BREAKER_OPEN, closed when all three
  // answered it.
  kBreakerOpen, kBreakerClosed,
};

// What a batch needs from the dispatcher. Thread-safe; outlives its steps
// (shared_ptr).
class StepHost {
 public:
  virtual ~StepHost() = default;
  virtual const BatcherOptions& options() const = 0;
  virtual Transport* transport() const = 0;
  // The module's gate book, to which the steps report every job they
  // complete (GateBook::Verdict).
  virtual GateBook& gates() const = 0;
  // Nothing reaches the sink once the host stopped.
  virtual void Deliver(Result result) = 0;
  virtual void Log(int level, std::string line) = 0;
  // A Run's prepared keystreams and pads, for the planner (planner.h).
  virtual void HoldKeystreams(std::vector<HeldKeystream> keystreams) = 0;
  // A chained Sign item's second checksum, for the CHECKSUM of its first
  // (planner.h, chained signatures).
  virtual void KeepChained(ChainedSignature c) = 0;
  // Prepared jobs of planned exchanges (exchange id, item) completed
  // without being held (Planner::Lost); once per Run, after HoldKeystreams.
  // `sent`: they reached the servers (not: held back for a gate that
  // failed).
  virtual void PreparedLost(const std::vector<std::pair<uint64_t, int>>& items,
                            bool sent) = 0;
  // Jobs a gate's verdict released (GateBook::Outcome::release), to queue
  // as one group; before the gate's own Deliver.
  virtual void Release(std::vector<PendingJob> group) = 0;
  virtual void Count(StepEvent event, size_t n) = 0;
  virtual void StepFinished(const std::shared_ptr<BatchStep>& step,
                            StepKind kind, uint64_t blocks, bool failed) = 0;
};

class BatchStep : public std::enable_shared_from_this<BatchStep> {
 public:
  BatchStep(std::shared_ptr<StepHost> host, uint64_t seq,
            std::vector<PendingJob> jobs, absl::Time start, StepKind kind);

  absl::Time deadline() const { return deadline_; }
  absl::Time start() const { return start_; }
  size_t size() const { return jobs_.size(); }
  StepKind kind() const { return kind_; }
  // The deadline passed: every job still open fails.
  void Expire();

  // For the step kinds (start_step.h, run_step.h, finalize_step.h,
  // sign_step.h).
  StepHost& host() const { return *host_; }
  uint64_t seq() const { return seq_; }
  PendingJob& job(size_t i) { return jobs_[i]; }
  StepFigures& figures() { return figures_; }
  std::string Party(int p) const;
  client::PartyNamer Namer() const;
  // recheck(i): job i is a verify item that the servers' ring-free answers
  // refused, re-checked in a Run (sign_step.h).
  bool recheck(size_t i) const { return recheck_[i] != 0; }
  void set_recheck(size_t i) { recheck_[i] = 1; }
  // A party known to be down (Transport::Reachable) fails the jobs `idx`
  // before anything is sent. True if so.
  bool FailIfPartyDown(const std::vector<size_t>& idx);
  // Party p's call failed with `s`: the open jobs among `idx` fail.
  void PartyFailed(int p, const CallStatus& s, const std::vector<size_t>& idx);
  // The answers failed the checks (`bad`, logged): the open jobs among
  // `idx` fail (kUnavailable).
  void Reject(const absl::Status& bad, const std::vector<size_t>& idx);
  void Complete(size_t i, absl::Status st, SecureBytes out);
  // Completes the prepared jobs `idx` that are still open (they deliver
  // nothing): one lock of the step and one call to the host for all.
  void CompletePrepared(const std::vector<size_t>& idx);
  bool IsDone(size_t i);
  // Fails the open jobs among `only` (every open job when null); the first
  // failure of the batch is logged.
  void FailOpen(const absl::Status& st, const std::vector<size_t>* only);

 private:
  void Finish();
  // What a gate's verdict released goes to the host's queue; what it
  // failed completes (a prepared job: lost, never sent).
  void Settle(GateBook::Outcome gate);

  const std::shared_ptr<StepHost> host_;
  const uint64_t seq_;
  const StepKind kind_;
  const absl::Time start_;
  const absl::Time deadline_;
  std::vector<PendingJob> jobs_;
  std::mutex mu_;  // guards the jobs' done flags, open_, failed_
  size_t open_ = 0;
  size_t failed_ = 0;
  bool failure_logged_ = false;
  StepFigures figures_;
  std::vector<char> recheck_;
};

// ---- What the step kinds share (batch_step.cc) ----------------------------

constexpr int kParties = client::kParties;

// A fresh batch or request id. The servers key their one-use states by
// it (ENCRYPT states, pads): an id that repeats would meet a state of an
// earlier batch, so there is no fallback (a counter repeats across KDC
// worker processes and restarts); INTERNAL fails the step instead.
absl::StatusOr<std::string> RandomId();

// A step's request and its three responses live on one protobuf arena: a
// response holds a share pair per job (hundreds of small strings), and
// allocating and freeing them one by one, on the gRPC threads, among the
// KDC's own allocations costs the KDC CPU per login under load (glibc's
// bins and consolidation). Blocks stay below 64 KB, glibc's threshold for
// consolidating on free. The shares are wiped (Scrub*) before the arena
// goes.
google::protobuf::ArenaOptions StepArenaOptions();

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

// "UNAVAILABLE: connection refused", or the refusal "BATCH_...: detail"
// (the server's text through SafeDetail).
std::string Describe(const CallStatus& s);

// A per-job failure the three servers agreed on; OK for JOB_OK and
// JOB_INTEGRITY_FAILED (the job's type decides what those mean).
absl::Status JobFailure(const kmpc::v1::JobResult& r);

// Deals job's message, and for a VERIFY_CHECKSUM the presented tag t'
// after it, as one value into the parties' flat buffers (kmpc.proto
// RunRequest.data_shares, SignRequest.data_shares): t' is a PAC
// signature, bytes of a ticket's plaintext, so no server sees it whole.
absl::Status DealShared(const Job& job, client::DealRandom* random,
                        const std::array<std::string*, kParties>& flat);

// "keystream of job 3", without a heap allocation per job.
struct What {
  char text[48];
  What(const char* value, int k);
};

// The id an answer names its request by (a Sign answer names none).
inline const std::string& AnsweredId(const kmpc::v1::RunResponse& r) { return r.batch_id(); }
inline const std::string& AnsweredId(const kmpc::v1::FinalizeResponse& r) { return r.batch_id(); }
inline const std::string& AnsweredId(const kmpc::v1::SignResponse&) {
  static const std::string* const kNone = new std::string();
  return *kNone;
}

// The one check of a server's answer to any step's request (Run, Finalize,
// Sign), before anything in it is used: party p's answer `r` is of this
// wire version, from party p (the servers are listed in party order), for
// the request `id` (empty: the answers name none), and has exactly `n`
// results (`items` names them in the error), result k for request item k
// (same(result, k)). Names the parties, never a share; kAborted otherwise.
template <class Response, class SameItem>
absl::Status CheckAnswer(const BatchStep& step, int p, const Response& r,
                         absl::string_view id, int n, const char* items,
                         SameItem same) {
  if (std::string v = contract::WireVersionProblem(r.wire_version(), step.Party(p));
      !v.empty())
    return absl::AbortedError(v);
  if (r.party() != static_cast<uint32_t>(p))
    return absl::AbortedError(absl::StrCat(
        "the server listed as party ", p, " (", step.Party(p),
        ") answered as party ", r.party(), ": list the servers in party order"));
  if (!id.empty() && AnsweredId(r) != id)
    return absl::AbortedError(
        absl::StrCat(step.Party(p), " answered for another batch"));
  if (r.results_size() != n)
    return absl::AbortedError(absl::StrCat(step.Party(p), " returned ",
                                           r.results_size(), " results for ",
                                           n, " ", items));
  for (int k = 0; k < n; ++k)
    if (!same(r.results(k), k))
      return absl::AbortedError(
          absl::StrCat(step.Party(p), " returned results out of order"));
  return absl::OkStatus();
}

// CheckAnswer on all three answers, party 0 first.
template <class Response, class SameItem>
absl::Status CheckAnswers(const BatchStep& step, const OnArena<Response>& resp,
                          absl::string_view id, int n, const char* items,
                          SameItem same) {
  for (int p = 0; p < kParties; ++p)
    if (absl::Status st = CheckAnswer(step, p, resp[p], id, n, items, same);
        !st.ok())
      return st;
  return absl::OkStatus();
}

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_BATCH_STEP_H_
