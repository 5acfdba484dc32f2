// CBC-CTS, the whole RFC 3962 encryption / decryption, its checksum and
// PRF as circuits: RFC 3962 appendix B's CTS vectors; OpenSSL (AES-CBC with the swap, HMAC
// under DK-derived keys) with a base key per lane, both key sizes, many
// lengths; the tag check; a batch of logins among three parties
// (semi-honest and malicious) reconstructing to the reference; an additive
// error on one AND caught by the check; the per-login figures.
#include "cts/cts.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>

#include "aes/key_expansion.h"
#include "cheat_ring.h"
#include "contract.h"
#include "cts/dealer.h"
#include "cts_testing.h"
#include "protocol/gf128.h"
#include "rep3_cluster.h"

namespace kmpc::cts {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using testing::Bytes;
using testing::Views;

// Raw CTS: inputs round keys || data; output CTS(data).
Program CtsProgram(int nr, size_t n, bool decrypt) {
  Circuit c;
  RoundKeys k;
  k.nr = nr;
  k.bits = c.Inputs(128 * (nr + 1));
  const Bits in = c.Inputs(8 * n);
  c.Output(decrypt ? CtsDecrypt(c, k, in) : CtsEncrypt(c, k, in));
  return c.Compile();
}

Bytes CtsLane(const Bytes& key, const Bytes& data) {
  Bytes in = *aes::ExpandKey(key);
  in.insert(in.end(), data.begin(), data.end());
  return in;
}

TEST(Cts, Rfc3962AppendixB) {
  const Bytes key = Hex("636869636b656e207465726979616b69");  // "chicken teriyaki"
  const std::string text = "I would like the General Gau's Chicken, please,";
  struct {
    size_t n;
    const char* out;
  } cases[] = {
      {17, "c6353568f2bf8cb4d8a580362da7ff7f97"},
      {31, "fc00783e0efdb2c1d445d4c8eff7ed2297687268d6ecccc0c07b25e25ecfe5"},
      {32, "39312523a78662d5be7fcbcc98ebf5a897687268d6ecccc0c07b25e25ecfe584"},
      {47,
       "97687268d6ecccc0c07b25e25ecfe584b3fffd940c16a18c1b5549d2f838029e"
       "39312523a78662d5be7fcbcc98ebf5"},
  };
  for (const auto& c : cases) {
    const Bytes in(text.begin(), text.begin() + c.n);
    EXPECT_EQ(ToHex(testing::RunClear(CtsProgram(10, c.n, false), {CtsLane(key, in)})[0]), c.out);
    EXPECT_EQ(testing::RunClear(CtsProgram(10, c.n, true), {CtsLane(key, Hex(c.out))})[0], in);
    EXPECT_EQ(ToHex(testing::RefCts(key, in)), c.out);  // the reference itself
  }
}

TEST(Cts, MatchesOpensslWithAKeyPerLane) {
  for (int nr : {10, 14}) {
    for (size_t n : {16, 17, 31, 32, 33, 44, 48, 64, 100}) {
      std::vector<Bytes> keys, data, enc_in, dec_in;
      for (int l = 0; l < 66; ++l) {
        keys.push_back(Random(nr == 10 ? 16 : 32));
        data.push_back(Random(n));
        enc_in.push_back(CtsLane(keys[l], data[l]));
        dec_in.push_back(CtsLane(keys[l], testing::RefCts(keys[l], data[l])));
      }
      const auto e = testing::RunClear(CtsProgram(nr, n, false), enc_in);
      const auto d = testing::RunClear(CtsProgram(nr, n, true), dec_in);
      for (size_t l = 0; l < keys.size(); ++l) {
        ASSERT_EQ(e[l], testing::RefCts(keys[l], data[l])) << nr << " " << n << " lane " << l;
        ASSERT_EQ(d[l], data[l]) << nr << " " << n << " lane " << l;
      }
    }
  }
}

// A login's lanes: base key, usage material, conf || P and its encryption.
struct Lane {
  Bytes base, material, conf_plain, cipher;
};

Lane MakeLane(size_t keylen, uint32_t usage, size_t n) {
  Lane l;
  l.base = Random(keylen);
  auto m = DealUsage(l.base, usage);
  EXPECT_TRUE(m.ok()) << m.status();
  l.material = m->bytes;
  l.conf_plain = Random(n);
  l.cipher = testing::RefEncrypt(l.base, usage, l.conf_plain);
  return l;
}

Bytes Cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Rfc3962, EncryptAndDecryptInTheClear) {
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    for (size_t n : {16, 44, 65, 300}) {
      const Program enc = *EncryptProgram(nr, n), dec = *DecryptProgram(nr, n);
      std::vector<Lane> lanes;
      std::vector<Bytes> enc_in, dec_in;
      for (int l = 0; l < 5; ++l) {
        lanes.push_back(MakeLane(keylen, 3, n));
        enc_in.push_back(Cat(lanes[l].material, lanes[l].conf_plain));
        Bytes ct = lanes[l].cipher;
        if (l == 1) ct[ct.size() - 1 - l] ^= 0x10;  // a wrong tag
        if (l == 2) ct[0] ^= 0x01;                  // a modified ciphertext
        dec_in.push_back(Cat(lanes[l].material, ct));
      }
      const auto e = testing::RunClear(enc, enc_in), d = testing::RunClear(dec, dec_in);
      for (size_t l = 0; l < lanes.size(); ++l) {
        ASSERT_EQ(e[l], lanes[l].cipher) << keylen << " " << n << " lane " << l;
        ASSERT_EQ(d[l].size(), n + 1);
        const bool tampered = l == 1 || l == 2;
        EXPECT_EQ(d[l][n], tampered ? 1 : 0) << keylen << " " << n << " lane " << l;
        if (!tampered) EXPECT_EQ(Bytes(d[l].begin(), d[l].begin() + n), lanes[l].conf_plain);
      }
    }
  }
}

TEST(Rfc3962, ProgramsRefuseBadShapes) {
  EXPECT_FALSE(EncryptProgram(12, 32).ok());
  EXPECT_FALSE(EncryptProgram(14, 15).ok());
  EXPECT_FALSE(DecryptProgram(10, 0).ok());
  EXPECT_FALSE(DecryptProgram(10, kMaxBytes + 1).ok());
  EXPECT_TRUE(DecryptProgram(10, 16).ok());
}

