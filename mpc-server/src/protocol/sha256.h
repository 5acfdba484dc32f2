// Streaming SHA-256 over OpenSSL's EVP interface, with a Peek at the
// digest of what was hashed so far that lets hashing go on: the hash of
// the values a party opened (mul_log.h, verify.h) and the engine's digests
// of what the three servers compare (engine/). A failed initialization or
// update sticks until Reset: every later Peek or Final is INTERNAL, never
// the digest of part of the input.
#ifndef KMPC_PROTOCOL_SHA256_H_
#define KMPC_PROTOCOL_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace kmpc::protocol {

// Streaming SHA-256 (OpenSSL EVP).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(absl::Span<const uint8_t> b);
  void Update(const uint64_t* w, size_t n) {
    Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(w), 8 * n));
  }
  absl::Status Final(std::array<uint8_t, 32>& out);
  // The digest of what was hashed so far; hashing may go on.
  absl::Status Peek(std::array<uint8_t, 32>& out);
  // Starts a new digest.
  void Reset();

 private:
  EVP_MD_CTX* ctx_;
  EVP_MD_CTX* peek_;  // Peek's copy of ctx_
  bool ok_;
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_SHA256_H_
