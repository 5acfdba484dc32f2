#include "options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

absl::Status CheckHostPort(absl::string_view s) {
  size_t colon = s.rfind(':');
  int port;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port < 1 ||
      port > 65535)
    return Bad("servers", absl::StrCat("\"", s, "\" is not HOST:PORT"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModuleOptions> ParseOptions(
    const std::vector<std::string>& options) {
  ModuleOptions o;
  std::vector<std::string> servers;
  std::string certs, ca, cert, key;
  for (const std::string& opt : options) {
    size_t eq = opt.find('=');
    if (eq == std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat("kdcmpc option \"", opt, "\" is not name=value"));
    std::string name(absl::StripAsciiWhitespace(opt.substr(0, eq)));
    std::string v(absl::StripAsciiWhitespace(opt.substr(eq + 1)));
    BatcherOptions& b = o.batcher;
    if (name == "servers") {
      for (absl::string_view s :
           absl::StrSplit(v, absl::ByAnyChar(", \t"), absl::SkipEmpty()))
        servers.emplace_back(s);
    } else if (name == "certs") {
      certs = v;
    } else if (name == "ca") {
      ca = v;
    } else if (name == "cert") {
      cert = v;
    } else if (name == "key") {
      key = v;
    } else if (name == "batch_window_ms") {
      auto n = Int(name, v, 0, 60000);
      if (!n.ok()) return n.status();
      b.window = absl::Milliseconds(*n);
    } else if (name == "max_batch_jobs") {
      auto n = Int(name, v, 1, 100000);
      if (!n.ok()) return n.status();
      b.max_jobs = *n;
    } else if (name == "max_batch_blocks") {
      auto n = Int(name, v, 1, 1 << 20);
      if (!n.ok()) return n.status();
      b.max_blocks = *n;
    } else if (name == "backlog_batch_jobs") {
      auto n = Int(name, v, 1, 100000);
      if (!n.ok()) return n.status();
      b.backlog_jobs = *n;
    } else if (name == "backlog_batch_blocks") {
      auto n = Int(name, v, 1, 1 << 20);
      if (!n.ok()) return n.status();
      b.backlog_blocks = *n;
    } else if (name == "early_flush") {
      auto f = Bool(name, v);
      if (!f.ok()) return f.status();
      b.early_flush = *f;
    } else if (name == "coalesce_us") {
      auto n = Int(name, v, 0, 1000000);
      if (!n.ok()) return n.status();
      b.coalesce = absl::Microseconds(*n);
    } else if (name == "max_inflight") {
      auto n = Int(name, v, 1, 1024);
      if (!n.ok()) return n.status();
      b.max_inflight = static_cast<int>(*n);
    } else if (name == "max_queue_jobs") {
      auto n = Int(name, v, 1, 10000000);
      if (!n.ok()) return n.status();
      b.max_queue = *n;
    } else if (name == "deadline_ms") {
      auto n = Int(name, v, 10, 600000);
      if (!n.ok()) return n.status();
      b.deadline = absl::Milliseconds(*n);
    } else if (name == "speculate") {
      auto f = Bool(name, v);
      if (!f.ok()) return f.status();
      b.speculate = *f;
    } else if (name == "speculate_ttl_ms") {
      auto n = Int(name, v, 100, 60000);
      if (!n.ok()) return n.status();
      b.speculate_ttl = absl::Milliseconds(*n);
    } else if (name == "speculate_max") {
      auto n = Int(name, v, 2, 65536);
      if (!n.ok()) return n.status();
      b.speculate_max = *n;
    } else if (name == "debug") {
      auto f = Bool(name, v);
      if (!f.ok()) return f.status();
      b.debug = *f;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown kdcmpc option \"", name, "\""));
    }
  }
  if (servers.size() != 3)
    return Bad("servers", absl::StrCat("expected the three parties' HOST:PORT "
                                       "in party order, got ",
                                       servers.size()));
  for (int i = 0; i < 3; ++i) {
    if (absl::Status st = CheckHostPort(servers[i]); !st.ok()) return st;
    o.servers[i] = servers[i];
  }
  o.ca = !ca.empty() ? ca : certs.empty() ? "" : certs + "/ca.pem";
  o.cert = !cert.empty() ? cert : certs.empty() ? "" : certs + "/kdc.pem";
  o.key = !key.empty() ? key : certs.empty() ? "" : certs + "/kdc.key";
  if (o.ca.empty() || o.cert.empty() || o.key.empty())
    return Bad("ca/cert/key", "mTLS needs ca, cert and key (or certs = DIR)");
  return o;
}

}  // namespace kmpc::kdc
