// util/hex.h: hex decoding that refuses bad input, checked against absl's
// encoder (an independent implementation) both ways.
#include "util/hex.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "absl/strings/escaping.h"

namespace kmpc::util {
namespace {

TEST(HexToBytes, DecodesEveryByteBothCases) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string lower = absl::BytesToHexString(all);
  std::string out;
  ASSERT_TRUE(HexToBytes(lower, &out));
  EXPECT_EQ(out, all);
  std::string upper = lower;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(HexToBytes(upper, &out));
  EXPECT_EQ(out, all);
}

TEST(HexToBytes, EmptyIsEmpty) {
  std::string out = "x";
  ASSERT_TRUE(HexToBytes("", &out));
  EXPECT_TRUE(out.empty());
}

TEST(HexToBytes, RefusesOddLengthAndNonHex) {
  std::string out;
  EXPECT_FALSE(HexToBytes("abc", &out));
  EXPECT_TRUE(out.empty());
  for (const char* bad : {"0g", "g0", " 0", "0:", "zz", "0x"}) {
    EXPECT_FALSE(HexToBytes(bad, &out)) << bad;
    EXPECT_TRUE(out.empty()) << bad;
  }
  // A bad digit after good ones leaves nothing half-decoded.
  EXPECT_FALSE(HexToBytes("00112g", &out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kmpc::util
