// The scheduler's queue (scheduler_queue.cc): a batch as it waits on this
// server (Scheduler::Work) from its client's Submit until a worker has run
// or failed it. A batch is in pending_ under its Key, once per (kind, id),
// while no worker holds it, and on party 0 also in queue_, oldest first,
// until a worker takes it; the client's thread waits on it under the
// scheduler's mutex, and only Complete marks it done.
#ifndef KMPC_SERVICE_SCHEDULER_QUEUE_H_
#define KMPC_SERVICE_SCHEDULER_QUEUE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/refresh.h"
#include "service/scheduler.h"

namespace kmpc::service {

struct Scheduler::Work {
  BatchKind kind;
  BatchId id;
  std::vector<engine::Job> jobs;
  std::vector<engine::RefreshItem> refresh;  // kRefresh
  engine::RefreshLookup refresh_lookup;
  int rebuild_party = engine::kNoRebuild;  // kRefresh
  absl::Time arrived;
  absl::Time deadline = absl::InfiniteFuture();  // the client's
  absl::Time claimed_at;
  bool claimed = false;
  // Party 0's retries (scheduler.h, COMMIT): proposals made so far, when
  // the last may be made (peer_batch_wait after the first, the deadline at
  // most), the next's earliest time and the backoff before it.
  int proposals = 0;
  absl::Time retry_until = absl::InfiniteFuture();
  absl::Time not_before = absl::InfinitePast();
  absl::Duration backoff = absl::ZeroDuration();
  int missing_party = 0;  // in the last proposal's reply
  bool done = false;
  BatchOutcome outcome;
};

namespace scheduling {

// pending_'s key of a batch: its kind, then its id.
std::string Key(BatchKind kind, const BatchId& id);
// A batch id in hex, for messages and logs.
std::string IdHex(const BatchId& id);

}  // namespace scheduling
}  // namespace kmpc::service

#endif  // KMPC_SERVICE_SCHEDULER_QUEUE_H_
