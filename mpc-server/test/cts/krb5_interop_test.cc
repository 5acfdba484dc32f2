// The circuits against MIT krb5's own aes128/aes256-cts-hmac-sha1-96
// (libk5crypto of the patched prefix, enctypes 17 and 18): krb5_c_encrypt's
// ciphertexts (its own random confounder) decrypt in the circuit to the
// plaintext with a good tag, and the circuit's ciphertexts (a confounder of
// ours) decrypt with krb5_c_decrypt; in the clear engine for many keys and
// lengths, and among three parties with the malicious check; likewise
// krb5_c_make_checksum and krb5_c_prf against the checksum and PRF
// programs.
#include <gtest/gtest.h>
#include <krb5.h>
#include <openssl/sha.h>

#include <cstring>
#include <string>

#include "cts/cts.h"
#include "contract.h"
#include "cts/dealer.h"
#include "cts_testing.h"
#include "rep3_cluster.h"

namespace kmpc::cts {
namespace {

using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using testing::Bytes;
using testing::Views;

class Krb5 : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(krb5_init_context(&ctx_), 0); }
  void TearDown() override { krb5_free_context(ctx_); }

  krb5_keyblock Key(const Bytes& k) {
    krb5_keyblock kb{};
    kb.magic = KV5M_KEYBLOCK;
    kb.enctype = k.size() == 16 ? ENCTYPE_AES128_CTS_HMAC_SHA1_96 : ENCTYPE_AES256_CTS_HMAC_SHA1_96;
    kb.length = static_cast<unsigned>(k.size());
    kb.contents = const_cast<krb5_octet*>(k.data());
    return kb;
  }

  // krb5_c_encrypt: conf || P encrypted, then the 12-byte tag.
  Bytes Encrypt(const Bytes& key, krb5_keyusage usage, const Bytes& p) {
    krb5_keyblock kb = Key(key);
    size_t len = 0;
    EXPECT_EQ(krb5_c_encrypt_length(ctx_, kb.enctype, p.size(), &len), 0);
    Bytes out(len);
    krb5_data in{KV5M_DATA, static_cast<unsigned>(p.size()),
                 reinterpret_cast<char*>(const_cast<uint8_t*>(p.data()))};
    krb5_enc_data enc{};
    enc.ciphertext.data = reinterpret_cast<char*>(out.data());
    enc.ciphertext.length = static_cast<unsigned>(out.size());
    EXPECT_EQ(krb5_c_encrypt(ctx_, &kb, usage, nullptr, &in, &enc), 0);
    out.resize(enc.ciphertext.length);
    return out;
  }

  // krb5_c_decrypt; empty and *ok false on failure.
  Bytes Decrypt(const Bytes& key, krb5_keyusage usage, const Bytes& c, bool* ok) {
    krb5_keyblock kb = Key(key);
    krb5_enc_data enc{};
    enc.enctype = kb.enctype;
    enc.ciphertext.data = reinterpret_cast<char*>(const_cast<uint8_t*>(c.data()));
    enc.ciphertext.length = static_cast<unsigned>(c.size());
    Bytes out(c.size());
    krb5_data d{KV5M_DATA, static_cast<unsigned>(out.size()), reinterpret_cast<char*>(out.data())};
    *ok = krb5_c_decrypt(ctx_, &kb, usage, nullptr, &enc, &d) == 0;
    out.resize(*ok ? d.length : 0);
    return out;
  }

  krb5_context ctx_ = nullptr;
};

