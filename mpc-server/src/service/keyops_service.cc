// KeyOpsService (services.h): the KDC's Run, Finalize and Sign. Run puts
// a batch on the ring (Scheduler::Submit) and keeps each ENCRYPT's state
// and each pad for their one later use; Finalize and Sign are served
// ring-free on the calling thread, and take every state or pad they use
// before anything is computed with it, so each serves one request at most.
// Every request is checked (request_checks.h) before any work. A request's
// shares are wiped before its handler returns, a refused response's before
// it is cleared (Serve), a sent one's once serialized (wipe_interceptor.h).
#include "service/services.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "batch_error.h"
#include "contract.h"
#include "protocol/gf128.h"
#include "service/request_checks.h"
#include "service/wipe_interceptor.h"
#include "util/log.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

// The client's deadline on this server's clock (gRPC sends it as a
// timeout); none: InfiniteFuture.
absl::Time ClientDeadline(const grpc::ServerContext& ctx) {
  const std::chrono::system_clock::time_point d = ctx.deadline();
  if (d == std::chrono::system_clock::time_point::max())
    return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// Appends this party's two shares of a value, `len` bytes each, to a flat
// share buffer (kmpc.proto, "Shares travel flat"). A share shorter than
// `len` (never from the engine) is padded with zeros: the layout the KDC
// reads stays intact, and the copies from two servers then disagree.
void AppendShares(std::string* out, const std::vector<uint8_t>& a,
                  const std::vector<uint8_t>& b, size_t len) {
  for (const auto* v : {&a, &b}) {
    const size_t n = std::min(len, v->size());
    out->append(reinterpret_cast<const char*>(v->data()), n);
    out->append(len - n, '\0');
  }
}

void AppendTag(std::string* out, const std::array<std::array<uint8_t, 16>, 2>& tag) {
  out->append(reinterpret_cast<const char*>(tag[0].data()), 16);
  out->append(reinterpret_cast<const char*>(tag[1].data()), 16);
}

// A state the batch could not keep (OneUseStates::Put): a repeated batch
// id (BATCH_MALFORMED; the earlier state stays), or the store is full
// (BATCH_OVERLOADED).
grpc::Status StateRefusal(const absl::Status& st) {
  return Refuse(absl::IsAlreadyExists(st) ? pb::BATCH_MALFORMED : pb::BATCH_OVERLOADED,
                std::string(st.message()));
}

std::string StateKey(const std::string& run_batch_id, uint64_t job_id) {
  std::string k = run_batch_id;
  for (int i = 0; i < 8; ++i) k.push_back(static_cast<char>(job_id >> (8 * i)));
  return k;
}

void FillStats(pb::BatchStats* s, const BatchOutcome& o, uint64_t aes) {
  s->set_ring_bytes_sent(o.ring_bytes);
  s->set_ring_messages(o.ring_messages);
  s->set_queue_us(absl::ToInt64Microseconds(o.queue_time));
  s->set_compute_us(absl::ToInt64Microseconds(o.run_time));
  s->set_aes_blocks(aes);
  s->set_tcp_bytes_sent(o.tcp_bytes);
}

// The engine's job for a request job. A job that breaks the contract is
// passed on with its failed check: all three servers find the same
// failure, agree on the batch digest and report it alike.
engine::Job ToEngineJob(const pb::Job& in, const contract::MessageShares& sh,
                        const pb::RunRequest& req, absl::Duration tolerance) {
  engine::Job job;
  job.type = in.type();
  job.cipher = in.cipher();
  job.key_id = in.key_id();
  job.usage = in.usage();
  job.now = req.now_unix();
  job.precheck = contract::CheckJob(contract::ShapeOf(in, &sh));
  if (!job.precheck.ok()) return job;
  if (in.type() == pb::JOB_DECRYPT && contract::CtsCipher(in.cipher())) {
    // The gate's freshness window is the KDC's clock's (engine.h
    // EngineOptions::cts_skew_s); a server whose clock differs by more
    // fails the job, and the digests then fail the batch alike.
    const absl::Duration off = absl::Now() - absl::FromUnixSeconds(req.now_unix());
    if (absl::AbsDuration(off) > tolerance) {
      // The same detail on every server (the offset goes to the log).
      KMPC_LOG(WARNING) << "an aes*-cts DECRYPT's Run carries a KDC clock "
                        << absl::FormatDuration(off) << " from this server's";
      job.precheck = {pb::JOB_MALFORMED,
                      "the KDC's clock (RunRequest.now_unix) is further than "
                      "--cts_clock_tolerance_s from the MPC servers': check the hosts' NTP"};
      return job;
    }
  }
  if (in.type() == pb::JOB_ENCRYPT && !contract::CtsCipher(in.cipher()))
    job.nblocks = static_cast<uint32_t>(contract::CeilBlocks(in.length()));
  else
    job.length = in.length();
  job.cts_key = in.cts_key();
  job.splice_length = in.splice_length();
  job.splice_offset = in.splice_offset();
  if (contract::SharedBytes(in) > 0) {
    // This server's two shares of the message (kmpc.proto
    // RunRequest.data_shares); the engine::Job wipes its copy, Run wipes
    // the request's.
    job.data_shares[0].assign(sh.first.begin(), sh.first.end());
    job.data_shares[1].assign(sh.second.begin(), sh.second.end());
  }
  job.data.assign(in.data().begin(), in.data().end());
  job.checksum.assign(in.checksum().begin(), in.checksum().end());
  return job;
}

// Wipes a request's flat share buffer (kmpc.proto RunRequest.data_shares,
// SignRequest.data_shares).
void WipeShares(std::string* flat) { OPENSSL_cleanse(flat->data(), flat->size()); }

}  // namespace

