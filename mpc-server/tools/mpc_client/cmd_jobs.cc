// kmpc-mpc-client jobs [--only_party=I] [--finalize_twice] [--sign_twice]:
// one batch from stdin, one job per line (hex arguments), as the KDC runs
// them (KeyOps, with the kdc certificate):
//   encrypt  KEYID USAGE PLAINTEXT   -> ok CTR0||C||T
//   keystream KEYID USAGE NBYTES     -> ok CTR0 KEYSTREAM
//   decrypt  KEYID USAGE CTR0||C||T  -> ok PLAINTEXT | integrity_failed
//   checksum KEYID USAGE DATA        -> ok CTR0||TAG
//   verify   KEYID USAGE DATA CKSUM  -> ok | integrity_failed
//   pad      KEYID USAGE MAXLEN      -> ok CTR0 BATCHID JOBID
//   vpad     KEYID USAGE MAXLEN CTR0 -> ok CTR0 BATCHID JOBID
//                                       (a verification pad at CTR0)
//   sign     KEYID USAGE DATA        -> ok CTR0||TAG
// aes*-cts jobs (kmpc.proto JobType), OP:aes128-cts or OP:aes256-cts (a
// key put with --cipher=aes*-cts):
//   cts_decrypt  KEYID USAGE C||T  -> ok CONF||P | integrity_failed
//   cts_encrypt  KEYID USAGE P     -> ok C||T
//   cts_checksum KEYID USAGE DATA  -> ok CKSUM
// C||T, P and DATA dealt as shares; other outcomes print "status NAME"
// (JOB_WITHHELD, JOB_UNKNOWN_USAGE). OP@N (any job): released only if job
// N (1-based) ends JOB_OK (Job.release_if_ok).
// checksum/verify messages and sign data are dealt as shares
// (client::DealFlat): no server receives them. encrypt runs ENCRYPT, XORs,
// then one FINALIZE for all (--finalize_twice: a second one, printing
// "second_finalize PARTY CODE" per server); sign runs a PAD of len(DATA)
// bytes, then one KeyOps.Sign for all (cmd_sign.cc's helpers;
// --sign_twice: a second Sign of the same pads, printing "second_sign
// PARTY STATUS" per server). --only_party: the Run goes to that server
// alone, "sent" when it succeeds.
// Every job names a cipher (kmpc.proto Job.cipher): OP may be OP:aes128,
// OP:aes256 or OP:N (N a raw enum value, 0 = CIPHER_UNSPECIFIED, for
// tests); a bare OP takes --cipher. A key dealt for the other cipher gives
// "error 7 ..." (JOB_WRONG_CIPHER: PERMISSION_DENIED). A job error prints
// "error CODE MESSAGE". The servers' public results of a job must agree,
// and the revealed values' share copies too ("share_mismatch", exit 4); a
// server whose answer holds bytes beyond what its results take (the
// keystream of a DECRYPT that failed, say) prints "keystream_leak", exit 5.
// Revealed keystreams and messages are wiped once used.
#include <openssl/crypto.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reveal.h"
#include "contract.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"
#include "tools/mpc_client/command.h"

ABSL_FLAG(bool, finalize_twice, false, "jobs: try every FINALIZE a second time");
ABSL_FLAG(bool, sign_twice, false, "jobs: try every Sign a second time");

namespace kmpc::tools::mpc_client {
namespace {

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

}  // namespace

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

}  // namespace kmpc::tools::mpc_client
