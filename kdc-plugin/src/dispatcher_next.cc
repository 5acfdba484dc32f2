// The dispatcher's choice of what goes next (dispatcher.h's invariants):
// finalize_only and sign batches once the submitter is idle or their wait
// is up, deep groups in a Run of their own, then the Run queue by its
// flush rules (batcher.h), whole units at a time within the batch's
// bounds. Called under mu_ by the Start* steps (dispatcher.cc).
#include <algorithm>
#include <utility>

#include "dispatcher.h"

namespace kmpc::kdc {

std::shared_ptr<BatchStep> Dispatcher::NextFinalizeOnly(absl::Time now,
                                                        absl::Time* wake) {
  if (finalize_only_queue_.empty() ||
      finalize_only_inflight_ >= kMaxFinalizeOnlyInflight)
    return nullptr;
  const absl::Time at =
      finalize_only_now_ ? now
                         : finalize_only_queue_.front().enqueued +
                               kFinalizeOnlyMaxWait;
  if (at > now) {
    *wake = std::min(*wake, at);
    return nullptr;
  }
  std::vector<PendingJob> batch;
  const size_t take = std::max(options_.max_jobs, options_.backlog_jobs);
  batch.reserve(std::min(take, finalize_only_queue_.size()));
  while (!finalize_only_queue_.empty() && batch.size() < take) {
    batch.push_back(std::move(finalize_only_queue_.front()));
    finalize_only_queue_.pop_front();
  }
  if (finalize_only_queue_.empty()) finalize_only_now_ = false;
  ++finalize_only_inflight_;
  return MakeStep(std::move(batch), StepKind::kFinalizeOnly, now);
}

std::shared_ptr<BatchStep> Dispatcher::NextSign(absl::Time now,
                                                absl::Time* wake,
                                                bool force) {
  if (sign_queue_.empty()) return nullptr;
  const absl::Time at = sign_queue_.front().enqueued + kSignMaxWait;
  if (!force && at > now) {
    *wake = std::min(*wake, at);
    return nullptr;
  }
  std::vector<PendingJob> jobs(std::make_move_iterator(sign_queue_.begin()),
                               std::make_move_iterator(sign_queue_.end()));
  sign_queue_.clear();
  ++sign_inflight_;
  return MakeStep(std::move(jobs), StepKind::kSign, now);
}

bool Dispatcher::Deep(const PendingJob& q) const {
  return options_.deep_rounds > 0 && q.figures.depth > options_.deep_rounds;
}

std::shared_ptr<BatchStep> Dispatcher::NextDeep(absl::Time now) {
  if (deep_queue_.empty() || deep_inflight_ > 0 || inflight_ >= options_.max_inflight)
    return nullptr;
  // Every deep group queued, up to max_jobs (whole groups): deep work
  // shares a batch only with deep work.
  std::vector<PendingJob> batch;
  TakeUnits(&deep_queue_, options_.max_jobs, UINT64_MAX, &batch);
  // Counts rise only once what StepFinished lowers them for exists: a
  // throw (memory) must not leave deep_inflight_ at 1 for good, stalling
  // every later deep group.
  std::shared_ptr<BatchStep> step = MakeStep(std::move(batch), StepKind::kRun, now);
  ++inflight_;
  deep_steps_.insert(step.get());
  ++deep_inflight_;
  ++stats_.deep_batches;
  return step;
}

// A planned exchange's first-Run group (its given jobs and the prepared
// ones, queued together: Enqueue) is never cut: BatchStep gates the
// prepared jobs on the gate DECRYPT (release_if_ok) and links pads to the
// ticket ENCRYPT (pad_after) only within one request, so the part past a
// cut would go out ungated (BatchStep refuses to send it: fail closed).
// So units (a job, or a whole group) go while the batch holds fewer than
// max_jobs and, past the first, the unit's first job fits in max_blocks
// and its new aes*-cts programs fit beside the batch's (CtsBatchShapes:
// a server would fail the jobs past that bound, JOB_MALFORMED).
uint64_t Dispatcher::TakeUnits(JobFifo* q, size_t max_jobs, uint64_t max_blocks,
                               std::vector<PendingJob>* batch) {
  CtsBatchShapes shapes;
  uint64_t blocks = 0;
  while (!q->empty() && batch->size() < max_jobs) {
    const JobFifo::iterator first = q->begin();
    JobFifo::iterator last = first + 1;
    while (first->group != 0 && last != q->end() && last->group == first->group) ++last;
    if (!batch->empty() && blocks + first->blocks > max_blocks) break;
    if (!shapes.TakeIfFits(first, last, /*always=*/batch->empty())) {
      ++stats_.cts_shape_cuts;
      break;
    }
    for (auto n = last - first; n > 0; --n) {
      blocks += q->front().blocks;
      batch->push_back(std::move(q->front()));
      q->pop_front();
    }
  }
  return blocks;
}

absl::Time Dispatcher::RunFlushAt(absl::Time now) const {
  const BatcherOptions& o = options_;
  if (queue_.size() >= o.max_jobs || queued_blocks_ >= o.max_blocks) return now;
  if (o.early_flush && inflight_ == 0 && now < hold_until_ && queue_.size() < hold_jobs_)
    return hold_until_;
  if (o.early_flush && inflight_ == 0)
    return flush_now_ ? now : queue_.front().enqueued + o.coalesce;
  if (CtsHold() && inflight_ > deep_inflight_ && queue_.front().cts_unit) {
    // Behind a Run in flight (not deep work's: behind that one the queue
    // keeps `window`, deep_rounds): held aes*-cts units wait until none is
    // in flight (early flush then takes them), the queue fills (above) or
    // cts_window passes; another unit queued keeps its own window.
    absl::Time at = queue_.front().enqueued + o.cts_window;
    if (!other_enqueued_.empty()) at = std::min(at, other_enqueued_.front() + o.window);
    return at;
  }
  return queue_.front().enqueued + o.window;
}

std::shared_ptr<BatchStep> Dispatcher::NextRun(absl::Time now,
                                               absl::Time* wake) {
  const BatcherOptions& o = options_;
  if (auto deep = NextDeep(now)) return deep;
  if (queue_.empty() || inflight_ >= o.max_inflight) return nullptr;
  const absl::Time flush_at = RunFlushAt(now);
  if (flush_at > now) {
    *wake = std::min(*wake, flush_at);
    return nullptr;
  }
  // A hold is for the one batch after the end that set it: once that batch
  // goes, a later end with nothing waiting leaves no hold behind.
  hold_until_ = absl::InfinitePast();
  std::vector<PendingJob> batch;
  const size_t take_jobs = std::max(o.max_jobs, o.backlog_jobs);
  batch.reserve(std::min(take_jobs, queue_.size()));
  queued_blocks_ -= TakeUnits(&queue_, take_jobs,
                              std::max(o.max_blocks, o.backlog_blocks), &batch);
  for (const PendingJob& x : batch)
    if (!x.cts_unit && !other_enqueued_.empty()) other_enqueued_.pop_front();
  if (queue_.empty()) {
    flush_now_ = false;
    other_enqueued_.clear();
  }
  std::shared_ptr<BatchStep> step = MakeStep(std::move(batch), StepKind::kRun, now);
  ++inflight_;  // after MakeStep, which may throw (as NextDeep)
  return step;
}

}  // namespace kmpc::kdc