grpc::Status KeyOpsService::DoRun(const pb::RunRequest& req, pb::RunResponse* resp,
                                  absl::Time deadline) {
  if (grpc::Status s = CheckWireVersion(req.wire_version()); !s.ok()) return s;
  BatchId batch_id;
  if (grpc::Status s = ParseBatchId(req.batch_id(), &batch_id); !s.ok()) return s;
  const int n = req.jobs_size();
  if (grpc::Status s = CheckRequestSize(n, "batch", "jobs", options_.max_batch_jobs);
      !s.ok())
    return s;
  std::vector<engine::Job> jobs;
  jobs.reserve(n);
  std::set<uint64_t> ids;
  uint64_t aes_blocks = 0, cost = 0;
  std::map<uint64_t, int64_t> index;  // job_id -> position
  // The share buffer as a whole, before any slice is taken: a short or long
  // one would shift every later job's slice onto another job's shares.
  if (grpc::Status s = CheckShareBytes("batch", contract::RunShareBytes(req),
                                       req.data_shares().size());
      !s.ok())
    return s;
  const std::vector<contract::MessageShares> shares = contract::SliceMessageShares(req);
  for (int i = 0; i < n; ++i) {
    const pb::Job& in = req.jobs(i);
    if (!ids.insert(in.job_id()).second)
      return Refuse(pb::BATCH_MALFORMED,
                    absl::StrCat("job ", i, ": duplicate job_id ", in.job_id()));
    index[in.job_id()] = i;
    const contract::JobShape shape = contract::ShapeOf(in, &shares[i]);
    aes_blocks += contract::JobBlocks(shape);
    cost += contract::JobCost(shape);
    jobs.push_back(ToEngineJob(in, shares[i], req, options_.cts_clock_tolerance));
  }
  // Conditions by position (engine.h, Job::release_if_ok); one naming no
  // job of the batch becomes an index the engine refuses (JOB_MALFORMED).
  for (int i = 0; i < n; ++i) {
    const pb::Job& in = req.jobs(i);
    if (in.has_release_if_ok()) {
      auto it = index.find(in.release_if_ok());
      jobs[i].release_if_ok = it == index.end() ? static_cast<int64_t>(n) : it->second;
    }
    if (in.has_pad_after()) {  // likewise (engine.h, Job::pad_after)
      auto it = index.find(in.pad_after());
      jobs[i].pad_after = it == index.end() ? static_cast<int64_t>(n) : it->second;
    }
    jobs[i].pad_slot = in.pad_slot();  // checked with pad_after (pads.cc)
    if (in.has_sign_pad()) {  // likewise (engine.h, Job::sign_pad)
      auto it = index.find(in.sign_pad());
      jobs[i].sign_pad = it == index.end() ? static_cast<int64_t>(n) : it->second;
    }
  }
  if (cost > contract::kMaxBatchBlocks)
    return Refuse(pb::BATCH_TOO_LARGE,
                  absl::StrCat("batch costs ", cost, " blocks (AES and checksummed "
                               "data, contract::JobCost), the limit is ",
                               contract::kMaxBatchBlocks));
  // Keys are looked up by the engine: a key missing or unusable on this
  // server fails only the jobs using it, the same way on the three servers
  // (engine.h, KeyLookup). Refusing the whole batch here would make the two
  // other servers wait for this one and fail every job of the batch.
  BatchOutcome out =
      scheduler_->Submit(BatchKind::kRun, batch_id, std::move(jobs), deadline);
  metrics_->RecordBatch("run", out.status.ok(), n, aes_blocks, out.ring_bytes,
                        out.ring_messages, out.queue_time + out.run_time);
  if (!out.status.ok()) return Refuse(out);
  if (out.result.jobs.size() != static_cast<size_t>(n))
    return Refuse(pb::BATCH_INTERNAL, "engine returned a wrong number of results");
  resp->set_batch_id(req.batch_id());
  resp->set_party(options_.party);
  resp->set_wire_version(contract::kWireVersion);
  FillStats(resp->mutable_stats(), out, aes_blocks);
  return FillRunResults(req, out.result, resp);
}

