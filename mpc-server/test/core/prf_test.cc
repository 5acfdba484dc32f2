// protocol/prf.h: F(k, ctr) is AES-128 of the counter block (64-bit
// little-endian block index in bytes 0..7, zero in bytes 8..15), the same
// on the AES-NI and the VAES path, for every length and start (the 8- and
// 16-block loops and their tails) and across the 32-bit counter boundary.
// Reference: OpenSSL's AES-128-ECB, and the FIPS-197 key schedule.
#include "protocol/prf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_util.h"

namespace kmpc::protocol {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using Bytes = std::vector<uint8_t>;

// AES-128_key(ctr) || AES-128_key(ctr + 1) || ... from OpenSSL.
Bytes Reference(const Bytes& key, uint64_t ctr, size_t nblocks) {
  Bytes out;
  for (size_t i = 0; i < nblocks; ++i) {
    uint8_t block[16] = {0};
    const uint64_t c = ctr + i;
    for (int k = 0; k < 8; ++k) block[k] = static_cast<uint8_t>(c >> (8 * k));
    const auto enc = OpensslAes(key, block);
    out.insert(out.end(), enc.begin(), enc.end());
  }
  return out;
}

Bytes Fill(const Prf& prf, uint64_t ctr, size_t nblocks) {
  Bytes out(16 * nblocks + 16, 0xa5);  // one guard block past the end
  prf.Fill(ctr, nblocks, out.data());
  for (size_t k = 16 * nblocks; k < out.size(); ++k)
    EXPECT_EQ(out[k], 0xa5) << "Fill wrote past block " << nblocks;
  out.resize(16 * nblocks);
  return out;
}

// Restores the dispatcher's choice when a test ends.
class ForceAesNi {
 public:
  explicit ForceAesNi(bool force) : previous_(PrfForceAesNi(force)) {}
  ~ForceAesNi() { PrfForceAesNi(previous_); }

 private:
  bool previous_;
};

TEST(Prf, KnownAnswerZeroKeyZeroCounter) {
  // AES-128 of the zero block under the zero key (FIPS-197 test data as
  // published in NIST's AESAVS, GFSbox/VarKey KAT: 66e94bd4...).
  const Bytes key(16, 0);
  for (bool force : {true, false}) {
    ForceAesNi f(force);
    const Prf prf(key.data());
    EXPECT_EQ(ToHex(Fill(prf, 0, 1)), "66e94bd4ef8a2c3b884cfa59ca342b2e")
        << PrfImplementation();
  }
}

TEST(Prf, RoundKeysAreTheFips197Schedule) {
  // FIPS-197 Appendix A.1: key 2b7e1516..., round 10 key d014f9a8...
  const Bytes key = Hex("2b7e151628aed2a6abf7158809cf4f3c");
  const Prf prf(key.data());
  EXPECT_EQ(ToHex(absl::MakeConstSpan(prf.round_keys(), 16)), ToHex(key));
  EXPECT_EQ(ToHex(absl::MakeConstSpan(prf.round_keys() + 16, 16)),
            "a0fafe1788542cb123a339392a6c7605");
  EXPECT_EQ(ToHex(absl::MakeConstSpan(prf.round_keys() + 160, 16)),
            "d014f9a8c9ee2589e13f0cc8b6630ca6");
}

TEST(Prf, BothPathsMatchOpensslForEveryLengthAndStart) {
  const Bytes key = Random(16);
  const Prf prf(key.data());
  // 0..40 blocks cover the 4-, 8- and 16-block loops and every tail; the
  // starts cover a carry out of byte 0 and out of the low 32 bits.
  for (uint64_t ctr : {uint64_t{0}, uint64_t{250}, uint64_t{0xfffffff0},
                       uint64_t{0x0123456789abcdef}, ~uint64_t{0} - 20}) {
    for (size_t n = 0; n <= 40; ++n) {
      const Bytes want = Reference(key, ctr, n);
      for (bool force : {true, false}) {
        ForceAesNi f(force);
        EXPECT_EQ(Fill(prf, ctr, n), want)
            << PrfImplementation() << " ctr " << ctr << " n " << n;
      }
    }
  }
}

TEST(Prf, LongFillMatchesOpenssl) {
  const Bytes key = Random(16);
  const Prf prf(key.data());
  const Bytes want = Reference(key, 7, 1000);
  for (bool force : {true, false}) {
    ForceAesNi f(force);
    EXPECT_EQ(Fill(prf, 7, 1000), want) << PrfImplementation();
  }
}

TEST(Prf, FillXor2IsTheXorOfTwoFills) {
  const Bytes ka = Random(16), kb = Random(16);
  const Prf a(ka.data()), b(kb.data());
  for (bool force : {true, false}) {
    ForceAesNi f(force);
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5},
                     size_t{17}, size_t{33}, size_t{129}}) {
      Bytes want = Reference(ka, 99, n);
      const Bytes other = Reference(kb, 99, n);
      for (size_t k = 0; k < want.size(); ++k) want[k] ^= other[k];
      Bytes got(16 * n + 16, 0x5a);
      Prf::FillXor2(a, b, 99, n, got.data());
      for (size_t k = 16 * n; k < got.size(); ++k) EXPECT_EQ(got[k], 0x5a);
      got.resize(16 * n);
      EXPECT_EQ(got, want) << PrfImplementation() << " n " << n;
    }
  }
  // The same key twice: the zero-share of a party with itself is zero.
  Bytes zero(16 * 9, 1);
  Prf::FillXor2(a, a, 5, 9, zero.data());
  EXPECT_EQ(zero, Bytes(16 * 9, 0));
}

TEST(Prf, IsAes128CtrBothImplementations) {
  const auto key = Random(16);
  for (bool aesni : {false, true}) {
    const bool prev = PrfForceAesNi(aesni);
    Prf f(key.data());
    for (size_t n : {1, 3, 4, 5, 8, 15, 16, 17, 40, 73}) {
      std::vector<uint8_t> out(16 * n);
      const uint64_t ctr = 0xfffffffffffffff0ull + n;  // crosses 2^64 wrap
      f.Fill(ctr, n, out.data());
      for (size_t i = 0; i < n; ++i) {
        uint8_t block[16] = {0};
        const uint64_t c = ctr + i;
        std::memcpy(block, &c, 8);  // little-endian counter, bytes 8..15 zero
        ASSERT_EQ(ToHex(absl::MakeConstSpan(&out[16 * i], 16)),
                  ToHex(OpensslAes(key, block)))
            << PrfImplementation() << " n=" << n << " i=" << i;
      }
      // FillXor2 = Fill(a) ^ Fill(b).
      const auto key2 = Random(16);
      Prf g(key2.data());
      std::vector<uint8_t> x(16 * n), y(16 * n), z(16 * n);
      f.Fill(ctr, n, x.data());
      g.Fill(ctr, n, y.data());
      Prf::FillXor2(f, g, ctr, n, z.data());
      for (size_t k = 0; k < z.size(); ++k) ASSERT_EQ(z[k], x[k] ^ y[k]);
    }
    PrfForceAesNi(prev);
  }
}

TEST(Prf, DifferentKeysDifferentStreams) {
  const Bytes k1 = Random(16);
  Bytes k2 = k1;
  k2[15] ^= 1;
  const Prf a(k1.data()), b(k2.data());
  EXPECT_NE(Fill(a, 0, 4), Fill(b, 0, 4));
  EXPECT_NE(Fill(a, 0, 4), Fill(a, 4, 4));
}

}  // namespace
}  // namespace kmpc::protocol