// hmac-sha1-96-aes* and the PRF (RFC 3962 sections 6, 7) in the clear,
// against OpenSSL under the DK-derived keys, a base key per lane.
TEST(Rfc3962, ChecksumAndPrfInTheClear) {
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    std::vector<Bytes> bases, data, ck_in, prf_in, blocks;
    for (int l = 0; l < 5; ++l) {
      bases.push_back(Random(keylen));
      data.push_back(Random(70));
      ck_in.push_back(Cat(DealChecksum(bases[l], 17)->bytes, data[l]));
      Bytes h(20);
      SHA1(data[l].data(), data[l].size(), h.data());
      blocks.emplace_back(h.begin(), h.begin() + 16);
      prf_in.push_back(Cat(DealPrf(bases[l])->bytes, blocks[l]));
    }
    const auto ck = testing::RunClear(*ChecksumProgram(70), ck_in);
    const auto prf = testing::RunClear(*PrfProgram(nr), prf_in);
    for (size_t l = 0; l < bases.size(); ++l) {
      const Bytes mac = testing::RefHmac(*DeriveKey(bases[l], Bytes{0, 0, 0, 17, 0x99}), data[l]);
      EXPECT_EQ(ck[l], Bytes(mac.begin(), mac.begin() + kTagBytes));
      const auto want = ::kmpc::testing::OpensslAes(*DeriveKey(bases[l], Bytes{'p', 'r', 'f'}),
                                                     blocks[l].data());
      EXPECT_EQ(prf[l], Bytes(want.begin(), want.end()));
    }
  }
  EXPECT_FALSE(PrfProgram(12).ok());
  EXPECT_FALSE(ChecksumProgram(kMaxBytes + 1).ok());
}

constexpr size_t kTimestamp = 44;  // conf || PA-ENC-TS-ENC: 3 blocks, the last partial
constexpr size_t kReply = 300;     // conf || EncASRepPart: 19 blocks

// The PA-REQ-ENC-PA-REP splice (RFC 6806 section 11): a lane's inputs
// (usage-3 material, usage-56 checksum material, conf || P, D) and the
// reference, OpenSSL's RFC 3962 encryption of conf || P with HMAC-SHA1-96
// of D under Kc = DK(K, 56 | 0x99) XORed into P at off.
struct SpliceLane {
  Bytes in, want, checksum;
};

SpliceLane MakeSpliceLane(size_t keylen, size_t n, size_t m, size_t off, bool zeros) {
  const Bytes base = Random(keylen), d = Random(m);
  Bytes conf_plain = Random(n);
  if (zeros) std::fill(conf_plain.begin() + 16 + off, conf_plain.begin() + 16 + off + 12, 0);
  SpliceLane l;
  // D as the KDC module deals it: with its HMAC inner padding.
  const std::string pad = contract::SplicePadding(m);
  l.in = Cat(Cat(Cat(Cat(DealUsage(base, 3)->bytes, DealChecksum(base, 56)->bytes), conf_plain), d),
             Bytes(pad.begin(), pad.end()));
  const Bytes mac = testing::RefHmac(*DeriveKey(base, Bytes{0, 0, 0, 56, 0x99}), d);
  l.checksum.assign(mac.begin(), mac.begin() + kTagBytes);
  for (size_t i = 0; i < kTagBytes; ++i) conf_plain[16 + off + i] ^= mac[i];
  l.want = testing::RefEncrypt(base, 3, conf_plain);
  return l;
}

TEST(Rfc3962, SpliceInTheClear) {
  struct {
    size_t n, m, off;
  } shapes[] = {
      {28, 1, 0},        // P is the checksum alone
      {60, 64, 13},      // across a block boundary; D one SHA-1 block
      {300, 250, 272},   // a reply, the checksum ending P
      {316, 55, 100},    // mid-P; D fills one compression with its padding
      {83, 119, 3},      // near P's start
  };
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    for (const auto& sh : shapes) {
      const size_t dealt = contract::SpliceDealtBytes(sh.m);
      const auto p = SpliceEncryptProgram(nr, sh.n, dealt, sh.off);
      ASSERT_TRUE(p.ok()) << p.status();
      ASSERT_EQ(p->inputs, 8 * (UsageMaterialBytes(nr) + 40 + sh.n + dealt));
      ASSERT_EQ(p->outputs, 8 * (sh.n + kTagBytes));
      std::vector<SpliceLane> lanes;
      std::vector<Bytes> in;
      for (int l = 0; l < 4; ++l) {
        // Zeros where the checksum goes (as the KDC sends it), and once any
        // bytes: the checksum is XORed in, not written over.
        lanes.push_back(MakeSpliceLane(keylen, sh.n, sh.m, sh.off, l != 3));
        in.push_back(lanes.back().in);
      }
      const auto out = testing::RunClear(*p, in);
      for (size_t l = 0; l < lanes.size(); ++l) {
        EXPECT_EQ(ToHex(out[l]), ToHex(lanes[l].want))
            << keylen << " " << sh.n << " " << sh.m << " " << sh.off << " lane " << l;
      }
    }
  }
  EXPECT_FALSE(SpliceEncryptProgram(14, 300, 0, 0).ok());             // nothing to splice
  EXPECT_FALSE(SpliceEncryptProgram(14, 300, kMaxBytes + 64, 0).ok());
  EXPECT_FALSE(SpliceEncryptProgram(14, 300, 250, 0).ok());           // not dealt padded
  EXPECT_FALSE(SpliceEncryptProgram(14, 300, 256, 273).ok());         // past P's end
  EXPECT_FALSE(SpliceEncryptProgram(14, 27, 256, 0).ok());            // P shorter than 12
  EXPECT_FALSE(SpliceEncryptProgram(12, 300, 256, 0).ok());
  EXPECT_TRUE(SpliceEncryptProgram(10, 28, 64, 0).ok());
}

