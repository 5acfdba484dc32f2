// kmpc-mpc-bench: figures of the three MPC servers through KeyOps.Run, as
// the KDC drives them (make bench-mpc, integration-tests/bench/), over the
// code it shares with kmpc-mpc-client (tools/cluster_tool.h).
//
//   kmpc-mpc-bench --servers=H:P0,H:P1,H:P2 --certs=DIR <command> [args]
//
// commands (each puts a fresh random key with the admin certificate first)
//   keystream --blocks=N --threads=T --iters=K --cipher=aes128|aes256
//         [--warmup_blocks=W --job_blocks=J --chunk_lanes=L]
//                   ENCRYPT batches of N keystream blocks, T in flight,
//                   after one warm-up batch (of W blocks) whose keystream
//                   shares are checked;
//                   prints a JSON record line prefixed "RESULT ".
//   cts --iters=K --cipher=aes128-cts|aes256-cts [--reply_bytes=N]
//                   K logins of an aes*-cts user, one Run each (timestamp
//                   DECRYPT, gated reply ENCRYPT); prints "RESULT {...}"
//                   with ANDs and rounds per login and latency p50/p99.
// An RPC failure prints "rpc_error PARTY CODE MESSAGE" and exits 3; shares
// whose two copies disagree print "share_mismatch", exit 4.
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admin_client.h"
#include "contract.h"
#include "cts/cts.h"
#include "cts/dealer.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"

ABSL_FLAG(int, blocks, 128, "keystream: keystream blocks per batch");
ABSL_FLAG(int, threads, 1, "keystream: batches in flight");
ABSL_FLAG(int, iters, 5, "keystream: batches per thread; cts: logins");
ABSL_FLAG(int, job_blocks, 1024, "keystream: largest ENCRYPT job in blocks");
ABSL_FLAG(int, warmup_blocks, 0,
          "keystream: blocks of the warm-up batch (0: --blocks); a small one saves a "
          "long batch where each takes seconds (--security=malicious)");
ABSL_FLAG(int, chunk_lanes, 4096, "keystream: the servers' --chunk_lanes (for rounds)");
ABSL_FLAG(int, reply_bytes, 300, "cts: the reply's plaintext bytes");

namespace {

using namespace ::kmpc::tools;  // NOLINT: the tools' shared helpers

// The benchmark's key: a fresh random key of `key_len` bytes put on the
// three servers with the admin certificate; returns its id.
Bytes PutBenchKey(size_t key_len) {
  Bytes key = RandomBytes(key_len);
  auto cid = key_len == 16 ? kmpc::engine::Cipher::kAes128 : kmpc::engine::Cipher::kAes256;
  Bytes kid = RandomBytes(kmpc::contract::kKeyIdSize);
  // Admin path with the admin certificate.
  kmpc::client::AdminClient admin(OpenChannels(ConfigFor("admin")));
  std::array<absl::Status, 3> each;
  // A random key, a service's: under a user's aes*-ctr-mpc key the servers
  // run an AS exchange only (engine/user_key_rule.h), no keystream job.
  kmpc::client::KeyMeta meta{kid, 0, "", false};
  meta.kind = kmpc::KeyKind::kService;
  absl::Status st = admin.PutKey(
      cid, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()),
      meta, &each);
  OPENSSL_cleanse(key.data(), key.size());
  if (!st.ok()) {
    CheckEach(each);
    Die(std::string(st.message()));
  }
  return kid;
}

// A Run of ENCRYPT jobs under key `kid` for n keystream blocks, in jobs of
// at most --job_blocks blocks.
pb::RunRequest BenchRequest(const Bytes& kid, size_t key_len, int n) {
  const int job_blocks = std::max(1, absl::GetFlag(FLAGS_job_blocks));
  pb::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  uint64_t id = 0;
  for (int left = n; left > 0; left -= job_blocks) {
    pb::Job* j = req.add_jobs();
    j->set_job_id(id++);
    j->set_key_id(kid);
    j->set_cipher(key_len == 16 ? pb::CIPHER_AES128 : pb::CIPHER_AES256);
    j->set_type(pb::JOB_ENCRYPT);
    j->set_usage(1);
    j->set_length(16 * std::min(left, job_blocks));
  }
  return req;
}

