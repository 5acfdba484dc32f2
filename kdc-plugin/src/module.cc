// The C++ side of the kmpc kdcmpc module (core.h): options, the gRPC
// transports, the router (a batcher per cluster, router.h), the module's
// gate book (gate_book.h: every job is admitted by it before any cluster)
// and the eventfd bridge to the KDC's event loop.
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cts_items.h"
#include "absl/synchronization/mutex.h"
#include "batcher.h"
#include "router.h"
#include "core.h"
#include "gate_book.h"
#include "grpc_transport.h"
#include "kdcmpc_c.h"
#include "kdc_metrics.h"
#include "options.h"
#include "prometheus/exposer.h"

namespace kmpc::kdc {

namespace {

// Collects results and log lines from any thread; wakes the loop through
// the eventfd.
class LoopSink : public Sink {
 public:
  explicit LoopSink(int efd) : efd_(efd) {}

  void Deliver(Result r) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      results_.push_back(std::move(r));
    }
    Wake();
  }
  void Log(int level, std::string line) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (logs_.size() >= 1000) return;  // a flood of failures: keep the KDC up
      logs_.emplace_back(level, std::move(line));
    }
    Wake();
  }
  // The loop thread, before it drains: the next Deliver or Log writes the
  // eventfd again. Everything queued before this call is drained after it.
  void Rearm() { signalled_.store(false, std::memory_order_seq_cst); }

  // The loop thread only. Takes everything delivered so far under one
  // lock (the gRPC threads deliver while the loop drains: a lock per
  // result made them wait on each other), then hands it out one by one.
  bool NextResult(Result* out) {
    if (draining_.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      if (results_.empty()) return false;
      draining_.swap(results_);
    }
    *out = std::move(draining_.front());
    draining_.pop_front();
    return true;
  }
  bool NextLog(std::pair<int, std::string>* out) {
    std::lock_guard<std::mutex> l(mu_);
    if (logs_.empty()) return false;
    *out = std::move(logs_.front());
    logs_.pop_front();
    return true;
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    results_.clear();  // SecureBytes wipe themselves
    draining_.clear();
    logs_.clear();
  }

 private:
  // One eventfd write per drain, not one per job: a batch of N jobs used
  // to cost N write(2) calls on the gRPC thread and N wake-ups of the loop.
  void Wake() {
    if (signalled_.exchange(true, std::memory_order_seq_cst)) return;
    uint64_t one = 1;
    // EAGAIN means the counter is already huge: the loop will wake anyway.
    ssize_t n = write(efd_, &one, sizeof(one));
    (void)n;
  }

  const int efd_;
  std::atomic<bool> signalled_{false};
  std::mutex mu_;
  std::deque<Result> results_;
  std::deque<Result> draining_;  // the loop thread's (NextResult, Clear)
  std::deque<std::pair<int, std::string>> logs_;
};

// The module's reference to the gRPC library, from before its first
// channel until after its last gRPC object is gone (the first member of
// kmpc_core: destroyed last). Its release waits until gRPC has shut down:
// the channels' core objects let go of their own references later, on
// gRPC's threads (after their connection attempts end), and the last of
// them shuts gRPC down on a thread of its own. So once fini returns no
// gRPC thread is at work (none in a TLS handshake while the process's exit
// runs OpenSSL's atexit clean-up), unless something else in the process
// holds gRPC: then fini returns after kShutdownWait, gRPC still running.
class GrpcLibraryRef {
 public:
  static constexpr absl::Duration kShutdownWait = absl::Seconds(3);

  GrpcLibraryRef() { grpc_init(); }
  ~GrpcLibraryRef() {
    // On the KDC's thread (never gRPC's): the clean-up runs here if this
    // is the last reference (grpc.h: grpc_shutdown, not the deprecated
    // grpc_shutdown_blocking).
    grpc_shutdown();
    // grpc_is_initialized() is 1 until the clean-up thread has finished
    // (it holds gRPC's init lock meanwhile).
    const absl::Time until = absl::Now() + kShutdownWait;
    while (grpc_is_initialized() != 0 && absl::Now() < until)
      absl::SleepFor(absl::Milliseconds(5));
  }
  GrpcLibraryRef(const GrpcLibraryRef&) = delete;
  GrpcLibraryRef& operator=(const GrpcLibraryRef&) = delete;
};

}  // namespace
}  // namespace kmpc::kdc

using kmpc::kdc::KrbErrorFromStatus;

// An exchange of kdcmpc minor version 2 (opaque to the KDC).
struct krb5_kdcmpc_exchange_st {
  uint64_t id = 0;
  bool failed = false;  // a job of it completed with an error
};

