#include "cts/dealer.h"

#include <openssl/evp.h>

#include <numeric>
#include <string>

#include "aes/key_expansion.h"
#include "cts/sha1_clear.h"
#include "share/replicated.h"

namespace kmpc::cts {
namespace {

constexpr size_t kBlock = 16;

// Bit p (0 = most significant bit of byte 0) of b.
int BitAt(absl::Span<const uint8_t> b, size_t p) { return (b[p / 8] >> (7 - p % 8)) & 1; }

// One AES block under key (OpenSSL, ECB).
absl::Status AesBlock(absl::Span<const uint8_t> key, const uint8_t* in, uint8_t* out) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return absl::InternalError("EVP_CIPHER_CTX_new");
  int len = 0;
  const bool ok =
      EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                         nullptr, key.data(), nullptr) == 1 &&
      EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 &&
      EVP_EncryptUpdate(ctx, out, &len, in, kBlock) == 1 && len == kBlock;
  EVP_CIPHER_CTX_free(ctx);
  return ok ? absl::OkStatus() : absl::InternalError("AES block");
}

}  // namespace

UsageMaterial::~UsageMaterial() { share::Wipe(bytes); }

UsageMaterial& UsageMaterial::operator=(UsageMaterial&& o) {
  if (this != &o) {
    share::Wipe(bytes);
    nr = o.nr;
    bytes = std::move(o.bytes);
  }
  return *this;
}

// The input repeated lcm(len, n) / len times, copy k rotated right by 13k
// bits, summed in n-byte slices with end-around carry (ones' complement).
std::vector<uint8_t> NFold(absl::Span<const uint8_t> in, size_t nbytes) {
  const size_t inlen = in.size(), bits = 8 * inlen;
  const size_t lcm = std::lcm(inlen, nbytes);
  std::vector<uint8_t> big(lcm, 0);
  for (size_t k = 0; k < lcm / inlen; ++k) {
    const size_t r = (13 * k) % bits;
    for (size_t p = 0; p < bits; ++p) {
      const int bit = BitAt(in, (p + bits - r) % bits);
      big[k * inlen + p / 8] |= static_cast<uint8_t>(bit << (7 - p % 8));
    }
  }
  std::vector<uint32_t> sum(nbytes, 0);
  for (size_t off = 0; off < lcm; off += nbytes) {
    for (size_t i = 0; i < nbytes; ++i) sum[i] += big[off + i];
  }
  // Propagate carries from the least significant byte, the carry out of
  // the top wrapping around, until none is left.
  for (bool carry = true; carry;) {
    carry = false;
    uint32_t c = 0;
    for (size_t i = nbytes; i-- > 0;) {
      sum[i] += c;
      c = sum[i] >> 8;
      sum[i] &= 0xff;
    }
    if (c != 0) {
      sum[nbytes - 1] += c;
      carry = true;
    }
  }
  std::vector<uint8_t> out(nbytes);
  for (size_t i = 0; i < nbytes; ++i) out[i] = static_cast<uint8_t>(sum[i]);
  return out;
}

absl::StatusOr<std::vector<uint8_t>> DeriveKey(absl::Span<const uint8_t> key,
                                               absl::Span<const uint8_t> constant) {
  if (key.size() != 16 && key.size() != 32) {
    return absl::InvalidArgumentError("DeriveKey: AES key must be 16 or 32 bytes");
  }
  std::vector<uint8_t> block = constant.size() == kBlock
                                   ? std::vector<uint8_t>(constant.begin(), constant.end())
                                   : NFold(constant, kBlock);
  std::vector<uint8_t> out;
  out.reserve(key.size() + kBlock);  // no reallocation: no unwiped copy
  while (out.size() < key.size()) {
    uint8_t next[kBlock];
    absl::Status st = AesBlock(key, block.data(), next);
    if (!st.ok()) {
      share::Wipe(next, sizeof next);
      share::Wipe(block);
      share::Wipe(out);
      return st;
    }
    block.assign(next, next + kBlock);
    out.insert(out.end(), next, next + kBlock);
    share::Wipe(next, sizeof next);
  }
  share::Wipe(block);
  out.resize(key.size());
  return out;
}