// The inner padding as FIPS 180-4 section 5.1.1 pads the 64 + m bytes of
// (Ki ^ ipad) || D: 0x80, zeros, the bit length; the dealt bytes a
// multiple of 64 and as few as hold D and 9 more bytes.
TEST(Rfc3962, SplicePaddingIsSha1s) {
  for (size_t m : {size_t{1}, size_t{54}, size_t{55}, size_t{56}, size_t{119}, size_t{120},
                   size_t{250}, size_t{1015}}) {
    const std::string pad = contract::SplicePadding(m);
    const size_t dealt = contract::SpliceDealtBytes(m);
    EXPECT_EQ(dealt % 64, 0u) << m;
    EXPECT_EQ(dealt, m + pad.size()) << m;
    EXPECT_GE(pad.size(), 9u) << m;
    EXPECT_LT(pad.size(), 73u) << m;
    EXPECT_EQ(static_cast<uint8_t>(pad[0]), 0x80) << m;
    uint64_t bits = 0;
    for (size_t i = pad.size() - 8; i < pad.size(); ++i) bits = bits << 8 | static_cast<uint8_t>(pad[i]);
    EXPECT_EQ(bits, 8 * (64 + m)) << m;
  }
  EXPECT_EQ(contract::SpliceDealtBytes(55), 64u);
  EXPECT_EQ(contract::SpliceDealtBytes(56), 128u);
  EXPECT_EQ(contract::SpliceDealtBytes(119), 128u);
  EXPECT_EQ(contract::SpliceDealtBytes(120), 192u);
}

// Requests of every length with one SHA-1 block count run through ONE
// program (the program a server compiles per shape: the request's length
// is not in it), each lane's reply holding its own request's checksum by
// OpenSSL's HMAC (the reference).
TEST(Rfc3962, SpliceProgramServesEveryLengthOfItsBlockCount) {
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    const auto p = SpliceEncryptProgram(nr, 300, 192, 272);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<SpliceLane> lanes;
    std::vector<Bytes> in;
    for (size_t m : {size_t{120}, size_t{150}, size_t{183}}) {
      ASSERT_EQ(contract::SpliceDealtBytes(m), 192u);
      lanes.push_back(MakeSpliceLane(keylen, 300, m, 272, true));
      in.push_back(lanes.back().in);
    }
    const auto out = testing::RunClear(*p, in);
    for (size_t l = 0; l < lanes.size(); ++l)
      EXPECT_EQ(ToHex(out[l]), ToHex(lanes[l].want)) << keylen << " lane " << l;
  }
}

// A class lane's tail after conf || P (or a checksum's D): the zeros a
// server fills in up to 64 * HashBlocks(n), then the padding vector.
Bytes ClassTail(size_t n) {
  Bytes t(64 * HashBlocks(n) - n, 0);
  return Cat(t, PaddingBytes(n));
}

// Every length of a class runs through ONE program (the classes' largest
// length names it) and, cut by its own length, gives OpenSSL's RFC 3962
// ciphertext and tag byte for byte: every length from 16 to 160, and
// around a 300-byte reply, both key sizes.
TEST(Rfc3962, ClassProgramServesEveryLengthOfItsClass) {
  std::vector<size_t> lengths;
  for (size_t n = 16; n <= 160; ++n) lengths.push_back(n);
  for (size_t n = 290; n <= 330; ++n) lengths.push_back(n);
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    std::map<size_t, std::vector<size_t>> classes;
    for (size_t n : lengths) classes[EncryptClassMax(n)].push_back(n);
    for (const auto& [cm, ns] : classes) {
      const auto p = EncryptClassProgram(nr, ns.front());  // any length names it
      ASSERT_TRUE(p.ok()) << p.status();
      ASSERT_EQ(p->outputs, 8 * (16 * ((cm + 15) / 16) + kTagBytes)) << cm;
      std::vector<Lane> lanes;
      std::vector<Bytes> in;
      for (size_t n : ns) {
        lanes.push_back(MakeLane(keylen, 3, n));
        in.push_back(Cat(Cat(lanes.back().material, lanes.back().conf_plain), ClassTail(n)));
        ASSERT_EQ(in.back().size() * 8, p->inputs) << n;
      }
      const auto out = testing::RunClear(*p, in);
      for (size_t l = 0; l < ns.size(); ++l)
        ASSERT_EQ(ToHex(CutClassOutput(ns[l], out[l])), ToHex(lanes[l].cipher))
            << keylen << " n " << ns[l] << " class " << cm;
    }
  }
  // Classes: one CBC block count and one SHA-1 block count.
  EXPECT_EQ(EncryptClassMax(16), 16u);
  EXPECT_EQ(EncryptClassMax(49), 55u);
  EXPECT_EQ(EncryptClassMax(56), 64u);
  EXPECT_EQ(EncryptClassMax(300), 304u);
  EXPECT_EQ(EncryptClassMax(311), 311u);
  EXPECT_EQ(EncryptClassMax(312), 320u);
  EXPECT_EQ(ChecksumClassMax(0), 55u);
  EXPECT_EQ(ChecksumClassMax(56), 119u);
  EXPECT_FALSE(EncryptClassProgram(14, 15).ok());
  EXPECT_FALSE(EncryptClassProgram(12, 300).ok());
}

// The splice in a class program: one program per (class, D's block count,
// window of 16 offsets), the checksum placed by the lane's selector.
// Replies of every length of a class with the checksum ending P (as the
// KDC sends it), and offsets mid-P, against OpenSSL.
TEST(Rfc3962, SpliceClassProgramPlacesTheChecksumBySelector) {
  struct Case {
    size_t n, m, off;
  };
  std::vector<Case> cases;
  for (size_t n = 290; n <= 304; ++n) cases.push_back({n, 250, n - 28});  // one class
  for (size_t off = 261; off <= 276; ++off) cases.push_back({304, 183, off});  // one window
  for (size_t off = 101; off <= 116; ++off) cases.push_back({300, 183, off});  // mid-P
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    std::map<std::tuple<size_t, size_t, size_t>, std::vector<Case>> programs;
    for (const Case& c : cases)
      programs[{EncryptClassMax(c.n), contract::SpliceDealtBytes(c.m), SpliceWindowOffset(c.off)}]
          .push_back(c);
    EXPECT_EQ(programs.size(), 3u);
    for (const auto& [key, cs] : programs) {
      const auto p =
          SpliceEncryptClassProgram(nr, cs[0].n, contract::SpliceDealtBytes(cs[0].m), cs[0].off);
      ASSERT_TRUE(p.ok()) << p.status();
      std::vector<SpliceLane> lanes;
      std::vector<Bytes> in;
      for (const Case& c : cs) {
        lanes.push_back(MakeSpliceLane(keylen, c.n, c.m, c.off, true));
        // The lane as a server lays it out: the materials, conf || P,
        // zeros and padding, then D padded and the selector.
        Bytes& l = lanes.back().in;
        const size_t head = UsageMaterialBytes(nr) + 40 + c.n;
        Bytes lane(l.begin(), l.begin() + head);
        lane = Cat(Cat(lane, ClassTail(c.n)), Bytes(l.begin() + head, l.end()));
        in.push_back(Cat(lane, SpliceSelector(c.off)));
        ASSERT_EQ(in.back().size() * 8, p->inputs);
      }
      const auto out = testing::RunClear(*p, in);
      for (size_t l = 0; l < cs.size(); ++l)
        EXPECT_EQ(ToHex(CutClassOutput(cs[l].n, out[l])), ToHex(lanes[l].want))
            << keylen << " n " << cs[l].n << " off " << cs[l].off;
    }
  }
  EXPECT_FALSE(SpliceEncryptClassProgram(14, 300, 250, 272).ok());  // not dealt padded
  EXPECT_FALSE(SpliceEncryptClassProgram(14, 16, 256, 0).ok());     // no P: no room
  EXPECT_TRUE(SpliceEncryptClassProgram(10, 28, 64, 0).ok());
}

