// AdminService (services.h): the operator's tools' calls. PutKey,
// DeleteKey(s) and SetKeyKind change the share store and make the key
// cache forget the old view before they answer; RefreshKeys runs on the
// ring (Scheduler::SubmitRefresh) and stores every new record of a refresh
// in one store transaction; Health, ListKeys and Metrics report public
// values only. Every call is authorized as an admin client first.
#include "service/services.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <map>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/refresh.h"
#include "service/request_checks.h"
#include "share/replicated.h"
#include "util/log.h"

namespace kmpc::service {

namespace pb = ::kmpc::v1;

absl::Status AdminService::DoPutKey(const kmpc::v1::PutKeyRequest& req) {
  const auto& info = req.info();
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(info.key_id().data()), info.key_id().size()));
  if (!id.ok()) return id.status();
  const std::optional<engine::Cipher> cipher = engine::CipherFromProto(info.cipher());
  if (!cipher)
    return absl::InvalidArgumentError("cipher must be CIPHER_AES128 or CIPHER_AES256");
  if (req.party() != static_cast<uint32_t>(options_.party))
    return absl::InvalidArgumentError(absl::StrCat(
        "shares are for party ", req.party(), ", this is party ", options_.party));
  auto ks = engine::KeyShares::Parse(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(req.shares().data()), req.shares().size()));
  if (!ks.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("shares do not parse: ", ks.status().message()));
  if (absl::Status st = ks->Validate(); !st.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("shares are invalid: ", st.message()));
  if (ks->party != options_.party || ks->cipher != *cipher)
    return absl::InvalidArgumentError(
        "shares' party or cipher differ from the request's");
  if (info.kind() < 0 || info.kind() >= kKeyKinds)
    return absl::InvalidArgumentError(absl::StrCat("unknown key kind ", info.kind()));
  store::KeyMeta meta{*id, *cipher, info.kvno(), info.label(),
                      static_cast<KeyKind>(info.kind())};
  absl::Status st = store_->Put(
      meta,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(req.shares().data()),
                          req.shares().size()),
      req.replace());
  keys_->Invalidate(info.key_id());
  if (st.ok())
    KMPC_LOG(INFO) << "stored shares of key " << store::KeyIdHex(*id)
                   << " (kvno " << info.kvno() << ")";
  return st;
}

grpc::Status AdminService::PutKey(grpc::ServerContext* ctx,
                                  const kmpc::v1::PutKeyRequest* req,
                                  kmpc::v1::PutKeyResponse*) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  absl::Status st = DoPutKey(*req);
  // The request is ours until we return: wipe this copy of the shares.
  std::string* shares = const_cast<kmpc::v1::PutKeyRequest*>(req)->mutable_shares();
  OPENSSL_cleanse(shares->data(), shares->size());
  return ToGrpcStatus(st);
}

grpc::Status AdminService::DeleteKey(grpc::ServerContext* ctx,
                                     const kmpc::v1::DeleteKeyRequest* req,
                                     kmpc::v1::DeleteKeyResponse*) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(req->key_id().data()), req->key_id().size()));
  if (!id.ok()) return ToGrpcStatus(id.status());
  absl::Status st = store_->Delete(*id);
  keys_->Invalidate(req->key_id());
  if (st.ok()) KMPC_LOG(INFO) << "deleted key " << store::KeyIdHex(*id);
  return ToGrpcStatus(st);
}

