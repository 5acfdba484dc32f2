// kmpc-mpc-client: talks to the three MPC servers the way the KDC does, plus
// the admin operations. Used by the tests, the harness and administrators;
// the benchmarks through the same servers are kmpc-mpc-bench's
// (mpc_bench.cc), the code both share tools/cluster_tool.h.
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
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <array>
#include <cstdio>
#include <future>
#include <iostream>
#include <map>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admin_client.h"
#include "client/reveal.h"
#include "contract.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"

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
ABSL_FLAG(bool, finalize_twice, false, "jobs: try every FINALIZE a second time");
ABSL_FLAG(bool, sign_twice, false, "jobs: try every Sign a second time");
ABSL_FLAG(std::string, run_batch_id_hex, "", "sign: the batch id of the PAD job");
ABSL_FLAG(uint64_t, job_id, 0, "sign: the PAD job's id");
ABSL_FLAG(uint32_t, usage, 0, "sign: the key usage");
ABSL_FLAG(std::string, data_hex, "", "sign: the message (hex)");
ABSL_FLAG(std::string, verify_tag_hex, "",
          "sign: verify this 16-byte tag under a verification pad instead");

namespace {

using namespace ::kmpc::tools;  // NOLINT: the tools' shared helpers

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

// Item n's additive tag share of a Finalize response (kmpc.proto
// FinalizeResponse.tags: 16 bytes per item), a view into the response.
absl::string_view FinalizeTag(const pb::FinalizeResponse& r, size_t n) {
  return absl::string_view(r.tags()).substr(16 * n, 16);
}

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

}  // namespace

int main(int argc, char** argv) {
  SetProgramName("kmpc-mpc-client");
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
  if (cmd == "bench" || cmd == "cts-bench") Die(cmd + " is kmpc-mpc-bench's (mpc_bench.cc)");
  Cluster c(OpenChannels(ConfigFor("kdc")));
  if (cmd == "jobs") return Jobs(c);
  if (cmd == "sign") return SignCommand(c);
  if (cmd == "fuzz") return Fuzz(c);
  Die("unknown command " + cmd);
}
