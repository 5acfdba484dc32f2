// AES both ways as circuits: the S-box and its inverse on all 256 inputs,
// FIPS-197 appendix C, OpenSSL with a key per lane, decryption among three
// parties; the ANDs and AND depth of a block, printed and asserted.
#include "cts/aes_circuit.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "aes/key_expansion.h"
#include "cts_testing.h"
#include "rep3_cluster.h"

namespace kmpc::cts {
namespace {

using ::kmpc::testing::Hex;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::ToHex;
using testing::Bytes;

TEST(AesCircuit, SboxAndInverseOnAllInputs) {
  Circuit c;
  const Bits x = c.Inputs(8);
  c.Output(SubByte(c, x));
  c.Output(InvSubByte(c, x));
  const Program p = c.Compile();
  EXPECT_EQ(p.depth, 4);
  std::vector<Bytes> lanes;
  for (int v = 0; v < 256; ++v) lanes.push_back({static_cast<uint8_t>(v)});
  const auto out = testing::RunClear(p, lanes);
  uint8_t inv[256];
  for (int v = 0; v < 256; ++v) inv[aes::kSbox[v]] = static_cast<uint8_t>(v);
  for (int v = 0; v < 256; ++v) {
    ASSERT_EQ(out[v][0], aes::kSbox[v]) << v;
    ASSERT_EQ(out[v][1], inv[v]) << v;
  }
}

// The 32-AND S-box (SEA 2010) the CBC encryptions take: the same table.
TEST(AesCircuit, FewerAndsSboxOnAllInputs) {
  Circuit c;
  c.Output(SubByte(c, c.Inputs(8), Sbox::kFewerAnds));
  const Program p = c.Compile();
  EXPECT_EQ(p.depth, 6);
  EXPECT_EQ(p.ands, 32u);
  std::vector<Bytes> lanes;
  for (int v = 0; v < 256; ++v) lanes.push_back({static_cast<uint8_t>(v)});
  const auto out = testing::RunClear(p, lanes);
  for (int v = 0; v < 256; ++v) ASSERT_EQ(out[v][0], aes::kSbox[v]) << v;
}

// Inputs: round keys || block; outputs the block.
Program BlockProgram(int nr, bool decrypt, Sbox v = Sbox::kDepth4) {
  Circuit c;
  RoundKeys k;
  k.nr = nr;
  k.bits = c.Inputs(128 * (nr + 1));
  const Bits in = c.Inputs(128);
  c.Output(decrypt ? AesDecryptBlock(c, k, in) : AesEncryptBlock(c, k, in, v));
  return c.Compile();
}

Bytes Lane(const Bytes& key, const Bytes& block) {
  Bytes in = *aes::ExpandKey(key);
  in.insert(in.end(), block.begin(), block.end());
  return in;
}

TEST(AesCircuit, Fips197AppendixC) {
  const Bytes pt = Hex("00112233445566778899aabbccddeeff");
  const Bytes k128 = Hex("000102030405060708090a0b0c0d0e0f");
  const Bytes k256 = Hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  const Bytes c128 = Hex("69c4e0d86a7b0430d8cdb78070b4c55a");
  const Bytes c256 = Hex("8ea2b7ca516745bfeafc49904b496089");
  EXPECT_EQ(testing::RunClear(BlockProgram(10, false), {Lane(k128, pt)})[0], c128);
  EXPECT_EQ(testing::RunClear(BlockProgram(14, false), {Lane(k256, pt)})[0], c256);
  EXPECT_EQ(testing::RunClear(BlockProgram(10, false, Sbox::kFewerAnds), {Lane(k128, pt)})[0],
            c128);
  EXPECT_EQ(testing::RunClear(BlockProgram(14, false, Sbox::kFewerAnds), {Lane(k256, pt)})[0],
            c256);
  EXPECT_EQ(testing::RunClear(BlockProgram(10, true), {Lane(k128, c128)})[0], pt);
  EXPECT_EQ(testing::RunClear(BlockProgram(14, true), {Lane(k256, c256)})[0], pt);
}

TEST(AesCircuit, MatchesOpensslWithAKeyPerLane) {
  for (int nr : {10, 14}) {
    const Program enc = BlockProgram(nr, false), dec = BlockProgram(nr, true);
    std::vector<Bytes> keys, pts, enc_in, dec_in;
    for (int l = 0; l < 70; ++l) {
      keys.push_back(Random(nr == 10 ? 16 : 32));
      pts.push_back(Random(16));
      enc_in.push_back(Lane(keys[l], pts[l]));
      const auto ct = OpensslAes(keys[l], pts[l].data());
      dec_in.push_back(Lane(keys[l], Bytes(ct.begin(), ct.end())));
    }
    const auto e = testing::RunClear(enc, enc_in), d = testing::RunClear(dec, dec_in);
    for (size_t l = 0; l < keys.size(); ++l) {
      const auto ct = OpensslAes(keys[l], pts[l].data());
      ASSERT_EQ(e[l], Bytes(ct.begin(), ct.end())) << nr << " lane " << l;
      ASSERT_EQ(d[l], pts[l]) << nr << " lane " << l;
    }
  }
}

// The key schedule on circuit values (the FAST keys are derived on shares)
// against the dealer's clear expansion (aes/key_expansion.h, itself checked
// against FIPS-197 appendix A), a key per lane; its S-boxes are its ANDs.
TEST(AesCircuit, KeyExpansionMatchesTheClearOne) {
  for (size_t klen : {size_t{16}, size_t{32}}) {
    Circuit c;
    const RoundKeys k = ExpandKeyCircuit(c, c.Inputs(8 * klen));
    c.Output(k.bits);
    const Program p = c.Compile();
    std::vector<Bytes> keys;
    for (int l = 0; l < 70; ++l) keys.push_back(Random(klen));
    const auto out = testing::RunClear(p, keys);
    for (size_t l = 0; l < keys.size(); ++l)
      ASSERT_EQ(out[l], *aes::ExpandKey(keys[l])) << klen << " lane " << l;
    const size_t sboxes = klen == 16 ? 40 : 52;
    std::printf("AES-%zu key expansion: %zu ANDs, AND depth %d\n", 8 * klen, p.ands, p.depth);
    EXPECT_EQ(p.ands, 34 * sboxes);
    EXPECT_EQ(p.depth, klen == 16 ? 40 : 52);
    testing::ExpectCounted(p);
  }
}

TEST(AesCircuit, Figures) {
  for (int nr : {10, 14}) {
    for (bool decrypt : {false, true}) {
      const Program p = BlockProgram(nr, decrypt);
      std::printf("AES-%d %s block: %zu ANDs, %zu XORs, AND depth %d\n", nr == 10 ? 128 : 256,
                  decrypt ? "decryption" : "encryption", p.ands, p.xors, p.depth);
      testing::ExpectCounted(p);
      EXPECT_EQ(p.depth, 4 * nr);
      EXPECT_EQ(p.ands, size_t{16} * 34 * nr);
    }
    const Program f = BlockProgram(nr, false, Sbox::kFewerAnds);
    std::printf("AES-%d encryption block, 32-AND S-box: %zu ANDs, AND depth %d\n",
                nr == 10 ? 128 : 256, f.ands, f.depth);
    testing::ExpectCounted(f);
    EXPECT_EQ(f.depth, 6 * nr);
    EXPECT_EQ(f.ands, size_t{16} * 32 * nr);
  }
}

// The inverse cipher among three parties: shared round keys, a public
// ciphertext block (shared as (c, 0, 0)); semi-honest and malicious.
TEST(AesCircuit, DecryptionOnShares) {
  ::kmpc::testing::Rep3Cluster cl;
  const Program p = BlockProgram(14, true);
  for (bool malicious : {false, true}) {
    std::vector<Bytes> keys, pts;
    std::vector<testing::Views> lanes;
    for (int l = 0; l < 5; ++l) {
      keys.push_back(Random(32));
      pts.push_back(Random(16));
      const auto ct = OpensslAes(keys[l], pts[l].data());
      lanes.push_back(testing::Concat({testing::DealViews(*aes::ExpandKey(keys[l])),
                                       testing::PublicViews(Bytes(ct.begin(), ct.end()))}));
    }
    std::array<absl::Status, 3> st;
    const auto out = testing::RunShared({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()},
                                        p, lanes, malicious, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), pts.size());
    for (size_t l = 0; l < pts.size(); ++l) EXPECT_EQ(ToHex(out[l]), ToHex(pts[l]));
  }
}

}  // namespace
}  // namespace kmpc::cts
