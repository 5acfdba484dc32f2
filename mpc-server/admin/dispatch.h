// kmpc-admin's command line: the global options (anywhere on the line),
// one subcommand of the table (command.h) and that subcommand's own
// options and arguments, parsed with CLI11. An option the subcommand does
// not declare, another subcommand's included, is a usage error, found
// before any setting is read or any server or KDB is touched.
//
//   kmpc-admin [OPTIONS] SUBCOMMAND [ITS OPTIONS] [ITS ARGUMENTS]
//   OPTIONS: --config=FILE --servers=H:P,H:P,H:P --ca=PEM --cert=PEM
//            --key=PEM (--servers2 --ca2 --cert2 --key2: a second cluster)
//            -r REALM | --realm=REALM   --timeout-ms=N   -q | --quiet
//            -h | --help
// Each option takes its value as --opt=value or --opt value. The cluster
// options override the config file's settings of the same name (config.h),
// which is --config's, else KMPC_ADMIN_CONFIG's, else /etc/kmpc/admin.conf
// when it exists.
#ifndef KMPC_ADMIN_DISPATCH_H_
#define KMPC_ADMIN_DISPATCH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "admin/command.h"
#include "admin/config.h"

namespace kmpc::admin {

struct GlobalOptions {
  std::string config;                           // --config
  std::map<std::string, std::string> settings;  // as the config file names them
  bool quiet = false;                           // -q
};

struct Invocation {
  enum class Outcome { kRun, kHelp, kUsage };
  Outcome outcome = Outcome::kUsage;
  std::string error;                  // kUsage: what is wrong ("": no subcommand)
  const CommandSpec* spec = nullptr;  // kRun: the subcommand
  std::unique_ptr<Command> command;   // kRun: with its options parsed
  GlobalOptions global;
};

// The table of subcommands, in the order of the usage text.
const std::vector<const CommandSpec*>& CommandTable();

// Parses argv (argv[0] is the program). Prints nothing.
Invocation ParseCommandLine(int argc, const char* const* argv);

// The long options subcommand `name` declares ("--dry-run", ...), without
// the global ones; empty for an unknown name.
std::vector<std::string> OptionsOf(const std::string& name);

// kmpc-admin's usage text (every subcommand, then the global options).
std::string UsageText();

// The settings: the config file's (see above), under the global options.
absl::StatusOr<Config> LoadConfig(const GlobalOptions& global);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_DISPATCH_H_
