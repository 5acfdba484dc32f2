// FIPS-197 section 5.2 key expansion, in the clear: the dealer expands a
// key once and shares the round keys (the MPC never runs a key schedule).
#ifndef KMPC_AES_KEY_EXPANSION_H_
#define KMPC_AES_KEY_EXPANSION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kmpc::aes {

// 16-byte key -> 11*16 bytes, 32-byte key -> 15*16 bytes (round 0 first).
absl::StatusOr<std::vector<uint8_t>> ExpandKey(absl::Span<const uint8_t> key);

// The AES S-box table (FIPS-197 Figure 7), for the key schedule and tests.
extern const uint8_t kSbox[256];

}  // namespace kmpc::aes

#endif  // KMPC_AES_KEY_EXPANSION_H_
