// The batcher: KDC jobs are queued and sent to the MPC cluster in batches,
// one call per server per batch (docs/design/architecture.md, "In the
// module").
//
// Batches clock themselves by default (early_flush): a queue is flushed
// after only `coalesce` (or at SubmitterIdle(), when the KDC's event loop
// is done with the callback that submitted the jobs) when no batch is in
// flight, so a lone request never waits for a fixed window; under load
// a batch in flight makes the queue wait, so the next batch grows with
// what arrived meanwhile: it goes when a batch ends, or (with fewer than
// max_inflight in flight) when it reaches max_jobs / max_blocks or its
// oldest job has waited `window` (the bound under load; the opt-in
// `cts_window` when every queued exchange has an aes*-cts job). `window` is the
// whole policy with early_flush = false: the queue is flushed when its
// oldest job has waited `window`. In both modes a queue reaching
// max_jobs / max_blocks goes at once. At most max_inflight Run batches
// run at once; FINALIZE-only batches of prepared keystreams' jobs (at most
// four) and Sign requests (pads, planner.h) never wait for them.
//
// One batch: Run on the three servers in parallel; every revealed value
// arrives as two copies of each of its three XOR shares (server i sends
// s_i, s_{i+1}), the copies must agree and the public values (ctr0,
// verdicts, per-job errors) must be identical, otherwise the whole batch is
// rejected. Non-ENCRYPT jobs complete right there; ENCRYPT jobs XOR the
// keystream into the plaintext and go through one batched Finalize call per
// server for their tags, then complete as ctr0 || C || T. ENCRYPT jobs
// with a prepared keystream (below) skip the Run: they wait in a queue
// of their own and go in FINALIZE-only batches at the next Kick() (or 5 ms
// after the first of them), whatever Run batch is in flight.
//
// Every accepted job completes exactly once through the sink, unless Stop()
// abandons it first. A batch not answered by its deadline fails every job
// still open with kUnavailable.
//
// This header is the batcher's interface, which the gate book, the steps,
// the planner and the module share: its options (the policy above), a
// job's completion (Result) and where it goes (Sink). It includes nothing
// above job.h (kdc-plugin/README.md, "Layers"); the batcher itself, a
// cluster's dispatcher (dispatcher.h) on a thread of its own, is
// batcher_thread.h.
#ifndef KMPC_KDC_PLUGIN_BATCHER_H_
#define KMPC_KDC_PLUGIN_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "job.h"