absl::StatusOr<std::vector<uint8_t>> StringToKey(std::string_view password,
                                                 std::string_view salt,
                                                 uint32_t iterations, size_t keylen) {
  if (keylen != 16 && keylen != 32) {
    return absl::InvalidArgumentError("StringToKey: key length must be 16 or 32");
  }
  std::vector<uint8_t> tkey(keylen);
  if (PKCS5_PBKDF2_HMAC_SHA1(password.data(), static_cast<int>(password.size()),
                             reinterpret_cast<const uint8_t*>(salt.data()),
                             static_cast<int>(salt.size()), static_cast<int>(iterations),
                             static_cast<int>(keylen), tkey.data()) != 1) {
    share::Wipe(tkey);
    return absl::InternalError("PBKDF2");
  }
  static constexpr uint8_t kKerberos[] = {'k', 'e', 'r', 'b', 'e', 'r', 'o', 's'};
  auto key = DeriveKey(tkey, kKerberos);
  share::Wipe(tkey);
  return key;
}

absl::Status HmacStates(absl::Span<const uint8_t> key, uint8_t ipad_state[20],
                        uint8_t opad_state[20]) {
  if (key.size() > 64) return absl::InvalidArgumentError("HmacStates: key over 64 bytes");
  uint8_t block[64];
  for (int pass = 0; pass < 2; ++pass) {
    const uint8_t pad = pass == 0 ? 0x36 : 0x5c;  // RFC 2104 ipad, opad
    for (size_t i = 0; i < 64; ++i) block[i] = (i < key.size() ? key[i] : 0) ^ pad;
    std::array<uint32_t, 5> h = kSha1Iv;
    Sha1CompressClear(h, block);
    uint8_t* out = pass == 0 ? ipad_state : opad_state;
    for (int k = 0; k < 5; ++k) {
      for (int b = 0; b < 4; ++b) out[4 * k + b] = static_cast<uint8_t>(h[k] >> (24 - 8 * b));
    }
    share::Wipe(h.data(), sizeof h);
  }
  share::Wipe(block, sizeof block);
  return absl::OkStatus();
}

absl::StatusOr<UsageMaterial> DealUsage(absl::Span<const uint8_t> base_key,
                                        uint32_t usage) {
  // RFC 3961 section 5.3: the usage number big-endian, then 0xAA (Ke) or
  // 0x55 (Ki).
  uint8_t constant[5] = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                         static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0xAA};
  auto ke = DeriveKey(base_key, constant);
  if (!ke.ok()) return ke.status();
  constant[4] = 0x55;
  auto ki = DeriveKey(base_key, constant);
  if (!ki.ok()) {
    share::Wipe(*ke);
    return ki.status();
  }
  auto rk = aes::ExpandKey(*ke);
  share::Wipe(*ke);
  if (!rk.ok()) {
    share::Wipe(*ki);
    return rk.status();
  }
  UsageMaterial m;
  m.nr = base_key.size() == 16 ? 10 : 14;
  m.bytes.reserve(rk->size() + 40);  // no reallocation: no unwiped copy
  m.bytes.assign(rk->begin(), rk->end());
  m.bytes.resize(rk->size() + 40);
  share::Wipe(*rk);
  absl::Status st =
      HmacStates(*ki, m.bytes.data() + m.bytes.size() - 40, m.bytes.data() + m.bytes.size() - 20);
  share::Wipe(*ki);
  if (!st.ok()) return st;
  return m;
}


absl::StatusOr<UsageMaterial> DealChecksum(absl::Span<const uint8_t> base_key,
                                           uint32_t usage) {
  const uint8_t constant[5] = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                               static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0x99};
  auto kc = DeriveKey(base_key, constant);
  if (!kc.ok()) return kc.status();
  UsageMaterial m;
  m.bytes.assign(40, 0);
  absl::Status st = HmacStates(*kc, m.bytes.data(), m.bytes.data() + 20);
  share::Wipe(*kc);
  if (!st.ok()) return st;
  return m;
}

absl::StatusOr<UsageMaterial> DealPrf(absl::Span<const uint8_t> base_key) {
  static constexpr uint8_t kPrf[] = {'p', 'r', 'f'};
  auto kp = DeriveKey(base_key, kPrf);
  if (!kp.ok()) return kp.status();
  auto rk = aes::ExpandKey(*kp);
  share::Wipe(*kp);
  if (!rk.ok()) return rk.status();
  UsageMaterial m;
  m.nr = base_key.size() == 16 ? 10 : 14;
  m.bytes = std::move(*rk);
  return m;
}

}  // namespace kmpc::cts
