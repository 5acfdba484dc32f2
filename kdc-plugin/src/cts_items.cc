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
         (job.type == pb::JOB_CHECKSUM && job.usage == 17);
}

std::string CtsItemProblem(const PlanItem& p) {
  if (p.role != Role::kTimestamp && p.role != Role::kReply && p.role != Role::kChallenge &&
      p.role != Role::kKdcChallenge)
    return "an aes*-cts key in a role other than TIMESTAMP, CHALLENGE, KDC_CHALLENGE or REPLY";
  if (!p.given) return "an aes*-cts item not given at begin";
  // The encrypted challenge is under FAST keys only, the timestamp under
  // the dealt key only (the servers' direction rule, engine.h).
  if ((p.role == Role::kChallenge || p.role == Role::kKdcChallenge) &&
      p.cts_key == kmpc::v1::CTS_KEY_DEALT)
    return "an encrypted challenge item without its FAST key";
  if (p.role == Role::kTimestamp && p.cts_key != kmpc::v1::CTS_KEY_DEALT)
    return "a TIMESTAMP under a FAST key";
  if (p.role == Role::kReply && !(p.flags & kItemExact))
    return "an aes*-cts REPLY whose length is not exact";
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

size_t CtsSharedBytes(const Job& job) {
  return contract::SharedBytes(job.type, job.cipher,
                               job.type == pb::JOB_DECRYPT ? 0 : job.input.size(), job.cts_key);
}

absl::Status CtsResult(const Job& job, SecureBytes* value) {
  contract::JobShape shape;
  shape.type = job.type;
  shape.cipher = job.cipher;
  shape.length = job.type == pb::JOB_DECRYPT ? 0 : job.input.size();
  if (job.type == pb::JOB_DECRYPT)
    shape.data = absl::string_view(
        reinterpret_cast<const char*>(job.input.data()), job.input.size());
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
