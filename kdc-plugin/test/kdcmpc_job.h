// A kdcmpc ENCRYPT job as the patched KDC submits one (krb5/kdcmpc_plugin.h),
// for the tests that drive the module's C entry or its core directly.
#ifndef KMPC_KDC_TEST_KDCMPC_JOB_H_
#define KMPC_KDC_TEST_KDCMPC_JOB_H_

#include <cstring>

extern "C" {
#include <krb5/kdcmpc_plugin.h>
}

namespace kmpc::kdc::testing {

// An AES-256 ticket ENCRYPT (key usage 2) of the NUL-terminated
// `plaintext` under `key_id`; the job points into both.
inline krb5_kdcmpc_job EncryptJob(const unsigned char* key_id,
                                  char* plaintext) {
  krb5_kdcmpc_job job{};
  job.type = KRB5_KDCMPC_ENCRYPT;
  job.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
  job.key_id = key_id;
  job.usage = 2;
  job.input.data = plaintext;
  job.input.length = static_cast<unsigned int>(std::strlen(plaintext));
  return job;
}

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_TEST_KDCMPC_JOB_H_
