// kmpc-mpc-client: talks to the three MPC servers the way the KDC does, plus
// the admin operations. Used by the tests and the benchmark.
//
//   kmpc-mpc-client --servers=H:P0,H:P1,H:P2 --certs=DIR <command> [args]
//
// commands
//   put-key --key_hex=.. [--key_id_hex=..] [--kvno --label --replace --key_kind]
//       [--cipher=aes128-cts|aes256-cts: an aes*-cts key, with the material
//       the dealer computes per usage]
//       deals the key (engine::DealKey) and stores party i's view on server
//       i; all-or-nothing (client::AdminClient::PutKey): a failure removes
//       what was or may have been stored. Prints the id.
//   delete-key --key_id_hex=.. [--only_party=I]   list-keys   health   metrics
//   set-kind --key_id_hex=.. --key_kind=user|service|user+service
//       [--allow_ungate] [--only_party=I]   Admin.SetKeyKind; prints
//       "party I previous KIND unrecorded B dropped N changed B tickets B"
//       per server
//   jobs [--only_party=I]  one batch from stdin, one job per line (hex arguments):
//                     encrypt  KEYID USAGE PLAINTEXT   -> ok CTR0||C||T
//                     keystream KEYID USAGE NBYTES     -> ok CTR0 KEYSTREAM
//                     decrypt  KEYID USAGE CTR0||C||T  -> ok PLAINTEXT |
//                                                         integrity_failed
//                     checksum KEYID USAGE DATA        -> ok CTR0||TAG
//                     verify   KEYID USAGE DATA CKSUM  -> ok | integrity_failed
//                     pad      KEYID USAGE MAXLEN      -> ok CTR0 BATCHID JOBID
//                     vpad     KEYID USAGE MAXLEN CTR0 -> ok CTR0 BATCHID JOBID
//                                 (a verification pad at CTR0)
//                     sign     KEYID USAGE DATA        -> ok CTR0||TAG
//                   aes*-cts jobs (kmpc.proto JobType), OP:aes128-cts or
//                   OP:aes256-cts (a key put with --cipher=aes*-cts):
//                     cts_decrypt  KEYID USAGE C||T  -> ok CONF||P |
//                                                       integrity_failed
//                     cts_encrypt  KEYID USAGE P     -> ok C||T
//                     cts_checksum KEYID USAGE DATA  -> ok CKSUM
//                   C||T, P and DATA dealt as shares; other outcomes print
//                   "status NAME" (JOB_WITHHELD, JOB_UNKNOWN_USAGE).
//                   OP@N (any job): released only if job N (1-based)
//                   ends JOB_OK (Job.release_if_ok).
//                   checksum/verify messages and sign data are dealt as
//                   shares (client::DealFlat): no server receives them.
//                   encrypt runs ENCRYPT, XORs, then one FINALIZE for all;
//                   sign runs a PAD of len(DATA) bytes, then one KeyOps.Sign
//                   for all (--sign_twice: a second Sign of the same pads,
//                   printing "second_sign PARTY STATUS" per server).
//   sign --run_batch_id_hex=.. --job_id=N --usage=U --data_hex=..
//        [--only_party=I]
//                   KeyOps.Sign of the pad a `pad` job drew, DATA dealt as
//                   shares; prints "ok TAG" when the three servers sign,
//                   else "refused S0 S1 S2" (their JobStatus names; with
//                   --only_party, "sent STATUS"). With --verify_tag_hex=T:
//                   a verify item under a `vpad` pad, "verified" or
//                   "not_verified" (SignItem.verify).
//                   Every job names a cipher (kmpc.proto Job.cipher): OP
//                   may be OP:aes128, OP:aes256 or OP:N (N a raw enum value,
//                   0 = CIPHER_UNSPECIFIED, for tests); a bare OP takes
//                   --cipher. A key dealt for the other cipher gives
//                   "error 7 ..." (JOB_WRONG_CIPHER: PERMISSION_DENIED).
//                   A job error prints "error CODE MESSAGE". An RPC failure
//                   prints "rpc_error PARTY CODE MESSAGE" and exits 3 (the
//                   admin commands too); shares whose two copies disagree
//                   print "share_mismatch" (the reason on stderr), exit 4.
//   fuzz --count=N --seed=S   malformed requests; every one must fail with
//                   a clean status and the servers must stay healthy.
//   bench --blocks=N --threads=T --iters=K --cipher=aes128|aes256
//         [--warmup_blocks=W]
//                   ENCRYPT batches of N keystream blocks, T in flight,
//                   after one warm-up batch (of W blocks) whose keystream
//                   shares are checked;
//                   prints a JSON record line prefixed "RESULT ".
//   cts-bench --iters=K --cipher=aes128-cts|aes256-cts [--reply_bytes=N]
//                   K logins of an aes*-cts user, one Run each (timestamp
//                   DECRYPT, gated reply ENCRYPT); prints "RESULT {...}"
//                   with ANDs and rounds per login and latency p50/p99.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admin_client.h"
#include "cts/cts.h"
#include "cts/dealer.h"
#include "client/channels.h"
#include "client/reveal.h"
#include "contract.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"

ABSL_FLAG(std::string, servers, "", "gRPC addresses of parties 0,1,2");
ABSL_FLAG(std::string, certs, "", "directory from deploy/gen-certs.sh");
ABSL_FLAG(std::string, client, "",
          "client certificate name in --certs (default: kdc for jobs/bench, "
          "admin for admin commands)");
ABSL_FLAG(std::string, key_hex, "", "put-key: the key");
ABSL_FLAG(std::string, key_id_hex, "", "key id (32 bytes hex)");
ABSL_FLAG(int, kvno, 1, "put-key: kvno");
ABSL_FLAG(std::string, label, "", "put-key: label");
ABSL_FLAG(bool, replace, false, "put-key: overwrite an existing id");
ABSL_FLAG(std::string, key_kind, "user",
          "put-key: user (password-derived: its aes*-cts AS reply gated, no ticket or PAC "
          "material), service (a random key) or user+service (kmpc.proto KeyKind)");
