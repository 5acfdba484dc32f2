// The standard enctypes aes128-cts-hmac-sha1-96 and aes256-cts-hmac-sha1-96
// (RFC 3962 with RFC 3961's simplified profile, section 5.3) as circuits
// over cts::Circuit, from the material the dealer computes per key and
// usage (dealer.h): Ke = DK(K, usage | 0xAA) as expanded round keys, and
// for Ki = DK(K, usage | 0x55) the two SHA-1 chaining states after (Ki ^
// ipad) and (Ki ^ opad).
//
//   encrypt(conf || P) = CTS(Ke, conf || P) || HMAC-SHA1-96(Ki, conf || P)
//
// CTS is CBC with ciphertext stealing, IV zero, the last two blocks always
// swapped (RFC 3962 section 5; "CS3"). Its encryption is sequential (one
// AES per block, in order); its decryption takes one AES layer, two when
// the last block is partial. The HMAC runs beside the cipher: the inner
// compressions over conf || P in order, then one outer compression.
#ifndef KMPC_CTS_CTS_H_
#define KMPC_CTS_CTS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "cts/aes_circuit.h"
#include "cts/circuit.h"
#include "cts/sha1.h"

namespace kmpc::cts {

inline constexpr size_t kBlock = 16;
inline constexpr size_t kTagBytes = 12;  // HMAC-SHA1-96 (RFC 3962 section 6)

// The dealt material of one key and usage as circuit inputs, in the byte
// order of dealer.h's UsageMaterial: round keys ((nr + 1) * 16 bytes),
// the ipad state (20 bytes: H0..H4 big-endian), the opad state.
struct UsageKeys {
  RoundKeys ke;
  Sha1State ipad, opad;
};
UsageKeys UsageKeyInputs(Circuit& c, int nr);
size_t UsageMaterialBytes(int nr);

// CBC-CTS with IV zero; at least one block (RFC 3962 section 5).
Bits CtsEncrypt(Circuit& c, const RoundKeys& k, const Bits& plain);
Bits CtsDecrypt(Circuit& c, const RoundKeys& k, const Bits& cipher);

// HMAC-SHA1-96: the first 12 bytes of the MAC.
Bits HmacSha1_96(Circuit& c, const UsageKeys& k, const Bits& msg);

// RFC 3961 section 5.3 encryption of conf || P (at least 16 bytes).
Bits Rfc3962Encrypt(Circuit& c, const UsageKeys& k, const Bits& conf_plain);

// Decryption of ciphertext || tag: conf || P and one wire, 1 iff the
// received tag differs from HMAC-SHA1-96(Ki, conf || P) (an OR tree over
// the 96 differences, AND depth 7).
struct Decrypted {
  Bits conf_plain;
  Wire mismatch;
};
Decrypted Rfc3962Decrypt(Circuit& c, const UsageKeys& k, const Bits& cipher_tag);

// Freshness of a decrypted PA-ENC-TS-ENC (RFC 4120 section 5.2.7.2; the
// FAST encrypted challenge is one too, RFC 6113 section 5.4.6), on
// shares: conf || P is the 16-byte confounder, then `30 LL A0 11 18 0F`
// (LL = n - 18), the KerberosTime's 15 characters YYYYMMDDHHMMSSZ (RFC
// 4120 section 5.2.3), then an optional [1] pausec. `window` is lo || hi,
// 14 ASCII digits each (the servers' now -/+ their skew, public, shared
// as (c, 0, 0)). The result is 0 iff the header bytes and 'Z' are those,
// the 14 characters are in '0' .. '?' (high nibble 3) and lo <= t <= hi
// compared on their low nibbles (exact for decimal digits, which are all
// a KerberosTime holds; a plaintext whose tag holds comes from a client
// that knows the key, never from the KDC): 1 otherwise, and for n < 37.
// About 225 ANDs: 112 for the two comparisons (a ripple borrow, one AND
// a bit, depth 56), 113 for the AND of the 114 checks.
inline constexpr size_t kTsDigits = 14;
inline constexpr size_t kWindowBytes = 2 * kTsDigits;
inline constexpr size_t kTsHeaderEnd = kBlock + 6;           // the first digit
inline constexpr size_t kTsEnd = kTsHeaderEnd + kTsDigits + 1;  // after 'Z'
Wire StaleTimestamp(Circuit& c, const Bits& conf_plain, const Bits& window);

// Whole programs for lanes of one shape (nr; n = |conf || P| bytes, n >=
// 16). Inputs per lane, in order: the usage's material
// (UsageMaterialBytes(nr) bytes, shared), then
//  - encryption: conf || P (n bytes, shared); outputs: the ciphertext and
//    tag (n + 12 bytes);
//  - decryption: ciphertext || tag (n + 12 bytes, dealt as shares), with
//    `window` then lo || hi (kWindowBytes, StaleTimestamp); outputs:
//    conf || P (n bytes), then one byte: bit 0 the tag mismatch, bit 1
//    StaleTimestamp (0 without `window`), the other bits zero.
// Refused: nr other than 10 or 14, n < 16 (RFC 3962 section 5 needs a
// whole block; the confounder alone is one), n over kMaxBytes.
inline constexpr size_t kMaxBytes = 1 << 16;
absl::StatusOr<Program> EncryptProgram(int nr, size_t n);
absl::StatusOr<Program> DecryptProgram(int nr, size_t n, bool window = false);

// Whether a splice of a message dealt as m bytes (its SHA-1 padding
// included: a multiple of 64 within kMaxBytes) whose 12-byte checksum goes
// at offset off fits inside P of a reply of n = |conf || P| bytes: the
// splice shape SpliceEncryptProgram takes (besides nr and n's own rule).
bool SpliceFits(size_t n, size_t m, size_t off);

// The PA-REQ-ENC-PA-REP splice (RFC 6806 section 11; kmpc.proto
// Job.splice_length): the encryption of an AS reply whose plaintext holds
// T = hmac-sha1-96-aes*(Kc, D), Kc the key's checksum key for usage 56 and
// D the AS-REQ, at P's bytes [off, off + 12). T is a password verifier, so
// it exists only as wires: the program XORs it into conf || P (where the
// KDC left zeros) and encrypts as EncryptProgram(nr, n) does. n = |conf ||
// P| as there; D is dealt already padded for the HMAC's inner hash
// (contract::SpliceDealtBytes: D || 0x80 || zeros || the bit length of 64
// + |D|), m bytes, a multiple of 64 (64 .. kMaxBytes), so one program
// serves every AS-REQ of the same SHA-1 block count (sha1.h
// HmacSha1Padded). off + 12 <= n - 16. Inputs per lane, in order: the
// reply usage's material (UsageMaterialBytes(nr)), the 40 bytes of the
// checksum's material (dealer.h DealChecksum(K, 56): the ipad state, the
// opad state), conf || P (n bytes, shared), D padded (m bytes, shared);
// outputs: the ciphertext and tag (n + 12 bytes), never T.
// The checksum's compressions depend on D and its material only, so the
// as-soon-as-possible schedule runs them beside the reply's CBC blocks and
// inner compressions before the splice: the depth is about the checksum's
// plus the reply's work from the spliced block on (cts-circuits.md).
absl::StatusOr<Program> SpliceEncryptProgram(int nr, size_t n, size_t m, size_t off);

// Length classes (cts-circuits.md, "Reply length classes"). A program
// serves every length of a class, so a realm's varied names and options
// compile a few programs, not one per length. An ENCRYPT's class is the
// lengths n = |conf || P| of one CBC block count and one SHA-1 block
// count of the HMAC's inner input (Ki ^ ipad) || conf || P with its
// padding (FIPS 180-4 section 5.1.1); a CHECKSUM's, the lengths of one
// such SHA-1 block count. ClassMax is the class's largest length: it
// names the class (the program key).
size_t HashBlocks(size_t n);  // SHA-1 blocks of the inner input after Ki ^ ipad
size_t EncryptClassMax(size_t n);
size_t ChecksumClassMax(size_t n);
// Where the padding of a length of n's class can start, and the lane's
// padding vector: zeros below n, then 0x80, zeros and the 64-bit
// big-endian bit length of 64 + n, over bytes [PaddingFrom(n), 64 *
// HashBlocks(n)). Public given n: each server fills it in itself.
size_t PaddingFrom(size_t n);
std::vector<uint8_t> PaddingBytes(size_t n);
// A splice's offsets in P fall in windows of 16, by the CBC block where
// the checksum ends (end = 16 + off + 12 in conf || P): SpliceWindowOffset
// is the window's last offset (the checksum ending a block: the program
// key), SpliceSelector the lane's one-hot selector (2 bytes, bit (end -
// 1) % 16: public, filled in by each server).
size_t SpliceWindowOffset(size_t off);
std::vector<uint8_t> SpliceSelector(size_t off);
// Whether a class program of largest length cm can hold a splice of an
// m-byte dealt message in the window of offset off (a SpliceWindowOffset).
bool SpliceClassFits(size_t cm, size_t m, size_t off);

// The class programs. Inputs per lane, in order: the material (as
// EncryptProgram's; a FAST key's as Cf2EncryptProgram's), [the splice's
// checksum material (40 bytes)], conf || P || zeros (64 * HashBlocks(n)
// bytes: the zeros past n filled in by each server, not dealt), the
// padding vector (PaddingBytes), [D padded (m bytes), the selector (2
// bytes)]. Outputs: every CBC block C_1 .. C_nb in chain order, then the
// 12-byte tag: 16 nb + 12 bytes. CutClassOutput makes RFC 3962's
// ciphertext of n bytes of it (C_1 .. C_{nb-2}, C_nb, the first r bytes of
// C_{nb-1}), a local permutation of the shares: the bytes it drops never
// leave the server. cm is the class's largest length (any length of it
// is accepted and names the same program); off a SpliceWindowOffset.
absl::StatusOr<Program> EncryptClassProgram(int nr, size_t cm);
absl::StatusOr<Program> SpliceEncryptClassProgram(int nr, size_t cm, size_t m, size_t off);
absl::StatusOr<Program> Cf2EncryptClassProgram(int nr_k, size_t keylen, uint32_t usage,
                                               size_t cm);
// A signed ticket's class and window (contract::CtsTicketClassMax,
// CtsTicketWindow): every n of one SHA-1 block count (TicketClassMax, the
// class's largest length: 64 HashBlocks(n) - 9; its CBC blocks past a
// lane's n are computed and cut away), and the kTicketWindow starts of T_s
// in one SHA-1 block of conf || P (TicketWindowOffset: the window's last
// offset in P), by a one-hot selector of 8 bytes (TicketSelector: bit
// (16 + off) % 64; public, filled in by each server).
inline constexpr size_t kTicketWindow = 64;
size_t TicketClassMax(size_t n);
size_t TicketWindowOffset(size_t off);
std::vector<uint8_t> TicketSelector(size_t off);
// A ticket to a principal whose key the cluster holds under aes*-cts,
// signed and encrypted in one program (exchange-plan.md, "Tickets to such
// a principal"). MIT's KDC (1.21, pac_sign.c sign_pac) signs a service
// ticket's PAC in this order: the ticket and full-PAC signatures under the
// krbtgt (independent of the server's key: Sign items before this
// program), the server signature T_s = hmac-sha1-96-aes*(Kc17, PAC with
// the server and KDC signatures zeroed), then the KDC signature over T_s's
// 12 bytes under the krbtgt, gmac-aes*-mpc (enctype.md "Keyed checksum"):
//
//   ctr0 || L ^ pad16(T_s) * H^2,  L = A' H^3 ^ lens H ^ AES_Kt(c0)
//
// where L is linear in the krbtgt's shared H^3, H and pad (computed by the
// servers without a ring round and input here as replicated shares), and
// pad16(T_s) * H^2 = XOR_i T_s[i] AND (H^2 x^i) over T_s's 96 bits (GCM's
// bit order, SP 800-38D 6.3): H^2 x^i is linear in H^2, so the product is
// one layer of 96 x 128 ANDs. T_s is spliced into conf || P at its
// offset's window (the 64 offsets that start in one SHA-1 block, by
// TicketSelector), the 32-byte KDC
// signature ctr0 || tag `gap` bytes after T_s's start (MIT's PAC holds the
// KDC signature's buffer right after the server signature's:
// contract::kTicketSignatureGap), then conf || P (TicketClassMax) is
// encrypted as EncryptClassProgram does. Neither signature is an output.
//
// Inputs per lane, in order: the ticket usage's material
// (UsageMaterialBytes(nr), usage 2), the 40 bytes of DealChecksum(K, 17),
// conf || P || zeros and the padding vector (as EncryptClassProgram's),
// the PAC padded for the HMAC's inner hash (m bytes, a multiple of 64:
// contract::SpliceDealtBytes), the selector (8 bytes, TicketSelector(off)),
// ctr0 (16 bytes, public), H^2 (16 bytes) and L (16 bytes) of the
// krbtgt, GCM's byte order. Outputs as EncryptClassProgram's. off is T_s's
// offset in P (any of its window: the window names the program).
inline constexpr size_t kKdcSignatureBytes = 32;  // gmac-aes*-mpc: ctr0 || tag
bool TicketClassFits(size_t cm, size_t m, size_t off, size_t gap);
absl::StatusOr<Program> TicketClassProgram(int nr, size_t cm, size_t m, size_t off, size_t gap);
// The product pad16(d) * h in GF(2^128) (GCM's bit order) of a shared
// block d whose first `bits` coefficients alone may be non-zero and a
// shared h: `bits` x 128 ANDs in one layer. Both in the circuit's byte
// order (a 16-byte string, bit i of the string byte i / 8, bit i % 8).
Bits GfMulCircuit(Circuit& c, const Bits& d, size_t bits, const Bits& h);

// Inputs: the 40 bytes of DealChecksum, D || zeros (64 * HashBlocks(n)),
// the padding vector; outputs the 12-byte checksum.
absl::StatusOr<Program> ChecksumClassProgram(size_t cm);
// A class program's output for a lane of length n (one share component):
// RFC 3962's C || T, n + 12 bytes. `out` holds the class's CBC blocks
// (at least ceil(n / 16) of them), then the 12-byte tag.
std::vector<uint8_t> CutClassOutput(size_t n, absl::Span<const uint8_t> out);

// The checksum hmac-sha1-96-aes* (RFC 3962 section 7) of n bytes: inputs
// the 40 bytes of dealer.h's DealChecksum, then the data (n bytes, shared
// or public); outputs the 12-byte checksum. n <= kMaxBytes.
absl::StatusOr<Program> ChecksumProgram(size_t n);

// RFC 3962 section 6's PRF on the dealt round keys of DK(K, "prf")
// (dealer.h DealPrf): inputs the round keys, then the public block
// truncate16(SHA-1(s)) the caller hashes in the clear; outputs the 16-byte
// PRF output.
absl::StatusOr<Program> PrfProgram(int nr);

// FAST (RFC 6113) keys on shares. KRB-FX-CF2(A, K, pepper_a, pepper_k) =
// PRF+(A, pepper_a) ^ PRF+(K, pepper_k) (section 5.1; random-to-key is the
// identity for AES, RFC 3962 section 6), in the enctype and length of A
// (krb5_c_fx_cf2_simple). A is a key the KDC holds (the armor key, the
// reply-strengthening key), so the KDC computes X = PRF+(A, pepper_a) and
// deals it as fresh shares; the servers add PRF+(K, pepper_k) from the
// dealt DealPrf(K) material (PRF(K, s) = AES(DK(K, "prf"),
// truncate16(SHA-1(s))), RFC 3962 section 6; PRF+(K, s) = PRF(K, 0x01 ||
// s) || PRF(K, 0x02 || s) ..., cut to A's key size), and derive the
// usage's Ke and Ki from the sum on shares. Neither half nor the key ever
// exists whole anywhere but at the client (PRF+(K, .) is an offline
// guessing verifier of the password).
//
// The long-term pepper of each FAST usage (the usage fixes it: a job
// cannot pick another):
//   54 KRB5_KEYUSAGE_ENC_CHALLENGE_CLIENT, 55 ..._KDC: "challengelongterm"
//      (section 5.4.6, encrypted challenge);
//   3  the AS reply under the strengthened reply key: "replykey" (5.4.3).
// Empty for every other usage.
std::string_view Cf2Pepper(uint32_t usage);

// PRF+(K, pepper) cut to `bytes` (<= 32), from K's DealPrf round keys.
Bits PrfPlus(Circuit& c, const RoundKeys& prf, std::string_view pepper, size_t bytes);
// RFC 3961 section 5.1 DK(key, constant) with AES (key 16 or 32 bytes:
// DR's blocks E(key, n-fold(constant)), E(key, that), ... cut to the key's
// size). key and the result are circuit values; constant is public.
Bits DeriveKeyCircuit(Circuit& c, const RoundKeys& key, size_t keylen,
                      absl::Span<const uint8_t> constant);
// The usage's material (what dealer.h DealUsage computes in the clear) from
// a key that is a circuit value: Ke = DK(key, u | 0xAA) expanded, and the
// chaining states after (Ki ^ ipad) and (Ki ^ opad), Ki = DK(key, u | 0x55).
UsageKeys UsageKeysCircuit(Circuit& c, const Bits& key, uint32_t usage);

// RFC 3962 encryption / decryption under CF2(A, K) for a FAST usage (a
// Cf2Pepper). nr_k: K's rounds (10, 14); keylen: A's key size (16, 32),
// the output key's. Inputs per lane, in order: K's DealPrf round keys
// ((nr_k + 1) * 16 bytes, shared), X = PRF+(A, pepper_a) (keylen bytes,
// shared), then what EncryptProgram / DecryptProgram take after the
// material; outputs as theirs.
absl::StatusOr<Program> Cf2EncryptProgram(int nr_k, size_t keylen, uint32_t usage, size_t n);
absl::StatusOr<Program> Cf2DecryptProgram(int nr_k, size_t keylen, uint32_t usage, size_t n,
                                          bool window = false);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_CTS_H_
