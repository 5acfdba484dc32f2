#include "tools/cluster_tool.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "contract.h"
#include "util/hex.h"

ABSL_FLAG(std::string, servers, "", "gRPC addresses of parties 0,1,2");
ABSL_FLAG(std::string, certs, "", "directory from deploy/gen-certs.sh");
ABSL_FLAG(std::string, client, "",
          "client certificate name in --certs (default: kdc for jobs and the "
          "benchmarks, admin for admin commands)");
ABSL_FLAG(std::string, cipher, "aes128",
          "the key's cipher (put-key, the benchmarks); jobs: the cipher of a "
          "job line without one (aes128 or aes256)");
ABSL_FLAG(int, timeout_ms, 30000, "deadline of each RPC");

namespace kmpc::tools {
namespace {
const char* program_name = "kmpc-mpc-client";
}  // namespace

void SetProgramName(const char* name) { program_name = name; }

void Die(const std::string& msg, int code) {
  std::fprintf(stderr, "%s: %s\n", program_name, msg.c_str());
  std::exit(code);
}

bool FromHex(absl::string_view hex, Bytes* out) {
  return kmpc::util::HexToBytes(hex, out);
}
std::string ToHex(absl::string_view b) { return absl::BytesToHexString(b); }

Bytes RandomBytes(size_t n) {
  Bytes b(n, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(b.data()), n);
  return b;
}

// The three servers' pinned channels (client/channels.h) with the client
// certificate `name` of --certs (default: `default_client`).
client::ClusterConfig ConfigFor(const std::string& default_client) {
  std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
  if (servers.size() != 3) Die("--servers needs three addresses");
  std::string dir = absl::GetFlag(FLAGS_certs);
  if (dir.empty()) Die("--certs is required");
  std::string name = absl::GetFlag(FLAGS_client);
  if (name.empty()) name = default_client;
  client::ClusterConfig cfg;
  for (int i = 0; i < 3; ++i) cfg.servers[i] = servers[i];
  cfg.ca = dir + "/ca.pem";
  cfg.cert = dir + "/" + name + ".pem";
  cfg.key = dir + "/" + name + ".key";
  cfg.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  return cfg;
}

client::ClusterChannels OpenChannels(const client::ClusterConfig& cfg) {
  client::ChannelOptions o;
  // Up to 3 s for the three connections before the first call (see
  // ChannelOptions::connect_wait: a transient failure of the first
  // connection is retried instead of failing the command; a party that is
  // down, or refuses us, still fails the call, after this wait).
  o.connect_wait = absl::Milliseconds(
      std::min<int64_t>(3000, absl::GetFlag(FLAGS_timeout_ms)));
  auto ch = client::ClusterChannels::Open(cfg, o);
  if (!ch.ok()) Die(std::string(ch.status().message()));
  return std::move(*ch);
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
}

// Run on the three servers at once through the async API (no thread per
// call: this is on the latency path the benchmark measures).
// Party i gets reqs[i] (the copies differ in the message shares only).
std::array<grpc::Status, 3> RunOnAll(Cluster& c,
                                     const std::array<pb::RunRequest, 3>& reqs,
                                     std::array<pb::RunResponse, 3>* resp) {
  grpc::CompletionQueue cq;
  std::array<grpc::ClientContext, 3> ctx;
  std::array<grpc::Status, 3> st;
  std::array<std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RunResponse>>, 3> rpc;
  // Followers first: party 0 proposes the batch as soon as its copy
  // arrives, and the followers then need theirs already.
  for (int i : {2, 1, 0}) {
    SetDeadline(&ctx[i]);
    rpc[i] = c.keyops[i]->AsyncRun(&ctx[i], reqs[i], &cq);
    rpc[i]->Finish(&(*resp)[i], &st[i], reinterpret_cast<void*>(intptr_t{i}));
  }
  for (int n = 0; n < 3; ++n) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok)) break;
  }
  return st;
}

std::array<grpc::Status, 3> RunOnAll(Cluster& c, const pb::RunRequest& req,
                                     std::array<pb::RunResponse, 3>* resp) {
  return RunOnAll(c, {req, req, req}, resp);
}

// Deals `data` afresh (client::DealRandom, DealFlat) into the three
// parties' flat share buffers (kmpc.proto, "Shares travel flat").
void DealInto(const Bytes& data, const std::array<std::string*, 3>& flat) {
  client::DealRandom r;
  absl::Status st = r.Draw(data.size());
  if (st.ok())
    st = client::DealFlat(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size()),
        r.Take(data.size()), flat);
  if (!st.ok()) Die(std::string(st.message()));
}

