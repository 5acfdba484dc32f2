// The kdcmpc interface's C structures (krb5's kdcmpc_plugin.h) as the
// core's: job types and enctypes, a job, an exchange plan; and the core's
// statuses as krb5 error codes. The one place module.cc converts either
// way.
#ifndef KMPC_KDC_KDCMPC_C_H_
#define KMPC_KDC_KDCMPC_C_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core.h"
#include "gate_book.h"
#include "job.h"
#include "plan.h"

namespace kmpc::kdc {

// The one mapping from the core's statuses to krb5 error codes (the
// meanings are fixed in job.h).
krb5_error_code KrbErrorFromStatus(const absl::Status& s);

// The one mapping from the krb5 patch's job types (kdcmpc_plugin.h:
// DECRYPT=1, ENCRYPT=2, CHECKSUM=3, VERIFY=4) to the contract's (kmpc.proto
// JobType: ENCRYPT=1, DECRYPT=2, CHECKSUM=3, VERIFY_CHECKSUM=4). The
// numbers differ, so it is this switch and never a cast; the static_asserts
// below check it for every C value, and fail when either enum is
// renumbered. JOB_TYPE_UNSPECIFIED for any other value.
constexpr kmpc::v1::JobType JobTypeOf(krb5_kdcmpc_job_type type) {
  switch (type) {
    case KRB5_KDCMPC_ENCRYPT: return kmpc::v1::JOB_ENCRYPT;
    case KRB5_KDCMPC_DECRYPT: return kmpc::v1::JOB_DECRYPT;
    case KRB5_KDCMPC_CHECKSUM: return kmpc::v1::JOB_CHECKSUM;
    case KRB5_KDCMPC_VERIFY: return kmpc::v1::JOB_VERIFY_CHECKSUM;
    default: return kmpc::v1::JOB_TYPE_UNSPECIFIED;
  }
}
static_assert(KRB5_KDCMPC_DECRYPT == 1 && KRB5_KDCMPC_ENCRYPT == 2 &&
                  KRB5_KDCMPC_CHECKSUM == 3 && KRB5_KDCMPC_VERIFY == 4,
              "kdcmpc_plugin.h renumbered its job types: check JobTypeOf");
static_assert(kmpc::v1::JOB_ENCRYPT == 1 && kmpc::v1::JOB_DECRYPT == 2 &&
                  kmpc::v1::JOB_CHECKSUM == 3 && kmpc::v1::JOB_VERIFY_CHECKSUM == 4,
              "kmpc.proto renumbered its job types: check JobTypeOf");
static_assert(JobTypeOf(KRB5_KDCMPC_DECRYPT) == kmpc::v1::JOB_DECRYPT);
static_assert(JobTypeOf(KRB5_KDCMPC_ENCRYPT) == kmpc::v1::JOB_ENCRYPT);
static_assert(JobTypeOf(KRB5_KDCMPC_CHECKSUM) == kmpc::v1::JOB_CHECKSUM);
static_assert(JobTypeOf(KRB5_KDCMPC_VERIFY) == kmpc::v1::JOB_VERIFY_CHECKSUM);

// The contract's cipher of a kdcmpc job's enctype: the module's one
// conversion from krb5 enctypes (the servers refuse a key dealt for the
// other cipher, JOB_WRONG_CIPHER). A handle of aes128/aes256-cts-hmac-sha1-96
// names a key dealt for CIPHER_AES*_CTS. CIPHER_UNSPECIFIED for any other
// enctype, which the caller refuses.
constexpr kmpc::v1::Cipher CipherOfEnctype(krb5_enctype enctype) {
  switch (enctype) {
    case KRB5_KDCMPC_ENCTYPE_AES128: return kmpc::v1::CIPHER_AES128;
    case KRB5_KDCMPC_ENCTYPE_AES256: return kmpc::v1::CIPHER_AES256;
    case ENCTYPE_AES128_CTS_HMAC_SHA1_96: return kmpc::v1::CIPHER_AES128_CTS;
    case ENCTYPE_AES256_CTS_HMAC_SHA1_96: return kmpc::v1::CIPHER_AES256_CTS;
    default: return kmpc::v1::CIPHER_UNSPECIFIED;
  }
}
static_assert(KRB5_KDCMPC_ENCTYPE_AES128 == ENCTYPE_AES128_CTR_MPC &&
                  KRB5_KDCMPC_ENCTYPE_AES256 == ENCTYPE_AES256_CTR_MPC,
              "the kdcmpc interface's enctypes are krb5's aes*-ctr-mpc");

// A malloc'd copy of s for krb5's messages (the KDC frees it); null when
// out of memory.
char* Dup(const std::string& s);

// The core's Job of a kdcmpc job; 0, or an error code with *msg_out set.
krb5_error_code JobOfC(const krb5_kdcmpc_job* job, krb5_kdcmpc_done_fn done,
                       Job* out, char** msg_out);

// The core's plan of a kdcmpc plan, and the jobs of its items given now
// (tokens not yet assigned), each admitted by the gate book (`gates`; a
// gate's claim into *claims by item). What the core does not serve is
// refused (Planner::Check, cts_items.h): items under aes*-cts keys other
// than the AS exchange's, and any splice but a REQ_CHECKSUM's into an
// aes*-cts REPLY, whose job then carries the checksum's message
// (Job::splice) and the REQ_CHECKSUM no job of its own.
absl::Status PlanOfC(const krb5_kdcmpc_plan* in, GateBook& gates, Plan* out,
                     std::vector<ItemJob>* given, std::map<int, GateBook::Claim>* claims);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_KDCMPC_C_H_
