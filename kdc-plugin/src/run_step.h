// The Run step of a batch (batch_step.h): one RunRequest to all three
// servers (a checksum's message dealt as shares, one request per party
// then), their three answers checked (CheckAnswers, then the agreed
// statuses, the flat buffers' layout and the ctr0s) and every revealed
// value's two share copies compared (client::Reveal) before any job of the
// step completes. Then the prepared keystreams and pads go to the planner
// (HoldKeystreams), the jobs that need no FINALIZE complete, and the
// ENCRYPT jobs' ciphertexts go on in a Finalize step (finalize_step.h).
//
// Invariants:
//  - One server failing or refusing the Run fails its open jobs at once
//    (kUnavailable; a refusal for a detected deviation marks them,
//    MarkDeviation); answers that fail a check fail them all (Reject).
//  - A gated job goes only with its gate DECRYPT in the same request
//    (kmpc.proto Job.release_if_ok); otherwise nothing is sent.
//  - Shares are wiped (Scrub) before the step's arena goes; revealed
//    values live only in SecureBytes.
#ifndef KMPC_KDC_PLUGIN_RUN_STEP_H_
#define KMPC_KDC_PLUGIN_RUN_STEP_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include <google/protobuf/arena.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batch_step.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

class FinalizeStep;

class RunStep : public std::enable_shared_from_this<RunStep> {
 public:
  // Runs the jobs `idx` of `batch` (not finalize_only, not sign).
  static void Start(std::shared_ptr<BatchStep> batch, std::vector<size_t> idx);

  RunStep(std::shared_ptr<BatchStep> batch, std::vector<size_t> idx);

 private:
  void Send();
  void OnCall(int p, const CallStatus& s);
  // Fills the request(s); a checksum's message is dealt as shares, one
  // request per party then. INTERNAL if the random generator fails.
  absl::Status Build();
  // The messages of the request's jobs at positions `shared` (CHECKSUM and
  // VERIFY_CHECKSUM), dealt afresh into the three parties' requests.
  absl::Status DealShares(const std::vector<int>& shared);
  void OnAnswers();
  absl::Status CheckAnswers();
  absl::Status LayOut();
  absl::string_view Ctr0(int k) const;
  absl::Status CheckJobResult(int k) const;
  absl::Status Reveal();
  void HoldPrepared();
  void CompleteJobs(FinalizeStep* fin);
  void CompleteCts(size_t i, bool verified);
  void VerifyDisagreed();
  void Scrub();

  const std::shared_ptr<BatchStep> batch_;
  BatchStep& b_;
  google::protobuf::Arena arena_;
  // Party 0's request; its public fields are every party's.
  kmpc::v1::RunRequest& req_;
  // What party p is sent: `req_` itself, unless the batch carries a
  // checksum message (CHECKSUM, VERIFY_CHECKSUM), whose shares differ per
  // party (kmpc.proto RunRequest.data_shares); then parties 1 and 2 get
  // copies of `req_` with their own shares.
  std::array<kmpc::v1::RunRequest*, kParties> party_req_;
  OnArena<kmpc::v1::RunResponse> resp_;
  // Where result k's values are in the responses' flat buffers (kmpc.proto
  // RunResponse.ctr0s, .shares), from the public statuses (LayOut): its
  // ctr0 at ctr0_at_[k] (npos: none), its shares at share_at_[k], each
  // share_len_[k] bytes.
  std::vector<size_t> ctr0_at_, share_at_, share_len_;
  std::array<absl::Status, kParties> st_;
  std::atomic<int> left_{kParties};
  const std::vector<size_t> idx_;  // request job k is the batch's job idx_[k]
  absl::Time started_;
  // A server refused it with BATCH_INTEGRITY_CHECK_FAILED (counted once).
  std::atomic<bool> deviation_{false};
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_RUN_STEP_H_
