// A deviating server in a share refresh or a rebuild (engine/refresh.h,
// "Checking the new sharing"): one party behind test/cheat.h's
// CheatingChannel flips one bit of one of its messages, for every message
// it sends in the run (the message map: an honest dry run's message
// count), at the first and at the last byte. Expected: no honest party
// reports JOB_OK with new shares, except after a flip in the last two
// messages (the verdicts), where at least one honest party refuses and an
// honest party that accepts holds a correct, consistent sharing. In every
// case the old key id is untouched and computes the key, and the next
// (honest) refresh of it is served. Run for an aes128 ctr-mpc key and for
// an aes128-cts key, whose dealt material is part of every message that
// carries shares (its last bytes are the last entry's) and of the check.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "../cheat.h"
#include "contract.h"
#include "engine/engine.h"
#include "engine/refresh.h"
#include "net/memory_ring.h"
#include "encrypt_testing.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::CheatingChannel;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using Bytes = std::vector<uint8_t>;
using Views = std::array<std::shared_ptr<const KeyShares>, 3>;
using Outcomes = std::array<absl::StatusOr<std::vector<RefreshOutcome>>, 3>;

// The ring timeout of the cheating runs: a flip that makes one party stop
// early leaves the others waiting this long.
constexpr std::chrono::milliseconds kRingTimeout{1500};
constexpr size_t kCheckMessages = 5;

std::string NewId() {
  Bytes b = Random(contract::kKeyIdSize);
  return std::string(b.begin(), b.end());
}

// The value of aes*-cts material entry e (component 0 of each party) and
// whether the two copies of every share agree and every party holds the
// same (kind, usage) at e.
Bytes OpenCts(const Views& v, size_t e, bool* consistent) {
  for (int i = 0; i < 3; ++i)
    if (v[i]->cts.size() <= e || v[i]->cts[e].kind != v[0]->cts[e].kind ||
        v[i]->cts[e].usage != v[0]->cts[e].usage) {
      *consistent = false;
      return {};
    }
  for (int i = 0; i < 3; ++i)
    if (v[i]->cts[e].share[1] != v[(i + 1) % 3]->cts[e].share[0]) *consistent = false;
  Bytes out(v[0]->cts[e].share[0].size());
  for (int i = 0; i < 3; ++i) {
    if (v[i]->cts[e].share[0].size() != out.size()) {
      *consistent = false;
      return {};
    }
    for (size_t k = 0; k < out.size(); ++k) out[k] ^= v[i]->cts[e].share[0][k];
  }
  return out;
}

// The value of a sharing (component 0 of each party) and whether the two
// copies of every share agree.
Bytes Open(const Views& v, bool h_powers, bool* consistent) {
  auto comp = [&](int i, int k) -> const Bytes& {
    return h_powers ? v[i]->h_powers[k] : v[i]->round_keys[k];
  };
  for (int i = 0; i < 3; ++i)
    if (comp(i, 1) != comp((i + 1) % 3, 0)) *consistent = false;
  Bytes out(comp(0, 0).size());
  for (int i = 0; i < 3; ++i)
    for (size_t k = 0; k < out.size(); ++k) out[k] ^= comp(i, 0)[k];
  return out;
}

// One key dealt to three parties; refreshes (or rebuilds) of it with one
// party behind a CheatingChannel.
class Fixture {
 public:
  explicit Fixture(int lost = kNoRebuild, bool cts = false) : lost_(lost), cts_(cts) {
    key_ = Random(16);
    auto views = DealKey(cts ? Cipher::kAes128Cts : Cipher::kAes128, key_);
    EXPECT_TRUE(views.ok()) << views.status();
    for (int i = 0; i < 3; ++i) old_[i] = std::make_shared<const KeyShares>((*views)[i]);
    old_id_ = NewId();
  }

