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
#include "kdc_metrics.h"
#include "options.h"
#include "prometheus/exposer.h"
#include "status_class.h"

namespace kmpc::kdc {

// The one mapping from the core's statuses to krb5 error codes (the
// meanings are fixed in job.h).
krb5_error_code KrbErrorFromStatus(const absl::Status& s) {
  switch (contract::ClassOf(s.code()).krb) {
    case contract::KrbClass::kNone: return 0;
    case contract::KrbClass::kSvcUnavailable: return KRB5KDC_ERR_SVC_UNAVAILABLE;
    case contract::KrbClass::kUnknownKey: return KRB5_KT_NOTFOUND;
    case contract::KrbClass::kWrongCipher: return KRB5_BAD_ENCTYPE;
    case contract::KrbClass::kBadIntegrity: return KRB5KRB_AP_ERR_BAD_INTEGRITY;
    case contract::KrbClass::kInvalid: return EINVAL;
    case contract::KrbClass::kInternal: break;
  }
  return KRB5_CRYPTO_INTERNAL;
}

// The one mapping from the krb5 patch's job types (kdcmpc_plugin.h:
// DECRYPT=1, ENCRYPT=2, CHECKSUM=3, VERIFY=4) to the contract's (kmpc.proto
// JobType: ENCRYPT=1, DECRYPT=2, CHECKSUM=3, VERIFY_CHECKSUM=4). The
// numbers differ, so it is this switch and never a cast; the static_asserts
// below check it for every C value, and fail when either enum is
// renumbered. JOB_TYPE_UNSPECIFIED for any other value.
constexpr kmpc::v1::JobType JobTypeOf(krb5_kdcmpc_job_type type) {
  switch (type) {
    case KRB5_KDCMPC_ENCRYPT: return kmpc::v1::JOB_ENCRYPT;
    case KRB5_KDCMPC_DECRYPT: return kmpc::v1::JOB_DECRYPT;
    case KRB5_KDCMPC_CHECKSUM: return kmpc::v1::JOB_CHECKSUM;
    case KRB5_KDCMPC_VERIFY: return kmpc::v1::JOB_VERIFY_CHECKSUM;
    default: return kmpc::v1::JOB_TYPE_UNSPECIFIED;
  }
}
static_assert(KRB5_KDCMPC_DECRYPT == 1 && KRB5_KDCMPC_ENCRYPT == 2 &&
                  KRB5_KDCMPC_CHECKSUM == 3 && KRB5_KDCMPC_VERIFY == 4,
              "kdcmpc_plugin.h renumbered its job types: check JobTypeOf");
static_assert(kmpc::v1::JOB_ENCRYPT == 1 && kmpc::v1::JOB_DECRYPT == 2 &&
                  kmpc::v1::JOB_CHECKSUM == 3 && kmpc::v1::JOB_VERIFY_CHECKSUM == 4,
              "kmpc.proto renumbered its job types: check JobTypeOf");
static_assert(JobTypeOf(KRB5_KDCMPC_DECRYPT) == kmpc::v1::JOB_DECRYPT);
static_assert(JobTypeOf(KRB5_KDCMPC_ENCRYPT) == kmpc::v1::JOB_ENCRYPT);
static_assert(JobTypeOf(KRB5_KDCMPC_CHECKSUM) == kmpc::v1::JOB_CHECKSUM);
static_assert(JobTypeOf(KRB5_KDCMPC_VERIFY) == kmpc::v1::JOB_VERIFY_CHECKSUM);

// The contract's cipher of a kdcmpc job's enctype: the module's one
// conversion from krb5 enctypes (the servers refuse a key dealt for the
// other cipher, JOB_WRONG_CIPHER). A handle of aes128/aes256-cts-hmac-sha1-96
// names a key dealt for CIPHER_AES*_CTS. CIPHER_UNSPECIFIED for any other
// enctype, which the caller refuses.
constexpr kmpc::v1::Cipher CipherOfEnctype(krb5_enctype enctype) {
  switch (enctype) {
    case KRB5_KDCMPC_ENCTYPE_AES128: return kmpc::v1::CIPHER_AES128;
    case KRB5_KDCMPC_ENCTYPE_AES256: return kmpc::v1::CIPHER_AES256;
    case ENCTYPE_AES128_CTS_HMAC_SHA1_96: return kmpc::v1::CIPHER_AES128_CTS;
    case ENCTYPE_AES256_CTS_HMAC_SHA1_96: return kmpc::v1::CIPHER_AES256_CTS;
    default: return kmpc::v1::CIPHER_UNSPECIFIED;
  }
}
static_assert(KRB5_KDCMPC_ENCTYPE_AES128 == ENCTYPE_AES128_CTR_MPC &&
                  KRB5_KDCMPC_ENCTYPE_AES256 == ENCTYPE_AES256_CTR_MPC,
              "the kdcmpc interface's enctypes are krb5's aes*-ctr-mpc");

namespace {

char* Dup(const std::string& s) {
  char* p = static_cast<char*>(malloc(s.size() + 1));
  if (p != nullptr) memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

}  // namespace

// The core's Job of a kdcmpc job; 0, or an error code with *msg_out set.
krb5_error_code JobOfC(const krb5_kdcmpc_job* job, krb5_kdcmpc_done_fn done,
                       Job* out, char** msg_out) {
  if (job == nullptr || job->key_id == nullptr || done == nullptr ||
      (job->input.length > 0 && job->input.data == nullptr) ||
      (job->checksum.length > 0 && job->checksum.data == nullptr)) {
    *msg_out = Dup("kdcmpc: malformed job");
    return EINVAL;
  }
  out->cipher = CipherOfEnctype(job->enctype);
  if (out->cipher == kmpc::v1::CIPHER_UNSPECIFIED) {
    *msg_out = Dup("kdcmpc: not an MPC enctype");
    return KRB5_BAD_ENCTYPE;
  }
  out->type = JobTypeOf(job->type);
  if (out->type == kmpc::v1::JOB_TYPE_UNSPECIFIED) {
    *msg_out = Dup("kdcmpc: unknown job type");
    return EINVAL;
  }
  // Under the aes*-cts ciphers the core serves DECRYPT, ENCRYPT and
  // CHECKSUM only (cts_items.h); the planner and Enqueue further limit
  // them to the AS exchange's items and a service ticket's two jobs.
  if (contract::CtsCipher(out->cipher)) {
    if (absl::Status st = CtsJobServed(*out); !st.ok()) {
      *msg_out = Dup(std::string(st.message()));
      return KRB5KDC_ERR_SVC_UNAVAILABLE;
    }
  }
  out->key_id.assign(reinterpret_cast<const char*>(job->key_id),
                     KRB5_KDCMPC_KEY_ID_LEN);
  out->usage = static_cast<uint32_t>(job->usage);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(job->input.data);
  out->input.assign(in, in + job->input.length);
  if (job->checksum.length > 0)
    out->checksum.assign(job->checksum.data, job->checksum.length);
  return 0;
}

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

namespace kmpc::kdc {
namespace {

// Every splice_from names an item of the plan given now.
absl::Status CheckSpliceSources(const krb5_kdcmpc_plan* in) {
  for (size_t i = 0; i < in->n_items; ++i) {
    const int from = in->items[i].splice_from;
    if (from != KRB5_KDCMPC_NO_ITEM &&
        (from < 0 || static_cast<size_t>(from) >= in->n_items ||
         in->items[from].input.length == 0 || in->items[from].input.data == nullptr))
      return absl::InvalidArgumentError(
          absl::StrCat("plan item ", i, ": a splice from no item given now"));
  }
  return absl::OkStatus();
}

// A spliced item's message goes with the job it is spliced into; it is
// no job of its own (Dispatcher::Begin counts it so).
absl::Status AttachSplices(const krb5_kdcmpc_plan* in, const Plan& plan,
                           std::vector<ItemJob>* given) {
  std::vector<ItemJob> jobs;
  for (ItemJob& g : *given) {
    if (SplicedAway(plan, static_cast<size_t>(g.item))) continue;
    const int from = plan.items[g.item].splice_from;
    if (from >= 0) {
      const krb5_data& d = in->items[from].input;
      const uint8_t* b = reinterpret_cast<const uint8_t*>(d.data);
      // D and its HMAC inner padding (kmpc.proto Job.splice_length): the
      // servers' program follows D's SHA-1 block count, not its length.
      const std::string pad = contract::SplicePadding(d.length);
      g.job.splice.assign(b, b + d.length);
      g.job.splice.insert(g.job.splice.end(), pad.begin(), pad.end());
      if (plan.items[g.item].splice_offset > UINT32_MAX)
        return absl::InvalidArgumentError("a splice offset over 2^32");
      g.job.splice_offset = static_cast<uint32_t>(plan.items[g.item].splice_offset);
    }
    jobs.push_back(std::move(g));
  }
  *given = std::move(jobs);
  return absl::OkStatus();
}

// The core's plan of a kdcmpc plan, and the jobs of its items given now
// (tokens not yet assigned), each admitted by the gate book (`gates`; a
// gate's claim into *claims by item). What the core does not serve is
// refused (Planner::Check, cts_items.h): items under aes*-cts keys other
// than the AS exchange's, and any splice but a REQ_CHECKSUM's into an
// aes*-cts REPLY, whose job then carries the checksum's message
// (Job::splice) and the REQ_CHECKSUM no job of its own.
absl::Status PlanOfC(const krb5_kdcmpc_plan* in, GateBook& gates, Plan* out,
                     std::vector<ItemJob>* given, std::map<int, GateBook::Claim>* claims) {
  if (in == nullptr || in->n_items < 1 || in->n_items > kMaxPlanItems ||
      in->items == nullptr)
    return absl::InvalidArgumentError("a plan has 1 to 16 items");
  if (in->kind < KRB5_KDCMPC_EXCH_AS || in->kind > KRB5_KDCMPC_EXCH_S4U2PROXY)
    return absl::InvalidArgumentError("unknown exchange kind");
  out->kind = static_cast<ExchangeKind>(in->kind);
  if (absl::Status st = CheckSpliceSources(in); !st.ok()) return st;
  for (size_t i = 0; i < in->n_items; ++i) {
    const krb5_kdcmpc_item& it = in->items[i];
    PlanItem p;
    p.role = static_cast<Role>(it.role);
    p.type = JobTypeOf(it.type);
    p.cipher = CipherOfEnctype(it.enctype);
    if (it.key_id == nullptr || p.cipher == kmpc::v1::CIPHER_UNSPECIFIED ||
        (it.ctr0.length > 0 && it.ctr0.data == nullptr))
      return absl::InvalidArgumentError(absl::StrCat(
          "plan item ", i, ": no key id, or not an MPC enctype"));
    p.splice_from = it.splice_from == KRB5_KDCMPC_NO_ITEM ? -1 : it.splice_from;
    p.splice_offset = it.splice_offset;
    p.key_id.assign(reinterpret_cast<const char*>(it.key_id), KRB5_KDCMPC_KEY_ID_LEN);
    p.usage = static_cast<uint32_t>(it.usage);
    p.flags = it.flags;
    p.length = it.length;
    p.gate = (it.flags & KRB5_KDCMPC_ITEM_GATED) ? it.gate : -1;
    p.ticket = it.ticket;
    p.ctr0.assign(it.ctr0.data != nullptr ? it.ctr0.data : "", it.ctr0.length);
    p.given = it.input.length > 0;
    if (it.cf2_half.length > 0) {
      // A FAST key (kdcmpc_plugin.h cf2_half): given items under aes*-cts
      // keys only; its size is the output key's (16 or 32 bytes).
      if (it.cf2_half.data == nullptr || !p.given || !contract::CtsCipher(p.cipher) ||
          (it.cf2_half.length != 16 && it.cf2_half.length != 32))
        return absl::InvalidArgumentError(absl::StrCat(
            "plan item ", i, ": a FAST key's half on an item that cannot take one"));
      p.cts_key = it.cf2_half.length == 16 ? kmpc::v1::CTS_KEY_CF2_AES128
                                           : kmpc::v1::CTS_KEY_CF2_AES256;
    }
    if (p.given) {
      krb5_kdcmpc_job job = {it.type, it.enctype, it.key_id, it.usage,
                             it.input, it.checksum};
      ItemJob g;
      g.item = static_cast<int>(i);
      char* msg = nullptr;
      if (JobOfC(&job, it.done, &g.job, &msg) != 0) {
        const std::string why = msg != nullptr ? msg : "kdcmpc: malformed job";
        free(msg);
        return absl::InvalidArgumentError(absl::StrCat("plan item ", i, ": ", why));
      }
      g.job.cts_key = p.cts_key;
      GateBook::Claim& claim = (*claims)[static_cast<int>(i)];
      if (GateBook::Admission a = gates.Admit(g.job, absl::Now(), &claim);
          a.decision == GateBook::Decision::kRefuse)
        return a.why;
      if (p.cts_key != kmpc::v1::CTS_KEY_DEALT) {
        const uint8_t* h = reinterpret_cast<const uint8_t*>(it.cf2_half.data);
        g.job.cf2_half.assign(h, h + it.cf2_half.length);
      }
      given->push_back(std::move(g));
    }
    out->items.push_back(std::move(p));
  }
  return AttachSplices(in, *out, given);
}

}  // namespace
}  // namespace kmpc::kdc

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
