// Share refresh (engine/refresh.h) on three parties in one process over the
// in-memory ring: the refreshed shares recombine to the same key (checked
// with an ENCRYPT job against OpenSSL AES and against the key itself; an
// aes*-cts key's dealt material against the dealer's clear material for
// the key), no pre-refresh view of one party combined with a post-refresh
// view of another gives the key, its round keys, H or a material entry,
// and the parties fail the same pairs when their inputs or stores
// disagree.
#include "engine/refresh.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "../cheat.h"
#include "absl/strings/str_cat.h"
#include "contract.h"
#include "cts/dealer.h"
#include "engine/agreement.h"
#include "engine/engine.h"
#include "net/memory_ring.h"
#include "protocol/verify.h"
#include "encrypt_testing.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using Bytes = std::vector<uint8_t>;
using Views = std::array<std::shared_ptr<const KeyShares>, 3>;

std::string NewId() {
  Bytes b = Random(contract::kKeyIdSize);
  return std::string(b.begin(), b.end());
}

Bytes Xor3(const Bytes& a, const Bytes& b, const Bytes& c) {
  Bytes out(a.size());
  for (size_t k = 0; k < a.size(); ++k) out[k] = a[k] ^ b[k] ^ c[k];
  return out;
}

// The value a sharing holds: share 0 ^ share 1 ^ share 2 (component 0 of
// each party), after checking that each share's two copies agree.
Bytes Open(const Views& v, bool h_powers) {
  for (int i = 0; i < 3; ++i) {
    const auto& mine = h_powers ? v[i]->h_powers : v[i]->round_keys;
    const auto& next = h_powers ? v[(i + 1) % 3]->h_powers : v[(i + 1) % 3]->round_keys;
    EXPECT_EQ(mine[1], next[0]) << "copies of share " << (i + 1) % 3;
  }
  auto c = [&](int i) -> const Bytes& {
    return h_powers ? v[i]->h_powers[0] : v[i]->round_keys[0];
  };
  return Xor3(c(0), c(1), c(2));
}

// Three parties' stores (key id -> view, metadata) and a ring; with a
// cheater, that party's channel is the cheating-server harness (cheat.h).
class RefreshCluster {
 public:
  explicit RefreshCluster(int cheater = -1) : cheater_(cheater) { Reconnect(); }
  // A fresh ring (as the servers re-establish it after a failed refresh);
  // the stores stay.
  void Reconnect() {
    cheat_.reset();
    ring_ = std::make_unique<net::InMemoryRing>(std::chrono::milliseconds(20000));
    if (cheater_ >= 0)
      cheat_ = std::make_unique<::kmpc::testing::CheatingChannel>(ring_->party(cheater_));
  }
  ::kmpc::testing::CheatingChannel& cheat() { return *cheat_; }
  std::string AddKey(const Bytes& key, const std::string& meta = "kvno 3 alice",
                     bool cts = false) {
    auto views = DealKey(key.size() == 16 ? (cts ? Cipher::kAes128Cts : Cipher::kAes128)
                                          : (cts ? Cipher::kAes256Cts : Cipher::kAes256),
                         key);
    EXPECT_TRUE(views.ok()) << views.status();
    const std::string id = NewId();
    for (int i = 0; i < 3; ++i) {
      store_[i][id] = std::make_shared<const KeyShares>((*views)[i]);
      meta_[i][id] = meta;
    }
    return id;
  }
  Views Get(const std::string& id) {
    return {store_[0].at(id), store_[1].at(id), store_[2].at(id)};
  }
  // Party `party`'s view under `id`, or null.
  std::shared_ptr<const KeyShares> Find(int party, const std::string& id) {
    auto f = store_[party].find(id);
    return f == store_[party].end() ? nullptr : f->second;
  }
  void Drop(int party, const std::string& id) { store_[party].erase(id); }
  // Replaces party `party`'s view under `id` by a changed copy.
  void Mutate(int party, const std::string& id, const std::function<void(KeyShares&)>& f) {
    KeyShares k = *store_[party].at(id);
    f(k);
    store_[party][id] = std::make_shared<const KeyShares>(std::move(k));
  }
  // A lost server replaced by a new one: an empty store.
  void Lose(int party) {
    store_[party].clear();
    meta_[party].clear();
    taken_[party].clear();
  }
  const std::string& Meta(int party, const std::string& id) {
    return meta_[party].at(id);
  }
  void SetMeta(int party, const std::string& id, const std::string& m) {
    meta_[party][id] = m;
  }
  void Take(int party, const std::string& id) { taken_[party].insert(id); }