  // One run of the refresh (or rebuild) of old_id_ to a new id on a fresh
  // ring, with `cheater` flipping `mask` into byte `offset` of its
  // `step`-th message (no flip if step < 0). sent: the cheater's message
  // count; fired: whether the flip happened.
  Outcomes Run(int cheater, int step, size_t offset, uint8_t mask, size_t* sent,
               bool* fired, std::chrono::milliseconds timeout = kRingTimeout) {
    net::InMemoryRing ring(timeout);
    CheatingChannel cheat(ring.party(cheater));
    if (step >= 0) cheat.Arm(static_cast<uint64_t>(step), offset, mask);
    const std::vector<RefreshItem> items = {{old_id_, NewId()}};
    const Bytes batch = Random(16);
    Outcomes out;
    RunParties([&](int i) {
      RefreshLookup lookup = [&, i](const RefreshItem&) {
        RefreshSource s;
        if (i == lost_) return s;  // a new, empty server
        s.old_key = old_[i];
        s.public_meta = "1:3:alice@EXAMPLE.COM";
        return s;
      };
      net::RingChannel& ch =
          i == cheater ? static_cast<net::RingChannel&>(cheat) : ring.party(i);
      out[i] = RefreshShares(ch, batch, 1, items, lookup, lost_);
      return out[i].status();
    });
    *sent = cheat.sizes().size();
    *fired = cheat.fired();
    return out;
  }

  // The old id still computes the key: an ENCRYPT job of one block under
  // the old views, against OpenSSL AES (the survivors' views in a rebuild
  // are checked by opening them instead: the lost party has none).
  void ExpectOldKeyUsable() {
    bool consistent = true;
    const Bytes rk = Open(old_, false, &consistent);
    EXPECT_TRUE(consistent);
    EXPECT_EQ(Bytes(rk.begin(), rk.begin() + 16), key_);
    for (size_t e = 0; e < old_[0]->cts.size(); ++e) {
      OpenCts(old_, e, &consistent);
      EXPECT_TRUE(consistent) << "material entry " << e;
    }
    // An aes*-cts key runs no ENCRYPT job of this kind (its cipher is not
    // a ctr-mpc one): opened above.
    if (lost_ != kNoRebuild || cts_) return;
    auto ks = ::kmpc::testing::EncryptOnFreshRing(
        {pb::CIPHER_AES128, pb::CIPHER_AES128, pb::CIPHER_AES128}, old_id_, 1,
        [this](int i) -> KeyLookup {
          std::shared_ptr<const KeyShares> mine = old_[i];
          return [mine](absl::string_view)
                     -> absl::StatusOr<std::shared_ptr<const KeyShares>> { return mine; };
        });
    ASSERT_TRUE(ks.ok()) << ks.status();
    std::array<uint8_t, 16> ctr = ks->second;
    for (int k = 15; k >= 0 && ++ctr[k] == 0; --k) {
    }
    const auto want = OpensslAes(key_, ctr.data());
    EXPECT_EQ(ks->first, Bytes(want.begin(), want.end()));
  }

  // New views that all three parties returned with JOB_OK hold the key.
  void ExpectNewViewsHoldTheKey(const Outcomes& out) {
    Views nv;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(out[i].ok()) << out[i].status();
      ASSERT_EQ((*out[i])[0].status, pb::JOB_OK) << (*out[i])[0].detail;
      nv[i] = (*out[i])[0].shares;
    }
    bool consistent = true;
    const Bytes rk = Open(nv, false, &consistent);
    const Bytes hp = Open(nv, true, &consistent);
    bool old_consistent = true;
    EXPECT_TRUE(consistent) << "the new copies disagree";
    EXPECT_TRUE(rk == Open(old_, false, &old_consistent)) << "the key changed (round keys)";
    EXPECT_TRUE(hp == Open(old_, true, &old_consistent)) << "the key changed (H powers)";
    for (int i = 0; i < 3; ++i) ASSERT_EQ(nv[i]->cts.size(), old_[i]->cts.size());
    for (size_t e = 0; e < old_[0]->cts.size(); ++e) {
      const Bytes m = OpenCts(nv, e, &consistent);
      EXPECT_TRUE(consistent) << "the new copies of material entry " << e << " disagree";
      EXPECT_TRUE(m == OpenCts(old_, e, &old_consistent))
          << "material entry " << e << " changed";
    }
    // A service key: usages 1, 2, 3; checksums 17, 56, 64; the PRF.
    if (cts_) EXPECT_EQ(nv[0]->cts.size(), 7u);
  }

  int lost() const { return lost_; }

 private:
  int lost_;
  bool cts_;
  Bytes key_;
  Views old_;
  std::string old_id_;
};

