// Every job's check, plan and key, and the key views (keys.h).
#include "engine/keys.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/user_key_rule.h"
#include "protocol/gf128.h"
#include "protocol/verify.h"

namespace kmpc::engine {
namespace {

using protocol::Sha256;

absl::string_view View(const std::vector<uint8_t>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size());
}

// The contract's check of a Run job (a FINALIZE is none: contract::CheckJob
// refuses it, JOB_MALFORMED; the tag of an ENCRYPT is asked for ring-free,
// one additive share per server, FinalizeShare) or the caller's check.
contract::JobCheck CheckJob(const Job& job) {
  if (!job.precheck.ok()) return job.precheck;
  return contract::CheckJob(ShapeOf(job));
}

// Job::pad_after and pad_slot of job j: empty if none or well-formed, else
// why not (a PAD naming another ENCRYPT of the batch, no counter of its
// own, a slot below kPadSlots that no other PAD naming that ENCRYPT has:
// two pads at one counter would give two tags there, enctype.md invariant
// 6). Public: decided alike on every party.
std::string CheckPadAfter(absl::Span<const Job> jobs, size_t j) {
  const int64_t c = jobs[j].pad_after;
  if (c == Job::kNoCondition)
    return jobs[j].pad_slot == 0 ? "" : "pad_slot without pad_after";
  if (jobs[j].type != pb::JOB_PAD || !jobs[j].checksum.empty() || c < 0 ||
      static_cast<size_t>(c) >= jobs.size() || jobs[c].type != pb::JOB_ENCRYPT ||
      contract::CtsCipher(jobs[c].cipher))
    return "pad_after must name a ctr-mpc ENCRYPT of the batch, from a signing PAD";
  if (jobs[j].pad_slot >= contract::kPadSlots)
    return absl::StrCat("pad_slot ", jobs[j].pad_slot, " is not below ",
                        contract::kPadSlots);
  for (size_t k = 0; k < jobs.size(); ++k)
    if (k != j && jobs[k].pad_after == c && jobs[k].pad_slot == jobs[j].pad_slot)
      return "two PADs name the same ENCRYPT and slot (pad_after, pad_slot)";
  return {};
}

// Job::sign_pad of job j: empty if none or well-formed, else why not. The
// pad must be a signing PAD of the batch under a ctr-mpc key (the
// krbtgt), for usage 17 (the PAC's KDC signature), long enough for the
// 12-byte server signature, with its own drawn counter, and named by no
// other ticket: it makes one tag (enctype.md, invariant 6). Public:
// decided alike on every party.
std::string CheckSignPad(absl::Span<const Job> jobs, size_t j) {
  const int64_t p = jobs[j].sign_pad;
  if (p == Job::kNoCondition) return {};
  if (p < 0 || static_cast<size_t>(p) >= jobs.size() || jobs[p].type != pb::JOB_PAD ||
      contract::CtsCipher(jobs[p].cipher) || !jobs[p].checksum.empty() ||
      jobs[p].pad_after != Job::kNoCondition ||
      jobs[p].usage != contract::kTicketChecksumUsage ||
      jobs[p].length < contract::kSpliceBytes)
    return "sign_pad must name a signing PAD of the batch with its own drawn counter under a "
           "ctr-mpc key, usage 17, for 12 bytes or more";
  for (size_t k = 0; k < jobs.size(); ++k)
    if (k != j && jobs[k].sign_pad == p) return "two tickets name the same sign_pad";
  return {};
}

// The public plan of a job that passed CheckJob.
void PlanJob(const Job& job, JobPlan& w) {
  if (contract::CtsCipher(job.cipher)) {
    w.cts = true;  // engine/cts_jobs.h: planned by PlanCts
    return;
  }
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // nblocks 0 is an empty plaintext (enctype.md allows it; the shared
      // vectors have one): no keystream, the tag covers only A.
      w.needs_ctr0 = true;
      w.nks = job.nblocks;
      w.m = protocol::GhashBlocks(4, 16 * static_cast<size_t>(job.nblocks));
      return;
    case pb::JOB_DECRYPT: {
      const size_t clen = job.data.size() - contract::kCiphertextOverhead;
      std::memcpy(w.ctr0.data(), job.data.data(), 16);
      w.nks = contract::CeilBlocks(clen);
      w.ghash_in = protocol::GhashInput(
          UsageBe(job.usage), absl::MakeConstSpan(job.data.data() + 16, clen));
      w.m = w.ghash_in.size() / 16;
      std::memcpy(w.tag.data(), job.data.data() + 16 + clen, 16);
      w.check = true;
      return;
    }
    case pb::JOB_CHECKSUM:
    case pb::JOB_VERIFY_CHECKSUM: {
      if (job.type == pb::JOB_VERIFY_CHECKSUM) {
        // The presented tag is shared (Job::data_shares): CheckTags.
        std::memcpy(w.ctr0.data(), job.checksum.data(), 16);
        w.check = true;
      } else {
        w.needs_ctr0 = true;
      }
      // A' = usage (4 bytes big-endian) || 0x99 (enctype.md). D is shared:
      // its blocks are zero in the public input (GHASH is linear in X) and
      // are added as shared products in ComputeTags.
      const std::vector<uint8_t> zeros(job.length, 0);
      w.ghash_in = protocol::GhashInput(ChecksumAad(job.usage), zeros);
      w.m = w.ghash_in.size() / 16;
      w.shared_blocks = contract::CeilBlocks(job.length);
      return;
    }
    case pb::JOB_PAD:
      // The pad AES_K(c0) and the powers of H a message of up to `length`
      // bytes needs (A', D, the lengths: GhashBlocks); nothing is revealed.
      // A verification pad's counter is given, a linked pad's follows its
      // ENCRYPT's (LinkPads); any other is drawn.
      if (!job.checksum.empty())
        std::memcpy(w.ctr0.data(), job.checksum.data(), 16);
      w.needs_ctr0 = job.checksum.empty() && job.pad_after == Job::kNoCondition;
      w.m = protocol::GhashBlocks(5, job.length);
      return;
    default:
      return;  // no other type passes CheckJob
  }
}

}  // namespace

