// One batch on its way through the cluster: the Run step (one RunRequest
// to all three servers, their three answers checked and revealed), then
// for its ENCRYPT jobs the Finalize step (one FinalizeRequest per server,
// the tags revealed), and the jobs' completion. finalize_only jobs (their
// keystream came from a prepared ENCRYPT) go straight to a Finalize
// step of their own; `sign` jobs (a CHECKSUM a pad of an earlier Run
// signs) to a Sign step of their own: one ring-free SignRequest per
// server, the message dealt as shares afresh, the tag the XOR of the
// three servers' additive shares (client::CombineAdditive). A sign job
// whose pad is unavailable (JOB_PAD_UNAVAILABLE: expired, used, a server
// restarted), or whose Sign fails otherwise, is re-run at once as an
// ordinary CHECKSUM (a fresh ctr0 and pad, fresh shares): no tag was
// revealed under the pad, since no tag is combined unless all three
// servers answered JOB_OK.
//
// Verify items: a VERIFY_CHECKSUM under a verification pad is a Sign item
// whose answers XOR to zero iff the presented tag holds. Any one server
// can make them nonzero (it adds an error to its additive share), so a
// nonzero answer is never final: the signature is checked again at once
// by an ordinary VERIFY_CHECKSUM in a Run, whose verdict decides. A Run
// that accepts is a security event (logged at warning, counted by
// VerifyDisagreed): the ring-free answers were wrong. The re-check
// reveals nothing more: whether it happens is the deviating server's
// choice, and its verdict is what accepting or refusing the ticket tells
// anyway (docs/security-model.md, "Ring-free verification").
//
// Invariants:
//  - Every job completes exactly once (Complete checks `done`), through
//    the host, unless the host is stopped; a prepared job delivers
//    nothing (its keystream or pad goes to the planner).
//  - One server failing or refusing a step fails that step's open jobs at
//    once (kUnavailable): the step needs all three answers. The deadline
//    fails every job still open (Expire).
//  - The public parts of the three answers (party, batch id, job ids,
//    statuses, ctr0) must agree, and every revealed value's share copies
//    must agree (client::Reveal), before any job of the step completes;
//    otherwise the whole step fails (kUnavailable) and is logged.
//  - Per-job statuses fail only their job: JOB_UNKNOWN_KEY kNotFound,
//    JOB_MALFORMED kInvalidArgument, JOB_KEY_INCONSISTENT kUnavailable,
//    JOB_WRONG_CIPHER kPermissionDenied, JOB_INTEGRITY_FAILED kDataLoss
//    (job.h).
//  - Shares are wiped (Scrub*) before a step's arena goes; revealed values
//    live only in SecureBytes.
//  - A finalize_only step that fails on any server re-runs its jobs as
//    ordinary ENCRYPT jobs at once (the servers take a FinalizeRequest's
//    states all or nothing, so no tag was revealed); other steps of the
//    batch never depend on it.
#ifndef KMPC_KDC_PLUGIN_BATCH_STEP_H_
#define KMPC_KDC_PLUGIN_BATCH_STEP_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batch_stats.h"
#include "client/reveal.h"
#include "batcher.h"
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

// What a batch needs from the dispatcher. Thread-safe; outlives its steps
// (shared_ptr).
class StepHost {
 public:
  virtual ~StepHost() = default;
  virtual const BatcherOptions& options() const = 0;
  virtual Transport* transport() const = 0;
  // Nothing reaches the sink once the host stopped.
  virtual void Deliver(Result result) = 0;
  virtual void Log(int level, std::string line) = 0;
  // A Run's prepared keystreams and pads, for the planner (planner.h).
  virtual void HoldKeystreams(std::vector<HeldKeystream> keystreams) = 0;
  // A chained Sign item's second checksum, for the CHECKSUM of its first
  // (planner.h, chained signatures).
  virtual void KeepChained(ChainedSignature c) = 0;
  virtual void FinalizeOnlyRerun(size_t jobs) = 0;
  // Pads drawn that will never be used (their Run failed, or their chain).
  virtual void PadsWasted(size_t pads) = 0;
  // A planned exchange's gate DECRYPT verified (planner.h).
  virtual void GateVerified(uint64_t exchange_id) = 0;
  // A planned exchange's gate DECRYPT completed with `why` (not OK): the
  // jobs held back until it verified (planner.h, proven shapes) complete
  // now; called after the gate's own Deliver.
  virtual void GateFailed(uint64_t exchange_id, const absl::Status& why) = 0;
  // Prepared jobs of planned exchanges (exchange id, item) completed
  // without being held (Planner::Lost); once per Run, after HoldKeystreams.
  virtual void PreparedLost(
      const std::vector<std::pair<uint64_t, int>>& items) = 0;
  // Sign jobs re-run as ordinary CHECKSUM jobs.
  virtual void SignRerun(size_t jobs) = 0;
  // Sign items that some server answered other than JOB_OK.
  virtual void SignAnswersFailed(size_t items) = 0;
  // A security event: a verify item refused a signature that the Run's
  // VERIFY_CHECKSUM accepted (a server deviated in the verify item).
  virtual void VerifyDisagreed() = 0;
  // A security event: a server refused a Run with
  // BATCH_INTEGRITY_CHECK_FAILED (its check found that a server of the
  // cluster deviated); once per Run request, whichever servers refused.
  virtual void DeviationDetected() = 0;
  // Whether the cluster's deviation breaker is open, as the last Run saw:
  // true when a server refused it with BATCH_BREAKER_OPEN, false when all
  // three answered it.
  virtual void BreakerSeen(bool open) = 0;
  // A request of `items` jobs is about to go to the three servers
  // (statistics): a Run request (kRun), a Finalize request (kFinalizeOnly:
  // after a Run as well), a Sign request (kSign).
  virtual void Sending(StepKind what, size_t items) = 0;
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
  void Start();
  // The deadline passed: every job still open fails.
  void Expire();