// The usage-17 checksum per SHA-1 block count: every message length of a
// class through one program, against OpenSSL's HMAC.
TEST(Rfc3962, ChecksumClassProgramServesEveryLengthOfItsClass) {
  const Bytes base = Random(32);
  const Bytes material = DealChecksum(base, 17)->bytes;
  const Bytes kc = *DeriveKey(base, Bytes{0, 0, 0, 17, 0x99});
  for (size_t cm : {size_t{55}, size_t{119}, size_t{695}}) {
    const auto p = ChecksumClassProgram(cm);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<Bytes> data, in;
    for (size_t n = cm - 63; n <= cm; n += 7) {
      data.push_back(Random(n));
      in.push_back(Cat(Cat(material, data.back()), ClassTail(n)));
    }
    const auto out = testing::RunClear(*p, in);
    for (size_t l = 0; l < data.size(); ++l) {
      const Bytes mac = testing::RefHmac(kc, data[l]);
      EXPECT_EQ(out[l], Bytes(mac.begin(), mac.begin() + kTagBytes)) << data[l].size();
    }
  }
}

// Decryption and encryption of a batch of logins (a base key each) among
// three parties: outputs reconstruct to the plaintext with a good tag (the
// mismatch bit set for the one forged tag) and to OpenSSL's ciphertext.
void LoginBatch(std::array<protocol::Rep3*, 3> rep3, bool malicious, size_t logins) {
  std::vector<Lane> ts, rep;
  std::vector<Views> dec_in, enc_in;
  for (size_t l = 0; l < logins; ++l) {
    ts.push_back(MakeLane(l % 2 ? 16 : 32, 1, kTimestamp));
    rep.push_back(MakeLane(32, 3, kReply));
  }
  for (int keylen : {16, 32}) {
    std::vector<Views> in;
    std::vector<size_t> idx;
    for (size_t l = 0; l < logins; ++l) {
      if (ts[l].base.size() != static_cast<size_t>(keylen)) continue;
      idx.push_back(l);
      Bytes ct = ts[l].cipher;
      if (idx.size() == 1) ct.back() ^= 0x80;  // a forged tag in each run
      in.push_back(testing::Concat({testing::DealViews(ts[l].material), testing::PublicViews(ct)}));
    }
    std::array<absl::Status, 3> st;
    const auto out = testing::RunShared(rep3, *DecryptProgram(keylen == 16 ? 10 : 14, kTimestamp),
                                        in, malicious, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), idx.size());
    EXPECT_EQ(out[0].back(), 1);  // the forged tag's mismatch bit
    for (size_t k = 1; k < idx.size(); ++k) {
      EXPECT_EQ(ToHex(out[k]), ToHex(Cat(ts[idx[k]].conf_plain, Bytes{0})));
    }
  }
  for (const Lane& l : rep) {
    enc_in.push_back(testing::Concat(
        {testing::DealViews(l.material), testing::DealViews(l.conf_plain)}));
  }
  std::array<absl::Status, 3> st;
  const auto out = testing::RunShared(rep3, *EncryptProgram(14, kReply), enc_in, malicious, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), rep.size());
  for (size_t l = 0; l < rep.size(); ++l) EXPECT_EQ(ToHex(out[l]), ToHex(rep[l].cipher));
}

TEST(Rfc3962, LoginBatchOnSharesSemiHonest) {
  ::kmpc::testing::Rep3Cluster cl;
  LoginBatch({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()}, false, 6);
}

// 130 logins: two and three words per wire.
TEST(Rfc3962, LoginBatchOnSharesMalicious) {
  ::kmpc::testing::Rep3Cluster cl;
  LoginBatch({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()}, true, 130);
}

// The same with a check every ~5,000 AND words inside the run.
TEST(Rfc3962, LoginBatchOnSharesMaliciousCheckedInRun) {
  ::kmpc::testing::Rep3Cluster cl;
  testing::g_verify_words = 5000;
  LoginBatch({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()}, true, 3);
  testing::g_verify_words = protocol::MulLog::kVerifyWords;
}

