#include "admin/dispatch.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kmpc::admin {
namespace {

constexpr char kGlobalUsage[] =
    "OPTIONS: --config=FILE --servers=H:P,H:P,H:P --ca=PEM --cert=PEM --key=PEM\n"
    "         --servers2=H:P,H:P,H:P --ca2=PEM --cert2=PEM --key2=PEM (a second cluster)\n"
    "         -r REALM | --realm=REALM  --timeout-ms=N  -q | --quiet\n";

// The options that set the config file's settings: (setting, option).
using SettingOptions = std::vector<std::pair<std::string, CLI::Option*>>;

// The global options, valid before and after the subcommand's name.
SettingOptions AddGlobalOptions(CLI::App& app, GlobalOptions* g) {
  app.add_option("--config", g->config);
  app.add_flag("-q,--quiet", g->quiet);
  return {{"servers", app.add_option("--servers")},
          {"ca", app.add_option("--ca")},
          {"cert", app.add_option("--cert")},
          {"key", app.add_option("--key")},
          {"servers2", app.add_option("--servers2")},
          {"ca2", app.add_option("--ca2")},
          {"cert2", app.add_option("--cert2")},
          {"key2", app.add_option("--key2")},
          {"realm", app.add_option("-r,--realm")},
          {"timeout_ms", app.add_option("--timeout-ms")}};
}

// The global options and every subcommand of the table with its own:
// (*commands)[i] holds the options of the table's i-th subcommand.
SettingOptions BuildApp(CLI::App& app, GlobalOptions* g,
                        std::vector<std::unique_ptr<Command>>* commands) {
  // Of an option given twice, the last counts.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Exactly one subcommand: once it is named, no argument names another
  // (a principal called "status" is share's argument).
  app.require_subcommand(1);
  SettingOptions settings = AddGlobalOptions(app, g);
  for (const CommandSpec* spec : CommandTable()) {
    CLI::App* sub = app.add_subcommand(spec->name);
    sub->fallthrough();  // the global options after the subcommand's name too
    commands->push_back(spec->make());
    commands->back()->Register(*sub);
  }
  return settings;
}

// "a", "a and b", "a, b and c".
std::string Listed(const std::vector<std::string>& names) {
  if (names.size() < 2) return absl::StrJoin(names, "");
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "), " and ",
                      names.back());
}

// The subcommands that declare option `opt` ("--dry-run").
std::vector<std::string> OwnersOf(const std::string& opt) {
  std::vector<std::string> out;
  for (const CommandSpec* spec : CommandTable()) {
    const std::vector<std::string> own = OptionsOf(spec->name);
    if (std::find(own.begin(), own.end(), opt) != own.end()) out.push_back(spec->name);
  }
  return out;
}

// CLI11's message for an error of an option, but "--x needs a value" for
// an option given without one ("--x: 1 required TEXT missing").
std::string OptionError(const CLI::ParseError& e) {
  const std::string what = e.what();
  const size_t colon = what.find(':');
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr &&
      colon != std::string::npos && absl::StartsWith(what, "-") &&
      absl::StrContains(what, " required") && absl::EndsWith(what, " missing"))
    return absl::StrCat(what.substr(0, colon), " needs a value");
  return what;
}

// What was wrong with the command line, for the usage error; "" when no
// subcommand was given.
std::string ErrorMessage(CLI::App& app, const CLI::ParseError& e) {
  const std::vector<std::string> rest = app.remaining(true);
  const std::vector<CLI::App*> subs = app.get_subcommands();
  if (subs.empty()) {
    for (const std::string& r : rest)
      if (!absl::StartsWith(r, "-")) return absl::StrCat("unknown command ", r);
    return dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ? "" : OptionError(e);
  }
  const std::string name = subs[0]->get_name();
  for (const std::string& r : rest) {
    if (!absl::StartsWith(r, "-")) continue;
    const std::string opt = r.substr(0, r.find('='));
    const std::vector<std::string> owners = OwnersOf(opt);
    if (owners.empty()) return absl::StrCat(name, ": unknown option ", opt);
    // Its own option, left over: it came before the subcommand's name.
    if (std::find(owners.begin(), owners.end(), name) != owners.end())
      return absl::StrCat(name, ": ", opt, " goes after the subcommand's name");
    return absl::StrCat(name, ": ", opt, " is an option of ", Listed(owners),
                        ", not of ", name);
  }
  if (!rest.empty())
    return absl::StrCat(name, " takes no arguments (", absl::StrJoin(rest, " "), ")");
  return absl::StrCat(name, ": ", OptionError(e));
}

}  // namespace