ABSL_FLAG(bool, allow_ungate, false,
          "set-kind: allow a password-derived key to become a service's "
          "(SetKeyKindRequest.allow_ungate)");
ABSL_FLAG(int, only_party, -1,
          "delete-key: delete on this party's server only (tests: a key "
          "store out of step); jobs: send the batch's Run to this party "
          "only (tests: a client that does not reach the other servers), "
          "print \"sent\" when it succeeds");
ABSL_FLAG(int, count, 200, "fuzz: requests per kind");
ABSL_FLAG(int, seed, 1, "fuzz: seed");
ABSL_FLAG(int, blocks, 128, "bench: keystream blocks per batch");
ABSL_FLAG(int, threads, 1, "bench: batches in flight");
ABSL_FLAG(int, iters, 5, "bench: batches per thread");
ABSL_FLAG(int, job_blocks, 1024, "bench: largest ENCRYPT job in blocks");
ABSL_FLAG(int, warmup_blocks, 0,
          "bench: blocks of the warm-up batch (0: --blocks); a small one saves a "
          "long batch where each takes seconds (--security=malicious)");
ABSL_FLAG(int, chunk_lanes, 4096, "bench: the servers' --chunk_lanes (for rounds)");
ABSL_FLAG(std::string, cipher, "aes128",
          "bench: the key's cipher; jobs: the cipher of a job line without "
          "one (aes128 or aes256)");
ABSL_FLAG(bool, finalize_twice, false, "jobs: try every FINALIZE a second time");
ABSL_FLAG(bool, sign_twice, false, "jobs: try every Sign a second time");
ABSL_FLAG(std::string, run_batch_id_hex, "", "sign: the batch id of the PAD job");
ABSL_FLAG(uint64_t, job_id, 0, "sign: the PAD job's id");
ABSL_FLAG(uint32_t, usage, 0, "sign: the key usage");
ABSL_FLAG(std::string, data_hex, "", "sign: the message (hex)");
ABSL_FLAG(std::string, verify_tag_hex, "",
          "sign: verify this 16-byte tag under a verification pad instead");
ABSL_FLAG(int, timeout_ms, 30000, "deadline of each RPC");
ABSL_FLAG(int, reply_bytes, 300, "cts-bench: the reply's plaintext bytes");

namespace {

namespace pb = kmpc::v1;
using Bytes = std::string;

[[noreturn]] void Die(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "kmpc-mpc-client: %s\n", msg.c_str());
  std::exit(code);
}

bool FromHex(absl::string_view hex, Bytes* out) {
  if (hex.size() % 2 != 0) return false;
  for (char c : hex)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  *out = absl::HexStringToBytes(hex);
  return true;
}
std::string ToHex(absl::string_view b) { return absl::BytesToHexString(b); }

Bytes RandomBytes(size_t n) {
  Bytes b(n, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(b.data()), n);
  return b;
}

// The three servers' pinned channels (client/channels.h) with the client
// certificate `name` of --certs (default: `default_client`).
kmpc::client::ClusterConfig ConfigFor(const std::string& default_client) {
  std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
  if (servers.size() != 3) Die("--servers needs three addresses");
  std::string dir = absl::GetFlag(FLAGS_certs);
  if (dir.empty()) Die("--certs is required");
  std::string name = absl::GetFlag(FLAGS_client);
  if (name.empty()) name = default_client;
  kmpc::client::ClusterConfig cfg;
  for (int i = 0; i < 3; ++i) cfg.servers[i] = servers[i];
  cfg.ca = dir + "/ca.pem";
  cfg.cert = dir + "/" + name + ".pem";
  cfg.key = dir + "/" + name + ".key";
  cfg.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  return cfg;
}

kmpc::client::ClusterChannels OpenChannels(const kmpc::client::ClusterConfig& cfg) {
  kmpc::client::ChannelOptions o;
  // Up to 3 s for the three connections before the first call (see
  // ChannelOptions::connect_wait: a transient failure of the first
  // connection is retried instead of failing the command; a party that is
  // down, or refuses us, still fails the call, after this wait).
  o.connect_wait = absl::Milliseconds(
      std::min<int64_t>(3000, absl::GetFlag(FLAGS_timeout_ms)));
  auto ch = kmpc::client::ClusterChannels::Open(cfg, o);
  if (!ch.ok()) Die(std::string(ch.status().message()));
  return std::move(*ch);
}

struct Cluster {
  explicit Cluster(kmpc::client::ClusterChannels ch) : admin(ch) {
    for (int i = 0; i < 3; ++i) {
      channel[i] = ch.channel(i);
      keyops[i] = pb::KeyOps::NewStub(channel[i]);
    }
  }
  std::array<std::shared_ptr<grpc::Channel>, 3> channel;
  std::array<std::unique_ptr<pb::KeyOps::Stub>, 3> keyops;
  kmpc::client::AdminClient admin;
};

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
}

