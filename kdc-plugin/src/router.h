// Several MPC clusters behind one module: "simply using two clusters"
// (Araki et al., CCS 2016, section 5.3) for availability. Every cluster
// holds every key under the same key id (kmpc-admin deals to all of them,
// all or nothing), so any job can run on any cluster. Each cluster has a
// Batcher of its own (queue, batches in flight, the planner's prepared work).
//
// Policy: primary first, no spreading. A job goes to the first cluster, in
// configuration order, that is healthy: none of its three parties is
// known unreachable (Transport::Reachable) and it has not failed a job for
// a cluster reason since its last good answer. The others are hot
// standbys. A cluster that failed is left alone for kDownFor, doubled for
// each failure in a row up to kMaxDownFor; then one job at a time probes
// it (a hung server, whose connection stays up, costs only that job a
// deadline), and its first good answer makes it healthy again. One
// cluster taking the whole load keeps batches large (the batcher's
// grow-with-load property) and a login's timestamp DECRYPT and its
// prepared ticket and reply keystreams in one dispatcher; spreading
// would halve both on two clusters that share the machine's cores.
//
// Failover: a job that fails on its cluster with a cluster status
// (kUnavailable, kDeadlineExceeded, kAborted: a party down, the batch
// deadline, a refused or inconsistent batch) or kNotFound (that cluster
// lacks the key id) is submitted again, with its original input, to the
// next cluster not yet tried, if it was submitted less than
// kRetryWithin batcher `deadline`s ago: a killed server fails its batch at
// once, so the retry costs one more batch; a hung one fails it at its
// deadline, and the job still gets its second try (with two clusters an
// answer comes within about two deadlines of the submission). Other
// statuses (an integrity
// failure, a malformed job) are final: a bad timestamp gets no second
// chance on another cluster.
//
// Deviations: a batch a server refused with BATCH_INTEGRITY_CHECK_FAILED
// (its malicious check found that a server of that cluster deviated; the
// jobs' status is kUnavailable marked IsDeviation, transport.h) fails
// over like any cluster failure, to another cluster (other servers, other
// shares), but never again to the cluster that detected it: every job is
// sent to each cluster at most once (Pending::tried). With one cluster
// nothing is resent at all. A client's own retry is a new job, which the
// servers' deviation breaker bounds (mpc-server/src/service/breaker.h).
//
// Why a retry never releases a secret twice (enctype.md, "Security
// invariants"): every ENCRYPT and CHECKSUM counter is drawn by the cluster
// that computes it, from its own PRSS keys; the clusters' draws are
// independent 128-bit values, so a retried ENCRYPT gets a fresh counter on
// the other cluster and each cluster still computes at most one tag per
// counter. A failed step completes no job, so a caller gets one answer per
// job. A DECRYPT or VERIFY run again reveals at most what the first run
// would have (the same plaintext, after the same tag check in the MPC).
//
// When a cluster fails and another is healthy, the jobs still queued in
// the failed cluster's batcher (behind the batch that failed) are taken
// back at once and go to the other cluster too, instead of into the failed
// one's next batch (which a hung server would hold until its deadline).
//
// Threading: batchers deliver on their own threads; retries are submitted
// from the router's own thread, never from inside a batcher's delivery.
// The one call into a batcher from inside its delivery is TakeQueued
// (dispatcher.h), made while the failed step still has jobs to complete, so
// before its dispatcher can start another batch; it takes only the
// dispatcher's queue lock, which is never held while delivering.
#ifndef KMPC_KDC_PLUGIN_ROUTER_H_
#define KMPC_KDC_PLUGIN_ROUTER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "batch_stats.h"
#include "batcher.h"
#include "batcher_thread.h"
#include "job.h"
#include "plan.h"
#include "transport.h"

namespace kmpc::kdc {

class GateBook;

class Router {
 public:
  // After a cluster failure, new jobs avoid that cluster this long (then
  // it is tried again with live traffic: a failure there costs a retry).
  static constexpr absl::Duration kDownFor = absl::Seconds(1);
  static constexpr absl::Duration kMaxDownFor = absl::Seconds(16);
  // A failed job goes to another cluster only if it is younger than this
  // many batch deadlines (see above).
  static constexpr int kRetryWithin = 2;

  // transports: one per cluster, in order (the first is the primary); each
  // must outlive Stop(). observer (may be null) sees every cluster's
  // batches. gates: the module's gate book, cluster c of it the batcher of
  // transports[c]'s (gate_book.h; null: one of the router's own).
  Router(BatcherOptions options, std::vector<Transport*> transports,
         Sink* sink, BatchObserver* observer = nullptr,
         std::shared_ptr<GateBook> gates = nullptr);
  ~Router();  // Stop()

