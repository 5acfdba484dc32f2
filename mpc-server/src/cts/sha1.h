// SHA-1 (FIPS 180-4 section 6.1) as a circuit with a low AND depth, HMAC
// (RFC 2104) from dealt chaining states (the dealer computes them with
// the clear compression, cts/sha1_clear.h).
//
// Depth. Step t computes T = ROTL5(A) + S_t with S_t = f_t(B, C, D) + E +
// K_t + W_t. S_t depends on B = the previous A and older words only, so
// it is reduced to two words (carry-save form) while A is still being
// computed: E + W_t + K_t by one carry-save layer (K_t public), then f_t
// (one AND layer after B) into it by another. The path from A to the next
// A is one carry-save layer with ROTL5(A) and a 32-bit Sklansky prefix
// adder (Sklansky, "Conditional-sum addition logic", IRE Trans. 1960): 7
// AND layers a step for the top sum bits, fewer for the low ones (bit i's
// carry needs ceil(log2 i) prefix levels), which the as-soon-as-possible
// schedule (circuit.h) exploits across the rotations: 487 layers and
// 22,035 ANDs per compression (sha1_test prints them), against ~2,200
// layers with ripple-carry adders (design note standard-enctypes.md).
#ifndef KMPC_CTS_SHA1_H_
#define KMPC_CTS_SHA1_H_

#include <array>
#include <cstdint>

#include "absl/types/span.h"
#include "cts/circuit.h"
#include "cts/sha1_clear.h"

namespace kmpc::cts {

// A 32-bit word: w[i] is bit i (0 = least significant).
using Word = std::array<Wire, 32>;
// A SHA-1 chaining state H0..H4.
using Sha1State = std::array<Word, 5>;

// a + b mod 2^32 by a Sklansky prefix adder (AND depth 6).
Word AddWords(Circuit& c, const Word& a, const Word& b);
// The sum whose generate / propagate bits are g_i = a_i & b_i, p_i = a_i ^
// b_i for some a, b (given directly): sum_i = p_i ^ carry_i.
Word AddGenProp(Circuit& c, const Word& g, const Word& p);
Word ConstantWord(uint32_t v);

// The 32-bit big-endian word at bytes [4k, 4k + 4) of b.
Word BigEndianWord(const Bits& b, size_t k);
// Appends w as 4 big-endian bytes.
void AppendBigEndian(const Word& w, Bits& out);

// The SHA-1 compression function: h' = h + the 80 steps over block
// (64 bytes, 512 wires).
Sha1State Sha1Compress(Circuit& c, const Sha1State& h, const Bits& block);

// SHA-1 over a message from a chaining state that has already absorbed
// `prefix_bytes` bytes (a multiple of 64): the remaining compressions over
// msg and its padding (FIPS 180-4 section 5.1.1; the length is public).
// Returns the 20-byte digest.
Bits Sha1From(Circuit& c, const Sha1State& h, size_t prefix_bytes,
              const Bits& msg);

// HMAC-SHA1 (RFC 2104) of msg from the two dealt chaining states: inner
// from the state after (K ^ ipad), outer from the one after (K ^ opad).
// Returns the 20-byte MAC.
Bits HmacSha1(Circuit& c, const Sha1State& ipad_state,
              const Sha1State& opad_state, const Bits& msg);

// The same from a message dealt already padded: `padded` is msg || the
// inner hash's padding for 64 + |msg| bytes, a multiple of 64 bytes, so
// the inner hash is its compressions alone and the circuit depends on the
// block count, not on |msg|. Padding that is not SHA-1's gives another
// keyed function of the same key, no value of HMAC of a message the
// caller did not choose (only the outer hash's output leaves).
Bits HmacSha1Padded(Circuit& c, const Sha1State& ipad_state,
                    const Sha1State& opad_state, const Bits& padded);

// A chaining state from 20 big-endian bytes (the dealt form) and back.
Sha1State StateFromBytes(const Bits& b);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_SHA1_H_