// Runs f(i) for the three servers in parallel.
template <typename F>
std::array<grpc::Status, 3> OnAll(F f) {
  std::array<std::future<grpc::Status>, 3> fs;
  for (int i = 0; i < 3; ++i) fs[i] = std::async(std::launch::async, f, i);
  std::array<grpc::Status, 3> st;
  for (int i = 0; i < 3; ++i) st[i] = fs[i].get();
  return st;
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
  kmpc::client::DealRandom r;
  absl::Status st = r.Draw(data.size());
  if (st.ok())
    st = kmpc::client::DealFlat(
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

// One party's Run response read back per result from its flat buffers
// (kmpc.proto RunResponse.ctr0s, .shares): result k's ctr0 (empty: none)
// and its two shares, as views into the response (which must outlive the
// view). `extra`: bytes beyond what the results take (a value the server
// should not have sent, e.g. a failed DECRYPT's keystream).
struct RunView {
  std::vector<Bytes> ctr0;
  std::vector<kmpc::client::ShareView> value;
  bool extra = false;
};
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

// Item n's additive tag share of a Finalize response (kmpc.proto
// FinalizeResponse.tags: 16 bytes per item), a view into the response.
absl::string_view FinalizeTag(const pb::FinalizeResponse& r, size_t n) {
  return absl::string_view(r.tags()).substr(16 * n, 16);
}

[[noreturn]] void RpcError(int party, int code, absl::string_view message) {
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

[[noreturn]] void ShareMismatch(const absl::Status& why) {
  std::fprintf(stderr, "kmpc-mpc-client: %s\n", std::string(why.message()).c_str());
  std::printf("share_mismatch\n");
  std::fflush(stdout);
  std::exit(4);
}

// The value the three servers' share pairs reveal (client::Reveal: both
// copies of every share must agree); exits with share_mismatch otherwise.
Bytes RevealOrDie(const std::array<kmpc::client::ShareView, 3>& s, absl::string_view what) {
  Bytes v(s[0].first.size(), '\0');
  absl::Status st = kmpc::client::Reveal(
      s, absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()), v.size()), what);
  if (!st.ok()) ShareMismatch(st);
  return v;
}

Bytes Xor(absl::string_view a, absl::string_view b) {
  Bytes o(a);
  for (size_t i = 0; i < o.size() && i < b.size(); ++i) o[i] ^= b[i];
  return o;
}

// ------------------------------------------------------------------ admin

int PutKey(Cluster& c) {
  Bytes key;
  if (!FromHex(absl::GetFlag(FLAGS_key_hex), &key) ||
      (key.size() != 16 && key.size() != 32))
    Die("--key_hex must be 16 or 32 bytes of hex");
  Bytes id;
  if (absl::GetFlag(FLAGS_key_id_hex).empty()) {
    id = RandomBytes(kmpc::contract::kKeyIdSize);
  } else if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id) ||
             id.size() != kmpc::contract::kKeyIdSize) {
    Die("--key_id_hex must be 32 bytes of hex");
  }
  const bool cts = absl::EndsWith(absl::GetFlag(FLAGS_cipher), "-cts");
  auto cipher = key.size() == 16
                    ? (cts ? kmpc::engine::Cipher::kAes128Cts : kmpc::engine::Cipher::kAes128)
                    : (cts ? kmpc::engine::Cipher::kAes256Cts : kmpc::engine::Cipher::kAes256);
  std::array<absl::Status, 3> each;
  kmpc::client::KeyMeta meta{id, static_cast<uint32_t>(absl::GetFlag(FLAGS_kvno)),
                             absl::GetFlag(FLAGS_label), absl::GetFlag(FLAGS_replace)};
  const std::string kind = absl::GetFlag(FLAGS_key_kind);
  if (kind == "service") meta.kind = kmpc::KeyKind::kService;
  else if (kind == "user+service") meta.kind = kmpc::KeyKind::kUserService;
  else if (kind != "user") Die("--key_kind must be user, service or user+service");
  absl::Status st = c.admin.PutKey(
      cipher,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()), meta,
      &each);
  OPENSSL_cleanse(key.data(), key.size());
  if (!st.ok()) {
    // What the clean-up did (removed again, or a WARNING).
    std::fprintf(stderr, "kmpc-mpc-client: put-key: %s\n",
                 std::string(st.message()).c_str());
    CheckEach(each);
    Die(std::string(st.message()));  // not a server's failure: the dealer's
  }
  std::printf("%s\n", ToHex(id).c_str());
  return 0;
}

int DeleteKey(Cluster& c) {
  Bytes id;
  if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id)) Die("bad --key_id_hex");
  const int only = absl::GetFlag(FLAGS_only_party);
  if (only < -1 || only > 2) Die("--only_party must be 0, 1 or 2");
  std::array<absl::Status, 3> st;
  if (only >= 0) st[only] = c.admin.DeleteKeyOn(only, id);
  else st = c.admin.DeleteKeyEach(id);
  CheckEach(st);
  std::printf("deleted\n");
  return 0;
}

int SetKind(Cluster& c) {
  Bytes id;
  if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id)) Die("bad --key_id_hex");
  const int only = absl::GetFlag(FLAGS_only_party);
  if (only < -1 || only > 2) Die("--only_party must be 0, 1 or 2");
  const std::string kind = absl::GetFlag(FLAGS_key_kind);
  kmpc::KeyKind k = kmpc::KeyKind::kUser;
  if (kind == "service") k = kmpc::KeyKind::kService;
  else if (kind == "user+service") k = kmpc::KeyKind::kUserService;
  else if (kind != "user") Die("--key_kind must be user, service or user+service");
  const bool ungate = absl::GetFlag(FLAGS_allow_ungate);
  std::array<absl::StatusOr<pb::SetKeyKindResponse>, 3> r;
  if (only >= 0) r[only] = c.admin.SetKeyKindOn(only, id, k, ungate);
  else r = c.admin.SetKeyKind(id, k, ungate);
  std::array<absl::Status, 3> st;
  for (int i = 0; i < 3; ++i)
    if (only < 0 || i == only) st[i] = r[i].status();
  CheckEach(st);
  for (int i = 0; i < 3; ++i)
    if (only < 0 || i == only)
      std::printf("party %d previous %s unrecorded %d dropped %u changed %d tickets %d\n", i,
                  pb::KeyKind_Name(r[i]->previous_kind()).c_str(), r[i]->was_unrecorded(),
                  r[i]->dropped_materials(), r[i]->changed(), r[i]->holds_ticket_material());
  return 0;
}

