// engine/refresh_agreement.h: the pairs' checks on the inputs, a party's
// view of a pair from its store, what three views decide (alike on every
// party), the rebuild's decision, and the agreement on three parties over
// the in-memory ring: the same pairs agreed, different requests refused.
#include "engine/refresh_agreement.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "contract.h"
#include "engine/agreement.h"
#include "rep3_cluster.h"
#include "test_util.h"

namespace kmpc::engine::refresh {
namespace {

using Bytes = std::vector<uint8_t>;
using ::kmpc::testing::RunParties;

std::string Id(char c) { return std::string(contract::kKeyIdSize, c); }

class RefreshAgreementTest : public ::testing::Test {
 protected:
  RefreshAgreementTest() {
    auto views = DealKey(Cipher::kAes128, Bytes(16, 6));
    EXPECT_TRUE(views.ok());
    for (int i = 0; i < 3; ++i) key_[i] = std::make_shared<const KeyShares>((*views)[i]);
  }
  // Party i's store: the old key under Id('o'), metadata "kvno 2".
  RefreshLookup Lookup(int i) {
    return [this, i](const RefreshItem& it) {
      RefreshSource s;
      if (it.old_key_id == Id('o') && key_[i] != nullptr) s.old_key = key_[i];
      s.public_meta = "kvno 2";
      s.new_id_taken = taken_[i];
      return s;
    };
  }
  Plan Look(int i, const RefreshItem& it) {
    Plan w;
    EXPECT_TRUE(LookUp(i, it, Lookup(i), w).ok());
    return w;
  }
  std::array<std::shared_ptr<const KeyShares>, 3> key_;
  std::array<bool, 3> taken_{};
  const RefreshItem item_{Id('o'), Id('n')};
};

TEST_F(RefreshAgreementTest, InputChecksFailThePairsAlike) {
  const std::vector<RefreshItem> items = {
      {Id('o'), Id('n')}, {"short", Id('x')}, {Id('p'), Id('o')}, {Id('q'), Id('n')}};
  std::vector<Plan> plan(items.size());
  CheckInputs(items, plan);
  EXPECT_EQ(plan[0].status, pb::JOB_OK);
  EXPECT_EQ(plan[1].status, pb::JOB_MALFORMED);  // an id of the wrong size
  EXPECT_TRUE(absl::StrContains(plan[2].detail, "old key id")) << plan[2].detail;
  EXPECT_TRUE(absl::StrContains(plan[3].detail, "twice")) << plan[3].detail;
}

TEST_F(RefreshAgreementTest, AViewCarriesTheKeysPublicFacts) {
  const Plan w = Look(1, item_);
  ASSERT_NE(w.key, nullptr);
  EXPECT_EQ(w.view[0], kViewPresent);
  EXPECT_EQ(w.view[1], static_cast<uint8_t>(Cipher::kAes128));
  EXPECT_EQ(0, std::memcmp(&w.view[2], key_[1]->deal_id.data(), 16));
  EXPECT_EQ(0, std::memcmp(&w.view[kViewOrigin], key_[1]->Origin().data(), 16));
  EXPECT_EQ(w.view[kViewBytes - 1], 0);
  EXPECT_EQ(w.public_meta, "kvno 2");
  // Missing; another party's shares; new id taken.
  EXPECT_EQ(Look(0, {Id('z'), Id('n')}).view[0], kViewMissing);
  key_[2] = key_[0];
  EXPECT_EQ(Look(2, item_).view[0], kViewBad);
  EXPECT_EQ(Look(2, item_).key, nullptr);
  taken_[0] = true;
  EXPECT_EQ(Look(0, item_).view[kViewBytes - 1], 1);
}

TEST_F(RefreshAgreementTest, ThreeViewsDecideAlike) {
  auto decide = [&](const std::array<Plan, 3>& p) {
    Plan w = p[0];
    Decide(w, {p[0].view.data(), p[1].view.data(), p[2].view.data()});
    return w;
  };
  const std::array<Plan, 3> same = {Look(0, item_), Look(1, item_), Look(2, item_)};
  EXPECT_EQ(decide(same).status, pb::JOB_OK) << decide(same).detail;
  taken_[1] = true;
  const Plan t = decide({Look(0, item_), Look(1, item_), Look(2, item_)});
  EXPECT_EQ(t.status, pb::JOB_MALFORMED);
  EXPECT_TRUE(absl::StrContains(t.detail, "taken on MPC party 1")) << t.detail;
  taken_[1] = false;
  std::array<Plan, 3> other = same;
  other[2].view[30] ^= 1;  // another metadata digest
  EXPECT_EQ(decide(other).status, pb::JOB_KEY_INCONSISTENT);
  key_[0].reset();
  EXPECT_EQ(decide({Look(0, item_), Look(1, item_), Look(2, item_)}).status,
            pb::JOB_UNKNOWN_KEY);
}

TEST_F(RefreshAgreementTest, ARebuildTakesTheSurvivorsViewForTheLostParty) {
  auto rebuild = [&](const std::array<Plan, 3>& p) {
    Plan w = p[1];
    DecideRebuild(w, {p[0].view.data(), p[1].view.data(), p[2].view.data()}, 0);
    return w;
  };
  // Party 0 still holds the key: it is no new server.
  Plan w = rebuild({Look(0, item_), Look(1, item_), Look(2, item_)});
  EXPECT_EQ(w.status, pb::JOB_MALFORMED);
  EXPECT_TRUE(absl::StrContains(w.detail, "not a new server")) << w.detail;
  key_[0].reset();  // party 0 is new: an empty store
  w = rebuild({Look(0, item_), Look(1, item_), Look(2, item_)});
  EXPECT_EQ(w.status, pb::JOB_OK) << w.detail;
  // Only the lost party's "new id taken" byte counts of its view.
  taken_[0] = true;
  w = rebuild({Look(0, item_), Look(1, item_), Look(2, item_)});
  EXPECT_EQ(w.status, pb::JOB_MALFORMED);
  EXPECT_TRUE(absl::StrContains(w.detail, "taken on MPC party 0")) << w.detail;
}

// AgreeOnRefresh on three parties, party i with items[i].
std::array<absl::Status, 3> Agree(::kmpc::testing::Rep3Cluster& c,
                                  const std::array<std::vector<RefreshItem>, 3>& items,
                                  std::array<std::vector<Plan>, 3>& plan,
                                  const std::array<RefreshLookup, 3>& lookup) {
  return RunParties([&](int i) -> absl::Status {
    plan[i].assign(items[i].size(), Plan{});
    CheckInputs(items[i], plan[i]);
    for (size_t j = 0; j < items[i].size(); ++j)
      if (plan[i][j].live())
        if (absl::Status st = LookUp(i, items[i][j], lookup[i], plan[i][j]); !st.ok()) return st;
    Agreement a{c.ring.party(i), *c.prss[i], kNoRebuild};
    std::vector<uint8_t> survivors;
    absl::Status st = AgreeOnRefresh(a, Bytes{7}, 1, items[i], plan[i], survivors);
    if (st.ok() && a.deviated) return absl::InternalError("deviated");
    return st;
  });
}

TEST_F(RefreshAgreementTest, TheSamePairsAreAgreedAndDifferentRequestsRefused) {
  ::kmpc::testing::Rep3Cluster c;
  const std::array<RefreshLookup, 3> lookup = {Lookup(0), Lookup(1), Lookup(2)};
  const std::vector<RefreshItem> items = {item_, {Id('z'), Id('y')}};
  std::array<std::vector<Plan>, 3> plan;
  for (const absl::Status& s : Agree(c, {items, items, items}, plan, lookup))
    ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan[i][0].status, pb::JOB_OK) << plan[i][0].detail;
    EXPECT_EQ(plan[i][1].status, pb::JOB_UNKNOWN_KEY);
  }
  // Views that differ (the new id taken on party 2): exchanged, decided
  // alike.
  taken_[2] = true;
  const std::array<RefreshLookup, 3> taken = {Lookup(0), Lookup(1), Lookup(2)};
  for (const absl::Status& s : Agree(c, {items, items, items}, plan, taken))
    ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan[i][0].status, pb::JOB_MALFORMED);
    EXPECT_EQ(plan[i][0].detail, plan[0][0].detail);
  }
  std::vector<RefreshItem> other = items;
  other[1].new_key_id = Id('w');
  for (const absl::Status& s : Agree(c, {items, other, items}, plan, lookup))
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

}  // namespace
}  // namespace kmpc::engine::refresh