// The per-job results; ENCRYPT states are kept for FINALIZE. States that do
// not fit (EncryptStates limits) refuse the batch (BATCH_OVERLOADED) and
// none of its states is kept: nothing of it is revealed.
grpc::Status KeyOpsService::FillRunResults(const pb::RunRequest& req,
                                           engine::BatchResult& result,
                                           pb::RunResponse* resp) {
  const absl::Time now = absl::Now();
  std::vector<std::string> kept, kept_pads;
  grpc::Status refused;
  // The flat buffers (kmpc.proto RunResponse.ctr0s, .shares) sized once.
  size_t ctr0_bytes = 0, share_bytes = 0;
  for (int i = 0; i < req.jobs_size(); ++i) {
    const pb::Job& in = req.jobs(i);
    const pb::JobStatus st = result.jobs[i].status;
    if (contract::ResultHasCtr0(contract::ShapeOf(in), st)) ctr0_bytes += contract::kCtr0Size;
    share_bytes += 2 * contract::RevealedShareBytes(contract::ShapeOf(in), st);
  }
  std::string* ctr0s = resp->mutable_ctr0s();
  std::string* shares = resp->mutable_shares();
  ctr0s->reserve(ctr0_bytes);
  shares->reserve(share_bytes);
  for (int i = 0; i < req.jobs_size() && refused.ok(); ++i) {
    const pb::Job& in = req.jobs(i);
    engine::JobResult& r = result.jobs[i];
    pb::JobResult* o = resp->add_results();
    o->set_job_id(in.job_id());
    o->set_status(r.status);
    if (r.status == pb::JOB_INTEGRITY_FAILED) metrics_->RecordIntegrityFailure();
    if (!r.ok()) {
      metrics_->RecordJobFailure(pb::JobStatus_Name(r.status));
      o->set_detail(r.detail);
      continue;
    }
    if (contract::CtsCipher(in.cipher())) {
      // An aes*-cts result (kmpc.proto JobType): its shares only, no ctr0
      // and no state.
      AppendShares(shares, r.keystream[0], r.keystream[1],
                   contract::RevealedBytes(contract::ShapeOf(in)));
      continue;
    }
    switch (in.type()) {
      case pb::JOB_ENCRYPT: {
        ctr0s->append(reinterpret_cast<const char*>(r.ctr0.data()), 16);
        AppendShares(shares, r.keystream[0], r.keystream[1], in.length());
        std::string key = StateKey(req.batch_id(), in.job_id());
        absl::Status st = states_.Put(key, {r.state, in.length(), now});
        if (st.ok()) kept.push_back(std::move(key));
        else refused = StateRefusal(st);
        break;
      }
      case pb::JOB_DECRYPT:
        AppendShares(shares, r.keystream[0], r.keystream[1],
                     contract::RevealedBytes(contract::ShapeOf(in)));
        break;
      case pb::JOB_CHECKSUM:
        ctr0s->append(reinterpret_cast<const char*>(r.ctr0.data()), 16);
        AppendTag(shares, r.tag);
        break;
      case pb::JOB_PAD: {
        // Only ctr0 leaves; the pad waits for its one Sign item (none: spent).
        ctr0s->append(reinterpret_cast<const char*>(r.ctr0.data()), 16);
        if (r.pad == nullptr) break;
        std::string key = StateKey(req.batch_id(), in.job_id());
        absl::Status st = pads_.Put(key, {r.pad, in.length(), now});
        if (st.ok()) kept_pads.push_back(std::move(key));
        else refused = StateRefusal(st);
        break;
      }
      default:
        break;
    }
  }
  for (auto& r : result.jobs)
    for (auto& ks : r.keystream)
      if (!ks.empty()) OPENSSL_cleanse(ks.data(), ks.size());
  if (!refused.ok()) {
    states_.Erase(kept);
    pads_.Erase(kept_pads);
    OPENSSL_cleanse(shares->data(), shares->size());
    resp->Clear();
  }
  return refused;
}