int AdminQuery(Cluster& c, const std::string& cmd) {
  std::array<std::string, 3> out;
  std::array<absl::Status, 3> st;
  if (cmd == "health") {
    auto h = c.admin.Health();
    for (int i = 0; i < 3; ++i) {
      st[i] = h[i].status();
      if (!h[i].ok()) continue;
      const pb::HealthResponse& r = *h[i];
      out[i] = absl::StrFormat(
          "party %d ring_up %d workers %d keys %d batches_ok %d batches_failed %d "
          "breaker %s deviations %d security %s",
          r.party(), r.ring_up(), r.workers(), r.keys(), r.batches_ok(),
          r.batches_failed(), r.breaker_open() ? "open" : "closed", r.deviations(),
          r.security().empty() ? "unknown" : r.security());
    }
  } else if (cmd == "metrics") {
    auto m = c.admin.Metrics();
    for (int i = 0; i < 3; ++i) {
      st[i] = m[i].status();
      if (m[i].ok()) out[i] = *m[i];
    }
  } else {
    auto l = c.admin.ListKeys();
    for (int i = 0; i < 3; ++i) {
      st[i] = l[i].status();
      if (!l[i].ok()) continue;
      for (const auto& k : *l[i])
        absl::StrAppend(&out[i], "party ", i, " ", ToHex(k.key_id()), " ",
                        pb::Cipher_Name(k.cipher()), " kvno ", k.kvno(), " ",
                        k.label(), "\n");
    }
  }
  CheckEach(st);
  for (auto& o : out) std::printf("%s%s", o.c_str(), o.empty() || o.back() == '\n' ? "" : "\n");
  return 0;
}

// ------------------------------------------------------------------ jobs

// A failed job's code in "error CODE MESSAGE" (0: not failed): the status
// code of its JobStatus (UNKNOWN_KEY: NOT_FOUND, MALFORMED:
// INVALID_ARGUMENT, KEY_INCONSISTENT: FAILED_PRECONDITION, WRONG_CIPHER:
// PERMISSION_DENIED, as the KDC module maps it).
int JobErrorCode(const pb::JobResult& r) {
  switch (r.status()) {
    case pb::JOB_WRONG_CIPHER:
      return static_cast<int>(absl::StatusCode::kPermissionDenied);
    case pb::JOB_UNKNOWN_KEY:
      return static_cast<int>(absl::StatusCode::kNotFound);
    case pb::JOB_MALFORMED:
      return static_cast<int>(absl::StatusCode::kInvalidArgument);
    case pb::JOB_KEY_INCONSISTENT:
      return static_cast<int>(absl::StatusCode::kFailedPrecondition);
    default:
      return 0;
  }
}
const std::string& JobErrorText(const pb::JobResult& r) { return r.detail(); }

struct ParsedJob {
  std::string op;
  pb::Job job;
  Bytes plaintext;  // encrypt
  Bytes message;    // checksum, verify: dealt as shares, never sent
  Bytes sign_data;  // sign: dealt as shares in the Sign after the PAD
};

// One SignRequest per server for the items (run batch id, job id, usage,
// message): each message dealt afresh (client::DealFlat).
struct SignJob {
  Bytes run_batch_id;
  uint64_t job_id;
  uint32_t usage;
  Bytes data;
  Bytes verify_tag = {};
};
std::array<pb::SignRequest, 3> SignRequests(const std::vector<SignJob>& items) {
  std::array<pb::SignRequest, 3> reqs;
  const Bytes rid = RandomBytes(16);
  for (auto& r : reqs) {
    r.set_request_id(rid);
    r.set_wire_version(kmpc::contract::kWireVersion);
  }
  for (const SignJob& it : items) {
    std::array<pb::SignItem*, 3> o;
    for (int i = 0; i < 3; ++i) {
      o[i] = reqs[i].add_items();
      o[i]->set_run_batch_id(it.run_batch_id);
      o[i]->set_job_id(it.job_id);
      o[i]->set_usage(it.usage);
      o[i]->set_length(static_cast<uint32_t>(it.data.size()));
      if (!it.verify_tag.empty()) o[i]->set_verify(true);
    }
    // A verify item's presented tag is dealt after the message (kmpc.proto
    // SignItem.verify): no server sees it.
    DealInto(it.data + it.verify_tag, {reqs[0].mutable_data_shares(),
                                       reqs[1].mutable_data_shares(),
                                       reqs[2].mutable_data_shares()});
  }
  return reqs;
}

void WipeSignRequests(std::array<pb::SignRequest, 3>& reqs) {
  for (auto& r : reqs) {
    std::string* f = r.mutable_data_shares();
    OPENSSL_cleanse(f->data(), f->size());
  }
}

// Result k's tag share from party i's flat buffer (kmpc.proto
// SignResponse.tag_shares: one per JOB_OK result, in order).
absl::string_view SignTagShare(const pb::SignResponse& r, int k) {
  kmpc::contract::FlatReader flat(r.tag_shares());
  absl::string_view t;
  for (int j = 0; j <= k && j < r.results_size(); ++j)
    if (r.results(j).status() == pb::JOB_OK) t = flat.Take(16);
  return t;
}

// Sends reqs[i] to server i (those in `to`); wipes the shares after.
std::array<grpc::Status, 3> SignOnAll(Cluster& c, std::array<pb::SignRequest, 3>& reqs,
                                      std::array<pb::SignResponse, 3>* resp,
                                      std::array<bool, 3> to = {true, true, true}) {
  auto st = OnAll([&](int i) {
    if (!to[i]) return grpc::Status::OK;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return c.keyops[i]->Sign(&ctx, reqs[i], &(*resp)[i]);
  });
  WipeSignRequests(reqs);
  return st;
}

