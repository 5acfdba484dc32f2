// kmpc-admin's subcommands: each one a Command in a file of its own
// (cmd_*.cc), in the table of dispatch.cc. A subcommand declares its own
// options and arguments on its CLI11 App (Register); the dispatcher accepts
// after its name nothing else but the global options (dispatch.h), so an
// option of another subcommand is a usage error before anything runs.
// Also the helpers more than one subcommand uses.
#ifndef KMPC_ADMIN_COMMAND_H_
#define KMPC_ADMIN_COMMAND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "admin/config.h"
#include "admin/kdb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kmpc::admin {

// What a subcommand runs with: the config file's settings under the global
// options, and -q.
struct Context {
  const Config& cfg;
  bool quiet = false;
};

class Command {
 public:
  virtual ~Command() = default;
  // Declares the subcommand's options and arguments on `app`, bound to
  // members of this object, which hold them once the command line is parsed.
  virtual void Register(CLI::App& app) = 0;
  // Runs the subcommand; the exit code: 0 success, 1 failure, 2 usage (a
  // usage error is found before anything changes).
  virtual int Run(const Context& ctx) = 0;
};

// One row of the table of subcommands.
struct CommandSpec {
  const char* name;
  // Its lines of the usage text, after "kmpc-admin [OPTIONS] ".
  const char* usage;
  std::unique_ptr<Command> (*make)();
};

// The rows, one per cmd_*.cc, in the order of the usage text.
extern const CommandSpec kShareCommand;
extern const CommandSpec kStatusCommand;
extern const CommandSpec kPurgeUnreferencedCommand;
extern const CommandSpec kRefreshCommand;
extern const CommandSpec kRewriteKdbCommand;
extern const CommandSpec kDropUserCtrCommand;
extern const CommandSpec kBreakerResetCommand;
extern const CommandSpec kSetKindCommand;
extern const CommandSpec kRebuildPartyCommand;

// "kmpc-admin: MESSAGE" on stderr; 1, the exit code of a failure.
int Fail(const absl::Status& st);

// "kmpc-admin: MESSAGE" (when not empty) and the usage text on stderr; 2,
// the exit code of a usage error.
int Usage(const std::string& msg);

// Lower-case hex of bytes (key ids).
std::string Hex(const std::string& bytes);

// Principals whose keys daemons need in the clear: never shared. The
// master key encrypts the KDB; kadmin/history's key encrypts the password
// history kadm5 keeps (krb5_c_encrypt in kadmind).
bool Unshareable(const std::string& canon);

// kadmind's own service principals: it accepts tickets to them by
// decrypting them in the cluster (krb5 patch 0026-Decrypt-tickets,
// kdc-plugin/dealer/ticket_decrypt.h), which the servers do for a
// service's keys only.
bool KadmindService(const std::string& canon);

// What the KDB holds for a principal, as share and set-kind need to know it.
struct KdbKeyFacts {
  std::vector<std::string> old_ids;  // key ids of its handles, each once
  bool current_is_handle = false;
  bool all_handles = true;
  bool current_is_mpc_key = false;  // an aes*-ctr-mpc key still in the KDB
};
KdbKeyFacts FactsOf(const PrincipalInfo& info);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_COMMAND_H_