  // Runs a refresh on the three parties (per-party item lists may differ)
  // and stores the new views as the service would.
  std::array<absl::StatusOr<std::vector<RefreshOutcome>>, 3> RunEach(
      const std::array<std::vector<RefreshItem>, 3>& items, int rebuild = kNoRebuild) {
    std::array<absl::StatusOr<std::vector<RefreshOutcome>>, 3> out;
    const Bytes batch_id = Random(16);
    RunParties([&](int i) {
      RefreshLookup lookup = [this, i](const RefreshItem& it) {
        RefreshSource s;
        auto f = store_[i].find(it.old_key_id);
        if (f == store_[i].end()) s.old_key = absl::NotFoundError("no such key");
        else s.old_key = f->second;
        s.public_meta = meta_[i][it.old_key_id];
        s.new_id_taken =
            store_[i].count(it.new_key_id) != 0 || taken_[i].count(it.new_key_id) != 0;
        return s;
      };
      net::RingChannel& ch = i == cheater_ ? *cheat_ : ring_->party(i);
      out[i] = RefreshShares(ch, batch_id, seq_, items[i], lookup, rebuild);
      return out[i].status();
    });
    ++seq_;
    for (int i = 0; i < 3; ++i) {
      if (!out[i].ok()) continue;
      for (size_t j = 0; j < out[i]->size(); ++j)
        if ((*out[i])[j].status == pb::JOB_OK) {
          // With the old record's kind, as the service stores the copy
          // (its metadata copied; a rebuilt party's from a survivor's).
          auto ks = std::make_shared<KeyShares>(*(*out[i])[j].shares);
          ks->kind = store_[i == rebuild ? (rebuild + 1) % 3 : i][items[i][j].old_key_id]->kind;
          store_[i][items[i][j].new_key_id] = std::move(ks);
          meta_[i][items[i][j].new_key_id] = i == rebuild
                                                 ? (*out[i])[j].public_meta
                                                 : meta_[i][items[i][j].old_key_id];
        }
    }
    return out;
  }
  std::vector<RefreshOutcome> Run(const std::vector<RefreshItem>& items,
                                  int rebuild = kNoRebuild) {
    auto r = RunEach({items, items, items}, rebuild);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(r[i].ok()) << r[i].status();
      if (!r[i].ok()) return {};
      EXPECT_EQ(r[i]->size(), items.size());
      for (size_t j = 0; j < items.size() && j < r[i]->size(); ++j)
        EXPECT_EQ((*r[i])[j].status, (*r[0])[j].status) << "pair " << j;
    }
    return *r[0];
  }

  // An ENCRYPT job of 3 blocks under `id` on a fresh ring: the combined
  // keystream, with ctr0.
  std::pair<Bytes, std::array<uint8_t, 16>> Keystream(const std::string& id) {
    // The cipher each party's key was dealt for (a missing key: any valid
    // one).
    std::array<pb::Cipher, 3> cipher;
    for (int i = 0; i < 3; ++i) {
      auto dealt = store_[i].find(id);
      cipher[i] = dealt == store_[i].end() ? pb::CIPHER_AES128
                                           : static_cast<pb::Cipher>(dealt->second->cipher);
    }
    auto ks = ::kmpc::testing::EncryptOnFreshRing(cipher, id, 3, [this](int i) -> KeyLookup {
      return [this, i](absl::string_view k)
                 -> absl::StatusOr<std::shared_ptr<const KeyShares>> {
        auto f = store_[i].find(std::string(k));
        if (f == store_[i].end()) return absl::NotFoundError("no such key");
        return f->second;
      };
    });
    EXPECT_TRUE(ks.ok()) << ks.status();
    if (!ks.ok()) return {};
    return *std::move(ks);
  }

 private:
  int cheater_ = -1;
  std::unique_ptr<net::InMemoryRing> ring_;
  std::unique_ptr<::kmpc::testing::CheatingChannel> cheat_;
  uint64_t seq_ = 1;
  std::array<std::map<std::string, std::shared_ptr<const KeyShares>>, 3> store_;
  std::array<std::map<std::string, std::string>, 3> meta_;
  std::array<std::set<std::string>, 3> taken_;
};