// tag = t_0 ^ t_1 ^ t_2 of result k, or the reason it cannot be combined.
absl::StatusOr<Bytes> CombineSign(const std::array<pb::SignResponse, 3>& r, int k) {
  for (int i = 0; i < 3; ++i) {
    if (r[i].results_size() <= k)
      return absl::DataLossError(absl::StrCat("MPC party ", i, " returned too few results"));
    if (r[i].results(k).status() != pb::JOB_OK)
      return absl::FailedPreconditionError(absl::StrCat(
          pb::JobStatus_Name(r[0].results(k).status()), " ",
          pb::JobStatus_Name(r[1].results(k).status()), " ",
          pb::JobStatus_Name(r[2].results(k).status())));
  }
  Bytes tag(16, '\0');
  absl::Status st = kmpc::client::CombineAdditive(
      std::array<absl::string_view, 3>{SignTagShare(r[0], k), SignTagShare(r[1], k),
                                       SignTagShare(r[2], k)},
      absl::MakeSpan(reinterpret_cast<uint8_t*>(tag.data()), tag.size()), "tag");
  if (!st.ok()) return st;
  return tag;
}

// "aes128", "aes256" or a decimal enum value (tests of malformed jobs).
pb::Cipher ParseCipher(const std::string& s) {
  if (s == "aes128") return pb::CIPHER_AES128;
  if (s == "aes256") return pb::CIPHER_AES256;
  if (s == "aes128-cts") return pb::CIPHER_AES128_CTS;
  if (s == "aes256-cts") return pb::CIPHER_AES256_CTS;
  int v = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &v)) Die("bad cipher: " + s);
  return static_cast<pb::Cipher>(v);
}

// A job line's arguments after OP KEYID USAGE (the file header) into p's
// job, by p->op.
void ParseJobArguments(const std::vector<std::string>& f, ParsedJob* p) {
  Bytes a, b;
  if (p->op == "encrypt") {
    if (!FromHex(f[3] == "-" ? "" : f[3], &p->plaintext)) Die("bad hex: " + f[3]);
    p->job.set_type(pb::JOB_ENCRYPT);
    p->job.set_length(p->plaintext.size());
  } else if (p->op == "keystream") {
    p->job.set_type(pb::JOB_ENCRYPT);
    p->job.set_length(static_cast<uint32_t>(std::stoul(f[3])));
  } else if (p->op == "decrypt") {
    if (!FromHex(f[3], &a)) Die("bad hex: " + f[3]);
    p->job.set_type(pb::JOB_DECRYPT);
    p->job.set_data(a);
  } else if (p->op == "checksum") {
    if (!FromHex(f[3] == "-" ? "" : f[3], &a)) Die("bad hex: " + f[3]);
    p->job.set_type(pb::JOB_CHECKSUM);
    p->job.set_length(static_cast<uint32_t>(a.size()));
    p->message = a;
  } else if (p->op == "verify") {
    if (f.size() < 5 || !FromHex(f[3] == "-" ? "" : f[3], &a) || !FromHex(f[4], &b))
      Die("verify needs DATA and CKSUM hex");
    p->job.set_type(pb::JOB_VERIFY_CHECKSUM);
    p->job.set_length(static_cast<uint32_t>(a.size()));
    // ctr0 in the clear, the tag dealt after the message (kmpc.proto
    // JOB_VERIFY_CHECKSUM); a CKSUM of another size goes whole with a
    // zero tag dealt, so the servers' refusal of it can be tested.
    p->message = a;
    if (b.size() == kmpc::contract::kChecksumSize) {
      p->message += b.substr(16);
      b.resize(16);
    } else {
      p->message += Bytes(16, '\0');
    }
    p->job.set_checksum(b);
  } else if (p->op == "pad" || p->op == "vpad") {
    p->job.set_type(pb::JOB_PAD);
    p->job.set_length(static_cast<uint32_t>(std::stoul(f[3])));
    if (p->op == "vpad") {
      if (f.size() < 5 || !FromHex(f[4], &b)) Die("vpad needs MAXLEN and CTR0 hex");
      p->job.set_checksum(b);
    }
  } else if (p->op == "cts_decrypt") {
    if (!FromHex(f[3], &a)) Die("bad hex: " + f[3]);
    p->job.set_type(pb::JOB_DECRYPT);
    p->job.set_length(static_cast<uint32_t>(a.size()));
    p->message = a;  // C || T: dealt as shares, never sent (kmpc.proto JobType)
  } else if (p->op == "cts_encrypt" || p->op == "cts_checksum") {
    if (!FromHex(f[3] == "-" ? "" : f[3], &a)) Die("bad hex: " + f[3]);
    p->job.set_type(p->op == "cts_encrypt" ? pb::JOB_ENCRYPT : pb::JOB_CHECKSUM);
    p->job.set_length(static_cast<uint32_t>(a.size()));
    p->message = a;  // dealt as shares, never sent
  } else if (p->op == "sign") {
    if (!FromHex(f[3] == "-" ? "" : f[3], &a)) Die("bad hex: " + f[3]);
    p->job.set_type(pb::JOB_PAD);
    p->job.set_length(static_cast<uint32_t>(a.size()));
    p->sign_data = a;
  } else {
    Die("unknown job: " + p->op);
  }
}

// One job line's fields (at least 4): OP[:CIPHER] KEYID USAGE ARGS..., as
// job `id`.
ParsedJob ParseJobLine(const std::vector<std::string>& f, pb::Cipher default_cipher,
                       uint64_t id) {
  ParsedJob p;
  p.op = f[0];
  pb::Cipher cipher = default_cipher;
  if (size_t colon = p.op.find(':'); colon != std::string::npos) {
    cipher = ParseCipher(p.op.substr(colon + 1));
    p.op.resize(colon);
  }
  if (size_t at = p.op.find('@'); at != std::string::npos) {
    uint64_t gate = 0;
    if (!absl::SimpleAtoi(p.op.substr(at + 1), &gate)) Die("bad gate in " + p.op);
    p.job.set_release_if_ok(gate);
    p.op.resize(at);
  }
  p.job.set_cipher(cipher);
  Bytes kid;
  if (!FromHex(f[1], &kid)) Die("bad key id hex: " + f[1]);
  p.job.set_job_id(id);
  p.job.set_key_id(kid);
  p.job.set_usage(static_cast<uint32_t>(std::stoul(f[2])));
  ParseJobArguments(f, &p);
  return p;
}

