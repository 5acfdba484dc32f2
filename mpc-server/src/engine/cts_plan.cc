// The aes*-cts part of a Run's plan (cts_plan.h).
#include "engine/cts_plan.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "cts/cts.h"
#include "engine/keys.h"
#include "engine/user_key_rule.h"
#include "protocol/gf128.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// Whether t's material has the sizes its program takes.
bool CtsMaterialSizesOk(const CtsTask& t) {
  const size_t want = t.type == pb::JOB_CHECKSUM ? 40
                      : t.cf2_bytes != 0         ? cts::kBlock * (t.nr + 1)
                                                 : cts::UsageMaterialBytes(t.nr);
  const auto sized = [](const CtsMaterial* m, size_t n) {
    return m == nullptr || (m->share[0].size() == n && m->share[1].size() == n);
  };
  return t.material != nullptr && sized(t.material, want) && sized(t.splice_material, 40);
}

// Job j's task into b.cts, or the job fails alone (PlanCts).
void PlanCtsJob(const RunContext& ctx, BatchState& b, size_t j) {
  const Job& job = b.jobs[j];
  JobPlan& w = b.plan[j];
  if (std::string why = CheckUserGate(b.jobs, j, *w.key); !why.empty()) {
    w.Fail(pb::JOB_MALFORMED, std::move(why));
    return;
  }
  // A ticket's KDC signature needs its pad (known alike on every party
  // once the batch is agreed).
  if (job.sign_pad != Job::kNoCondition && !b.plan[job.sign_pad].live()) {
    w.Fail(pb::JOB_WITHHELD, "the ticket's signing PAD (sign_pad) failed");
    return;
  }
  CtsTask t;
  t.job = j;
  t.type = job.type;
  t.nr = NumRounds(w.key->cipher);
  t.usage = job.usage;
  t.cf2_bytes = contract::CtsKeyBytes(job.cts_key);
  if (std::string why = FindCtsMaterial(job, *w.key, t); !why.empty()) {
    w.Fail(pb::JOB_UNKNOWN_USAGE, std::move(why));
    return;
  }
  // A FAST key's half, then the message (a DECRYPT's C || T).
  t.shared_in = {job.data_shares[0], job.data_shares[1]};
  if (CtsHasWindow(job.type, t.cf2_bytes, job.usage)) {
    // The freshness window, public: shared as (c, 0, 0) (cts.h
    // StaleTimestamp).
    const std::string w = CtsTimeWindow(job.now, ctx.options.cts_skew_s);
    for (int c = 0; c < 2; ++c)
      if (share::HoldsPublicIn(ctx.party(), c)) std::memcpy(t.window[c].data(), w.data(), w.size());
  }
  // n before its class (contract::CtsLengthOf): what the output is cut to.
  t.n = contract::CtsLengthOf(ShapeOf(job));
  // A new shape counts against the batch's bound before it is compiled
  // (EngineOptions::cts_batch_bytes); the job's shape is public and the
  // same on every party, so all fail the same jobs.
  const CtsProgramCache::Shape shape = ShapeOf(t);
  const size_t shape_bytes = CtsProgramCache::ShapeBytes(shape);
  if (b.cts_shapes.count(shape) == 0) {
    if (b.cts_shape_bytes + shape_bytes > ctx.options.cts_batch_bytes) {
      w.Fail(pb::JOB_MALFORMED,
             absl::StrCat("this batch's aes*-cts jobs of distinct lengths would pass ",
                          ctx.options.cts_batch_bytes, " bytes: submit the job in another batch"));
      return;
    }
    b.cts_shapes.insert(shape);
    b.cts_shape_bytes += shape_bytes;
  }
  absl::StatusOr<std::shared_ptr<const cts::Program>> p = CtsProgramCache::Shared().Get(
      job.type, t.nr, t.n, t.cf2_bytes, t.usage, t.splice_m, t.splice_off);
  if (!p.ok()) {
    w.Fail(pb::JOB_MALFORMED, std::string(p.status().message()));
    return;
  }
  if (!CtsMaterialSizesOk(t)) {
    w.Fail(pb::JOB_KEY_INCONSISTENT, "the dealt material has the wrong size: re-deal the key");
    return;
  }
  t.program = *std::move(p);
  t.masked = t.program->masked->get();
  w.cts_task = static_cast<int64_t>(b.cts.size());
  b.cts.push_back(std::move(t));
}

}  // namespace

