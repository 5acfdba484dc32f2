#include "service/services.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "net/log.h"

namespace kmpc::service {
namespace {

using kmpc::v1::JobType;

uint32_t CeilBlocks(size_t bytes) { return static_cast<uint32_t>((bytes + 15) / 16); }

// enctype.md: reject c0 == 0 and c0 + n > 2^128 - 1.
absl::Status CheckCounterRange(absl::string_view ctr0, uint32_t n, size_t job) {
  unsigned __int128 c0 = 0;
  for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
  if (c0 == 0 || c0 > ~static_cast<unsigned __int128>(0) - n)
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job, ": counter range ctr0..ctr0+", n,
                     " touches the all-zero block"));
  return absl::OkStatus();
}

void SetShares(kmpc::v1::SharePair* out, const std::vector<uint8_t>& a,
               const std::vector<uint8_t>& b, size_t len) {
  out->set_first(a.data(), std::min(len, a.size()));
  out->set_second(b.data(), std::min(len, b.size()));
}

void SetTag(kmpc::v1::SharePair* out,
            const std::array<std::array<uint8_t, 16>, 2>& tag) {
  out->set_first(tag[0].data(), 16);
  out->set_second(tag[1].data(), 16);
}

absl::StatusOr<BatchId> ParseBatchId(const std::string& b) {
  if (b.size() != kBatchIdSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_id must be ", kBatchIdSize, " bytes, got ", b.size()));
  BatchId id;
  std::memcpy(id.data(), b.data(), kBatchIdSize);
  return id;
}

// The size checks every KeyOps request shares: not empty, not above the
// configured limit ("batch has 0 jobs" / "finalize has N items, the limit
// is M").
absl::Status CheckRequestSize(int n, absl::string_view request,
                              absl::string_view unit, size_t limit) {
  if (n == 0)
    return absl::InvalidArgumentError(absl::StrCat(request, " has no ", unit));
  if (static_cast<size_t>(n) > limit)
    return absl::ResourceExhaustedError(absl::StrCat(
        request, " has ", n, " ", unit, ", the limit is ", limit));
  return absl::OkStatus();
}

std::string StateKey(const std::string& run_batch_id, uint64_t job_id) {
  std::string k = run_batch_id;
  for (int i = 0; i < 8; ++i) k.push_back(static_cast<char>(job_id >> (8 * i)));
  return k;
}

void FillStats(kmpc::v1::BatchStats* s, const BatchOutcome& o, uint64_t aes) {
  s->set_ring_bytes_sent(o.ring_bytes);
  s->set_ring_messages(o.ring_messages);
  s->set_queue_us(absl::ToInt64Microseconds(o.queue_time));
  s->set_compute_us(absl::ToInt64Microseconds(o.run_time));
  s->set_aes_blocks(aes);
  s->set_tcp_bytes_sent(o.tcp_bytes);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()),
                      std::string(st.message()));
}

// ------------------------------------------------------------ KeyCache

absl::StatusOr<std::shared_ptr<const engine::KeyShares>> KeyCache::Get(
    absl::string_view key_id) {
  uint64_t started;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(std::string(key_id));
    if (it != cache_.end()) return it->second;
    started = epoch_;
    ++loading_;
  }
  auto shared = Load(key_id);
  if (load_hook_) load_hook_();
  absl::MutexLock lock(&mu_);
  --loading_;
  // Invalidated since the load started: the value read may predate the
  // store change, so it is returned (the call overlapped the change) but
  // not cached.
  auto inv = invalidated_.find(std::string(key_id));
  const bool stale = inv != invalidated_.end() && inv->second > started;
  if (loading_ == 0) invalidated_.clear();
  if (!shared.ok() || stale) return shared;
  if (cache_.size() > 200000) cache_.clear();
  cache_[std::string(key_id)] = *shared;
  return shared;
}