namespace {

// The ENCRYPT states a Finalize request names, each at most once.
grpc::Status FinalizeStateKeys(const pb::FinalizeRequest& req,
                               std::vector<std::string>* keys) {
  std::set<std::string> seen;
  for (int i = 0; i < req.items_size(); ++i) {
    const auto& it = req.items(i);
    if (it.run_batch_id().size() != contract::kBatchIdSize)
      return Refuse(pb::BATCH_MALFORMED,
                    absl::StrCat("item ", i, ": run_batch_id must be ",
                                 contract::kBatchIdSize, " bytes"));
    keys->push_back(StateKey(it.run_batch_id(), it.job_id()));
    if (!seen.insert(keys->back()).second)
      return Refuse(pb::BATCH_MALFORMED,
                    absl::StrCat("item ", i, ": job finalized twice in one request"));
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status KeyOpsService::DoFinalize(const pb::FinalizeRequest& req,
                                       pb::FinalizeResponse* resp,
                                       absl::Time deadline) {
  if (grpc::Status s = CheckWireVersion(req.wire_version()); !s.ok()) return s;
  BatchId batch_id;
  if (grpc::Status s = ParseBatchId(req.batch_id(), &batch_id); !s.ok()) return s;
  const int n = req.items_size();
  if (grpc::Status s = CheckRequestSize(n, "finalize", "items", options_.max_batch_jobs);
      !s.ok())
    return s;
  std::vector<std::string> keys;
  if (grpc::Status s = FinalizeStateKeys(req, &keys); !s.ok()) return s;
  // Taken atomically (at most one FINALIZE per job); a request that turns
  // out malformed below puts them back, since nothing was revealed.
  auto entries = states_.TakeAll(keys);
  if (!entries.ok())
    return Refuse(pb::BATCH_UNKNOWN_ENCRYPT, std::string(entries.status().message()));
  grpc::Status bad;
  for (int i = 0; i < n && bad.ok(); ++i) {
    const auto& it = req.items(i);
    const auto& e = (*entries)[i];
    // Shorter is fine: the KDC's speculative keystream (kdc-plugin
    // batcher.h) is sized by a bound; the tag covers the C it gets, the
    // unused keystream blocks are never used for anything else.
    if (it.ciphertext().size() > e.length)
      bad = Refuse(pb::BATCH_MALFORMED,
                   absl::StrCat("item ", i, ": ciphertext is ", it.ciphertext().size(),
                                " bytes, the ENCRYPT job was for ", e.length));
    else if (e.state == nullptr || e.state->party != options_.party)
      bad = Refuse(pb::BATCH_INTERNAL,
                   absl::StrCat("item ", i, ": encrypt state belongs to another party"));
  }
  if (!bad.ok()) {
    // Put them back: nothing was revealed.
    for (int i = 0; i < n; ++i) (void)states_.Put(keys[i], std::move((*entries)[i]));
    return bad;
  }
  // Ring-free (kmpc.proto KeyOps.Finalize): GHASH over the public C with
  // this party's component of the powers of H and of AES_K(c0), on the
  // calling thread (engine::FinalizeShare: one additive share, never both
  // components); the states were taken above, so each is used once.
  const absl::Time t0 = absl::Now();
  std::vector<std::array<uint8_t, contract::kTagSize>> shares(n);
  for (int i = 0; i < n && bad.ok(); ++i) {
    const auto& e = (*entries)[i];
    const std::string& c = req.items(i).ciphertext();
    absl::Status f = engine::FinalizeShare(
        *e.state, e.state->usage,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(c.data()), c.size()),
        shares[i]);
    // The checks above exclude a state that does not fit; a failure here
    // refuses the request (a FinalizeResult has no status).
    if (!f.ok()) bad = Refuse(pb::BATCH_MALFORMED, absl::StrCat("item ", i, ": ", f.message()));
  }
  entries->clear();  // the states are wiped as their last reference goes
  BatchOutcome out;
  out.run_time = absl::Now() - t0;
  metrics_->RecordBatch("finalize", bad.ok(), n, 0, 0, 0, out.run_time);
  if (bad.ok()) {
    resp->set_batch_id(req.batch_id());
    resp->set_party(options_.party);
    resp->set_wire_version(contract::kWireVersion);
    FillStats(resp->mutable_stats(), out, 0);
    std::string* tags = resp->mutable_tags();
    tags->reserve(n * contract::kTagSize);
    for (int i = 0; i < n; ++i) {
      auto* o = resp->add_results();
      o->set_run_batch_id(req.items(i).run_batch_id());
      o->set_job_id(req.items(i).job_id());
      tags->append(reinterpret_cast<const char*>(shares[i].data()), shares[i].size());
    }
  }
  for (auto& t : shares) OPENSSL_cleanse(t.data(), t.size());
  return bad;
}

namespace {

// Why item `it` cannot use `pad` on party `party` (empty: it can): the
// pad's party, kind (a verification pad only verifies, a signing pad only
// signs), usage and length, the shares' and verify tag's sizes. Nothing is
// computed with the pad before this passes.
std::string SignItemProblem(const engine::PadState& pad, const pb::SignItem& it,
                            const contract::MessageShares& sh, int party) {
  const bool verify = it.verify();
  const absl::string_view s0 = sh.first, s1 = sh.second;
  if (pad.party != party) return "the pad belongs to another party";
  if (verify != pad.verify_only)
    return pad.verify_only ? "a verification pad only verifies"
                           : "a signing pad only signs";
  if (it.usage() != pad.usage)
    return absl::StrCat("usage ", it.usage(), " differs from the pad's ", pad.usage);
  if (it.length() > pad.max_length)
    return absl::StrCat("message of ", it.length(), " bytes, the pad signs at most ",
                        pad.max_length);
  // D, or D || t' for a verify item (contract::SharedBytes).
  const uint64_t want = contract::SharedBytes(it);
  if (s0.size() != want || s1.size() != want)
    return absl::StrCat("shares of ", s0.size(), " and ", s1.size(),
                        " bytes for a message of ", it.length(), " (shares of ",
                        want, " bytes each)");
  return {};
}

// The whole Sign request's refusals, before any pad is taken.
grpc::Status SignRequestProblem(const pb::SignRequest& req, size_t max_items) {
  if (grpc::Status s = CheckWireVersion(req.wire_version()); !s.ok()) return s;
  if (req.request_id().size() != contract::kBatchIdSize)
    return Refuse(pb::BATCH_MALFORMED,
                  absl::StrCat("request_id must be ", contract::kBatchIdSize,
                               " bytes, got ", req.request_id().size()));
  if (grpc::Status s = CheckRequestSize(req.items_size(), "sign", "items", max_items); !s.ok())
    return s;
  // The GHASH work, as a Run's checksums count it (contract::JobCost).
  uint64_t blocks = 0;
  for (const pb::SignItem& it : req.items())
    blocks += contract::CeilBlocks(it.length()) + (it.has_chain() ? 2 : 0);
  if (blocks > contract::kMaxBatchBlocks)
    return Refuse(pb::BATCH_TOO_LARGE,
                  absl::StrCat("sign request covers ", blocks,
                               " message blocks, the limit is ", contract::kMaxBatchBlocks));
  // A buffer of the wrong size would give a later item another item's
  // shares, and its one-time pad would be spent on them.
  return CheckShareBytes("sign request", contract::SignShareBytes(req),
                         req.data_shares().size());
}

}  // namespace

grpc::Status KeyOpsService::DoSign(const pb::SignRequest& req, pb::SignResponse* resp) {
  if (grpc::Status s = SignRequestProblem(req, options_.max_sign_items); !s.ok()) return s;
  const int n = req.items_size();
  const absl::Time t0 = absl::Now();
  resp->set_party(options_.party);
  resp->set_wire_version(contract::kWireVersion);
  // Each item's shares, sliced in item order (kmpc.proto
  // SignRequest.data_shares); the tag shares go out flat likewise.
  contract::FlatReader flat(req.data_shares());
  std::string* tag_shares = resp->mutable_tag_shares();
  tag_shares->reserve(2 * n * contract::kTagSize);
  for (int i = 0; i < n; ++i) {
    const pb::SignItem& it = req.items(i);
    const contract::MessageShares sh = flat.TakePair(contract::SharedBytes(it));
    pb::SignResult* o = resp->add_results();
    o->set_run_batch_id(it.run_batch_id());
    o->set_job_id(it.job_id());
    auto fail = [&](pb::JobStatus st, std::string detail) {
      o->set_status(st);
      o->set_detail(std::move(detail));
      metrics_->RecordJobFailure(pb::JobStatus_Name(st));
    };
    if (it.run_batch_id().size() != contract::kBatchIdSize) {
      fail(pb::JOB_MALFORMED, absl::StrCat("run_batch_id must be ",
                                           contract::kBatchIdSize, " bytes"));
      continue;
    }
    // Taken before anything is computed: a second item for this pad, in
    // this request or another, finds nothing (enctype.md, invariant 6).
    const std::string key = StateKey(it.run_batch_id(), it.job_id());
    absl::StatusOr<PadStates::Entry> e = pads_.Take(key);
    if (!e.ok()) {
      fail(pb::JOB_PAD_UNAVAILABLE,
           absl::StrCat("no pad under this batch/job id: ", e.status().message()));
      continue;
    }
    const engine::PadState& pad = *e->state;
    // The message's shares (a verify item's t' shares follow them).
    const absl::string_view s0 = sh.first.substr(0, it.length());
    const absl::string_view s1 = sh.second.substr(0, it.length());
    const auto span0 =
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s0.data()), s0.size());
    const auto span1 =
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s1.data()), s1.size());
    const bool verify = it.verify();
    const std::string bad = SignItemProblem(pad, it, sh, options_.party);
    if (it.has_chain() && bad.empty()) {
      std::string detail;
      const pb::JobStatus st = SignChained(it, key, std::move(*e), span0, span1,
                                          tag_shares, &detail);
      if (st == pb::JOB_OK) o->set_status(pb::JOB_OK);
      else fail(st, std::move(detail));
      continue;
    }
    absl::StatusOr<std::array<uint8_t, 16>> t =
        bad.empty() ? engine::SignShare(pad, it.usage(), span0, span1)
                    : absl::InvalidArgumentError(bad);
    if (!t.ok()) {
      // Nothing was computed with the pad: it goes back, with its age.
      (void)pads_.Put(key, std::move(*e));
      fail(pb::JOB_MALFORMED, std::string(t.status().message()));
      continue;
    }
    o->set_status(pb::JOB_OK);
    if (verify) SetVerifyAnswer(pad, it, sh, &*t);
    tag_shares->append(reinterpret_cast<const char*>(t->data()), t->size());
    OPENSSL_cleanse(t->data(), t->size());
    // *e goes here: the pad is wiped with its last reference.
  }
  metrics_->RecordBatch("sign", true, n, 0, 0, 0, absl::Now() - t0);
  return grpc::Status::OK;
}