  // As Dispatcher::Submit; the job goes to a healthy cluster.
  absl::Status Submit(uint64_t token, Job job);
  // Planned exchanges (Dispatcher::Begin, SubmitItem, End), pinned to one
  // cluster: Begin picks it as Submit would, because the exchange's
  // prepared keystreams and pads live on its servers, and every later
  // item goes there. An item whose pinned cluster failed since goes where
  // a new job would, as an ordinary job (a miss: failover). Given items
  // fail over as Submit's jobs do.
  absl::Status Begin(uint64_t id, Plan plan, std::vector<ItemJob> given);
  absl::Status SubmitItem(uint64_t id, int item, uint64_t token, Job job);
  std::optional<ExchangeRecord> End(uint64_t id);
  void SubmitterIdle();
  // Stops every batcher and the retry thread; nothing reaches the sink
  // once it returned.
  void Stop();
  // The sum over the clusters, plus failovers_ (jobs submitted again).
  BatcherStats stats() const;
  size_t clusters() const { return transports_.size(); }

 private:
  class ClusterSink;
  struct Pending {
    Job job;  // a copy, for a retry elsewhere; wiped when it goes
    absl::Time submitted;
    uint32_t tried = 0;  // bit c: cluster c had it
    // The DECRYPT it is released on, whose copy goes with it elsewhere
    // (planner.h GatedOnItsTimestamp); none when null.
    std::shared_ptr<const Job> gate;
  };
  struct Retry {
    uint64_t token;
    absl::Status first;  // the failure that made it go elsewhere
  };

  void OnResult(size_t cluster, Result r);
  void Register(uint64_t token, const Job& job, absl::Time now, int c,
                std::shared_ptr<const Job> gate = nullptr);
  // Of a planned exchange, with 2+ clusters: its gate's job when items go
  // gated on a copy of it elsewhere (planner.h GatedOnItsTimestamp), and
  // which items. Under mu_.
  struct Gate {
    std::shared_ptr<const Job> job;
    std::vector<bool> items;
  };
  static Gate GateOf(const Plan& plan, const std::vector<ItemJob>& given);
  void Unregister(const std::vector<uint64_t>& tokens, int c);
  // The cluster for job `token`, not tried on the clusters in `tried`:
  // the first healthy one (or a cluster that failed before and whose
  // down time is over, with no probe in flight: this job becomes its
  // probe), else the one whose down time ends first; -1 if all tried.
  // Under mu_.
  int Pick(uint32_t tried, absl::Time now, uint64_t token);
  // Cluster c answered job `token`: with a cluster failure (down for a
  // while, longer each time in a row), or otherwise (its probe came back:
  // healthy again). True when the jobs queued on c should move (a new
  // failure, another cluster healthy). Under mu_.
  bool ClusterAnswered(size_t c, uint64_t token, bool failed, absl::Time now);
  // Transport::Reachable of all three parties, asked at most every
  // kReachableEvery per cluster (a channel-state lookup per party; the
  // batcher asks again before each batch anyway). Under mu_.
  bool Reachable(size_t cluster, absl::Time now);
  static constexpr absl::Duration kReachableEvery = absl::Milliseconds(5);
  void RetryLoop();
  void Deliver(Result r);
  void LogDeviation(size_t cluster, const absl::Status& st);

  const BatcherOptions options_;
  const std::vector<Transport*> transports_;
  Sink* const sink_;
  std::vector<std::unique_ptr<ClusterSink>> sinks_;
  std::vector<std::unique_ptr<Batcher>> batchers_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<uint64_t, Pending> pending_;  // only with 2+ clusters
  std::unordered_map<uint64_t, int> pinned_;       // exchange -> cluster
  std::unordered_map<uint64_t, Gate> gates_;       // exchange -> its gate (GateOf)
  std::deque<Retry> retries_;
  std::vector<absl::Time> down_until_;
  std::vector<int> failures_;      // cluster failures in a row
  std::vector<uint64_t> probe_;    // the job probing a failed cluster, or 0
  std::vector<absl::Time> reach_checked_;
  std::vector<bool> reach_ok_;
  uint64_t failovers_ = 0;
  absl::Time last_log_ = absl::InfinitePast();
  absl::Time last_deviation_log_ = absl::InfinitePast();
  std::thread retry_thread_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_ROUTER_H_