absl::StatusOr<std::shared_ptr<const engine::KeyShares>> KeyCache::Load(
    absl::string_view key_id) {
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(key_id.data()), key_id.size()));
  if (!id.ok()) return id.status();
  auto rec = store_->Get(*id);
  if (!rec.ok()) return rec.status();
  auto ks = engine::KeyShares::Parse(rec->shares.span());
  if (!ks.ok())
    return absl::DataLossError(absl::StrCat("stored shares of key ",
                                            store::KeyIdHex(*id),
                                            " do not parse: ", ks.status().message()));
  if (ks->party != party_ ||
      static_cast<uint8_t>(ks->cipher) != static_cast<uint8_t>(rec->meta.cipher))
    return absl::FailedPreconditionError(absl::StrCat(
        "stored shares of key ", store::KeyIdHex(*id), " belong to party ",
        ks->party, " or another cipher"));
  return std::shared_ptr<const engine::KeyShares>(
      std::make_shared<const engine::KeyShares>(std::move(*ks)));
}

void KeyCache::Invalidate(absl::string_view key_id) {
  absl::MutexLock lock(&mu_);
  ++epoch_;
  cache_.erase(std::string(key_id));
  if (loading_ > 0) invalidated_[std::string(key_id)] = epoch_;
}

// ------------------------------------------------------------ EncryptStates

void EncryptStates::SweepLocked(absl::Time now) {
  if (now - last_sweep_ < absl::Seconds(1)) return;
  last_sweep_ = now;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->second.created > ttl_) {
      bytes_ -= it->second.bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status EncryptStates::Put(const std::string& key, Entry e) {
  // The state's own buffers, the map node and its key (an estimate of the
  // allocator's view; a state shares its key's stored H powers).
  constexpr size_t kNodeBytes = 128;
  e.bytes = (e.state != nullptr ? e.state->OwnBytes() : 0) + key.capacity() +
            kNodeBytes;
  absl::MutexLock lock(&mu_);
  SweepLocked(e.created);
  auto it = entries_.find(key);
  const size_t replaced = it != entries_.end() ? it->second.bytes : 0;
  if (it == entries_.end() && entries_.size() >= max_)
    return absl::ResourceExhaustedError("too many ENCRYPT jobs await FINALIZE");
  if (bytes_ - replaced + e.bytes > max_bytes_)
    return absl::ResourceExhaustedError(absl::StrCat(
        "ENCRYPT jobs awaiting FINALIZE hold ", bytes_, " bytes, the limit is ",
        max_bytes_));
  bytes_ = bytes_ - replaced + e.bytes;
  entries_[key] = std::move(e);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EncryptStates::Entry>> EncryptStates::TakeAll(
    const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  absl::Time now = absl::Now();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end() || now - it->second.created > ttl_)
      return absl::NotFoundError(absl::StrCat(
          "item ", i, ": no ENCRYPT job awaits FINALIZE under this batch/job id "
          "(unknown, expired or already finalized)"));
  }
  std::vector<Entry> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) {
    auto it = entries_.find(k);
    bytes_ -= it->second.bytes;
    out.push_back(std::move(it->second));
    entries_.erase(it);
  }
  return out;
}