// A chained item (kmpc.proto SignItem.chain) whose first pad `e` (taken
// under `key`) fits it: the second pad is taken too before anything is
// computed, t_1,i || t_2,i (engine::ChainedSignShare) appended to
// *tag_shares, and both pads wiped as they go. On any refusal both go
// back, with their ages (nothing computed): JOB_MALFORMED or
// JOB_PAD_UNAVAILABLE with *detail.
pb::JobStatus KeyOpsService::SignChained(const pb::SignItem& it, const std::string& key,
                                         PadStates::Entry e,
                                         absl::Span<const uint8_t> share0,
                                         absl::Span<const uint8_t> share1,
                                         std::string* tag_shares, std::string* detail) {
  if (it.verify()) *detail = "a verify item cannot chain";
  else if (it.chain().run_batch_id().size() != contract::kBatchIdSize)
    *detail = absl::StrCat("chain run_batch_id must be ", contract::kBatchIdSize, " bytes");
  const std::string key2 = StateKey(it.chain().run_batch_id(), it.chain().job_id());
  if (detail->empty() && key2 == key) *detail = "a chain names its own pad";
  if (!detail->empty()) {
    (void)pads_.Put(key, std::move(e));
    return pb::JOB_MALFORMED;
  }
  absl::StatusOr<PadStates::Entry> e2 = pads_.Take(key2);
  if (!e2.ok()) {
    (void)pads_.Put(key, std::move(e));
    *detail = absl::StrCat("no chained pad under this batch/job id: ", e2.status().message());
    return pb::JOB_PAD_UNAVAILABLE;
  }
  absl::StatusOr<std::array<uint8_t, 32>> t =
      engine::ChainedSignShare(*e.state, *e2->state, it.usage(), share0, share1);
  if (!t.ok()) {
    (void)pads_.Put(key, std::move(e));
    (void)pads_.Put(key2, std::move(*e2));
    *detail = std::string(t.status().message());
    return pb::JOB_MALFORMED;
  }
  tag_shares->append(reinterpret_cast<const char*>(t->data()), t->size());
  OPENSSL_cleanse(t->data(), t->size());
  return pb::JOB_OK;  // e and *e2 go here: both pads wiped with their last references
}