struct kmpc_core {
  // First: gRPC is released after everything below (GrpcLibraryRef).
  kmpc::kdc::GrpcLibraryRef grpc;
  int efd = -1;
  std::unique_ptr<kmpc::kdc::LoopSink> sink;
  // Outlives the router (its observer); the exposer goes first.
  std::unique_ptr<kmpc::kdc::KdcMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  // One per cluster (options.h), in order.
  std::vector<std::unique_ptr<kmpc::kdc::GrpcTransport>> transports;
  // The module's one, shared by the clusters' batchers.
  std::shared_ptr<kmpc::kdc::GateBook> gates;
  std::unique_ptr<kmpc::kdc::Router> router;
  // Touched only on the KDC's event loop thread (submit and next): each
  // job's callback, and its exchange (minor version 2) or null.
  struct Waiting {
    krb5_kdcmpc_done_fn done;
    void* arg;
    krb5_kdcmpc_exchange exchange;
    // A REPLY with a splice: the spliced REQ_CHECKSUM item's callback,
    // completed after it with its code and no output (cts_items.h).
    krb5_kdcmpc_done_fn spliced_done = nullptr;
    void* spliced_arg = nullptr;
    // A gate claimed in flight until it completes (GateBook::Claim,
    // given back as this goes); none for any other job.
    kmpc::kdc::GateBook::Claim claimed;
  };
  std::unordered_map<uint64_t, Waiting> pending;
  // Completions owed after the one kmpc_core_next returned (spliced items).
  struct Owed {
    krb5_kdcmpc_done_fn done;
    void* arg;
    krb5_error_code code;
  };
  std::deque<Owed> owed;
  uint64_t next_token = 1;
  uint64_t next_exchange = 1;
  bool kick = false;
  bool kick_failure_logged = false;  // kmpc_core_arm_kick

  ~kmpc_core() {
    // Order matters: no scrape, then no router (its batchers' threads),
    // then no transport callback, then nothing can write to the eventfd.
    exposer.reset();  // joins its HTTP threads
    if (metrics) metrics->ClearStatsSource();
    if (router) router->Stop();
    for (auto& t : transports) t->Shutdown();
    router.reset();
    transports.clear();
    if (sink) sink->Clear();
    if (efd >= 0) close(efd);
  }
};

namespace {

// True if something accepts TCP connections on addr ("host:port").
bool SomeoneListens(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return false;
  bool up = false;
  for (addrinfo* a = res; a && !up; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    up = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(res);
  return up;
}

// /metrics over HTTP (kdc_metrics.h). Failing to bind costs the metrics,
// never the KDC: with krb5kdc -w every worker process tries, and all but
// the first find the port taken. Two workers that both bind (civetweb sets
// SO_REUSEADDR) before either listens both fail listen() on Linux, so a
// worker that fails while nobody listens on the port tries again after a
// random pause of a few milliseconds.
void StartExposer(kmpc_core* core, const std::string& addr) {
  kmpc::kdc::Router* router = core->router.get();
  core->metrics->SetStatsSource([router] { return router->stats(); });
  std::string why;
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      core->exposer = std::make_unique<prometheus::Exposer>(addr, 1);
      for (const auto& c : core->metrics->collectables())
        core->exposer->RegisterCollectable(c);
      core->sink->Log(LOG_INFO, absl::StrCat("kdcmpc: metrics on http://", addr,
                                             "/metrics (pid ", getpid(), ")"));
      return;
    } catch (const std::exception& e) {
      core->exposer.reset();
      why = e.what();
    }
    if (SomeoneListens(addr)) break;
    usleep(2000 + static_cast<useconds_t>(arc4random_uniform(18000)));
  }
  core->sink->Log(LOG_WARNING,
                  absl::StrCat("kdcmpc: no metrics from this process (pid ",
                               getpid(), "): cannot serve ", addr, ": ", why));
}

}  // namespace