// AES-ECB of ctr0 + i (i = 1..n, 128-bit big-endian) under `key`.
Bytes ReferenceKeystream(const Bytes& key, const std::array<uint8_t, 16>& ctr0,
                         size_t n) {
  Bytes out;
  for (size_t i = 1; i <= n; ++i) {
    std::array<uint8_t, 16> c = ctr0;
    uint64_t carry = i;
    for (int k = 15; k >= 0 && carry; --k) {
      const uint64_t s = c[k] + (carry & 0xff);
      c[k] = static_cast<uint8_t>(s);
      carry = (carry >> 8) + (s >> 8);
    }
    auto b = OpensslAes(key, c.data());
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

// The facts about `key` a sharing must hold: its expanded key starts with
// the key itself (FIPS-197 section 5.2), H^1 = AES_K(0^128).
void ExpectHolds(const Views& v, const Bytes& key) {
  const Bytes rk = Open(v, false);
  ASSERT_GE(rk.size(), key.size());
  EXPECT_EQ(Bytes(rk.begin(), rk.begin() + key.size()), key);
  const uint8_t zero[16] = {0};
  const auto h = OpensslAes(key, zero);
  const Bytes hp = Open(v, true);
  EXPECT_EQ(Bytes(hp.begin(), hp.begin() + 16), Bytes(h.begin(), h.end()));
}

// New views of the same key: it holds, party indices and cipher kept, one
// new dealing id, every share changed (a zero mask would leave it as it
// was).
void ExpectRedealt(const Views& oldv, const Views& newv, const Bytes& key) {
  ExpectHolds(newv, key);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(newv[i]->party, i);
    EXPECT_EQ(newv[i]->cipher, oldv[i]->cipher);
    EXPECT_TRUE(newv[i]->Validate().ok());
    EXPECT_EQ(newv[i]->deal_id, newv[0]->deal_id);
    EXPECT_NE(newv[i]->deal_id, oldv[i]->deal_id);
    EXPECT_NE(newv[i]->round_keys[0], oldv[i]->round_keys[0]);
    EXPECT_NE(newv[i]->round_keys[1], oldv[i]->round_keys[1]);
    EXPECT_NE(newv[i]->h_powers[0], oldv[i]->h_powers[0]);
  }
}

// Old view of party j with the new view of party k != j: no XOR of any of
// their four components is the key's round keys or its powers of H, nor
// does any hold the key's bytes.
void ExpectOldAndNewNeverCombine(const Views& oldv, const Views& newv, const Bytes& rk,
                                 const Bytes& hp, const Bytes& key) {
  for (int j = 0; j < 3; ++j) {
    for (int k = 0; k < 3; ++k) {
      if (j == k) continue;
      for (bool hpow : {false, true}) {
        const Bytes& want = hpow ? hp : rk;
        std::array<const Bytes*, 4> comp = {
            hpow ? &oldv[j]->h_powers[0] : &oldv[j]->round_keys[0],
            hpow ? &oldv[j]->h_powers[1] : &oldv[j]->round_keys[1],
            hpow ? &newv[k]->h_powers[0] : &newv[k]->round_keys[0],
            hpow ? &newv[k]->h_powers[1] : &newv[k]->round_keys[1]};
        for (int mask = 1; mask < 16; ++mask) {
          Bytes x(want.size(), 0);
          for (int q = 0; q < 4; ++q)
            if (mask & (1 << q))
              for (size_t t = 0; t < x.size(); ++t) x[t] ^= (*comp[q])[t];
          EXPECT_NE(x, want) << "old " << j << " new " << k << " subset " << mask;
          if (!hpow)
            EXPECT_NE(Bytes(x.begin(), x.begin() + key.size()), key)
                << "old " << j << " new " << k << " subset " << mask;
        }
      }
    }
  }
}

// The value of aes*-cts material entry e of a sharing (component 0 of each
// party), after checking that every party holds the same (kind, usage,
// length) at e and that each share's two copies agree.
Bytes OpenCts(const Views& v, size_t e) {
  for (int i = 0; i < 3; ++i) {
    if (v[i]->cts.size() <= e) {
      ADD_FAILURE() << "party " << i << " lacks material entry " << e;
      return {};
    }
    const CtsMaterial& m = v[i]->cts[e];
    EXPECT_EQ(m.kind, v[0]->cts[e].kind) << "entry " << e;
    EXPECT_EQ(m.usage, v[0]->cts[e].usage) << "entry " << e;
    EXPECT_EQ(m.share[0].size(), v[0]->cts[e].share[0].size()) << "entry " << e;
    if (v[(i + 1) % 3]->cts.size() > e)
      EXPECT_EQ(m.share[1], v[(i + 1) % 3]->cts[e].share[0])
          << "copies of share " << (i + 1) % 3 << " of entry " << e;
  }
  return Xor3(v[0]->cts[e].share[0], v[1]->cts[e].share[0], v[2]->cts[e].share[0]);
}

// The clear material the dealer computes for (kind, usage) of `key`
// (cts/dealer.h): what a sharing of that entry must hold.
Bytes ClearCts(const Bytes& key, CtsKind kind, uint32_t usage) {
  absl::StatusOr<cts::UsageMaterial> m =
      kind == CtsKind::kUsage      ? cts::DealUsage(key, usage)
      : kind == CtsKind::kChecksum ? cts::DealChecksum(key, usage)
                                   : cts::DealPrf(key);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  return m->bytes;
}

// (kind, usage) of every entry of a view, in order.
std::vector<std::pair<CtsKind, uint32_t>> Layout(const KeyShares& k) {
  std::vector<std::pair<CtsKind, uint32_t>> l;
  for (const CtsMaterial& m : k.cts) l.emplace_back(m.kind, m.usage);
  return l;
}

// New views of the same aes*-cts key `key`: the base key as ExpectRedealt;
// on every party the old layout (same entries, same order, same lengths);
// every entry's value the dealer's for `key`, as it was; every share of
// every entry changed; each record survives the share store's encoding.
void ExpectCtsRedealt(const Views& oldv, const Views& newv, const Bytes& key) {
  ExpectRedealt(oldv, newv, key);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(newv[i]->cts.size(), oldv[i]->cts.size()) << "party " << i;
    EXPECT_EQ(Layout(*newv[i]), Layout(*oldv[i])) << "party " << i;
    for (size_t e = 0; e < newv[i]->cts.size(); ++e) {
      const CtsMaterial &n = newv[i]->cts[e], &o = oldv[i]->cts[e];
      EXPECT_EQ(n.share[0].size(), o.share[0].size()) << "party " << i << " entry " << e;
      EXPECT_NE(n.share[0], o.share[0]) << "party " << i << " entry " << e;
      EXPECT_NE(n.share[1], o.share[1]) << "party " << i << " entry " << e;
    }
    auto parsed = KeyShares::Parse(newv[i]->Serialize());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(Layout(*parsed), Layout(*newv[i]));
  }
  for (size_t e = 0; e < oldv[0]->cts.size(); ++e) {
    const Bytes want = ClearCts(key, oldv[0]->cts[e].kind, oldv[0]->cts[e].usage);
    EXPECT_EQ(OpenCts(oldv, e), want) << "entry " << e << " (old)";
    EXPECT_EQ(OpenCts(newv, e), want) << "entry " << e;
  }
}

// Old view of party j with the new view of party k != j: no XOR of any of
// their four copies of an aes*-cts material entry is that entry's value.
void ExpectCtsOldAndNewNeverCombine(const Views& oldv, const Views& newv) {
  for (size_t e = 0; e < oldv[0]->cts.size(); ++e) {
    const Bytes want = OpenCts(oldv, e);
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 3; ++k) {
        if (j == k) continue;
        std::array<const Bytes*, 4> comp = {
            &oldv[j]->cts[e].share[0], &oldv[j]->cts[e].share[1],
            &newv[k]->cts[e].share[0], &newv[k]->cts[e].share[1]};
        for (int mask = 1; mask < 16; ++mask) {
          Bytes x(want.size(), 0);
          for (int q = 0; q < 4; ++q)
            if (mask & (1 << q))
              for (size_t t = 0; t < x.size(); ++t) x[t] ^= (*comp[q])[t];
          EXPECT_NE(x, want) << "entry " << e << " old " << j << " new " << k
                             << " subset " << mask;
        }
      }
    }
  }
}

// The entries DealKey gives an aes*-cts key (engine.h kCtsDealtUsages,
// kCtsDealtChecksums, the PRF), in its order.
std::vector<std::pair<CtsKind, uint32_t>> DealtLayout() {
  std::vector<std::pair<CtsKind, uint32_t>> l;
  for (uint32_t u : kCtsDealtUsages) l.emplace_back(CtsKind::kUsage, u);
  for (uint32_t u : kCtsDealtChecksums) l.emplace_back(CtsKind::kChecksum, u);
  l.emplace_back(CtsKind::kPrf, 0);
  return l;
}

