// service/one_use_states.h, through its two kinds (EncryptStates,
// PadStates): the one-use states held between two KeyOps calls (an
// ENCRYPT's state for its FINALIZE, a pad for its Sign). Each is
// taken at most once (enctype.md invariants 2 and 6), never after its TTL,
// TakeAll is all-or-nothing, and the entry and memory budgets hold, with
// expired states swept so that they do not hold the budget.
#include "service/one_use_states.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace kmpc::service {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(10);

EncryptStates::Entry Fresh(uint32_t length, absl::Time created = absl::Now()) {
  EncryptStates::Entry e;
  e.state = std::make_shared<engine::EncryptState>();
  e.length = length;
  e.created = created;
  return e;
}

TEST(OneUseStatesTest, EachStateIsTakenOnce) {
  EncryptStates states(kTtl, 16, 1 << 20);
  ASSERT_TRUE(states.Put("batch/0", Fresh(40)).ok());
  EXPECT_EQ(states.size(), 1u);
  EXPECT_GT(states.bytes(), sizeof(engine::EncryptState));
  auto e = states.Take("batch/0");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->length, 40u);
  EXPECT_NE(e->state, nullptr);
  // A second FINALIZE of the same ENCRYPT finds nothing.
  EXPECT_EQ(states.Take("batch/0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(states.size(), 0u);
  EXPECT_EQ(states.bytes(), 0u);
  EXPECT_EQ(states.Take("never/0").status().code(), absl::StatusCode::kNotFound);
}

// A key holds one state: a second Put under it (a repeated batch id) is
// refused, and the first state stays, to be taken once.
TEST(OneUseStatesTest, PutNeverReplacesAState) {
  EncryptStates states(kTtl, 16, 1 << 20);
  ASSERT_TRUE(states.Put("batch/0", Fresh(40)).ok());
  const size_t bytes = states.bytes();
  absl::Status again = states.Put("batch/0", Fresh(7));
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(states.size(), 1u);
  EXPECT_EQ(states.bytes(), bytes);
  auto e = states.Take("batch/0");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->length, 40u);  // the first
  PadStates pads(kTtl, 16, 1 << 20);
  PadStates::Entry p;
  p.state = std::make_shared<engine::PadState>();
  p.created = absl::Now();
  ASSERT_TRUE(pads.Put("b/1", p).ok());
  EXPECT_EQ(pads.Put("b/1", p).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(pads.size(), 1u);
}

TEST(OneUseStatesTest, ExpiredStateIsRefusedAndDropped) {
  EncryptStates states(kTtl, 16, 1 << 20);
  ASSERT_TRUE(states.Put("old", Fresh(1, absl::Now() - 2 * kTtl)).ok());
  auto e = states.Take("old");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e.status().message(), "expired");
  EXPECT_EQ(states.size(), 0u);  // gone: a retry cannot take it either
  EXPECT_EQ(states.bytes(), 0u);
}

TEST(OneUseStatesTest, TakeAllIsAllOrNothing) {
  PadStates pads(kTtl, 16, 1 << 20);
  PadStates::Entry a, b, stale;
  for (auto* e : {&a, &b}) {
    e->state = std::make_shared<engine::PadState>();
    e->created = absl::Now();
  }
  stale.state = std::make_shared<engine::PadState>();
  stale.created = absl::Now() - 2 * kTtl;
  a.length = 1;
  b.length = 2;
  ASSERT_TRUE(pads.Put("a", a).ok());
  ASSERT_TRUE(pads.Put("b", b).ok());
  ASSERT_TRUE(pads.Put("stale", stale).ok());
  const size_t bytes = pads.bytes();
  // One unknown or expired key: nothing is taken.
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>{"a", "c"}, std::vector<std::string>{"b", "stale"}}) {
    auto all = pads.TakeAll(keys);
    EXPECT_EQ(all.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(all.status().message().find("PAD jobs awaiting Sign"), std::string::npos)
        << all.status();
    EXPECT_EQ(pads.size(), 3u);
    EXPECT_EQ(pads.bytes(), bytes);
  }
  auto all = pads.TakeAll({"b", "a"});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].length, 2u);  // in the order asked
  EXPECT_EQ((*all)[1].length, 1u);
  EXPECT_FALSE(pads.TakeAll({"a"}).ok());
  EXPECT_EQ(pads.size(), 1u);  // the stale one, until a sweep or Take
}

TEST(OneUseStatesTest, EntryBudget) {
  EncryptStates states(kTtl, 2, 1 << 20);
  ASSERT_TRUE(states.Put("x", Fresh(1)).ok());
  ASSERT_TRUE(states.Put("y", Fresh(2)).ok());
  absl::Status full = states.Put("z", Fresh(3));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "too many ENCRYPT jobs awaiting FINALIZE");
  // An existing key is refused as such (never replaced), full or not.
  EXPECT_EQ(states.Put("y", Fresh(4)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(states.size(), 2u);
  EXPECT_EQ(states.Take("y")->length, 2u);
  EXPECT_TRUE(states.Put("z", Fresh(3)).ok());
}

TEST(OneUseStatesTest, MemoryBudgetCountsEveryEntry) {
  // Measure one entry, then allow room for exactly two.
  size_t one = 0;
  {
    EncryptStates probe(kTtl, 16, 1 << 20);
    ASSERT_TRUE(probe.Put("k1", Fresh(1)).ok());
    one = probe.bytes();
  }
  EncryptStates states(kTtl, 16, 2 * one);
  ASSERT_TRUE(states.Put("k1", Fresh(1)).ok());
  ASSERT_TRUE(states.Put("k2", Fresh(1)).ok());
  EXPECT_EQ(states.bytes(), 2 * one);
  absl::Status full = states.Put("k3", Fresh(1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("the limit is"), std::string::npos) << full;
  states.Erase({"k1", "unknown"});
  EXPECT_EQ(states.bytes(), one);
  EXPECT_EQ(states.size(), 1u);
  EXPECT_TRUE(states.Put("k3", Fresh(1)).ok());
}

TEST(OneUseStatesTest, ExpiredStatesDoNotHoldTheBudget) {
  EncryptStates states(kTtl, 1, 1 << 20);
  // Put sweeps at most once a second, by the new entry's creation time.
  ASSERT_TRUE(states.Put("old", Fresh(1, absl::Now() - 3 * kTtl)).ok());
  ASSERT_TRUE(states.Put("new", Fresh(2)).ok()) << "the expired entry was not swept";
  EXPECT_EQ(states.size(), 1u);
  EXPECT_EQ(states.Take("new")->length, 2u);
  EXPECT_EQ(states.bytes(), 0u);
}

}  // namespace
}  // namespace kmpc::service
