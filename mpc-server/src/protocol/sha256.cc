// Sha256 (sha256.h) on an EVP_MD_CTX, and a second one that Peek copies
// the running state into.
#include "protocol/sha256.h"

#include <openssl/evp.h>

namespace kmpc::protocol {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()), peek_(EVP_MD_CTX_new()) { Reset(); }
void Sha256::Reset() {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}
Sha256::~Sha256() {
  EVP_MD_CTX_free(ctx_);
  EVP_MD_CTX_free(peek_);
}
void Sha256::Update(absl::Span<const uint8_t> b) {
  if (ok_ && !b.empty()) ok_ = EVP_DigestUpdate(ctx_, b.data(), b.size()) == 1;
}
absl::Status Sha256::Peek(std::array<uint8_t, 32>& out) {
  // peek_ is reused for every Peek (EVP_MD_CTX_copy_ex overwrites it):
  // one allocation per hash instead of one per coin.
  unsigned int len = 0;
  const bool ok = ok_ && peek_ != nullptr && EVP_MD_CTX_copy_ex(peek_, ctx_) == 1 &&
                  EVP_DigestFinal_ex(peek_, out.data(), &len) == 1 && len == 32;
  return ok ? absl::OkStatus() : absl::InternalError("SHA-256 failed");
}
absl::Status Sha256::Final(std::array<uint8_t, 32>& out) {
  unsigned int len = 0;
  if (!ok_ || EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != 32) {
    return absl::InternalError("SHA-256 failed");
  }
  return absl::OkStatus();
}

}  // namespace kmpc::protocol