// A key dealt before some usages were: only usage 1, checksum 56 and the
// PRF, the PRF first (a record's order is whatever its dealing's was).
void KeepOlderLayout(KeyShares& k) {
  std::vector<CtsMaterial> kept;
  for (CtsKind kind : {CtsKind::kPrf, CtsKind::kUsage, CtsKind::kChecksum})
    for (CtsMaterial& m : k.cts)
      if (m.kind == kind && (m.usage == 0 || m.usage == 1 || m.usage == 56))
        kept.push_back(m);
  k.cts = std::move(kept);
}

TEST(RefreshTest, NewSharesHoldTheSameKeyAndOldAndNewNeverCombine) {
  RefreshCluster c;
  const Bytes k128 = Random(16), k256 = Random(32);
  const std::string a = c.AddKey(k128), b = c.AddKey(k256);
  const Views olda = c.Get(a), oldb = c.Get(b);
  const Bytes rk_a = Open(olda, false), hp_a = Open(olda, true);
  const Bytes rk_b = Open(oldb, false), hp_b = Open(oldb, true);
  const std::string na = NewId(), nb = NewId();
  auto r = c.Run({{a, na}, {b, nb}});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  EXPECT_EQ(r[1].status, pb::JOB_OK) << r[1].detail;

  for (const auto& [old_id, new_id, key, rk, hp] :
       {std::tuple{a, na, k128, rk_a, hp_a}, std::tuple{b, nb, k256, rk_b, hp_b}}) {
    const Views oldv = c.Get(old_id), newv = c.Get(new_id);
    // Same value, same cipher, party indices kept, one new dealing id.
    EXPECT_EQ(Open(newv, false), rk);
    EXPECT_EQ(Open(newv, true), hp);
    ExpectRedealt(oldv, newv, key);
    ExpectOldAndNewNeverCombine(oldv, newv, rk, hp, key);
    // The new shares compute: ENCRYPT keystream against OpenSSL AES.
    auto [ks, ctr0] = c.Keystream(new_id);
    EXPECT_EQ(ks, ReferenceKeystream(key, ctr0, 3));
  }

  // A second refresh of the refreshed key: still the same key.
  const std::string na2 = NewId();
  r = c.Run({{na, na2}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  ExpectHolds(c.Get(na2), k128);
  auto [ks, ctr0] = c.Keystream(na2);
  EXPECT_EQ(ks, ReferenceKeystream(k128, ctr0, 3));
}

// A refreshed key keeps its original's origin deal id (KeyShares::Origin)
// under a new deal_id, through a refresh of a refresh and a rebuild, and
// the store's encoding keeps it: what a server's per-deal bounds count by
// (engine/gate_budget.h, CtsReleaseLimiter), so a copy never has a failure
// budget or release bucket of its own. Parties whose origins differ fail
// the pair alike.
TEST(RefreshTest, CopiesKeepTheOriginalsOriginDealId) {
  RefreshCluster c;
  const std::string a = c.AddKey(Random(32), "kvno 1 user", /*cts=*/true);
  const auto origin = c.Find(0, a)->Origin();
  EXPECT_EQ(origin, c.Find(0, a)->deal_id);
  const std::string b = NewId(), d = NewId();
  ASSERT_EQ(c.Run({{a, b}})[0].status, pb::JOB_OK);
  ASSERT_EQ(c.Run({{b, d}})[0].status, pb::JOB_OK);
  const std::string e = NewId();
  c.Lose(1);  // party 1 replaced: rebuilt from the survivors' views
  ASSERT_EQ(c.Run({{d, e}}, /*rebuild=*/1)[0].status, pb::JOB_OK);
  for (int i = 0; i < 3; ++i)
    for (const std::string& id : {b, d, e}) {
      if (i == 1 && id != e) continue;  // lost with its store
      auto k = c.Find(i, id);
      ASSERT_NE(k, nullptr);
      EXPECT_NE(k->deal_id, origin) << "party " << i;
      EXPECT_EQ(k->Origin(), origin) << "party " << i;
      auto back = KeyShares::Parse(k->Serialize());
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->Origin(), origin);
      EXPECT_EQ(back->deal_id, k->deal_id);
    }
  c.Mutate(2, e, [](KeyShares& k) { k.origin_deal_id[0] ^= 1; });
  EXPECT_EQ(c.Run({{e, NewId()}})[0].status, pb::JOB_KEY_INCONSISTENT);
}

TEST(RefreshTest, PartiesFailTheSamePairs) {
  RefreshCluster c;
  const std::string good = c.AddKey(Random(16));
  const std::string gone = c.AddKey(Random(16));
  const std::string meta = c.AddKey(Random(32));
  const std::string taken_old = c.AddKey(Random(16));
  c.Drop(1, gone);
  c.SetMeta(2, meta, "kvno 4 alice");
  const std::string taken = NewId();
  c.Take(0, taken);
  const std::string ng = NewId();
  const std::vector<RefreshItem> items = {
      {good, ng},
      {gone, NewId()},
      {meta, NewId()},
      {taken_old, taken},
      {good, std::string(5, 'x')},  // malformed id
      {NewId(), NewId()},           // unknown everywhere
  };
  auto r = c.Run(items);
  ASSERT_EQ(r.size(), items.size());
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  EXPECT_EQ(r[1].status, pb::JOB_UNKNOWN_KEY);
  EXPECT_NE(r[1].detail.find("party 1"), std::string::npos) << r[1].detail;
  EXPECT_EQ(r[2].status, pb::JOB_KEY_INCONSISTENT) << r[2].detail;
  EXPECT_EQ(r[3].status, pb::JOB_MALFORMED);
  EXPECT_NE(r[3].detail.find("taken on MPC party 0"), std::string::npos) << r[3].detail;
  EXPECT_EQ(r[4].status, pb::JOB_MALFORMED);
  EXPECT_EQ(r[5].status, pb::JOB_UNKNOWN_KEY);
  // The pair that went ahead is good despite the failures around it.
  auto [ks, ctr0] = c.Keystream(ng);
  EXPECT_EQ(ks.size(), 48u);
  EXPECT_EQ(Open(c.Get(ng), false), Open(c.Get(good), false));
}

// aes*-cts keys in one batch with ctr-mpc keys: every component of each
// (the base key's round keys and powers of H, every dealt usage's
// material) keeps its value while every share changes; the ctr-mpc keys
// beside them are refreshed as before; a second refresh works too.
TEST(RefreshTest, CtsKeysAreRefreshedComponentByComponentBesideCtrKeys) {
  RefreshCluster c;
  const Bytes k128 = Random(16), k256 = Random(32), kc128 = Random(16), kc256 = Random(32);
  const std::string a = c.AddKey(k128), x = c.AddKey(kc256, "18:2:alice@EXAMPLE.COM", true),
                    b = c.AddKey(k256), y = c.AddKey(kc128, "17:4:bob@EXAMPLE.COM", true);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Layout(*c.Get(x)[i]), DealtLayout());
    c.Mutate(i, y, KeepOlderLayout);
  }
  ASSERT_EQ(c.Get(y)[0]->cts.size(), 3u);
  const Views olda = c.Get(a), oldb = c.Get(b), oldx = c.Get(x), oldy = c.Get(y);
  const std::string na = NewId(), nb = NewId(), nx = NewId(), ny = NewId();
  auto r = c.Run({{a, na}, {x, nx}, {b, nb}, {y, ny}});
  ASSERT_EQ(r.size(), 4u);
  for (const RefreshOutcome& o : r) EXPECT_EQ(o.status, pb::JOB_OK) << o.detail;

  for (const auto& [oldv, new_id, key] :
       {std::tuple{olda, na, k128}, std::tuple{oldb, nb, k256}}) {
    const Views newv = c.Get(new_id);
    ExpectRedealt(oldv, newv, key);
    EXPECT_TRUE(newv[0]->cts.empty());
    auto [ks, ctr0] = c.Keystream(new_id);
    EXPECT_EQ(ks, ReferenceKeystream(key, ctr0, 3));
  }
  for (const auto& [oldv, new_id, key] :
       {std::tuple{oldx, nx, kc256}, std::tuple{oldy, ny, kc128}}) {
    const Views newv = c.Get(new_id);
    EXPECT_EQ(Open(newv, false), Open(oldv, false));
    EXPECT_EQ(Open(newv, true), Open(oldv, true));
    ExpectCtsRedealt(oldv, newv, key);
    ExpectOldAndNewNeverCombine(oldv, newv, Open(oldv, false), Open(oldv, true), key);
    ExpectCtsOldAndNewNeverCombine(oldv, newv);
  }
  EXPECT_EQ(Layout(*c.Get(ny)[1]), (std::vector<std::pair<CtsKind, uint32_t>>{
                                       {CtsKind::kPrf, 0},
                                       {CtsKind::kUsage, 1},
                                       {CtsKind::kChecksum, 56}}));
  // A second refresh of the refreshed key.
  const std::string nx2 = NewId();
  r = c.Run({{nx, nx2}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  ExpectCtsRedealt(c.Get(nx), c.Get(nx2), kc256);
}

// The parties compare their layouts (in the view's metadata digest): an
// aes*-cts key whose records differ in their material's layout on one
// party (an entry missing, another usage, another order) fails on every
// party as inconsistent, and nothing is stored for it; the pairs beside
// it go ahead.
TEST(RefreshTest, CtsLayoutsThatDifferFailThePairOnEveryParty) {
  RefreshCluster c;
  const std::string good = c.AddKey(Random(32), "18:2:alice@EXAMPLE.COM", true);
  const std::string fewer = c.AddKey(Random(32), "18:2:bob@EXAMPLE.COM", true);
  const std::string usage = c.AddKey(Random(16), "17:2:carol@EXAMPLE.COM", true);
  const std::string order = c.AddKey(Random(32), "18:2:dave@EXAMPLE.COM", true);
  const std::string ctr = c.AddKey(Random(16));
  c.Mutate(2, fewer, [](KeyShares& k) { k.cts.pop_back(); });
  c.Mutate(0, usage, [](KeyShares& k) { k.cts[2].usage = 4; });
  c.Mutate(1, order, [](KeyShares& k) { std::swap(k.cts[0], k.cts[1]); });
  const std::vector<RefreshItem> items = {
      {good, NewId()}, {fewer, NewId()}, {usage, NewId()}, {order, NewId()}, {ctr, NewId()}};
  auto r = c.Run(items);
  ASSERT_EQ(r.size(), items.size());
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  for (size_t j = 1; j <= 3; ++j) {
    EXPECT_EQ(r[j].status, pb::JOB_KEY_INCONSISTENT) << j << ": " << r[j].detail;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Find(i, items[j].new_key_id), nullptr);
  }
  EXPECT_EQ(r[4].status, pb::JOB_OK) << r[4].detail;
}