contract::JobShape ShapeOf(const Job& job) {
  const bool ctr_encrypt = job.type == pb::JOB_ENCRYPT && !contract::CtsCipher(job.cipher);
  contract::JobShape s{job.type, job.cipher, job.key_id.size(),
                       ctr_encrypt ? 16 * uint64_t{job.nblocks} : uint64_t{job.length},
                       View(job.data), View(job.checksum)};
  s.cts_key = job.cts_key;
  s.usage = job.usage;
  s.splice_length = job.splice_length;
  s.splice_offset = job.splice_offset;
  s.sign_pad = job.sign_pad != Job::kNoCondition;
  s.share_sizes[0] = job.data_shares[0].size();
  s.share_sizes[1] = job.data_shares[1].size();
  return s;
}

bool SpentBySignature(absl::Span<const Job> jobs, size_t p) {
  for (const Job& job : jobs)
    if (job.sign_pad == static_cast<int64_t>(p)) return true;
  return false;
}

void LookupKeys(const RunContext& ctx, BatchState& b, const KeyLookup& lookup) {
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    const Job& job = b.jobs[j];
    JobPlan& w = b.plan[j];
    if (contract::JobCheck c = CheckJob(job); !c.ok()) {
      w.Fail(c.status, std::move(c.detail));
      continue;
    }
    if (job.release_if_ok != Job::kNoCondition) {
      const int64_t c = job.release_if_ok;
      const bool fits =
          (job.type == pb::JOB_ENCRYPT || job.type == pb::JOB_CHECKSUM ||
           job.type == pb::JOB_PAD) && c >= 0 &&
          static_cast<size_t>(c) < b.jobs.size() && static_cast<size_t>(c) != j &&
          (b.jobs[c].type == pb::JOB_DECRYPT || b.jobs[c].type == pb::JOB_VERIFY_CHECKSUM);
      if (!fits) {
        w.Fail(pb::JOB_MALFORMED,
               "release_if_ok must name another job of the batch, a DECRYPT or "
               "VERIFY_CHECKSUM, from an ENCRYPT, CHECKSUM or PAD");
        continue;
      }
    }
    if (std::string why = CheckPadAfter(b.jobs, j); !why.empty()) {
      w.Fail(pb::JOB_MALFORMED, std::move(why));
      continue;
    }
    if (std::string why = CheckSignPad(b.jobs, j); !why.empty()) {
      w.Fail(pb::JOB_MALFORMED, std::move(why));
      continue;
    }
    PlanJob(job, w);
    w.cipher = job.cipher;
    absl::StatusOr<std::shared_ptr<const KeyShares>> key =
        lookup ? lookup(job.key_id)
               : absl::StatusOr<std::shared_ptr<const KeyShares>>(
                     absl::NotFoundError("no key lookup"));
    if (!key.ok() || *key == nullptr) {
      const bool missing = key.ok() || absl::IsNotFound(key.status());
      w.key_view = missing ? kViewMissing : kViewBad;
      w.Fail(missing ? pb::JOB_UNKNOWN_KEY : pb::JOB_KEY_INCONSISTENT,
             missing ? "unknown key id" : "stored key shares are unusable");
      continue;
    }
    if (!(*key)->Validate().ok() || (*key)->party != ctx.party()) {
      w.key_view = kViewBad;
      w.Fail(pb::JOB_KEY_INCONSISTENT,
             "stored key shares are malformed or belong to another party");
      continue;
    }
    w.key = *key;
    w.key_view = kViewPresent;
    w.user_key = PasswordDerived((*key)->kind);
    w.deal = (*key)->Origin();
    if (GatedUserReply(job, **key)) {
      w.gated_reply = true;
      w.over_rate = !ctx.limiter.Take(std::string(w.deal.begin(), w.deal.end()),
                                      ctx.options.cts_releases_per_minute, absl::Now());
    }
    if (GateDecrypt(job, **key)) w.over_budget = !b.gates->Take(j, w.deal);
  }
}