std::string FindCtsMaterial(const Job& job, const KeyShares& key, CtsTask& t) {
  const bool checksum = job.type == pb::JOB_CHECKSUM;
  const bool cf2 = t.cf2_bytes != 0;
  t.material = cf2 ? key.FindCts(CtsKind::kPrf, 0)
                   : key.FindCts(checksum ? CtsKind::kChecksum : CtsKind::kUsage, job.usage);
  auto in = [](absl::Span<const uint32_t> usages, uint32_t u) {
    return std::find(usages.begin(), usages.end(), u) != usages.end();
  };
  const bool dec_ok = in(cf2 ? absl::MakeConstSpan(kCtsCf2DecryptUsages)
                             : absl::MakeConstSpan(kCtsDecryptUsages), job.usage) ||
                      (!cf2 && key.kind == KeyKind::kService &&
                       in(absl::MakeConstSpan(kCtsServiceDecryptUsages), job.usage));
  if (job.type == pb::JOB_DECRYPT && !cf2 && !dec_ok &&
      in(absl::MakeConstSpan(kCtsServiceDecryptUsages), job.usage))
    return absl::StrCat("a DECRYPT under usage ", job.usage,
                        " (a ticket) is computed under a service's key only (KEY_KIND_SERVICE): "
                        "this key is password-derived");
  const bool enc_ok = in(cf2 ? absl::MakeConstSpan(kCtsCf2EncryptUsages)
                             : absl::MakeConstSpan(kCtsEncryptUsages), job.usage);
  const bool service_sum = in(absl::MakeConstSpan(kCtsServiceKeyChecksums), job.usage);
  if (checksum && service_sum && key.kind != KeyKind::kService)
    return absl::StrCat("a CHECKSUM under usage ", job.usage,
                        " (a CAMMAC service verifier) is computed under a service's random key "
                        "only (KEY_KIND_SERVICE): this key is password-derived");
  const bool sum_ok = in(absl::MakeConstSpan(kCtsChecksumUsages), job.usage) || service_sum;
  if ((job.type == pb::JOB_DECRYPT && !dec_ok) || (job.type == pb::JOB_ENCRYPT && !enc_ok) ||
      (checksum && !sum_ok))
    return absl::StrCat("usage ", job.usage, " is not dealt for an aes*-cts ",
                        checksum                       ? "CHECKSUM"
                        : job.type == pb::JOB_DECRYPT ? "DECRYPT"
                                                       : "ENCRYPT",
                        cf2 ? " under a FAST key" : "");
  // A ticket's PAC is signed under usage 17, a reply's request under 56.
  const uint32_t splice_usage = job.sign_pad != Job::kNoCondition
                                    ? contract::kTicketChecksumUsage
                                    : contract::kSpliceChecksumUsage;
  if (job.splice_length != 0) {
    t.splice_m = job.splice_length;
    t.splice_off = job.splice_offset;
    t.splice_material = key.FindCts(CtsKind::kChecksum, splice_usage);
    t.ticket = job.sign_pad != Job::kNoCondition;
  }
  if (t.material == nullptr)
    return absl::StrCat("no material was dealt for ", checksum ? "checksum " : "", "usage ",
                        job.usage, " of this key");
  if (t.splice_m != 0 && t.splice_material == nullptr)
    return absl::StrCat("no material was dealt for checksum usage ", splice_usage,
                        " of this key (the splice's checksum)");
  return {};
}

absl::Status PlanCts(const RunContext& ctx, BatchState& b) {
  uint64_t aes_lanes = 0;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    if (b.plan[j].aes()) aes_lanes += 1 + b.plan[j].nks;
    if (b.plan[j].live() && b.plan[j].cts) PlanCtsJob(ctx, b, j);
  }
  if (b.cts.empty() || !ctx.options.malicious) return absl::OkStatus();
  const uint64_t waves = (aes_lanes + ctx.options.wave_lanes - 1) / ctx.options.wave_lanes;
  const uint64_t verifies = waves * (EngineOptions::kMaxAndLayersPerWave + 1) + 2 +
                            CostOf(b.cts).Verifies(ctx.options.verify_words) + 2;
  if (verifies > EngineOptions::kMaxVerifiesPerBatch)
    return absl::InvalidArgumentError(absl::StrCat(
        "batch needs up to ", verifies, " malicious checks, over the ",
        EngineOptions::kMaxVerifiesPerBatch, " of protocol/verify.h's bound"));
  return absl::OkStatus();
}

void FillTicketSignatures(const RunContext& ctx, BatchState& b) {
  for (CtsTask& t : b.cts) {
    if (!t.ticket) continue;
    const size_t p = static_cast<size_t>(b.jobs[t.job].sign_pad);
    PadState pad;
    const JobPlan& w = b.plan[p];
    pad.key = w.key;
    pad.ctr0 = w.ctr0;
    for (int k = 0; k < 2; ++k) {
      std::memcpy(pad.mask[k].data(), b.aes.Lane(k, w.lane0), 16);
      if (w.m > static_cast<size_t>(kStoredHPowers)) pad.h_powers[k] = b.secrets[p].powers[k];
    }
    const std::array<uint8_t, 5> a = ChecksumAad(b.jobs[p].usage);
    const std::vector<uint8_t> x =
        protocol::GhashInput(a, std::vector<uint8_t>(contract::kSpliceBytes, 0));
    for (int k = 0; k < 2; ++k) {
      std::array<uint8_t, 48>& s = t.sign[k];
      s.fill(0);
      if (share::HoldsPublicIn(ctx.party(), k)) std::memcpy(s.data(), pad.ctr0.data(), 16);
      std::memcpy(s.data() + 16, pad.Powers(k) + 16, 16);  // H^2
      protocol::GhashWithPowers(x, pad.Powers(k), s.data() + 32);
      for (size_t i = 0; i < 16; ++i) s[32 + i] ^= pad.mask[k][i];
    }
  }
}

}  // namespace kmpc::engine
