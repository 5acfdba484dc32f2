// The scheduler's control messages (scheduler.h: PROPOSE and COMMIT), as
// they travel on a worker's ring connection: their fixed 32-byte layout,
// a decoder that refuses any other size, type, kind, status, party or flag
// (DATA_LOSS: the caller drops the link), and the leader's two uses of the
// link for a proposal, its wait for the reply and its abort. Sequence
// numbers compare as serial numbers (they wrap).
#ifndef KMPC_SERVICE_SCHEDULER_CONTROL_H_
#define KMPC_SERVICE_SCHEDULER_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "service/ring.h"
#include "service/scheduler.h"

namespace kmpc::service::scheduling {

// Control message (32 bytes):
//   0 type (kPropose / kCommit)   1 kind   2 status   3 status party
//   4 flags (bit 0: need / new PRSS session; bit 1: go, COMMIT only;
//     bit 2: retry, COMMIT without go only: the leader proposes the batch
//     again, the followers keep their copies for it)
//   5..7 zero   8..23 batch id
//   24..27 age_ms (PROPOSE): how long ago the batch reached the leader,
//     plus the time each follower that forwarded it held it
//   28..31 wait_ms (PROPOSE): how long a follower may wait for its copy
//     (SchedulerOptions::proposal_wait, and the rest of the batch's retry
//     time at most, less the time the followers before it held it); both
//     big-endian, 0 in a COMMIT
// Status: kStatusMissing, the copy has not arrived (yet): the leader may
// retry; kStatusGone, it never will (kBeforeStartMargin, scheduler.cc): it
// fails at once; kStatusBreaker, that party's deviation breaker is open
// (breaker.h): it fails at once, as BATCH_BREAKER_OPEN on every server.
enum : uint8_t { kPropose = 1, kCommit = 2 };
enum : uint8_t { kStatusOk = 0, kStatusMissing = 1, kStatusGone = 2, kStatusBreaker = 3 };
enum : uint8_t { kFlagSession = 1, kFlagGo = 2, kFlagRetry = 4 };
inline constexpr size_t kControlSize = 8 + kBatchIdSize + 8;

struct Control {
  uint8_t type = 0;
  BatchKind kind = BatchKind::kRun;
  uint8_t status = kStatusOk;
  uint8_t status_party = 0;
  uint8_t flags = 0;
  BatchId id{};
  uint32_t age_ms = 0;
  uint32_t wait_ms = 0;
};

// Whether ring sequence number a precedes b: a worker's numbers count up
// from a random start and wrap, so they compare as serial numbers (RFC
// 1982, section 3.2, for 32 bits).
bool SeqBefore(uint32_t a, uint32_t b);

// d in ms, clamped to [0, 2^32 - 1].
uint32_t Ms(absl::Duration d);

std::vector<uint8_t> Encode(const Control& c);
absl::StatusOr<Control> Decode(const std::vector<uint8_t>& in);

// The leader's abort of a proposal whose reply it stopped waiting for
// (the batch's deadline passed, or the ring failed): a COMMIT with neither
// go nor retry and status OK, which the followers take as "the leader gave
// up" (FollowCommit). A follower still waiting for the commit is released
// at once; one that gave up too drops it (ReceiveProposal). Best effort:
// on a broken link there is no one to tell.
void AbandonProposal(WorkerRing& ch, uint32_t seq, const Control& propose);

// The leader's wait for the reply to its proposal `seq` (its PROPOSE come
// back around the ring). A receive that fails abandons the proposal
// (AbandonProposal) and returns that status; a message that is not the
// reply is DATA_LOSS (the caller drops the link). The reply to an earlier
// proposal of this worker that came after the leader had given it up is
// skipped: the link is ordered, so it comes before this proposal's reply,
// and it must not fail this batch.
absl::StatusOr<Control> AwaitReply(WorkerRing& ch, uint32_t seq,
                                   const Control& propose, absl::Time reply_by);

}  // namespace kmpc::service::scheduling

#endif  // KMPC_SERVICE_SCHEDULER_CONTROL_H_