TEST(RefreshTest, DifferentRequestsAbortOnAllPartiesAndTheRingStaysInStep) {
  RefreshCluster c;
  const Bytes key = Random(16);
  const std::string a = c.AddKey(key);
  const std::string n1 = NewId(), n2 = NewId();
  auto r = c.RunEach({std::vector<RefreshItem>{{a, n1}}, {{a, n1}}, {{a, n2}}});
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(r[i].ok());
    EXPECT_TRUE(absl::IsAborted(r[i].status())) << r[i].status();
  }
  // Nothing was stored; the next, agreed request goes through.
  auto ok = c.Run({{a, n1}});
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].status, pb::JOB_OK) << ok[0].detail;
  ExpectHolds(c.Get(n1), key);
}

TEST(RefreshTest, NothingToDoNeedsNoMaskRound) {
  RefreshCluster c;
  auto r = c.Run({{NewId(), NewId()}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, pb::JOB_UNKNOWN_KEY);
}

// A lost party L comes back with an empty store: the survivors give it a
// view of every key and re-randomise theirs; the key holds, computes, and
// no old view (the lost server's store, a survivor's backup) combines with
// a new view of another party. Run for each L (the ring roles rotate).
TEST(RefreshTest, RebuildGivesALostPartyNewSharesWithoutReconstructingTheKey) {
  for (int lost = 0; lost < 3; ++lost) {
    SCOPED_TRACE(::testing::Message() << "lost party " << lost);
    RefreshCluster c;
    const Bytes k128 = Random(16), k256 = Random(32);
    const std::string a = c.AddKey(k128, "1:3:alice@EXAMPLE.COM"),
                      b = c.AddKey(k256, "2:7:krbtgt/EXAMPLE.COM@EXAMPLE.COM");
    const Views olda = c.Get(a), oldb = c.Get(b);
    c.Lose(lost);
    const std::string na = NewId(), nb = NewId();
    auto r = c.Run({{a, na}, {b, nb}}, lost);
    ASSERT_EQ(r.size(), 2u);
    ASSERT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
    ASSERT_EQ(r[1].status, pb::JOB_OK) << r[1].detail;
    for (const auto& [oldv, new_id, key] :
         {std::tuple{olda, na, k128}, std::tuple{oldb, nb, k256}}) {
      const Views newv = c.Get(new_id);
      EXPECT_EQ(Open(newv, false), Open(oldv, false));
      EXPECT_EQ(Open(newv, true), Open(oldv, true));
      ExpectRedealt(oldv, newv, key);
      ExpectOldAndNewNeverCombine(oldv, newv, Open(oldv, false), Open(oldv, true), key);
      auto [ks, ctr0] = c.Keystream(new_id);
      EXPECT_EQ(ks, ReferenceKeystream(key, ctr0, 3));
    }
    // The rebuilt party stores the survivors' metadata.
    EXPECT_EQ(c.Meta(lost, na), "1:3:alice@EXAMPLE.COM");
    EXPECT_EQ(c.Meta(lost, nb), "2:7:krbtgt/EXAMPLE.COM@EXAMPLE.COM");
    // An ordinary refresh of the rebuilt keys works afterwards.
    const std::string na2 = NewId();
    r = c.Run({{na, na2}});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
    ExpectHolds(c.Get(na2), k128);
  }
}

// A lost party gets every aes*-cts key's material (its layout learnt from
// the survivors, the base key and each entry as a fresh view), in a batch
// with a ctr-mpc key; the three new views hold the same values, every
// share changed, and the rebuilt keys refresh afterwards. For each L.
TEST(RefreshTest, RebuildGivesALostPartyEveryCtsMaterialEntry) {
  for (int lost = 0; lost < 3; ++lost) {
    SCOPED_TRACE(::testing::Message() << "lost party " << lost);
    RefreshCluster c;
    const Bytes k128 = Random(16), kc256 = Random(32), kc128 = Random(16);
    const std::string a = c.AddKey(k128, "1:3:svc@EXAMPLE.COM"),
                      x = c.AddKey(kc256, "18:2:alice@EXAMPLE.COM", true),
                      y = c.AddKey(kc128, "17:5:bob@EXAMPLE.COM", true);
    for (int i = 0; i < 3; ++i) c.Mutate(i, y, KeepOlderLayout);
    const Views olda = c.Get(a), oldx = c.Get(x), oldy = c.Get(y);
    c.Lose(lost);
    const std::string na = NewId(), nx = NewId(), ny = NewId();
    auto r = c.Run({{x, nx}, {a, na}, {y, ny}}, lost);
    ASSERT_EQ(r.size(), 3u);
    for (const RefreshOutcome& o : r) ASSERT_EQ(o.status, pb::JOB_OK) << o.detail;
    ExpectRedealt(olda, c.Get(na), k128);
    EXPECT_TRUE(c.Get(na)[lost]->cts.empty());
    for (const auto& [oldv, new_id, key] :
         {std::tuple{oldx, nx, kc256}, std::tuple{oldy, ny, kc128}}) {
      const Views newv = c.Get(new_id);
      EXPECT_EQ(Open(newv, false), Open(oldv, false));
      EXPECT_EQ(Open(newv, true), Open(oldv, true));
      ExpectCtsRedealt(oldv, newv, key);
      ExpectOldAndNewNeverCombine(oldv, newv, Open(oldv, false), Open(oldv, true), key);
      ExpectCtsOldAndNewNeverCombine(oldv, newv);
    }
    EXPECT_EQ(Layout(*c.Get(nx)[lost]), DealtLayout());
    EXPECT_EQ(c.Meta(lost, nx), "18:2:alice@EXAMPLE.COM");
    EXPECT_EQ(c.Meta(lost, ny), "17:5:bob@EXAMPLE.COM");
    const std::string ny2 = NewId();
    r = c.Run({{ny, ny2}});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
    ExpectCtsRedealt(c.Get(ny), c.Get(ny2), kc128);
  }
}

// Survivors whose records of an aes*-cts key differ in layout (one lacks
// an entry; one names another usage) cannot give the new party one: the
// pair fails as inconsistent on all three, and the lost party stores
// nothing for it.
TEST(RefreshTest, RebuildFailsACtsKeyWhoseSurvivorsHoldDifferentLayouts) {
  RefreshCluster c;
  const std::string good = c.AddKey(Random(32), "18:2:alice@EXAMPLE.COM", true);
  const std::string fewer = c.AddKey(Random(32), "18:2:bob@EXAMPLE.COM", true);
  const std::string usage = c.AddKey(Random(16), "17:2:carol@EXAMPLE.COM", true);
  c.Lose(1);
  c.Mutate(2, fewer, [](KeyShares& k) { k.cts.erase(k.cts.begin()); });
  c.Mutate(0, usage, [](KeyShares& k) { k.cts[0].usage = 9; });
  const std::vector<RefreshItem> items = {{good, NewId()}, {fewer, NewId()}, {usage, NewId()}};
  auto r = c.Run(items, 1);
  ASSERT_EQ(r.size(), items.size());
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  EXPECT_EQ(Layout(*c.Get(items[0].new_key_id)[1]), DealtLayout());
  for (size_t j = 1; j < 3; ++j) {
    EXPECT_EQ(r[j].status, pb::JOB_KEY_INCONSISTENT) << j << ": " << r[j].detail;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Find(i, items[j].new_key_id), nullptr);
  }
}