namespace kmpc::kdc {

struct BatcherOptions {
  absl::Duration window = absl::Milliseconds(100);
  // With early_flush, behind a Run in flight: how long a queue whose every
  // unit (a planned exchange's group, or a lone job) holds an aes*-cts job
  // may wait for that Run to end, instead of `window`. Such a Run takes
  // ~4,300 AND rounds, and each costs every server the same CPU for one
  // login or hundreds, so starting a second one for what arrived in the
  // last 100 ms keeps the servers busy at any load; held, those logins
  // join the next Run when the one in flight ends (docs/bench-log.md,
  // 2026-11-27). Any other unit queued keeps `window` from its own
  // arrival, and a deep Run in flight (deep_rounds) holds nothing back.
  // Values below `window` act as `window`. Off by default: with one
  // aes*-cts Run in flight at a time a closed loop of clients (each waits
  // for its login before the next) completes 11-30% fewer logins, so the
  // CPU it saves at moderate open-loop load costs a realm's throughput
  // (docs/bench-log.md, 2026-11-27 20:12).
  absl::Duration cts_window = absl::ZeroDuration();
  size_t max_jobs = 256;
  uint64_t max_blocks = 16384;
  // A batch takes every queued job up to these caps (raised to max_jobs /
  // max_blocks when set lower): more than max_jobs jobs wait only while
  // max_inflight batches run (the cluster is the bottleneck) or after a
  // burst, and then one bigger batch costs the servers and the KDC less per job than
  // several of max_jobs (fewer ring messages, gRPC calls and wake-ups per
  // login) without adding latency, since those jobs were waiting anyway.
  size_t backlog_jobs = 2048;
  uint64_t backlog_blocks = 65536;
  absl::Duration deadline = absl::Milliseconds(3000);
  // Self-clocked batches (class comment): a batch goes as soon as one may
  // be in flight, after `coalesce` at most.
  bool early_flush = true;
  // Early flush waits this long for jobs submitted back to back (the KDC
  // submits the ticket and the reply of one AS-REQ in one go), unless
  // SubmitterIdle() says earlier that the submitter is done.
  absl::Duration coalesce = absl::Microseconds(500);
  // Under load (early flush, jobs already waiting when a Run batch ends),
  // the next batch waits after that end until it holds as many jobs as the
  // batch that ended, or for hold_pct percent of that batch's latency at
  // most, and never longer than `window`; a batch with a failed job sets
  // no hold (it may have run to its deadline). Closed-loop clients
  // otherwise split into groups that take turns (a batch holds the jobs
  // that arrived during the last one, while most exchanges are in their
  // ring-free steps), and every group costs a
  // whole Run: the ring rounds of AES do not grow with the batch. 0: off;
  // a lone exchange (nothing waiting at a batch's end) never waits.
  int hold_pct = 0;
  // The submitter calls SubmitterIdle() after every burst of Submit()s
  // (the KDC module: on its event loop's next turn). Submit() then never
  // wakes the dispatcher thread for what SubmitterIdle() takes (Sign and
  // FINALIZE-only jobs, an idle cluster's Run batch under early_flush);
  // without it, SubmitterIdle() is only a hint and the dispatcher's timers
  // (coalesce, kSignMaxWait) send what it did not.
  bool submitter_kicks = false;
  // Two batches at a time by default, one per worker of a default server
  // (--workers 2): while one batch is in rounds that wait on the ring (the
  // malicious check's small messages, the agreement), the other computes.
  // Behind one batch in flight the next goes when it is full (max_jobs /
  // max_blocks) or its window has passed; behind two it collects everything
  // that arrives (up to backlog_jobs / backlog_blocks), so under load
  // batches still grow with the load. With one, a server's second worker
  // idles while the one batch waits on the ring (docs/bench-log.md,
  // 2026-11-25, has the A/B). A cluster far away (RTT of milliseconds) may
  // want more, with as many server workers.
  // A failed or hung batch takes its logins with it (all of them until
  // `deadline`).
  int max_inflight = 2;
  // A batch waits for its deepest program, and an aes*-cts program's AND
  // rounds grow with its lengths (contract::CtsDepthBound: a login's
  // reply with its spliced request ~6,300, ~7,300 with a few client
  // addresses, the length caps' longest ~25,000). A job above deep_rounds
  // goes, with its exchange's group, in a Run batch of deep work only (at
  // most one in flight, never past max_inflight), so one client's long
  // request (many addresses, large padata) never delays others' logins;
  // it waits only for other deep work. 0: off (every job shares batches).
  uint64_t deep_rounds = 12000;
  // The compile budget (gate_book.h GateBook::Admit): exchanges per minute
  // (and at most this many at once) whose aes*-cts gate (a timestamp's or
  // FAST challenge's DECRYPT) has a shape no verified login proved, so
  // that unauthenticated requests of varied lengths cannot make the
  // servers compile programs at will; beyond it such an exchange is
  // refused (kResourceExhausted: SVC_UNAVAILABLE, the client retries).
  // The usual timestamps' shapes are proven from the start. 0: no limit.
  uint64_t cts_unproven_per_minute = 30;
  // The module's failure bound (gate_failures.h, in its gate book): gate
  // DECRYPTs under one key id that may fail within gate_failure_window
  // before the next is refused; keep it x workers x KDCs below the
  // servers' --gate_failures_per_window. 0: no bound.
  uint64_t gate_failures = 10;
  absl::Duration gate_failure_window = absl::Hours(1);
  // Jobs waiting beyond this are refused at submit (kUnavailable): an
  // overloaded or slow cluster must not grow the KDC without bound.
  size_t max_queue = 65536;
  // Per-batch figures (jobs, blocks, latency) in the log (at LOG_DEBUG:
  // the KDC needs [logging] debug = true to write them to a file).
  bool debug = false;
  // Prepared work of planned exchanges (planner.h): an exchange's first
  // Run takes along what the later items of its plan need, keystreams for
  // its ENCRYPT items (the ticket, the AS reply) and pads for its
  // CHECKSUM and VERIFY items (PAC and CAMMAC signatures). When the KDC
  // then encrypts the ticket or the reply, the held keystream is used and
  // only FINALIZE runs, in a batch of its own that goes at the next
  // SubmitterIdle() without waiting for the Run batches in flight; a
  // signature under a held pad is one ring-free Sign request. So an
  // exchange is one MPC Run, idle or under load. Prepared work not used
  // within speculate_ttl (counted from its Run's answer) is dropped and
  // wiped, by the dispatcher even while idle; one whose gate failed is dropped at
  // once, and such waste draws on a budget (planner.h) so that bad
  // timestamps or forged tickets cannot make the cluster do this work at
  // will. speculate_ttl must stay well below the servers' ENCRYPT-state
  // TTL (mpc-server --encrypt_state_ttl_ms, default 10000). A keystream
  // the servers no longer hold costs only time: its jobs' FINALIZE is a
  // request of its own, and when it fails they are re-run as ordinary
  // ENCRYPT jobs. At most speculate_max keystreams and pads held or on
  // their way. (The names are older than the plan: they once named the
  // module's guesses.) Off: nothing is prepared, every later job of a
  // plan is a Run of its own.
  bool speculate = true;
  // With speculate: a PAC server signature under a held pad takes the pad
  // of its plan's KDC signature under the same key along, and the servers
  // sign the signature itself under it in the same Sign item (planner.h,
  // enctype.md "Chained signatures"): the KDC signature over it then needs
  // no request.
  bool chain_signatures = true;
  absl::Duration speculate_ttl = absl::Seconds(4);
  // Prepared keystreams and pads held or on their way, at most.
  size_t speculate_max = 8192;
};

struct Result {
  uint64_t token = 0;
  absl::Status status;
  SecureBytes output;
};

// Where results and log lines go. Implementations must be thread-safe and
// must not call back into the batcher.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void Deliver(Result result) = 0;
  // level: syslog priority (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG).
  virtual void Log(int level, std::string line) = 0;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_BATCHER_H_
