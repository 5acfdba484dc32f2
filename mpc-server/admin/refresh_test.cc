// The refresh's key-id lineage (admin/refresh.h): a new id carries its
// origin, so that a re-run recognises the pairs an earlier run left.
// (RefreshKeys itself runs against real servers and a KDB in
// integration-tests/test_refresh.py.)
#include "admin/refresh.h"

#include <gtest/gtest.h>

#include <string>

#include "contract.h"

namespace kmpc::admin {
namespace {

std::string KeyId(char fill) { return std::string(contract::kKeyIdSize, fill); }

TEST(RefreshIdTest, ANewIdCarriesItsOrigin) {
  const std::string x = KeyId('x');
  const std::string n = NewRefreshId(x);
  ASSERT_EQ(n.size(), contract::kKeyIdSize);
  EXPECT_TRUE(IsRefreshOf(n, x));
  EXPECT_FALSE(IsRefreshOf(n, KeyId('y')));
  EXPECT_FALSE(IsRefreshOf(x, x));
  // Random in its first half: two refreshes of x are two ids.
  const std::string m = NewRefreshId(x);
  EXPECT_NE(m, n);
  EXPECT_TRUE(IsRefreshOf(m, x));
  EXPECT_FALSE(IsRefreshOf(n.substr(1), x));  // not an id
}

}  // namespace
}  // namespace kmpc::admin