// The job lines of stdin, numbered from 1.
std::vector<ParsedJob> ReadJobs() {
  const pb::Cipher default_cipher = ParseCipher(absl::GetFlag(FLAGS_cipher));
  std::vector<ParsedJob> jobs;
  std::string line;
  uint64_t next_id = 1;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty()) continue;
    if (f.size() < 4) Die("job line needs at least 4 fields: " + line);
    jobs.push_back(ParseJobLine(f, default_cipher, next_id++));
  }
  if (jobs.empty()) Die("no jobs on stdin");
  return jobs;
}

// --only_party: the batch's Run sent to that server alone; prints "sent".
int RunOnOneParty(Cluster& c, std::array<pb::RunRequest, 3>& reqs, int only) {
  if (only < 0 || only > 2) Die("--only_party must be 0, 1 or 2");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  pb::RunResponse one;
  const grpc::Status st = c.keyops[only]->Run(&ctx, reqs[only], &one);
  WipeRequests(reqs);
  if (!st.ok()) RpcError(only, st.error_code(), st.error_message());
  std::printf("sent\n");  // one party's shares alone mean nothing
  return 0;
}

// What the jobs' Run leaves to do: the ENCRYPT jobs' FINALIZE (job index,
// ciphertext, ctr0 of each item) and the sign jobs' Sign.
struct AfterRun {
  pb::FinalizeRequest fin;
  std::vector<size_t> fin_jobs;
  std::vector<Bytes> fin_ct, fin_ctr0;
  std::vector<size_t> sign_jobs;
  std::vector<SignJob> sign_items;
};

// Exits with share_mismatch unless the servers' public results of job k
// (status, ctr0, error code, job id) agree.
void CheckPublicResults(const std::array<pb::RunResponse, 3>& resp,
                        const std::array<RunView, 3>& u, size_t k) {
  std::array<const pb::JobResult*, 3> r = {&resp[0].results(k), &resp[1].results(k),
                                           &resp[2].results(k)};
  for (int i = 1; i < 3; ++i)
    if (r[i]->status() != r[0]->status() || u[i].ctr0[k] != u[0].ctr0[k] ||
        JobErrorCode(*r[i]) != JobErrorCode(*r[0]) ||
        r[i]->job_id() != r[0]->job_id())
      // Public values must agree too.
      ShareMismatch(absl::DataLossError(absl::StrCat(
          "the servers' public results of job ", k + 1, " disagree")));
}

// An aes*-cts job's line: its revealed value, or what became of it.
std::string CtsOutput(const pb::JobResult& r0, const std::array<RunView, 3>& u, size_t k) {
  if (r0.status() == pb::JOB_INTEGRITY_FAILED) return "integrity_failed";
  if (r0.status() != pb::JOB_OK) return absl::StrCat("status ", pb::JobStatus_Name(r0.status()));
  Bytes v = RevealOrDie({u[0].value[k], u[1].value[k], u[2].value[k]},
                        absl::StrCat("value of job ", k + 1));
  std::string out = absl::StrCat("ok ", ToHex(v));
  OPENSSL_cleanse(v.data(), v.size());
  return out;
}

// Job k's output line from the Run, or "" with the job added to `after`
// (encrypt and sign: their line comes from the FINALIZE or the Sign).
std::string RunOutput(const pb::RunRequest& req, const std::array<pb::RunResponse, 3>& resp,
                      const std::array<RunView, 3>& u, size_t k, ParsedJob& job,
                      AfterRun* after) {
  CheckPublicResults(resp, u, k);
  const pb::JobResult& r0 = resp[0].results(k);
  if (const int code = JobErrorCode(r0); code != 0)
    return absl::StrCat("error ", code, " ", JobErrorText(r0));
  const std::string& op = job.op;
  if (absl::StartsWith(op, "cts_")) return CtsOutput(r0, u, k);
  if (op == "verify" || ((op == "decrypt") && r0.status() != pb::JOB_OK))
    return r0.status() == pb::JOB_OK ? "ok" : "integrity_failed";
  if (op == "checksum") {
    Bytes v = RevealOrDie({u[0].value[k], u[1].value[k], u[2].value[k]},
                          absl::StrCat("tag of job ", k + 1));
    return absl::StrCat("ok ", ToHex(u[0].ctr0[k] + v));
  }
  if (op == "pad" || op == "vpad")
    return absl::StrCat("ok ", ToHex(u[0].ctr0[k]), " ", ToHex(req.batch_id()), " ",
                        job.job.job_id());
  if (op == "sign") {
    after->sign_jobs.push_back(k);
    after->sign_items.push_back({req.batch_id(), job.job.job_id(), job.job.usage(),
                                 job.sign_data});
    OPENSSL_cleanse(job.sign_data.data(), job.sign_data.size());
    return "";
  }
  Bytes v = RevealOrDie({u[0].value[k], u[1].value[k], u[2].value[k]},
                        absl::StrCat("keystream of job ", k + 1));
  std::string out;
  if (op == "keystream") {
    out = absl::StrCat("ok ", ToHex(u[0].ctr0[k]), " ", ToHex(v));
  } else if (op == "decrypt") {
    const Bytes& d = job.job.data();
    out = absl::StrCat("ok ", ToHex(Xor(d.substr(16, d.size() - 32), v)));
  } else {  // encrypt
    Bytes ct = Xor(job.plaintext, v);
    auto* item = after->fin.add_items();
    item->set_run_batch_id(req.batch_id());
    item->set_job_id(job.job.job_id());
    item->set_ciphertext(ct);
    after->fin_jobs.push_back(k);
    after->fin_ct.push_back(ct);
    after->fin_ctr0.push_back(u[0].ctr0[k]);
  }
  OPENSSL_cleanse(v.data(), v.size());
  return out;
}