extern "C" krb5_error_code kmpc_core_create(const char* const* options,
                                            kmpc_core** core_out,
                                            char** msg_out) {
  *core_out = nullptr;
  *msg_out = nullptr;
  try {
    std::vector<std::string> opts;
    for (const char* const* o = options; o != nullptr && *o != nullptr; ++o)
      opts.emplace_back(*o);
    auto mo = kmpc::kdc::ParseOptions(opts);
    if (!mo.ok()) {
      *msg_out = kmpc::kdc::Dup(std::string(mo.status().message()));
      return EINVAL;
    }
    // gRPC takes absl::Mutex locks on every call, and Debian's abseil keeps
    // its deadlock detection on (a lock-order graph updated per
    // acquisition): visible in the KDC's profile under load. The module's
    // own locks are std::mutex; deadlocks are the tests' business (TSan).
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    // glibc's malloc settings stay the process's own (no mallopt here):
    // keeping the heap's peak mapped (a 512 MiB trim threshold) held a
    // backlog's peak in the KDC's resident memory, which the soak judges
    // as growth, and neither it nor turning fast bins off measured a lower
    // CPU per login in alternated runs (docs/bench-log.md, 2026-11-24).
    auto core = std::make_unique<kmpc_core>();
    core->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (core->efd < 0) {
      int e = errno;
      *msg_out = kmpc::kdc::Dup("kdcmpc: eventfd failed");
      return e;
    }
    core->sink = std::make_unique<kmpc::kdc::LoopSink>(core->efd);
    std::vector<kmpc::kdc::Transport*> transports;
    for (size_t c = 0; c < mo->clusters.size(); ++c) {
      const kmpc::kdc::ClusterOptions& co = mo->clusters[c];
      auto t = kmpc::kdc::GrpcTransport::Create(co.servers, co.ca, co.cert,
                                                co.key);
      if (!t.ok()) {
        *msg_out = kmpc::kdc::Dup(absl::StrCat(
            "kdcmpc: ",
            mo->clusters.size() > 1 ? absl::StrCat("cluster ", c + 1, ": ")
                                    : "",
            t.status().message()));
        return EINVAL;
      }
      transports.push_back(t->get());
      core->transports.push_back(std::move(*t));
    }
    // SubmitterIdle(): early flush, and the finalize_only jobs.
    core->kick = mo->batcher.early_flush || mo->batcher.speculate;
    // kmpc_kdc.c calls SubmitterIdle() on the loop's next turn after every
    // submit whenever core->kick is set.
    mo->batcher.submitter_kicks = core->kick;
    core->metrics = std::make_unique<kmpc::kdc::KdcMetrics>();
    // The freshness cache, the module's one (freshness.h), into its book.
    core->gates = std::make_shared<kmpc::kdc::GateBook>(
        mo->batcher, transports.size(), std::make_shared<kmpc::kdc::GateFreshness>());
    core->router = std::make_unique<kmpc::kdc::Router>(
        mo->batcher, std::move(transports), core->sink.get(),
        core->metrics.get(), core->gates);
    if (!mo->metrics_addr.empty()) StartExposer(core.get(), mo->metrics_addr);
    *core_out = core.release();
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    *msg_out = kmpc::kdc::Dup("kdcmpc: internal error during start-up");
    return KRB5_CRYPTO_INTERNAL;
  }
}

extern "C" void kmpc_core_set_clockskew(kmpc_core* core, int seconds) {
  if (seconds > 0) core->gates->set_skew(absl::Seconds(seconds));
}

extern "C" int kmpc_core_fd(kmpc_core* core) { return core->efd; }

namespace {

// A job or plan the core refused: counted, its reason for the KDC's log,
// and its krb5 code.
krb5_error_code Refused(kmpc_core* core, const absl::Status& st,
                        char** msg_out) {
  core->metrics->JobRefused(st);
  *msg_out = kmpc::kdc::Dup(absl::StrCat("kdcmpc: ", st.message()));
  return KrbErrorFromStatus(st);
}

// Converts `job`, hands it to `send(token, job)` under a fresh token and
// records who waits for it (`exch`: null outside an exchange).
// A `ticket` (submit_ticket) is signed in the cluster (cts_items.h).
template <typename Send>
krb5_error_code Enqueue(kmpc_core* core, const krb5_kdcmpc_job* job,
                        krb5_kdcmpc_done_fn done, void* arg,
                        krb5_kdcmpc_exchange exch, char** msg_out, Send send,
                        bool ticket = false) {
  kmpc::kdc::Job j;
  if (krb5_error_code ret = kmpc::kdc::JobOfC(job, done, &j, msg_out))
    return ret;
  if (ticket)
    if (absl::Status st = kmpc::kdc::SignTicketInCluster(
            &j, {reinterpret_cast<const uint8_t*>(job->pac.data), job->pac.length,
                 job->pac_sig_offset, kmpc::kdc::CipherOfEnctype(job->sign_enctype),
                 job->sign_key_id});
        !st.ok())
      return Refused(core, st, msg_out);
  // Outside a plan an aes*-cts job would run without its gate and without
  // the planner's checks (cts_items.h): refused, but for a service
  // ticket's ENCRYPT, PAC server signature and CAMMAC service verifier,
  // which have no gate.
  if (exch == nullptr && kmpc::kdc::CtsJob(j) && !kmpc::kdc::CtsServedUnplanned(j)) {
    *msg_out = kmpc::kdc::Dup("kdcmpc: jobs under aes*-cts-hmac-sha1-96 keys are "
                              "served only as items of an exchange plan, but for "
                              "a service ticket's (ENCRYPT usage 2, CHECKSUM usage 17 or 64)");
    return KRB5KDC_ERR_SVC_UNAVAILABLE;
  }
  // A gate replayed, or past the failure bound (gate_book.h).
  if (const kmpc::kdc::GateBook::Admission a = core->gates->Admit(j, absl::Now());
      a.decision == kmpc::kdc::GateBook::Decision::kRefuse)
    return Refused(core, a.why, msg_out);
  const uint64_t token = core->next_token++;
  absl::Status st = send(token, std::move(j));
  if (!st.ok()) return Refused(core, st, msg_out);
  core->pending.emplace(token, kmpc_core::Waiting{done, arg, exch});
  return 0;
}

}  // namespace