size_t EncryptStates::size() {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t EncryptStates::bytes() {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

// ------------------------------------------------------------ KeyOps

absl::Status KeyOpsService::DoRun(const kmpc::v1::RunRequest& req,
                                  kmpc::v1::RunResponse* resp) {
  auto batch_id = ParseBatchId(req.batch_id());
  if (!batch_id.ok()) return batch_id.status();
  const int n = req.jobs_size();
  if (absl::Status s = CheckRequestSize(n, "batch", "jobs", options_.max_batch_jobs);
      !s.ok())
    return s;
  std::vector<engine::Job> jobs(n);
  std::set<uint64_t> ids;
  uint64_t aes_blocks = 0;
  const size_t max_bytes = size_t{engine::kMaxJobBlocks} * 16;
  for (int i = 0; i < n; ++i) {
    const kmpc::v1::Job& in = req.jobs(i);
    engine::Job& job = jobs[i];
    if (!ids.insert(in.job_id()).second)
      return absl::InvalidArgumentError(
          absl::StrCat("job ", i, ": duplicate job_id ", in.job_id()));
    if (in.key_id().size() != store::kKeyIdSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", i, ": key_id must be ", store::kKeyIdSize, " bytes, got ",
          in.key_id().size()));
    job.key_id = in.key_id();
    job.usage = in.usage();
    switch (in.type()) {
      case JobType::JOB_ENCRYPT:
        // Length 0 is passed on: the engine decides whether an empty
        // plaintext (ctr0 || T only) is supported.
        if (in.length() > max_bytes)
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": ENCRYPT length must be 0..", max_bytes, ", got ",
              in.length()));
        if (!in.data().empty() || !in.checksum().empty())
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": ENCRYPT takes a length, not data (the plaintext "
              "never leaves the KDC)"));
        job.type = engine::JobType::kEncrypt;
        job.nblocks = CeilBlocks(in.length());
        aes_blocks += job.nblocks + 1;
        break;
      case JobType::JOB_DECRYPT: {
        if (in.data().size() < 32 || in.data().size() - 32 > max_bytes)
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": DECRYPT data must be ctr0 || C || T, 32..",
              max_bytes + 32, " bytes, got ", in.data().size()));
        uint32_t nb = CeilBlocks(in.data().size() - 32);
        if (absl::Status st = CheckCounterRange(in.data().substr(0, 16), nb, i);
            !st.ok())
          return st;
        job.type = engine::JobType::kDecrypt;
        job.data.assign(in.data().begin(), in.data().end());
        aes_blocks += nb + 1;
        break;
      }
      case JobType::JOB_CHECKSUM:
        if (in.data().size() > max_bytes)
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": CHECKSUM data longer than ", max_bytes, " bytes"));
        job.type = engine::JobType::kChecksum;
        job.data.assign(in.data().begin(), in.data().end());
        aes_blocks += 1;
        break;
      case JobType::JOB_VERIFY_CHECKSUM:
        if (in.data().size() > max_bytes)
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": VERIFY_CHECKSUM data longer than ", max_bytes,
              " bytes"));
        if (in.checksum().size() != 32)
          return absl::InvalidArgumentError(absl::StrCat(
              "job ", i, ": checksum must be 32 bytes (ctr0 || tag), got ",
              in.checksum().size()));
        if (absl::Status st = CheckCounterRange(in.checksum().substr(0, 16), 0, i);
            !st.ok())
          return st;
        job.type = engine::JobType::kVerifyChecksum;
        job.data.assign(in.data().begin(), in.data().end());
        job.checksum.assign(in.checksum().begin(), in.checksum().end());
        aes_blocks += 1;
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("job ", i, ": unknown job type ", in.type()));
    }
  }
  if (aes_blocks > engine::kMaxBatchBlocks)
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch needs ", aes_blocks, " AES blocks, the limit is ",
        engine::kMaxBatchBlocks));
  // Keys are looked up by the engine: a key missing or unusable on this
  // server fails only the jobs using it, the same way on the three servers
  // (engine.h, KeyLookup). Refusing the whole batch here would make the two
  // other servers wait for this one and fail every job of the batch.

  BatchOutcome out = scheduler_->Submit(BatchKind::kRun, *batch_id, std::move(jobs));
  metrics_->RecordBatch("run", out.status.ok(), n, aes_blocks, out.ring_bytes,
                        out.ring_messages, out.queue_time + out.run_time);
  if (!out.status.ok()) return out.status;
  if (out.result.jobs.size() != static_cast<size_t>(n))
    return absl::InternalError("engine returned a wrong number of results");
  resp->set_batch_id(req.batch_id());
  resp->set_party(options_.party);
  FillStats(resp->mutable_stats(), out, aes_blocks);
  const absl::Time now = absl::Now();
  for (int i = 0; i < n; ++i) {
    const kmpc::v1::Job& in = req.jobs(i);
    engine::JobResult& r = out.result.jobs[i];
    kmpc::v1::JobResult* o = resp->add_results();
    o->set_job_id(in.job_id());
    if (!r.status.ok()) {
      o->set_error_code(static_cast<int>(r.status.code()));
      o->set_error_message(std::string(r.status.message()));
      continue;
    }
    o->set_status(r.integrity_ok ? kmpc::v1::JOB_OK : kmpc::v1::JOB_INTEGRITY_FAILED);
    if (!r.integrity_ok) metrics_->RecordIntegrityFailure();
    switch (in.type()) {
      case JobType::JOB_ENCRYPT: {
        o->set_ctr0(r.ctr0.data(), 16);
        SetShares(o->mutable_keystream(), r.keystream[0], r.keystream[1],
                  in.length());
        absl::Status st = states_.Put(StateKey(req.batch_id(), in.job_id()),
                                      {r.state, in.length(), now});
        if (!st.ok()) {
          o->clear_keystream();
          o->set_error_code(static_cast<int>(st.code()));
          o->set_error_message(std::string(st.message()));
        }
        break;
      }
      case JobType::JOB_DECRYPT:
        if (r.integrity_ok)
          SetShares(o->mutable_keystream(), r.keystream[0], r.keystream[1],
                    in.data().size() - 32);
        break;
      case JobType::JOB_CHECKSUM:
        o->set_ctr0(r.ctr0.data(), 16);
        SetTag(o->mutable_tag(), r.tag);
        break;
      default:
        break;
    }
    for (auto& ks : r.keystream)
      if (!ks.empty()) OPENSSL_cleanse(ks.data(), ks.size());
  }
  return absl::OkStatus();
}

