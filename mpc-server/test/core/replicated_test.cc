// Replicated sharing: dealing, opening, local algebra, copies checked.
#include "share/replicated.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kmpc::share {
namespace {

using ::kmpc::testing::Random;

TEST(Share, DealOpenRoundTrip) {
  for (size_t n : {0, 1, 16, 1000}) {
    const auto v = Random(n);
    auto views = Deal(v);
    ASSERT_TRUE(views.ok());
    auto opened = Open(*views);
    ASSERT_TRUE(opened.ok());
    EXPECT_EQ(*opened, v);
  }
}

TEST(Share, FreshRandomnessEachDeal) {
  const auto v = Random(32);
  auto a = Deal(v), b = Deal(v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)[0].comp[0], (*b)[0].comp[0]);
  // No single view equals the secret in either component.
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE((*a)[i].comp[0], v);
    EXPECT_NE((*a)[i].comp[1], v);
  }
}

TEST(Share, CopiesMustAgree) {
  auto views = Deal(Random(16));
  ASSERT_TRUE(views.ok());
  (*views)[1].comp[1][3] ^= 1;  // party 1's copy of s_2
  EXPECT_EQ(Open(*views).status().code(), absl::StatusCode::kDataLoss);
}

TEST(Share, LocalAlgebra) {
  const auto x = Random(16), y = Random(16), c = Random(16);
  auto vx = Deal(x), vy = Deal(y);
  ASSERT_TRUE(vx.ok() && vy.ok());
  for (int i = 0; i < 3; ++i) {
    XorInPlace((*vx)[i], (*vy)[i]);
    XorPublic(i, (*vx)[i], c);
  }
  auto opened = Open(*vx);
  ASSERT_TRUE(opened.ok());
  for (int k = 0; k < 16; ++k) EXPECT_EQ((*opened)[k], x[k] ^ y[k] ^ c[k]);
  for (int i = 0; i < 3; ++i) Not(i, (*vx)[i]);
  opened = Open(*vx);
  ASSERT_TRUE(opened.ok());
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ((*opened)[k], static_cast<uint8_t>(~(x[k] ^ y[k] ^ c[k])));
  }
}

TEST(Share, OpenRejectsLengthMismatch) {
  auto views = Deal(Random(16));
  ASSERT_TRUE(views.ok());
  (*views)[2].comp[0].pop_back();
  EXPECT_FALSE(Open(*views).ok());
}

}  // namespace
}  // namespace kmpc::share