  struct RunCall;
  struct FinalizeCall;
  struct SignCall;

 private:
  std::string Party(int p) const;
  absl::Status PartyOrderError(int p, uint32_t answered) const;

  // Run step.
  void StartRun(std::vector<size_t> idx);
  // Fills the request(s); a checksum's message is dealt as shares, one
  // request per party then. INTERNAL if the random generator fails.
  absl::Status BuildRunRequest(RunCall* call);
  // The messages of call->req's jobs at positions `shared` (CHECKSUM and
  // VERIFY_CHECKSUM), dealt afresh into the three parties' requests.
  absl::Status DealRunShares(RunCall* call, const std::vector<int>& shared);
  void OnRun(const std::shared_ptr<RunCall>& call);
  absl::Status CheckRunAnswers(RunCall& call) const;
  absl::Status LayOut(RunCall* call) const;
  static absl::string_view Ctr0(const RunCall& call, int k);
  absl::Status CheckJobResult(const RunCall& call, int k) const;
  absl::Status RevealRun(RunCall* call);
  void HoldPrepared(const RunCall& call);
  void CompleteRun(const RunCall& call, FinalizeCall* fin);
  void CompleteCts(size_t i, bool verified);
  // A verified aes*-cts gate's freshness (freshness.h): GateVerified only
  // if fresh; the status its DECRYPT completes with.
  absl::Status GateFresh(const PendingJob& e);
  static void ScrubRun(RunCall* call);

  // Finalize step.
  void StartFinalize(const std::shared_ptr<FinalizeCall>& fin);
  void OnFinalize(const std::shared_ptr<FinalizeCall>& fin);
  absl::Status CheckFinalizeAnswers(const FinalizeCall& fin) const;
  void RerunFinalizeOnly(const FinalizeCall& fin, int party,
                         const CallStatus& first);
  static void ScrubFinalize(FinalizeCall* fin);

  // Sign step.
  void StartSign();
  void OnSign(const std::shared_ptr<SignCall>& call);
  // Re-runs sign jobs as ordinary CHECKSUM (or VERIFY_CHECKSUM) jobs in
  // one Run: `rerun` failed (`why`: logged), `recheck` are verify items
  // whose answers refused the tag.
  void RerunSign(std::vector<size_t> rerun, const std::string& why,
                 std::vector<size_t> recheck);
  absl::Status CheckVerifyAnswer(const SignCall& call, int k) const;
  void VerifyDisagreed();
  std::string TagSharesProblem(const SignCall& call, int p) const;
  bool ChainedItem(const SignCall& call, int k) const;
  absl::Status CombineSigned(const SignCall& call, int k, const client::PartyNamer& namer);
  void SliceTagShares(SignCall* call, int p) const;
  static void ScrubSign(SignCall* call);

  // Completion.
  bool FailIfPartyDown(const std::vector<size_t>& idx);
  void PartyFailed(int p, const CallStatus& s, const std::vector<size_t>& idx);
  void Reject(const absl::Status& bad, const std::vector<size_t>& idx);
  void Complete(size_t i, absl::Status st, SecureBytes out);
  // Completes the prepared jobs `idx` that are still open (they deliver
  // nothing): one lock of the step and one call to the host for all.
  void CompletePrepared(const std::vector<size_t>& idx);
  bool IsDone(size_t i);
  void FailOpen(const absl::Status& st, const std::vector<size_t>* only);
  void Finish();

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
  // recheck_[i]: job i is a verify item that the servers' ring-free
  // answers refused, re-checked in a Run (see "Verify items" above).
  std::vector<char> recheck_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_BATCH_STEP_H_