TEST(RefreshTest, RebuildFailsPairsTheSurvivorsCannotGive) {
  RefreshCluster c;
  const std::string good = c.AddKey(Random(16));
  const std::string gone = c.AddKey(Random(16));
  const std::string meta = c.AddKey(Random(32));
  c.Lose(1);
  c.Drop(2, gone);                  // a survivor lacks it
  c.SetMeta(0, meta, "2:9:other");  // survivors disagree
  const std::string ng = NewId();
  std::vector<RefreshItem> items = {{good, ng}, {gone, NewId()}, {meta, NewId()}};
  auto r = c.Run(items, 1);
  ASSERT_EQ(r.size(), items.size());
  EXPECT_EQ(r[0].status, pb::JOB_OK) << r[0].detail;
  EXPECT_EQ(r[1].status, pb::JOB_UNKNOWN_KEY) << r[1].detail;
  EXPECT_EQ(r[2].status, pb::JOB_KEY_INCONSISTENT) << r[2].detail;
  auto [ks, ctr0] = c.Keystream(ng);
  EXPECT_EQ(ks.size(), 48u);
}

TEST(RefreshTest, RebuildOfAPartyThatStillHoldsTheKeyIsRefused) {
  RefreshCluster c;
  const std::string a = c.AddKey(Random(16));
  auto r = c.Run({{a, NewId()}}, 2);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, pb::JOB_MALFORMED);
  EXPECT_NE(r[0].detail.find("still holds"), std::string::npos) << r[0].detail;
}

