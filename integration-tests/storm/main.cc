// kmpc-storm: a login-storm load generator for a Kerberos KDC.
//
// Every login is a real AS exchange with encrypted-timestamp pre-auth (the
// two round trips kinit makes), optionally followed by a TGS-REQ, driven by
// the patched libkrb5 of the private prefix.  Users' long-term keys are read
// from a keytab once, into one MEMORY keytab per user, so no string-to-key
// (PBKDF2) runs per login.  A login counts only if the TGT (and the service
// ticket, with --tgs) was obtained; every failure is counted by its Kerberos
// error code.  Latency is measured from the time a login was *due* (open
// loop) or started (closed loop) to the time its last reply was checked, so
// a KDC that falls behind shows up in the figures rather than slowing the
// schedule down (no coordinated omission, as in wrk2).
#include <getopt.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storm.h"

namespace kmpc::storm {
namespace {

Run* g_run = nullptr;

void OnSignal(int) {
  if (g_run) g_run->Stop();
}

[[noreturn]] void Usage(int code) {
  fprintf(code ? stderr : stdout, R"(usage: kmpc-storm --keytab FILE [users] [load] [output]
users:
  --keytab FILE          keys of the users (read once; no PBKDF2 per login)
  --principals FMT       user principal names, printf format with one %%d,
                         e.g. user%%d@KMPC.TEST (default: every client
                         principal in the keytab)
  --users N              number of users (with FMT: FMT(first..first+N-1))
  --first-user I         first index for FMT (default 0)
  --tgs SERVICE          after each AS exchange, a TGS-REQ for SERVICE
  --mix OPS              operations in turn, comma list of login, tgs, renew,
                         forward (repeat one to weight it); each is an AS
                         exchange, then: tgs a TGS-REQ for --tgs; renew
                         (renewable TGT) a TGS-REQ renewing it; forward
                         (forwardable TGT) a TGS-REQ for a forwarded TGT.
                         Needs --engine sync (libkrb5 has no step API for
                         renewal and forwarding)
load (closed loop OR open loop; duration OR count):
  -c, --concurrency N    closed loop: N logins always in flight
  -r, --rate R[/s]       open loop: R logins per second, uniformly spaced
  -d, --duration S       measured seconds (default 10)
  -n, --count N          measured logins instead of a duration
  -w, --warmup S         seconds before the measurement (not in figures)
  --ramp S               closed loop: start the N logins spread over S seconds
                         (not all in one burst; keep S <= warmup)
  --time-limit S         hard stop of the whole run (default 300)
  --engine async|sync    async: epoll + krb5_init_creds_step, many logins per
                         thread (default); sync: one thread per login in
                         flight, krb5_get_init_creds_keytab (kinit's path)
  -t, --threads N        async: worker threads (default 1); sync open loop:
                         thread pool (default 64)
  --transport udp|tcp    default udp (replies too big for UDP go to TCP)
  --max-inflight N       open loop, async: logins in flight at most (1024)
  --tick-us N            open loop, async: wake up at most N us after a login
                         is due and start all that are due by then, instead
                         of once per login (default 0); latency still counts
                         from the due time
  --timeout S            per login, as kinit (default 10): KRB5_KDC_UNREACH
  --kdc HOST:PORT        default: the realm's first kdc in krb5.conf
output:
  --csv FILE             per-second figures
  --json FILE            summary (figures, errors by code, histogram)
  --hist-csv FILE        every non-empty histogram bucket
  --events FILE          one line per finished login, every phase:
                         due_s,done_s,code (CLOCK_REALTIME seconds: when it
                         was due / started, when it finished; code 0 = OK,
                         else the Kerberos error code)
  --watch-pid PID        also report that process's CPU per login (repeat)
  --max-errors N         exit 1 if more than N logins failed (default 0)
  --progress / --no-progress   live line on stderr (default: if a terminal)
  -q, --quiet            no summary on stdout (files and exit code only)
exit: 0 all good, 1 too many failed logins (or none succeeded), 2 usage/set-up
)");
  exit(code);
}

double ParseDouble(const char* opt, const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s || v < 0 || !std::isfinite(v)) {
    fprintf(stderr, "kmpc-storm: bad value for %s: %s\n", opt, s);
    exit(2);
  }
  if (*end && strcmp(end, "/s") != 0 && strcmp(end, "s") != 0) {
    fprintf(stderr, "kmpc-storm: bad value for %s: %s\n", opt, s);
    exit(2);
  }
  return v;
}

uint64_t ParseCount(const char* opt, const char* s) {
  char* end = nullptr;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || *end || s[0] == '-') {
    fprintf(stderr, "kmpc-storm: bad value for %s: %s\n", opt, s);
    exit(2);
  }
  return v;
}

std::vector<Op> ParseMix(const char* spec) {
  std::vector<Op> mix;
  std::stringstream in(spec);
  std::string name;
  while (std::getline(in, name, ',')) {
    bool known = false;
    for (int i = 0; i < kNumOps; i++) {
      if (name == OpName(static_cast<Op>(i))) {
        mix.push_back(static_cast<Op>(i));
        known = true;
      }
    }
    if (!known) {
      fprintf(stderr, "kmpc-storm: --mix: unknown operation '%s' (login, tgs, renew, "
              "forward)\n", name.c_str());
      exit(2);
    }
  }
  if (mix.empty()) {
    fprintf(stderr, "kmpc-storm: --mix: no operation\n");
    exit(2);
  }
  return mix;
}

// ---- command line ----------------------------------------------------------

enum LongOption {
  kKeytab = 1000, kPrincipals, kUsers, kFirst, kTgs, kTimeLimit, kEngine,
  kTransport, kMaxInflight, kTickUs, kTimeout, kKdc, kCsv, kJson, kHistCsv, kWatch,
  kMaxErrors, kProgress, kNoProgress, kRamp, kEvents, kMix,
};
const option kOptions[] = {
    {"keytab", required_argument, nullptr, kKeytab},
    {"principals", required_argument, nullptr, kPrincipals},
    {"users", required_argument, nullptr, kUsers},
    {"first-user", required_argument, nullptr, kFirst},
    {"tgs", required_argument, nullptr, kTgs},
    {"mix", required_argument, nullptr, kMix},
    {"concurrency", required_argument, nullptr, 'c'},
    {"rate", required_argument, nullptr, 'r'},
    {"duration", required_argument, nullptr, 'd'},
    {"count", required_argument, nullptr, 'n'},
    {"warmup", required_argument, nullptr, 'w'},
    {"ramp", required_argument, nullptr, kRamp},
    {"time-limit", required_argument, nullptr, kTimeLimit},
    {"engine", required_argument, nullptr, kEngine},
    {"threads", required_argument, nullptr, 't'},
    {"transport", required_argument, nullptr, kTransport},
    {"max-inflight", required_argument, nullptr, kMaxInflight},
    {"tick-us", required_argument, nullptr, kTickUs},
    {"timeout", required_argument, nullptr, kTimeout},
    {"kdc", required_argument, nullptr, kKdc},
    {"csv", required_argument, nullptr, kCsv},
    {"json", required_argument, nullptr, kJson},
    {"hist-csv", required_argument, nullptr, kHistCsv},
    {"events", required_argument, nullptr, kEvents},
    {"watch-pid", required_argument, nullptr, kWatch},
    {"max-errors", required_argument, nullptr, kMaxErrors},
    {"progress", no_argument, nullptr, kProgress},
    {"no-progress", no_argument, nullptr, kNoProgress},
    {"quiet", no_argument, nullptr, 'q'},
    {"help", no_argument, nullptr, 'h'},
    {nullptr, 0, nullptr, 0},
};

// One option (getopt_long's `o`, its argument in optarg) into *c.
void ParseOption(int o, Config* c, bool* threads_set) {
  switch (o) {
    case kKeytab: c->keytab = optarg; break;
    case kPrincipals: c->principal_fmt = optarg; break;
    case kUsers: c->users = static_cast<int>(ParseCount("--users", optarg)); break;
    case kFirst: c->first_user = static_cast<int>(ParseCount("--first-user", optarg)); break;
    case kTgs: c->tgs_service = optarg; break;
    case kMix: c->mix = ParseMix(optarg); break;
    case 'c': c->concurrency = static_cast<int>(ParseCount("--concurrency", optarg)); break;
    case 'r': c->rate = ParseDouble("--rate", optarg); break;
    case 'd': c->duration = ParseDouble("--duration", optarg); break;
    case 'n': c->count = ParseCount("--count", optarg); break;
    case 'w': c->warmup = ParseDouble("--warmup", optarg); break;
    case kRamp: c->ramp = ParseDouble("--ramp", optarg); break;
    case kTimeLimit: c->time_limit = ParseDouble("--time-limit", optarg); break;
    case kEngine:
      if (!strcmp(optarg, "async")) c->engine = Engine::kAsync;
      else if (!strcmp(optarg, "sync")) c->engine = Engine::kSync;
      else Usage(2);
      break;
    case 't': c->threads = static_cast<int>(ParseCount("--threads", optarg)); *threads_set = true; break;
    case kTransport:
      if (!strcmp(optarg, "udp")) c->tcp = false;
      else if (!strcmp(optarg, "tcp")) c->tcp = true;
      else Usage(2);
      break;
    case kMaxInflight: c->max_inflight = static_cast<int>(ParseCount("--max-inflight", optarg)); break;
    case kTickUs: c->tick_us = ParseCount("--tick-us", optarg); break;
    case kTimeout: c->timeout = ParseDouble("--timeout", optarg); break;
    case kKdc: c->kdc = optarg; break;
    case kCsv: c->csv = optarg; break;
    case kJson: c->json = optarg; break;
    case kHistCsv: c->hist_csv = optarg; break;
    case kEvents: c->events = optarg; break;
    case kWatch: c->watch_pids.push_back(static_cast<int>(ParseCount("--watch-pid", optarg))); break;
    case kMaxErrors: c->max_errors = ParseCount("--max-errors", optarg); break;
    case kProgress: c->progress = 1; break;
    case kNoProgress: c->progress = 0; break;
    case 'q': c->quiet = true; break;
    case 'h': Usage(0);
    default: Usage(2);
  }
}

// The options' consistency, and the defaults that depend on others
// (`threads_set`: --threads was given).
void CheckAndComplete(Config* c, bool threads_set) {
  if (c->concurrency > 0 && c->rate > 0) {
    fprintf(stderr, "kmpc-storm: --concurrency (closed loop) or --rate (open loop), not both\n");
    exit(2);
  }
  if (c->concurrency == 0 && c->rate == 0) c->concurrency = 1;
  if (c->duration > 0 && c->count > 0) {
    fprintf(stderr, "kmpc-storm: --duration or --count, not both\n");
    exit(2);
  }
  if (c->duration == 0 && c->count == 0) c->duration = 10;
  if (c->timeout <= 0) c->timeout = 10;
  if (!c->mix.empty()) {
    if (c->engine != Engine::kSync) {
      fprintf(stderr, "kmpc-storm: --mix needs --engine sync\n");
      exit(2);
    }
    if (std::count(c->mix.begin(), c->mix.end(), Op::kTgs) && c->tgs_service.empty()) {
      fprintf(stderr, "kmpc-storm: --mix with tgs needs --tgs SERVICE\n");
      exit(2);
    }
  }
  if (c->engine == Engine::kSync) {
    if (c->rate == 0) c->threads = c->concurrency;
    else if (!threads_set) c->threads = 64;
  }
  if (c->threads < 1) c->threads = 1;
  if (c->engine == Engine::kAsync && c->concurrency > 0 && c->threads > c->concurrency)
    c->threads = c->concurrency;
  if (c->max_inflight < c->threads) c->max_inflight = c->threads;
  if (!c->principal_fmt.empty()) {
    const char* p = strstr(c->principal_fmt.c_str(), "%d");
    if (!p || strchr(p + 2, '%') || strchr(c->principal_fmt.c_str(), '%') != p || c->users <= 0) {
      fprintf(stderr, "kmpc-storm: --principals needs exactly one %%d and --users N\n");
      exit(2);
    }
  }
}

Config ParseArgs(int argc, char** argv) {
  Config c;
  int o;
  bool threads_set = false;
  while ((o = getopt_long(argc, argv, "c:r:d:n:w:t:qh", kOptions, nullptr)) != -1)
    ParseOption(o, &c, &threads_set);
  if (optind != argc || c.keytab.empty()) Usage(2);
  CheckAndComplete(&c, threads_set);
  return c;
}

// ---- users: keytab -> one MEMORY keytab per user ---------------------------

struct Users {
  std::vector<std::string> names, ktnames;
  std::vector<krb5_keytab> handles;  // keep the MEMORY keytabs alive
};

// The keytab's entries by unparsed principal name (the caller frees their
// contents).
using KeysByName = std::map<std::string, std::vector<krb5_keytab_entry>>;

bool ReadKeytab(krb5_context ctx, const Config& cfg, KeysByName* by_name) {
  std::string ktname = cfg.keytab;
  if (ktname.find(':') == std::string::npos || ktname[0] == '/')
    ktname = "FILE:" + ktname;
  krb5_keytab kt = nullptr;
  krb5_kt_cursor cur;
  krb5_keytab_entry ent;
  krb5_error_code ret = krb5_kt_resolve(ctx, ktname.c_str(), &kt);
  if (!ret) ret = krb5_kt_start_seq_get(ctx, kt, &cur);
  if (ret) {
    fprintf(stderr, "kmpc-storm: keytab %s: %s\n", cfg.keytab.c_str(), error_message(ret));
    if (kt) krb5_kt_close(ctx, kt);
    return false;
  }
  while ((ret = krb5_kt_next_entry(ctx, kt, &ent, &cur)) == 0) {
    char* name = nullptr;
    if (krb5_unparse_name(ctx, ent.principal, &name) == 0) {
      (*by_name)[name].push_back(ent);  // owns ent's contents now
      krb5_free_unparsed_name(ctx, name);
    } else {
      krb5_free_keytab_entry_contents(ctx, &ent);
    }
  }
  krb5_kt_end_seq_get(ctx, kt, &cur);
  krb5_kt_close(ctx, kt);
  if (ret != KRB5_KT_END) {
    fprintf(stderr, "kmpc-storm: reading keytab %s: %s\n", cfg.keytab.c_str(),
            error_message(ret));
    return false;
  }
  return true;
}

// The users' canonical names: FMT(first..first+N-1) with --principals,
// else the keytab's client principals (no krbtgt/, kadmin/ or --tgs
// service; the first --users of them if given).
bool WantedUsers(krb5_context ctx, const Config& cfg, const KeysByName& by_name,
                 std::vector<std::string>* wanted) {
  if (!cfg.principal_fmt.empty()) {
    for (int i = 0; i < cfg.users; i++) {
      char buf[1024];
      snprintf(buf, sizeof(buf), cfg.principal_fmt.c_str(), cfg.first_user + i);
      // Canonical form (adds the default realm if FMT has none).
      krb5_principal p = nullptr;
      char* canon = nullptr;
      if (krb5_parse_name(ctx, buf, &p) || krb5_unparse_name(ctx, p, &canon)) {
        fprintf(stderr, "kmpc-storm: bad principal name %s\n", buf);
        krb5_free_principal(ctx, p);
        return false;
      }
      wanted->push_back(canon);
      krb5_free_unparsed_name(ctx, canon);
      krb5_free_principal(ctx, p);
    }
  } else {
    for (auto& [name, ents] : by_name) {
      if (name.rfind("krbtgt/", 0) == 0 || name.rfind("kadmin/", 0) == 0 ||
          name == cfg.tgs_service || name.rfind(cfg.tgs_service + "@", 0) == 0)
        continue;
      wanted->push_back(name);
      if (cfg.users > 0 && static_cast<int>(wanted->size()) == cfg.users) break;
    }
  }
  if (wanted->empty()) {
    fprintf(stderr, "kmpc-storm: no user principals in %s\n", cfg.keytab.c_str());
    return false;
  }
  return true;
}

// One MEMORY keytab per wanted user with its keys of by_name, into users.
bool MakeMemoryKeytabs(krb5_context ctx, const Config& cfg, KeysByName& by_name,
                       const std::vector<std::string>& wanted, Users* users) {
  bool ok = true;
  for (size_t i = 0; i < wanted.size() && ok; i++) {
    auto it = by_name.find(wanted[i]);
    if (it == by_name.end()) {
      fprintf(stderr, "kmpc-storm: %s has no key in %s\n", wanted[i].c_str(),
              cfg.keytab.c_str());
      ok = false;
      break;
    }
    std::string mem = "MEMORY:kmpc-storm." + std::to_string(getpid()) + "." +
                      std::to_string(i);
    krb5_keytab mk = nullptr;
    krb5_error_code ret = krb5_kt_resolve(ctx, mem.c_str(), &mk);
    for (size_t j = 0; !ret && j < it->second.size(); j++)
      ret = krb5_kt_add_entry(ctx, mk, &it->second[j]);
    if (ret) {
      fprintf(stderr, "kmpc-storm: memory keytab: %s\n", error_message(ret));
      ok = false;
    }
    users->names.push_back(wanted[i]);
    users->ktnames.push_back(mem);
    users->handles.push_back(mk);
  }
  return ok;
}

bool LoadUsers(krb5_context ctx, const Config& cfg, Users* users) {
  KeysByName by_name;
  if (!ReadKeytab(ctx, cfg, &by_name)) return false;
  std::vector<std::string> wanted;
  bool ok = WantedUsers(ctx, cfg, by_name, &wanted) &&
            MakeMemoryKeytabs(ctx, cfg, by_name, wanted, users);
  for (auto& [name, ents] : by_name)
    for (auto& e : ents) krb5_free_keytab_entry_contents(ctx, &e);
  return ok;
}

// ---- CPU accounting ---------------------------------------------------------

double SelfCpu() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// utime + stime of a process from /proc/PID/stat (fields 14 and 15, after
// the parenthesised command name, which may itself hold spaces).
double PidCpu(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t rp = s.rfind(')');
  if (rp == std::string::npos) return -1;
  std::istringstream in(s.substr(rp + 2));
  std::string field;
  double ut = 0, st = 0;
  for (int i = 3; i <= 15 && (in >> field); i++) {
    if (i == 14) ut = atof(field.c_str());
    if (i == 15) st = atof(field.c_str());
  }
  return (ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// ---- error names ------------------------------------------------------------

// Symbolic names of the codes a storm meets; com_err gives only the text.
std::string ErrorName(krb5_error_code code) {
  static const std::map<krb5_error_code, const char*> kNames = {
      {KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN, "KDC_ERR_C_PRINCIPAL_UNKNOWN"},
      {KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN, "KDC_ERR_S_PRINCIPAL_UNKNOWN"},
      {KRB5KDC_ERR_POLICY, "KDC_ERR_POLICY"},
      {KRB5KDC_ERR_ETYPE_NOSUPP, "KDC_ERR_ETYPE_NOSUPP"},
      {KRB5KDC_ERR_CLIENT_REVOKED, "KDC_ERR_CLIENT_REVOKED"},
      {KRB5KDC_ERR_KEY_EXP, "KDC_ERR_KEY_EXPIRED"},
      {KRB5KDC_ERR_PREAUTH_FAILED, "KDC_ERR_PREAUTH_FAILED"},
      {KRB5KDC_ERR_PREAUTH_REQUIRED, "KDC_ERR_PREAUTH_REQUIRED"},
      {KRB5KDC_ERR_SVC_UNAVAILABLE, "KDC_ERR_SVC_UNAVAILABLE"},
      {KRB5KRB_AP_ERR_BAD_INTEGRITY, "KRB_AP_ERR_BAD_INTEGRITY"},
      {KRB5KRB_AP_ERR_SKEW, "KRB_AP_ERR_SKEW"},
      {KRB5KRB_AP_ERR_MODIFIED, "KRB_AP_ERR_MODIFIED"},
      {KRB5KRB_AP_ERR_MSG_TYPE, "KRB_AP_ERR_MSG_TYPE"},
      {KRB5KRB_ERR_RESPONSE_TOO_BIG, "KRB_ERR_RESPONSE_TOO_BIG"},
      {KRB5KRB_ERR_GENERIC, "KRB_ERR_GENERIC"},
      {KRB5KRB_ERR_FIELD_TOOLONG, "KRB_ERR_FIELD_TOOLONG"},
      {KRB5_KDC_UNREACH, "KRB5_KDC_UNREACH"},
      {KRB5_PREAUTH_FAILED, "KRB5_PREAUTH_FAILED"},
      {KRB5_KDCREP_MODIFIED, "KRB5_KDCREP_MODIFIED"},
      {KRB5_KT_NOTFOUND, "KRB5_KT_NOTFOUND"},
      {KRB5_REALM_UNKNOWN, "KRB5_REALM_UNKNOWN"},
  };
  auto it = kNames.find(code);
  if (it != kNames.end()) return it->second;
  if (code > ERROR_TABLE_BASE_krb5 && code < ERROR_TABLE_BASE_krb5 + 128)
    return "KDC/KRB error " + std::to_string(code - ERROR_TABLE_BASE_krb5);
  if (code > 0 && code < 4096) return "errno " + std::to_string(code);
  return "krb5 " + std::to_string(code);
}

std::string JsonStr(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (c < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", c); o += b; }
    else o += c;
  }
  return o + "\"";
}

// HdrHistogram's percentile ladder: ticks halve the remaining distance to
// 100% (outputPercentileDistribution with 2 ticks per half distance).
std::vector<double> PercentileLadder() {
  std::vector<double> v = {0.0};
  double step = 25.0, p = 0.0;
  while (p < 99.999) {
    for (int i = 0; i < 2 && p < 99.999; i++) {
      p += step;
      v.push_back(p);
    }
    step /= 2;
  }
  v.push_back(100.0);
  return v;
}

// ---- the run ----------------------------------------------------------------

// CPU time (seconds) of kmpc-storm and of each --watch-pid at the end of
// the warm-up (0) and at the end of the run (1).
struct CpuWindow {
  double self0 = 0, self1 = 0;
  std::vector<double> pid0, pid1;
};

// One WorkerStats per worker, with a slot per second the run can last.
std::vector<std::unique_ptr<WorkerStats>> MakeWorkerStats(const Config& cfg) {
  std::vector<std::unique_ptr<WorkerStats>> stats;
  double max_run_s = cfg.warmup + (cfg.duration > 0 ? cfg.duration : cfg.time_limit) +
                     2 * cfg.timeout + 3;
  max_run_s = std::min(max_run_s, cfg.time_limit + cfg.timeout + 3);
  for (int i = 0; i < cfg.threads; i++) {
    stats.push_back(std::make_unique<WorkerStats>());
    stats.back()->seconds.resize(static_cast<size_t>(std::ceil(max_run_s)) + 1);
  }
  return stats;
}

// The live line on stderr: the last second's logins, totals, in flight,
// latency so far.
void PrintProgress(const Run& run, const std::vector<std::unique_ptr<WorkerStats>>& stats,
                   uint64_t t0, uint64_t now, uint64_t* last_ok) {
  Histogram h;
  uint64_t ok = 0, err = 0;
  int inflight = 0;
  for (auto& s : stats) {
    h.Merge(s->hist_all);
    ok += s->ok_all.load(std::memory_order_relaxed);
    err += s->err_all.load(std::memory_order_relaxed);
    inflight += s->inflight.load(std::memory_order_relaxed);
  }
  double el = (now - t0) / 1e9;
  fprintf(stderr,
          "\r\033[K[%6.1fs]%s %7" PRIu64 " logins/s  ok %" PRIu64 "  errors %" PRIu64
          "  in flight %d  p50 %.2f ms  p99 %.2f ms",
          el, now < run.warmup_end() ? " warm-up" : "", ok - *last_ok, ok, err,
          inflight, h.Quantile(0.5) / 1000.0, h.Quantile(0.99) / 1000.0);
  fflush(stderr);
  *last_ok = ok;
}

// Starts the workers at t0 and waits for them to end: the progress line
// each second, the CPU snapshot at the end of the warm-up and of the run.
CpuWindow RunWorkers(Run& run, const Config& cfg,
                     std::vector<std::unique_ptr<WorkerStats>>& stats, uint64_t t0,
                     bool progress) {
  CpuWindow cpu;
  cpu.pid0.assign(cfg.watch_pids.size(), 0);
  cpu.pid1.assign(cfg.watch_pids.size(), 0);
  run.Start(t0);
  std::vector<std::thread> threads;
  for (int i = 0; i < cfg.threads; i++) {
    run.workers_running++;
    threads.emplace_back([&, i] {
      if (cfg.engine == Engine::kAsync) RunAsyncWorker(&run, i, stats[i].get());
      else RunSyncWorker(&run, i, stats[i].get());
      run.workers_running--;
    });
  }
  bool window_started = false;
  uint64_t last_ok = 0, next_tick = t0 + 1000000000ull;
  while (run.workers_running.load() > 0) {
    uint64_t now = NowNs();
    if (!window_started && now >= run.warmup_end()) {
      cpu.self0 = SelfCpu();
      for (size_t i = 0; i < cfg.watch_pids.size(); i++) cpu.pid0[i] = PidCpu(cfg.watch_pids[i]);
      window_started = true;
    }
    if (now >= next_tick) {
      next_tick += 1000000000ull;
      if (progress) PrintProgress(run, stats, t0, now, &last_ok);
    }
    uint64_t wake = std::min(next_tick, window_started ? next_tick : run.warmup_end());
    now = NowNs();
    uint64_t wait = std::min<uint64_t>(wake > now ? wake - now : 0, 50000000ull);
    usleep(static_cast<useconds_t>(wait / 1000 + 1));
  }
  for (auto& t : threads) t.join();
  RemoveProfileFiles();
  cpu.self1 = SelfCpu();
  for (size_t i = 0; i < cfg.watch_pids.size(); i++) cpu.pid1[i] = PidCpu(cfg.watch_pids[i]);
  if (!window_started) {  // the run ended before the warm-up did
    cpu.self0 = cpu.self1;
    cpu.pid0 = cpu.pid1;
  }
  if (progress) fprintf(stderr, "\n");
  return cpu;
}

// ---- the report ---------------------------------------------------------------

// The workers' figures added up.
struct Totals {
  Histogram hist;
  uint64_t ok = 0, errors = 0, started = 0, dropped = 0, retx = 0, tcpfb = 0, reqs = 0;
  uint64_t strays = 0;
  uint64_t ok_all = 0, err_all = 0, last_done = 0, first_done = UINT64_MAX;
  std::map<int32_t, uint64_t> by_code;
  std::map<int32_t, std::string> texts;
  std::vector<Second> secs;
  uint64_t op_ok[kNumOps] = {}, op_err[kNumOps] = {};
  std::vector<Histogram> step = std::vector<Histogram>(kNumOps);
};

// Adds worker s's per-second figures into secs.
void MergeSeconds(const WorkerStats& s, std::vector<Second>* secs) {
  for (size_t i = 0; i < secs->size(); i++) {
    Second& to = (*secs)[i];
    to.started += s.seconds[i].started;
    to.ok += s.seconds[i].ok;
    to.errors += s.seconds[i].errors;
    if (s.seconds[i].hist) {
      if (!to.hist) to.hist = std::make_unique<CoarseHistogram>();
      to.hist->Merge(*s.seconds[i].hist);
    }
  }
}

Totals MergeStats(const std::vector<std::unique_ptr<WorkerStats>>& stats) {
  Totals t;
  t.secs.resize(stats[0]->seconds.size());
  for (auto& s : stats) {
    t.hist.Merge(s->hist);
    for (int i = 0; i < kNumOps; i++) {
      t.op_ok[i] += s->op_ok[i];
      t.op_err[i] += s->op_errors[i];
      t.step[i].Merge(s->step_hist[i]);
    }
    t.ok += s->ok;
    t.errors += s->errors;
    t.started += s->started;
    t.dropped += s->dropped;
    t.retx += s->retransmits;
    t.tcpfb += s->tcp_fallbacks;
    t.reqs += s->requests;
    t.strays += s->stray_replies;
    t.ok_all += s->ok_all.load();
    t.err_all += s->err_all.load();
    t.last_done = std::max(t.last_done, s->last_done_ns);
    if (s->first_done_ns) t.first_done = std::min(t.first_done, s->first_done_ns);
    for (auto& [c, n] : s->err_by_code) t.by_code[c] += n;
    for (auto& [c, text] : s->err_text) t.texts.emplace(c, text);
    MergeSeconds(*s, &t.secs);
  }
  return t;
}

// The first message of error code c ("" if none was kept).
const std::string& ErrorText(const Totals& t, int32_t c) {
  static const std::string kNone;
  auto it = t.texts.find(c);
  return it == t.texts.end() ? kNone : it->second;
}

// The figures derived from the totals and the CPU window.
struct Figures {
  double window = 0, elapsed = 0, rate = 0;
  double gen_cpu = 0;
  uint64_t failed_total = 0;
  uint64_t ok = 0;
  double PerLoginUs(double cpu) const { return ok > 0 ? cpu / ok * 1e6 : 0.0; }
};

Figures FiguresOf(const Config& cfg, const Run& run, const Totals& t, const CpuWindow& cpu) {
  Figures f;
  f.ok = t.ok;
  // The rate is taken between the first and the last measured completion
  // (n completions span n-1 intervals), not from the end of the warm-up:
  // a KDC with 300 ms latency would otherwise be charged its latency once
  // per run.  A KDC that falls behind still shows: its backlog stretches
  // the span.  `elapsed` (warm-up end to last completion) is what the CPU
  // figures cover.
  uint64_t done = t.ok + t.errors;
  f.window = done >= 2 && t.last_done > t.first_done ? (t.last_done - t.first_done) / 1e9 : 0;
  f.elapsed = t.last_done > run.warmup_end() ? (t.last_done - run.warmup_end()) / 1e9 : 0;
  f.rate = f.window > 0 ? static_cast<double>(t.ok) * (done - 1) / done / f.window : 0;
  // Open loop over a duration: the logins were due over exactly that long;
  // a span shorter than it only means latency varied (early ones slower).
  if (run.open_loop() && cfg.duration > 0 && f.window < cfg.duration && done > 0) {
    f.window = cfg.duration;
    f.rate = t.ok / f.window;
  }
  f.gen_cpu = cpu.self1 - cpu.self0;
  f.failed_total = t.err_all;
  return f;
}

// The latency distribution, HdrHistogram style.
void PrintLatencyDistribution(const Histogram& hist) {
  printf("  latency distribution (ms, HdrHistogram style):\n");
  printf("    %12s %14s %10s %14s\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
  if (hist.Count() == 0) return;
  for (double p : PercentileLadder()) {
    uint64_t v = p == 0 ? hist.Min() : hist.Quantile(p / 100);
    uint64_t below = 0;
    for (int i = 0; i < Histogram::kBuckets && Histogram::LowerOf(i) <= v; i++)
      below += hist.BucketCount(i);
    if (p < 100 && below < hist.Count()) {
      printf("    %12.3f %14.6f %10" PRIu64 " %14.2f\n", v / 1e3, p / 100, below,
             1 / (1 - p / 100));
    } else {  // the rest is the maximum
      printf("    %12.3f %14.6f %10" PRIu64 " %14s\n", hist.Max() / 1e3, 1.0,
             hist.Count(), "inf");
      break;
    }
  }
}

// The summary's counts: logins, the mix, failures, requests.
void PrintCounts(const Config& cfg, const Run& run, const Totals& t, const Figures& f) {
  printf("  window          %.3f s first to last measured completion (%.3f s after the "
         "%.1f s warm-up)\n", f.window, f.elapsed, cfg.warmup);
  printf("  logins ok       %" PRIu64 "  (%.1f logins/s)\n", t.ok, f.rate);
  if (!cfg.mix.empty()) {
    printf("  mix             ");
    for (int i = 0; i < kNumOps; i++)
      if (std::count(cfg.mix.begin(), cfg.mix.end(), static_cast<Op>(i)))
        printf(" %s ok %" PRIu64 " failed %" PRIu64 ";", OpName(static_cast<Op>(i)),
               t.op_ok[i], t.op_err[i]);
    printf("\n");
  }
  if (run.open_loop()) printf("  offered         %.1f logins/s\n", cfg.rate);
  printf("  failed          %" PRIu64 " in window, %" PRIu64 " in all\n", t.errors,
         f.failed_total);
  if (run.open_loop()) printf("  dropped         %" PRIu64 " (due, never started: KDC too slow)\n", t.dropped);
  if (cfg.engine == Engine::kAsync)
    printf("  requests        %" PRIu64 " sent, %" PRIu64 " UDP retransmits, %" PRIu64
           " TCP fallbacks, %" PRIu64 " stray replies ignored\n", t.reqs, t.retx, t.tcpfb,
           t.strays);
  else
    printf("  requests        (sent by libkrb5's sendto_kdc: not counted)\n");
}

// The summary on stdout (unless --quiet).
void PrintSummary(const Config& cfg, const Run& run, size_t users, const Totals& t,
                  const Figures& f, const CpuWindow& cpu) {
  const Histogram& hist = t.hist;
  std::string mode = run.open_loop()
                         ? "open loop, " + std::to_string(static_cast<long>(cfg.rate)) + "/s"
                         : "closed loop, concurrency " + std::to_string(cfg.concurrency);
  std::string engine = std::string(cfg.engine == Engine::kAsync ? "async" : "sync") +
                       " x" + std::to_string(cfg.threads) + (cfg.tcp ? ", tcp" : ", udp");
  printf("kmpc-storm: %s, %zu users, %s, %s\n", mode.c_str(), users,
         !cfg.mix.empty() ? "operations of the --mix (each an AS exchange first)"
         : cfg.tgs_service.empty() ? "AS exchange with encrypted timestamp"
                                   : ("AS exchange + TGS-REQ " + cfg.tgs_service).c_str(),
         engine.c_str());
  PrintCounts(cfg, run, t, f);
  printf("  latency (ms)    p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n",
         hist.Quantile(0.5) / 1e3, hist.Quantile(0.9) / 1e3, hist.Quantile(0.99) / 1e3,
         hist.Quantile(0.999) / 1e3, hist.Max() / 1e3, hist.Mean() / 1e3);
  printf("  cpu             kmpc-storm %.3f s = %.1f us/login (%.2f cores)\n", f.gen_cpu,
         f.PerLoginUs(f.gen_cpu), f.elapsed > 0 ? f.gen_cpu / f.elapsed : 0);
  for (size_t i = 0; i < cfg.watch_pids.size(); i++) {
    double c = cpu.pid1[i] - cpu.pid0[i];
    printf("                  pid %d %.3f s = %.1f us/login (%.2f cores)\n", cfg.watch_pids[i],
           c, f.PerLoginUs(c), f.elapsed > 0 ? c / f.elapsed : 0);
  }
  if (!t.by_code.empty()) {
    printf("  failed logins by error code (all phases):\n");
    for (auto& [c, n] : t.by_code)
      printf("    %10" PRIu64 "  %-28s %d  %s\n", n, ErrorName(c).c_str(), c,
             ErrorText(t, c).c_str());
  }
  PrintLatencyDistribution(hist);
}

// --csv: per-second figures up to the last second with any.
bool WriteSecondsCsv(const Config& cfg, const std::vector<Second>& secs) {
  FILE* f = fopen(cfg.csv.c_str(), "w");
  if (!f) { perror(cfg.csv.c_str()); return false; }
  fprintf(f, "second,phase,started,ok,failed,p50_us,p90_us,p99_us,max_us\n");
  size_t last = 0;
  for (size_t i = 0; i < secs.size(); i++)
    if (secs[i].started || secs[i].ok || secs[i].errors) last = i;
  for (size_t i = 0; i <= last; i++) {
    double t = static_cast<double>(i);
    const char* phase = t < cfg.warmup ? "warmup"
                        : (cfg.duration > 0 && t >= cfg.warmup + cfg.duration) ? "drain"
                                                                               : "measure";
    auto& h = secs[i].hist;
    fprintf(f, "%zu,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
            i, phase, secs[i].started, secs[i].ok, secs[i].errors,
            h ? h->Quantile(0.5) : 0, h ? h->Quantile(0.9) : 0, h ? h->Quantile(0.99) : 0,
            h ? h->Max() : 0);
  }
  fclose(f);
  return true;
}

// --events: one line per finished login, on the wall clock.
bool WriteEvents(const Config& cfg, const std::vector<std::unique_ptr<WorkerStats>>& stats) {
  // Monotonic -> wall clock, so that the events line up with other
  // processes' logs (e.g. a server's "listening" line).
  timespec rt, mt;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mt);
  const double offset = (rt.tv_sec - mt.tv_sec) + (rt.tv_nsec - mt.tv_nsec) / 1e9;
  FILE* f = fopen(cfg.events.c_str(), "w");
  if (!f) { perror(cfg.events.c_str()); return false; }
  fprintf(f, "due_s,done_s,code\n");
  for (auto& s : stats)
    for (const Event& e : s->events)
      fprintf(f, "%.6f,%.6f,%d\n", e.due_ns / 1e9 + offset, e.done_ns / 1e9 + offset,
              static_cast<int>(e.code));
  fclose(f);
  return true;
}

// --hist-csv: every non-empty histogram bucket.
bool WriteHistCsv(const Config& cfg, const Histogram& hist) {
  FILE* f = fopen(cfg.hist_csv.c_str(), "w");
  if (!f) { perror(cfg.hist_csv.c_str()); return false; }
  fprintf(f, "lower_us,upper_us,count\n");
  for (int i = 0; i < Histogram::kBuckets; i++)
    if (hist.BucketCount(i))
      fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", Histogram::LowerOf(i),
              Histogram::UpperOf(i), hist.BucketCount(i));
  fclose(f);
  return true;
}

// The JSON summary's "mix": measured operations of each kind in the mix
// ({} without one).
void JsonMix(const Config& cfg, const Totals& t, std::ostringstream& j) {
  j << "  \"mix\": {";
  bool first_op = true;
  for (int i = 0; i < kNumOps; i++) {
    if (!std::count(cfg.mix.begin(), cfg.mix.end(), static_cast<Op>(i))) continue;
    // step_*: this operation's own exchange (the AS exchange for login,
    // the TGS-REQ after it otherwise), successful ones, microseconds.
    j << (first_op ? "" : ", ") << JsonStr(OpName(static_cast<Op>(i)))
      << ": {\"ok\": " << t.op_ok[i] << ", \"failed\": " << t.op_err[i]
      << ", \"step_count\": " << t.step[i].Count()
      << ", \"step_p50_us\": " << t.step[i].Quantile(0.5)
      << ", \"step_p99_us\": " << t.step[i].Quantile(0.99) << "}";
    first_op = false;
  }
  j << "},\n";
}

// The JSON summary's "watched", "errors" and "histogram_us", to the end.
void JsonTail(const Config& cfg, const Totals& t, const Figures& f, const CpuWindow& cpu,
              std::ostringstream& j) {
  j << "  \"watched\": [";
  for (size_t i = 0; i < cfg.watch_pids.size(); i++) {
    double c = cpu.pid1[i] - cpu.pid0[i];
    j << (i ? ", " : "") << "{\"pid\": " << cfg.watch_pids[i] << ", \"cpu_s\": " << c
      << ", \"cpu_us_per_login\": " << f.PerLoginUs(c) << "}";
  }
  j << "],\n  \"errors\": [";
  bool first = true;
  for (auto& [c, n] : t.by_code) {
    j << (first ? "" : ", ") << "{\"code\": " << c << ", \"name\": " << JsonStr(ErrorName(c))
      << ", \"message\": " << JsonStr(ErrorText(t, c)) << ", \"count\": " << n << "}";
    first = false;
  }
  j << "],\n  \"histogram_us\": [";
  first = true;
  for (int i = 0; i < Histogram::kBuckets; i++) {
    if (!t.hist.BucketCount(i)) continue;
    j << (first ? "" : ", ") << "[" << Histogram::LowerOf(i) << ", " << Histogram::UpperOf(i)
      << ", " << t.hist.BucketCount(i) << "]";
    first = false;
  }
  j << "]\n}\n";
}

// --json: the summary.
bool WriteJson(const Config& cfg, const Run& run, size_t users, const Totals& t,
               const Figures& f, const CpuWindow& cpu) {
  const Histogram& hist = t.hist;
  std::ostringstream j;
  j.setf(std::ios::fixed);
  j.precision(3);
  j << "{\n  \"tool\": \"kmpc-storm\",\n";
  j << "  \"mode\": " << JsonStr(run.open_loop() ? "open" : "closed") << ",\n";
  j << "  \"offered_rate\": " << cfg.rate << ",\n";
  j << "  \"concurrency\": " << cfg.concurrency << ",\n";
  j << "  \"engine\": " << JsonStr(cfg.engine == Engine::kAsync ? "async" : "sync") << ",\n";
  j << "  \"threads\": " << cfg.threads << ",\n";
  j << "  \"tick_us\": " << cfg.tick_us << ",\n";
  j << "  \"transport\": " << JsonStr(cfg.tcp ? "tcp" : "udp") << ",\n";
  j << "  \"tgs\": " << JsonStr(cfg.tgs_service) << ",\n";
  JsonMix(cfg, t, j);
  j << "  \"users\": " << users << ",\n";
  j << "  \"warmup_s\": " << cfg.warmup << ",\n";
  j << "  \"duration_s\": " << cfg.duration << ",\n";
  j << "  \"window_s\": " << f.window << ",\n";
  j << "  \"elapsed_s\": " << f.elapsed << ",\n";
  j << "  \"started\": " << t.started << ",\n";
  j << "  \"ok\": " << t.ok << ",\n";
  j << "  \"failed\": " << t.errors << ",\n";
  j << "  \"failed_all_phases\": " << f.failed_total << ",\n";
  j << "  \"ok_all_phases\": " << t.ok_all << ",\n";
  j << "  \"dropped\": " << t.dropped << ",\n";
  j << "  \"requests\": " << t.reqs << ",\n";
  j << "  \"retransmits\": " << t.retx << ",\n";
  j << "  \"tcp_fallbacks\": " << t.tcpfb << ",\n";
  j << "  \"stray_replies\": " << t.strays << ",\n";
  j << "  \"logins_per_s\": " << f.rate << ",\n";
  j << "  \"latency_us\": {\"p50\": " << hist.Quantile(0.5) << ", \"p90\": " << hist.Quantile(0.9)
    << ", \"p99\": " << hist.Quantile(0.99) << ", \"p999\": " << hist.Quantile(0.999)
    << ", \"max\": " << hist.Max() << ", \"min\": " << hist.Min() << ", \"mean\": " << hist.Mean()
    << "},\n";
  j << "  \"generator_cpu_s\": " << f.gen_cpu << ",\n";
  j << "  \"generator_cpu_us_per_login\": " << f.PerLoginUs(f.gen_cpu) << ",\n";
  JsonTail(cfg, t, f, cpu, j);
  std::ofstream out(cfg.json);
  out << j.str();
  if (!out) { perror(cfg.json.c_str()); return false; }
  return true;
}

// The output files asked for; false if one cannot be written.
bool WriteFiles(const Config& cfg, const Run& run, size_t users,
                const std::vector<std::unique_ptr<WorkerStats>>& stats, const Totals& t,
                const Figures& f, const CpuWindow& cpu) {
  if (!cfg.csv.empty() && !WriteSecondsCsv(cfg, t.secs)) return false;
  if (!cfg.events.empty() && !WriteEvents(cfg, stats)) return false;
  if (!cfg.hist_csv.empty() && !WriteHistCsv(cfg, t.hist)) return false;
  if (!cfg.json.empty() && !WriteJson(cfg, run, users, t, f, cpu)) return false;
  return true;
}

// A krb5 context for the main thread, with room for a socket per login in
// flight; nullptr (after a message) if krb5 fails.
krb5_context SetUpProcess() {
  signal(SIGPIPE, SIG_IGN);
  // One socket per in-flight login: make room.
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  krb5_context ctx = nullptr;
  if (krb5_error_code ret = krb5_init_context(&ctx)) {
    fprintf(stderr, "kmpc-storm: krb5_init_context: %s\n", error_message(ret));
    return nullptr;
  }
  if (!getenv("KMPC_STORM_TRACE")) krb5_set_trace_callback(ctx, nullptr, nullptr);
  return ctx;
}

void FreeUsers(krb5_context ctx, const Users& users) {
  for (auto kt : users.handles) krb5_kt_close(ctx, kt);
}

}  // namespace

int Main(int argc, char** argv) {
  Config cfg = ParseArgs(argc, argv);
  krb5_context ctx = SetUpProcess();
  if (!ctx) return 2;
  Users users;
  if (!LoadUsers(ctx, cfg, &users)) {
    FreeUsers(ctx, users);
    krb5_free_context(ctx);
    return 2;
  }

  Run run(cfg, users.names, users.ktnames);
  g_run = &run;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::vector<std::unique_ptr<WorkerStats>> stats = MakeWorkerStats(cfg);
  bool progress = cfg.progress == 1 || (cfg.progress == -1 && isatty(2));
  // Workers set up (contexts, sockets) and wait for t0.
  uint64_t t0 = NowNs() + 50000000 + 2000000ull * std::min(cfg.threads, 256);
  const CpuWindow cpu = RunWorkers(run, cfg, stats, t0, progress);

  const Totals totals = MergeStats(stats);
  const Figures figures = FiguresOf(cfg, run, totals, cpu);
  if (!cfg.quiet) PrintSummary(cfg, run, users.names.size(), totals, figures, cpu);
  if (!WriteFiles(cfg, run, users.names.size(), stats, totals, figures, cpu)) return 2;

  FreeUsers(ctx, users);
  krb5_free_context(ctx);
  if (figures.failed_total > cfg.max_errors) {
    fprintf(stderr, "kmpc-storm: %" PRIu64 " failed logins (allowed: %" PRIu64 ")\n",
            figures.failed_total, cfg.max_errors);
    return 1;
  }
  if (totals.ok == 0) {
    fprintf(stderr, "kmpc-storm: no successful login in the measured window\n");
    return 1;
  }
  return 0;
}

}  // namespace kmpc::storm

int main(int argc, char** argv) { return kmpc::storm::Main(argc, argv); }
