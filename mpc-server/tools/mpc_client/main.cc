// kmpc-mpc-client: talks to the three MPC servers the way the KDC does, plus
// the admin operations. Used by the tests, the harness and administrators;
// the benchmarks through the same servers are kmpc-mpc-bench's
// (tools/mpc_bench.cc), the code both share tools/cluster_tool.h.
//
//   kmpc-mpc-client --servers=H:P0,H:P1,H:P2 --certs=DIR <command> [args]
//
// A dispatcher: the flags are parsed, the command's cluster opened (with
// the admin certificate for the Admin commands, the kdc one for KeyOps'),
// and the command runs (command.h; one file each, whose header says what
// it takes and prints):
//   put-key delete-key set-kind list-keys health metrics   cmd_keys.cc
//   jobs                                                   cmd_jobs.cc
//   sign                                                   cmd_sign.cc
//   fuzz                                                   cmd_fuzz.cc
//
// Exit codes: 0 success; 2 usage or a local failure; 3 an RPC failure,
// printed as "rpc_error PARTY CODE MESSAGE" (the admin commands too); 4
// shares whose two copies disagree, printed as "share_mismatch" (the
// reason on stderr); 5 (jobs) a server returned keystream it should not;
// 1 (fuzz) a server broke the rule.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tools/cluster_tool.h"
#include "tools/mpc_client/command.h"

ABSL_FLAG(int, only_party, -1,
          "delete-key: delete on this party's server only (tests: a key "
          "store out of step); jobs: send the batch's Run to this party "
          "only (tests: a client that does not reach the other servers), "
          "print \"sent\" when it succeeds");

namespace kmpc::tools::mpc_client {
namespace {

const Command kCommands[] = {
    {"put-key", "admin", PutKey},
    {"delete-key", "admin", DeleteKey},
    {"list-keys", "admin", [](Cluster& c) { return AdminQuery(c, "list-keys"); }},
    {"health", "admin", [](Cluster& c) { return AdminQuery(c, "health"); }},
    {"metrics", "admin", [](Cluster& c) { return AdminQuery(c, "metrics"); }},
    {"set-kind", "admin", SetKind},
    {"jobs", "kdc", Jobs},
    {"sign", "kdc", SignCommand},
    {"fuzz", "kdc", Fuzz},
};

const Command* Find(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace
}  // namespace kmpc::tools::mpc_client

int main(int argc, char** argv) {
  using namespace kmpc::tools;  // NOLINT: the tools' shared helpers
  SetProgramName("kmpc-mpc-client");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() != 2) Die("usage: kmpc-mpc-client [flags] COMMAND (see source header)");
  const std::string name = rest[1];
  const mpc_client::Command* cmd = mpc_client::Find(name);
  if (cmd == nullptr && (name == "bench" || name == "cts-bench"))
    Die(name + " is kmpc-mpc-bench's (mpc_bench.cc)");
  // An unknown name is refused once the cluster flags are read, as a
  // KeyOps command's would be.
  Cluster c(OpenChannels(ConfigFor(cmd != nullptr ? cmd->client : "kdc")));
  if (cmd == nullptr) Die("unknown command " + name);
  return cmd->run(c);
}
