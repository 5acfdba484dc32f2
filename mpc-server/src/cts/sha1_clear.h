// SHA-1's compression function in the clear (FIPS 180-4 section 6.1.2):
// what the dealer computes HMAC-SHA1's dealt chaining states with (cts/
// dealer.h), apart from the circuit (cts/sha1.h) so that the key dealer
// links no circuit, AND engine or proof code.
#ifndef KMPC_CTS_SHA1_CLEAR_H_
#define KMPC_CTS_SHA1_CLEAR_H_

#include <array>
#include <cstdint>

namespace kmpc::cts {

// FIPS 180-4 section 5.3.1: the initial chaining state H0..H4.
inline constexpr std::array<uint32_t, 5> kSha1Iv = {
    0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
// FIPS 180-4 section 4.2.1: K_t of steps 20k .. 20k + 19.
inline constexpr uint32_t kSha1K[4] = {0x5A827999, 0x6ED9EBA1, 0x8F1BBCDC,
                                       0xCA62C1D6};

// h updated by one 64-byte block; the message schedule is wiped (the
// dealer's blocks are HMAC key pads).
void Sha1CompressClear(std::array<uint32_t, 5>& h, const uint8_t* block);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_SHA1_CLEAR_H_
