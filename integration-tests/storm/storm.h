// kmpc-storm: shared state of one storm (configuration, schedule, users,
// per-worker figures).  See main.cc for the command line and the report.
#ifndef KMPC_STORM_STORM_H_
#define KMPC_STORM_STORM_H_

#include <krb5/krb5.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "histogram.h"

namespace kmpc::storm {

uint64_t NowNs();  // CLOCK_MONOTONIC
void SleepUntil(uint64_t t);  // on the same clock

enum class Engine { kAsync, kSync };

// What one operation of a --mix does after its AS exchange (RFC 4120
// 3.3.1 KDC options): nothing; a TGS-REQ for --tgs; a TGS-REQ with RENEW
// for the (renewable) TGT itself; a TGS-REQ with FORWARDED for the
// (forwardable) TGT's server, krbtgt/REALM.
enum class Op { kLogin, kTgs, kRenew, kForward };
constexpr int kNumOps = 4;
const char* OpName(Op op);

struct Config {
  std::string keytab;
  std::string principal_fmt;  // e.g. "user%d@KMPC.TEST"; empty: keytab's
  int users = 0;
  int first_user = 0;
  std::string tgs_service;  // empty: AS exchange only
  // --mix: operation k is mix[k % size]; empty: login (+ --tgs) only.
  std::vector<Op> mix;
  Engine engine = Engine::kAsync;
  bool tcp = false;
  int concurrency = 0;  // closed loop when > 0
  double rate = 0;      // open loop (logins/s) when > 0
  double duration = 0;  // measured seconds (after warmup)
  uint64_t count = 0;   // or: measured logins
  double warmup = 0;
  double ramp = 0;  // closed loop: first logins spread over this many seconds
  double time_limit = 300;  // hard stop, whatever else is asked
  int threads = 1;
  int max_inflight = 1024;  // open loop: in-flight logins, all workers
  // Open loop, async: a worker wakes at most this late after a login was
  // due and starts every login due by then (0: at each due time). Fewer
  // wake-ups of the generator, which shares the machine with what it
  // measures; the latency is still counted from each login's due time.
  uint64_t tick_us = 0;
  double timeout = 10;      // per login, as kinit's whole KDC exchange
  std::string kdc;          // host:port; default: the realm's first kdc
  uint64_t max_errors = 0;
  std::string csv, json, hist_csv;
  std::string events;  // one CSV line per finished login (--events)
  std::vector<int> watch_pids;
  int progress = -1;  // -1: if stderr is a terminal
  bool quiet = false;
};

// One second of the run (by completion time), for the CSV.
struct Second {
  uint64_t started = 0, ok = 0, errors = 0;
  std::unique_ptr<CoarseHistogram> hist;  // OK logins' latencies
};

// One finished login, for --events (CLOCK_MONOTONIC ns).
struct Event {
  uint64_t due_ns, done_ns;
  krb5_error_code code;
};

// Figures one worker thread owns; the main thread reads the atomics and the
// histograms (relaxed) for the progress line, everything else after join.
struct WorkerStats {
  Histogram hist;      // measured, successful logins
  Histogram hist_all;  // all successful logins (progress line)
  std::atomic<uint64_t> ok_all{0}, err_all{0}, started_all{0};
  std::atomic<int> inflight{0};
  uint64_t ok = 0, errors = 0;  // measured window
  uint64_t started = 0;         // measured logins started
  uint64_t dropped = 0;         // open loop: scheduled, never started
  uint64_t retransmits = 0, tcp_fallbacks = 0, requests = 0;
  // Async engine: replies that named another client (or were of the other
  // exchange), dropped: late replies to a port the kernel recycled.
  uint64_t stray_replies = 0;
  uint64_t first_done_ns = 0;   // completion of the first measured login
  uint64_t last_done_ns = 0;    // completion of the last measured login
  // --mix, measured window: successful and failed operations of each kind.
  uint64_t op_ok[kNumOps] = {}, op_errors[kNumOps] = {};
  // --mix, measured window, successful operations: the latency (us) of one
  // exchange alone. step_hist[kLogin] holds every operation's AS exchange;
  // step_hist[kTgs], [kRenew], [kForward] the TGS-REQ that follows it.
  Histogram step_hist[kNumOps];
  std::map<int32_t, uint64_t> err_by_code;  // every phase
  std::map<int32_t, std::string> err_text;  // first message per code
  std::vector<Second> seconds;
  std::vector<Event> events;  // only with --events
};

// The schedule shared by the workers.
class Run {
 public:
  Run(const Config& cfg, std::vector<std::string> principals,
      std::vector<std::string> keytab_names);

  const Config& cfg() const { return cfg_; }
  uint64_t t0() const { return t0_; }
  uint64_t warmup_end() const { return warmup_end_; }
  uint64_t issue_end() const { return issue_end_; }
  uint64_t hard_end() const { return hard_end_; }
  bool open_loop() const { return cfg_.rate > 0; }
  const std::vector<std::string>& principals() const { return principals_; }
  const std::vector<std::string>& keytab_names() const { return ktnames_; }

  void Start(uint64_t t0);
  // May a login scheduled (open loop) or started (closed loop) at
  // `sched` still start now?  Sets *measured.  False: this worker is done.
  bool MayStart(uint64_t sched, uint64_t now, bool* measured);
  // Open loop: the time login number k (0, 1, ...) is due.
  uint64_t Due(uint64_t k) const {
    return t0_ + static_cast<uint64_t>(static_cast<double>(k) * 1e9 / cfg_.rate);
  }
  void Stop() { stop_.store(true); }
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }

  // Latency in us from `sched` to now; record the outcome.
  void Done(WorkerStats* ws, krb5_context ctx, uint64_t sched, bool measured,
            krb5_error_code code, uint64_t now);
  // The operation number k does (--mix), counted in ws when measured.
  Op OpFor(uint64_t k) const {
    if (cfg_.mix.empty()) return cfg_.tgs_service.empty() ? Op::kLogin : Op::kTgs;
    return cfg_.mix[k % cfg_.mix.size()];
  }

  std::atomic<uint64_t> next_ticket{0};  // sync engine's shared schedule
  std::atomic<int> workers_running{0};

 private:
  Config cfg_;
  std::vector<std::string> principals_, ktnames_;
  uint64_t t0_ = 0, warmup_end_ = 0, issue_end_ = 0, hard_end_ = 0;
  std::atomic<uint64_t> measured_claimed_{0};
  std::atomic<bool> stop_{false};
};

// Engines: run until the schedule says stop and nothing is in flight.
void RunAsyncWorker(Run* run, int worker, WorkerStats* ws);
void RunSyncWorker(Run* run, int worker, WorkerStats* ws);

// A krb5_context whose transport preference is forced (udp_preference_limit)
// so the sync engine's libkrb5 sendto_kdc uses what --transport says.
krb5_error_code MakeContext(bool tcp, krb5_context* out);
void RemoveProfileFiles();  // at exit

// The realm's KDC address from the profile ([realms] REALM kdc), or cfg.kdc.
std::string KdcAddress(krb5_context ctx, const std::string& realm,
                       const std::string& override_addr);

}  // namespace kmpc::storm

#endif  // KMPC_STORM_STORM_H_
