// The Sign step of a batch (batch_step.h): `sign` jobs, a CHECKSUM a pad
// of an earlier Run signs, in one ring-free SignRequest per server, the
// message dealt as shares afresh, the tag the XOR of the three servers'
// additive shares (client::CombineAdditive). A sign job whose pad is
// unavailable (JOB_PAD_UNAVAILABLE: expired, used, a server restarted), or
// whose Sign fails otherwise, is re-run at once as an ordinary CHECKSUM
// (run_step.h: a fresh ctr0 and pad, fresh shares): no tag was revealed
// under the pad, since no tag is combined unless all three servers
// answered JOB_OK.
//
// Verify items: a VERIFY_CHECKSUM under a verification pad is a Sign item
// whose answers XOR to zero iff the presented tag holds. Any one server
// can make them nonzero (it adds an error to its additive share), so a
// nonzero answer is never final: the signature is checked again at once
// by an ordinary VERIFY_CHECKSUM in a Run, whose verdict decides. A Run
// that accepts is a security event (logged at warning, counted as
// StepEvent::kVerifyDisagreed): the ring-free answers were wrong. The
// re-check reveals nothing more: whether it happens is the deviating
// server's choice, and its verdict is what accepting or refusing the
// ticket tells anyway (docs/security/server-view.md, "Ring-free
// verification").
//
// Invariants:
//  - Every server's answer passes CheckAnswers and carries exactly one
//    tag share per JOB_OK result (two for a chained one) before any of
//    them is combined; otherwise every item is re-run.
//  - Tag shares and dealt shares are wiped (Scrub) before the step's
//    arena goes.
#ifndef KMPC_KDC_PLUGIN_SIGN_STEP_H_
#define KMPC_KDC_PLUGIN_SIGN_STEP_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/arena.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "batch_step.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

class SignStep : public std::enable_shared_from_this<SignStep> {
 public:
  // Signs every job of `batch` (each a `sign` job).
  static void Start(std::shared_ptr<BatchStep> batch);

  explicit SignStep(std::shared_ptr<BatchStep> batch);

 private:
  // Fills the three requests; INTERNAL if the random generator fails.
  absl::Status Build();
  void OnAnswers();
  // Why the answers cannot be used at all (every item re-runs); empty when
  // they can. Slices the tag shares (tag_) of those that pass.
  std::string CheckAnswers();
  // Item k, all three servers' answers usable: completes its job, or adds
  // it to *rerun or *recheck (with the first *why). False if some server
  // answered other than JOB_OK for it.
  bool Settle(int k, std::string* why, std::vector<size_t>* rerun,
              std::vector<size_t>* recheck);
  // Re-runs sign jobs as ordinary CHECKSUM (or VERIFY_CHECKSUM) jobs in
  // one Run: `rerun` failed (`why`: logged), `recheck` are verify items
  // whose answers refused the tag.
  void Rerun(std::vector<size_t> rerun, const std::string& why,
             std::vector<size_t> recheck);
  absl::Status CheckVerifyAnswer(int k) const;
  std::string TagSharesProblem(int p) const;
  bool ChainedItem(int k) const;
  absl::Status CombineSigned(int k, const client::PartyNamer& namer);
  void SliceTagShares(int p);
  void Scrub();

  const std::shared_ptr<BatchStep> batch_;
  BatchStep& b_;
  google::protobuf::Arena arena_;
  OnArena<kmpc::v1::SignRequest> req_;  // one per party: its own shares
  OnArena<kmpc::v1::SignResponse> resp_;
  std::array<CallStatus, kParties> st_;
  std::atomic<int> left_{kParties};
  std::vector<size_t> idx_;  // item k is the batch's job idx_[k]
  // Party p's tag share of item k (a slice of resp_[p].tag_shares; empty
  // unless it answered JOB_OK with one), set by CheckAnswers.
  std::array<std::vector<absl::string_view>, kParties> tag_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_SIGN_STEP_H_