extern "C" krb5_error_code kmpc_core_submit(kmpc_core* core,
                                            const krb5_kdcmpc_job* job,
                                            krb5_kdcmpc_done_fn done,
                                            void* arg, int ticket, char** msg_out) {
  *msg_out = nullptr;
  try {
    return Enqueue(core, job, done, arg, nullptr, msg_out,
                   [core](uint64_t token, kmpc::kdc::Job j) {
                     return core->router->Submit(token, std::move(j));
                   }, ticket != 0);
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    *msg_out = kmpc::kdc::Dup("kdcmpc: internal error");
    return KRB5_CRYPTO_INTERNAL;
  }
}


extern "C" krb5_error_code kmpc_core_begin(kmpc_core* core,
                                           const krb5_kdcmpc_plan* plan,
                                           krb5_kdcmpc_exchange* exch_out,
                                           char** msg_out) {
  *exch_out = nullptr;
  *msg_out = nullptr;
  try {
    kmpc::kdc::Plan p;
    std::vector<kmpc::kdc::ItemJob> given;
    // Given back unless kept by a waiting job (the exchange refused).
    std::map<int, kmpc::kdc::GateBook::Claim> claims;
    absl::Status st = kmpc::kdc::PlanOfC(plan, *core->gates, &p, &given, &claims);
    auto x = std::make_unique<krb5_kdcmpc_exchange_st>();
    x->id = core->next_exchange++;
    std::vector<std::pair<uint64_t, int>> tokens;  // (token, item)
    for (kmpc::kdc::ItemJob& g : given) {
      g.token = core->next_token++;
      tokens.emplace_back(g.token, g.item);
    }
    if (st.ok()) st = core->router->Begin(x->id, std::move(p), std::move(given));
    if (!st.ok()) return Refused(core, st, msg_out);
    for (const auto& [token, item] : tokens) {
      kmpc_core::Waiting w{plan->items[item].done, plan->items[item].arg, x.get()};
      w.claimed = std::move(claims[item]);
      if (const int from = plan->items[item].splice_from; from != KRB5_KDCMPC_NO_ITEM) {
        w.spliced_done = plan->items[from].done;
        w.spliced_arg = plan->items[from].arg;
      }
      core->pending.emplace(token, std::move(w));
    }
    *exch_out = x.release();
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    *msg_out = kmpc::kdc::Dup("kdcmpc: internal error");
    return KRB5_CRYPTO_INTERNAL;
  }
}

extern "C" krb5_error_code kmpc_core_submit_item(kmpc_core* core,
                                                 krb5_kdcmpc_exchange exch,
                                                 int item,
                                                 const krb5_kdcmpc_job* job,
                                                 krb5_kdcmpc_done_fn done,
                                                 void* arg, char** msg_out) {
  *msg_out = nullptr;
  try {
    if (exch == nullptr) {
      *msg_out = kmpc::kdc::Dup("kdcmpc: no exchange");
      return EINVAL;
    }
    return Enqueue(core, job, done, arg, exch, msg_out,
                   [core, exch, item](uint64_t token, kmpc::kdc::Job j) {
                     return core->router->SubmitItem(exch->id, item, token,
                                                     std::move(j));
                   });
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    *msg_out = kmpc::kdc::Dup("kdcmpc: internal error");
    return KRB5_CRYPTO_INTERNAL;
  }
}

