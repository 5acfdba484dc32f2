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
  static const std::set<std::string> names = {"servers", "ca", "cert", "key",
                                              "realm", "timeout_ms"};
  return names;
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
    if (name == "servers") {
      std::vector<std::string> s = absl::StrSplit(value, ',', absl::SkipWhitespace());
      if (s.size() != 3)
        return absl::InvalidArgumentError(
            "servers needs three HOST:PORT addresses (parties 0, 1, 2)");
      for (int i = 0; i < 3; ++i) cfg->servers[i] = std::string(absl::StripAsciiWhitespace(s[i]));
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
  return absl::OkStatus();
}

}  // namespace kmpc::admin
