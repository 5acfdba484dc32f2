// Jobs of the kdcmpc module's C++ core, and the one place where an
// absl::Status becomes a krb5_error_code (KrbErrorFromStatus, module.cc).
//
// Status codes inside the core carry a fixed meaning, so that the boundary
// mapping is a table and not a guess:
//
//   kUnavailable        the MPC cluster cannot serve the job (a party is
//                       unreachable, the batch deadline passed, a party
//                       answered inconsistently or a share's two copies
//                       disagreed)            -> KRB5KDC_ERR_SVC_UNAVAILABLE
//   kNotFound           no shares exist for the key id   -> KRB5_KT_NOTFOUND
//   kDataLoss           the tag or checksum did not verify, or a ciphertext
//                       cannot be one of these enctypes at all
//                                              -> KRB5KRB_AP_ERR_BAD_INTEGRITY
//   kInvalidArgument    a malformed job                        -> EINVAL
//   anything else       an internal failure              -> KRB5_CRYPTO_INTERNAL
#ifndef KMPC_KDC_PLUGIN_JOB_H_
#define KMPC_KDC_PLUGIN_JOB_H_

#include <openssl/crypto.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kmpc::kdc {

// An allocator that wipes memory before handing it back: plaintexts and
// keystreams (keystream XOR ciphertext = a plaintext ticket) live only in
// SecureBytes, including every buffer a vector outgrows.
template <typename T>
struct ZeroizingAllocator {
  using value_type = T;
  ZeroizingAllocator() = default;
  template <typename U>
  ZeroizingAllocator(const ZeroizingAllocator<U>&) {}  // NOLINT
  T* allocate(size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, size_t n) {
    OPENSSL_cleanse(p, n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const ZeroizingAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const ZeroizingAllocator<U>&) const { return false; }
};
using SecureBytes = std::vector<uint8_t, ZeroizingAllocator<uint8_t>>;

// Wipes a std::string in place (protobuf fields holding shares).
inline void Cleanse(std::string* s) {
  if (!s->empty()) OPENSSL_cleanse(s->data(), s->size());
  s->clear();
}

inline constexpr size_t kKeyIdSize = 32;
inline constexpr size_t kBlock = 16;
inline constexpr size_t kOverhead = 32;  // ctr0 (16) || ... || T (16)
// The servers' limit on one job (engine::kMaxJobBlocks): 1 MiB.
inline constexpr size_t kMaxJobBytes = size_t{65536} * kBlock;

// Values of krb5_kdcmpc_job_type.
enum class JobType : int { kDecrypt = 1, kEncrypt = 2, kChecksum = 3, kVerify = 4 };

const char* JobTypeName(JobType t);

struct Job {
  JobType type = JobType::kDecrypt;
  std::string key_id;  // kKeyIdSize bytes
  uint32_t usage = 0;
  SecureBytes input;     // ENCRYPT: the plaintext; others: public data
  std::string checksum;  // VERIFY: ctr0 || tag
};

// Checks a job as hostile input. Returns kInvalidArgument for a malformed
// job and kDataLoss for a ciphertext or checksum that cannot verify under
// any key (too short, a counter range through the all-zero block).
absl::Status ValidateJob(const Job& job);

// ceil(n / 16).
uint64_t CeilBlocks(size_t n);

// enctype.md: a 16-byte ctr0 whose range c0 .. c0+n never reaches the
// all-zero block (c0 == 0, or a wrap past 2^128 - 1).
bool CounterRangeOk(const std::string& ctr0, uint64_t n);

// AES blocks the job costs the cluster (keystream blocks plus the tag
// mask block), as the servers count them against their batch limit.
uint64_t JobBlocks(const Job& job);

// Status helpers with the meanings above.
inline absl::Status IntegrityError(absl::string_view msg) {
  return absl::DataLossError(msg);
}

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_JOB_H_