bool Accepted(const absl::StatusOr<std::vector<RefreshOutcome>>& o) {
  return o.ok() && o->size() == 1 && (*o)[0].status == pb::JOB_OK;
}

// The cheater flips a bit in each of its messages in turn (first and last
// byte); see the file comment for what is expected.
void FlipEveryMessage(int lost, int cheater, bool cts = false) {
  SCOPED_TRACE(::testing::Message() << "lost " << lost << " cheater " << cheater
                                    << (cts ? " aes128-cts" : " aes128"));
  Fixture f(lost, cts);
  size_t n = 0;
  bool fired = false;
  {
    // Honest dry run: the message map, and the refresh works.
    Outcomes out = f.Run(cheater, -1, 0, 0, &n, &fired, std::chrono::milliseconds(20000));
    f.ExpectNewViewsHoldTheKey(out);
  }
  ASSERT_GE(n, 2u);
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, int> seen;
  for (size_t step = 0; step < n; ++step) {
    for (size_t offset : {size_t{0}, ~size_t{0} >> 1}) {
      SCOPED_TRACE(::testing::Message() << "message " << step << " of " << n
                                        << (offset == 0 ? ", first byte" : ", last byte"));
      size_t sent = 0;
      Outcomes out = f.Run(cheater, static_cast<int>(step), offset, 0x01, &sent, &fired);
      if (!fired) continue;  // an empty message
      int honest_ok = 0;
      for (int i = 0; i < 3; ++i) {
        if (i == cheater) continue;
        if (Accepted(out[i])) ++honest_ok;
        else
          ++seen[out[i].ok() ? pb::JobStatus_Name((*out[i])[0].status)
                             : std::string(absl::StatusCodeToString(out[i].status().code()))];
      }
      // The run's last kCheckMessages messages are the check's (PRSS
      // set-up, two compare rounds, two verdict rounds; refresh.h).
      const bool verdict = step + 2 >= n;
      const bool check = step + kCheckMessages >= n;
      if (verdict) {
        EXPECT_LT(honest_ok, 2) << "a flipped verdict went unnoticed";
      } else if (check) {
        EXPECT_EQ(honest_ok, 0) << "an honest party accepted a deviating check";
      } else {
        // A flip in a byte the protocol ignores (the agreement header's
        // counters field) changes nothing; any other leaves no honest
        // party accepting. Either way, both honest parties decide alike.
        EXPECT_NE(honest_ok, 1) << "the honest parties decided differently";
      }
      // What both honest parties accepted is the old key, copies consistent.
      if (honest_ok == 2) f.ExpectNewViewsHoldTheKey(out);
    }
  }
  for (const auto& [what, count] : seen) std::cout << "  " << what << ": " << count << "\n";
  std::cout << "  " << n << " messages x 2 flips in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " ms\n";
  f.ExpectOldKeyUsable();
  // The next request is served.
  Outcomes next = f.Run(cheater, -1, 0, 0, &n, &fired, std::chrono::milliseconds(20000));
  f.ExpectNewViewsHoldTheKey(next);
}

TEST(RefreshCheck, EveryRefreshMessageFlippedFailsTheHonestParties) {
  FlipEveryMessage(kNoRebuild, 1);
}

TEST(RefreshCheck, EveryRebuildMessageFlippedFailsTheHonestParties) {
  // Party 0 rebuilt; each survivor (A = 1, B = 2) and the new party cheat.
  for (int cheater : {1, 2, 0}) FlipEveryMessage(0, cheater);
}

TEST(RefreshCheck, EveryCtsRefreshMessageFlippedFailsTheHonestParties) {
  FlipEveryMessage(kNoRebuild, 1, true);
}

TEST(RefreshCheck, EveryCtsRebuildMessageFlippedFailsTheHonestParties) {
  // The survivors, whose messages carry the material's shares and layout
  // (the new party's are the same as for a ctr-mpc key but for the check's
  // sizes, covered above).
  for (int cheater : {1, 2}) FlipEveryMessage(0, cheater, true);
}

}  // namespace
}  // namespace kmpc::engine