// One benchmark batch's figures.
struct BenchSample {
  double latency_ms;
  double server_ms;  // party 0: scheduling handshake + MPC
  std::array<uint64_t, 3> bytes, tcp, msgs;
};

// Runs one batch of `proto` (a fresh batch id); with `check`, reveals its
// keystream shares (share_mismatch unless they agree).
BenchSample BenchBatch(Cluster& c, const pb::RunRequest& proto, bool check) {
  pb::RunRequest req = proto;
  req.set_batch_id(RandomBytes(16));
  req.set_wire_version(kmpc::contract::kWireVersion);
  std::array<pb::RunResponse, 3> resp;
  absl::Time t0 = absl::Now();
  CheckRpcs(RunOnAll(c, req, &resp));
  BenchSample s;
  s.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  s.server_ms = resp[0].stats().compute_us() / 1000.0;
  for (int i = 0; i < 3; ++i) {
    s.bytes[i] = resp[i].stats().ring_bytes_sent();
    s.tcp[i] = resp[i].stats().tcp_bytes_sent();
    s.msgs[i] = resp[i].stats().ring_messages();
  }
  if (check) {
    std::array<RunView, 3> u = {ViewRun(req, resp[0]), ViewRun(req, resp[1]),
                                ViewRun(req, resp[2])};
    for (int k = 0; k < req.jobs_size(); ++k) {
      Bytes v = RevealOrDie({u[0].value[k], u[1].value[k], u[2].value[k]},
                            absl::StrCat("keystream of job ", k));
      OPENSSL_cleanse(v.data(), v.size());
    }
    WipeRunShares(resp);
  }
  return s;
}

// Prints the "RESULT {...}" line of the samples, taken over `secs`.
void PrintBenchResult(const std::vector<std::vector<BenchSample>>& samples, double secs,
                      const std::string& cipher, int blocks, int threads, int jobs_per_batch) {
  std::vector<double> lat;
  std::array<double, 3> bytes{};
  std::array<double, 3> msgs{}, tcp{};
  double server_ms = 0;
  for (auto& v : samples)
    for (auto& s : v) {
      lat.push_back(s.latency_ms);
      server_ms += s.server_ms;
      for (int i = 0; i < 3; ++i) {
        bytes[i] += s.bytes[i];
        tcp[i] += s.tcp[i];
        msgs[i] += s.msgs[i];
      }
    }
  std::sort(lat.begin(), lat.end());
  double n = lat.size();
  double mean = 0;
  for (double l : lat) mean += l;
  mean /= n;
  // Bytes: the busiest party, all ring traffic of the batch (payload, frame
  // headers, the scheduling handshake) divided by the keystream blocks.
  double max_bytes = 0;
  double max_tcp = 0;
  for (int i = 0; i < 3; ++i) {
    max_bytes = std::max(max_bytes, bytes[i] / n / blocks);
    max_tcp = std::max(max_tcp, tcp[i] / n / blocks);
  }
  // Party 1 sends one control frame per batch (the forwarded proposal); the
  // rest are protocol rounds. The engine sends one message per AND layer per
  // chunk of --chunk_lanes AES blocks (engine.h: EngineOptions), plus about
  // three batch-wide rounds (digest agreement, ctr0), so the rounds one AES
  // evaluation goes through are about (messages - 3) / chunks + 3.
  const int aes_blocks = blocks + jobs_per_batch;
  const double messages = msgs[1] / n - 1;
  const int lanes = absl::GetFlag(FLAGS_chunk_lanes);
  const int chunks = (aes_blocks + lanes - 1) / lanes;
  const double rounds = chunks <= 1 ? messages : (messages - 3) / chunks + 3;
  std::printf(
      "RESULT {\"cipher\": \"%s\", \"blocks\": %d, \"threads\": %d, "
      "\"blocks_per_s\": %.0f, \"latency_ms\": %.3f, \"latency_p50_ms\": %.3f, "
      "\"latency_p10_ms\": %.3f, "
      "\"server_ms\": %.3f, \"bytes_per_block_per_party\": %.1f, "
      "\"tls_bytes_per_block_per_party\": %.1f, \"rounds\": %.1f, "
      "\"messages_per_batch\": %.1f, \"batches\": %d, \"jobs_per_batch\": %d, "
      "\"aes_blocks_per_batch\": %d}\n",
      cipher.c_str(), blocks, threads, n * blocks / secs, mean, lat[lat.size() / 2],
      lat[lat.size() / 10],
      server_ms / n, max_bytes, max_tcp, rounds, messages, static_cast<int>(n),
      jobs_per_batch, aes_blocks);
}

