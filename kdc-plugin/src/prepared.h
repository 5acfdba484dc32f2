// What a Run computes ahead for jobs the KDC submits later (the items of an
// exchange's plan, planner.h), and how such a job then uses it.
//
// A keystream (a prepared ENCRYPT's, kept by the module) turns the
// ENCRYPT that uses it into a finalize_only job; a pad (kmpc.proto
// JOB_PAD: the servers keep it, the module only its ctr0) turns a CHECKSUM
// into a ring-free Sign item, and a verification pad a VERIFY_CHECKSUM
// into a verify item. Each is used at most once (enctype.md invariant 6
// for pads), held at most its TTL from its Run (below the servers' state
// TTLs), and wiped when it goes (SecureBytes).
#ifndef KMPC_KDC_PLUGIN_PREPARED_H_
#define KMPC_KDC_PLUGIN_PREPARED_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "compile_budget.h"  // Budget
#include "job.h"

namespace kmpc::kdc {

// How long a verification pad is held (at most the prepared TTL): its
// VERIFY follows its ticket's DECRYPT within the same exchange, and one
// drawn for a ticket whose signature is not at the linked counter (an
// older ticket) is never used, so it must not take the room of keystreams
// for long.
inline constexpr absl::Duration kVerifyPadTtl = absl::Seconds(1);

// How long a chained signature's second tag is kept for its CHECKSUM: the
// KDC submits it as soon as the first signature is delivered.
inline constexpr absl::Duration kChainedTtl = absl::Seconds(1);

// Budget tokens given back per second (Budget).
inline constexpr double kBudgetRefillPerSec = 32;

// A chained signature's second checksum (sig_2 = ctr0_2 || tag_2), kept
// for the CHECKSUM whose message is sig_1 = ctr0_1 || tag_1 (planner.h:
// a plan's SIG_SERVER and SIG_KDC under one key). Public once its ticket is
// issued; SecureBytes anyway, wiped when it goes.
struct ChainedSignature {
  std::string key_id;
  kmpc::v1::Cipher cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  uint32_t usage = 0;
  SecureBytes message;   // sig_1
  SecureBytes checksum;  // sig_2
  absl::Time expires;
  // The exchange and the SIG_KDC item it answers (planner.h).
  uint64_t exchange_id = 0;
  int item = -1;
};

// A prepared keystream waiting for its ENCRYPT job, or (pad) a pad
// waiting for its CHECKSUM.
struct HeldKeystream {
  bool pad = false;
  // A verification pad (kmpc.proto JOB_PAD with a counter): it verifies
  // the one signature whose ctr0 is its own, never signs.
  bool verify = false;
  uint32_t pad_length = 0;  // pad: the longest message it may sign
  std::string key_id;
  // The cipher it was made under: only an ENCRYPT of the same key id and
  // cipher may use it (its FINALIZE runs under the Run's state).
  kmpc::v1::Cipher cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  uint32_t usage = 0;
  std::string run_batch_id;  // the Run that made it (the servers' state)
  uint64_t run_job_id = 0;
  std::string ctr0;
  SecureBytes keystream;  // empty for a pad (the servers keep it)
  absl::Time expires;
  // The exchange and plan item it was made for (planner.h).
  uint64_t exchange_id = 0;
  int item = -1;
};

// A prepared job taken along in `cause`'s group: an ENCRYPT of `length`
// plaintext bytes (only the length is sent) or a PAD for messages of up to
// `length` bytes.
PendingJob PreparedJob(const PendingJob& cause, kmpc::v1::JobType type,
                       const std::string& key_id, kmpc::v1::Cipher cipher,
                       uint32_t usage, size_t length);

// The jobs that go with ordinary job q as its group, into q's Run
// (Dispatcher::Submit): for a ticket signed in the cluster, the krbtgt's
// signing PAD (kmpc.proto Job.sign_pad); given `gate`, a copy of the
// DECRYPT q is released on (PendingJob::regate), q then gated on it: a
// ctr-mpc user's AS reply or request checksum run apart from its
// exchange's Run (router.h failover), which the servers compute only on
// its timestamp in the same batch (mpc-server engine/user_key_rule.h).
std::vector<PendingJob> GroupOf(PendingJob* q, const Job* gate);

// Whether a pad of `pad_length` signing a message of `message_bytes` can
// chain a second signature (kmpc.proto SignItem.chain): its powers of H
// reach two blocks beyond the message's (contract::PadPowers); the servers
// refuse the chain otherwise.
inline bool ChainFits(size_t message_bytes, uint32_t pad_length) {
  return contract::CeilBlocks(message_bytes) + 4 <=
         contract::PadPowers(pad_length);
}

// ENCRYPT q (its plaintext at most k's keystream long) becomes finalize_only
// under keystream k: q->output = ctr0 || P ^ keystream. k is consumed.
void FinalizeWith(PendingJob* q, HeldKeystream k);

// CHECKSUM or VERIFY_CHECKSUM q becomes a Sign item (verify item) under
// `pad`: q->output = the pad's ctr0. pad is consumed.
void SignWith(PendingJob* q, HeldKeystream pad);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_PREPARED_H_