extern "C" void kmpc_core_end(kmpc_core* core, krb5_kdcmpc_exchange exch) {
  if (exch == nullptr) return;
  try {
    std::optional<kmpc::kdc::ExchangeRecord> r = core->router->End(exch->id);
    if (r) core->metrics->ExchangeEnded(*r, !exch->failed);
  } catch (...) {
  }
  delete exch;
}

extern "C" void kmpc_core_ack(kmpc_core* core) {
  uint64_t v;
  while (read(core->efd, &v, sizeof(v)) == sizeof(v)) {
  }
  // After the read: a Deliver between the read and the drain that follows
  // either is drained now or writes the eventfd again.
  core->sink->Rearm();
}

// eventfd(2): a write adds to the counter; it fails with EINTR (retried)
// or, the fd being non-blocking, with EAGAIN when the counter would exceed
// 2^64 - 2, and then the fd is readable already: the kick is armed. Any
// other failure cannot arm it, and a kick that never comes would strand
// the jobs just queued (submitter_kicks: the dispatcher does not wake for
// them), so the kick happens at once instead (before the callback's last
// job is queued: a batch that starts early beats one that never starts),
// and the failure is logged once.
extern "C" int kmpc_core_arm_kick(kmpc_core* core) {
  if (!core->kick) return 0;
  const uint64_t one = 1;
  int err = 0;
  do {
    if (write(core->efd, &one, sizeof(one)) == sizeof(one)) return 1;
    err = errno;
  } while (err == EINTR);
  if (err == EAGAIN) return 1;
  if (!core->kick_failure_logged) {
    core->kick_failure_logged = true;
    core->sink->Log(LOG_ERR, absl::StrCat("kdcmpc: cannot arm the event loop's kick "
                                          "(eventfd write: ", strerror(err),
                                          "); kicking at once instead"));
  }
  kmpc_core_kick(core);
  return 0;
}

extern "C" int kmpc_core_kicks(kmpc_core* core) { return core->kick ? 1 : 0; }

extern "C" void kmpc_core_kick(kmpc_core* core) {
  try {
    core->router->SubmitterIdle();
  } catch (...) {
  }
}

extern "C" int kmpc_core_next_log(kmpc_core* core, int* level_out,
                                  char** line_out) {
  *line_out = nullptr;
  try {
    std::pair<int, std::string> l;
    if (!core->sink->NextLog(&l)) return 0;
    *level_out = l.first;
    *line_out = kmpc::kdc::Dup(l.second);
    return *line_out != nullptr;
  } catch (...) {
    return 0;
  }
}

extern "C" int kmpc_core_next(kmpc_core* core, kmpc_completion* out) {
  memset(out, 0, sizeof(*out));
  if (!core->owed.empty()) {
    const kmpc_core::Owed o = core->owed.front();
    core->owed.pop_front();
    out->done = o.done;
    out->arg = o.arg;
    out->code = o.code;
    out->output.magic = KV5M_DATA;
    return 1;
  }
  try {
    kmpc::kdc::Result r;
    for (;;) {
      if (!core->sink->NextResult(&r)) return 0;
      auto it = core->pending.find(r.token);
      if (it == core->pending.end()) continue;  // never twice
      out->done = it->second.done;
      out->arg = it->second.arg;
      if (it->second.exchange != nullptr && !r.status.ok())
        it->second.exchange->failed = true;
      if (it->second.spliced_done != nullptr)
        core->owed.push_back({it->second.spliced_done, it->second.spliced_arg,
                              KrbErrorFromStatus(r.status)});
      core->pending.erase(it);
      core->metrics->JobDone(r.status);
      break;
    }
    out->code = KrbErrorFromStatus(r.status);
    if (out->code == 0 && !r.output.empty()) {
      out->output.data = static_cast<char*>(malloc(r.output.size()));
      if (out->output.data == nullptr) {
        out->code = ENOMEM;
      } else {
        memcpy(out->output.data, r.output.data(), r.output.size());
        out->output.length = r.output.size();
      }
    }
    out->output.magic = KV5M_DATA;
    if (out->code != 0)
      out->message = kmpc::kdc::Dup(absl::StrCat(
          "kdcmpc: ", r.status.ok() ? "out of memory" : r.status.message()));
    return 1;
  } catch (...) {
    // The job is lost to the KDC only if we cannot even report it.
    if (out->done != nullptr) {
      out->code = KRB5_CRYPTO_INTERNAL;
      return 1;
    }
    return 0;
  }
}

extern "C" void kmpc_core_destroy(kmpc_core* core) {
  try {
    delete core;
  } catch (...) {
  }
}