Bytes Cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(Krb5, CircuitsAgreeWithKrb5InTheClear) {
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    for (size_t plen : {0, 1, 15, 16, 28, 40, 284}) {
      const size_t n = 16 + plen;  // confounder || plaintext
      std::vector<Bytes> keys, pts, confs, dec_in, enc_in;
      for (int l = 0; l < 4; ++l) {
        keys.push_back(Random(keylen));
        pts.push_back(Random(plen));
        confs.push_back(Random(16));
        const uint32_t usage = 1 + 2 * l;
        const UsageMaterial m = *DealUsage(keys[l], usage);
        dec_in.push_back(Cat(m.bytes, Encrypt(keys[l], usage, pts[l])));
        enc_in.push_back(Cat(m.bytes, Cat(confs[l], pts[l])));
      }
      const auto d = testing::RunClear(*DecryptProgram(nr, n), dec_in);
      const auto e = testing::RunClear(*EncryptProgram(nr, n), enc_in);
      for (size_t l = 0; l < keys.size(); ++l) {
        ASSERT_EQ(d[l].size(), n + 1);
        EXPECT_EQ(d[l][n], 0) << "tag mismatch: " << keylen << " " << plen;
        EXPECT_EQ(Bytes(d[l].begin() + 16, d[l].begin() + n), pts[l]);
        bool ok = false;
        EXPECT_EQ(Decrypt(keys[l], 1 + 2 * l, e[l], &ok), pts[l]) << keylen << " " << plen;
        EXPECT_TRUE(ok);
      }
    }
  }
}