absl::Status KeyOpsService::DoFinalize(const kmpc::v1::FinalizeRequest& req,
                                       kmpc::v1::FinalizeResponse* resp) {
  auto batch_id = ParseBatchId(req.batch_id());
  if (!batch_id.ok()) return batch_id.status();
  const int n = req.items_size();
  if (absl::Status s = CheckRequestSize(n, "finalize", "items", options_.max_batch_jobs);
      !s.ok())
    return s;
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (int i = 0; i < n; ++i) {
    const auto& it = req.items(i);
    if (it.run_batch_id().size() != kBatchIdSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "item ", i, ": run_batch_id must be ", kBatchIdSize, " bytes"));
    keys.push_back(StateKey(it.run_batch_id(), it.job_id()));
    if (!seen.insert(keys.back()).second)
      return absl::InvalidArgumentError(
          absl::StrCat("item ", i, ": job finalized twice in one request"));
  }
  // Taken atomically (at most one FINALIZE per job); a request that turns
  // out malformed below puts them back, since nothing was revealed.
  auto entries = states_.TakeAll(keys);
  if (!entries.ok()) return entries.status();
  std::vector<engine::Job> jobs(n);
  absl::Status bad;
  for (int i = 0; i < n && bad.ok(); ++i) {
    const auto& it = req.items(i);
    const auto& e = (*entries)[i];
    // Shorter is fine: the KDC's speculative keystream (kdc-plugin
    // batcher.h) is sized by a bound; the tag covers the C it gets, the
    // unused keystream blocks are never used for anything else.
    if (it.ciphertext().size() > e.length)
      bad = absl::InvalidArgumentError(absl::StrCat(
          "item ", i, ": ciphertext is ", it.ciphertext().size(),
          " bytes, the ENCRYPT job was for ", e.length));
    jobs[i].type = engine::JobType::kFinalize;
    jobs[i].usage = e.state->usage;
    jobs[i].data.assign(it.ciphertext().begin(), it.ciphertext().end());
    jobs[i].state = e.state;
  }
  if (!bad.ok()) {
    // Put them back: nothing was revealed.
    for (int i = 0; i < n; ++i) (void)states_.Put(keys[i], std::move((*entries)[i]));
    return bad;
  }
  BatchOutcome out =
      scheduler_->Submit(BatchKind::kFinalize, *batch_id, std::move(jobs));
  metrics_->RecordBatch("finalize", out.status.ok(), n, 0, out.ring_bytes,
                        out.ring_messages, out.queue_time + out.run_time);
  if (!out.status.ok()) return out.status;
  if (out.result.jobs.size() != static_cast<size_t>(n))
    return absl::InternalError("engine returned a wrong number of results");
  resp->set_batch_id(req.batch_id());
  resp->set_party(options_.party);
  FillStats(resp->mutable_stats(), out, 0);
  for (int i = 0; i < n; ++i) {
    const engine::JobResult& r = out.result.jobs[i];
    auto* o = resp->add_results();
    o->set_run_batch_id(req.items(i).run_batch_id());
    o->set_job_id(req.items(i).job_id());
    if (!r.status.ok())
      return absl::Status(r.status.code(),
                          absl::StrCat("item ", i, ": ", r.status.message()));
    SetTag(o->mutable_tag(), r.tag);
  }
  return absl::OkStatus();
}

