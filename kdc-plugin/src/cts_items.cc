#include "cts_items.h"

#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "contract.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

bool CtsJob(const Job& job) { return contract::CtsCipher(job.cipher); }

absl::Status CtsJobServed(const Job& job) {
  if (job.type == pb::JOB_DECRYPT || job.type == pb::JOB_ENCRYPT ||
      job.type == pb::JOB_CHECKSUM)
    return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "kdcmpc: ", contract::JobTypeName(job.type),
      " jobs under aes*-cts-hmac-sha1-96 keys are not served"));
}

bool CtsServedUnplanned(const Job& job) {
  return (job.type == pb::JOB_ENCRYPT && job.usage == 2) ||
         (job.type == pb::JOB_CHECKSUM &&
          (job.usage == 17 || job.usage == 64));  // 64: a CAMMAC's (RFC 7751)
}

absl::Status SignTicketInCluster(Job* job, const TicketSigning& t) {
  if (t.pac_length == 0 || t.pac == nullptr || t.sign_key_id == nullptr ||
      t.sig_offset > UINT32_MAX)
    return absl::InvalidArgumentError("malformed ticket job (no PAC or signing key)");
  if (!CtsJob(*job) || job->type != pb::JOB_ENCRYPT || job->usage != contract::kTicketUsage)
    return absl::InvalidArgumentError(
        "a ticket signed in the cluster is an aes*-cts ENCRYPT, usage 2");
  if (t.sign_cipher == pb::CIPHER_UNSPECIFIED || contract::CtsCipher(t.sign_cipher))
    return absl::InvalidArgumentError("a ticket's KDC signature is under an aes*-ctr-mpc key");
  // The servers XOR both signatures into the plaintext's shares at their
  // slots (12 bytes at the offset, 32 the gap after it): anything but
  // zeros there would give a ticket with wrong signatures.
  const uint64_t end = t.sig_offset + contract::kTicketSignatureGap +
                       contract::kKdcSignatureBytes;
  if (end > job->input.size())
    return absl::InvalidArgumentError("a ticket's signature slots past its end");
  const auto zero = [&](uint64_t from, uint64_t n) {
    for (uint64_t k = from; k < from + n; ++k)
      if (job->input[k] != 0) return false;
    return true;
  };
  if (!zero(t.sig_offset, contract::kSpliceBytes) ||
      !zero(t.sig_offset + contract::kTicketSignatureGap, contract::kKdcSignatureBytes))
    return absl::InvalidArgumentError("a ticket's signature slots are not zeros");
  const std::string pad = contract::SplicePadding(t.pac_length);
  job->splice.assign(t.pac, t.pac + t.pac_length);
  job->splice.insert(job->splice.end(), pad.begin(), pad.end());
  job->splice_offset = static_cast<uint32_t>(t.sig_offset);
  job->sign_cipher = t.sign_cipher;
  job->sign_key_id.assign(reinterpret_cast<const char*>(t.sign_key_id), contract::kKeyIdSize);
  return absl::OkStatus();
}

std::string CtsItemProblem(const PlanItem& p) {
  if (p.role != Role::kTimestamp && p.role != Role::kReply && p.role != Role::kChallenge &&
      p.role != Role::kKdcChallenge && p.role != Role::kReqChecksum &&
      p.role != Role::kHeaderTicket && p.role != Role::kSecondTicket)
    return "an aes*-cts key in a role other than TIMESTAMP, CHALLENGE, KDC_CHALLENGE, "
           "REQ_CHECKSUM, REPLY, HEADER_TICKET or SECOND_TICKET";
  if (!p.given) return "an aes*-cts item not given at begin";
  // The encrypted challenge is under FAST keys only, the timestamp under
  // the dealt key only (the servers' direction rule, engine.h).
  if ((p.role == Role::kChallenge || p.role == Role::kKdcChallenge) &&
      p.cts_key == kmpc::v1::CTS_KEY_DEALT)
    return "an encrypted challenge item without its FAST key";
  if ((p.role == Role::kTimestamp || p.role == Role::kHeaderTicket ||
       p.role == Role::kSecondTicket) &&
      p.cts_key != kmpc::v1::CTS_KEY_DEALT)
    return "a TIMESTAMP or ticket under a FAST key";
  if (p.role == Role::kReply && !(p.flags & kItemExact))
    return "an aes*-cts REPLY whose length is not exact";
  return {};
}

