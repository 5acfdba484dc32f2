// kmpc-admin rewrite-kdb (on the KDC host): rewrites the KDB into fresh
// files (admin/kdb_rewrite.h: kdb5_util dump and load, the iprop update
// log's old entries zeroed), as share does after it replaced real keys;
// e.g. after kmpc-kdb-handle set or kadmin changes that replaced real keys.
#include <CLI/CLI.hpp>
#include <memory>

#include "admin/command.h"
#include "admin/kdb.h"
#include "admin/kdb_rewrite.h"

namespace kmpc::admin {
namespace {

class RewriteKdbCommand : public Command {
 public:
  void Register(CLI::App& app) override {}
  int Run(const Context& ctx) override {
    auto kdb = Kdb::Open(ctx.cfg.realm);
    if (!kdb.ok()) return Fail(kdb.status());
    return RewriteKdbAfterMove(std::move(*kdb), "rewrite-kdb") ? 0 : 1;
  }
};

std::unique_ptr<Command> MakeRewriteKdb() { return std::make_unique<RewriteKdbCommand>(); }

}  // namespace

const CommandSpec kRewriteKdbCommand = {
    "rewrite-kdb",
    "rewrite-kdb\n"
    "           rewrite the KDB into fresh files (kdb5_util dump and load), so\n"
    "           that no file holds keys replaced by handles (share does it itself)\n",
    MakeRewriteKdb};

}  // namespace kmpc::admin
