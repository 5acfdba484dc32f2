#include "admin/config.h"

#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kmpc::admin {
namespace {
const std::set<std::string>& KnownNames() {
  static const std::set<std::string> names = [] {
    std::set<std::string> n = {"servers", "ca", "cert", "key", "realm",
                               "timeout_ms", "user_ctr_mpc"};
    for (size_t c = 2; c <= client::kMaxClusters; ++c)
      for (const char* base : {"servers", "ca", "cert", "key"})
        n.insert(absl::StrCat(base, c));
    return n;
  }();
  return names;
}

// "servers2" -> ("servers", 2); ("servers", 1) for "servers"; 0 if the
// name is no cluster setting.
int ClusterOf(const std::string& name, std::string* base) {
  for (const char* b : {"servers", "ca", "cert", "key"}) {
    absl::string_view rest(name);
    if (!absl::ConsumePrefix(&rest, b)) continue;
    if (rest.empty()) {
      *base = b;
      return 1;
    }
    if (rest.size() == 1 && rest[0] >= '2' &&
        rest[0] <= '0' + static_cast<int>(client::kMaxClusters)) {
      *base = b;
      return rest[0] - '0';
    }
  }
  return 0;
}

absl::Status ParseServers(const std::string& name, const std::string& value,
                          std::array<std::string, 3>* out) {
  std::vector<std::string> s = absl::StrSplit(value, ',', absl::SkipWhitespace());
  if (s.size() != 3)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " needs three HOST:PORT addresses (parties 0, 1, 2)"));
  for (int i = 0; i < 3; ++i)
    (*out)[i] = std::string(absl::StripAsciiWhitespace(s[i]));
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::map<std::string, std::string> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    absl::string_view l = line;
    if (size_t hash = l.find('#'); hash != absl::string_view::npos) l = l.substr(0, hash);
    l = absl::StripAsciiWhitespace(l);
    if (l.empty()) continue;
    size_t eq = l.find('=');
    if (eq == absl::string_view::npos)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": expected \"name = value\""));
    std::string name(absl::StripAsciiWhitespace(l.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(l.substr(eq + 1)));
    if (!KnownNames().count(name))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": unknown setting \"", name, "\""));
    if (!out.emplace(name, value).second)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": \"", name, "\" given twice"));
  }
  return out;
}

absl::Status ApplySettings(const std::map<std::string, std::string>& settings,
                           Config* cfg) {
  for (const auto& [name, value] : settings) {
    std::string base;
    if (int c = ClusterOf(name, &base); c >= 2) {
      if (cfg->more.size() < static_cast<size_t>(c - 1)) cfg->more.resize(c - 1);
      client::ClusterConfig& m = cfg->more[c - 2];
      if (base == "servers") {
        if (absl::Status st = ParseServers(name, value, &m.servers); !st.ok())
          return st;
      } else {
        (base == "ca" ? m.ca : base == "cert" ? m.cert : m.key) = value;
      }
    } else if (name == "servers") {
      if (absl::Status st = ParseServers(name, value, &cfg->servers); !st.ok())
        return st;
    } else if (name == "ca") {
      cfg->ca = value;
    } else if (name == "cert") {
      cfg->cert = value;
    } else if (name == "key") {
      cfg->key = value;
    } else if (name == "realm") {
      cfg->realm = value;
    } else if (name == "timeout_ms") {
      int v;
      if (!absl::SimpleAtoi(value, &v) || v <= 0)
        return absl::InvalidArgumentError("timeout_ms must be a positive integer");
      cfg->timeout_ms = v;
    } else if (name == "user_ctr_mpc") {
      if (value != "true" && value != "false")
        return absl::InvalidArgumentError("user_ctr_mpc must be true or false");
      cfg->user_ctr_mpc = value == "true";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown setting ", name));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckClusterConfig(const Config& cfg) {
  for (int i = 0; i < 3; ++i)
    if (cfg.servers[i].empty())
      return absl::InvalidArgumentError(
          "no MPC servers configured (--servers=H:P,H:P,H:P or servers = in the config file)");
  if (cfg.ca.empty() || cfg.cert.empty() || cfg.key.empty())
    return absl::InvalidArgumentError(
        "mTLS needs --ca, --cert and --key (or ca/cert/key in the config file)");
  for (size_t c = 0; c < cfg.more.size(); ++c) {
    for (int i = 0; i < 3; ++i)
      if (cfg.more[c].servers[i].empty())
        return absl::InvalidArgumentError(absl::StrCat(
            "cluster ", c + 2, ": no MPC servers configured (servers", c + 2,
            " = H:P,H:P,H:P)"));
  }
  return absl::OkStatus();
}

}  // namespace kmpc::admin
