// kmpc-admin rebuild-party [--cluster=N] 0|1|2: gives a replaced (new,
// empty) server of cluster N (1 by default) its shares of every key from
// the two others, without reconstructing any key (admin/refresh.h;
// docs/admin-guide.md, "Replacing a lost server").
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/refresh.h"

namespace kmpc::admin {
namespace {

class RebuildPartyCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_option("--cluster", cluster_);
    app.add_option("PARTY", party_);
  }
  int Run(const Context& ctx) override {
    if (party_.size() != 1 || (party_[0] != "0" && party_[0] != "1" && party_[0] != "2"))
      return Usage("rebuild-party takes one party index: 0, 1 or 2");
    auto clusters = Clusters::Connect(ctx.cfg);
    if (!clusters.ok()) return Fail(clusters.status());
    int c = 1;
    if ((!cluster_.empty() && !absl::SimpleAtoi(cluster_, &c)) || c < 1 ||
        c > static_cast<int>((*clusters)->size()))
      return Usage(absl::StrCat("--cluster must be 1 to ", (*clusters)->size()));
    return RunRefreshCommand(**clusters, ctx.cfg.realm, {}, false, ctx.quiet,
                             party_[0][0] - '0', c - 1);
  }

 private:
  std::string cluster_;  // empty: cluster 1
  std::vector<std::string> party_;
};

std::unique_ptr<Command> MakeRebuildParty() {
  return std::make_unique<RebuildPartyCommand>();
}

}  // namespace

const CommandSpec kRebuildPartyCommand = {
    "rebuild-party",
    "rebuild-party [--cluster=N] 0|1|2\n"
    "           give a replaced (new, empty) server its shares of every key from\n"
    "           the two others; no key is reconstructed (docs/admin-guide.md: "
    "replacing a lost server)\n",
    MakeRebuildParty};

}  // namespace kmpc::admin