void ApplyUserKeyRule(BatchState& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live())
      if (std::string why = CheckCtrUserKey(b.jobs, j, b.plan[j].key->kind); !why.empty())
        b.plan[j].Fail(pb::JOB_MALFORMED, std::move(why));
}

void EncodeKeyView(const JobPlan& w, uint8_t* out) {
  std::memset(out, 0, kKeyViewBytes);
  out[0] = w.key_view;
  if (w.key_view == kViewPresent && w.key != nullptr) {
    out[1] = static_cast<uint8_t>(w.key->cipher);
    if (w.over_rate) out[1] |= kViewOverRate;
    if (w.over_budget) out[1] |= kViewOverBudget;
    // The dealing and the key's kind (KeyKind: what it may run,
    // user_key_rule.h), so that a server whose record says otherwise fails
    // the key's jobs alike instead of one server computing what the others
    // refuse; for an aes*-cts key also which material this server holds
    // (kind, usage, size; public, no share byte), so that a record that
    // differs on one server fails the key's jobs alike on all three
    // (JOB_KEY_INCONSISTENT) instead of one server skipping a job the
    // others run (PlanCtsJob), which would put the ring out of step for
    // the whole batch.
    std::vector<std::array<uint8_t, 7>> layout;
    for (const CtsMaterial& m : w.key->cts)
      layout.push_back({static_cast<uint8_t>(m.kind), static_cast<uint8_t>(m.usage >> 24),
                        static_cast<uint8_t>(m.usage >> 16),
                        static_cast<uint8_t>(m.usage >> 8), static_cast<uint8_t>(m.usage),
                        static_cast<uint8_t>(m.share[0].size() >> 8),
                        static_cast<uint8_t>(m.share[0].size())});
    std::sort(layout.begin(), layout.end());
    static constexpr char kTag[] = "kmpc-cts-key-view-v2";
    Sha256 h;
    h.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(kTag), sizeof kTag));
    h.Update(absl::MakeConstSpan(w.key->deal_id.data(), 16));
    const uint8_t kind = static_cast<uint8_t>(w.key->kind);
    h.Update(absl::MakeConstSpan(&kind, 1));
    for (const auto& l : layout) h.Update(l);
    std::array<uint8_t, 32> d;
    if (h.Final(d).ok()) std::memcpy(out + 2, d.data(), 16);
    else std::memset(out + 2, 0xff, 16);  // never equal to a good view
  }
}

void DecideKey(JobPlan& w, const std::array<const uint8_t*, 3>& raw) {
  if (raw[0][0] == kViewNone && raw[1][0] == kViewNone && raw[2][0] == kViewNone) {
    return;  // failed its check: status already set alike
  }
  // Any party's release bound or failure budget fails the job on all (the
  // parties' counts may differ by a batch in flight, or a restart):
  // compared without them.
  std::array<std::array<uint8_t, kKeyViewBytes>, 3> copy;
  std::array<const uint8_t*, 3> views;
  uint8_t over = 0;
  for (int p = 0; p < 3; ++p) {
    std::memcpy(copy[p].data(), raw[p], kKeyViewBytes);
    if (copy[p][0] == kViewPresent) {
      over |= copy[p][1] & (kViewOverRate | kViewOverBudget);
      copy[p][1] &= static_cast<uint8_t>(~(kViewOverRate | kViewOverBudget));
    }
    views[p] = copy[p].data();
  }
  bool same = true;
  for (int p = 0; p < 3; ++p)
    if (std::memcmp(views[p], views[0], kKeyViewBytes) != 0) same = false;
  if (same && views[0][0] == kViewPresent && over != 0) {
    w.Fail(pb::JOB_RATE_LIMITED,
           (over & kViewOverBudget) != 0
               ? "refused: this user key's gate is over the MPC servers' failure budget "
                 "(--gate_decrypts_per_run, --gate_failures_per_window)"
               : "this user key's AS replies are over the MPC servers' "
                 "--cts_releases_per_minute");
    return;
  }
  if (same && views[0][0] == kViewPresent) {
    // The agreed view's cipher byte (EncodeKeyView) against the job's: the
    // inputs digest covers the job's cipher, so every party decides alike.
    // A key is never run under another cipher's round count.
    if (views[0][1] != static_cast<uint8_t>(w.cipher)) {
      w.Fail(pb::JOB_WRONG_CIPHER,
             absl::StrCat("the key id was dealt for ",
                          contract::CipherName(static_cast<pb::Cipher>(views[0][1])),
                          ", the job names ", contract::CipherName(w.cipher)));
    }
    return;  // else compute it
  }
  auto [status, why] = KeyPresence(views);
  if (status != pb::JOB_OK) {
    w.Fail(status, std::move(why));
  } else {
    w.Fail(pb::JOB_KEY_INCONSISTENT,
           "the MPC servers hold different dealings of this key (deal_id, "
           "cipher or aes*-cts material differ): re-deal it");
  }
}

}  // namespace kmpc::engine