// A batch of logins of mixed key sizes and reply lengths as one run (each
// shape one job of EvaluateAll, all in the same rounds), malicious.
TEST(Rfc3962, MixedBatchInOneRun) {
  ::kmpc::testing::Rep3Cluster cl;
  struct Shape {
    size_t keylen, n;
    uint32_t usage;
    bool decrypt;
    size_t lanes;
  };
  const Shape shapes[] = {{32, kTimestamp, 1, true, 3}, {16, kTimestamp, 1, true, 2},
                          {16, 52, 1, true, 1},        {32, kReply, 3, false, 3},
                          {16, kReply, 3, false, 2},    {32, 333, 3, false, 1}};
  std::vector<Program> programs;
  std::vector<std::vector<Views>> in;
  std::vector<std::vector<Bytes>> want;
  for (const Shape& sh : shapes) {
    const int nr = sh.keylen == 16 ? 10 : 14;
    programs.push_back(sh.decrypt ? *DecryptProgram(nr, sh.n) : *EncryptProgram(nr, sh.n));
    in.emplace_back();
    want.emplace_back();
    for (size_t l = 0; l < sh.lanes; ++l) {
      const Lane lane = MakeLane(sh.keylen, sh.usage, sh.n);
      in.back().push_back(testing::Concat(
          {testing::DealViews(lane.material), sh.decrypt ? testing::PublicViews(lane.cipher)
                                                         : testing::DealViews(lane.conf_plain)}));
      want.back().push_back(sh.decrypt ? Cat(lane.conf_plain, Bytes{0}) : lane.cipher);
    }
  }
  std::vector<const Program*> ptrs;
  for (const Program& p : programs) ptrs.push_back(&p);
  std::array<absl::Status, 3> st;
  const auto out = testing::RunSharedJobs({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()},
                                          ptrs, in, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    ASSERT_EQ(out[j].size(), want[j].size());
    for (size_t l = 0; l < want[j].size(); ++l) EXPECT_EQ(ToHex(out[j][l]), ToHex(want[j][l])) << j;
  }
}

using CheatCluster = ::kmpc::testing::CheatRing;

// One party adds an error to one AND of one layer (one bit of its
// message: one gate, one lane) of the timestamp's decryption: in the AES
// part, in the inner and in the outer SHA-1 compression. The check fails
// the batch at an honest party; without the error the same run passes.
TEST(Rfc3962, AdditiveErrorOnOneAndIsCaught) {
  const Program p = *DecryptProgram(14, kTimestamp);
  std::vector<Views> in;
  for (int l = 0; l < 3; ++l) {
    const Lane lane = MakeLane(32, 1, kTimestamp);
    in.push_back(testing::Concat(
        {testing::DealViews(lane.material), testing::PublicViews(lane.cipher)}));
  }
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheatCluster cl(cheater);
    // Checked in the run (every ~20,000 words) for cheater 1.
    testing::g_verify_words = cheater == 1 ? 20000 : protocol::MulLog::kVerifyWords;
    std::array<absl::Status, 3> st;
    testing::RunShared(cl.rep3(), p, in, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    for (int layer : {3, p.depth / 2, p.depth - 2}) {
      cl.cheat().Arm(layer, 8 * (layer % 7), static_cast<uint8_t>(1u << (layer % 3)));
      testing::RunShared(cl.rep3(), p, in, true, &st, /*cheated=*/true);
      ASSERT_TRUE(cl.cheat().fired());
      cl.cheat().Disarm();
      int caught = 0;
      for (int i = 0; i < 3; ++i) {
        if (i != cheater && protocol::IsIntegrityFailure(st[i])) ++caught;
      }
      EXPECT_GE(caught, 1) << "cheater " << cheater << " layer " << layer << ": " << st[0]
                           << " / " << st[1] << " / " << st[2];
    }
  }
  testing::g_verify_words = protocol::MulLog::kVerifyWords;
}

