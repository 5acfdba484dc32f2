// kmpc-mpc-client sign --run_batch_id_hex=.. --job_id=N --usage=U
//     --data_hex=.. [--verify_tag_hex=T] [--only_party=I]
// KeyOps.Sign of the pad a `pad` job drew (cmd_jobs.cc), DATA dealt as
// shares; prints "ok TAG" when the three servers sign, else "refused S0 S1
// S2" (their JobStatus names; with --only_party, "sent STATUS"). With
// --verify_tag_hex=T: a verify item under a `vpad` pad, "verified" or
// "not_verified" (SignItem.verify).
//
// Also the Sign requests the `jobs` batches' sign jobs use (command.h):
// each message, and a verify item's tag after it, dealt afresh as XOR
// shares (client::DealFlat) and wiped from the requests once sent; the
// tag is the XOR of the three servers' additive shares, combined only
// from three JOB_OK answers.
#include <openssl/crypto.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/reveal.h"
#include "contract.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"
#include "tools/mpc_client/command.h"

ABSL_FLAG(std::string, run_batch_id_hex, "", "sign: the batch id of the PAD job");
ABSL_FLAG(uint64_t, job_id, 0, "sign: the PAD job's id");
ABSL_FLAG(uint32_t, usage, 0, "sign: the key usage");
ABSL_FLAG(std::string, data_hex, "", "sign: the message (hex)");
ABSL_FLAG(std::string, verify_tag_hex, "",
          "sign: verify this 16-byte tag under a verification pad instead");

namespace kmpc::tools::mpc_client {
namespace {

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

}  // namespace

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

// Sends reqs[i] to server i (those in `to`); wipes the shares after.
std::array<grpc::Status, 3> SignOnAll(Cluster& c, std::array<pb::SignRequest, 3>& reqs,
                                      std::array<pb::SignResponse, 3>* resp,
                                      std::array<bool, 3> to) {
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

// A Sign of one pad drawn earlier (a `pad` job line).
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

}  // namespace kmpc::tools::mpc_client