// The refresh's agreement against a cheater that alters what it forwards
// (refresh_agreement.cc AgreeOnRefresh, ExchangeViews). Party i forwards party
// i+1's header (and, when the views differ, its views) to party i-1, each
// tagged by its originator under a key of the refresh's PRSS that party i
// lacks. The messages the cheater sends: 0 its PRSS key, 1 its header and
// tag, 2 the forwarded header and tag, then (views exchanged) 3 its views
// and tag, 4 the forwarded views and tag.
namespace tamper {

constexpr size_t kHeaderMsg = AgreementHeader::kSize + kForwardTagSize;

// Runs `items` on all three parties with nothing armed and returns the
// sizes of the messages the cheater sent.
std::vector<size_t> HonestSizes(RefreshCluster& c, const std::vector<RefreshItem>& items) {
  const uint64_t before = c.cheat().sent();
  auto r = c.RunEach({items, items, items});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r[i].ok()) << r[i].status();
  return std::vector<size_t>(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
}

// One tampered refresh of `items` (or rebuild of party `rebuild`):
// `detector` fails it as an integrity failure, and so does the third party
// (honest, in step with the originator): the detector's verdict in the new
// sharing's check (refresh_check.h) refuses, so no honest party keeps a new
// sharing; the old views of `keep` stay as they were (and, outside a
// rebuild, still hold `key`).
void ExpectTamperFails(RefreshCluster& c, const std::vector<RefreshItem>& items,
                       int detector, int other, const std::string& keep, const Bytes& key,
                       const std::string& what, int rebuild = kNoRebuild) {
  std::array<std::shared_ptr<const KeyShares>, 3> before;
  for (int i = 0; i < 3; ++i) before[i] = c.Find(i, keep);
  auto r = c.RunEach({items, items, items}, rebuild);
  ASSERT_TRUE(c.cheat().fired()) << what;
  ASSERT_FALSE(r[detector].ok()) << what;
  EXPECT_TRUE(protocol::IsIntegrityFailure(r[detector].status()))
      << what << ": " << r[detector].status();
  ASSERT_FALSE(r[other].ok()) << what;
  EXPECT_TRUE(protocol::IsIntegrityFailure(r[other].status()))
      << what << ": " << r[other].status();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(c.Find(i, keep), before[i]) << what << " party " << i;
  if (rebuild == kNoRebuild) ExpectHolds(c.Get(keep), key);
}

}  // namespace tamper