// A job of 40 lanes goes packed, 40 bits per gate (circuit.cc TailBits):
// an error on any bit of its packed words is still caught, in the run's
// checks and in the last one.
TEST(Rfc3962, AdditiveErrorOnAPackedGateIsCaught) {
  const Program p = *DecryptProgram(14, kTimestamp);
  std::vector<Views> in;
  for (int l = 0; l < 40; ++l) {
    const Lane lane = MakeLane(32, 1, kTimestamp);
    in.push_back(testing::Concat(
        {testing::DealViews(lane.material), testing::PublicViews(lane.cipher)}));
  }
  for (int cheater = 0; cheater < 3; ++cheater) {
    CheatCluster cl(cheater);
    testing::g_verify_words = cheater == 1 ? 20000 : protocol::MulLog::kVerifyWords;
    std::array<absl::Status, 3> st;
    testing::RunShared(cl.rep3(), p, in, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    for (int layer : {3, p.depth / 2, p.depth - 2}) {
      cl.cheat().Arm(layer, 8 * (layer % 7) + 4, 0x80);
      testing::RunShared(cl.rep3(), p, in, true, &st, /*cheated=*/true);
      ASSERT_TRUE(cl.cheat().fired());
      cl.cheat().Disarm();
      int caught = 0;
      for (int i = 0; i < 3; ++i) {
        if (i != cheater && protocol::IsIntegrityFailure(st[i])) ++caught;
      }
      EXPECT_GE(caught, 1) << "cheater " << cheater << " layer " << layer;
    }
  }
  testing::g_verify_words = protocol::MulLog::kVerifyWords;
}

// ANDs and AND depth (ring rounds) of one login's parts and of both in one
// run (they run side by side: the depth is the longer one's).
TEST(Rfc3962, LoginFigures) {
  const Program dec = *DecryptProgram(14, kTimestamp);
  const Program enc = *EncryptProgram(14, kReply);
  Circuit c;
  const UsageKeys k1 = UsageKeyInputs(c, 14), k3 = UsageKeyInputs(c, 14);
  const Decrypted d = Rfc3962Decrypt(c, k1, c.Inputs(8 * (kTimestamp + kTagBytes)));
  c.Output(d.conf_plain);
  c.Output(d.mismatch);
  c.Output(Rfc3962Encrypt(c, k3, c.Inputs(8 * kReply)));
  const Program both = c.Compile();
  std::printf("aes256 timestamp decrypt+HMAC (%zu bytes): %zu ANDs, AND depth %d\n", kTimestamp,
              dec.ands, dec.depth);
  std::printf("aes256 reply encrypt+HMAC (%zu bytes, %zu blocks): %zu ANDs, AND depth %d\n",
              kReply, (kReply + 15) / 16, enc.ands, enc.depth);
  std::printf("one login, both in one run: %zu ANDs, AND depth %d, %zu slots\n", both.ands,
              both.depth, both.slots);
  testing::ExpectCounted(dec);
  testing::ExpectCounted(enc);
  // Two SHA-1 compressions after two AES layers, plus the tag's OR tree.
  EXPECT_LE(dec.depth, 2 * 56 + 2 * 510 + 7);
  // Five inner compressions and one outer beside 19 sequential AES-256.
  EXPECT_LE(enc.depth, 6 * 510);
  EXPECT_EQ(both.depth, std::max(dec.depth, enc.depth));
  EXPECT_EQ(both.ands, dec.ands + enc.ands);
}

// The gate's freshness on shares (StaleTimestamp), in the clear: the
// timestamp DECRYPT's bit 1 is 0 only for a PA-ENC-TS-ENC whose time lies
// within [lo, hi] (inclusive) and whose header is a PA-ENC-TS-ENC's; what
// it costs the usage-1 DECRYPT (ANDs, and no AND round).
TEST(Rfc3962, TimestampFreshnessOnShares) {
  const Bytes key = Random(32);
  const auto m = DealUsage(key, 1);
  ASSERT_TRUE(m.ok());
  const Program plain = *DecryptProgram(14, kTimestamp);
  const Program gated = *DecryptProgram(14, kTimestamp, true);
  const Program enc = *EncryptProgram(14, kTimestamp);
  // conf || 30 1A A0 11 18 0F <time> [1] pausec.
  const auto plaintext = [](const std::string& time) {
    Bytes b = Random(16);
    for (uint8_t x : {0x30, 0x1A, 0xA0, 0x11, 0x18, 0x0F}) b.push_back(x);
    b.insert(b.end(), time.begin(), time.end());
    for (uint8_t x : {0xA1, 0x05, 0x02, 0x03, 0x01, 0x86, 0xA0}) b.push_back(x);
    return b;
  };
  const std::string lo = "20261126175500", hi = "20261126180500";
  struct Case {
    std::string time;
    int stale;
  };
  const Case cases[] = {{"20261126180000Z", 0}, {"20261126175500Z", 0}, {"20261126180500Z", 0},
                        {"20261126175459Z", 1}, {"20261126180501Z", 1}, {"20251126180000Z", 1},
                        {"20261126180000X", 1}, {"202611261800a0Z", 1}, {"20261126180000 ", 1},
                        // '0' .. '?' compare by their low nibble (a KerberosTime
                        // holds digits only): ':' is 10.
                        {"2026112618000:Z", 0}, {"2026112618:000Z", 1}};
  for (const Case& k : cases) {
    const Bytes conf_p = plaintext(k.time);
    Bytes in = m->bytes;
    const Bytes ct = testing::RunClear(enc, {Cat(m->bytes, conf_p)})[0];
    in.insert(in.end(), ct.begin(), ct.end());
    in.insert(in.end(), lo.begin(), lo.end());
    in.insert(in.end(), hi.begin(), hi.end());
    const Bytes out = testing::RunClear(gated, {in})[0];
    EXPECT_EQ(Bytes(out.begin(), out.end() - 1), conf_p);
    EXPECT_EQ(out.back(), k.stale << 1) << k.time;
  }
  std::printf("aes256 timestamp DECRYPT (%zu bytes): %zu ANDs, depth %d; with the freshness "
              "check: %zu ANDs (+%zu), depth %d\n",
              kTimestamp, plain.ands, plain.depth, gated.ands, gated.ands - plain.ands,
              gated.depth);
  EXPECT_LE(gated.ands - plain.ands, 240u);
  EXPECT_EQ(gated.depth, plain.depth);
}

// ANDs and AND depth of a reply with the PA-REQ-ENC-PA-REP checksum
// spliced in (cts.h SpliceEncryptProgram), a realistic shape: a 316-byte
// conf || EncASRepPart whose last 12 bytes are the checksum (encrypted-
// pa-data is EncKDCRepPart's last field), a 250-byte AS-REQ; against the
// plain reply and the checksum alone. The checksum runs beside the reply's
// work before the splice: the depth is far below the sum of the two.
TEST(Rfc3962, SpliceFigures) {
  constexpr size_t kN = 316, kM = 250, kOff = kN - 16 - kTagBytes;
  const auto t0 = std::chrono::steady_clock::now();
  const Program sp = *SpliceEncryptProgram(14, kN, contract::SpliceDealtBytes(kM), kOff);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const Program enc = *EncryptProgram(14, kN);
  const Program ck = *ChecksumProgram(kM);
  size_t bytes = 0;
  for (const auto& l : sp.layers) bytes += 4 * (l.ands.size() + l.xors.size());
  std::printf("aes256 reply encrypt+HMAC (%zu bytes): %zu ANDs, AND depth %d\n", kN, enc.ands,
              enc.depth);
  std::printf("hmac-sha1-96 checksum of a %zu-byte request: %zu ANDs, AND depth %d\n", kM,
              ck.ands, ck.depth);
  std::printf("spliced reply (checksum at %zu): %zu ANDs, AND depth %d, %zu slots, "
              "%.1f MiB of gate lists, compiled in %.0f ms\n",
              kOff, sp.ands, sp.depth, sp.slots, bytes / 1048576.0, ms);
  testing::ExpectCounted(sp);
  // The two circuits' gates, nothing shared between them (different keys),
  // but for the request's padding: dealt (wires, so that one program
  // serves every length of its block count), where ChecksumProgram folds
  // its constant bits into the message schedule.
  EXPECT_GE(sp.ands, enc.ands + ck.ands);
  EXPECT_LE(sp.ands, enc.ands + ck.ands + 4000);
  EXPECT_GT(sp.depth, enc.depth);
  EXPECT_GT(sp.depth, ck.depth);
  // After the checksum: at most the last inner compressions and the outer
  // one (three compressions, the block holding the checksum, the padding's,
  // the outer) beside the last AES blocks.
  EXPECT_LE(sp.depth, ck.depth + 3 * 510);
  EXPECT_LE(sp.depth + 1000, enc.depth + ck.depth);
}

// What a class costs against the exact length's program: the zeros and
// SHA-1 padding past n are wires (filled in by the servers), not folded
// constants, and the splice goes at 16 offsets under the selector.
TEST(Rfc3962, ClassFigures) {
  constexpr size_t kN = 316, kM = 320, kOff = kN - 16 - kTagBytes;
  const Program enc = *EncryptProgram(14, kN), cls = *EncryptClassProgram(14, kN);
  const Program sp = *SpliceEncryptProgram(14, kN, kM, kOff);
  const Program spc = *SpliceEncryptClassProgram(14, kN, kM, kOff);
  std::printf("aes256 reply (%zu bytes): exact %zu ANDs depth %d; class (%zu..%zu) %zu ANDs "
              "depth %d\n",
              kN, enc.ands, enc.depth, size_t{312}, EncryptClassMax(kN), cls.ands, cls.depth);
  EXPECT_EQ(EncryptClassMax(311), 311u);  // the class below
  EXPECT_EQ(EncryptClassMax(312), 320u);
  std::printf("spliced reply: exact %zu ANDs depth %d; class %zu ANDs depth %d\n", sp.ands,
              sp.depth, spc.ands, spc.depth);
  testing::ExpectCounted(cls);
  testing::ExpectCounted(spc);
  // A block more of AES at most (the class's largest length), the
  // padding's wires, and 16 x 96 selector ANDs.
  EXPECT_LE(cls.ands, enc.ands + 7616 + 8000);
  EXPECT_LE(spc.ands, sp.ands + 7616 + 8000 + 16 * 96);
  EXPECT_LE(cls.depth, enc.depth + 100);
  EXPECT_LE(spc.depth, sp.depth + 100);
}

// ANDs and AND depth of a FAST login (RFC 6113): the client's encrypted
// challenge decrypted (usage 54), the KDC's encrypted (55) and the reply
// encrypted under the strengthened key (3), each under a key derived on
// shares (PRF+ of K, key schedule, DK, HMAC states), all in one run.
TEST(Rfc3962, FastLoginFigures) {
  const Program dec = *Cf2DecryptProgram(14, 32, 54, kTimestamp);
  const Program kdc = *Cf2EncryptProgram(14, 32, 55, kTimestamp);
  const Program enc = *Cf2EncryptProgram(14, 32, 3, kReply);
  std::printf("aes256 FAST challenge decrypt (%zu bytes): %zu ANDs, AND depth %d\n", kTimestamp,
              dec.ands, dec.depth);
  std::printf("aes256 FAST KDC challenge encrypt (%zu bytes): %zu ANDs, AND depth %d\n",
              kTimestamp, kdc.ands, kdc.depth);
  std::printf("aes256 FAST reply encrypt (%zu bytes): %zu ANDs, AND depth %d\n", kReply,
              enc.ands, enc.depth);
  std::printf("one FAST login (challenge + reply): %zu ANDs, AND depth %d; with the KDC's "
              "challenge: %zu ANDs\n",
              dec.ands + enc.ands, std::max(dec.depth, enc.depth),
              dec.ands + kdc.ands + enc.ands);
  testing::ExpectCounted(dec);
  testing::ExpectCounted(enc);
  const Program plain = *EncryptProgram(14, kReply);
  EXPECT_GT(enc.ands, plain.ands);
  // The key costs PRF+, a schedule, two DK blocks, a schedule of Ke and the
  // two HMAC states (< 1,000 layers) before the reply's own circuit.
  EXPECT_LE(enc.depth, plain.depth + 1000);
}

// A ticket to a service under an aes*-cts key in one program (cts.h
// TicketClassProgram): the reference is MIT's order in the clear, with
// OpenSSL for RFC 3962 and SP 800-38D's bit-by-bit multiplication for
// GHASH: T_s = HMAC-SHA1-96 under DK(K, 17 | 0x99) of the PAC, then the
// KDC signature ctr0 || GHASH_H(pad16(A') || pad16(T_s) || lens) ^ E(c0)
// over T_s (enctype.md "Keyed checksum", A' = 00 00 00 11 99), both XORed
// into P where the KDC left zeros, then the ticket under usage 2.
struct TicketLane {
  Bytes in, want;
};

TicketLane MakeTicketLane(int nr, size_t n, size_t m, size_t off_s, size_t gap) {
  const size_t off_k = off_s + gap;
  const size_t keylen = nr == 10 ? 16 : 32;
  const Bytes base = Random(keylen), pac = Random(m), ctr0 = Random(16), pad = Random(16);
  const Bytes hb = Random(16);
  Bytes conf_plain = Random(n);
  std::fill(conf_plain.begin() + 16 + off_s, conf_plain.begin() + 16 + off_s + 12, 0);
  std::fill(conf_plain.begin() + 16 + off_k, conf_plain.begin() + 16 + off_k + 32, 0);
  const Bytes mac = testing::RefHmac(*DeriveKey(base, Bytes{0, 0, 0, 17, 0x99}), pac);
  const Bytes t_s(mac.begin(), mac.begin() + kTagBytes);
  protocol::Block h;
  std::copy(hb.begin(), hb.end(), h.begin());
  const Bytes aad = {0, 0, 0, 17, 0x99};
  const protocol::Block g = protocol::Ghash(h, protocol::GhashInput(aad, t_s));
  const protocol::Block g0 = protocol::Ghash(h, protocol::GhashInput(aad, Bytes(12, 0)));
  const protocol::Block h2 = protocol::GfMulReference(h, h);
  Bytes sig = ctr0, l(16);
  for (size_t i = 0; i < 16; ++i) {
    sig.push_back(g[i] ^ pad[i]);
    l[i] = g0[i] ^ pad[i];  // A' H^3 ^ lens H ^ E(c0): what the servers hold
  }
  TicketLane t;
  const std::string pp = contract::SplicePadding(m);
  Bytes lane = Cat(Cat(DealUsage(base, 2)->bytes, DealChecksum(base, 17)->bytes), conf_plain);
  lane = Cat(Cat(Cat(lane, ClassTail(n)), pac), Bytes(pp.begin(), pp.end()));
  lane = Cat(lane, TicketSelector(off_s));
  t.in = Cat(Cat(Cat(lane, ctr0), Bytes(h2.begin(), h2.end())), l);
  for (size_t i = 0; i < 12; ++i) conf_plain[16 + off_s + i] ^= t_s[i];
  for (size_t i = 0; i < 32; ++i) conf_plain[16 + off_k + i] ^= sig[i];
  t.want = testing::RefEncrypt(base, 2, conf_plain);
  return t;
}

// The multiplication on its own: a block with only its first 96
// coefficients by h, against SP 800-38D Algorithm 1.
TEST(Rfc3962, GfMulCircuitIsGcms) {
  Circuit c;
  const Bits d = c.Inputs(128), h = c.Inputs(128);
  c.Output(GfMulCircuit(c, d, 96, h));
  const Program p = c.Compile();
  EXPECT_EQ(p.ands, 96u * 128u);
  EXPECT_EQ(p.depth, 1);
  std::vector<Bytes> in, want;
  for (int l = 0; l < 70; ++l) {
    Bytes a = Random(16), b = Random(16);
    std::fill(a.begin() + 12, a.end(), 0);
    if (l == 0) a = Bytes(16, 0), a[0] = 0x80;  // x^0: the identity
    protocol::Block x, y;
    std::copy(a.begin(), a.end(), x.begin());
    std::copy(b.begin(), b.end(), y.begin());
    const protocol::Block z = protocol::GfMulReference(x, y);
    in.push_back(Cat(a, b));
    want.push_back(Bytes(z.begin(), z.end()));
  }
  const auto out = testing::RunClear(p, in);
  for (size_t l = 0; l < in.size(); ++l) EXPECT_EQ(ToHex(out[l]), ToHex(want[l])) << l;
}

// Tickets of every length of a class and signatures at every offset of
// their windows through one program each, both key sizes, in the clear;
// the KDC signature right after the server signature's buffer (MIT's
// layout, gap 16) and further on. A class is one SHA-1 block count of
// conf || P (568..631 bytes here) and a window T_s's 64 starts in one
// SHA-1 block (P's offsets 48..111, and 0..47 beside the confounder).
TEST(Rfc3962, TicketClassProgramSignsAndSplices) {
  struct Case {
    size_t n, m, off, gap;
  };
  std::vector<Case> cases;
  for (size_t n = 568; n <= 631; n += 3) cases.push_back({n, 330, n - 64, 16});  // sigs end P
  for (size_t o = 48; o <= 111; ++o) cases.push_back({576, 330, o, 16});         // one window
  for (size_t o = 0; o <= 47; o += 5) cases.push_back({600, 330, o, 16});        // the first
  for (size_t o = 48; o <= 111; o += 7) cases.push_back({576, 100, o, 200});
  for (int nr : {10, 14}) {
    std::map<std::tuple<size_t, size_t, size_t, size_t>, std::vector<Case>> programs;
    for (const Case& c : cases)
      programs[{TicketClassMax(c.n), contract::SpliceDealtBytes(c.m), TicketWindowOffset(c.off),
                c.gap}]
          .push_back(c);
    EXPECT_EQ(programs.size(), 5u);  // the classes and windows the cases cross
    for (const auto& [key, cs] : programs) {
      const auto p = TicketClassProgram(nr, cs[0].n, contract::SpliceDealtBytes(cs[0].m),
                                        cs[0].off, cs[0].gap);
      ASSERT_TRUE(p.ok()) << p.status();
      std::vector<TicketLane> lanes;
      std::vector<Bytes> in;
      for (const Case& c : cs) {
        lanes.push_back(MakeTicketLane(nr, c.n, c.m, c.off, c.gap));
        in.push_back(lanes.back().in);
        ASSERT_EQ(in.back().size() * 8, p->inputs);
      }
      const auto out = testing::RunClear(*p, in);
      for (size_t l = 0; l < cs.size(); ++l)
        EXPECT_EQ(ToHex(CutClassOutput(cs[l].n, out[l])), ToHex(lanes[l].want))
            << nr << " n " << cs[l].n << " " << cs[l].off << " " << cs[l].gap;
    }
  }
  EXPECT_FALSE(TicketClassProgram(14, 576, 330, 200, 16).ok());  // PAC not dealt padded
  EXPECT_FALSE(TicketClassProgram(14, 47, 64, 0, 16).ok());      // no room for both
  EXPECT_FALSE(TicketClassProgram(14, 576, 384, 624, 16).ok());  // past the class
  EXPECT_FALSE(TicketClassProgram(12, 576, 384, 200, 16).ok());
  EXPECT_TRUE(TicketClassProgram(10, 64, 64, 0, 16).ok());
}

// The same on shares among three parties, malicious (every AND checked).
TEST(Rfc3962, TicketClassProgramOnSharesMalicious) {
  ::kmpc::testing::Rep3Cluster cl;
  const size_t n = 576, m = 330, off = 200, gap = 16;
  const auto p = TicketClassProgram(14, n, contract::SpliceDealtBytes(m), off, gap);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<TicketLane> lanes;
  std::vector<Views> in;
  for (int l = 0; l < 3; ++l) {
    lanes.push_back(MakeTicketLane(14, n, m, off, gap));
    in.push_back(testing::DealViews(lanes.back().in));
  }
  std::array<absl::Status, 3> st;
  const auto out =
      testing::RunShared({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()}, *p, in, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l)
    EXPECT_EQ(ToHex(CutClassOutput(n, out[l])), ToHex(lanes[l].want)) << l;
}

// ANDs and AND depth of a ticket to a service under aes256-cts (item 6 of
// issue 50): a 576-byte conf || EncTicketPart with MIT's PAC (330 bytes)
// and both signatures in its last blocks; against the plain ticket's class
// program and the PAC's checksum alone. The KDC signature costs one layer
// of 96 x 128 ANDs after the checksum.
TEST(Rfc3962, TicketFigures) {
  constexpr size_t kN = 576, kM = 330, kOff = 420, kGap = 16;
  const Program tk = *TicketClassProgram(14, kN, contract::SpliceDealtBytes(kM), kOff, kGap);
  const Program enc = *EncryptClassProgram(14, TicketClassMax(kN));
  const Program ck = *ChecksumClassProgram(kM);
  std::printf("aes256 ticket class (%zu bytes): %zu ANDs, AND depth %d\n", kN, enc.ands,
              enc.depth);
  std::printf("usage-17 checksum of a %zu-byte PAC: %zu ANDs, AND depth %d\n", kM, ck.ands,
              ck.depth);
  std::printf("signed and spliced ticket: %zu ANDs, AND depth %d; sum of the two Runs' "
              "programs %zu ANDs, depth %d\n",
              tk.ands, tk.depth, enc.ands + ck.ands, enc.depth + ck.depth);
  testing::ExpectCounted(tk);
  EXPECT_GE(tk.ands, enc.ands + ck.ands + 96 * 128);
  EXPECT_LE(tk.ands, enc.ands + ck.ands + 96 * 128 + kTicketWindow * (96 + 256) + 4000);
  EXPECT_LT(tk.depth, enc.depth + ck.depth);
}

}  // namespace
}  // namespace kmpc::cts
