// A SHA-1 compression as a program of its own, for the tests and figures
// that measure one: inputs a chaining state (20 bytes, the dealt form) ||
// a 64-byte block, output the new state (20 bytes); its adder; and an
// AES-256 block (inputs the 15 round keys || the block).
#ifndef KMPC_TEST_CTS_SHA1_PROGRAMS_H_
#define KMPC_TEST_CTS_SHA1_PROGRAMS_H_

#include "cts/aes_circuit.h"
#include "cts/circuit.h"
#include "cts/sha1.h"

namespace kmpc::cts::testing {

inline Program Sha1CompressionProgram() {
  Circuit c;
  const Sha1State h = StateFromBytes(c.Inputs(160));
  const Sha1State out = Sha1Compress(c, h, c.Inputs(512));
  Bits bits;
  for (const Word& w : out) AppendBigEndian(w, bits);
  c.Output(bits);
  return c.Compile();
}

// SHA-1's 32-bit adder alone (cts/sha1.h AddWords): inputs a || b, output
// the sum.
inline Program AdderProgram() {
  Circuit c;
  Word a, b;
  for (auto& w : a) w = c.Input();
  for (auto& w : b) w = c.Input();
  const Word s = AddWords(c, a, b);
  c.Output(Bits(s.begin(), s.end()));
  return c.Compile();
}

inline Program Aes256BlockProgram() {
  Circuit c;
  RoundKeys k;
  k.nr = 14;
  k.bits = c.Inputs(128 * 15);
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  return c.Compile();
}

}  // namespace kmpc::cts::testing

#endif  // KMPC_TEST_CTS_SHA1_PROGRAMS_H_