grpc::Status AdminService::ListKeys(grpc::ServerContext* ctx,
                                    const kmpc::v1::ListKeysRequest*,
                                    kmpc::v1::ListKeysResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  auto list = store_->List();
  if (!list.ok()) return ToGrpcStatus(list.status());
  for (const auto& m : *list) {
    auto* k = resp->add_keys();
    k->set_key_id(m.key_id.data(), m.key_id.size());
    k->set_cipher(engine::ToProto(m.cipher));
    k->set_kvno(m.kvno);
    k->set_label(m.label);
    k->set_kind(static_cast<pb::KeyKind>(m.kind));
    k->set_kind_unrecorded(m.kind_unrecorded);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Health(grpc::ServerContext* ctx,
                                  const kmpc::v1::HealthRequest*,
                                  kmpc::v1::HealthResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  resp->set_party(options_.party);
  resp->set_ring_up(scheduler_->RingUp());
  resp->set_workers(scheduler_->workers());
  auto count = store_->Count();
  if (count.ok()) resp->set_keys(*count);
  resp->set_batches_ok(metrics_->batches_ok());
  resp->set_batches_failed(metrics_->batches_failed());
  resp->set_security(scheduler_->malicious() ? "malicious" : "semi-honest");
  if (breaker_ != nullptr) {
    resp->set_breaker_open(breaker_->open());
    resp->set_breaker_detail(breaker_->Detail());
    resp->set_deviations(breaker_->deviations());
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::DoResetBreaker(kmpc::v1::ResetBreakerResponse* resp) {
  if (breaker_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this server has no deviation breaker");
  absl::StatusOr<std::string> cleared = breaker_->Reset();
  if (!cleared.ok()) return ToGrpcStatus(cleared.status());
  resp->set_was_open(!cleared->empty());
  resp->set_detail(*cleared);
  return grpc::Status::OK;
}

grpc::Status AdminService::ResetBreaker(grpc::ServerContext* ctx,
                                        const kmpc::v1::ResetBreakerRequest*,
                                        kmpc::v1::ResetBreakerResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  KMPC_LOG(WARNING) << "Admin.ResetBreaker from an authorized admin client";
  return DoResetBreaker(resp);
}

namespace {

// What a refreshed record copies from the old one and the three servers
// compare (refresh.h, RefreshSource::public_meta).
std::string PublicMeta(const store::KeyMeta& m) {
  return absl::StrCat(static_cast<int>(m.cipher), ":", m.kvno, ":", static_cast<int>(m.kind),
                      ":", m.label);
}

// The inverse of PublicMeta, for a rebuilt party's new records (the label
// may itself hold ':').
absl::StatusOr<store::KeyMeta> ParsePublicMeta(absl::string_view s) {
  const size_t c1 = s.find(':');
  const size_t c2 = c1 == absl::string_view::npos ? c1 : s.find(':', c1 + 1);
  const size_t c3 = c2 == absl::string_view::npos ? c2 : s.find(':', c2 + 1);
  int cipher = 0, kind = 0;
  uint32_t kvno = 0;
  if (c3 == absl::string_view::npos || !absl::SimpleAtoi(s.substr(0, c1), &cipher) ||
      !absl::SimpleAtoi(s.substr(c1 + 1, c2 - c1 - 1), &kvno) ||
      !absl::SimpleAtoi(s.substr(c2 + 1, c3 - c2 - 1), &kind) ||
      !engine::CipherFromProto(cipher) || kind < 0 || kind >= kKeyKinds)
    return absl::DataLossError("malformed key metadata from the surviving servers");
  store::KeyMeta m;
  m.cipher = *engine::CipherFromProto(cipher);
  m.kvno = kvno;
  m.kind = static_cast<KeyKind>(kind);
  m.label = std::string(s.substr(c3 + 1));
  return m;
}

}  // namespace

namespace {

absl::Span<const uint8_t> AsSpan(const std::string& b) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

// Runs on the scheduler's worker thread for each pair of a refresh: the old
// id's shares from this party's store (refused when they do not fit their
// record), whether the new id is taken, and the old record's metadata
// under the new id into *metas (read by DoRefreshKeys after SubmitRefresh
// returned: the scheduler's lock orders the two).
engine::RefreshSource LookupRefreshSource(
    store::ShareStore* st, int party,
    std::map<std::string, store::KeyMeta>* metas,
    const engine::RefreshItem& it) {
  engine::RefreshSource src;
  auto old_id = store::KeyIdFromBytes(AsSpan(it.old_key_id));
  auto new_id = store::KeyIdFromBytes(AsSpan(it.new_key_id));
  if (!old_id.ok() || !new_id.ok()) {
    src.old_key = absl::InvalidArgumentError("bad key id");
    return src;
  }
  auto taken = st->Taken(*new_id);
  src.new_id_taken = !taken.ok() || *taken;  // an unreadable store: refuse
  auto rec = st->Get(*old_id);
  if (!rec.ok()) {
    src.old_key = rec.status();
    return src;
  }
  auto ks = engine::KeyShares::Parse(rec->shares.span());
  if (!ks.ok()) {
    src.old_key = ks.status();
    return src;
  }
  if (ks->party != party ||
      static_cast<int>(ks->cipher) != static_cast<int>(rec->meta.cipher)) {
    src.old_key = absl::DataLossError("stored shares do not fit their record");
    return src;
  }
  ks->kind = rec->meta.kind;
  src.old_key = std::make_shared<const engine::KeyShares>(std::move(*ks));
  src.public_meta = PublicMeta(rec->meta);
  store::KeyMeta m = rec->meta;
  m.key_id = *new_id;
  (*metas)[it.new_key_id] = std::move(m);
  return src;
}

// The metadata to store with pair j's new shares: the old record's, or on
// the rebuilt server (which has none) what the survivors sent.
absl::StatusOr<store::KeyMeta> RefreshedMeta(
    const engine::RefreshItem& item, const engine::RefreshOutcome& r,
    bool rebuilt_here, const std::map<std::string, store::KeyMeta>& metas) {
  if (!rebuilt_here) {
    auto m = metas.find(item.new_key_id);
    if (m == metas.end())
      return absl::InternalError("refresh lost a pair's metadata");
    return m->second;
  }
  auto meta = ParsePublicMeta(r.public_meta);
  if (!meta.ok()) return meta.status();
  auto id = store::KeyIdFromBytes(AsSpan(item.new_key_id));
  if (!id.ok()) return id.status();
  meta->key_id = *id;
  return meta;
}

}  // namespace

grpc::Status AdminService::DoRefreshKeys(const pb::RefreshKeysRequest& req,
                                         pb::RefreshKeysResponse* resp) {
  BatchId batch_id;
  if (grpc::Status s = ParseBatchId(req.batch_id(), &batch_id); !s.ok()) return s;
  if (grpc::Status s = CheckRequestSize(req.pairs_size(), "refresh", "pairs",
                                        engine::kMaxRefreshPairs);
      !s.ok())
    return s;
  std::vector<engine::RefreshItem> items;
  items.reserve(req.pairs_size());
  for (const auto& p : req.pairs()) items.push_back({p.old_key_id(), p.new_key_id()});
  int rebuild_party = engine::kNoRebuild;
  if (req.has_rebuild_party()) {
    if (req.rebuild_party() > 2)
      return Refuse(pb::BATCH_MALFORMED, "rebuild_party must be 0, 1 or 2");
    rebuild_party = static_cast<int>(req.rebuild_party());
  }
  auto metas = std::make_shared<std::map<std::string, store::KeyMeta>>();
  engine::RefreshLookup lookup = [st = store_, party = options_.party,
                                  metas](const engine::RefreshItem& it) {
    return LookupRefreshSource(st, party, metas.get(), it);
  };
  BatchOutcome out =
      scheduler_->SubmitRefresh(batch_id, items, std::move(lookup), rebuild_party);
  // Not in the batch metrics: those count the KDC's work (run/finalize).
  if (!out.status.ok()) return Refuse(out);
  if (out.refreshed.size() != items.size())
    return Refuse(pb::BATCH_INTERNAL, "refresh returned a wrong number of results");
  return StoreRefreshed(items, out, rebuild_party == options_.party, *metas, resp);
}

// All new records of a refresh in one transaction; the serialized shares
// are wiped on every way out.
grpc::Status AdminService::StoreRefreshed(
    const std::vector<engine::RefreshItem>& items, const BatchOutcome& out,
    bool rebuilt_here, const std::map<std::string, store::KeyMeta>& metas,
    pb::RefreshKeysResponse* resp) {
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<store::ShareStore::NewRecord> records;
  blobs.reserve(items.size());  // records point into blobs
  auto wipe = [&blobs] {
    for (auto& b : blobs) OPENSSL_cleanse(b.data(), b.size());
  };
  for (size_t j = 0; j < items.size(); ++j) {
    const engine::RefreshOutcome& r = out.refreshed[j];
    if (r.status != pb::JOB_OK) continue;
    if (r.shares == nullptr) {
      wipe();
      return Refuse(pb::BATCH_INTERNAL, "refresh lost a pair's shares");
    }
    auto meta = RefreshedMeta(items[j], r, rebuilt_here, metas);
    if (!meta.ok()) {
      wipe();
      return absl::IsInternal(meta.status())
                 ? Refuse(pb::BATCH_INTERNAL, std::string(meta.status().message()))
                 : ToGrpcStatus(meta.status());
    }
    blobs.push_back(r.shares->Serialize());
    records.push_back({*std::move(meta), blobs.back()});
  }
  absl::Status stored = store_->PutAll(records);
  wipe();
  for (const auto& it : items) keys_->Invalidate(it.new_key_id);
  if (!stored.ok()) {
    KMPC_LOG(WARNING) << "refresh of " << records.size()
                      << " keys computed but not stored: " << stored;
    return ToGrpcStatus(stored);
  }
  KMPC_LOG(INFO) << "refreshed the shares of " << records.size() << " of "
                 << items.size() << " keys";
  resp->set_party(options_.party);
  for (size_t j = 0; j < items.size(); ++j) {
    auto* r = resp->add_results();
    r->set_new_key_id(items[j].new_key_id);
    r->set_status(out.refreshed[j].status);
    r->set_detail(out.refreshed[j].detail);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::RefreshKeys(grpc::ServerContext* ctx,
                                       const pb::RefreshKeysRequest* req,
                                       pb::RefreshKeysResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  grpc::Status st = DoRefreshKeys(*req, resp);
  if (!st.ok()) resp->Clear();
  return st;
}

grpc::Status AdminService::DoDeleteKeys(const pb::DeleteKeysRequest& req,
                                        pb::DeleteKeysResponse* resp) {
  constexpr int kMaxIds = 100000;
  if (req.key_ids_size() > kMaxIds)
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxIds, " key ids per DeleteKeys")));
  std::vector<store::KeyId> ids;
  ids.reserve(req.key_ids_size());
  for (const std::string& b : req.key_ids()) {
    auto id = store::KeyIdFromBytes(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
    if (!id.ok()) return ToGrpcStatus(id.status());
    ids.push_back(*id);
  }
  std::vector<store::KeyId> missing;
  absl::Status st = store_->DeleteAll(ids, &missing);
  for (const std::string& b : req.key_ids()) keys_->Invalidate(b);
  if (!st.ok()) return ToGrpcStatus(st);
  KMPC_LOG(INFO) << "deleted " << ids.size() - missing.size() << " keys";
  for (const auto& m : missing)
    resp->add_not_found(reinterpret_cast<const char*>(m.data()), m.size());
  return grpc::Status::OK;
}

grpc::Status AdminService::DeleteKeys(grpc::ServerContext* ctx,
                                      const pb::DeleteKeysRequest* req,
                                      pb::DeleteKeysResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  grpc::Status st = DoDeleteKeys(*req, resp);
  if (!st.ok()) resp->Clear();
  return st;
}

// A record's edit for SetKeyKind: what it was goes to *resp; to a user's
// kind its kCtsServiceUsages material goes (DropServiceMaterial), and a
// password-derived key loses its gate only on the admin's explicit word
// (allow_ungate) for a key this server's operator listed with its dealing
// (ServiceOptions::ungate_keys: the key id and the shares' deal_id, so
// that shares put under a listed id later are not taken for the listed
// key). Under an aes*-ctr-mpc cipher a user's key runs an AS exchange only
// and a user+service's also tickets (engine/user_key_rule.h), whose
// keystream is the same for every usage: from a user's, either other kind
// is an ungating.
static absl::StatusOr<bool> EditKind(store::KeyRecord& rec, KeyKind want, bool allow_ungate,
                                     const std::set<std::string>& ungate,
                                     pb::SetKeyKindResponse* resp) {
  resp->set_previous_kind(static_cast<pb::KeyKind>(rec.meta.kind));
  resp->set_was_unrecorded(rec.meta.kind_unrecorded);
  auto ks = engine::KeyShares::Parse(rec.shares.span());
  if (!ks.ok())
    return absl::DataLossError(absl::StrCat("stored shares of key ",
                                            store::KeyIdHex(rec.meta.key_id),
                                            " do not parse: ", ks.status().message()));
  const std::string deal(ks->deal_id.begin(), ks->deal_id.end());
  const std::string id(rec.meta.key_id.begin(), rec.meta.key_id.end());
  const bool ungates =
      engine::PasswordDerived(rec.meta.kind) &&
      (want == KeyKind::kService || (!engine::IsCts(rec.meta.cipher) &&
                                     rec.meta.kind == KeyKind::kUser && want != KeyKind::kUser));
  if (ungates && !(allow_ungate && ungate.count(id + deal) > 0))
    return absl::FailedPreconditionError(absl::StrCat(
        "key ", store::KeyIdHex(rec.meta.key_id), " is a password-derived key",
        rec.meta.kind_unrecorded ? " (stored before key kinds, loaded as a user's)" : "",
        ": making it a service's (or, an aes*-ctr-mpc user's, a user+service's) drops "
        "the gate on its AS reply or keystream, so that whoever asks the KDC gets an "
        "offline password verifier; only with allow_ungate",
        allow_ungate ? absl::StrCat(" and the key with its dealing in this server's "
                                    "--allow_ungate_keys (its operator's): ",
                                    store::KeyIdHex(rec.meta.key_id), ":",
                                    absl::BytesToHexString(deal))
                     : ""));
  size_t dropped = 0;
  if (!engine::DealsServiceUsages(want)) dropped = engine::DropServiceMaterial(*ks);
  resp->set_dropped_materials(static_cast<uint32_t>(dropped));
  resp->set_holds_ticket_material(ks->FindCts(engine::CtsKind::kUsage, 2) != nullptr);
  if (dropped == 0 && rec.meta.kind == want && !rec.meta.kind_unrecorded) return false;
  if (dropped > 0) {
    std::vector<uint8_t> bytes = ks->Serialize();
    rec.shares = store::SecretBytes(bytes);
    share::Wipe(bytes);
  }
  rec.meta.kind = want;
  return true;
}

absl::Status AdminService::DoSetKeyKind(const pb::SetKeyKindRequest& req,
                                        pb::SetKeyKindResponse* resp) {
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(req.key_id().data()), req.key_id().size()));
  if (!id.ok()) return id.status();
  if (req.kind() < 0 || req.kind() >= kKeyKinds)
    return absl::InvalidArgumentError(absl::StrCat("unknown key kind ", req.kind()));
  const KeyKind want = static_cast<KeyKind>(req.kind());
  absl::StatusOr<bool> changed = store_->Edit(*id, [&](store::KeyRecord& rec) {
    return EditKind(rec, want, req.allow_ungate(), options_.ungate_keys, resp);
  });
  // Before the answer: no Run after it may use the old view.
  keys_->Invalidate(req.key_id());
  if (!changed.ok()) return changed.status();
  resp->set_changed(*changed);
  // Public metadata only (the kinds and counts), as PutKey's log line.
  KMPC_LOG(WARNING) << "Admin.SetKeyKind: key " << store::KeyIdHex(*id) << " kind "
                    << resp->previous_kind() << (resp->was_unrecorded() ? " (unrecorded)" : "")
                    << " -> " << req.kind()
                    << (*changed ? "" : ", unchanged") << ", "
                    << resp->dropped_materials() << " ticket/PAC materials removed";
  return absl::OkStatus();
}

grpc::Status AdminService::SetKeyKind(grpc::ServerContext* ctx,
                                      const pb::SetKeyKindRequest* req,
                                      pb::SetKeyKindResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  absl::Status st = DoSetKeyKind(*req, resp);
  if (!st.ok()) resp->Clear();
  return ToGrpcStatus(st);
}

grpc::Status AdminService::Metrics(grpc::ServerContext* ctx,
                                   const kmpc::v1::MetricsRequest*,
                                   kmpc::v1::MetricsResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  resp->set_text(metrics_->Render());
  return grpc::Status::OK;
}

}  // namespace kmpc::service
