// The AES variant of an MPC key inside the servers and the admin tools:
// the share store persists it (one byte of a key record), the engine sizes
// key schedules by it, kmpc-admin and the key dealer deal keys of it. It is
// the one such type on this side of the wire; engine.h converts it to and
// from the wire's kmpc.v1.Cipher (same values, asserted there) and
// admin/cluster.h from krb5's aes*-ctr-mpc enctype numbers.
#ifndef KMPC_STORE_CIPHER_H_
#define KMPC_STORE_CIPHER_H_

#include <cstdint>

namespace kmpc {

// kAes128 / kAes256: aes128/aes256-ctr-mpc. kAes128Cts / kAes256Cts: the
// standard aes128/aes256-cts-hmac-sha1-96 (RFC 3962), numbered as their
// krb5 enctypes; their records carry the dealt per-usage material too.
enum class Cipher : uint8_t { kAes128 = 1, kAes256 = 2, kAes128Cts = 17, kAes256Cts = 18 };

// What kind of key a record holds (kmpc.proto KeyKind, same values): a
// password-derived user's (the default, and every record stored before
// the kind was), a random service key, or a user's also used as a
// service. The store persists it with the key's metadata; the engine
// gates a user key's AS reply and the dealer leaves out the ticket and
// PAC material of a user key that is not also a service.
enum class KeyKind : uint8_t { kUser = 0, kService = 1, kUserService = 2 };
// KeyKind values are 0 .. kKeyKinds - 1; any other is refused.
inline constexpr int kKeyKinds = 3;

}  // namespace kmpc

#endif  // KMPC_STORE_CIPHER_H_
