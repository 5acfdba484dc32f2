// The scheduler's queue (scheduler_queue.h): Submit's side, which admits
// a batch or refuses it at once (shutting down, breaker open, the same
// batch already waiting) and waits for its outcome; the workers' claims of
// waiting batches, their return for a retry (Unclaim), and their
// completion with the BatchErrorCode the client is told.
#include "service/scheduler_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "protocol/verify.h"

namespace kmpc::service {

namespace scheduling {

std::string Key(BatchKind kind, const BatchId& id) {
  std::string k(1, static_cast<char>(kind));
  k.append(reinterpret_cast<const char*>(id.data()), id.size());
  return k;
}

std::string IdHex(const BatchId& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}

}  // namespace scheduling

namespace {

using scheduling::IdHex;
using scheduling::Key;

// The BatchErrorCode of a batch that failed on the ring: the engine's
// whole-batch refusals (engine.h, RunBatch) and the ring's failures.
kmpc::v1::BatchErrorCode FailureCode(const absl::Status& st) {
  if (Breaker::IsRefusal(st)) return kmpc::v1::BATCH_BREAKER_OPEN;
  if (protocol::IsIntegrityFailure(st)) return kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED;
  switch (st.code()) {
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
      return kmpc::v1::BATCH_PEERS_DISAGREE;
    case absl::StatusCode::kInvalidArgument:
      return kmpc::v1::BATCH_TOO_LARGE;
    case absl::StatusCode::kInternal:
      return kmpc::v1::BATCH_INTERNAL;
    default:  // UNAVAILABLE, DATA_LOSS, DEADLINE_EXCEEDED: the ring
      return kmpc::v1::BATCH_RING_UNAVAILABLE;
  }
}

}  // namespace

BatchOutcome Scheduler::Submit(BatchKind kind, const BatchId& id,
                               std::vector<engine::Job> jobs,
                               absl::Time deadline) {
  auto work = std::make_shared<Work>();
  work->kind = kind;
  work->id = id;
  work->jobs = std::move(jobs);
  work->deadline = deadline;
  return Enqueue(std::move(work));
}

BatchOutcome Scheduler::SubmitRefresh(const BatchId& id,
                                      std::vector<engine::RefreshItem> items,
                                      engine::RefreshLookup lookup,
                                      int rebuild_party) {
  auto work = std::make_shared<Work>();
  work->kind = BatchKind::kRefresh;
  work->id = id;
  work->refresh = std::move(items);
  work->refresh_lookup = std::move(lookup);
  work->rebuild_party = rebuild_party;
  return Enqueue(std::move(work));
}

BatchOutcome Scheduler::Enqueue(std::shared_ptr<Work> work) {
  work->arrived = absl::Now();
  const BatchId& id = work->id;
  const std::string key = Key(work->kind, id);
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    work->outcome.status = absl::UnavailableError("server is shutting down");
    work->outcome.error = kmpc::v1::BATCH_SHUTTING_DOWN;
    return std::move(work->outcome);
  }
  if (BreakerOpen()) {
    work->outcome.status = options_.breaker->RefusalStatus();
    work->outcome.error = kmpc::v1::BATCH_BREAKER_OPEN;
    return std::move(work->outcome);
  }
  if (pending_.count(key) != 0) {
    work->outcome.status = absl::AlreadyExistsError(absl::StrCat(
        "batch ", IdHex(id), " is already waiting on this server"));
    work->outcome.error = kmpc::v1::BATCH_MALFORMED;
    return std::move(work->outcome);
  }
  pending_[key] = work;
  if (party() == 0) queue_.push_back(work);
  // In flight (Busy) from its admission to its outcome, on every path out.
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_relaxed); }
  } leave{in_flight_};
  const bool client_first =
      work->deadline < work->arrived + options_.schedule_timeout;
  const absl::Time deadline =
      std::min(work->arrived + options_.schedule_timeout, work->deadline);
  // A follower's copy may be claimed, then put back for a retry (Unclaim):
  // the deadline holds whenever it is not claimed.
  // The waits name their condition (absl::Mutex re-evaluates it when the
  // mutex is released), so this thread wakes only when its own batch moved,
  // not at every other batch's arrival, claim or completion.
  Work* const w = work.get();
  auto claimed_or_done = [this, w] { return w->done || w->claimed || stopping_; };
  auto unclaimed_or_done = [w] { return w->done || !w->claimed; };
  while (!work->done) {
    if (work->claimed) {
      mu_.Await(absl::Condition(&unclaimed_or_done));
      continue;
    }
    // Stop() ends this wait: no worker will claim the batch any more.
    const bool timed_out =
        !stopping_ &&
        !mu_.AwaitWithDeadline(absl::Condition(&claimed_or_done), deadline);
    if ((timed_out || stopping_) && !work->claimed && !work->done) {
      auto it = pending_.find(key);
      if (it != pending_.end() && it->second == work) pending_.erase(it);
      for (auto q = queue_.begin(); q != queue_.end(); ++q)
        if (*q == work) {
          queue_.erase(q);
          break;
        }
      work->outcome.status =
          stopping_ ? absl::UnavailableError("server is shutting down")
                    : absl::UnavailableError(absl::StrCat(
                          "batch was not scheduled on the ring within ",
                          absl::FormatDuration(deadline - work->arrived),
                          client_first ? " (the client's deadline)" : "",
                          " (a peer server is down, or did not receive the batch)"));
      work->outcome.error = stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN
                                      : kmpc::v1::BATCH_RING_UNAVAILABLE;
      return std::move(work->outcome);
    }
  }
  return std::move(work->outcome);
}

