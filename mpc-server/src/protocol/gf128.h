// GF(2^128) arithmetic in the bit order of GCM (NIST SP 800-38D, 6.3):
// the first bit of a 16-byte string (MSB of byte 0) is the coefficient of
// x^0, the field polynomial is x^128 + x^7 + x^2 + x + 1.
//
// Multiplication of two shared values uses the same resharing formula as
// AND (protocol/rep3.h); multiplication by a public element is local and
// works component-wise on shares because the product is bilinear.
#ifndef KMPC_PROTOCOL_GF128_H_
#define KMPC_PROTOCOL_GF128_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace kmpc::protocol {

using Block = std::array<uint8_t, 16>;

// out = a * b with PCLMULQDQ (Intel, "Carry-Less Multiplication and Its
// Usage for Computing the GCM Mode", 2014, Figure 5 / Algorithm 5).
// out may alias a or b.
void GfMul(const uint8_t* a, const uint8_t* b, uint8_t* out);
Block GfMul(const Block& a, const Block& b);

// The local part of a shared product (rep3.h), for n elements of 16 bytes:
// t[j] ^= x0[j] * (y0[j] ^ y1[j]) ^ x1[j] * y0[j], with one reduction per
// element (the two unreduced products are added first). t must not alias
// the inputs.
void GfCrossTerms(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
                  const uint8_t* y1, uint8_t* t, size_t n);

// SP 800-38D Algorithm 1, bit by bit: the independent reference for tests.
Block GfMulReference(const Block& a, const Block& b);

// The GHASH input of enctype.md: pad16(a) || pad16(c) || [8 len a]_64 ||
// [8 len c]_64, as m = ceil(|a|/16) + ceil(|c|/16) + 1 blocks.
std::vector<uint8_t> GhashInput(absl::Span<const uint8_t> a,
                                absl::Span<const uint8_t> c);
inline size_t GhashBlocks(size_t a_len, size_t c_len) {
  return (a_len + 15) / 16 + (c_len + 15) / 16 + 1;
}

// GHASH with precomputed powers: out = sum_{j=1..m} X_j * H^(m-j+1), where
// x holds m = x.size()/16 blocks and powers holds H^1 .. H^m (16 bytes
// each, H^1 first). Linear in the powers, so it runs on a share component
// of the powers as well as on clear values.
void GhashWithPowers(absl::Span<const uint8_t> x, const uint8_t* powers,
                     uint8_t* out);

// Plain GHASH by Horner's rule (tests, dealer checks).
Block Ghash(const Block& h, absl::Span<const uint8_t> x);

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_GF128_H_
