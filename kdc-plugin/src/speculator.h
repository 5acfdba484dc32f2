// Speculative keystream (BatcherOptions::speculate): an AS-REQ's
// encrypted-timestamp DECRYPT (usage 1) takes two speculative ENCRYPT jobs
// along in its batch, the ticket's (usage 2, under the krbtgt key of the
// last AS reply) and the reply's (usage 3, under the client's key), sized
// by the plaintext lengths seen lately. When the KDC then submits the
// ticket's and reply's ENCRYPT, a held keystream that fits turns it into a
// finalize_only job: a login needs one MPC Run instead of two.
//
// Invariants:
//  - Not thread-safe: every method runs under the dispatcher's mutex.
//  - Held keystreams + speculative jobs queued or in flight (pending) stay
//    within speculate_max; a keystream is held at most speculate_ttl from
//    its Run, used at most once, and wiped when it goes (SecureBytes).
//  - Budget: making a group takes a token; each of its two keystreams
//    gives half of it back when used. Tokens refill at kBudgetRefillPerSec
//    up to speculate_max / 2. A group whose timestamp failed, or that
//    expired unused, keeps its token spent: a flood of bad timestamps
//    (unauthenticated) gets at most speculate_max / 2 groups plus the
//    refill of ticket and reply AES work out of the cluster.
//  - Lengths are learnt from AS replies only: a ticket (usage 2) submitted
//    right next to a reply part (usage 3, AS-REP only; a TGS-REP's is
//    usage 8/9), so a TGS-REQ's service ticket changes neither the key nor
//    the lengths.
#ifndef KMPC_KDC_PLUGIN_SPECULATOR_H_
#define KMPC_KDC_PLUGIN_SPECULATOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "batcher.h"
#include "job.h"

namespace kmpc::kdc {

// A speculative keystream waiting for its ENCRYPT job.
struct HeldKeystream {
  std::string key_id;
  // The cipher it was made under: only an ENCRYPT of the same key id and
  // cipher may use it (its FINALIZE runs under the Run's state).
  kmpc::v1::Cipher cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  uint32_t usage = 0;
  std::string run_batch_id;  // the Run that made it (the servers' state)
  uint64_t run_job_id = 0;
  std::string ctr0;
  SecureBytes keystream;
  absl::Time expires;
};

class Speculator {
 public:
  explicit Speculator(const BatcherOptions& options);

  // Every submitted job, in submit order (`queue_size`: ordinary jobs
  // waiting). An ENCRYPT of a ticket or reply is learnt from and, when a
  // held keystream fits, becomes finalize_only (job->output = ctr0 || C).
  // A timestamp DECRYPT gets a group and its two speculative ENCRYPT jobs
  // appended to *group_jobs when the limits and the budget allow.
  void OnSubmit(PendingJob* job, size_t queue_size,
                std::vector<PendingJob>* group_jobs);

  // Holds the keystreams of a Run's speculative jobs.
  void Hold(std::vector<HeldKeystream>* keystreams);
  // Groups whose timestamp did not decrypt (their keystreams were dropped).
  void GroupsFailed(size_t n) { wasted_ += n; }
  // A speculative job completed (held or dropped): no longer pending.
  void SpeculativeJobDone() { if (pending_ > 0) --pending_; }
  // Drops expired keystreams; returns the next expiry (InfiniteFuture:
  // none held).
  absl::Time Prune(absl::Time now);
  void Clear();

  size_t held() const { return held_.size(); }
  uint64_t encrypts() const { return encrypts_; }
  uint64_t used() const { return used_; }
  uint64_t wasted() const { return wasted_; }

 private:
  void Learn(const Job& job, uint64_t at);
  void LearnPair();
  bool UseHeld(PendingJob* job);
  void MakeGroup(PendingJob* timestamp,
                 std::vector<PendingJob>* group_jobs);
  size_t KeystreamBytes(uint32_t usage) const;
  bool TakeToken(absl::Time now);

  const BatcherOptions options_;
  // Held in the order of their Runs, i.e. (almost) of expiry.
  std::deque<HeldKeystream> held_;
  size_t pending_ = 0;  // speculative jobs queued or in flight
  std::string ticket_key_id_;     // the krbtgt key of the last AS reply
  kmpc::v1::Cipher ticket_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;  // its enctype
  std::deque<size_t> lengths_[2];  // last plaintext lengths, usage 2 / 3
  uint64_t next_group_ = 1;
  uint64_t submits_ = 0;  // OnSubmit calls, for the pairing
  uint64_t last_ticket_at_ = 0, last_reply_at_ = 0;
  std::string last_ticket_key_;
  kmpc::v1::Cipher last_ticket_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;
  size_t last_ticket_len_ = 0;
  double tokens_;
  const double burst_;
  absl::Time tokens_at_;
  uint64_t encrypts_ = 0, used_ = 0, wasted_ = 0;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_SPECULATOR_H_
