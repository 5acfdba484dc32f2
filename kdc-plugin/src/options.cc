#include "options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kmpc::kdc {
namespace {

absl::Status Bad(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("kdcmpc option ", name, ": ", why));
}

absl::StatusOr<int64_t> Int(absl::string_view name, absl::string_view v,
                            int64_t lo, int64_t hi) {
  int64_t n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi)
    return Bad(name, absl::StrCat("expected an integer in [", lo, ", ", hi,
                                  "], got \"", v, "\""));
  return n;
}

absl::StatusOr<bool> Bool(absl::string_view name, absl::string_view v) {
  std::string s = absl::AsciiStrToLower(v);
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  return Bad(name, absl::StrCat("expected true or false, got \"", v, "\""));
}

absl::Status CheckHostPort(absl::string_view s,
                           absl::string_view option = "servers") {
  size_t colon = s.rfind(':');
  int port;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port < 1 ||
      port > 65535)
    return Bad(option, absl::StrCat("\"", s, "\" is not HOST:PORT"));
  return absl::OkStatus();
}

// The batcher's numeric and boolean options: name, accepted range, and
// where the value goes.
struct IntOption {
  const char* name;
  int64_t min, max;
  void (*set)(BatcherOptions&, int64_t);
};
struct BoolOption {
  const char* name;
  void (*set)(BatcherOptions&, bool);
};

constexpr IntOption kIntOptions[] = {
    {"batch_window_ms", 0, 60000,
     [](BatcherOptions& b, int64_t n) { b.window = absl::Milliseconds(n); }},
    {"cts_batch_window_ms", 0, 60000,
     [](BatcherOptions& b, int64_t n) { b.cts_window = absl::Milliseconds(n); }},
    {"max_batch_jobs", 1, 100000,
     [](BatcherOptions& b, int64_t n) { b.max_jobs = n; }},
    {"max_batch_blocks", 1, 1 << 20,
     [](BatcherOptions& b, int64_t n) { b.max_blocks = n; }},
    {"backlog_batch_jobs", 1, 100000,
     [](BatcherOptions& b, int64_t n) { b.backlog_jobs = n; }},
    {"backlog_batch_blocks", 1, 1 << 20,
     [](BatcherOptions& b, int64_t n) { b.backlog_blocks = n; }},
    {"coalesce_us", 0, 1000000,
     [](BatcherOptions& b, int64_t n) { b.coalesce = absl::Microseconds(n); }},
    {"batch_hold_pct", 0, 1000,
     [](BatcherOptions& b, int64_t n) { b.hold_pct = static_cast<int>(n); }},
    {"max_inflight", 1, 1024,
     [](BatcherOptions& b, int64_t n) { b.max_inflight = static_cast<int>(n); }},
    {"cts_unproven_per_minute", 0, 1000000,
     [](BatcherOptions& b, int64_t n) { b.cts_unproven_per_minute = static_cast<uint64_t>(n); }},
    {"gate_failures", 0, 1000000,
     [](BatcherOptions& b, int64_t n) { b.gate_failures = static_cast<uint64_t>(n); }},
    {"gate_failure_window_s", 1, 30 * 86400,
     [](BatcherOptions& b, int64_t n) { b.gate_failure_window = absl::Seconds(n); }},
    {"deep_rounds", 0, 1 << 30,
     [](BatcherOptions& b, int64_t n) { b.deep_rounds = static_cast<uint64_t>(n); }},
    {"max_queue_jobs", 1, 10000000,
     [](BatcherOptions& b, int64_t n) { b.max_queue = n; }},
    {"deadline_ms", 10, 600000,
     [](BatcherOptions& b, int64_t n) { b.deadline = absl::Milliseconds(n); }},
    {"speculate_ttl_ms", 100, 60000,
     [](BatcherOptions& b, int64_t n) {
       b.speculate_ttl = absl::Milliseconds(n);
     }},
    {"speculate_max", 2, 65536,
     [](BatcherOptions& b, int64_t n) { b.speculate_max = n; }},
};

constexpr BoolOption kBoolOptions[] = {
    {"early_flush", [](BatcherOptions& b, bool f) { b.early_flush = f; }},
    {"speculate", [](BatcherOptions& b, bool f) { b.speculate = f; }},
    {"chain_signatures", [](BatcherOptions& b, bool f) { b.chain_signatures = f; }},
    {"debug", [](BatcherOptions& b, bool f) { b.debug = f; }},
};

// One batcher option; NotFound for a name that is not one.
absl::Status SetBatcherOption(const std::string& name, const std::string& v,
                              BatcherOptions& b) {
  for (const IntOption& o : kIntOptions) {
    if (name != o.name) continue;
    auto n = Int(name, v, o.min, o.max);
    if (!n.ok()) return n.status();
    o.set(b, *n);
    return absl::OkStatus();
  }
  for (const BoolOption& o : kBoolOptions) {
    if (name != o.name) continue;
    auto f = Bool(name, v);
    if (!f.ok()) return f.status();
    o.set(b, *f);
    return absl::OkStatus();
  }
  return absl::NotFoundError(name);
}