const std::vector<const CommandSpec*>& CommandTable() {
  static const std::vector<const CommandSpec*> table = {
      &kShareCommand,       &kStatusCommand,       &kPurgeUnreferencedCommand,
      &kRefreshCommand,     &kRewriteKdbCommand,   &kDropUserCtrCommand,
      &kBreakerResetCommand, &kSetKindCommand,     &kRebuildPartyCommand};
  return table;
}

Invocation ParseCommandLine(int argc, const char* const* argv) {
  Invocation inv;
  CLI::App app("kmpc-admin");
  std::vector<std::unique_ptr<Command>> commands;
  const SettingOptions settings = BuildApp(app, &inv.global, &commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    inv.outcome = Invocation::Outcome::kHelp;
    return inv;
  } catch (const CLI::ParseError& e) {
    inv.error = ErrorMessage(app, e);
    return inv;
  }
  for (const auto& [name, option] : settings)
    if (option->count() > 0) inv.global.settings[name] = option->as<std::string>();
  const std::string name = app.get_subcommands().front()->get_name();
  for (size_t i = 0; i < CommandTable().size(); ++i) {
    if (name != CommandTable()[i]->name) continue;
    inv.spec = CommandTable()[i];
    inv.command = std::move(commands[i]);
  }
  inv.outcome = Invocation::Outcome::kRun;
  return inv;
}

std::vector<std::string> OptionsOf(const std::string& name) {
  std::vector<std::string> out;
  for (const CommandSpec* spec : CommandTable()) {
    if (name != spec->name) continue;
    CLI::App app(spec->name);
    std::unique_ptr<Command> command = spec->make();
    command->Register(app);
    for (const CLI::Option* o : app.get_options()) {
      if (o == app.get_help_ptr()) continue;
      for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
      for (const std::string& s : o->get_snames()) out.push_back("-" + s);
    }
  }
  return out;
}

std::string UsageText() {
  std::string out;
  for (const CommandSpec* spec : CommandTable())
    absl::StrAppend(&out, out.empty() ? "usage: " : "       ", "kmpc-admin [OPTIONS] ",
                    spec->usage);
  absl::StrAppend(&out, kGlobalUsage);
  return out;
}

int Usage(const std::string& msg) {
  if (!msg.empty()) std::fprintf(stderr, "kmpc-admin: %s\n", msg.c_str());
  std::fputs(UsageText().c_str(), stderr);
  return 2;
}

absl::StatusOr<Config> LoadConfig(const GlobalOptions& global) {
  Config cfg;
  std::string path = global.config;
  if (path.empty()) {
    if (const char* e = std::getenv("KMPC_ADMIN_CONFIG"); e != nullptr && *e) path = e;
    else if (FILE* f = std::fopen("/etc/kmpc/admin.conf", "r")) {
      std::fclose(f);
      path = "/etc/kmpc/admin.conf";
    }
  }
  if (!path.empty()) {
    auto file = ReadConfigFile(path);
    if (!file.ok()) return file.status();
    if (absl::Status st = ApplySettings(*file, &cfg); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.message()));
  }
  if (absl::Status st = ApplySettings(global.settings, &cfg); !st.ok()) return st;
  return cfg;
}

}  // namespace kmpc::admin
