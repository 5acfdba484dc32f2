#include "ticket_decrypt.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/reveal.h"
#include "contract.h"

namespace kmpc::admin {
namespace pb = kmpc::v1;
namespace {

constexpr uint64_t kJobId = 1;

void Wipe(std::string* s) { OPENSSL_cleanse(s->data(), s->size()); }

// The three servers' copies of the request: the same job, C || T dealt
// afresh as replicated shares (client::DealFlat), so that no server
// receives the ciphertext (kmpc.proto JobType, aes*-cts DECRYPT).
absl::Status BuildRequests(pb::Cipher cipher, const std::string& key_id,
                           absl::Span<const uint8_t> ct,
                           std::array<pb::RunRequest, client::kParties>* reqs) {
  pb::RunRequest req;
  std::string batch_id(contract::kBatchIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(batch_id.data()),
                 batch_id.size()) != 1)
    return absl::InternalError("no randomness for a batch id");
  req.set_batch_id(batch_id);
  req.set_wire_version(contract::kWireVersion);
  req.set_now_unix(static_cast<int64_t>(std::time(nullptr)));
  pb::Job* job = req.add_jobs();
  job->set_job_id(kJobId);
  job->set_key_id(key_id);
  job->set_type(pb::JOB_DECRYPT);
  job->set_usage(2);  // KRB5_KEYUSAGE_KDC_REP_TICKET
  job->set_length(static_cast<uint32_t>(ct.size()));
  job->set_cipher(cipher);
  job->set_cts_key(pb::CTS_KEY_DEALT);
  *reqs = {req, req, req};
  client::DealRandom random;
  if (absl::Status st = random.Draw(ct.size()); !st.ok()) return st;
  return client::DealFlat(ct, random.Take(ct.size()),
                          {(*reqs)[0].mutable_data_shares(),
                           (*reqs)[1].mutable_data_shares(),
                           (*reqs)[2].mutable_data_shares()});
}

// What one server's answer says of the job: its status, after checking
// that the answer is to this request.
absl::StatusOr<pb::JobStatus> JobStatusOf(const pb::RunRequest& req,
                                          const pb::RunResponse& resp,
                                          const std::string& server) {
  if (resp.wire_version() != contract::kWireVersion)
    return absl::FailedPreconditionError(
        contract::WireVersionProblem(resp.wire_version(), server));
  if (resp.batch_id() != req.batch_id() || resp.results_size() != 1 ||
      resp.results(0).job_id() != kJobId)
    return absl::DataLossError(absl::StrCat(server, " answered another request"));
  return resp.results(0).status();
}

absl::Status FailedJob(pb::JobStatus status, const std::string& detail) {
  switch (status) {
    case pb::JOB_INTEGRITY_FAILED:
      return absl::UnauthenticatedError("the ticket does not verify under the key");
    case pb::JOB_UNKNOWN_KEY:
    case pb::JOB_UNKNOWN_USAGE:
      return absl::NotFoundError(absl::StrCat(
          "the MPC servers hold no ticket material for the key (",
          pb::JobStatus_Name(status), "; is it dealt as a service key?)"));
    default:
      return absl::FailedPreconditionError(absl::StrCat(
          "the MPC servers refused the ticket's DECRYPT: ",
          pb::JobStatus_Name(status), detail.empty() ? "" : ": ", detail));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TicketDecrypter>> TicketDecrypter::Open(
    const client::ClusterConfig& cfg, uint64_t unproven_per_minute) {
  auto ch = client::ClusterChannels::Open(cfg);
  if (!ch.ok()) return ch.status();
  return std::unique_ptr<TicketDecrypter>(
      new TicketDecrypter(std::move(*ch), unproven_per_minute));
}

TicketDecrypter::TicketDecrypter(client::ClusterChannels channels,
                                 uint64_t unproven_per_minute)
    : channels_(std::move(channels)),
      per_minute_(static_cast<double>(unproven_per_minute)),
      budget_{per_minute_, per_minute_, per_minute_ / 60, absl::Time()} {
  for (int i = 0; i < client::kParties; ++i)
    stubs_[i] = pb::KeyOps::NewStub(channels_.channel(i));
}

bool TicketDecrypter::Admit(const Length& len) {
  std::lock_guard<std::mutex> l(mu_);
  if (per_minute_ == 0 || proven_.Has(len)) return true;
  return budget_.Take(absl::Now());
}

void TicketDecrypter::Prove(const Length& len) {
  std::lock_guard<std::mutex> l(mu_);
  proven_.Prove(len);
}

absl::Status TicketDecrypter::RunOnAll(
    const std::array<pb::RunRequest, client::kParties>& reqs,
    std::array<pb::RunResponse, client::kParties>* resp) {
  // One Run on the three servers at once (they compute it together);
  // followers first: party 0 proposes the batch when its copy arrives.
  grpc::CompletionQueue cq;
  std::array<grpc::ClientContext, client::kParties> ctx;
  std::array<grpc::Status, client::kParties> st;
  std::array<std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RunResponse>>,
             client::kParties> rpc;
  for (int i : {2, 1, 0}) {
    channels_.SetDeadline(&ctx[i]);
    rpc[i] = stubs_[i]->AsyncRun(&ctx[i], reqs[i], &cq);
    rpc[i]->Finish(&(*resp)[i], &st[i], reinterpret_cast<void*>(intptr_t{i}));
  }
  for (int n = 0; n < client::kParties; ++n) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok)) break;
  }
  for (int i = 0; i < client::kParties; ++i)
    if (!st[i].ok())
      return channels_.RpcError(i, "KeyOps", "Run", st[i],
                                "kadmind runs it with the KDC's certificate");
  return absl::OkStatus();
}

