// The batcher's figures: the counters Batcher::stats() reports, and one
// batch's debug figures (BatcherOptions::debug), which only feed the log.
//
// Invariants: BatcherStats is a snapshot taken under the dispatcher's
// mutex; StepFigures is written by the transport callbacks of one batch
// (atomics, any thread) and read once, by whichever thread finishes the
// batch. Neither holds anything secret.
#ifndef KMPC_KDC_PLUGIN_BATCH_STATS_H_
#define KMPC_KDC_PLUGIN_BATCH_STATS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

struct BatcherStats {
  uint64_t batches = 0;
  uint64_t jobs = 0;
  uint64_t blocks = 0;           // AES blocks the servers reported (party 0)
  uint64_t failed_batches = 0;
  uint64_t deep_batches = 0;     // batches of one deep group (deep_rounds)
  uint64_t cts_shape_cuts = 0;   // batches ended early: the next job's
                                 // aes*-cts programs would pass the
                                 // servers' bound (contract::kCtsBatchBytes)
  uint64_t cts_unproven_refused = 0;  // exchanges over the compile budget
  uint64_t speculative_encrypts = 0;  // prepared ENCRYPT jobs sent
  uint64_t speculative_used = 0;      // ... whose keystream a later job used
  uint64_t finalize_only_rerun = 0;   // jobs whose FINALIZE-only step
                                      // failed, re-run as ordinary ENCRYPTs
  size_t keystreams_held = 0;         // prepared keystreams held now
  uint64_t speculative_wasted = 0;    // groups whose timestamp failed, and
                                      // keystreams that expired unused
  int inflight = 0;                   // batches running now
  size_t queued_jobs = 0;             // jobs waiting for a batch now
                                      // (Run queue and finalize_only queue)
  uint64_t failovers = 0;             // jobs submitted again to another
                                      // cluster (router.h)
  // Requests sent to the three servers (one per step, counted once for
  // the three parties): Run requests (a batch, or a re-run of a failed
  // FINALIZE-only or Sign step), Finalize requests (after a Run, or of
  // prepared keystreams), Sign requests (sign_batches); and the
  // checksums sent in Sign requests (sign_requests: one pad and one
  // signature each; a Sign request carries every one queued when the
  // submitter went idle).
  uint64_t run_requests = 0;
  uint64_t finalize_requests = 0;
  uint64_t sign_requests = 0;
  uint64_t sign_batches = 0;
  // Pads (planner.h): PAD jobs sent; pads a CHECKSUM used (Sign
  // requests' items); pads lost (their DECRYPT or PAD job failed) or that
  // expired unused.
  uint64_t pads_drawn = 0;
  uint64_t pads_used = 0;
  // TGT server signatures verified ring-free under a verification pad.
  uint64_t verify_pads_used = 0;
  // Chained signatures (planner.h): Sign items that chained a second
  // pad; CHECKSUMs (KDC signatures) completed from their answers, without
  // a request.
  uint64_t chains_sent = 0;
  uint64_t chained_used = 0;
  uint64_t pads_wasted = 0;
  size_t pads_held = 0;               // pads held now
  // Gated aes*-cts jobs of unproven shapes held back from their gate's Run
  // (planner.h, proven shapes); of them, sent after their gate verified.
  uint64_t cts_deferred = 0;
  uint64_t cts_deferred_sent = 0;
  uint64_t sign_rerun = 0;            // sign jobs re-run as CHECKSUM jobs
  // Sign items some server answered with a status other than JOB_OK.
  uint64_t sign_answers_failed = 0;
  // Security events: a ring-free verify item refused a signature that the
  // Run's VERIFY_CHECKSUM then accepted (sign_step.h, "Verify items").
  uint64_t verify_disagreed = 0;
  // Security events: Run requests a server refused with
  // BATCH_INTEGRITY_CHECK_FAILED (a server of the cluster deviated; not a
  // wrong password, which fails a job alone).
  uint64_t deviations = 0;
  // 1 while the cluster's last Run was refused with BATCH_BREAKER_OPEN (a
  // server's deviation breaker is open); summed over the clusters.
  uint64_t breakers_open = 0;
};

// Told of every batch as it ends (the module's Prometheus metrics,
// kdc_metrics.h). Called on whichever thread finishes the batch, without
// the dispatcher's locks held; must be thread-safe and cheap, and must not
// call back into the batcher. Nothing it is given is secret.
class BatchObserver {
 public:
  virtual ~BatchObserver() = default;
  // Run batches and FINALIZE-only batches (Sign steps are counted in
  // BatcherStats only).
  // finalize_only: a FINALIZE-only batch of prepared keystreams' jobs; jobs: the jobs
  // it carried; blocks: AES blocks the servers reported; latency: from its
  // start to its last answer (Run and, if any, Finalize round trips).
  virtual void BatchDone(bool finalize_only, size_t jobs, uint64_t blocks,
                         bool failed, absl::Duration latency) = 0;
};

// One batch's figures for the debug line.
struct StepFigures {
  std::atomic<uint64_t> blocks{0};  // AES blocks (party 0's BatchStats)
  std::atomic<int64_t> run_us{0}, finalize_us{0};
  // The slowest party's view: waiting for its scheduler, then the
  // handshake and the MPC rounds; ring messages of party 0.
  std::atomic<uint64_t> server_queue_us{0}, server_compute_us{0};
  std::atomic<uint64_t> ring_messages{0};

  // Adds a Run's figures from the three responses' BatchStats.
  void AddRun(const kmpc::v1::BatchStats& party0, uint64_t max_queue_us,
              uint64_t max_compute_us);
};

// "kdcmpc: batch #7: 12 jobs (0 failed), ..." (LOG_DEBUG).
std::string DebugLine(uint64_t seq, size_t jobs, size_t failed,
                      uint64_t requested_blocks, absl::Duration queued,
                      absl::Duration total, const StepFigures& f);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_BATCH_STATS_H_