// The forwarded header altered (inputs digest, views digest, the end of
// the header, its tag), and the cheater's own header sent with a bad tag
// (party i+1 then finds the tag it receives forwarded wrong): the party
// that checks the tag fails the refresh as an integrity failure, nothing
// changes in the stores, and after the ring is re-established the next
// refresh is served.
TEST(RefreshTest, ForwardedHeaderTamperingIsAnIntegrityFailure) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int cheater = 0; cheater < 3; ++cheater) {
    RefreshCluster c(cheater);
    const Bytes key = Random(16);
    const std::string a = c.AddKey(key);
    const std::vector<size_t> sizes = tamper::HonestSizes(c, {{a, NewId()}});
    ASSERT_GE(sizes.size(), 4u);
    EXPECT_EQ(sizes[0], 16u);  // the PRSS key
    EXPECT_EQ(sizes[1], tamper::kHeaderMsg);
    EXPECT_EQ(sizes[2], tamper::kHeaderMsg);
    const std::array<std::pair<uint64_t, size_t>, 5> cases = {{
        {2, 3}, {2, 40}, {2, AgreementHeader::kSize - 1}, {2, tamper::kHeaderMsg - 1},
        {1, tamper::kHeaderMsg - 1}}};
    for (const auto& [step, off] : cases) {
      const std::string what =
          absl::StrCat("cheater ", cheater, " step ", step, " byte ", off);
      // Step 2 forges for party i-1; a bad own tag is seen by party i+1.
      const int detector = step == 2 ? (cheater + 2) % 3 : (cheater + 1) % 3;
      const int other = 3 - cheater - detector;
      c.cheat().Arm(step, off, 0x01);
      tamper::ExpectTamperFails(c, {{a, NewId()}}, detector, other, a, key, what);
      c.cheat().Disarm();
      c.Reconnect();
      const Views oldv = c.Get(a);
      const std::string n = NewId();
      auto ok = c.Run({{a, n}});
      ASSERT_EQ(ok.size(), 1u) << what;
      EXPECT_EQ(ok[0].status, pb::JOB_OK) << what << ": " << ok[0].detail;
      ExpectRedealt(oldv, c.Get(n), key);
    }
  }
  std::printf("refresh forwarded-header tampering: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The per-pair views, exchanged when they differ (a key missing on the
// cheater) and in every rebuild, altered as the cheater forwards them.
TEST(RefreshTest, ForwardedViewTamperingIsAnIntegrityFailure) {
  for (int cheater = 0; cheater < 3; ++cheater) {
    RefreshCluster c(cheater);
    const Bytes key = Random(16);
    const std::string a = c.AddKey(key), gone = c.AddKey(Random(16));
    c.Drop(cheater, gone);
    auto items = [&] { return std::vector<RefreshItem>{{a, NewId()}, {gone, NewId()}}; };
    const std::vector<size_t> sizes = tamper::HonestSizes(c, items());
    ASSERT_GE(sizes.size(), 5u);
    ASSERT_EQ(sizes[3], 2 * 67 + kForwardTagSize);  // two pairs' views, tagged
    ASSERT_EQ(sizes[4], sizes[3]);
    const std::string what = absl::StrCat("cheater ", cheater, " forwarded views");
    c.cheat().Arm(4, 1, 0x02);
    tamper::ExpectTamperFails(c, items(), (cheater + 2) % 3, (cheater + 1) % 3, a,
                              key, what);
    c.cheat().Disarm();
    c.Reconnect();
    auto next = c.Run(items());
    ASSERT_EQ(next.size(), 2u);
    EXPECT_EQ(next[0].status, pb::JOB_OK) << next[0].detail;
    EXPECT_EQ(next[1].status, pb::JOB_UNKNOWN_KEY);
  }
  // A rebuild of the cheater (a new server that forwards survivor A's
  // views to survivor B, which checks them): B fails it, A serves it.
  for (int lost = 0; lost < 3; ++lost) {
    RefreshCluster c(lost);
    const Bytes key = Random(16);
    const std::string a = c.AddKey(key);
    c.Lose(lost);
    c.cheat().Arm(4, 0, 0x01);
    tamper::ExpectTamperFails(c, {{a, NewId()}}, (lost + 2) % 3, (lost + 1) % 3, a, key,
                              absl::StrCat("rebuild of cheater ", lost), lost);
    c.cheat().Disarm();
    c.Reconnect();
    c.Lose(lost);
    const std::string n = NewId();
    auto ok = c.Run({{a, n}}, lost);
    ASSERT_EQ(ok.size(), 1u);
    EXPECT_EQ(ok[0].status, pb::JOB_OK) << ok[0].detail;
    ExpectHolds(c.Get(n), key);
  }
}

// Survivor A (the party that sends the new party the pairs' public
// metadata and layouts) sends a layout other than the one both survivors'
// views agreed on: the new party finds it does not match the agreed
// digest and refuses in the check, survivor B fails the rebuild as an
// integrity failure, nothing is stored, and an honest rebuild then works.
// A's messages in a rebuild: 0 its PRSS key, 1-2 headers, 3-4 views, then
// 5 the metadata's length, 6 the metadata (per pair: u64 length, metadata,
// layout: count, then kind | usage (u32 BE) | length (u16 BE) per entry),
// 7 the shares, then the check's.
TEST(RefreshTest, ASurvivorSendingAnotherLayoutFailsTheRebuild) {
  for (int lost = 0; lost < 3; ++lost) {
    SCOPED_TRACE(::testing::Message() << "lost party " << lost);
    const int a = (lost + 1) % 3, b = (lost + 2) % 3;
    RefreshCluster c(a);
    const Bytes key = Random(32);
    const std::string meta = "18:2:alice@EXAMPLE.COM";
    const std::string x = c.AddKey(key, meta, true);
    const Views oldv = c.Get(x);
    c.Lose(lost);
    // The honest message map.
    const std::vector<RefreshItem> honest_items = {{x, NewId()}};
    const uint64_t before = c.cheat().sent();
    auto honest = c.RunEach({honest_items, honest_items, honest_items}, lost);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(honest[i].ok()) << honest[i].status();
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before,
                                    c.cheat().sizes().end());
    ASSERT_GE(sizes.size(), 8u);
    ASSERT_EQ(sizes[5], 8u);
    const size_t layout_at = 8 + meta.size();
    ASSERT_EQ(sizes[6], layout_at + 1 + 7 * DealtLayout().size());
    c.Lose(lost);
    c.Reconnect();

    // The low byte of the first entry's usage: usage 1 becomes 0, a layout
    // of the same size the new party could store.
    c.cheat().Arm(6, layout_at + 5, 0x01);
    const std::vector<RefreshItem> items = {{x, NewId()}};
    auto r = c.RunEach({items, items, items}, lost);
    ASSERT_TRUE(c.cheat().fired());
    ASSERT_FALSE(r[lost].ok());
    EXPECT_NE(r[lost].status().message().find("does not match the agreed views"),
              std::string::npos)
        << r[lost].status();
    ASSERT_FALSE(r[b].ok());
    EXPECT_TRUE(protocol::IsIntegrityFailure(r[b].status())) << r[b].status();
    EXPECT_FALSE(r[a].ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Find(i, items[0].new_key_id), nullptr);
    EXPECT_EQ(c.Find(a, x), oldv[a]);
    EXPECT_EQ(c.Find(b, x), oldv[b]);

    c.cheat().Disarm();
    c.Reconnect();
    c.Lose(lost);
    const std::string n = NewId();
    auto ok = c.Run({{x, n}}, lost);
    ASSERT_EQ(ok.size(), 1u);
    EXPECT_EQ(ok[0].status, pb::JOB_OK) << ok[0].detail;
    ExpectCtsRedealt(oldv, c.Get(n), key);
  }
}

}  // namespace
}  // namespace kmpc::engine