// One cluster's relations as given: cluster 1's are `servers`, `certs`,
// `ca`, `cert`, `key`; cluster N's (2..kMaxClusters) the same names with N
// appended (`servers2`, `certs2`, ...).
struct ClusterRelations {
  std::vector<std::string> servers;
  std::string certs, ca, cert, key;
  bool any_tls() const {
    return !certs.empty() || !ca.empty() || !cert.empty() || !key.empty();
  }
};

// Sets `name` (a cluster relation, maybe numbered) in clusters; NotFound
// for a name that is not one.
absl::Status SetClusterRelation(const std::string& name, const std::string& v,
                                std::vector<ClusterRelations>& clusters) {
  static constexpr const char* kNames[] = {"servers", "certs", "ca", "cert",
                                           "key"};
  for (const char* base : kNames) {
    absl::string_view rest(name);
    if (!absl::ConsumePrefix(&rest, base)) continue;
    size_t n = 1;
    if (!rest.empty()) {
      if (rest.size() != 1 || rest[0] < '2' ||
          rest[0] > '0' + static_cast<int>(kMaxClusters))
        continue;  // e.g. "cert" is a prefix of "certs": try the next name
      n = rest[0] - '0';
    }
    if (clusters.size() < n) clusters.resize(n);
    ClusterRelations& c = clusters[n - 1];
    absl::string_view b(base);
    if (b == "servers") {
      for (absl::string_view s :
           absl::StrSplit(v, absl::ByAnyChar(", \t"), absl::SkipEmpty()))
        c.servers.emplace_back(s);
    } else {
      (b == "certs" ? c.certs : b == "ca" ? c.ca : b == "cert" ? c.cert : c.key) = v;
    }
    return absl::OkStatus();
  }
  return absl::NotFoundError(name);
}

// Checks one cluster's relations into `out`; `inherit` (cluster 1's
// result) gives the mTLS files of a later cluster that names none.
absl::Status FinishCluster(size_t n, const ClusterRelations& c,
                           const ClusterOptions* inherit, ClusterOptions* out) {
  const std::string suffix = n == 1 ? "" : absl::StrCat(n);
  const std::string servers = "servers" + suffix;
  if (c.servers.size() != 3)
    return Bad(servers, absl::StrCat("expected the three parties' HOST:PORT "
                                     "in party order, got ",
                                     c.servers.size()));
  for (int i = 0; i < 3; ++i) {
    if (absl::Status st = CheckHostPort(c.servers[i], servers); !st.ok())
      return st;
    out->servers[i] = c.servers[i];
  }
  if (inherit != nullptr && !c.any_tls()) {
    out->ca = inherit->ca;
    out->cert = inherit->cert;
    out->key = inherit->key;
    return absl::OkStatus();
  }
  const std::string& d = c.certs;
  out->ca = !c.ca.empty() ? c.ca : d.empty() ? "" : d + "/ca.pem";
  out->cert = !c.cert.empty() ? c.cert : d.empty() ? "" : d + "/kdc.pem";
  out->key = !c.key.empty() ? c.key : d.empty() ? "" : d + "/kdc.key";
  if (out->ca.empty() || out->cert.empty() || out->key.empty())
    return Bad(absl::StrCat("ca", suffix, "/cert", suffix, "/key", suffix),
               absl::StrCat("mTLS needs ca, cert and key (or certs", suffix,
                            " = DIR)"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModuleOptions> ParseOptions(
    const std::vector<std::string>& options) {
  ModuleOptions o;
  std::vector<ClusterRelations> clusters(1);
  for (const std::string& opt : options) {
    size_t eq = opt.find('=');
    if (eq == std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat("kdcmpc option \"", opt, "\" is not name=value"));
    std::string name(absl::StripAsciiWhitespace(opt.substr(0, eq)));
    std::string v(absl::StripAsciiWhitespace(opt.substr(eq + 1)));
    if (absl::Status st = SetClusterRelation(name, v, clusters);
        !absl::IsNotFound(st)) {
      if (!st.ok()) return st;
    } else if (name == "metrics_addr") {
      if (absl::Status st = CheckHostPort(v, name); !st.ok()) return st;
      o.metrics_addr = v;
    } else if (absl::Status st = SetBatcherOption(name, v, o.batcher);
               absl::IsNotFound(st)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown kdcmpc option \"", name, "\""));
    } else if (!st.ok()) {
      return st;
    }
  }
  o.clusters.resize(clusters.size());
  for (size_t n = 0; n < clusters.size(); ++n) {
    if (absl::Status st = FinishCluster(n + 1, clusters[n],
                                        n == 0 ? nullptr : &o.clusters[0],
                                        &o.clusters[n]);
        !st.ok())
      return st;
  }
  o.servers = o.clusters[0].servers;
  o.ca = o.clusters[0].ca;
  o.cert = o.clusters[0].cert;
  o.key = o.clusters[0].key;
  return o;
}

}  // namespace kmpc::kdc