std::shared_ptr<Scheduler::Work> Scheduler::Claim(BatchKind kind,
                                                  const BatchId& id,
                                                  absl::Time deadline) {
  const std::string key = Key(kind, id);
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      std::shared_ptr<Work> w = it->second;
      pending_.erase(it);
      w->claimed = true;
      w->claimed_at = absl::Now();
      return w;
    }
    auto arrived = [this, &key] {
      mu_.AssertReaderHeld();
      return stopping_ || pending_.count(key) != 0;
    };
    if (stopping_ ||
        !mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) {
      if (absl::Now() >= deadline || stopping_) return nullptr;
    }
  }
}

void Scheduler::Complete(const std::shared_ptr<Work>& work, absl::Status status) {
  // Counted once per failed batch, on each server that detected it (the
  // deviating server reports nothing); outside mu_ (the breaker may write
  // its state file).
  if (options_.breaker != nullptr && protocol::IsIntegrityFailure(status))
    options_.breaker->RecordDeviation();
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    work->outcome.status = status;
    work->outcome.error =
        stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN : FailureCode(status);
  }
  work->outcome.queue_time = work->claimed_at - work->arrived;
  work->outcome.run_time = absl::Now() - work->claimed_at;
  work->done = true;
}

bool Scheduler::BreakerOpen() const {
  return options_.breaker != nullptr && options_.breaker->open();
}

bool Scheduler::RefuseIfBreakerOpen(const std::shared_ptr<Work>& work) {
  if (!BreakerOpen()) return false;
  Complete(work, options_.breaker->RefusalStatus());
  return true;
}

void Scheduler::Unclaim(const std::shared_ptr<Work>& work) {
  absl::MutexLock lock(&mu_);
  const std::string key = Key(work->kind, work->id);
  if (party() == 0) {
    // Stays claimed for Enqueue (queue_time counts to its first proposal);
    // a leader loop that stops fails whatever is in queue_.
    if (pending_.count(key) == 0) pending_[key] = work;
    queue_.push_front(work);  // the oldest: its place in the queue
  } else if (stopping_ || pending_.count(key) != 0) {
    // Shutting down, or the client sent the batch again meanwhile (that
    // copy is the one proposed next).
    work->done = true;
    work->outcome.status =
        stopping_ ? absl::UnavailableError("server is shutting down")
                  : absl::AlreadyExistsError(absl::StrCat(
                        "batch ", IdHex(work->id), " was sent to this server again"));
    work->outcome.error =
        stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN : kmpc::v1::BATCH_MALFORMED;
  } else {
    work->claimed = false;
    pending_[key] = work;
  }
}

std::shared_ptr<Scheduler::Work> Scheduler::NextBatch(WorkerRing& ch) {
  std::shared_ptr<Work> work;
  absl::MutexLock lock(&mu_);
  // The oldest batch not waiting for a retry's backoff.
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time wake = now + absl::Milliseconds(200);
    auto ready = queue_.end();
    for (auto q = queue_.begin(); q != queue_.end(); ++q) {
      if ((*q)->not_before <= now) {
        ready = q;
        break;
      }
      wake = std::min(wake, (*q)->not_before);
    }
    if (ready != queue_.end()) {
      work = *ready;
      queue_.erase(ready);
      break;
    }
    const bool idle = queue_.empty();
    // Woken only when a batch is ready for it (one worker per batch:
    // absl::Mutex hands the lock to one waiter whose condition holds,
    // and once that one took the batch the others' is false again).
    auto ready_batch = [this] {
      mu_.AssertReaderHeld();
      if (stopping_) return true;
      const absl::Time t = absl::Now();
      for (const auto& q : queue_)
        if (q->not_before <= t) return true;
      return false;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready_batch), wake) &&
        idle && queue_.empty()) {
      mu_.Unlock();
      IdleConnect(ch);
      mu_.Lock();
    }
  }
  if (work == nullptr) return nullptr;  // stopping
  auto it = pending_.find(Key(work->kind, work->id));
  if (it != pending_.end() && it->second == work) pending_.erase(it);
  if (!work->claimed) {
    work->claimed = true;
    work->claimed_at = absl::Now();
  }
  return work;
}

void Scheduler::FailQueued() {
  absl::MutexLock lock(&mu_);
  for (auto& w : queue_) {
    w->claimed = w->done = true;
    w->outcome.status = absl::UnavailableError("server is shutting down");
    w->outcome.error = kmpc::v1::BATCH_SHUTTING_DOWN;
  }
  queue_.clear();
}

}  // namespace kmpc::service
