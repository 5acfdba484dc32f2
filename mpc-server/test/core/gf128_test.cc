// GF(2^128): PCLMUL vs the bit-by-bit reference, algebraic laws, and GHASH
// against OpenSSL's AES-GCM (tag = GHASH_H(A, C) ^ E_K(J0)).
#include "protocol/gf128.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstring>

#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;

Block RandBlock() {
  Block b;
  auto v = Random(16);
  std::memcpy(b.data(), v.data(), 16);
  return b;
}

TEST(Gf128, MatchesReference) {
  for (int i = 0; i < 2000; ++i) {
    const Block a = RandBlock(), b = RandBlock();
    ASSERT_EQ(GfMul(a, b), GfMulReference(a, b));
  }
}

// Known answers for the fused local term of a shared product, against the
// bit-by-bit reference (and the zero-share-like t it XORs into).
TEST(Gf128, CrossTermsMatchReference) {
  for (size_t n : {1u, 2u, 7u, 64u}) {
    std::vector<uint8_t> x0 = Random(16 * n), x1 = Random(16 * n),
                         y0 = Random(16 * n), y1 = Random(16 * n),
                         t = Random(16 * n);
    std::vector<uint8_t> want = t;
    for (size_t j = 0; j < n; ++j) {
      Block a0, a1, b0, b1, ys;
      std::memcpy(a0.data(), &x0[16 * j], 16);
      std::memcpy(a1.data(), &x1[16 * j], 16);
      std::memcpy(b0.data(), &y0[16 * j], 16);
      std::memcpy(b1.data(), &y1[16 * j], 16);
      for (int k = 0; k < 16; ++k) ys[k] = b0[k] ^ b1[k];
      const Block p = GfMulReference(a0, ys), q = GfMulReference(a1, b0);
      for (int k = 0; k < 16; ++k) want[16 * j + k] ^= p[k] ^ q[k];
    }
    GfCrossTerms(x0.data(), x1.data(), y0.data(), y1.data(), t.data(), n);
    ASSERT_EQ(t, want) << n;
  }
}

TEST(Gf128, OneIsNeutralAndProductsCommute) {
  Block one{};
  one[0] = 0x80;  // x^0 in GCM bit order
  for (int i = 0; i < 100; ++i) {
    const Block a = RandBlock(), b = RandBlock(), c = RandBlock();
    EXPECT_EQ(GfMul(a, one), a);
    EXPECT_EQ(GfMul(a, b), GfMul(b, a));
    EXPECT_EQ(GfMul(GfMul(a, b), c), GfMul(a, GfMul(b, c)));
  }
  const Block x = RandBlock();
  EXPECT_NE(GfMul(x, x), x);  // not trivially the identity
}

TEST(Gf128, GhashMatchesOpensslGcm) {
  for (size_t clen : {0, 1, 15, 16, 17, 64, 100, 1000}) {
    for (size_t alen : {0, 4, 5, 20}) {
      const auto key = Random(16), iv = Random(12), a = Random(alen),
                 p = Random(clen);
      std::vector<uint8_t> c(clen + 16);
      uint8_t tag[16];
      EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
      int len = 0;
      ASSERT_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), nullptr, key.data(), iv.data()), 1);
      if (alen) ASSERT_EQ(EVP_EncryptUpdate(ctx, nullptr, &len, a.data(), (int)alen), 1);
      ASSERT_EQ(EVP_EncryptUpdate(ctx, c.data(), &len, p.data(), (int)clen), 1);
      ASSERT_EQ(EVP_EncryptFinal_ex(ctx, c.data() + len, &len), 1);
      ASSERT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag), 1);
      EVP_CIPHER_CTX_free(ctx);
      c.resize(clen);
      const uint8_t zero[16] = {0};
      const auto h_arr = OpensslAes(key, zero);
      Block h;
      std::memcpy(h.data(), h_arr.data(), 16);
      uint8_t j0[16] = {0};
      std::memcpy(j0, iv.data(), 12);
      j0[15] = 1;
      const auto ej0 = OpensslAes(key, j0);
      const std::vector<uint8_t> x = GhashInput(a, c);
      ASSERT_EQ(x.size() / 16, GhashBlocks(alen, clen));
      Block s = Ghash(h, x);
      // And with precomputed powers.
      const size_t m = x.size() / 16;
      std::vector<uint8_t> pw(16 * m);
      std::memcpy(pw.data(), h.data(), 16);
      for (size_t i = 1; i < m; ++i) GfMul(&pw[16 * (i - 1)], h.data(), &pw[16 * i]);
      Block s2;
      GhashWithPowers(x, pw.data(), s2.data());
      EXPECT_EQ(s, s2);
      for (int k = 0; k < 16; ++k) s[k] ^= ej0[k];
      EXPECT_EQ(0, std::memcmp(s.data(), tag, 16)) << "alen " << alen << " clen " << clen;
    }
  }
}

}  // namespace
}  // namespace kmpc::protocol