// Authorization, then the request; a rejected request leaves no partial
// response behind.
grpc::Status KeyOpsService::Serve(grpc::ServerContext* ctx, const char* what,
                                  google::protobuf::Message* resp,
                                  const std::function<grpc::Status()>& body) {
  if (absl::Status st = Authorize(ctx, options_.keyops_clients, "KeyOps");
      !st.ok())
    return ToGrpcStatus(st);
  grpc::Status st = body();
  if (!st.ok()) {
    auto e = contract::BatchErrorOf(st);
    metrics_->RecordRejected(e ? contract::BatchErrorName(e->code()) : "other");
    KMPC_VLOG(1) << what << " rejected: "
                 << (e ? contract::BatchErrorName(e->code()) : "?") << ": "
                 << st.error_message();
    WipeResponseShares(resp);  // Clear keeps the strings' buffers
    resp->Clear();
  }
  return st;
}

grpc::Status KeyOpsService::Run(grpc::ServerContext* ctx,
                                const kmpc::v1::RunRequest* req,
                                kmpc::v1::RunResponse* resp) {
  if (recorder_ != nullptr) recorder_->Record("Run", *req);
  grpc::Status st = Serve(ctx, "Run", resp,
                          [&] { return DoRun(*req, resp, ClientDeadline(*ctx)); });
  // The request is ours until we return: wipe this copy of the message
  // shares (the engine wiped its own).
  WipeShares(const_cast<kmpc::v1::RunRequest*>(req)->mutable_data_shares());
  return st;
}

