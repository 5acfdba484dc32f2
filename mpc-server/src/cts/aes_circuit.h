// AES (FIPS-197) encryption and decryption (the inverse cipher, section
// 5.3) as circuits over cts::Circuit, with dealt round keys (the same
// expanded keys for both directions, aes/key_expansion.h). Generic and
// straightforward, for the chained and stolen blocks of CBC-CTS whose
// inputs are shared (the tuned kernel of aes/ takes public inputs).
//
// A block is 16 bytes in FIPS-197 input order (byte p = row + 4 * column),
// as Bits (128 wires, circuit.h). The S-box is Boyar and Peralta's AND
// depth 4 circuit ("A depth-16 circuit for the AES S-box", SEC 2012; 34
// ANDs), the one of aes/circuit.h's kDepth4; the inverse S-box is the same
// circuit between two inverse affine maps, InvS(x) = A^-1(S(A^-1(x))): S(z)
// = A(z^-1) with A the affine map of FIPS-197 5.1.1, so A^-1(S(z)) = z^-1,
// and InvS(x) = (A^-1(x))^-1 (FIPS-197 5.3.2). AND depth 4 per round.
// Where a block's depth is not a program's (CBC encryption: a SHA-1
// compression, ~487 rounds, covers 4 blocks, which take 6 x 4 x nr), the
// encryption may take their 32-AND circuit instead (SEA 2010: the same
// linear layers, an inversion in GF(2^4) of 5 ANDs and depth 4 instead of
// 7 and 2): AND depth 6 per round, 6% fewer ANDs.
#ifndef KMPC_CTS_AES_CIRCUIT_H_
#define KMPC_CTS_AES_CIRCUIT_H_

#include "cts/circuit.h"

namespace kmpc::cts {

// Round keys (nr + 1) * 16 bytes as Bits, round 0 first.
struct RoundKeys {
  Bits bits;
  int nr = 0;  // 10 or 14
  Bits Round(int r) const {
    return Bits(bits.begin() + 128 * r, bits.begin() + 128 * (r + 1));
  }
};

// Which S-box circuit: 34 ANDs in depth 4, or 32 in depth 6.
enum class Sbox { kDepth4, kFewerAnds };

// The S-box and its inverse on one byte (8 wires, bit j = 2^j).
Bits SubByte(Circuit& c, const Bits& x, Sbox v = Sbox::kDepth4);
Bits InvSubByte(Circuit& c, const Bits& x);

Bits AesEncryptBlock(Circuit& c, const RoundKeys& k, const Bits& in,
                     Sbox v = Sbox::kDepth4);

// FIPS-197 section 5.2 key expansion of a key that is itself a circuit
// value (16 or 32 bytes: nr 10 or 14): the dealer expands the keys it
// deals in the clear (aes/key_expansion.h), a key derived on shares (the
// FAST keys, cts.h Cf2*Program) is expanded here. SubWord's S-boxes are
// the only ANDs: 40 S-boxes for AES-128, 52 for AES-256, in a chain of
// 10 resp. 13 (AND depth 40 resp. 52).
RoundKeys ExpandKeyCircuit(Circuit& c, const Bits& key);
Bits AesDecryptBlock(Circuit& c, const RoundKeys& k, const Bits& in);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_AES_CIRCUIT_H_
