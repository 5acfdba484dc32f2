// What kmpc-mpc-client (mpc_client/) and kmpc-mpc-bench (mpc_bench.cc)
// share: the flags that name the cluster, the three servers' channels and
// stubs, a Run dealt, sent to the three servers and read back, and the
// checks whose failure ends the program with its documented exit code
// (2: usage or a local failure, 3: an RPC failure printed as "rpc_error
// PARTY CODE MESSAGE", 4: "share_mismatch").
#ifndef KMPC_TOOLS_CLUSTER_TOOL_H_
#define KMPC_TOOLS_CLUSTER_TOOL_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/admin_client.h"
#include "client/channels.h"
#include "client/reveal.h"
#include "kmpc.grpc.pb.h"

ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(std::string, certs);
ABSL_DECLARE_FLAG(std::string, client);
ABSL_DECLARE_FLAG(std::string, cipher);
ABSL_DECLARE_FLAG(int, timeout_ms);

namespace kmpc::tools {

namespace pb = ::kmpc::v1;
using Bytes = std::string;

// The name Die and ShareMismatch print before their message (main sets it).
void SetProgramName(const char* name);
// Prints "PROGRAM: msg" on stderr and exits with `code`.
[[noreturn]] void Die(const std::string& msg, int code = 2);

// Even-length hex into out; false on anything else.
bool FromHex(absl::string_view hex, Bytes* out);
std::string ToHex(absl::string_view b);
Bytes RandomBytes(size_t n);

// The three servers' pinned channels (client/channels.h) with the client
// certificate --client of --certs (default: `default_client`).
client::ClusterConfig ConfigFor(const std::string& default_client);
client::ClusterChannels OpenChannels(const client::ClusterConfig& cfg);

// The three servers' KeyOps stubs and the Admin client over one set of
// channels.
struct Cluster {
  explicit Cluster(client::ClusterChannels ch) : admin(ch) {
    for (int i = 0; i < 3; ++i) {
      channel[i] = ch.channel(i);
      keyops[i] = pb::KeyOps::NewStub(channel[i]);
    }
  }
  std::array<std::shared_ptr<grpc::Channel>, 3> channel;
  std::array<std::unique_ptr<pb::KeyOps::Stub>, 3> keyops;
  client::AdminClient admin;
};

// --timeout_ms from now.
void SetDeadline(grpc::ClientContext* ctx);

// Runs f(i) for the three servers in parallel.
template <typename F>
std::array<grpc::Status, 3> OnAll(F f) {
  std::array<std::future<grpc::Status>, 3> fs;
  for (int i = 0; i < 3; ++i) fs[i] = std::async(std::launch::async, f, i);
  std::array<grpc::Status, 3> st;
  for (int i = 0; i < 3; ++i) st[i] = fs[i].get();
  return st;
}

// Run on the three servers at once, party i getting reqs[i] (the copies
// differ in the message shares only); or the same request on all three.
std::array<grpc::Status, 3> RunOnAll(Cluster& c, const std::array<pb::RunRequest, 3>& reqs,
                                     std::array<pb::RunResponse, 3>* resp);
std::array<grpc::Status, 3> RunOnAll(Cluster& c, const pb::RunRequest& req,
                                     std::array<pb::RunResponse, 3>* resp);

// Deals `data` afresh into the three parties' flat share buffers.
void DealInto(const Bytes& data, const std::array<std::string*, 3>& flat);
// The three servers' copies of a request, the jobs' messages dealt.
std::array<pb::RunRequest, 3> DealRequests(const pb::RunRequest& req,
                                           const std::vector<Bytes>& messages);
void WipeRequests(std::array<pb::RunRequest, 3>& reqs);

// One party's Run response read back per result (mpc_client/cmd_jobs.cc's
// jobs, mpc_bench.cc's keystream check): result k's ctr0 (empty: none) and
// its two shares, views into the response (which must outlive the view).
// `extra`: bytes beyond what the results take.
struct RunView {
  std::vector<Bytes> ctr0;
  std::vector<client::ShareView> value;
  bool extra = false;
};
RunView ViewRun(const pb::RunRequest& req, const pb::RunResponse& r);
// Wipes the shares of the three Run responses (their RunViews die).
void WipeRunShares(std::array<pb::RunResponse, 3>& resp);

// "rpc_error PARTY CODE MESSAGE" on stdout, exit 3.
[[noreturn]] void RpcError(int party, int code, absl::string_view message);
void CheckRpcs(const std::array<grpc::Status, 3>& st);
void CheckEach(const std::array<absl::Status, 3>& st);
// "share_mismatch" on stdout (the reason on stderr), exit 4.
[[noreturn]] void ShareMismatch(const absl::Status& why);
// The value the three servers' share pairs reveal, or ShareMismatch.
Bytes RevealOrDie(const std::array<client::ShareView, 3>& s, absl::string_view what);
Bytes Xor(absl::string_view a, absl::string_view b);

}  // namespace kmpc::tools

#endif  // KMPC_TOOLS_CLUSTER_TOOL_H_