grpc::Status KeyOpsService::Finalize(grpc::ServerContext* ctx,
                                     const kmpc::v1::FinalizeRequest* req,
                                     kmpc::v1::FinalizeResponse* resp) {
  if (recorder_ != nullptr) recorder_->Record("Finalize", *req);
  return Serve(ctx, "Finalize", resp,
               [&] { return DoFinalize(*req, resp, ClientDeadline(*ctx)); });
}

// A verify item's answer (kmpc.proto SignItem.verify): under a
// verification pad, SignShare's t_i is this party's additive share of
// r*GHASH(D) ^ r*AES_K(c0) (the pad holds r*H^k and r*AES_K(c0),
// engine.h), to which x_i adds its additive share of r * t' from local
// cross terms r_i t'_i ^ r_i t'_{i+1} ^ r_{i+1} t'_i of the replicated
// shares of r (the pad's) and of the presented tag t' (dealt by the KDC
// after D, `sh`; Araki et al. CCS 2016 section 2.2): x_0 ^ x_1 ^ x_2 =
// r * (T ^ t'), zero iff the tag holds, uniform otherwise; each x_i alone
// is uniform (the zero-share already in t_i).
void KeyOpsService::SetVerifyAnswer(const engine::PadState& pad,
                                    const pb::SignItem& it,
                                    const contract::MessageShares& sh,
                                    std::array<uint8_t, 16>* t) const {
  uint8_t t0[16], t1[16];
  std::memcpy(t0, sh.first.data() + it.length(), 16);
  std::memcpy(t1, sh.second.data() + it.length(), 16);
  protocol::GfCrossTerms(pad.r[0].data(), pad.r[1].data(), t0, t1, t->data(), 1);
  OPENSSL_cleanse(t0, sizeof(t0));
  OPENSSL_cleanse(t1, sizeof(t1));
}

grpc::Status KeyOpsService::Sign(grpc::ServerContext* ctx,
                                 const kmpc::v1::SignRequest* req,
                                 kmpc::v1::SignResponse* resp) {
  if (recorder_ != nullptr) recorder_->Record("Sign", *req);
  grpc::Status st = Serve(ctx, "Sign", resp, [&] { return DoSign(*req, resp); });
  // The request is ours until we return: wipe this copy of the shares.
  WipeShares(const_cast<kmpc::v1::SignRequest*>(req)->mutable_data_shares());
  return st;
}

}  // namespace kmpc::service
