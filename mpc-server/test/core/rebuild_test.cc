// engine/rebuild.h: the masks' expansion is AES-256-CTR of the seed, one
// stream per counter block; and a rebuild of party 0 run directly after
// the pairs' agreement gives the new party a view of every pair (an
// aes*-cts key's material included) and the survivors' metadata, while
// the three new views still open to the old key.
#include "engine/rebuild.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "contract.h"
#include "engine/refresh_components.h"
#include "rep3_cluster.h"
#include "test_util.h"

namespace kmpc::engine::refresh {
namespace {

using Bytes = std::vector<uint8_t>;
using ::kmpc::testing::RunParties;

Bytes OpensslCtr(const std::array<uint8_t, 32>& seed, uint8_t stream, size_t n) {
  uint8_t iv[16] = {stream};
  Bytes out(n, 0);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  EVP_EncryptInit_ex(ctx, EVP_aes_256_ctr(), nullptr, seed.data(), iv);
  EVP_EncryptUpdate(ctx, out.data(), &len, out.data(), static_cast<int>(n));
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

TEST(RebuildTest, ExpandIsAes256CtrOfTheSeedPerStream) {
  std::array<uint8_t, 32> seed;
  for (size_t k = 0; k < seed.size(); ++k) seed[k] = static_cast<uint8_t>(k * 7);
  Bytes s, t;
  ASSERT_TRUE(Expand(seed, 1, s, 100).ok());
  ASSERT_TRUE(Expand(seed, 2, t, 100).ok());
  EXPECT_EQ(s, OpensslCtr(seed, 1, 100));
  EXPECT_EQ(t, OpensslCtr(seed, 2, 100));
  EXPECT_NE(s, t);
  ASSERT_TRUE(Expand(seed, 1, s, 0).ok());
  EXPECT_TRUE(s.empty());
}

// XOR of component 0 of the three views' Components, concatenated.
Bytes OpenComponents(const std::array<std::shared_ptr<const KeyShares>, 3>& v) {
  Bytes out;
  for (int i = 0; i < 3; ++i) {
    Bytes mine;
    for (const auto* c : Components(*v[i], 0)) mine.insert(mine.end(), c->begin(), c->end());
    // Component 1 is the next party's component 0.
    Bytes next1;
    for (const auto* c : Components(*v[i], 1)) next1.insert(next1.end(), c->begin(), c->end());
    Bytes next0;
    for (const auto* c : Components(*v[(i + 1) % 3], 0))
      next0.insert(next0.end(), c->begin(), c->end());
    EXPECT_EQ(next1, next0) << "copies of share " << (i + 1) % 3;
    if (out.empty()) out.assign(mine.size(), 0);
    for (size_t k = 0; k < mine.size(); ++k) out[k] ^= mine[k];
  }
  return out;
}

TEST(RebuildTest, ALostPartyGetsAViewOfEveryPairAndTheKeyStays) {
  auto dealt = DealKey(Cipher::kAes128Cts, Bytes(16, 8), KeyKind::kUser);
  ASSERT_TRUE(dealt.ok());
  std::array<std::shared_ptr<const KeyShares>, 3> old;
  for (int i = 0; i < 3; ++i) old[i] = std::make_shared<const KeyShares>((*dealt)[i]);
  const Bytes key = OpenComponents(old);
  const std::vector<RefreshItem> items = {{std::string(contract::kKeyIdSize, 'o'),
                                           std::string(contract::kKeyIdSize, 'n')}};
  const int lost = 0;
  ::kmpc::testing::Rep3Cluster c;
  std::array<absl::StatusOr<std::vector<RefreshOutcome>>, 3> out;
  const Bytes batch = {9, 9};
  RunParties([&](int i) -> absl::Status {
    RefreshLookup lookup = [&, i](const RefreshItem&) {
      RefreshSource s;
      if (i != lost) s.old_key = old[i];
      s.public_meta = "label";
      return s;
    };
    std::vector<Plan> plan(items.size());
    CheckInputs(items, plan);
    if (absl::Status st = LookUp(i, items[0], lookup, plan[0]); !st.ok()) return st;
    Agreement a{c.ring.party(i), *c.prss[i], lost};
    std::vector<uint8_t> survivors;
    if (absl::Status st = AgreeOnRefresh(a, batch, 1, items, plan, survivors); !st.ok())
      return st;
    out[i] = RebuildExchange(c.ring.party(i), batch, 1, items, plan, lost, survivors,
                             a.deviated);
    return out[i].status();
  });
  std::array<std::shared_ptr<const KeyShares>, 3> fresh;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    const RefreshOutcome& o = (*out[i])[0];
    ASSERT_EQ(o.status, pb::JOB_OK) << o.detail;
    ASSERT_NE(o.shares, nullptr);
    fresh[i] = o.shares;
    EXPECT_EQ(fresh[i]->party, i);
    EXPECT_EQ(fresh[i]->deal_id, fresh[0]->deal_id);
    EXPECT_NE(fresh[i]->deal_id, old[1]->deal_id);
    EXPECT_EQ(fresh[i]->Origin(), old[1]->Origin());
    EXPECT_EQ(fresh[i]->cts.size(), old[1]->cts.size());
  }
  EXPECT_EQ((*out[lost])[0].public_meta, "label");
  EXPECT_EQ(OpenComponents(fresh), key);
  // Re-randomised: the survivors' components changed.
  EXPECT_NE(fresh[1]->round_keys[0], old[1]->round_keys[0]);
}

}  // namespace
}  // namespace kmpc::engine::refresh
