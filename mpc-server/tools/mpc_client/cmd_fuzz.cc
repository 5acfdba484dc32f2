// kmpc-mpc-client fuzz --count=N --seed=S: malformed requests to the three
// servers (with the kdc certificate). --count rounds, each against a
// server the seeded generator picks: random bytes as the body of every
// method, a structured but malformed Run, a malformed Finalize, a Sign of
// pads nobody drew. Every one must fail with a clean status, never hang,
// and no Sign may answer a tag share; the servers must stay healthy.
// Prints "code C: N" per status code seen, then "fuzz ok" (exit 0) or
// "fuzz FAILED" (exit 1), after an "UNEXPECTED ..." line per broken rule.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "contract.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"
#include "tools/mpc_client/command.h"

ABSL_FLAG(int, count, 200, "fuzz: requests per kind");
ABSL_FLAG(int, seed, 1, "fuzz: seed");

namespace kmpc::tools::mpc_client {
namespace {

// The fuzzer's seeded generator and what it saw: the status codes of its
// requests, and how many answers broke the rule (OK to a malformed
// request, a hang, a Sign share).
struct Fuzzer {
  explicit Fuzzer(uint64_t seed) : rng(seed) {}
  Bytes RandomBytes(size_t n) {
    Bytes b(n, '\0');
    for (auto& x : b) x = static_cast<char>(rng());
    return b;
  }
  void ExpectFail(const grpc::Status& s, const std::string& what) {
    codes[s.error_code()]++;
    if (s.ok() || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::printf("UNEXPECTED %s: %d %s\n", what.c_str(), s.error_code(),
                  s.error_message().c_str());
      ++bad;
    }
  }
  std::mt19937_64 rng;
  std::map<int, int> codes;
  int bad = 0;
};

void FuzzDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

// 1. random bytes as the body of every method
void FuzzRandomBodies(Cluster& c, int server, Fuzzer* z) {
  for (const char* method :
       {"/kmpc.v1.KeyOps/Run", "/kmpc.v1.KeyOps/Finalize", "/kmpc.v1.KeyOps/Sign",
        "/kmpc.v1.Admin/PutKey"}) {
    grpc::GenericStub g(c.channel[server]);
    Bytes body = z->RandomBytes(z->rng() % 512);
    grpc::Slice slice(body);
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::ClientContext ctx;
    FuzzDeadline(&ctx);
    std::promise<grpc::Status> done;
    g.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                [&](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    // Random bytes may parse as an (empty or odd) message; any answer but
    // OK or a hang is fine.
    z->codes[s.error_code()]++;
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::printf("UNEXPECTED hang on %s\n", method);
      ++z->bad;
    }
  }
}

// 2. structured but malformed Run requests
void FuzzRun(Cluster& c, int server, Fuzzer* z) {
  auto& rng = z->rng;
  pb::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  int kind = static_cast<int>(rng() % 9);
  req.set_wire_version(kmpc::contract::kWireVersion);
  req.set_batch_id(kind == 0 ? z->RandomBytes(rng() % 15) : z->RandomBytes(16));
  int njobs = kind == 1 ? 0 : 1 + static_cast<int>(rng() % 4);
  for (int j = 0; j < njobs; ++j) {
    pb::Job* job = req.add_jobs();
    job->set_job_id(kind == 2 ? 7 : j);
    job->set_key_id(kind == 3 ? z->RandomBytes(rng() % 40) : z->RandomBytes(32));  // unknown ids
    job->set_cipher(static_cast<pb::Cipher>(rng() % 4));  // 0, 3: malformed
    job->set_usage(static_cast<uint32_t>(rng()));
    int type = kind == 4 ? 5 + static_cast<int>(rng() % 100) : 1 + static_cast<int>(rng() % 4);
    job->set_type(static_cast<pb::JobType>(type));
    job->set_length(kind == 5 ? (1u << 21) : static_cast<uint32_t>(rng() % 64));
    job->set_data(kind == 6 ? z->RandomBytes(rng() % 31) : z->RandomBytes(32 + rng() % 64));
    job->set_checksum(z->RandomBytes(kind == 7 ? 31 : 32));
  }
  if (kind == 8) {  // oversized batch
    req.clear_jobs();
    for (int j = 0; j < 100001; ++j) {
      pb::Job* job = req.add_jobs();
      job->set_job_id(j);
      job->set_type(pb::JOB_ENCRYPT);
      job->set_length(16);
      job->set_cipher(pb::CIPHER_AES128);
      job->set_key_id(Bytes(32, 'k'));
    }
  }
  pb::RunResponse resp;
  grpc::ClientContext ctx;
  FuzzDeadline(&ctx);
  z->ExpectFail(c.keyops[server]->Run(&ctx, req, &resp), absl::StrCat("run kind ", kind));
}

// 3. malformed Finalize
void FuzzFinalize(Cluster& c, int server, Fuzzer* z) {
  auto& rng = z->rng;
  pb::FinalizeRequest f;
  f.set_wire_version(kmpc::contract::kWireVersion);
  f.set_batch_id(z->RandomBytes(rng() % 2 ? 16 : rng() % 20));
  for (int j = 0; j < 1 + static_cast<int>(rng() % 3); ++j) {
    auto* it = f.add_items();
    it->set_run_batch_id(z->RandomBytes(rng() % 2 ? 16 : rng() % 20));
    it->set_job_id(rng());
    it->set_ciphertext(z->RandomBytes(rng() % 64));
  }
  pb::FinalizeResponse fresp;
  grpc::ClientContext fctx;
  FuzzDeadline(&fctx);
  z->ExpectFail(c.keyops[server]->Finalize(&fctx, f, &fresp), "finalize");
}

// 4. Sign of pads nobody drew, malformed items: refused per item (or the
// request as a whole); never a tag share, never a hang.
void FuzzSign(Cluster& c, int server, Fuzzer* z) {
  auto& rng = z->rng;
  pb::SignRequest sg;
  sg.set_wire_version(kmpc::contract::kWireVersion);
  sg.set_request_id(z->RandomBytes(rng() % 4 == 0 ? rng() % 20 : 16));
  for (int j = 0; j < static_cast<int>(rng() % 4); ++j) {
    auto* it = sg.add_items();
    it->set_run_batch_id(z->RandomBytes(rng() % 2 ? 16 : rng() % 20));
    it->set_job_id(rng());
    it->set_usage(static_cast<uint32_t>(rng()));
    it->set_length(static_cast<uint32_t>(rng() % 2 ? rng() % 64 : rng()));
    sg.mutable_data_shares()->append(z->RandomBytes(rng() % 128));
  }
  pb::SignResponse sresp;
  grpc::ClientContext sctx;
  FuzzDeadline(&sctx);
  const grpc::Status sst = c.keyops[server]->Sign(&sctx, sg, &sresp);
  z->codes[sst.error_code()]++;
  bool leaked = false;
  for (const auto& r : sresp.results())
    if (r.status() == pb::JOB_OK) leaked = true;
  if (!sresp.tag_shares().empty()) leaked = true;
  if (sst.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || leaked) {
    std::printf("UNEXPECTED sign: %d %s\n", sst.error_code(), sst.error_message().c_str());
    ++z->bad;
  }
}

}  // namespace

int Fuzz(Cluster& c) {
  Fuzzer z(absl::GetFlag(FLAGS_seed));
  const int count = absl::GetFlag(FLAGS_count);
  for (int n = 0; n < count; ++n) {
    int server = static_cast<int>(z.rng() % 3);
    FuzzRandomBodies(c, server, &z);
    FuzzRun(c, server, &z);
    FuzzFinalize(c, server, &z);
    FuzzSign(c, server, &z);
  }
  for (auto& [code, n] : z.codes) std::printf("code %d: %d\n", code, n);
  std::printf("%s\n", z.bad == 0 ? "fuzz ok" : "fuzz FAILED");
  return z.bad == 0 ? 0 : 1;
}

}  // namespace kmpc::tools::mpc_client