// One FINALIZE for the ENCRYPT jobs; their lines "ok CTR0||C||T" into out.
void FinalizeEncrypts(Cluster& c, AfterRun* a, std::vector<std::string>* out) {
  pb::FinalizeRequest& fin = a->fin;
  std::array<pb::FinalizeResponse, 3> fr;
  CheckRpcs(OnAll([&](int i) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return c.keyops[i]->Finalize(&ctx, fin, &fr[i]);
  }));
  if (absl::GetFlag(FLAGS_finalize_twice)) {
    // Invariant 2 (enctype.md): a second FINALIZE of the same jobs must
    // be refused by every server.
    std::array<pb::FinalizeResponse, 3> again;
    fin.set_batch_id(RandomBytes(16));
    auto st = OnAll([&](int i) {
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      return c.keyops[i]->Finalize(&ctx, fin, &again[i]);
    });
    for (int i = 0; i < 3; ++i)
      std::printf("second_finalize %d %d\n", i, st[i].error_code());
  }
  for (int i = 0; i < 3; ++i)
    if (fr[i].results_size() != fin.items_size() ||
        fr[i].tags().size() != 16u * fin.items_size())
      ShareMismatch(absl::DataLossError(absl::StrCat(
          "MPC party ", i, " returned ", fr[i].results_size(),
          " FINALIZE results for ", fin.items_size(), " items")));
  for (size_t n = 0; n < a->fin_jobs.size(); ++n) {
    Bytes tag(16, '\0');
    absl::Status st = kmpc::client::CombineAdditive(
        std::array<absl::string_view, 3>{FinalizeTag(fr[0], n), FinalizeTag(fr[1], n),
                                         FinalizeTag(fr[2], n)},
        absl::MakeSpan(reinterpret_cast<uint8_t*>(tag.data()), tag.size()),
        absl::StrCat("tag of job ", a->fin_jobs[n] + 1));
    if (!st.ok()) ShareMismatch(st);
    (*out)[a->fin_jobs[n]] =
        absl::StrCat("ok ", ToHex(a->fin_ctr0[n] + a->fin_ct[n] + tag));
  }
}

// One Sign for the sign jobs' pads; their lines "ok CTR0||TAG" or
// "refused ..." into out.
void SignPads(Cluster& c, AfterRun* a, const std::array<RunView, 3>& u,
              std::vector<std::string>* out) {
  std::array<pb::SignRequest, 3> sreqs = SignRequests(a->sign_items);
  std::array<pb::SignRequest, 3> again_reqs;
  if (absl::GetFlag(FLAGS_sign_twice)) again_reqs = SignRequests(a->sign_items);
  for (auto& it : a->sign_items) OPENSSL_cleanse(it.data.data(), it.data.size());
  std::array<pb::SignResponse, 3> sr;
  CheckRpcs(SignOnAll(c, sreqs, &sr));
  if (absl::GetFlag(FLAGS_sign_twice)) {
    // Invariant 6 (enctype.md): every server refuses a second use.
    std::array<pb::SignResponse, 3> again;
    CheckRpcs(SignOnAll(c, again_reqs, &again));
    for (int i = 0; i < 3; ++i)
      for (int n = 0; n < again[i].results_size(); ++n)
        std::printf("second_sign %d %s\n", i,
                    pb::JobStatus_Name(again[i].results(n).status()).c_str());
  }
  for (size_t n = 0; n < a->sign_jobs.size(); ++n) {
    absl::StatusOr<Bytes> tag = CombineSign(sr, static_cast<int>(n));
    const size_t k = a->sign_jobs[n];
    if (!tag.ok()) {
      (*out)[k] = absl::StrCat("refused ", tag.status().message());
      continue;
    }
    (*out)[k] = absl::StrCat("ok ", ToHex(u[0].ctr0[k] + *tag));
  }
}

int Jobs(Cluster& c) {
  std::vector<ParsedJob> jobs = ReadJobs();
  pb::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(RandomBytes(16));
  req.set_wire_version(kmpc::contract::kWireVersion);
  std::vector<Bytes> messages;
  for (auto& j : jobs) {
    *req.add_jobs() = j.job;
    messages.push_back(j.message);
  }
  std::array<pb::RunRequest, 3> reqs = DealRequests(req, messages);
  for (Bytes& m : messages) OPENSSL_cleanse(m.data(), m.size());
  if (const int only = absl::GetFlag(FLAGS_only_party); only != -1)
    return RunOnOneParty(c, reqs, only);
  std::array<pb::RunResponse, 3> resp;
  const auto run_status = RunOnAll(c, reqs, &resp);
  WipeRequests(reqs);
  CheckRpcs(run_status);
  for (int i = 0; i < 3; ++i)
    if (resp[i].results_size() != static_cast<int>(jobs.size()))
      Die("a server returned a wrong number of results");
  std::array<RunView, 3> u = {ViewRun(req, resp[0]), ViewRun(req, resp[1]),
                              ViewRun(req, resp[2])};
  for (int i = 0; i < 3; ++i)
    if (u[i].extra) {  // e.g. the keystream of a DECRYPT that failed
      std::printf("keystream_leak\n");
      std::exit(5);
    }
  std::vector<std::string> out(jobs.size());
  AfterRun after;
  after.fin.set_batch_id(RandomBytes(16));
  after.fin.set_wire_version(kmpc::contract::kWireVersion);
  for (size_t k = 0; k < jobs.size(); ++k)
    out[k] = RunOutput(req, resp, u, k, jobs[k], &after);
  WipeRunShares(resp);
  if (after.fin.items_size() > 0) FinalizeEncrypts(c, &after, &out);
  if (!after.sign_items.empty()) SignPads(c, &after, u, &out);
  for (auto& o : out) std::printf("%s\n", o.c_str());
  return 0;
}

