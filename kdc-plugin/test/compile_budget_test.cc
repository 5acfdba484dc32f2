// compile_budget.h: the token bucket and the recently proven set that the
// KDC module's compile budget (gate_book.h) and kadmind's ticket
// decrypter (kdc-plugin/dealer/ticket_decrypt.h) share.
#include "compile_budget.h"

#include <gtest/gtest.h>

#include <utility>

namespace kmpc::kdc {
namespace {

// Two tokens to start with, one per second back, never above the burst.
TEST(BudgetTest, TakesUpToTheBurstAndRefillsAtItsRate) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  Budget b{2, 2, 1, absl::Time()};
  EXPECT_TRUE(b.Take(t0));
  EXPECT_TRUE(b.Take(t0));
  EXPECT_FALSE(b.Take(t0));
  EXPECT_TRUE(b.Take(t0 + absl::Seconds(1)));   // one token back after a second
  EXPECT_FALSE(b.Take(t0 + absl::Seconds(1)));
  EXPECT_TRUE(b.Take(t0 + absl::Seconds(60)));  // never past the burst
  EXPECT_TRUE(b.Take(t0 + absl::Seconds(60)));
  EXPECT_FALSE(b.Take(t0 + absl::Seconds(60)));
  b.GiveBack(5);
  EXPECT_EQ(b.tokens, 2);
}

TEST(BudgetTest, AClockStepBackwardsRefillsNothing) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  Budget b{1, 1, 1, absl::Time()};
  EXPECT_TRUE(b.Take(t0));
  EXPECT_FALSE(b.Take(t0 - absl::Hours(1)));
  EXPECT_FALSE(b.Take(t0 - absl::Hours(1) + absl::Milliseconds(500)));
}

TEST(RecentlyProvenTest, TheLeastRecentlyProvenGoesFirst) {
  using Len = std::pair<int, size_t>;
  RecentlyProven<Len, 3> p;
  for (size_t n = 1; n <= 3; ++n) p.Prove({18, n});
  p.Prove({18, 1});  // now the most recent
  p.Prove({18, 4});  // pushes out {18, 2}
  EXPECT_EQ(p.size(), 3u);
  EXPECT_TRUE(p.Has({18, 1}));
  EXPECT_FALSE(p.Has({18, 2}));
  EXPECT_TRUE(p.Has({18, 3}) && p.Has({18, 4}));
  EXPECT_FALSE(p.Has({17, 4}));
  p.Forget({18, 3});
  EXPECT_FALSE(p.Has({18, 3}));
  EXPECT_EQ(p.size(), 2u);
  p.Clear();
  EXPECT_EQ(p.size(), 0u);
}

}  // namespace
}  // namespace kmpc::kdc
