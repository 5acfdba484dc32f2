// The results of a Run (collect.h).
#include "engine/collect.h"

#include <openssl/crypto.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "engine/keys.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// An aes*-cts result: its output shares (JobResult::keystream carries
// every revealed share) for a DECRYPT whose tag held, an ENCRYPT or a
// CHECKSUM; a DECRYPT whose tag failed reveals nothing.
void CollectCts(BatchState& b, size_t j, JobResult& r) {
  CtsTask& t = b.cts[b.plan[j].cts_task];
  if (t.type == pb::JOB_DECRYPT && !b.pass[j]) {
    r.status = pb::JOB_INTEGRITY_FAILED;
    r.detail = "the aes*-cts tag did not verify";
    return;
  }
  for (int k = 0; k < 2; ++k) r.keystream[k] = std::move(t.out[k]);
}

// What an ENCRYPT's or a PAD's tag will need: AES_K(c0) and the powers.
void FillTagState(const RunContext& ctx, BatchState& b, size_t j, TagState& s) {
  JobPlan& w = b.plan[j];
  const Job& job = b.jobs[j];
  s.party = ctx.party();
  s.cipher = w.key->cipher;
  s.key_id = job.key_id;
  s.usage = job.usage;
  s.ctr0 = w.ctr0;
  for (int k = 0; k < 2; ++k)
    std::memcpy(s.mask[k].data(), b.aes.Lane(k, w.lane0), 16);
  if (w.m > static_cast<size_t>(kStoredHPowers)) {
    // The powers this job computed: moved, not copied (the state wipes
    // them).
    for (int k = 0; k < 2; ++k) s.h_powers[k] = std::move(b.secrets[j].powers[k]);
  } else {
    s.key = w.key;  // the stored powers suffice: no copy
  }
}

void CollectPad(const RunContext& ctx, BatchState& b, size_t j, JobResult& r) {
  const Job& job = b.jobs[j];
  r.ctr0 = b.plan[j].ctr0;
  auto pad = std::make_shared<PadState>();
  FillTagState(ctx, b, j, *pad);
  pad->max_length = job.length;
  pad->verify_only = !job.checksum.empty();
  pad->zero = b.secrets[j].zero;
  if (pad->verify_only) {
    // r*H^k, r*AES_K(c0) and r in place of the powers and the pad.
    JobSecrets& s = b.secrets[j];
    pad->key.reset();
    for (int k = 0; k < 2; ++k) {
      share::Wipe(pad->h_powers[k]);
      pad->h_powers[k] = std::move(s.rpowers[k]);
      pad->mask[k] = s.rmask[k];
      pad->r[k] = s.r[k];
    }
  }
  r.pad = std::move(pad);
}

void CollectJob(const RunContext& ctx, BatchState& b, size_t j, JobResult& r) {
  JobPlan& w = b.plan[j];
  const Job& job = b.jobs[j];
  r.status = w.status;
  r.detail = w.detail;
  if (!w.live()) return;
  if (w.cts) return CollectCts(b, j, r);
  auto keystream = [&] {
    for (int k = 0; k < 2; ++k) {
      const auto& out = b.aes.out[k];
      r.keystream[k].assign(out.begin() + 16 * (w.lane0 + 1),
                            out.begin() + 16 * (w.lane0 + 1 + w.nks));
    }
  };
  const bool verified = b.pass[j];
  switch (job.type) {
    case pb::JOB_ENCRYPT: {
      r.ctr0 = w.ctr0;
      keystream();
      auto state = std::make_shared<EncryptState>();
      FillTagState(ctx, b, j, *state);
      state->nblocks = job.nblocks;
      r.state = std::move(state);
      return;
    }
    case pb::JOB_DECRYPT:
      r.status = verified ? pb::JOB_OK : pb::JOB_INTEGRITY_FAILED;
      if (verified) keystream();
      return;
    case pb::JOB_CHECKSUM:
      r.ctr0 = w.ctr0;
      r.tag = b.secrets[j].tprime;
      return;
    case pb::JOB_VERIFY_CHECKSUM:
      r.status = verified ? pb::JOB_OK : pb::JOB_INTEGRITY_FAILED;
      return;
    case pb::JOB_PAD:
      CollectPad(ctx, b, j, r);
      // Spent on a ticket's KDC signature inside the circuit: only ctr0.
      if (SpentBySignature(b.jobs, j)) r.pad.reset();
      return;
    default:
      return;
  }
}

}  // namespace

BatchResult Collect(const RunContext& ctx, BatchState& b) {
  BatchResult result;
  result.batch_seq = b.seq;
  result.jobs.resize(b.jobs.size());
  for (size_t j = 0; j < b.jobs.size(); ++j) CollectJob(ctx, b, j, result.jobs[j]);
  // Conditional release (Job::release_if_ok): the same on every party, as
  // every job's status is.
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    const int64_t c = b.jobs[j].release_if_ok;
    JobResult& r = result.jobs[j];
    if (c == Job::kNoCondition) continue;
    // A verifier that took its token and is not released gives it back.
    const bool took = b.plan[j].gated_reply && !b.plan[j].over_rate;
    auto give_back = [&] {
      if (took)
        ctx.limiter.GiveBack(std::string(b.plan[j].deal.begin(), b.plan[j].deal.end()),
                             ctx.options.cts_releases_per_minute, absl::Now());
    };
    if (!r.ok()) {
      give_back();
      continue;
    }
    const bool stale =
        b.plan[j].user_key && static_cast<size_t>(c) < b.stale.size() && b.stale[c];
    if (result.jobs[c].ok() && !stale) continue;  // released: its token spent
    give_back();
    for (auto& ks : r.keystream) {
      share::Wipe(ks);
      ks.clear();
    }
    for (auto& t : r.tag) OPENSSL_cleanse(t.data(), t.size());
    r.state.reset();
    r.pad.reset();
    r.ctr0 = {};
    r.status = pb::JOB_WITHHELD;
    r.detail = stale ? "withheld: the timestamp it is released on is outside the MPC "
                       "servers' clock skew (--cts_skew_s)"
                     : "withheld: the job it is released on did not verify";
  }
  return result;
}

}  // namespace kmpc::engine
