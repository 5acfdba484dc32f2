// kmpc-admin refresh (--all | KEYID_HEX...): re-randomises the shares of
// the given keys, or of every key the KDB's handles name, on the servers
// (admin/refresh.h; on the KDC host).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/refresh.h"

namespace kmpc::admin {
namespace {

class RefreshCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_flag("--all", all_);
    app.add_option("KEYID_HEX", key_ids_);
  }
  int Run(const Context& ctx) override {
    auto clusters = Clusters::Connect(ctx.cfg);
    if (!clusters.ok()) return Fail(clusters.status());
    return RunRefreshCommand(**clusters, ctx.cfg.realm, key_ids_, all_, ctx.quiet);
  }

 private:
  bool all_ = false;
  std::vector<std::string> key_ids_;
};

std::unique_ptr<Command> MakeRefresh() { return std::make_unique<RefreshCommand>(); }

}  // namespace

const CommandSpec kRefreshCommand = {
    "refresh", "refresh (--all | KEYID_HEX...)  (admin/refresh.h)\n", MakeRefresh};

}  // namespace kmpc::admin