absl::Status TicketDecrypter::Decrypt(pb::Cipher cipher, const std::string& key_id,
                                      absl::Span<const uint8_t> ct,
                                      absl::Span<uint8_t> out, size_t* out_len) {
  *out_len = 0;
  const size_t overhead = contract::kCtsConfounder + contract::kCtsTag;
  if (ct.size() < overhead || out.size() < ct.size())
    return absl::InvalidArgumentError("a ticket ciphertext too short to decrypt");
  const Length len{static_cast<int>(cipher), ct.size()};
  if (!Admit(len))
    return absl::ResourceExhaustedError(absl::StrCat(
        "over the compile budget: tickets of lengths no ticket verified at recently, "
        "at most ", static_cast<uint64_t>(per_minute_), " a minute"));
  std::array<pb::RunRequest, client::kParties> reqs;
  std::array<pb::RunResponse, client::kParties> resp;
  absl::Status st = BuildRequests(cipher, key_id, ct, &reqs);
  if (st.ok()) st = RunOnAll(reqs, &resp);
  for (auto& r : reqs) Wipe(r.mutable_data_shares());
  if (!st.ok()) return st;
  // The same verdict from all three, then conf || P from their shares.
  pb::JobStatus verdict = pb::JOB_STATUS_UNSPECIFIED;
  for (int i = 0; i < client::kParties && st.ok(); ++i) {
    auto s = JobStatusOf(reqs[i], resp[i], channels_.Describe(i));
    if (!s.ok()) st = s.status();
    else if (i > 0 && *s != verdict)
      st = absl::DataLossError("the MPC servers disagree on the ticket's DECRYPT");
    else verdict = *s;
  }
  const size_t clen = ct.size() - contract::kCtsTag;
  std::array<client::ShareView, client::kParties> views;
  for (int i = 0; i < client::kParties && st.ok() && verdict == pb::JOB_OK; ++i) {
    const std::string& sh = resp[i].shares();
    if (sh.size() != 2 * clen) {
      st = absl::DataLossError(absl::StrCat(channels_.Describe(i),
                                            " sent shares of the wrong length"));
      break;
    }
    views[i] = {absl::string_view(sh).substr(0, clen),
                absl::string_view(sh).substr(clen, clen)};
  }
  if (st.ok() && verdict != pb::JOB_OK)
    st = FailedJob(verdict, resp[0].results(0).detail());
  if (st.ok()) {
    std::vector<uint8_t> plain(clen);
    st = client::Reveal(views, absl::MakeSpan(plain), "the ticket's plaintext",
                        [this](int p) { return channels_.Describe(p); });
    if (st.ok()) {
      std::copy(plain.begin() + contract::kCtsConfounder, plain.end(), out.begin());
      *out_len = clen - contract::kCtsConfounder;
      Prove(len);
    }
    OPENSSL_cleanse(plain.data(), plain.size());
  }
  for (auto& r : resp) Wipe(r.mutable_shares());
  return st;
}

}  // namespace kmpc::admin
