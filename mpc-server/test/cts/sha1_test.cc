// SHA-1 and HMAC-SHA1 as circuits, in the clear engine: FIPS 180-4
// examples, RFC 2202 test cases, OpenSSL on random messages and keys (a
// different key per lane), the prefix adder against integer addition; the
// compression's ANDs and AND depth, printed and bounded.
#include "cts/sha1.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cts/dealer.h"
#include "cts_testing.h"
#include "sha1_programs.h"

namespace kmpc::cts {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using testing::Bytes;

Bytes StateBytes(const std::array<uint32_t, 5>& h) {
  Bytes b;
  for (uint32_t x : h) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<uint8_t>(x >> (8 * k)));
  }
  return b;
}

// SHA-1 from the IV (dealt as an input, as an HMAC state is) over a
// message of n bytes: inputs state || message, output the digest.
Program DigestProgram(size_t n) {
  Circuit c;
  const Sha1State h = StateFromBytes(c.Inputs(160));
  c.Output(Sha1From(c, h, 0, c.Inputs(8 * n)));
  return c.Compile();
}

Bytes ClearDigest(const Bytes& msg) {
  const Bytes iv = StateBytes(kSha1Iv);
  Bytes in = iv;
  in.insert(in.end(), msg.begin(), msg.end());
  return testing::RunClear(DigestProgram(msg.size()), {in})[0];
}

TEST(Sha1, Fips180Examples) {
  EXPECT_EQ(ToHex(ClearDigest(Bytes{'a', 'b', 'c'})),
            "a9993e364706816aba3e25717850c26c9cd0d89d");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(ToHex(ClearDigest(Bytes(two.begin(), two.end()))),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(ToHex(ClearDigest(Bytes{})), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

// Many lanes, one length each round, random messages vs OpenSSL.
TEST(Sha1, CircuitMatchesOpensslAcrossLanes) {
  for (size_t n : {1, 55, 56, 64, 100, 128}) {
    const Program p = DigestProgram(n);
    std::vector<Bytes> lanes, msgs;
    for (int l = 0; l < 67; ++l) {
      msgs.push_back(Random(n));
      Bytes in = StateBytes(kSha1Iv);
      in.insert(in.end(), msgs.back().begin(), msgs.back().end());
      lanes.push_back(in);
    }
    const auto out = testing::RunClear(p, lanes);
    for (size_t l = 0; l < lanes.size(); ++l) {
      Bytes want(20);
      SHA1(msgs[l].data(), n, want.data());
      ASSERT_EQ(out[l], want) << n << " lane " << l;
    }
  }
}

// The prefix adder against integer addition; its AND depth with the
// generate layer.
TEST(Sha1, PrefixAdderAdds) {
  Circuit c;
  const Bits in = c.Inputs(64);
  Word a, b;
  for (int i = 0; i < 32; ++i) {
    a[i] = in[i];
    b[i] = in[32 + i];
  }
  const Word s = AddWords(c, a, b);
  c.Output(Bits(s.begin(), s.end()));
  const Program p = c.Compile();
  std::printf("Sklansky adder: %zu ANDs, AND depth %d\n", p.ands, p.depth);
  EXPECT_EQ(p.depth, 6);
  std::vector<Bytes> lanes;
  for (int l = 0; l < 200; ++l) lanes.push_back(Random(8));
  lanes[0] = Hex("ffffffff01000000");  // carries through every bit
  const auto got = testing::RunClear(p, lanes);
  for (size_t l = 0; l < lanes.size(); ++l) {
    uint32_t x, y, z;  // bit i of a word = bit i of its little-endian bytes
    std::memcpy(&x, lanes[l].data(), 4);
    std::memcpy(&y, lanes[l].data() + 4, 4);
    std::memcpy(&z, got[l].data(), 4);
    ASSERT_EQ(z, x + y) << l;
  }
}

// One compression from a shared state over a shared block: the figures.
TEST(Sha1, CompressionFigures) {
  const Program p = testing::Sha1CompressionProgram();
  std::printf("SHA-1 compression: %zu ANDs, %zu XORs, AND depth %d, %zu slots\n", p.ands,
              p.xors, p.depth, p.slots);
  testing::ExpectCounted(p);  // what the clear engine runs
  // The design note's figures (standard-enctypes.md): ~490 layers (not
  // ~2,200 as with ripple-carry adders), ~21.5k ANDs.
  EXPECT_LE(p.depth, 500);
  EXPECT_GE(p.depth, 400);
  EXPECT_LE(p.ands, 23000u);
  // Known answer: the "abc" block from the IV.
  Bytes in = StateBytes(kSha1Iv);
  Bytes block = {'a', 'b', 'c', 0x80};
  block.resize(64, 0);
  block[63] = 24;
  in.insert(in.end(), block.begin(), block.end());
  EXPECT_EQ(ToHex(testing::RunClear(p, {in})[0]), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

// HMAC from the dealt states (dealer.h HmacStates): inputs ipad state ||
// opad state || message.
Program HmacProgram(size_t n) {
  Circuit c;
  const Sha1State ip = StateFromBytes(c.Inputs(160));
  const Sha1State op = StateFromBytes(c.Inputs(160));
  c.Output(HmacSha1(c, ip, op, c.Inputs(8 * n)));
  return c.Compile();
}

Bytes HmacLane(const Bytes& key, const Bytes& msg) {
  Bytes in(40);
  EXPECT_TRUE(HmacStates(key, in.data(), in.data() + 20).ok());
  in.insert(in.end(), msg.begin(), msg.end());
  return in;
}

TEST(HmacSha1, Rfc2202) {
  const std::string m1 = "Hi There", m2 = "what do ya want for nothing?";
  const Bytes k1(20, 0x0b), k2 = {'J', 'e', 'f', 'e'};
  EXPECT_EQ(ToHex(testing::RunClear(HmacProgram(m1.size()),
                                    {HmacLane(k1, Bytes(m1.begin(), m1.end()))})[0]),
            "b617318655057264e28bc0b6fb378c8ef146be00");
  EXPECT_EQ(ToHex(testing::RunClear(HmacProgram(m2.size()),
                                    {HmacLane(k2, Bytes(m2.begin(), m2.end()))})[0]),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
  // Test case 3: 0xaa * 20, 0xdd * 50.
  EXPECT_EQ(ToHex(testing::RunClear(HmacProgram(50), {HmacLane(Bytes(20, 0xaa), Bytes(50, 0xdd))})[0]),
            "125d7342b9ac11cd91a39af48aa17b4f63f175d3");
}

TEST(HmacSha1, MatchesOpensslWithAKeyPerLane) {
  for (size_t n : {16, 56, 72, 300}) {
    const Program p = HmacProgram(n);
    std::vector<Bytes> lanes, keys, msgs;
    for (int l = 0; l < 65; ++l) {
      keys.push_back(Random(l % 2 ? 32 : 16));
      msgs.push_back(Random(n));
      lanes.push_back(HmacLane(keys.back(), msgs.back()));
    }
    const auto out = testing::RunClear(p, lanes);
    for (size_t l = 0; l < lanes.size(); ++l) {
      ASSERT_EQ(out[l], testing::RefHmac(keys[l], msgs[l])) << n << " lane " << l;
    }
  }
}

}  // namespace
}  // namespace kmpc::cts
