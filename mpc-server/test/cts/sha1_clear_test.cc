// The dealer's clear SHA-1 compression (cts/sha1_clear.h) against OpenSSL
// through FIPS 180-4's padding, on messages of one to four blocks.
#include "cts/sha1_clear.h"

#include <gtest/gtest.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <vector>

namespace kmpc::cts {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes StateBytes(const std::array<uint32_t, 5>& h) {
  Bytes b;
  for (uint32_t x : h) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<uint8_t>(x >> (8 * k)));
  }
  return b;
}

// msg || 0x80 || zeros || its length in bits (64-bit big endian).
Bytes Padded(const Bytes& m) {
  Bytes p = m;
  p.push_back(0x80);
  while (p.size() % 64 != 56) p.push_back(0);
  const uint64_t bits = 8 * static_cast<uint64_t>(m.size());
  for (int k = 7; k >= 0; --k) p.push_back(static_cast<uint8_t>(bits >> (8 * k)));
  return p;
}

TEST(Sha1Clear, MatchesOpenssl) {
  for (size_t n : {0, 3, 55, 56, 64, 119, 200}) {
    Bytes m(n);
    if (n > 0) ASSERT_EQ(RAND_bytes(m.data(), static_cast<int>(n)), 1);
    const Bytes padded = Padded(m);
    std::array<uint32_t, 5> h = kSha1Iv;
    for (size_t off = 0; off < padded.size(); off += 64) Sha1CompressClear(h, &padded[off]);
    Bytes want(SHA_DIGEST_LENGTH);
    SHA1(m.data(), m.size(), want.data());
    EXPECT_EQ(StateBytes(h), want) << n;
  }
}

// FIPS 180-4's "abc" example, one block.
TEST(Sha1Clear, FipsAbc) {
  const Bytes padded = Padded({'a', 'b', 'c'});
  std::array<uint32_t, 5> h = kSha1Iv;
  Sha1CompressClear(h, padded.data());
  const std::array<uint32_t, 5> want = {0xa9993e36, 0x4706816a, 0xba3e2571, 0x7850c26c,
                                        0x9cd0d89d};
  EXPECT_EQ(h, want);
}

}  // namespace
}  // namespace kmpc::cts