// The three servers' copies of a request: a CHECKSUM or VERIFY_CHECKSUM
// job's message (`messages[k]` for job k) dealt afresh as replicated shares
// (DealInto), so no server receives it (enctype.md, invariant 5).
std::array<pb::RunRequest, 3> DealRequests(const pb::RunRequest& req,
                                           const std::vector<Bytes>& messages) {
  std::array<pb::RunRequest, 3> out = {req, req, req};
  for (int k = 0; k < req.jobs_size(); ++k) {
    const pb::Job& j = req.jobs(k);
    if (kmpc::contract::SharedBytes(j.type(), j.cipher(), j.length()) == 0) continue;
    DealInto(messages[k], {out[0].mutable_data_shares(), out[1].mutable_data_shares(),
                           out[2].mutable_data_shares()});
  }
  return out;
}

void WipeRequests(std::array<pb::RunRequest, 3>& reqs) {
  for (auto& r : reqs) {
    std::string* f = r.mutable_data_shares();
    OPENSSL_cleanse(f->data(), f->size());
  }
}

// From the response's flat buffers (kmpc.proto RunResponse.ctr0s,
// .shares); `extra` flags a value the server should not have sent, e.g. a
// failed DECRYPT's keystream.
RunView ViewRun(const pb::RunRequest& req, const pb::RunResponse& r) {
  RunView v;
  const int n = std::min(req.jobs_size(), r.results_size());
  v.ctr0.resize(n);
  v.value.resize(n);
  kmpc::contract::FlatReader c(r.ctr0s()), s(r.shares());
  for (int k = 0; k < n; ++k) {
    const pb::Job& j = req.jobs(k);
    const pb::JobStatus st = r.results(k).status();
    if (kmpc::contract::ResultHasCtr0(kmpc::contract::ShapeOf(j), st))
      v.ctr0[k] = Bytes(c.Take(16));
    const uint64_t len = kmpc::contract::RevealedShareBytes(kmpc::contract::ShapeOf(j), st);
    if (len == 0) continue;
    const kmpc::contract::MessageShares m = s.TakePair(len);
    v.value[k] = {m.first, m.second};
  }
  v.extra = c.left() > 0 || s.left() > 0;
  return v;
}

// Wipes the keystream and tag shares of the three Run responses (the
// RunViews into them are dead after this).
void WipeRunShares(std::array<pb::RunResponse, 3>& resp) {
  for (auto& r : resp) {
    std::string* s = r.mutable_shares();
    OPENSSL_cleanse(s->data(), s->size());
  }
}

void RpcError(int party, int code, absl::string_view message) {
  std::printf("rpc_error %d %d %.*s\n", party, code,
              static_cast<int>(message.size()), message.data());
  std::fflush(stdout);
  std::exit(3);
}

void CheckRpcs(const std::array<grpc::Status, 3>& st) {
  for (int i = 0; i < 3; ++i)
    if (!st[i].ok()) RpcError(i, st[i].error_code(), st[i].error_message());
}

// The library's statuses (grpc::StatusCode and absl::StatusCode share
// their values).
void CheckEach(const std::array<absl::Status, 3>& st) {
  for (int i = 0; i < 3; ++i)
    if (!st[i].ok()) RpcError(i, static_cast<int>(st[i].code()), st[i].message());
}

void ShareMismatch(const absl::Status& why) {
  std::fprintf(stderr, "%s: %s\n", program_name, std::string(why.message()).c_str());
  std::printf("share_mismatch\n");
  std::fflush(stdout);
  std::exit(4);
}

// The value the three servers' share pairs reveal (client::Reveal: both
// copies of every share must agree); exits with share_mismatch otherwise.
Bytes RevealOrDie(const std::array<client::ShareView, 3>& s, absl::string_view what) {
  Bytes v(s[0].first.size(), '\0');
  absl::Status st = client::Reveal(
      s, absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()), v.size()), what);
  if (!st.ok()) ShareMismatch(st);
  return v;
}

Bytes Xor(absl::string_view a, absl::string_view b) {
  Bytes o(a);
  for (size_t i = 0; i < o.size() && i < b.size(); ++i) o[i] ^= b[i];
  return o;
}

}  // namespace kmpc::tools