// Authorization, then the request; a rejected request leaves no partial
// response behind.
grpc::Status KeyOpsService::Serve(grpc::ServerContext* ctx, const char* what,
                                  google::protobuf::Message* resp,
                                  const std::function<absl::Status()>& body) {
  if (absl::Status st = Authorize(ctx, options_.keyops_clients, "KeyOps");
      !st.ok())
    return ToGrpcStatus(st);
  absl::Status st = body();
  if (!st.ok()) {
    metrics_->RecordRejected();
    KMPC_VLOG(1) << what << " rejected: " << st;
    resp->Clear();
  }
  return ToGrpcStatus(st);
}

grpc::Status KeyOpsService::Run(grpc::ServerContext* ctx,
                                const kmpc::v1::RunRequest* req,
                                kmpc::v1::RunResponse* resp) {
  return Serve(ctx, "Run", resp, [&] { return DoRun(*req, resp); });
}

grpc::Status KeyOpsService::Finalize(grpc::ServerContext* ctx,
                                     const kmpc::v1::FinalizeRequest* req,
                                     kmpc::v1::FinalizeResponse* resp) {
  return Serve(ctx, "Finalize", resp, [&] { return DoFinalize(*req, resp); });
}

// ------------------------------------------------------------ Admin

absl::Status AdminService::DoPutKey(const kmpc::v1::PutKeyRequest& req) {
  const auto& info = req.info();
  auto id = store::KeyIdFromBytes(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(info.key_id().data()), info.key_id().size()));
  if (!id.ok()) return id.status();
  if (info.cipher() != kmpc::v1::CIPHER_AES128 &&
      info.cipher() != kmpc::v1::CIPHER_AES256)
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
  if (ks->party != options_.party ||
      static_cast<int>(ks->cipher) != static_cast<int>(info.cipher()))
    return absl::InvalidArgumentError(
        "shares' party or cipher differ from the request's");
  store::KeyMeta meta{*id,
                      info.cipher() == kmpc::v1::CIPHER_AES128
                          ? store::Cipher::kAes128
                          : store::Cipher::kAes256,
                      info.kvno(), info.label()};
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
    k->set_cipher(m.cipher == store::Cipher::kAes128 ? kmpc::v1::CIPHER_AES128
                                                     : kmpc::v1::CIPHER_AES256);
    k->set_kvno(m.kvno);
    k->set_label(m.label);
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
  return grpc::Status::OK;
}

grpc::Status AdminService::Metrics(grpc::ServerContext* ctx,
                                   const kmpc::v1::MetricsRequest*,
                                   kmpc::v1::MetricsResponse* resp) {
  if (absl::Status st = Authorize(ctx, options_.admin_clients, "Admin"); !st.ok())
    return ToGrpcStatus(st);
  resp->set_text(metrics_->Render(options_.party));
  return grpc::Status::OK;
}

}  // namespace kmpc::service
