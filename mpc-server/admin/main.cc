// kmpc-admin: moves principals' long-term keys into the MPC cluster and
// looks after them there. A dispatcher: the command line is parsed by
// dispatch.h (global options, one subcommand of the table, only that
// subcommand's options), the settings are read (config.h), and the
// subcommand runs (command.h; one file each):
//   share               cmd_share.cc           keys into the cluster
//   status              cmd_status.cc          servers, keys, the KDB
//   purge-unreferenced  cmd_purge_unreferenced.cc
//   refresh             cmd_refresh.cc         (refresh.h)
//   rewrite-kdb         cmd_rewrite_kdb.cc     (kdb_rewrite.h)
//   drop-user-ctr       cmd_drop_user_ctr.cc   (user_ctr.h)
//   breaker-reset       cmd_breaker_reset.cc
//   set-kind            cmd_set_kind.cc
//   rebuild-party       cmd_rebuild_party.cc   (refresh.h)
//
// Exit codes: 0 success, 1 failure (the message says which server or which
// principal), 2 usage (nothing was done).
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

#include "admin/command.h"
#include "admin/dispatch.h"

int main(int argc, char** argv) {
  using namespace kmpc::admin;
  // Never write a key (a password, a KDB key, the dealt shares) to a core
  // dump: no core file, and not dumpable (no ptrace by our uid either).
  {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
      std::perror("kmpc-admin: cannot disable core dumps");
      return 1;
    }
  }
  // Our own messages name the server and the cause; gRPC's internal log
  // lines would only repeat them (GRPC_VERBOSITY=ERROR brings them back).
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  Invocation inv = ParseCommandLine(argc, argv);
  if (inv.outcome == Invocation::Outcome::kHelp) {
    std::fputs(UsageText().c_str(), stdout);
    return 0;
  }
  if (inv.outcome == Invocation::Outcome::kUsage) return Usage(inv.error);
  auto cfg = LoadConfig(inv.global);
  if (!cfg.ok()) return Fail(cfg.status());
  return inv.command->Run(Context{*cfg, inv.global.quiet});
}