// A batch of three logins on shares, malicious mode: the timestamp (usage
// 1) from krb5_c_encrypt decrypted with its tag checked, the reply (usage
// 3) encrypted for krb5_c_decrypt under a confounder no one knows: random
// shares from the servers' PRSS.
TEST_F(Krb5, LoginOnSharesAgreesWithKrb5) {
  ::kmpc::testing::Rep3Cluster cl;
  const std::array<protocol::Rep3*, 3> rep3 = {cl.rep3[0].get(), cl.rep3[1].get(),
                                               cl.rep3[2].get()};
  std::vector<Bytes> keys, ts, reply;
  std::vector<Views> dec_in, enc_in;
  for (int l = 0; l < 3; ++l) {
    keys.push_back(Random(32));
    ts.push_back(Random(28));
    reply.push_back(Random(284));
    dec_in.push_back(testing::Concat({testing::DealViews(DealUsage(keys[l], 1)->bytes),
                                      testing::PublicViews(Encrypt(keys[l], 1, ts[l]))}));
    Views conf;
    for (int i = 0; i < 3; ++i) {
      for (auto& comp : conf[i].comp) comp.resize(16);
      cl.prss[i]->RandomShares(conf[i].comp[0].data(), conf[i].comp[1].data(), 16);
    }
    enc_in.push_back(testing::Concat({testing::DealViews(DealUsage(keys[l], 3)->bytes), conf,
                                      testing::DealViews(reply[l])}));
  }
  std::array<absl::Status, 3> st;
  const auto d = testing::RunShared(rep3, *DecryptProgram(14, 44), dec_in, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  const auto e = testing::RunShared(rep3, *EncryptProgram(14, 300), enc_in, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(d.size(), 3u);
  ASSERT_EQ(e.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(d[l][44], 0);
    EXPECT_EQ(ToHex(Bytes(d[l].begin() + 16, d[l].begin() + 44)), ToHex(ts[l]));
    bool ok = false;
    EXPECT_EQ(ToHex(Decrypt(keys[l], 3, e[l], &ok)), ToHex(reply[l]));
    EXPECT_TRUE(ok);
  }
}

// krb5_c_make_checksum (hmac-sha1-96-aes128/256) and krb5_c_prf against
// the checksum and PRF programs on shares, malicious mode, a key per lane.
TEST_F(Krb5, ChecksumAndPrfOnSharesAgreeWithKrb5) {
  ::kmpc::testing::Rep3Cluster cl;
  const std::array<protocol::Rep3*, 3> rep3 = {cl.rep3[0].get(), cl.rep3[1].get(),
                                               cl.rep3[2].get()};
  for (size_t keylen : {16, 32}) {
    std::vector<Bytes> want_ck, want_prf;
    std::vector<Views> ck_in, prf_in;
    for (int l = 0; l < 3; ++l) {
      const Bytes key = Random(keylen), data = Random(45);
      krb5_keyblock kb = Key(key);
      krb5_data in{KV5M_DATA, static_cast<unsigned>(data.size()),
                   reinterpret_cast<char*>(const_cast<uint8_t*>(data.data()))};
      krb5_checksum ck{};
      ASSERT_EQ(krb5_c_make_checksum(ctx_, 0, &kb, 7, &in, &ck), 0);
      want_ck.emplace_back(ck.contents, ck.contents + ck.length);
      krb5_free_checksum_contents(ctx_, &ck);
      Bytes prf(16);
      krb5_data out{KV5M_DATA, 16, reinterpret_cast<char*>(prf.data())};
      ASSERT_EQ(krb5_c_prf(ctx_, &kb, &in, &out), 0);
      want_prf.push_back(prf);
      ck_in.push_back(testing::Concat(
          {testing::DealViews(DealChecksum(key, 7)->bytes), testing::PublicViews(data)}));
      Bytes h(20);
      SHA1(data.data(), data.size(), h.data());
      prf_in.push_back(testing::Concat({testing::DealViews(DealPrf(key)->bytes),
                                        testing::PublicViews(Bytes(h.begin(), h.begin() + 16))}));
    }
    std::array<absl::Status, 3> st;
    const auto ck = testing::RunShared(rep3, *ChecksumProgram(45), ck_in, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    const auto prf = testing::RunShared(rep3, *PrfProgram(keylen == 16 ? 10 : 14), prf_in, true, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    for (size_t l = 0; l < 3; ++l) {
      EXPECT_EQ(ToHex(ck[l]), ToHex(want_ck[l])) << keylen;
      EXPECT_EQ(ToHex(prf[l]), ToHex(want_prf[l])) << keylen;
    }
  }
}

// The PA-REQ-ENC-PA-REP splice (RFC 6806 section 11, cts.h
// SpliceEncryptProgram) against MIT's code: the reply decrypts with
// krb5_c_decrypt (usage 3) to P with krb5_c_make_checksum(usage 56, D)
// at the offset, and krb5_c_verify_checksum accepts those 12 bytes as
// the checksum of D, as a client's PA-REQ-ENC-PA-REP check does.
class Krb5Splice : public Krb5 {
 protected:
  // D as the KDC module deals it: with its HMAC inner padding.
  static Bytes Padded(const Bytes& d) {
    const std::string pad = contract::SplicePadding(d.size());
    return Cat(d, Bytes(pad.begin(), pad.end()));
  }
  Bytes Checksum56(const Bytes& key, const Bytes& d) {
    krb5_keyblock kb = Key(key);
    krb5_data in{KV5M_DATA, static_cast<unsigned>(d.size()),
                 reinterpret_cast<char*>(const_cast<uint8_t*>(d.data()))};
    krb5_checksum ck{};
    EXPECT_EQ(krb5_c_make_checksum(ctx_, 0, &kb, 56, &in, &ck), 0);
    Bytes out(ck.contents, ck.contents + ck.length);
    krb5_free_checksum_contents(ctx_, &ck);
    return out;
  }
  bool Verifies56(const Bytes& key, const Bytes& d, const Bytes& sum) {
    krb5_keyblock kb = Key(key);
    krb5_data in{KV5M_DATA, static_cast<unsigned>(d.size()),
                 reinterpret_cast<char*>(const_cast<uint8_t*>(d.data()))};
    krb5_checksum ck{};
    ck.magic = KV5M_CHECKSUM;
    ck.checksum_type = key.size() == 16 ? CKSUMTYPE_HMAC_SHA1_96_AES128
                                        : CKSUMTYPE_HMAC_SHA1_96_AES256;
    ck.length = static_cast<unsigned>(sum.size());
    ck.contents = const_cast<krb5_octet*>(sum.data());
    krb5_boolean valid = false;
    EXPECT_EQ(krb5_c_verify_checksum(ctx_, &kb, 56, &in, &ck, &valid), 0);
    return valid;
  }
  // The spliced plaintext's check: it decrypts, P is `want` but for the
  // 12 bytes at off, which MIT accepts as D's usage-56 checksum.
  void ExpectReply(const Bytes& key, const Bytes& out, const Bytes& p, const Bytes& d,
                   size_t off) {
    bool ok = false;
    const Bytes back = Decrypt(key, 3, out, &ok);
    ASSERT_TRUE(ok) << "krb5_c_decrypt refused the spliced reply";
    ASSERT_EQ(back.size(), p.size());
    const Bytes sum(back.begin() + off, back.begin() + off + 12);
    EXPECT_EQ(ToHex(sum), ToHex(Checksum56(key, d)));
    EXPECT_TRUE(Verifies56(key, d, sum));
    Bytes rest = back;
    std::fill(rest.begin() + off, rest.begin() + off + 12, 0);
    EXPECT_EQ(ToHex(rest), ToHex(p));
  }
};

TEST_F(Krb5Splice, SplicedReplyInTheClearAgreesWithKrb5) {
  struct {
    size_t plen, m, off;
  } shapes[] = {{284, 250, 272}, {12, 1, 0}, {100, 64, 37}, {300, 190, 150}};
  for (size_t keylen : {16, 32}) {
    const int nr = keylen == 16 ? 10 : 14;
    for (const auto& sh : shapes) {
      const auto prog =
          SpliceEncryptProgram(nr, 16 + sh.plen, contract::SpliceDealtBytes(sh.m), sh.off);
      ASSERT_TRUE(prog.ok()) << prog.status();
      std::vector<Bytes> keys, ps, ds, in;
      for (int l = 0; l < 3; ++l) {
        keys.push_back(Random(keylen));
        Bytes p = Random(sh.plen);
        std::fill(p.begin() + sh.off, p.begin() + sh.off + 12, 0);
        ps.push_back(p);
        ds.push_back(Random(sh.m));
        in.push_back(Cat(Cat(DealUsage(keys[l], 3)->bytes, DealChecksum(keys[l], 56)->bytes),
                         Cat(Cat(Random(16), p), Padded(ds[l]))));
      }
      const auto out = testing::RunClear(*prog, in);
      for (size_t l = 0; l < keys.size(); ++l) {
        SCOPED_TRACE(::testing::Message() << keylen << " " << sh.plen << " " << sh.m << " "
                                          << sh.off << " lane " << l);
        ASSERT_EQ(out[l].size(), 16 + sh.plen + 12);
        ExpectReply(keys[l], out[l], ps[l], ds[l], sh.off);
      }
    }
  }
}

// Three logins' spliced replies on shares, malicious mode, beside a plain
// reply in the same rounds: the confounders are PRSS shares nobody knows,
// P and D fresh shares. The requests' lengths differ (250, 280, 311
// bytes) within one SHA-1 block count, and one program per key size
// serves them all.
TEST_F(Krb5Splice, SplicedReplyOnSharesAgreesWithKrb5) {
  ::kmpc::testing::Rep3Cluster cl;
  const std::array<protocol::Rep3*, 3> rep3 = {cl.rep3[0].get(), cl.rep3[1].get(),
                                               cl.rep3[2].get()};
  auto conf = [&] {
    Views v;
    for (int i = 0; i < 3; ++i) {
      for (auto& comp : v[i].comp) comp.resize(16);
      cl.prss[i]->RandomShares(v[i].comp[0].data(), v[i].comp[1].data(), 16);
    }
    return v;
  };
  constexpr size_t kP = 284, kOff = kP - 12;
  constexpr size_t kM[3] = {250, 280, 311};
  const size_t dealt = contract::SpliceDealtBytes(kM[0]);
  for (size_t m : kM) ASSERT_EQ(contract::SpliceDealtBytes(m), dealt);
  std::vector<Bytes> keys, ps, ds;
  for (int l = 0; l < 3; ++l) {
    keys.push_back(Random(l == 1 ? 16 : 32));
    Bytes p = Random(kP);
    std::fill(p.begin() + kOff, p.end(), 0);
    ps.push_back(p);
    ds.push_back(Random(kM[l]));
  }
  const Bytes plain_key = Random(32), plain = Random(kP);
  std::vector<Views> in256, in128;
  for (int l = 0; l < 3; ++l) {
    (l == 1 ? in128 : in256)
        .push_back(testing::Concat({testing::DealViews(DealUsage(keys[l], 3)->bytes),
                                    testing::DealViews(DealChecksum(keys[l], 56)->bytes), conf(),
                                    testing::DealViews(ps[l]), testing::DealViews(Padded(ds[l]))}));
  }
  const Views plain_in = testing::Concat(
      {testing::DealViews(DealUsage(plain_key, 3)->bytes), conf(), testing::DealViews(plain)});
  const auto s256 = SpliceEncryptProgram(14, 16 + kP, dealt, kOff);
  const auto s128 = SpliceEncryptProgram(10, 16 + kP, dealt, kOff);
  const auto e256 = EncryptProgram(14, 16 + kP);
  ASSERT_TRUE(s256.ok() && s128.ok() && e256.ok());
  std::array<absl::Status, 3> st;
  const auto out = testing::RunSharedJobs(rep3, {&*s256, &*s128, &*e256},
                                          {in256, in128, {plain_in}}, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), 3u);
  ExpectReply(keys[0], out[0][0], ps[0], ds[0], kOff);
  ExpectReply(keys[2], out[0][1], ps[2], ds[2], kOff);
  ExpectReply(keys[1], out[1][0], ps[1], ds[1], kOff);
  bool ok = false;
  EXPECT_EQ(ToHex(Decrypt(plain_key, 3, out[2][0], &ok)), ToHex(plain));
  EXPECT_TRUE(ok);
}

// FAST (RFC 6113): the encrypted challenge and the strengthened reply key
// are KRB-FX-CF2(A, K) with A a key the KDC holds (armor key, strengthen
// key) and K the client's. The KDC's half X = krb5_c_prfplus(A, pepper_a)
// in A's size; the circuit adds PRF+(K, pepper_k) from K's dealt PRF
// material and derives the usage's keys. Against krb5_c_fx_cf2_simple and
// krb5_c_encrypt / krb5_c_decrypt under the CF2 key, every size of K and A.
struct FastCase {
  uint32_t usage;
  const char* pepper_a;
  bool decrypt;  // the KDC decrypts the client's (54), else it encrypts
};
constexpr FastCase kFastCases[] = {{54, "clientchallengearmor", true},
                                   {55, "kdcchallengearmor", false},
                                   {3, "strengthenkey", false}};

class Krb5Fast : public Krb5 {
 protected:
  // krb5_c_prfplus(a, pepper) in a's size: the KDC's half.
  Bytes KdcHalf(const Bytes& a, const char* pepper) {
    krb5_keyblock kb = Key(a);
    Bytes out(a.size());
    krb5_data in{KV5M_DATA, static_cast<unsigned>(strlen(pepper)), const_cast<char*>(pepper)};
    krb5_data o{KV5M_DATA, static_cast<unsigned>(out.size()), reinterpret_cast<char*>(out.data())};
    EXPECT_EQ(krb5_c_prfplus(ctx_, &kb, &in, &o), 0);
    return out;
  }
  // krb5_c_fx_cf2_simple(a, pepper_a, k, Cf2Pepper(usage)).
  Bytes Cf2(const Bytes& a, const char* pepper_a, const Bytes& k, uint32_t usage) {
    krb5_keyblock ka = Key(a), kk = Key(k), *out = nullptr;
    const std::string pk(Cf2Pepper(usage));
    EXPECT_EQ(krb5_c_fx_cf2_simple(ctx_, &ka, pepper_a, &kk, pk.c_str(), &out), 0);
    Bytes r(out->contents, out->contents + out->length);
    krb5_free_keyblock(ctx_, out);
    return r;
  }
};

TEST_F(Krb5Fast, FastKeysInTheClearAgreeWithKrb5) {
  for (size_t klen : {16, 32}) {
    for (size_t alen : {16, 32}) {
      for (const FastCase& fc : kFastCases) {
        const Bytes k = Random(klen), a = Random(alen), pt = Random(fc.usage == 3 ? 200 : 28);
        const Bytes cf2 = Cf2(a, fc.pepper_a, k, fc.usage);
        ASSERT_EQ(cf2.size(), alen);
        const Bytes lane0 = Cat(DealPrf(k)->bytes, KdcHalf(a, fc.pepper_a));
        const int nr_k = klen == 16 ? 10 : 14;
        const size_t n = 16 + pt.size();
        if (fc.decrypt) {
          const auto p = Cf2DecryptProgram(nr_k, alen, fc.usage, n);
          ASSERT_TRUE(p.ok()) << p.status();
          const auto d = testing::RunClear(*p, {Cat(lane0, Encrypt(cf2, fc.usage, pt))});
          ASSERT_EQ(d[0].size(), n + 1);
          EXPECT_EQ(d[0][n], 0) << klen << " " << alen;
          EXPECT_EQ(ToHex(Bytes(d[0].begin() + 16, d[0].begin() + n)), ToHex(pt));
          // Under K itself (no armor), or another armor key, the tag fails.
          const Bytes other = Encrypt(Cf2(Random(alen), fc.pepper_a, k, fc.usage), fc.usage, pt);
          EXPECT_EQ(testing::RunClear(*p, {Cat(lane0, other)})[0][n] & 1, 1);
        } else {
          const auto p = Cf2EncryptProgram(nr_k, alen, fc.usage, n);
          ASSERT_TRUE(p.ok()) << p.status();
          const auto e = testing::RunClear(*p, {Cat(lane0, Cat(Random(16), pt))});
          bool ok = false;
          EXPECT_EQ(ToHex(Decrypt(cf2, fc.usage, e[0], &ok)), ToHex(pt)) << klen << " " << alen;
          EXPECT_TRUE(ok);
        }
      }
    }
  }
  // Not a FAST usage: refused.
  EXPECT_FALSE(Cf2EncryptProgram(14, 32, 1, 60).ok());
  EXPECT_FALSE(Cf2DecryptProgram(14, 24, 54, 60).ok());
}

// One FAST login on shares, malicious mode: the client's challenge (54)
// decrypted, the KDC's (55) and the reply under the strengthened key (3)
// encrypted, the three programs in the same rounds, the KDC's halves and
// the reply as fresh shares, the confounders PRSS shares.
TEST_F(Krb5Fast, FastLoginOnSharesAgreesWithKrb5) {
  ::kmpc::testing::Rep3Cluster cl;
  const std::array<protocol::Rep3*, 3> rep3 = {cl.rep3[0].get(), cl.rep3[1].get(),
                                               cl.rep3[2].get()};
  const Bytes k = Random(32), armor = Random(32), strengthen = Random(32);
  const Bytes ts = Random(28), kdc_ts = Random(28), reply = Random(284);
  const Views prf = testing::DealViews(DealPrf(k)->bytes);
  auto conf = [&] {
    Views v;
    for (int i = 0; i < 3; ++i) {
      for (auto& comp : v[i].comp) comp.resize(16);
      cl.prss[i]->RandomShares(v[i].comp[0].data(), v[i].comp[1].data(), 16);
    }
    return v;
  };
  const Views dec = testing::Concat(
      {prf, testing::DealViews(KdcHalf(armor, "clientchallengearmor")),
       testing::PublicViews(Encrypt(Cf2(armor, "clientchallengearmor", k, 54), 54, ts))});
  const Views kdc = testing::Concat(
      {prf, testing::DealViews(KdcHalf(armor, "kdcchallengearmor")), conf(),
       testing::DealViews(kdc_ts)});
  const Views rep = testing::Concat(
      {prf, testing::DealViews(KdcHalf(strengthen, "strengthenkey")), conf(),
       testing::DealViews(reply)});
  const auto pd = Cf2DecryptProgram(14, 32, 54, 44);
  const auto pk = Cf2EncryptProgram(14, 32, 55, 44);
  const auto pr = Cf2EncryptProgram(14, 32, 3, 300);
  ASSERT_TRUE(pd.ok() && pk.ok() && pr.ok());
  std::array<absl::Status, 3> st;
  const auto out = testing::RunSharedJobs(rep3, {&*pd, &*pk, &*pr}, {{dec}, {kdc}, {rep}},
                                          true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0][0][44], 0);
  EXPECT_EQ(ToHex(Bytes(out[0][0].begin() + 16, out[0][0].begin() + 44)), ToHex(ts));
  bool ok = false;
  EXPECT_EQ(ToHex(Decrypt(Cf2(armor, "kdcchallengearmor", k, 55), 55, out[1][0], &ok)),
            ToHex(kdc_ts));
  EXPECT_TRUE(ok);
  EXPECT_EQ(ToHex(Decrypt(Cf2(strengthen, "strengthenkey", k, 3), 3, out[2][0], &ok)),
            ToHex(reply));
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace kmpc::cts
