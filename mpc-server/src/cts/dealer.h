// The dealer's side of the standard enctypes (in the clear; it holds the
// key when it deals it): RFC 3961 key derivation with RFC 3962's
// parameters, and per key and usage the material cts.h computes on:
//   Ke = DK(K, usage | 0xAA)  -> its expanded round keys (FIPS-197 5.2),
//   Ki = DK(K, usage | 0x55)  -> the SHA-1 chaining states after one
//        compression of (Ki ^ ipad) and of (Ki ^ opad) (RFC 2104), so
//        HMAC-SHA1(Ki, m) never needs Ki online.
// Each of these is a password-equivalent: only ever dealt as shares,
// never logged, wiped after use.
#ifndef KMPC_CTS_DEALER_H_
#define KMPC_CTS_DEALER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kmpc::cts {

// RFC 3961 section 5.1 n-fold of `in` to `nbytes` bytes.
std::vector<uint8_t> NFold(absl::Span<const uint8_t> in, size_t nbytes);

// RFC 3961 section 5.1 DK(key, constant) for AES keys (16 or 32 bytes):
// DR with E = AES of one block (CBC-CTS of one block with IV zero),
// random-to-key the identity (RFC 3962 section 6).
absl::StatusOr<std::vector<uint8_t>> DeriveKey(absl::Span<const uint8_t> key,
                                               absl::Span<const uint8_t> constant);

// RFC 3962 section 4: DK(PBKDF2-HMAC-SHA1(password, salt, iterations,
// keylen), "kerberos").
absl::StatusOr<std::vector<uint8_t>> StringToKey(std::string_view password,
                                                 std::string_view salt,
                                                 uint32_t iterations, size_t keylen);

// The chaining states after compressing (key ^ ipad) and (key ^ opad)
// from the SHA-1 IV, each as 20 bytes (H0..H4 big-endian). Keys longer
// than a block (RFC 2104 hashes them first; Ki is 16 or 32 bytes) are
// refused.
absl::Status HmacStates(absl::Span<const uint8_t> key, uint8_t ipad_state[20],
                        uint8_t opad_state[20]);

// One usage's material, in the byte order cts::UsageKeyInputs reads:
// round keys of Ke ((nr + 1) * 16 bytes), then the ipad and opad states of
// Ki. Wiped on destruction.
struct UsageMaterial {
  int nr = 0;
  std::vector<uint8_t> bytes;
  UsageMaterial() = default;
  UsageMaterial(UsageMaterial&&) = default;
  UsageMaterial& operator=(UsageMaterial&& o);  // wipes what it held
  ~UsageMaterial();
};

// The material of `usage` for a base key (16 or 32 bytes).
absl::StatusOr<UsageMaterial> DealUsage(absl::Span<const uint8_t> base_key,
                                        uint32_t usage);

// The checksum material of `usage` (hmac-sha1-96-aes128/256, RFC 3962
// section 7 with RFC 3961 section 5.3's Kc = DK(K, usage | 0x99)): the
// ipad and opad states of Kc (40 bytes; nr = 0), as cts::ChecksumProgram
// reads them.
absl::StatusOr<UsageMaterial> DealChecksum(absl::Span<const uint8_t> base_key,
                                           uint32_t usage);

// The PRF material (RFC 3962 section 6: PRF(K, s) = E(DK(K, "prf"),
// truncate16(SHA-1(s)))): the round keys of DK(K, "prf"), as
// cts::PrfProgram reads them.
absl::StatusOr<UsageMaterial> DealPrf(absl::Span<const uint8_t> base_key);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_DEALER_H_
