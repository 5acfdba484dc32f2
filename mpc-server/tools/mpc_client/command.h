// kmpc-mpc-client's commands: each a function over the cluster (Cluster,
// tools/cluster_tool.h) in a file of its own, in main.cc's table. A
// command reads its own flags (ABSL_FLAG in its file); the flags more than
// one command reads are main.cc's, declared here. Also the Sign helpers
// the `jobs` batches (sign jobs) and the `sign` command share
// (cmd_sign.cc): every message is dealt as fresh shares (client::DealFlat),
// no server receives it.
#ifndef KMPC_TOOLS_MPC_CLIENT_COMMAND_H_
#define KMPC_TOOLS_MPC_CLIENT_COMMAND_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "tools/cluster_tool.h"

ABSL_DECLARE_FLAG(int, only_party);

namespace kmpc::tools::mpc_client {

// One row of main.cc's table.
struct Command {
  const char* name;
  // The client certificate of --certs it uses unless --client names one:
  // "admin" (the Admin service's commands) or "kdc" (KeyOps').
  const char* client;
  int (*run)(Cluster& c);
};

// cmd_keys.cc: put-key, delete-key, set-kind; health, metrics, list-keys
// (AdminQuery, by `cmd`).
int PutKey(Cluster& c);
int DeleteKey(Cluster& c);
int SetKind(Cluster& c);
int AdminQuery(Cluster& c, const std::string& cmd);
// cmd_jobs.cc: one batch of jobs from stdin.
int Jobs(Cluster& c);
// cmd_sign.cc: a Sign of one pad drawn earlier.
int SignCommand(Cluster& c);
// cmd_fuzz.cc: malformed requests.
int Fuzz(Cluster& c);

// One item of a Sign request: the PAD job's run batch id and job id, the
// usage, the message and, for a verify item, the tag presented.
struct SignJob {
  Bytes run_batch_id;
  uint64_t job_id;
  uint32_t usage;
  Bytes data;
  Bytes verify_tag = {};
};
// One SignRequest per server for the items, each message dealt afresh.
std::array<pb::SignRequest, 3> SignRequests(const std::vector<SignJob>& items);
// Sends reqs[i] to server i (those in `to`); wipes the shares after.
std::array<grpc::Status, 3> SignOnAll(Cluster& c, std::array<pb::SignRequest, 3>& reqs,
                                      std::array<pb::SignResponse, 3>* resp,
                                      std::array<bool, 3> to = {true, true, true});
// tag = t_0 ^ t_1 ^ t_2 of result k, or the reason it cannot be combined
// (kDataLoss: too few results, or a tag share of the wrong length;
// kFailedPrecondition: a server did not sign, the three JobStatus names).
absl::StatusOr<Bytes> CombineSign(const std::array<pb::SignResponse, 3>& r, int k);

}  // namespace kmpc::tools::mpc_client

#endif  // KMPC_TOOLS_MPC_CLIENT_COMMAND_H_
