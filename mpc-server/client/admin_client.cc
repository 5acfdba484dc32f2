#include "client/admin_client.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <future>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "contract.h"
#include "status_class.h"

namespace kmpc::client {
namespace pb = kmpc::v1;
namespace {

// Runs f(i) for the three servers in parallel.
template <typename F>
auto OnAll(F f) -> std::array<decltype(f(0)), kParties> {
  std::array<std::future<decltype(f(0))>, kParties> fs;
  for (int i = 0; i < kParties; ++i) fs[i] = std::async(std::launch::async, f, i);
  return {fs[0].get(), fs[1].get(), fs[2].get()};
}

void Wipe(std::string* s) { OPENSSL_cleanse(s->data(), s->size()); }

// The server's answer says the id was taken there before our PutKey
// (share_store: an id stored, or deleted and not reusable): its store is
// unchanged and holds an earlier key (or tombstone) under that id.
bool IdTakenThere(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::ALREADY_EXISTS ||
         st.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
}

// The PutKey certainly stored nothing: refused before or by the server.
bool CertainlyNotStored(const grpc::Status& st) {
  return contract::ClassOf(static_cast<absl::StatusCode>(st.error_code()))
      .put_not_stored;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminClient>> AdminClient::Connect(
    const ClusterConfig& cfg, const ChannelOptions& opts) {
  auto ch = ClusterChannels::Open(cfg, opts);
  if (!ch.ok()) return ch.status();
  return std::make_unique<AdminClient>(std::move(*ch));
}

AdminClient::AdminClient(ClusterChannels channels)
    : channels_(std::move(channels)) {
  for (int i = 0; i < kParties; ++i)
    stubs_[i] = pb::Admin::NewStub(channels_.channel(i));
}

absl::Status AdminClient::Error(int party, const char* method,
                                const grpc::Status& st) const {
  return channels_.RpcError(party, "Admin", method, st,
                            "use the admin client certificate");
}

std::array<absl::StatusOr<pb::HealthResponse>, kParties> AdminClient::Health() {
  return OnAll([&](int i) -> absl::StatusOr<pb::HealthResponse> {
    grpc::ClientContext ctx;
    channels_.SetDeadline(&ctx);
    pb::HealthResponse r;
    grpc::Status st = stubs_[i]->Health(&ctx, pb::HealthRequest(), &r);
    if (!st.ok()) return Error(i, "Health", st);
    return r;
  });
}

std::array<absl::StatusOr<std::vector<pb::KeyInfo>>, kParties>
AdminClient::ListKeys() {
  return OnAll([&](int i) -> absl::StatusOr<std::vector<pb::KeyInfo>> {
    grpc::ClientContext ctx;
    channels_.SetDeadline(&ctx);
    pb::ListKeysResponse r;
    grpc::Status st = stubs_[i]->ListKeys(&ctx, pb::ListKeysRequest(), &r);
    if (!st.ok()) return Error(i, "ListKeys", st);
    return std::vector<pb::KeyInfo>(r.keys().begin(), r.keys().end());
  });
}

std::array<absl::StatusOr<std::string>, kParties> AdminClient::Metrics() {
  return OnAll([&](int i) -> absl::StatusOr<std::string> {
    grpc::ClientContext ctx;
    channels_.SetDeadline(&ctx);
    pb::MetricsResponse r;
    grpc::Status st = stubs_[i]->Metrics(&ctx, pb::MetricsRequest(), &r);
    if (!st.ok()) return Error(i, "Metrics", st);
    return r.text();
  });
}

std::array<absl::StatusOr<pb::ResetBreakerResponse>, kParties>
AdminClient::ResetBreaker() {
  return OnAll([&](int i) -> absl::StatusOr<pb::ResetBreakerResponse> {
    grpc::ClientContext ctx;
    channels_.SetDeadline(&ctx);
    pb::ResetBreakerResponse r;
    grpc::Status st = stubs_[i]->ResetBreaker(&ctx, pb::ResetBreakerRequest(), &r);
    if (!st.ok()) return Error(i, "ResetBreaker", st);
    return r;
  });
}

absl::StatusOr<pb::SetKeyKindResponse> AdminClient::SetKeyKindOn(int party,
                                                                 const std::string& key_id,
                                                                 KeyKind kind,
                                                                 bool allow_ungate) {
  pb::SetKeyKindRequest req;
  req.set_key_id(key_id);
  req.set_kind(static_cast<pb::KeyKind>(kind));
  req.set_allow_ungate(allow_ungate);
  grpc::ClientContext ctx;
  channels_.SetDeadline(&ctx);
  pb::SetKeyKindResponse r;
  grpc::Status st = stubs_[party]->SetKeyKind(&ctx, req, &r);
  if (!st.ok()) return Error(party, "SetKeyKind", st);
  return r;
}

std::array<absl::StatusOr<pb::SetKeyKindResponse>, kParties> AdminClient::SetKeyKind(
    const std::string& key_id, KeyKind kind, bool allow_ungate) {
  return OnAll([&](int i) { return SetKeyKindOn(i, key_id, kind, allow_ungate); });
}

absl::Status AdminClient::CheckReachable() {
  auto h = Health();
  for (int i = 0; i < kParties; ++i)
    if (!h[i].ok()) return h[i].status();
  for (int i = 0; i < kParties; ++i)
    if (h[i]->party() != static_cast<uint32_t>(i))
      return absl::FailedPreconditionError(absl::StrCat(
          Describe(i), " says it is party ", h[i]->party(),
          ": list the servers in party order (0, 1, 2)"));
  return absl::OkStatus();
}

absl::Status AdminClient::PutKey(engine::Cipher cipher,
                                 absl::Span<const uint8_t> key,
                                 const KeyMeta& meta,
                                 std::array<absl::Status, kParties>* each) {
  if (meta.key_id.size() != contract::kKeyIdSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "a key id has ", contract::kKeyIdSize, " bytes, not ", meta.key_id.size()));
  auto views = engine::DealKey(cipher, key, meta.kind);
  if (!views.ok())
    return absl::InternalError(absl::StrCat("dealer: ", views.status().message()));
  if (meta.origin)
    for (engine::KeyShares& v : *views) v.origin_deal_id = *meta.origin;
  std::array<pb::PutKeyRequest, kParties> reqs;
  for (int i = 0; i < kParties; ++i) {
    pb::KeyInfo* info = reqs[i].mutable_info();
    info->set_key_id(meta.key_id);
    info->set_cipher(engine::ToProto(cipher));
    info->set_kvno(meta.kvno);
    info->set_label(meta.label);
    info->set_kind(static_cast<pb::KeyKind>(meta.kind));
    reqs[i].set_party(i);
    std::vector<uint8_t> ser = (*views)[i].Serialize();
    reqs[i].set_shares(ser.data(), ser.size());
    OPENSSL_cleanse(ser.data(), ser.size());
    reqs[i].set_replace(meta.replace);
  }
  // The three views die (and are wiped) here; only the requests hold shares.
  views = absl::InternalError("wiped");
  auto st = OnAll([&](int i) -> grpc::Status {
    grpc::ClientContext ctx;
    channels_.SetDeadline(&ctx);
    pb::PutKeyResponse r;
    return stubs_[i]->PutKey(&ctx, reqs[i], &r);
  });
  for (auto& r : reqs) Wipe(r.mutable_shares());
  std::vector<std::string> errors;
  int first_failed = -1;
  for (int i = 0; i < kParties; ++i) {
    absl::Status e = Error(i, "PutKey", st[i]);
    if (each != nullptr) (*each)[i] = e;
    if (e.ok()) continue;
    if (first_failed < 0) first_failed = i;
    errors.push_back(std::string(e.message()));
  }
  if (first_failed < 0) return absl::OkStatus();
  const absl::StatusCode code = Error(first_failed, "PutKey", st[first_failed]).code();
  // All-or-nothing: take the key id off every server that stored it or
  // may have (see the header); NOT_FOUND is the expected answer from those
  // that refused it.
  std::array<absl::Status, kParties> del;
  auto asked = OnAll([&](int i) -> bool {
    if (!st[i].ok() && IdTakenThere(st[i])) return false;
    del[i] = DeleteKeyOn(i, meta.key_id);
    return true;
  });
  std::vector<std::string> removed_from, left_on;
  for (int i = 0; i < kParties; ++i) {
    if (!asked[i]) continue;
    const bool gone = del[i].ok() || absl::IsNotFound(del[i]);
    if (st[i].ok())
      (gone ? removed_from : left_on).push_back(absl::StrCat(i));
    else if (!gone && !CertainlyNotStored(st[i]))
      left_on.push_back(absl::StrCat(i, " (maybe)"));
  }
  std::string msg = absl::StrJoin(errors, "; ");
  if (!removed_from.empty())
    absl::StrAppend(&msg, "; the shares already stored on server ",
                    absl::StrJoin(removed_from, ", "), " were removed again");
  if (!left_on.empty())
    absl::StrAppend(&msg, "; WARNING: could not remove key id ",
                    absl::BytesToHexString(meta.key_id), " from server ",
                    absl::StrJoin(left_on, ", "),
                    " (nothing refers to it; `kmpc-admin status --kdb` lists it)");
  return absl::Status(code, msg);
}

absl::Status AdminClient::DeleteKeyOn(int party, const std::string& key_id) {
  grpc::ClientContext ctx;
  channels_.SetDeadline(&ctx);
  pb::DeleteKeyRequest d;
  d.set_key_id(key_id);
  pb::DeleteKeyResponse r;
  return Error(party, "DeleteKey", stubs_[party]->DeleteKey(&ctx, d, &r));
}

std::array<absl::Status, kParties> AdminClient::DeleteKeyEach(
    const std::string& key_id) {
  return OnAll([&](int i) { return DeleteKeyOn(i, key_id); });
}

std::array<absl::Status, kParties> AdminClient::DeleteKeysEach(
    const std::vector<std::string>& key_ids) {
  pb::DeleteKeysRequest req;
  for (const std::string& id : key_ids) req.add_key_ids(id);
  return OnAll([&](int i) -> absl::Status {
    if (key_ids.empty()) return absl::OkStatus();
    grpc::ClientContext ctx;
    // One scrub of a store holding tens of thousands of keys: more than a
    // normal call's time.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    pb::DeleteKeysResponse r;
    return Error(i, "DeleteKeys", stubs_[i]->DeleteKeys(&ctx, req, &r));
  });
}

std::array<absl::StatusOr<std::vector<pb::RefreshResult>>, kParties>
AdminClient::RefreshKeys(const std::vector<RefreshPair>& pairs,
                         absl::Duration timeout, int rebuild_party) {
  pb::RefreshKeysRequest req;
  std::string batch_id(contract::kBatchIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(batch_id.data()),
                 static_cast<int>(batch_id.size())) != 1) {
    absl::Status e = absl::InternalError("no randomness for a batch id");
    return {e, e, e};
  }
  req.set_batch_id(batch_id);
  if (rebuild_party >= 0) req.set_rebuild_party(static_cast<uint32_t>(rebuild_party));
  for (const RefreshPair& p : pairs) {
    auto* x = req.add_pairs();
    x->set_old_key_id(p.old_key_id);
    x->set_new_key_id(p.new_key_id);
  }
  return OnAll([&](int i) -> absl::StatusOr<std::vector<pb::RefreshResult>> {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    pb::RefreshKeysResponse r;
    grpc::Status st = stubs_[i]->RefreshKeys(&ctx, req, &r);
    if (!st.ok()) return Error(i, "RefreshKeys", st);
    if (r.party() != static_cast<uint32_t>(i) ||
        r.results_size() != static_cast<int>(pairs.size()))
      return absl::DataLossError(absl::StrCat(
          Describe(i), ": RefreshKeys answered as party ", r.party(), " with ",
          r.results_size(), " results for ", pairs.size(), " pairs"));
    return std::vector<pb::RefreshResult>(r.results().begin(), r.results().end());
  });
}

absl::Status AdminClient::DeleteKey(const std::string& key_id) {
  auto st = DeleteKeyEach(key_id);
  for (int i = 0; i < kParties; ++i)
    if (!st[i].ok() && !absl::IsNotFound(st[i])) return st[i];
  return absl::OkStatus();
}

}  // namespace kmpc::client
