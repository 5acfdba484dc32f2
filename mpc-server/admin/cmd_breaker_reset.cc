// kmpc-admin breaker-reset [--cluster=N]
//
// breaker-reset: closes the deviation breaker of every server of the
//   cluster (--cluster=N, default every cluster), through the authenticated
//   Admin.ResetBreaker; prints what each cleared. Rotate the keys first
//   (docs/admin-guide.md, "A detected deviation").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "client/admin_client.h"

namespace kmpc::admin {
namespace {

using client::AdminClient;

// breaker-reset: Admin.ResetBreaker on every server of the chosen
// clusters. Exit 0 when every server answered.
int BreakerReset(const std::string& cluster_arg, const Config& cfg) {
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  int only = 0;  // 0: every cluster
  if (!cluster_arg.empty() &&
      (!absl::SimpleAtoi(cluster_arg, &only) || only < 1 ||
       only > static_cast<int>((*clusters)->size())))
    return Usage(absl::StrCat("--cluster must be 1 to ", (*clusters)->size()));
  bool ok = true;
  for (size_t c = 0; c < (*clusters)->size(); ++c) {
    if (only != 0 && static_cast<int>(c) + 1 != only) continue;
    AdminClient& cluster = (*clusters)->at(c);
    auto r = cluster.ResetBreaker();
    for (int i = 0; i < 3; ++i) {
      const std::string who = (*clusters)->Prefix(c) + cluster.Describe(i);
      if (!r[i].ok()) {
        ok = false;
        std::printf("ERROR: %s\n", std::string(r[i].status().message()).c_str());
      } else if (r[i]->was_open()) {
        std::printf("%s: breaker cleared (was %s)\n", who.c_str(), r[i]->detail().c_str());
      } else {
        std::printf("%s: breaker was closed\n", who.c_str());
      }
    }
  }
  return ok ? 0 : 1;
}

class BreakerResetCommand : public Command {
 public:
  void Register(CLI::App& app) override { app.add_option("--cluster", cluster_); }
  int Run(const Context& ctx) override { return BreakerReset(cluster_, ctx.cfg); }

 private:
  std::string cluster_;  // empty: every cluster
};

std::unique_ptr<Command> MakeBreakerReset() {
  return std::make_unique<BreakerResetCommand>();
}

}  // namespace

const CommandSpec kBreakerResetCommand = {
    "breaker-reset",
    "breaker-reset [--cluster=N]\n"
    "           close the servers' deviation breakers (after rotating the keys:\n"
    "           docs/admin-guide.md, a detected deviation)\n",
    MakeBreakerReset};

}  // namespace kmpc::admin
