// kmpc-admin drop-user-ctr (--all | PRINC...) [--dry-run] [--grace-ms=N]
// (on the KDC host): removes users' aes*-ctr-mpc key handles where an
// aes*-cts handle of the same password is held (admin/user_ctr.h).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/kdb.h"
#include "admin/user_ctr.h"

namespace kmpc::admin {
namespace {

class DropUserCtrCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_flag("--all", o_.all);
    app.add_flag("--dry-run", o_.dry_run);
    app.add_option("--grace-ms", grace_ms_);
    app.add_option("PRINC", o_.principals);
  }
  int Run(const Context& ctx) override {
    if (o_.all == !o_.principals.empty())
      return Usage("drop-user-ctr takes --all or principals");
    if (!grace_ms_.empty()) {
      int ms = 0;
      if (!absl::SimpleAtoi(grace_ms_, &ms) || ms < 0)
        return Usage("--grace-ms needs a number");
      o_.grace = absl::Milliseconds(ms);
    }
    auto clusters = Clusters::Connect(ctx.cfg);
    if (!clusters.ok()) return Fail(clusters.status());
    auto kdb = Kdb::Open(ctx.cfg.realm);
    if (!kdb.ok()) return Fail(kdb.status());
    return DropUserCtr(**clusters, **kdb, o_);
  }

 private:
  DropUserCtrOptions o_;
  std::string grace_ms_;  // empty: o_.grace's default
};

std::unique_ptr<Command> MakeDropUserCtr() {
  return std::make_unique<DropUserCtrCommand>();
}

}  // namespace

const CommandSpec kDropUserCtrCommand = {
    "drop-user-ctr",
    "drop-user-ctr (--all | PRINC...) [--dry-run]\n"
    "                  [--grace-ms=N]\n"
    "           remove users' aes*-ctr-mpc key handles where an aes*-cts handle\n"
    "           of the same password is held; name those that need a new password\n",
    MakeDropUserCtr};

}  // namespace kmpc::admin
