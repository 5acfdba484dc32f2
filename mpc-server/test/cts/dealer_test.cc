// The dealer's clear side: RFC 3961 n-fold (appendix A.1), RFC 3962
// string-to-key (appendix B), the HMAC states finishing to OpenSSL's
// HMAC-SHA1, and a usage's material laid out as cts::UsageKeyInputs reads
// it (round keys of DK(K, usage|0xAA), states of DK(K, usage|0x55)).
#include "cts/dealer.h"

#include <gtest/gtest.h>

#include <string>

#include "aes/key_expansion.h"
#include "cts/sha1_clear.h"
#include "cts_testing.h"

namespace kmpc::cts {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using testing::Bytes;

Bytes Str(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(Dealer, NFoldRfc3961AppendixA1) {
  struct {
    size_t bits;
    const char* in;
    const char* want;
  } cases[] = {
      {64, "012345", "be072631276b1955"},
      {56, "password", "78a07b6caf85fa"},
      {64, "Rough Consensus, and Running Code", "bb6ed30870b7f0e0"},
      {168, "password", "59e4a8ca7c0385c3c37b3f6d2000247cb6e6bd5b3e"},
      {192, "MASSACHVSETTS INSTITVTE OF TECHNOLOGY",
       "db3b0d8f0b061e603282b308a50841229ad798fab9540c1b"},
      {168, "Q", "518a54a215a8452a518a54a215a8452a518a54a215"},
      {168, "ba", "fb25d531ae8974499f52fd92ea9857c4ba24cf297e"},
      {128, "kerberos", "6b65726265726f737b9b5b2b93132b93"},
      {256, "kerberos", "6b65726265726f737b9b5b2b93132b935c9bdcdad95c9899c4cae4dee6d6cae4"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ToHex(NFold(Str(c.in), c.bits / 8)), c.want) << c.in << " " << c.bits;
  }
}

TEST(Dealer, StringToKeyRfc3962AppendixB) {
  const std::string salt = "ATHENA.MIT.EDUraeburn";
  EXPECT_EQ(ToHex(*StringToKey("password", salt, 1, 16)), "42263c6e89f4fc28b8df68ee09799f15");
  EXPECT_EQ(ToHex(*StringToKey("password", salt, 1, 32)),
            "fe697b52bc0d3ce14432ba036a92e65bbb52280990a2fa27883998d72af30161");
  EXPECT_EQ(ToHex(*StringToKey("password", salt, 1200, 16)), "4c01cd46d632d01e6dbe230a01ed642a");
  EXPECT_EQ(ToHex(*StringToKey("password", salt, 1200, 32)),
            "55a6ac740ad17b4846941051e1e8b0a7548d93b0ab30a8bc3ff16280382b8c2a");
  EXPECT_FALSE(StringToKey("password", salt, 1, 24).ok());
}

TEST(Dealer, RejectsBadKeys) {
  uint8_t ip[20], op[20];
  EXPECT_FALSE(HmacStates(Bytes(65, 1), ip, op).ok());
  EXPECT_FALSE(DeriveKey(Bytes(24, 1), Str("kerberos")).ok());
  EXPECT_FALSE(DealUsage(Bytes(8, 1), 1).ok());
}

// HMAC-SHA1 finished in the clear from the two states (inner: the
// message's compressions from the ipad state; outer: one from the opad
// state), as the circuit does on shares.
Bytes FinishHmac(const uint8_t* ip, const uint8_t* op, const Bytes& msg) {
  auto run = [](const uint8_t* st, const Bytes& m) {
    std::array<uint32_t, 5> h;
    for (int k = 0; k < 5; ++k) {
      h[k] = uint32_t{st[4 * k]} << 24 | uint32_t{st[4 * k + 1]} << 16 |
             uint32_t{st[4 * k + 2]} << 8 | st[4 * k + 3];
    }
    Bytes p = m;
    p.push_back(0x80);
    while (p.size() % 64 != 56) p.push_back(0);
    const uint64_t bits = 8 * (64 + m.size());
    for (int k = 7; k >= 0; --k) p.push_back(static_cast<uint8_t>(bits >> (8 * k)));
    for (size_t off = 0; off < p.size(); off += 64) Sha1CompressClear(h, &p[off]);
    Bytes out;
    for (uint32_t x : h) {
      for (int k = 3; k >= 0; --k) out.push_back(static_cast<uint8_t>(x >> (8 * k)));
    }
    return out;
  };
  return run(op, run(ip, msg));
}

TEST(Dealer, HmacStatesFinishToOpensslHmac) {
  for (size_t klen : {4, 16, 20, 32, 64}) {
    const Bytes key = Random(klen), msg = Random(100);
    uint8_t ip[20], op[20];
    ASSERT_TRUE(HmacStates(key, ip, op).ok());
    EXPECT_EQ(FinishHmac(ip, op, msg), testing::RefHmac(key, msg)) << klen;
  }
}

TEST(Dealer, UsageMaterialLayout) {
  for (size_t klen : {16, 32}) {
    const Bytes base = Random(klen);
    const uint32_t usage = 0x01020304;
    auto m = DealUsage(base, usage);
    ASSERT_TRUE(m.ok()) << m.status();
    const int nr = klen == 16 ? 10 : 14;
    EXPECT_EQ(m->nr, nr);
    ASSERT_EQ(m->bytes.size(), UsageMaterialBytes(nr));
    const Bytes ke = *DeriveKey(base, Bytes{1, 2, 3, 4, 0xAA});
    const Bytes ki = *DeriveKey(base, Bytes{1, 2, 3, 4, 0x55});
    EXPECT_EQ(ke.size(), klen);
    EXPECT_EQ(ki.size(), klen);
    EXPECT_NE(ke, ki);
    EXPECT_EQ(Bytes(m->bytes.begin(), m->bytes.begin() + 16 * (nr + 1)), *aes::ExpandKey(ke));
    const uint8_t* st = m->bytes.data() + 16 * (nr + 1);
    const Bytes msg = Random(37);
    EXPECT_EQ(FinishHmac(st, st + 20, msg), testing::RefHmac(ki, msg));
  }
}

TEST(Dealer, MaterialMoves) {
  UsageMaterial a = *DealUsage(Random(32), 1);
  UsageMaterial b = *DealUsage(Random(16), 2);
  const std::vector<uint8_t> copy = b.bytes;
  a = std::move(b);
  EXPECT_EQ(a.nr, 10);
  EXPECT_EQ(a.bytes, copy);
}

TEST(Dealer, ChecksumAndPrfMaterial) {
  for (size_t klen : {16, 32}) {
    const Bytes base = Random(klen);
    auto ck = DealChecksum(base, 0x0000000b);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_EQ(ck->bytes.size(), 40u);
    const Bytes kc = *DeriveKey(base, Bytes{0, 0, 0, 0x0b, 0x99});
    const Bytes msg = Random(50);
    EXPECT_EQ(FinishHmac(ck->bytes.data(), ck->bytes.data() + 20, msg), testing::RefHmac(kc, msg));
    auto prf = DealPrf(base);
    ASSERT_TRUE(prf.ok()) << prf.status();
    EXPECT_EQ(prf->nr, klen == 16 ? 10 : 14);
    EXPECT_EQ(prf->bytes, *aes::ExpandKey(*DeriveKey(base, Str("prf"))));
  }
}

}  // namespace
}  // namespace kmpc::cts