bool SplicedAway(const Plan& plan, size_t i) {
  for (const PlanItem& p : plan.items)
    if (p.splice_from >= 0 && static_cast<size_t>(p.splice_from) == i) return true;
  return false;
}

std::string CtsSpliceProblem(const Plan& plan, size_t i) {
  const PlanItem& p = plan.items[i];
  size_t into = 0;
  for (const PlanItem& r : plan.items)
    into += r.splice_from >= 0 && static_cast<size_t>(r.splice_from) == i;
  if (into > 0 && (p.role != Role::kReqChecksum || into > 1))
    return "a splice from an item that is no REQ_CHECKSUM, or into two items";
  if (p.role == Role::kReqChecksum && contract::CtsCipher(p.cipher) && into == 0)
    return "an aes*-cts REQ_CHECKSUM not spliced into a REPLY (it is never released)";
  if (p.splice_from < 0) return {};
  if (static_cast<size_t>(p.splice_from) >= plan.items.size() ||
      static_cast<size_t>(p.splice_from) == i)
    return "a splice from outside the plan";
  const PlanItem& c = plan.items[p.splice_from];
  if (p.role != Role::kReply || !contract::CtsCipher(p.cipher) || p.type != pb::JOB_ENCRYPT ||
      p.usage != contract::kSpliceReplyUsage || p.cts_key != pb::CTS_KEY_DEALT || !p.given ||
      !(p.flags & kItemExact))
    return "a splice into an item other than a given, exact aes*-cts REPLY under the dealt key";
  if (c.role != Role::kReqChecksum || c.type != pb::JOB_CHECKSUM ||
      c.usage != contract::kSpliceChecksumUsage || c.cipher != p.cipher ||
      c.key_id != p.key_id || !c.given || c.cts_key != pb::CTS_KEY_DEALT)
    return "a splice from an item other than a given REQ_CHECKSUM of the reply's key";
  // Its length cap: CheckJob (job.h), on the REPLY that carries it.
  if (c.length == 0) return "an empty spliced message";
  if (p.splice_offset > p.length || p.length - p.splice_offset < contract::kSpliceBytes)
    return absl::StrCat("a splice at ", p.splice_offset, " of a ", p.length,
                        "-byte plaintext (12 bytes must fit)");
  return {};
}

absl::Status CtsCheckResult(const Job& job, pb::JobStatus status, int k) {
  if (status == pb::JOB_OK ||
      (status == pb::JOB_INTEGRITY_FAILED && job.type == pb::JOB_DECRYPT))
    return absl::OkStatus();
  if (status == pb::JOB_INTEGRITY_FAILED)
    return absl::AbortedError(absl::StrCat(
        "malformed aes*-cts ", contract::JobTypeName(job.type),
        " result for job ", k));
  return absl::OkStatus();
}

absl::Status CtsResult(const Job& job, SecureBytes* value) {
  contract::JobShape shape;
  shape.type = job.type;
  shape.cipher = job.cipher;
  shape.length = job.input.size();
  if (value->size() != contract::RevealedBytes(shape) ||
      (job.type != pb::JOB_DECRYPT && job.type != pb::JOB_ENCRYPT &&
       job.type != pb::JOB_CHECKSUM))
    return absl::AbortedError("an aes*-cts result of the wrong length");
  if (job.type == pb::JOB_DECRYPT) {
    // RFC 3962 (RFC 3961 simplified profile): the confounder is random
    // bytes before the plaintext, no part of the message.
    OPENSSL_cleanse(value->data(), contract::kCtsConfounder);
    value->erase(value->begin(), value->begin() + contract::kCtsConfounder);
  }
  return absl::OkStatus();
}

}  // namespace kmpc::kdc
