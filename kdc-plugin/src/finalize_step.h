// The Finalize step of a batch (batch_step.h): one FinalizeRequest to all
// three servers for ENCRYPT ciphertexts whose keystream a Run revealed
// (after the batch's Run, or finalize_only: a prepared keystream the
// planner held), their answers checked (CheckAnswers) and each tag
// combined from the servers' additive shares (client::CombineAdditive).
//
// Invariants:
//  - After a Run, one server failing or refusing fails the step's open
//    jobs at once (kUnavailable).
//  - A finalize_only step that fails on any server re-runs its jobs as
//    ordinary ENCRYPT jobs at once (through the RerunJobs it was made
//    with: start_step.cc gives RunStep::Start), from the first failing
//    server's answer: the servers take a FinalizeRequest's states all or
//    nothing, so no tag was revealed. Not on a cluster that reported a
//    deviation or whose breaker is open: the jobs fail there.
//  - This step names no other step kind: it is the lowest of them
//    (kdc-plugin/README.md, "Layers"; the Run step continues into it), so
//    a re-run goes through the RerunJobs the step was made with.
//  - Tag shares are wiped (Scrub) before the step's arena goes.
#ifndef KMPC_KDC_PLUGIN_FINALIZE_STEP_H_
#define KMPC_KDC_PLUGIN_FINALIZE_STEP_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <google/protobuf/arena.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batch_step.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

// Runs the jobs `idx` of `batch` again as ordinary jobs, in a Run of
// their own (RunStep::Start).
using RerunJobs = void (*)(std::shared_ptr<BatchStep> batch,
                           std::vector<size_t> idx);

class FinalizeStep : public std::enable_shared_from_this<FinalizeStep> {
 public:
  // After the batch's Run: `rerun` null, a failing server fails the jobs.
  // finalize_only (the keystreams a planner held): `rerun` re-runs them.
  FinalizeStep(std::shared_ptr<BatchStep> batch, RerunJobs rerun);

  // The batch's job i: the ciphertext c of `len` bytes under the ENCRYPT
  // state (run_batch_id, job_id) the servers keep.
  void Add(size_t i, absl::string_view run_batch_id, uint64_t job_id,
           const uint8_t* c, size_t len);
  // Sends it under a fresh batch id, unless it has no item.
  static void Start(std::shared_ptr<FinalizeStep> step);

 private:
  void OnCall(int p, const CallStatus& s);
  void OnAnswers();
  absl::Status CheckAnswers() const;
  // Each server's one additive share of each tag (kmpc.proto
  // FinalizeResponse.tags) combined into its job's output.
  absl::Status CombineTags();
  void Rerun(int party, const CallStatus& first);
  void Scrub();

  const std::shared_ptr<BatchStep> batch_;
  BatchStep& b_;
  const RerunJobs rerun_jobs_;  // non-null: a finalize_only step
  google::protobuf::Arena arena_;
  kmpc::v1::FinalizeRequest& req_;
  OnArena<kmpc::v1::FinalizeResponse> resp_;
  std::array<absl::Status, kParties> st_;
  std::atomic<int> left_{kParties};
  std::vector<size_t> idx_;  // item k is the batch's job idx_[k]
  // A finalize_only step's jobs are re-run once, from the first failing
  // party's answer (not after all three: the others may take until the
  // deadline, e.g. a peer waiting for the restarted server).
  std::atomic<bool> rerun_{false};
  absl::Time started_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_FINALIZE_STEP_H_