int KeystreamBench(Cluster& c) {
  const int blocks = absl::GetFlag(FLAGS_blocks);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int iters = absl::GetFlag(FLAGS_iters);
  const std::string cipher = absl::GetFlag(FLAGS_cipher);
  if (blocks < 1 || threads < 1 || iters < 1) Die("bad keystream parameters");
  const size_t key_len = cipher == "aes256" ? 32 : 16;
  const Bytes kid = PutBenchKey(key_len);
  const pb::RunRequest proto_req = BenchRequest(kid, key_len, blocks);
  const int warmup_blocks = absl::GetFlag(FLAGS_warmup_blocks);
  const pb::RunRequest warmup_req = warmup_blocks > 0 && warmup_blocks != blocks
                                        ? BenchRequest(kid, key_len, warmup_blocks)
                                        : proto_req;
  BenchBatch(c, warmup_req, true);  // warm-up: connections, PRSS sessions, key cache
  std::vector<std::vector<BenchSample>> samples(threads);
  absl::Time t0 = absl::Now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int k = 0; k < iters; ++k) samples[t].push_back(BenchBatch(c, proto_req, false));
    });
  for (auto& t : ts) t.join();
  double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  PrintBenchResult(samples, secs, cipher, blocks, threads, proto_req.jobs_size());
  // Leave no key behind.
  return 0;
}

