// The storm's shared schedule, outcome recording, krb5 context set-up, and
// the "sync" engine: one thread per in-flight login, each with its own
// krb5_context, each calling krb5_get_init_creds_keytab exactly as
// `kinit -k` does (libkrb5's own sendto_kdc, retransmits and all).
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "storm.h"

extern "C" {
#include <profile.h>
// Exported by libkrb5 (k5-int.h; what krb5_fwd_tgt_creds and the renewal in
// krb5_get_renewed_creds call) but not in its public headers: one TGS
// exchange with the given KDC options, synchronous.
krb5_error_code krb5_get_cred_via_tkt(krb5_context, krb5_creds*, krb5_flags,
                                      krb5_address* const*, krb5_creds*, krb5_creds**);
// Exported by libkrb5 (the path list that honours KRB5_CONFIG) but not in
// its public headers.
krb5_error_code KRB5_CALLCONV krb5_get_default_config_files(char*** files);
void KRB5_CALLCONV krb5_free_config_files(char** files);
}

namespace kmpc::storm {

const char* OpName(Op op) {
  switch (op) {
    case Op::kLogin: return "login";
    case Op::kTgs: return "tgs";
    case Op::kRenew: return "renew";
    case Op::kForward: return "forward";
  }
  return "?";
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

Run::Run(const Config& cfg, std::vector<std::string> principals,
         std::vector<std::string> keytab_names)
    : cfg_(cfg), principals_(std::move(principals)),
      ktnames_(std::move(keytab_names)) {}

void Run::Start(uint64_t t0) {
  t0_ = t0;
  warmup_end_ = t0 + static_cast<uint64_t>(cfg_.warmup * 1e9);
  issue_end_ = cfg_.duration > 0
                   ? warmup_end_ + static_cast<uint64_t>(cfg_.duration * 1e9)
                   : UINT64_MAX;
  hard_end_ = t0 + static_cast<uint64_t>(cfg_.time_limit * 1e9);
}

bool Run::MayStart(uint64_t sched, uint64_t now, bool* measured) {
  *measured = false;
  if (stopped() || now >= hard_end_) return false;
  if (sched < warmup_end_) return true;
  if (cfg_.duration > 0) {
    if (sched >= issue_end_) return false;
    // An open-loop backlog (the KDC fell behind and every in-flight slot is
    // taken) may start late, but not forever: what is still waiting a
    // timeout after the end is dropped and reported as such.
    if (now > issue_end_ + static_cast<uint64_t>(cfg_.timeout * 1e9)) return false;
  } else if (cfg_.count > 0) {
    if (measured_claimed_.fetch_add(1) >= cfg_.count) return false;
  }
  *measured = true;
  return true;
}

void Run::Done(WorkerStats* ws, krb5_context ctx, uint64_t sched, bool measured,
               krb5_error_code code, uint64_t now) {
  uint64_t lat_us = now > sched ? (now - sched) / 1000 : 0;
  if (!cfg_.events.empty()) ws->events.push_back({sched, now, code});
  size_t sec = static_cast<size_t>((now - t0_) / 1000000000ull);
  if (sec >= ws->seconds.size()) sec = ws->seconds.size() - 1;
  Second& s = ws->seconds[sec];
  if (code == 0) {
    ws->hist_all.Record(lat_us);
    ws->ok_all.fetch_add(1, std::memory_order_relaxed);
    s.ok++;
    if (!s.hist) s.hist = std::make_unique<CoarseHistogram>();
    s.hist->Record(lat_us);
    if (measured) {
      ws->hist.Record(lat_us);
      ws->ok++;
    }
  } else {
    ws->err_all.fetch_add(1, std::memory_order_relaxed);
    s.errors++;
    if (ws->err_by_code[code]++ == 0) {
      const char* msg = krb5_get_error_message(ctx, code);
      ws->err_text[code] = msg;
      krb5_free_error_message(ctx, msg);
    }
    if (measured) ws->errors++;
  }
  if (measured) {
    if (now > ws->last_done_ns) ws->last_done_ns = now;
    if (ws->first_done_ns == 0 || now < ws->first_done_ns) ws->first_done_ns = now;
  }
}

// The transport preference is forced by a one-line profile file placed in
// front of the user's own (profile lookups take the first file's value), so
// the user's krb5.conf is only ever read.  (Editing a file-backed profile
// in memory is no good: libkrb5 copies profiles by re-reading the files,
// and releasing an edited one writes it back to disk.)
static std::mutex g_profile_mu;
static std::string g_profile_path[2];

krb5_error_code MakeContext(bool tcp, krb5_context* out) {
  *out = nullptr;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(g_profile_mu);
    std::string& p = g_profile_path[tcp];
    if (p.empty()) {
      char tmpl[] = "/tmp/kmpc-storm-profile.XXXXXX";
      int fd = mkstemp(tmpl);
      if (fd < 0) return errno;
      // 1: every request over TCP; 1465 (MIT's default): AS/TGS over UDP.
      std::string body = std::string("[libdefaults]\n\tudp_preference_limit = ") +
                         (tcp ? "1" : "1465") + "\n";
      bool ok = write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
      close(fd);
      if (!ok) {
        unlink(tmpl);
        return EIO;
      }
      char** files = nullptr;
      krb5_error_code ret = krb5_get_default_config_files(&files);
      if (ret) {
        unlink(tmpl);
        return ret;
      }
      p = tmpl;
      for (char** f = files; *f; f++) p += std::string(":") + *f;
      krb5_free_config_files(files);
    }
    path = p;
  }
  profile_t prof = nullptr;
  krb5_error_code ret = profile_init_path(path.c_str(), &prof);
  if (ret) return ret;
  ret = krb5_init_context_profile(prof, 0, out);
  profile_release(prof);
  // No KRB5_TRACE in the load generator: formatting trace lines (even to
  // /dev/null, as the test realms set it) costs CPU the KDC then lacks.
  if (ret == 0 && !getenv("KMPC_STORM_TRACE")) krb5_set_trace_callback(*out, nullptr, nullptr);
  return ret;
}

void RemoveProfileFiles() {
  std::lock_guard<std::mutex> lock(g_profile_mu);
  for (auto& p : g_profile_path) {
    if (!p.empty()) unlink(p.substr(0, p.find(':')).c_str());
    p.clear();
  }
}

std::string KdcAddress(krb5_context ctx, const std::string& realm,
                       const std::string& override_addr) {
  if (!override_addr.empty()) return override_addr;
  profile_t prof = nullptr;
  if (krb5_get_profile(ctx, &prof)) return "";
  const char* names[] = {"realms", realm.c_str(), "kdc", nullptr};
  char** vals = nullptr;
  std::string addr;
  if (profile_get_values(prof, names, &vals) == 0 && vals && vals[0]) addr = vals[0];
  profile_free_list(vals);
  profile_release(prof);
  return addr;
}

// ---- the sync engine ----------------------------------------------------

void SleepUntil(uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1000000000ull),
              static_cast<long>(t % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Renewable lifetime asked for the TGTs of renew and forward operations
// (the KDC caps it at the principals' and realm's maximum).
constexpr krb5_deltat kRenewLife = 24 * 3600;

// The TGS exchange of a renew or forward operation on tgt (a renewable,
// forwardable TGT from the AS exchange), as krb5_get_renewed_creds and
// krb5_fwd_tgt_creds make it: a TGS-REQ for the TGT's own server with
// RENEW, or with FORWARDED (and FORWARDABLE, addressless).  The reply must
// carry the flag it asked for.
static krb5_error_code RenewOrForward(krb5_context ctx, Op op, krb5_creds* tgt) {
  krb5_creds in, *out = nullptr;
  memset(&in, 0, sizeof(in));
  in.client = tgt->client;
  in.server = tgt->server;
  krb5_flags kdcopt = op == Op::kRenew ? KDC_OPT_RENEW | KDC_OPT_RENEWABLE
                                       : KDC_OPT_FORWARDED | KDC_OPT_FORWARDABLE;
  krb5_flags want = op == Op::kRenew ? TKT_FLG_RENEWABLE : TKT_FLG_FORWARDED;
  krb5_error_code code = krb5_get_cred_via_tkt(ctx, tgt, kdcopt, nullptr, &in, &out);
  if (!code && (out == nullptr || out->ticket.length == 0 || !(out->ticket_flags & want)))
    code = KRB5KRB_AP_ERR_MSG_TYPE;
  krb5_free_creds(ctx, out);
  return code;
}

// A sync worker's krb5 state: its context, the users' principals and
// MEMORY keytabs, the AS options (plain, and renewable and forwardable for
// renew and forward), and with --tgs the service and a ccache for the TGT.
struct SyncSession {
  krb5_context ctx = nullptr;
  krb5_get_init_creds_opt* opt = nullptr;
  krb5_get_init_creds_opt* opt_rf = nullptr;  // renewable and forwardable
  krb5_principal server = nullptr;
  krb5_ccache cc = nullptr;
  std::vector<krb5_principal> princs;
  std::vector<krb5_keytab> kts;

  ~SyncSession() {
    if (cc) krb5_cc_destroy(ctx, cc);
    krb5_free_principal(ctx, server);
    for (auto kt : kts) krb5_kt_close(ctx, kt);
    for (auto p : princs) krb5_free_principal(ctx, p);
    krb5_get_init_creds_opt_free(ctx, opt);
    krb5_get_init_creds_opt_free(ctx, opt_rf);
    if (ctx) krb5_free_context(ctx);
  }
};

// Sets up s for worker `worker`; false: the worker has nothing to do (the
// run is stopped if the context or a user cannot be set up).
static bool OpenSyncSession(Run* run, int worker, SyncSession* s) {
  const Config& cfg = run->cfg();
  krb5_error_code ret = MakeContext(cfg.tcp, &s->ctx);
  if (ret) {
    fprintf(stderr, "kmpc-storm: worker %d: krb5 context: %s\n", worker,
            error_message(ret));
    run->Stop();
    return false;
  }
  for (size_t i = 0; i < run->principals().size(); i++) {
    krb5_principal p = nullptr;
    krb5_keytab kt = nullptr;
    ret = krb5_parse_name(s->ctx, run->principals()[i].c_str(), &p);
    if (!ret) ret = krb5_kt_resolve(s->ctx, run->keytab_names()[i].c_str(), &kt);
    if (ret) {
      fprintf(stderr, "kmpc-storm: %s: %s\n", run->principals()[i].c_str(),
              error_message(ret));
      run->Stop();
      return false;
    }
    s->princs.push_back(p);
    s->kts.push_back(kt);
  }
  if (krb5_get_init_creds_opt_alloc(s->ctx, &s->opt) ||
      krb5_get_init_creds_opt_alloc(s->ctx, &s->opt_rf))
    return false;
  krb5_get_init_creds_opt_set_renew_life(s->opt_rf, kRenewLife);
  krb5_get_init_creds_opt_set_forwardable(s->opt_rf, 1);
  if (!cfg.tgs_service.empty()) {
    if (krb5_parse_name(s->ctx, cfg.tgs_service.c_str(), &s->server) ||
        krb5_cc_new_unique(s->ctx, "MEMORY", nullptr, &s->cc))
      return false;
  }
  return true;
}

// A TGS-REQ for --tgs with user u's TGT `creds` (through the ccache, as
// kvno does).
static krb5_error_code SyncTgs(SyncSession* s, size_t u, krb5_creds* creds) {
  krb5_creds in, *out = nullptr;
  memset(&in, 0, sizeof(in));
  in.client = s->princs[u];
  in.server = s->server;
  krb5_error_code code = krb5_cc_initialize(s->ctx, s->cc, s->princs[u]);
  if (!code) code = krb5_cc_store_cred(s->ctx, s->cc, creds);
  if (!code) code = krb5_get_credentials(s->ctx, 0, s->cc, &in, &out);
  if (!code && (out == nullptr || out->ticket.length == 0))
    code = KRB5KRB_AP_ERR_MSG_TYPE;
  krb5_free_creds(s->ctx, out);
  return code;
}

// One operation for user u: the AS exchange, then op's TGS-REQ if any;
// records each exchange's latency when measured.
static krb5_error_code SyncOperation(SyncSession* s, WorkerStats* ws, Op op, size_t u,
                                     bool measured) {
  bool rf = op == Op::kRenew || op == Op::kForward;
  krb5_creds creds;
  memset(&creds, 0, sizeof(creds));
  const uint64_t as_start = NowNs();
  krb5_error_code code = krb5_get_init_creds_keytab(s->ctx, &creds, s->princs[u], s->kts[u],
                                                    0, nullptr, rf ? s->opt_rf : s->opt);
  if (code == 0 && creds.ticket.length == 0) code = KRB5KRB_AP_ERR_MSG_TYPE;
  const uint64_t step_start = NowNs();
  if (code == 0 && measured)
    ws->step_hist[static_cast<int>(Op::kLogin)].Record((step_start - as_start) / 1000);
  if (code == 0 && op == Op::kTgs) code = SyncTgs(s, u, &creds);
  if (code == 0 && rf) code = RenewOrForward(s->ctx, op, &creds);
  if (code == 0 && measured && op != Op::kLogin)
    ws->step_hist[static_cast<int>(op)].Record((NowNs() - step_start) / 1000);
  krb5_free_cred_contents(s->ctx, &creds);
  return code;
}

// Counts a login started at `now` (in its second, and measured or not).
static void CountStart(Run* run, WorkerStats* ws, uint64_t now, bool measured) {
  ws->started_all.fetch_add(1, std::memory_order_relaxed);
  ws->seconds[std::min(ws->seconds.size() - 1,
                       static_cast<size_t>((now - run->t0()) / 1000000000ull))]
      .started++;
  if (measured) ws->started++;
  ws->inflight.fetch_add(1, std::memory_order_relaxed);
}

void RunSyncWorker(Run* run, int worker, WorkerStats* ws) {
  const Config& cfg = run->cfg();
  SyncSession s;
  if (!OpenSyncSession(run, worker, &s)) return;
  size_t n = run->principals().size();
  uint64_t local = 0, ops = 0;
  SleepUntil(run->t0());
  if (!run->open_loop() && cfg.ramp > 0)  // --ramp: spread the first logins
    SleepUntil(run->t0() + static_cast<uint64_t>(cfg.ramp * 1e9 * worker / cfg.threads));
  for (;;) {
    uint64_t now = NowNs(), sched = now, k;
    if (run->open_loop()) {
      k = run->next_ticket.fetch_add(1);
      sched = run->Due(k);
      if (sched > run->hard_end() || (cfg.duration > 0 && sched >= run->issue_end()))
        break;
      if (sched > now) SleepUntil(sched);
      now = NowNs();
    } else {
      k = local++ * cfg.threads + worker;
    }
    bool measured;
    if (!run->MayStart(sched, now, &measured)) break;
    CountStart(run, ws, now, measured);
    // Each worker cycles through the mix, so that the operations are done
    // about equally often whatever each one costs.
    Op op = run->OpFor(ops++ + worker);
    krb5_error_code code = SyncOperation(&s, ws, op, k % n, measured);
    ws->inflight.fetch_sub(1, std::memory_order_relaxed);
    run->Done(ws, s.ctx, sched, measured, code, NowNs());
    if (measured) (code ? ws->op_errors : ws->op_ok)[static_cast<int>(op)]++;
  }
}

}  // namespace kmpc::storm