// A Sign of one pad drawn earlier (a `pad` job line).
// A verify item's answers: additive shares of r * (T ^ t'), "verified"
// iff they XOR to zero (kmpc.proto SignItem.verify), "not_verified"
// otherwise, "refused S0 S1 S2" if a server did not compute.
int PrintVerified(const std::array<pb::SignResponse, 3>& r) {
  absl::StatusOr<Bytes> sum = CombineSign(r, 0);
  if (!sum.ok()) {
    if (absl::IsDataLoss(sum.status())) ShareMismatch(sum.status());
    std::printf("refused %s\n", std::string(sum.status().message()).c_str());
    return 0;
  }
  const bool ok = *sum == Bytes(16, '\0');
  std::printf("%s\n", ok ? "verified" : "not_verified");
  return 0;
}

int SignCommand(Cluster& c) {
  Bytes batch, data;
  if (!FromHex(absl::GetFlag(FLAGS_run_batch_id_hex), &batch))
    Die("bad --run_batch_id_hex");
  if (!FromHex(absl::GetFlag(FLAGS_data_hex), &data)) Die("bad --data_hex");
  Bytes vtag;
  if (!FromHex(absl::GetFlag(FLAGS_verify_tag_hex), &vtag)) Die("bad --verify_tag_hex");
  std::array<pb::SignRequest, 3> reqs = SignRequests(
      {{batch, absl::GetFlag(FLAGS_job_id), absl::GetFlag(FLAGS_usage), data, vtag}});
  OPENSSL_cleanse(data.data(), data.size());
  std::array<pb::SignResponse, 3> resp;
  const int only = absl::GetFlag(FLAGS_only_party);
  if (only != -1) {
    if (only < 0 || only > 2) Die("--only_party must be 0, 1 or 2");
    std::array<bool, 3> to = {false, false, false};
    to[only] = true;
    auto st = SignOnAll(c, reqs, &resp, to);
    if (!st[only].ok()) RpcError(only, st[only].error_code(), st[only].error_message());
    if (resp[only].results_size() != 1) Die("a server returned a wrong number of results");
    std::printf("sent %s\n", pb::JobStatus_Name(resp[only].results(0).status()).c_str());
    return 0;
  }
  CheckRpcs(SignOnAll(c, reqs, &resp));
  if (!vtag.empty()) return PrintVerified(resp);
  absl::StatusOr<Bytes> tag = CombineSign(resp, 0);
  if (!tag.ok()) {
    if (absl::IsDataLoss(tag.status())) ShareMismatch(tag.status());
    std::printf("refused %s\n", std::string(tag.status().message()).c_str());
    return 0;
  }
  std::printf("ok %s\n", ToHex(*tag).c_str());
  return 0;
}

// ------------------------------------------------------------------ fuzz

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

// ------------------------------------------------------------------ bench

// The benchmark's key: a fresh random key of `key_len` bytes put on the
// three servers with the admin certificate; returns its id.
Bytes PutBenchKey(size_t key_len) {
  Bytes key = RandomBytes(key_len);
  auto cid = key_len == 16 ? kmpc::engine::Cipher::kAes128 : kmpc::engine::Cipher::kAes256;
  Bytes kid = RandomBytes(kmpc::contract::kKeyIdSize);
  // Admin path with the admin certificate.
  kmpc::client::AdminClient admin(OpenChannels(ConfigFor("admin")));
  std::array<absl::Status, 3> each;
  absl::Status st = admin.PutKey(
      cid, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()),
      {kid, 0, "", false}, &each);
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

int Bench(Cluster& c) {
  const int blocks = absl::GetFlag(FLAGS_blocks);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int iters = absl::GetFlag(FLAGS_iters);
  const std::string cipher = absl::GetFlag(FLAGS_cipher);
  if (blocks < 1 || threads < 1 || iters < 1) Die("bad bench parameters");
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
  if (!m.ok() || !p.ok()) Die("cts-bench: cannot build the timestamp");
  std::vector<uint8_t> in = m->bytes;
  in.insert(in.end(), conf_p.begin(), conf_p.end());
  std::vector<absl::Span<const uint8_t>> lanes = {in};
  std::vector<uint64_t> w = kmpc::cts::PackLanes(lanes, 1), out(p->outputs);
  kmpc::cts::ClearEngine e;
  if (!kmpc::cts::Evaluate(*p, e, 1, {absl::MakeConstSpan(w), {}}, {absl::MakeSpan(out), {}})
           .ok())
    Die("cts-bench: cannot build the timestamp");
  OPENSSL_cleanse(in.data(), in.size());
  std::vector<uint8_t> o = kmpc::cts::UnpackLane(out, 1, 0);
  return Bytes(o.begin(), o.end());
}

// cts-bench: --iters logins of an aes*-cts user through KeyOps.Run, one
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
  if (!dp.ok() || !ep.ok()) Die("cts-bench: bad --reply_bytes");
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
        if (r.status() != pb::JOB_OK) Die("cts-bench: a login failed: " + r.detail());
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
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() != 2) Die("usage: kmpc-mpc-client [flags] COMMAND (see source header)");
  std::string cmd = rest[1];
  if (cmd == "put-key" || cmd == "delete-key" || cmd == "list-keys" ||
      cmd == "health" || cmd == "metrics" || cmd == "set-kind") {
    Cluster c(OpenChannels(ConfigFor("admin")));
    if (cmd == "put-key") return PutKey(c);
    if (cmd == "set-kind") return SetKind(c);
    if (cmd == "delete-key") return DeleteKey(c);
    return AdminQuery(c, cmd);
  }
  Cluster c(OpenChannels(ConfigFor("kdc")));
  if (cmd == "jobs") return Jobs(c);
  if (cmd == "sign") return SignCommand(c);
  if (cmd == "fuzz") return Fuzz(c);
  if (cmd == "bench") return Bench(c);
  if (cmd == "cts-bench") return CtsBench(c);
  Die("unknown command " + cmd);
}