// The RFC 3962 encryption of conf || p under `key` and `usage` in the
// clear (the circuit of cts/cts.h on the dealer's material: what a client
// sends as its PA-ENC-TIMESTAMP).
Bytes ClearCtsEncrypt(const Bytes& key, uint32_t usage, const Bytes& conf_p) {
  auto u8 = [](const Bytes& b) {
    return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  absl::StatusOr<kmpc::cts::UsageMaterial> m = kmpc::cts::DealUsage(u8(key), usage);
  absl::StatusOr<kmpc::cts::Program> p =
      kmpc::cts::EncryptProgram(key.size() == 16 ? 10 : 14, conf_p.size());
  if (!m.ok() || !p.ok()) Die("cts: cannot build the timestamp");
  std::vector<uint8_t> in = m->bytes;
  in.insert(in.end(), conf_p.begin(), conf_p.end());
  std::vector<absl::Span<const uint8_t>> lanes = {in};
  std::vector<uint64_t> w = kmpc::cts::PackLanes(lanes, 1), out(p->outputs);
  kmpc::cts::ClearEngine e;
  if (!kmpc::cts::Evaluate(*p, e, 1, {absl::MakeConstSpan(w), {}}, {absl::MakeSpan(out), {}})
           .ok())
    Die("cts: cannot build the timestamp");
  OPENSSL_cleanse(in.data(), in.size());
  std::vector<uint8_t> o = kmpc::cts::UnpackLane(out, 1, 0);
  return Bytes(o.begin(), o.end());
}

// cts: --iters logins of an aes*-cts user through KeyOps.Run, one
// Run each: the timestamp's DECRYPT (usage 1, 44 bytes) and the reply's
// ENCRYPT (usage 3, --reply_bytes of plaintext) gated on it. Prints the
// circuits' ANDs and AND depth per login and the latencies.
int CtsBench(Cluster& c) {
  const bool aes128 = absl::GetFlag(FLAGS_cipher) == "aes128-cts";
  const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
  const int reply = absl::GetFlag(FLAGS_reply_bytes);
  Bytes key = RandomBytes(aes128 ? 16 : 32);
  const Bytes kid = RandomBytes(kmpc::contract::kKeyIdSize);
  std::array<absl::Status, 3> each;
  // Admin path with the admin certificate.
  kmpc::client::AdminClient admin(OpenChannels(ConfigFor("admin")));
  absl::Status st = admin.PutKey(
      aes128 ? kmpc::engine::Cipher::kAes128Cts : kmpc::engine::Cipher::kAes256Cts,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()),
      {kid, 0, "cts-bench", false}, &each);
  if (!st.ok()) Die(std::string(st.message()));
  // conf || a PA-ENC-TS-ENC of now (with pausec: 44 bytes): a user key's
  // gate releases its reply only within the servers' --cts_skew_s.
  Bytes ts = RandomBytes(16) + std::string("\x30\x1a\xa0\x11\x18\x0f", 6) +
             absl::FormatTime("%Y%m%d%H%M%SZ", absl::Now(), absl::UTCTimeZone()) +
             std::string("\xa1\x05\x02\x03\x01\x86\xa0", 7);
  const Bytes ct = ClearCtsEncrypt(key, 1, ts);
  OPENSSL_cleanse(key.data(), key.size());
  const int nr = aes128 ? 10 : 14;
  auto dp = kmpc::cts::DecryptProgram(nr, 44);
  auto ep = kmpc::cts::EncryptProgram(nr, 16 + reply);
  if (!dp.ok() || !ep.ok()) Die("cts: bad --reply_bytes");
  std::vector<double> lat;
  for (int k = 0; k <= iters; ++k) {  // k = 0: warm-up (program compiles)
    pb::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(RandomBytes(16));
    req.set_wire_version(kmpc::contract::kWireVersion);
    for (int j = 0; j < 2; ++j) {
      pb::Job* job = req.add_jobs();
      job->set_job_id(j + 1);
      job->set_key_id(kid);
      job->set_cipher(aes128 ? pb::CIPHER_AES128_CTS : pb::CIPHER_AES256_CTS);
      job->set_type(j == 0 ? pb::JOB_DECRYPT : pb::JOB_ENCRYPT);
      job->set_usage(j == 0 ? 1 : 3);
      job->set_length(j == 0 ? ct.size() : reply);
      if (j == 1) job->set_release_if_ok(1);
    }
    std::array<pb::RunRequest, 3> reqs = DealRequests(req, {ct, RandomBytes(reply)});
    std::array<pb::RunResponse, 3> resp;
    const absl::Time t0 = absl::Now();
    CheckRpcs(RunOnAll(c, reqs, &resp));
    if (k > 0) lat.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    WipeRequests(reqs);
    for (int i = 0; i < 3; ++i)
      for (const pb::JobResult& r : resp[i].results())
        if (r.status() != pb::JOB_OK) Die("cts: a login failed: " + r.detail());
    WipeRunShares(resp);
  }
  std::sort(lat.begin(), lat.end());
  std::printf(
      "RESULT {\"cipher\": \"%s\", \"reply_bytes\": %d, \"ands_per_login\": %zu, "
      "\"rounds_per_login\": %d, \"latency_p50_ms\": %.3f, \"latency_p99_ms\": %.3f}\n",
      aes128 ? "aes128-cts" : "aes256-cts", reply, dp->ands + ep->ands,
      std::max(dp->depth, ep->depth), lat[lat.size() / 2],
      lat[std::min(lat.size() - 1, lat.size() * 99 / 100)]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  SetProgramName("kmpc-mpc-bench");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() != 2) Die("usage: kmpc-mpc-bench [flags] keystream|cts (see source header)");
  const std::string cmd = rest[1];
  Cluster c(OpenChannels(ConfigFor("kdc")));
  if (cmd == "keystream") return KeystreamBench(c);
  if (cmd == "cts") return CtsBench(c);
  Die("unknown command " + cmd);
}
