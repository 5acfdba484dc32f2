#include "engine/user_key_rule.h"

#include "absl/strings/str_cat.h"

namespace kmpc::engine {
namespace {

// The PA-ENC-TIMESTAMP's usage (RFC 4120 7.5.1), the gate of an AS reply.
constexpr uint32_t kTimestampUsage = 1;

// The DECRYPT `job` is released on (Job::release_if_ok): a job of its
// batch under the same key id and cipher; nullptr if there is none.
const Job* GateOf(absl::Span<const Job> jobs, const Job& job) {
  const int64_t g = job.release_if_ok;
  if (g == Job::kNoCondition || g < 0 || static_cast<size_t>(g) >= jobs.size()) return nullptr;
  const Job& gate = jobs[g];
  if (gate.type != pb::JOB_DECRYPT || gate.key_id != job.key_id || gate.cipher != job.cipher)
    return nullptr;
  return &gate;
}

}  // namespace

bool GatedUserReply(const Job& job, const KeyShares& key) {
  return PasswordDerived(key.kind) && contract::CtsCipher(job.cipher) &&
         job.type == pb::JOB_ENCRYPT &&
         (job.usage == contract::kSpliceReplyUsage ||
          job.usage == contract::kKdcChallengeUsage) &&
         job.release_if_ok != Job::kNoCondition;
}

std::string CheckUserGate(absl::Span<const Job> jobs, size_t j, const KeyShares& key) {
  const Job& job = jobs[j];
  if (!PasswordDerived(key.kind) || job.type != pb::JOB_ENCRYPT) return {};
  const bool kdc_challenge = job.cts_key != pb::CTS_KEY_DEALT && job.usage == 55;
  if (job.usage != contract::kSpliceReplyUsage && !kdc_challenge) return {};
  if (const Job* gate = GateOf(jobs, job)) {
    const bool dealt = gate->cts_key == pb::CTS_KEY_DEALT;
    if ((dealt ? gate->usage == kTimestampUsage : gate->usage == 54) &&
        !(kdc_challenge && dealt))
      return {};
  }
  return "a user key's AS reply (usage 3) or KDC challenge (usage 55) is computed only "
         "when released on the DECRYPT of a PA-ENC-TIMESTAMP (usage 1) or FAST challenge "
         "(usage 54; the KDC challenge: only this) under the same key in the same batch "
         "(release_if_ok)";
}

std::string CheckCtrUserKey(absl::Span<const Job> jobs, size_t j, KeyKind kind) {
  const Job& job = jobs[j];
  if (!PasswordDerived(kind) || contract::CtsCipher(job.cipher)) return {};
  const uint32_t u = job.usage;
  const bool service = kind == KeyKind::kUserService;
  bool ok = false, gated = false;
  switch (job.type) {
    case pb::JOB_DECRYPT:
      ok = u == kTimestampUsage;
      break;
    case pb::JOB_ENCRYPT:
      gated = u == contract::kSpliceReplyUsage;
      ok = service && u == contract::kTicketUsage;
      break;
    case pb::JOB_CHECKSUM:
      gated = u == contract::kSpliceChecksumUsage;
      ok = service && u == contract::kTicketChecksumUsage;
      break;
    case pb::JOB_PAD:  // a signing pad only: a verification pad has a counter
      ok = service && u == contract::kTicketChecksumUsage && job.checksum.empty();
      break;
    default:
      break;
  }
  const Job* gate = gated ? GateOf(jobs, job) : nullptr;
  if (ok || (gate != nullptr && gate->usage == kTimestampUsage)) return {};
  if (gated)
    return absl::StrCat(
        "under a user's password-derived aes*-ctr-mpc key, ", contract::JobTypeName(job.type),
        " under usage ", u,
        " (the AS reply, or its PA-REQ-ENC-PA-REP checksum) is computed only when released "
        "on the DECRYPT of the PA-ENC-TIMESTAMP (usage 1) under the same key in the same "
        "batch (release_if_ok)");
  return absl::StrCat(
      "under a user's password-derived aes*-ctr-mpc key (", service ? "KEY_KIND_USER_SERVICE"
                                                                    : "KEY_KIND_USER",
      "), ", contract::JobTypeName(job.type), " under usage ", u,
      " is refused: such a key runs only an AS exchange (the PA-ENC-TIMESTAMP's DECRYPT, "
      "usage 1, and the reply gated on it)",
      service ? " and a ticket to it (ENCRYPT under usage 2, its PAC signature under 17)"
              : "");
}

}  // namespace kmpc::engine
