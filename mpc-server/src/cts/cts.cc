#include "cts/cts.h"

#include <vector>

namespace kmpc::cts {
namespace {

Bits Slice(const Bits& b, size_t from_byte, size_t bytes) {
  return Bits(b.begin() + 8 * from_byte, b.begin() + 8 * (from_byte + bytes));
}

void Append(Bits& out, const Bits& b) { out.insert(out.end(), b.begin(), b.end()); }

// Blocks of n bytes: count, and the bytes of the last one (1..16).
size_t BlockCount(size_t n) { return (n + kBlock - 1) / kBlock; }
size_t LastBytes(size_t n) { return n - kBlock * (BlockCount(n) - 1); }

}  // namespace

UsageKeys UsageKeyInputs(Circuit& c, int nr) {
  UsageKeys k;
  k.ke.nr = nr;
  k.ke.bits = c.Inputs(128 * (nr + 1));
  k.ipad = StateFromBytes(c.Inputs(160));
  k.opad = StateFromBytes(c.Inputs(160));
  return k;
}

size_t UsageMaterialBytes(int nr) { return kBlock * (nr + 1) + 40; }

// C_i = E(P_i ^ C_{i-1}), C_0 = 0, the last block zero-padded; output C_1
// .. C_{n-2}, C_n, and the first |P_n| bytes of C_{n-1}.
Bits CtsEncrypt(Circuit& c, const RoundKeys& k, const Bits& plain) {
  const size_t n = plain.size() / 8, nb = BlockCount(n), m = LastBytes(n);
  std::vector<Bits> cb(nb);
  Bits prev(128, kZero);
  for (size_t i = 0; i < nb; ++i) {
    Bits p = Slice(plain, kBlock * i, i + 1 < nb ? kBlock : m);
    p.resize(128, kZero);
    cb[i] = AesEncryptBlock(c, k, c.Xor(p, prev));
    prev = cb[i];
  }
  if (nb == 1) return cb[0];
  Bits out;
  for (size_t i = 0; i + 2 < nb; ++i) Append(out, cb[i]);
  Append(out, cb[nb - 1]);
  Append(out, Slice(cb[nb - 2], 0, m));
  return out;
}

// With X = the second-to-last ciphertext block (C_n) and Y = the last
// (the first m bytes of C_{n-1}): D(X) = (P_n || 0) ^ C_{n-1}, so C_{n-1}
// = Y || D(X)[m..16) and P_n = D(X)[0..m) ^ Y; the other blocks are CBC.
Bits CtsDecrypt(Circuit& c, const RoundKeys& k, const Bits& cipher) {
  const size_t n = cipher.size() / 8, nb = BlockCount(n), m = LastBytes(n);
  if (nb == 1) return AesDecryptBlock(c, k, cipher);
  std::vector<Bits> cb(nb);  // C_1 .. C_n in CBC order
  for (size_t i = 0; i + 2 < nb; ++i) cb[i] = Slice(cipher, kBlock * i, kBlock);
  cb[nb - 1] = Slice(cipher, kBlock * (nb - 2), kBlock);
  const Bits dx = AesDecryptBlock(c, k, cb[nb - 1]);
  const Bits y = Slice(cipher, kBlock * (nb - 1), m);
  cb[nb - 2] = y;
  Append(cb[nb - 2], Slice(dx, m, kBlock - m));
  Bits out;
  for (size_t i = 0; i + 1 < nb; ++i) {
    const Bits prev = i == 0 ? Bits(128, kZero) : cb[i - 1];
    Append(out, c.Xor(AesDecryptBlock(c, k, cb[i]), prev));
  }
  Append(out, c.Xor(Slice(dx, 0, m), y));
  return out;
}

Bits HmacSha1_96(Circuit& c, const UsageKeys& k, const Bits& msg) {
  return Slice(HmacSha1(c, k.ipad, k.opad, msg), 0, kTagBytes);
}

Bits Rfc3962Encrypt(Circuit& c, const UsageKeys& k, const Bits& conf_plain) {
  Bits out = CtsEncrypt(c, k.ke, conf_plain);
  Append(out, HmacSha1_96(c, k, conf_plain));
  return out;
}

Decrypted Rfc3962Decrypt(Circuit& c, const UsageKeys& k, const Bits& cipher_tag) {
  const size_t n = cipher_tag.size() / 8 - kTagBytes;
  Decrypted d;
  d.conf_plain = CtsDecrypt(c, k.ke, Slice(cipher_tag, 0, n));
  Bits diff = c.Xor(HmacSha1_96(c, k, d.conf_plain), Slice(cipher_tag, n, kTagBytes));
  while (diff.size() > 1) {  // balanced OR tree
    Bits next;
    for (size_t i = 0; i + 1 < diff.size(); i += 2) next.push_back(c.Or(diff[i], diff[i + 1]));
    if (diff.size() % 2) next.push_back(diff.back());
    diff = next;
  }
  d.mismatch = diff[0];
  return d;
}

namespace {

absl::Status CheckShape(int nr, size_t n) {
  if (nr != 10 && nr != 14) return absl::InvalidArgumentError("cts: nr must be 10 or 14");
  if (n < kBlock || n > kMaxBytes) {
    return absl::InvalidArgumentError("cts: confounder || plaintext must be 16 to 65536 bytes");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Program> EncryptProgram(int nr, size_t n) {
  if (absl::Status st = CheckShape(nr, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  c.Output(Rfc3962Encrypt(c, k, c.Inputs(8 * n)));
  return c.Compile();
}

absl::StatusOr<Program> DecryptProgram(int nr, size_t n) {
  if (absl::Status st = CheckShape(nr, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  const Decrypted d = Rfc3962Decrypt(c, k, c.Inputs(8 * (n + kTagBytes)));
  c.Output(d.conf_plain);
  c.Output(d.mismatch);
  for (int j = 1; j < 8; ++j) c.Output(kZero);
  return c.Compile();
}

absl::StatusOr<Program> ChecksumProgram(size_t n) {
  if (n > kMaxBytes) return absl::InvalidArgumentError("cts: checksum data over 64 KiB");
  Circuit c;
  UsageKeys k;
  k.ipad = StateFromBytes(c.Inputs(160));
  k.opad = StateFromBytes(c.Inputs(160));
  c.Output(HmacSha1_96(c, k, c.Inputs(8 * n)));
  return c.Compile();
}

absl::StatusOr<Program> PrfProgram(int nr) {
  if (nr != 10 && nr != 14) return absl::InvalidArgumentError("cts: nr must be 10 or 14");
  Circuit c;
  RoundKeys k;
  k.nr = nr;
  k.bits = c.Inputs(128 * (nr + 1));
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  return c.Compile();
}

}  // namespace kmpc::cts
