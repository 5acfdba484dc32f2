// FIPS-197 key expansion in the clear (aes/key_expansion.h) against the
// standard's Appendix A examples, and its refusal of other key sizes.
#include "aes/key_expansion.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "util/hex.h"

namespace kmpc::aes {
namespace {

std::vector<uint8_t> Hex(const std::string& h) {
  std::string b;
  EXPECT_TRUE(util::HexToBytes(h, &b)) << h;
  return std::vector<uint8_t>(b.begin(), b.end());
}

std::string RoundKeyHex(const std::vector<uint8_t>& w, int round) {
  return absl::BytesToHexString(std::string(
      reinterpret_cast<const char*>(w.data()) + 16 * round, 16));
}

TEST(KeyExpansionTest, Aes128MatchesFips197AppendixA1) {
  auto w = ExpandKey(Hex("2b7e151628aed2a6abf7158809cf4f3c"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 11u * 16);
  EXPECT_EQ(RoundKeyHex(*w, 0), "2b7e151628aed2a6abf7158809cf4f3c");
  // w[4..7] and w[40..43] of Appendix A.1.
  EXPECT_EQ(RoundKeyHex(*w, 1), "a0fafe1788542cb123a339392a6c7605");
  EXPECT_EQ(RoundKeyHex(*w, 10), "d014f9a8c9ee2589e13f0cc8b6630ca6");
}

TEST(KeyExpansionTest, Aes256MatchesFips197AppendixA3) {
  auto w = ExpandKey(Hex("603deb1015ca71be2b73aef0857d7781"
                         "1f352c073b6108d72d9810a30914dff4"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 15u * 16);
  // w[8..11] and w[56..59] of Appendix A.3.
  EXPECT_EQ(RoundKeyHex(*w, 2), "9ba354118e6925afa51a8b5f2067fcde");
  EXPECT_EQ(RoundKeyHex(*w, 14), "fe4890d1e6188d0b046df344706c631e");
}

TEST(KeyExpansionTest, OtherKeySizesAreRefused) {
  for (size_t n : {0u, 15u, 17u, 24u, 31u, 33u}) {
    auto w = ExpandKey(std::vector<uint8_t>(n, 0x42));
    EXPECT_FALSE(w.ok()) << n << " bytes";
  }
}

TEST(KeyExpansionTest, SboxIsFips197Figure7) {
  EXPECT_EQ(kSbox[0x00], 0x63);
  EXPECT_EQ(kSbox[0x53], 0xed);  // the standard's worked example
  EXPECT_EQ(kSbox[0xff], 0x16);
  // A permutation of the bytes.
  std::vector<int> seen(256, 0);
  for (int i = 0; i < 256; ++i) ++seen[kSbox[i]];
  for (int i = 0; i < 256; ++i) EXPECT_EQ(seen[i], 1) << i;
}

}  // namespace
}  // namespace kmpc::aes
