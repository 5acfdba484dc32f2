// Every job type on three parties in one process, against an independent
// computation (OpenSSL AES, GHASH by the bit-by-bit reference multiply),
// the shared vectors, tampering, digest mismatch and malformed input.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/agreement.h"
#include "net/memory_ring.h"
#include "protocol/gf128.h"
#include "protocol/prf.h"
#include "protocol/verify.h"
#include "share/replicated.h"
#include "../cheat.h"
#include "enctype_reference.h"
#include "finalize_testing.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::CheatingChannel;
using ::kmpc::testing::FinalizeBothComponents;
using ::kmpc::testing::Hex;
using ::kmpc::testing::OpensslAes;
using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using ::kmpc::testing::ToHex;
using Bytes = std::vector<uint8_t>;
using reference::Const;
using reference::Ctr;
using reference::ReadFile;
using reference::RefChecksum;
using reference::RefEncrypt;
using reference::RefGhash;
using reference::Section;
using reference::SignAll;

// A key id no party holds.
const std::string kNoSuchKey(contract::kKeyIdSize, 'n');

// The job was computed: its tag verified or not (no other per-job failure).
bool Computed(const JobResult& r) {
  return r.status == pb::JOB_OK || r.status == pb::JOB_INTEGRITY_FAILED;
}

// Combines the three parties' output shares, checking each share's copies.
Bytes Combine(const std::array<std::array<Bytes, 2>, 3>& v) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(v[i][1], v[(i + 1) % 3][0]) << "copies of share " << (i + 1) % 3;
    EXPECT_EQ(v[i][0].size(), v[0][0].size());
  }
  Bytes out(v[0][0].size());
  for (size_t k = 0; k < out.size(); ++k) out[k] = v[0][0][k] ^ v[1][0][k] ^ v[2][0][k];
  return out;
}

Bytes Keystream(const std::array<BatchResult, 3>& r, size_t j) {
  std::array<std::array<Bytes, 2>, 3> v;
  for (int i = 0; i < 3; ++i) v[i] = r[i].jobs[j].keystream;
  return Combine(v);
}

Bytes TagOf(const std::array<JobResult, 3>& r) {
  std::array<std::array<Bytes, 2>, 3> v;
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 2; ++k) v[i][k].assign(r[i].tag[k].begin(), r[i].tag[k].end());
  }
  return Combine(v);
}

class Cluster {
 public:
  explicit Cluster(EngineOptions opt = {}) : Cluster({opt, opt, opt}) {}
  explicit Cluster(const std::array<EngineOptions, 3>& opts) : opts_(opts) {
    Connect();
  }
  // Party `cheater` runs over the cheating-server harness (cheat.h).
  Cluster(EngineOptions opt, int cheater) : opts_({opt, opt, opt}), cheater_(cheater) {
    Connect();
  }
  // A fresh ring and engines (as the servers do after a ring failure); the
  // keys stay. With a cheater the ring's receive timeout is short (a cheated
  // batch may leave a party waiting for a peer that gave up), so on a loaded
  // machine the engines' set-up can time out: it is retried.
  void Connect() {
    std::array<absl::Status, 3> st;
    for (int attempt = 0; attempt < 5; ++attempt) {
      st = TryConnect();
      if (st[0].ok() && st[1].ok() && st[2].ok()) return;
    }
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  }
  std::array<absl::Status, 3> TryConnect() {
    engines_ = {};
    cheat_.reset();
    ring_ = std::make_unique<net::InMemoryRing>(
        cheater_ >= 0 ? cheat_timeout_ : std::chrono::milliseconds(20000));
    if (cheater_ >= 0) cheat_ = std::make_unique<CheatingChannel>(ring_->party(cheater_));
    return RunParties([&](int i) -> absl::Status {
      net::RingChannel& ch = i == cheater_ ? *cheat_ : ring_->party(i);
      auto e = Engine::Create(ch, opts_[i]);
      if (!e.ok()) return e.status();
      engines_[i] = std::move(*e);
      return absl::OkStatus();
    });
  }
  CheatingChannel& cheat() { return *cheat_; }
  // With a cheater, from the next Connect on: a receive waits at most 8x
  // `honest` (an honest batch's time, measured), and at least 1 s.
  // Short, since a cheated batch may leave a party waiting for a peer that
  // gave up; scaled to the machine's load, so that an honest message is
  // not taken for a lost one.
  void ScaleCheatTimeout(std::chrono::steady_clock::duration honest) {
    cheat_timeout_ = std::max(
        std::chrono::milliseconds(1000),
        8 * std::chrono::duration_cast<std::chrono::milliseconds>(honest));
  }

  std::string AddKey(const Bytes& key) {
    const Cipher c = key.size() == 16 ? Cipher::kAes128 : Cipher::kAes256;
    auto views = DealKey(c, key);
    EXPECT_TRUE(views.ok()) << views.status();
    // Key ids are contract::kKeyIdSize bytes and name the cipher the key is
    // dealt for, so the job helpers below can name it (CipherOf), as the
    // KDC knows a key's enctype from its database.
    std::string id = (c == Cipher::kAes256 ? "k256-" : "k128-") +
                     std::to_string(next_id_++);
    id.resize(contract::kKeyIdSize, '.');
    for (int i = 0; i < 3; ++i) {
      // Store round trip, as the LMDB store would; the kind from the
      // record (a service's random key: what DealKey dealt), as the key
      // lookup sets it (service/key_cache.cc).
      auto parsed = KeyShares::Parse((*views)[i].Serialize());
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      if (parsed.ok()) parsed->kind = (*views)[i].kind;
      store_[i][id] = std::make_shared<const KeyShares>(std::move(*parsed));
    }
    return id;
  }
  void DropKey(int party, const std::string& id) { store_[party].erase(id); }
  // Gives `party` its view of a fresh dealing of `key` under `id` (another
  // deal_id than the other two parties' views).
  void RedealOn(int party, const std::string& id, const Bytes& key) {
    const Cipher c = key.size() == 16 ? Cipher::kAes128 : Cipher::kAes256;
    auto views = DealKey(c, key);
    ASSERT_TRUE(views.ok()) << views.status();
    store_[party][id] = std::make_shared<const KeyShares>((*views)[party]);
  }
  // Puts another party's view under `id` on `party` (unusable shares).
  void WrongPartyOn(int party, const std::string& id) {
    store_[party][id] = store_[(party + 1) % 3][id];
  }

  // Runs the batch on the three parties; per-party job lists may differ.
  std::array<absl::StatusOr<BatchResult>, 3> RunEach(
      uint64_t seq, const std::array<std::vector<Job>, 3>& jobs) {
    std::array<absl::StatusOr<BatchResult>, 3> out;
    RunParties([&](int i) {
      KeyLookup lookup = [this, i](absl::string_view id)
          -> absl::StatusOr<std::shared_ptr<const KeyShares>> {
        auto it = store_[i].find(std::string(id));
        if (it == store_[i].end()) return absl::NotFoundError("no such key");
        return it->second;
      };
      out[i] = engines_[i]->RunBatch(seq, jobs[i], lookup);
      return out[i].status();
    });
    return out;
  }

  // Every CHECKSUM / VERIFY_CHECKSUM job the helpers below built with its
  // message in `data` (data.size() == length, no shares yet) gets the
  // message dealt afresh as shares (as the KDC module's client::DealFlat), so
  // each party sees only its pair; other jobs go to all three unchanged.
  static std::array<std::vector<Job>, 3> Deal(const std::vector<Job>& jobs) {
    std::array<std::vector<Job>, 3> out = {jobs, jobs, jobs};
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& in = jobs[j];
      if ((in.type != pb::JOB_CHECKSUM && in.type != pb::JOB_VERIFY_CHECKSUM) ||
          in.data.size() != in.length || !in.data_shares[0].empty() ||
          !in.data_shares[1].empty())
        continue;
      // A VERIFY_CHECKSUM's ctr0 || tag: the tag is dealt after the message
      // and the job keeps ctr0 (kmpc.proto JOB_VERIFY_CHECKSUM); a checksum
      // of another size stays whole, a zero tag dealt.
      Bytes value = in.data;
      Bytes ctr0 = in.checksum;
      if (in.type == pb::JOB_VERIFY_CHECKSUM) {
        const bool whole = ctr0.size() == contract::kChecksumSize;
        value.insert(value.end(), whole ? ctr0.begin() + 16 : ctr0.end(),
                     ctr0.end());
        if (!whole) value.resize(value.size() + 16, 0);
        if (whole) ctr0.resize(16);
      }
      auto views = share::Deal(value);
      EXPECT_TRUE(views.ok());
      for (int i = 0; i < 3; ++i) {
        out[i][j].data.clear();
        out[i][j].data_shares = (*views)[i].comp;
        out[i][j].checksum = ctr0;
      }
    }
    return out;
  }

  // The same batch on the three parties, its messages dealt as shares.
  std::array<absl::StatusOr<BatchResult>, 3> RunSame(uint64_t seq,
                                                     const std::vector<Job>& jobs) {
    return RunEach(seq, Deal(jobs));
  }

  std::array<BatchResult, 3> Run(const std::vector<Job>& jobs) {
    auto r = RunEach(seq_++, Deal(jobs));
    std::array<BatchResult, 3> out;
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(r[i].ok()) << r[i].status();
      if (r[i].ok()) out[i] = std::move(*r[i]);
      if (out[i].jobs.size() != jobs.size()) out[i].jobs.resize(jobs.size());
    }
    return out;
  }

  net::InMemoryRing& ring() { return *ring_; }
  Engine& engine(int i) { return *engines_[i]; }

 private:
  std::array<EngineOptions, 3> opts_;
  int cheater_ = -1;
  std::chrono::milliseconds cheat_timeout_{1000};
  std::unique_ptr<net::InMemoryRing> ring_;
  std::unique_ptr<CheatingChannel> cheat_;
  std::array<std::unique_ptr<Engine>, 3> engines_;
  std::array<std::map<std::string, std::shared_ptr<const KeyShares>>, 3> store_;
  int next_id_ = 0;
  uint64_t seq_ = 1;
};

// The cipher a Cluster::AddKey id was dealt for; AES-128 for any other id
// (a missing key: only its absence is tested).
pb::Cipher CipherOf(const std::string& id) {
  return absl::StartsWith(id, "k256-") ? pb::CIPHER_AES256 : pb::CIPHER_AES128;
}

// A job of `type` under key `id` (its cipher as CipherOf) and usage.
Job KeyJob(pb::JobType type, const std::string& id, uint32_t usage) {
  Job j;
  j.type = type;
  j.cipher = CipherOf(id);
  j.key_id = id;
  j.usage = usage;
  return j;
}

Job EncryptJob(const std::string& id, uint32_t usage, uint32_t n) {
  Job j = KeyJob(pb::JOB_ENCRYPT, id, usage);
  j.nblocks = n;
  return j;
}
Job DecryptJob(const std::string& id, uint32_t usage, Bytes ct) {
  Job j = KeyJob(pb::JOB_DECRYPT, id, usage);
  j.data = std::move(ct);
  return j;
}
// The message goes in `data` here; Cluster::Run deals it as shares (a job
// with its message in the clear would fail as JOB_MALFORMED).
Job ChecksumJob(const std::string& id, uint32_t usage, Bytes d) {
  Job j = KeyJob(pb::JOB_CHECKSUM, id, usage);
  j.length = static_cast<uint32_t>(d.size());
  j.data = std::move(d);
  return j;
}
Job VerifyJob(const std::string& id, uint32_t usage, Bytes d, Bytes cks) {
  Job j = ChecksumJob(id, usage, std::move(d));
  j.type = pb::JOB_VERIFY_CHECKSUM;
  j.checksum = std::move(cks);
  return j;
}

// FINALIZE is no Run job (contract::CheckJob): refused as JOB_MALFORMED.
Job FinalizeJob() {
  Job j;
  j.type = pb::JOB_FINALIZE;
  j.usage = 5;
  j.data = Random(32);
  return j;
}

Bytes Xor(const Bytes& a, const Bytes& b) {
  Bytes o(a.size());
  for (size_t k = 0; k < a.size(); ++k) o[k] = a[k] ^ b[k];
  return o;
}

// Job 0 of r is a 2-block ENCRYPT under key (its keystream must be
// OpenSSL's from its ctr0) and job 3 the DECRYPT of ct (ctr0 || C || T),
// whose keystream must turn C back into p.
void ExpectEncryptAndDecryptRight(const std::array<BatchResult, 3>& r,
                                  const Bytes& key, const Bytes& ct,
                                  const Bytes& p) {
  const Bytes ctr0(r[0].jobs[0].ctr0.begin(), r[0].jobs[0].ctr0.end());
  const auto w1 = OpensslAes(key, Ctr(ctr0, 1).data());
  const auto w2 = OpensslAes(key, Ctr(ctr0, 2).data());
  Bytes want(w1.begin(), w1.end());
  want.insert(want.end(), w2.begin(), w2.end());
  EXPECT_EQ(ToHex(Keystream(r, 0)), ToHex(want));
  Bytes dec = Keystream(r, 3);
  ASSERT_GE(dec.size(), p.size());
  dec.resize(p.size());
  const Bytes c_only(ct.begin() + 16, ct.end() - 16);
  EXPECT_EQ(ToHex(Xor(c_only, dec)), ToHex(p));
}

// Encrypt P the way the KDC does: ENCRYPT, XOR, FINALIZE.
Bytes ClusterEncrypt(Cluster& c, const std::string& id, uint32_t usage,
                     const Bytes& p) {
  const uint32_t n = static_cast<uint32_t>((p.size() + 15) / 16);
  auto r = c.Run({EncryptJob(id, usage, n)});
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Computed(r[i].jobs[0])) << r[i].jobs[0].detail;
    EXPECT_EQ(r[i].jobs[0].ctr0, r[0].jobs[0].ctr0);
  }
  Bytes ks = Keystream(r, 0);
  ks.resize(p.size());
  const Bytes cbytes = Xor(p, ks);
  std::array<JobResult, 3> f;
  for (int i = 0; i < 3; ++i) {
    auto fr = FinalizeBothComponents(*r[i].jobs[0].state, usage, cbytes);
    EXPECT_TRUE(fr.ok()) << fr.status();
    if (fr.ok()) f[i] = std::move(*fr);
  }
  Bytes out(r[0].jobs[0].ctr0.begin(), r[0].jobs[0].ctr0.end());
  out.insert(out.end(), cbytes.begin(), cbytes.end());
  const Bytes tag = TagOf(f);
  // KeyOps.Finalize's answers (one additive share each) combine to the
  // same tag as the replicated components.
  Bytes added(16, 0);
  for (int i = 0; i < 3; ++i) {
    std::array<uint8_t, 16> t{};
    EXPECT_TRUE(FinalizeShare(*r[i].jobs[0].state, usage, cbytes, t).ok());
    for (int b = 0; b < 16; ++b) added[b] ^= t[b];
  }
  EXPECT_EQ(ToHex(added), ToHex(tag));
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

// The ring is in step: a fresh ENCRYPT of `len` random bytes under key `id`
// (ClusterEncrypt) DECRYPTs with its tag holding on all three parties.
void ExpectRoundTripHolds(Cluster& c, const std::string& id, uint32_t usage, size_t len) {
  const Bytes ct = ClusterEncrypt(c, id, usage, Random(len));
  auto d = c.Run({DecryptJob(id, usage, ct)});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d[i].jobs[0].status, pb::JOB_OK) << i;
}

TEST(Engine, EncryptFinalizeMatchesReference) {
  Cluster c;
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len);
    const std::string id = c.AddKey(key);
    for (size_t plen : {0, 1, 15, 16, 17, 100, 992, 993, 3000}) {
      const Bytes p = Random(plen);
      const Bytes ct = ClusterEncrypt(c, id, 7, p);
      const Bytes ctr0(ct.begin(), ct.begin() + 16);
      EXPECT_EQ(ToHex(ct), ToHex(RefEncrypt(key, 7, ctr0, p)))
          << "key " << key_len << " plen " << plen;
    }
  }
}

TEST(Engine, DecryptRoundTripAndKeystreamOnlyIfTagHolds) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  const Bytes p = Random(40);
  const Bytes ct = ClusterEncrypt(c, id, 3, p);
  auto r = c.Run({DecryptJob(id, 3, ct), DecryptJob(id, 4, ct)});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Computed(r[i].jobs[0]));
    EXPECT_EQ(r[i].jobs[0].status, pb::JOB_OK);
    EXPECT_EQ(r[i].jobs[1].status, pb::JOB_INTEGRITY_FAILED);  // wrong usage
    EXPECT_TRUE(r[i].jobs[1].keystream[0].empty());
    EXPECT_TRUE(r[i].jobs[1].keystream[1].empty());
  }
  Bytes ks = Keystream(r, 0);
  ks.resize(p.size());
  EXPECT_EQ(Xor(Bytes(ct.begin() + 16, ct.end() - 16), ks), p);
}

// Job::release_if_ok: an ENCRYPT or CHECKSUM released on a DECRYPT of the
// same batch is withheld (nothing revealed, no state) on every party when
// that DECRYPT fails, released when it holds; a bad reference is
// malformed; a condition given to one party only is refused in the
// agreement (a KDC cannot get the result from two parties without it).
TEST(Engine, ConditionalReleaseOnlyWhenTheDecryptHeld) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  const Bytes ct = ClusterEncrypt(c, id, 1, Random(20));
  Bytes bad = ct;
  bad[20] ^= 1;
  auto cond = [&](Job j, int64_t on) {
    j.release_if_ok = on;
    return j;
  };
  std::vector<Job> jobs = {
      DecryptJob(id, 1, ct),                      // 0 holds
      DecryptJob(id, 1, bad),                     // 1 fails
      cond(EncryptJob(id, 3, 4), 0),              // 2 released
      cond(EncryptJob(id, 3, 4), 1),              // 3 withheld
      cond(ChecksumJob(id, 5, {1, 2, 3}), 1),     // 4 withheld
      cond(ChecksumJob(id, 5, {1, 2, 3}), 0),     // 5 released
      cond(EncryptJob(id, 3, 1), 5),              // 6 names a CHECKSUM
      cond(EncryptJob(id, 3, 1), 6),              // 7 names itself
      cond(EncryptJob(id, 3, 1), 99),             // 8 out of range
      cond(DecryptJob(id, 1, ct), 0),             // 9 a DECRYPT is never conditional
  };
  auto r = c.Run(jobs);
  for (int i = 0; i < 3; ++i) {
    const auto& js = r[i].jobs;
    EXPECT_EQ(js[0].status, pb::JOB_OK);
    EXPECT_EQ(js[1].status, pb::JOB_INTEGRITY_FAILED);
    EXPECT_EQ(js[2].status, pb::JOB_OK);
    EXPECT_EQ(js[2].keystream[0].size(), 64u);
    EXPECT_NE(js[2].state, nullptr);
    for (int k : {3, 4}) {
      EXPECT_EQ(js[k].status, pb::JOB_WITHHELD) << k;
      EXPECT_TRUE(js[k].keystream[0].empty() && js[k].keystream[1].empty()) << k;
      EXPECT_EQ(js[k].state, nullptr) << k;
      EXPECT_EQ(js[k].tag[0], (std::array<uint8_t, 16>{})) << k;
      EXPECT_EQ(js[k].tag[1], (std::array<uint8_t, 16>{})) << k;
      EXPECT_EQ(js[k].ctr0, (std::array<uint8_t, 16>{})) << k;
    }
    EXPECT_EQ(js[5].status, pb::JOB_OK);
    for (int k : {6, 7, 8, 9}) EXPECT_EQ(js[k].status, pb::JOB_MALFORMED) << k;
  }
  // The released keystream is right: AES_K(ctr0 + 1..4).
  auto ks = Keystream(r, 2);
  const auto& ctr0 = r[0].jobs[2].ctr0;
  std::array<uint8_t, 16> c1 = ctr0;
  for (int k = 15; k >= 0; --k)
    if (++c1[k] != 0) break;
  const auto b1 = OpensslAes(key, c1.data());
  EXPECT_EQ(Bytes(ks.begin(), ks.begin() + 16), Bytes(b1.begin(), b1.end()));

  // The condition on one party only: refused everywhere.
  std::vector<Job> a = {DecryptJob(id, 1, bad), EncryptJob(id, 3, 1)};
  std::vector<Job> b = a;
  b[1].release_if_ok = 0;
  auto d = c.RunEach(50, {a, b, a});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(d[i].status().code(), absl::StatusCode::kAborted) << i;
}

TEST(Engine, DecryptCounterCarriesAndUpperEdge) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  Bytes carry = Hex("0123456789abcdefffffffffffffffff");  // c0+1 carries
  Bytes edge(16, 0xff);
  edge[15] = 0xfc;  // c0 + 3 = 2^128 - 1: the last usable range
  const Bytes p3 = Random(48), p4 = Random(49);
  std::vector<Job> jobs = {DecryptJob(id, 5, RefEncrypt(key, 5, carry, p3)),
                           DecryptJob(id, 5, RefEncrypt(key, 5, edge, p3)),
                           DecryptJob(id, 5, RefEncrypt(key, 5, edge, p4))};
  auto r = c.Run(jobs);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].jobs[0].status, pb::JOB_OK);
    EXPECT_EQ(r[i].jobs[1].status, pb::JOB_OK);
    // 4 blocks after 2^128 - 4 would reach the all-zero block.
    EXPECT_EQ(r[i].jobs[2].status, pb::JOB_INTEGRITY_FAILED);
  }
  for (int j = 0; j < 2; ++j) {
    Bytes ks = Keystream(r, j);
    ks.resize(p3.size());
    const Bytes& ct = jobs[j].data;
    EXPECT_EQ(Xor(Bytes(ct.begin() + 16, ct.end() - 16), ks), p3) << j;
  }
}

TEST(Engine, FreshCounterEveryJobEvenForIdenticalBatches) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  std::set<std::string> seen;
  for (int b = 0; b < 3; ++b) {
    auto r = c.Run({EncryptJob(id, 1, 2), EncryptJob(id, 1, 2), ChecksumJob(id, 1, {})});
    for (int j = 0; j < 3; ++j) {
      for (int i = 1; i < 3; ++i) EXPECT_EQ(r[i].jobs[j].ctr0, r[0].jobs[j].ctr0);
      EXPECT_TRUE(seen.insert(ToHex(r[0].jobs[j].ctr0)).second);
    }
  }
}

// The shared vectors through the engine with each S-box a small batch can
// get: depth 3 (the default rule) and depth 4 (depth3_max_blocks = 0).
class EngineSbox : public ::testing::TestWithParam<bool> {};

TEST_P(EngineSbox, SharedVectors) {
  EngineOptions opt;
  if (!GetParam()) opt.depth3_max_blocks = 0;
  const std::string json = ReadFile(KMPC_VECTORS_PATH);
  ASSERT_FALSE(json.empty()) << KMPC_VECTORS_PATH;
  auto enc = Section(json, "encrypt");
  auto cks = Section(json, "checksum");
  auto count = [&](const std::string& key) {
    size_t n = 0;
    for (size_t p = json.find(key); p != std::string::npos; p = json.find(key, p + 1)) ++n;
    return n;
  };
  // Every vector of the file is parsed (none silently skipped).
  ASSERT_EQ(enc.size(), count("\"plaintext\""));
  ASSERT_EQ(cks.size(), count("\"data\""));
  ASSERT_GE(enc.size(), 2u);
  ASSERT_GE(cks.size(), 1u);
  Cluster c(opt);
  std::vector<Job> jobs;
  std::vector<Bytes> plains;
  for (auto& v : enc) {
    const Bytes key = Hex(v["key"]);
    // The reference agrees with the vector (sanity of the harness).
    EXPECT_EQ(ToHex(RefEncrypt(key, std::stoul(v["usage"]), Hex(v["ctr0"]),
                               Hex(v["plaintext"]))),
              v["ciphertext"]);
    jobs.push_back(DecryptJob(c.AddKey(key), std::stoul(v["usage"]), Hex(v["ciphertext"])));
    plains.push_back(Hex(v["plaintext"]));
  }
  for (auto& v : cks) {
    const Bytes key = Hex(v["key"]);
    const Bytes full = Hex(v["checksum"]);
    EXPECT_EQ(ToHex(RefChecksum(key, std::stoul(v["usage"]), Hex(v["ctr0"]), Hex(v["data"]))),
              v["checksum"]);
    jobs.push_back(VerifyJob(c.AddKey(key), std::stoul(v["usage"]), Hex(v["data"]), full));
  }
  auto r = c.Run(jobs);
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(Computed(r[i].jobs[j])) << r[i].jobs[j].detail;
      EXPECT_EQ(r[i].jobs[j].status, pb::JOB_OK) << "vector job " << j;
    }
    if (j < enc.size()) {
      const Bytes& ct = jobs[j].data;
      Bytes ks = Keystream(r, j);
      ks.resize(ct.size() - 32);
      EXPECT_EQ(Xor(Bytes(ct.begin() + 16, ct.end() - 16), ks), plains[j]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Circuits, EngineSbox, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Depth3" : "Depth4";
                         });

TEST(Engine, ChecksumMatchesReferenceAndVerifies) {
  Cluster c;
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len);
    const std::string id = c.AddKey(key);
    for (size_t dlen : {0, 5, 16, 33, 1500}) {
      const Bytes d = Random(dlen);
      auto r = c.Run({ChecksumJob(id, 41, d)});
      std::array<JobResult, 3> jr = {r[0].jobs[0], r[1].jobs[0], r[2].jobs[0]};
      for (auto& x : jr) ASSERT_TRUE(Computed(x)) << x.detail;
      const Bytes ctr0(jr[0].ctr0.begin(), jr[0].ctr0.end());
      Bytes full = ctr0;
      const Bytes tag = TagOf(jr);
      full.insert(full.end(), tag.begin(), tag.end());
      EXPECT_EQ(ToHex(full), ToHex(RefChecksum(key, 41, ctr0, d)));
      Bytes bad = full;
      bad[20] ^= 0x10;
      auto v = c.Run({VerifyJob(id, 41, d, full), VerifyJob(id, 41, d, bad),
                      VerifyJob(id, 42, d, full)});
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(v[i].jobs[0].status, pb::JOB_OK);
        EXPECT_EQ(v[i].jobs[1].status, pb::JOB_INTEGRITY_FAILED);
        EXPECT_EQ(v[i].jobs[2].status, pb::JOB_INTEGRITY_FAILED);
      }
    }
  }
}

// GHASH_H(A', D) from OpenSSL's AES-GCM, independent of this code base's
// GF(2^128): with a 96-bit IV, GCM encrypts P under the keystream from
// inc32(J0), J0 = IV || 0^31 || 1, and its tag is GHASH_H(AAD, C) ^ E_K(J0)
// (SP 800-38D, 7.1). Encrypting P = D ^ keystream (the keystream being
// the encryption of zeros) makes C = D, so GHASH_H(A', D) = tag ^ E_K(J0).
Bytes GcmGhash(const Bytes& key, const Bytes& aad, const Bytes& d) {
  const Bytes iv(12, 0x5a);
  auto gcm = [&](const Bytes& p, Bytes* c, Bytes* tag) {
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(),
                       nullptr, key.data(), iv.data());
    int n = 0;
    if (!aad.empty()) EVP_EncryptUpdate(ctx, nullptr, &n, aad.data(), aad.size());
    c->assign(p.size() + 16, 0);
    int clen = 0;
    if (!p.empty()) EVP_EncryptUpdate(ctx, c->data(), &clen, p.data(), p.size());
    EVP_EncryptFinal_ex(ctx, c->data() + clen, &n);
    c->resize(p.size());
    tag->assign(16, 0);
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag->data());
    EVP_CIPHER_CTX_free(ctx);
  };
  Bytes ks, c, tag, unused;
  gcm(Bytes(d.size(), 0), &ks, &unused);
  gcm(Xor(d, ks), &c, &tag);
  EXPECT_EQ(c, d);
  Bytes j0 = iv;
  j0.insert(j0.end(), {0, 0, 0, 1});
  const auto e = OpensslAes(key, j0.data());
  for (int k = 0; k < 16; ++k) tag[k] ^= e[k];
  return tag;
}

// CHECKSUM over shares against OpenSSL's GCM (both ciphers; messages of
// 1000 and 1500 bytes need more than the stored 64 powers of H, computed in
// the MPC), and VERIFY_CHECKSUM over fresh shares accepts exactly it.
TEST(Engine, SharedChecksumMatchesOpensslGcm) {
  Cluster c;
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len);
    const std::string id = c.AddKey(key);
    std::vector<Job> jobs;
    std::vector<Bytes> msgs;
    for (size_t dlen : {0, 1, 16, 17, 1000, 1500}) {
      msgs.push_back(Random(dlen));
      jobs.push_back(ChecksumJob(id, 0x01020304, msgs.back()));
    }
    auto r = c.Run(jobs);
    std::vector<Job> verify;
    for (size_t j = 0; j < jobs.size(); ++j) {
      std::array<JobResult, 3> jr = {r[0].jobs[j], r[1].jobs[j], r[2].jobs[j]};
      for (auto& x : jr) ASSERT_EQ(x.status, pb::JOB_OK) << x.detail;
      const Bytes ctr0(jr[0].ctr0.begin(), jr[0].ctr0.end());
      Bytes want = GcmGhash(key, {1, 2, 3, 4, 0x99}, msgs[j]);
      const auto e0 = OpensslAes(key, ctr0.data());
      for (int k = 0; k < 16; ++k) want[k] ^= e0[k];
      const Bytes tag = TagOf(jr);
      EXPECT_EQ(ToHex(tag), ToHex(want)) << "length " << msgs[j].size();
      Bytes full = ctr0;
      full.insert(full.end(), tag.begin(), tag.end());
      verify.push_back(VerifyJob(id, 0x01020304, msgs[j], full));
      Bytes other = msgs[j];
      other.push_back(0);  // one byte longer: another message
      verify.push_back(VerifyJob(id, 0x01020304, other, full));
    }
    auto v = c.Run(verify);
    for (int i = 0; i < 3; ++i)
      for (size_t j = 0; j < verify.size(); ++j)
        EXPECT_EQ(v[i].jobs[j].status, j % 2 ? pb::JOB_INTEGRITY_FAILED : pb::JOB_OK)
            << "job " << j << " party " << i;
  }
}

// A message in the clear (Job::data of a CHECKSUM) is refused on every
// party, and shares of the wrong size too; the batch's other jobs run.
TEST(Engine, ChecksumMessageOnlyAsShares) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  Job clear = ChecksumJob(id, 1, {1, 2, 3});  // not dealt: RunEach below
  Job odd = ChecksumJob(id, 1, {});
  odd.length = 3;
  odd.data_shares = {Bytes{1, 2, 3}, Bytes{1, 2}};
  const std::vector<Job> jobs = {clear, odd, EncryptJob(id, 1, 1)};
  auto r = c.RunEach(90, {jobs, jobs, jobs});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r[i].ok()) << r[i].status();
    EXPECT_EQ(r[i]->jobs[0].status, pb::JOB_MALFORMED);
    EXPECT_NE(r[i]->jobs[0].detail.find("shares"), std::string::npos);
    EXPECT_EQ(r[i]->jobs[1].status, pb::JOB_MALFORMED);
    EXPECT_EQ(r[i]->jobs[2].status, pb::JOB_OK);
  }
}

// ---- Pads and ring-free signing (engine.h PadState, SignShare) ----

Job PadJob(const std::string& id, uint32_t usage, uint32_t max_length) {
  Job j = KeyJob(pb::JOB_PAD, id, usage);
  j.length = max_length;
  return j;
}

// Pads drawn by a real 3-party Run (semi-honest and malicious): the same
// fresh ctr0 on the three parties, nothing revealed, and the t_i XOR to
// the reference checksum under the dealt key for messages up to the pad's
// length (both ciphers; 1000 bytes: powers computed in the MPC).
TEST(Sign, PadsFromARunSignCorrectly) {
  for (bool malicious : {false, true}) {
    EngineOptions o;
    o.malicious = malicious;
    Cluster c(o);
    for (size_t key_len : {16, 32}) {
      const Bytes key = Random(key_len);
      const std::string id = c.AddKey(key);
      const std::vector<uint32_t> lens = {0, 1, 16, 17, 1000};
      std::vector<Job> jobs;
      for (uint32_t len : lens) jobs.push_back(PadJob(id, 9, len));
      jobs.push_back(PadJob(id, 9, 1000));  // signs a shorter message
      auto r = c.Run(jobs);
      std::set<std::string> ctrs;
      for (size_t j = 0; j < jobs.size(); ++j) {
        std::array<std::shared_ptr<const PadState>, 3> pads;
        for (int i = 0; i < 3; ++i) {
          ASSERT_EQ(r[i].jobs[j].status, pb::JOB_OK) << r[i].jobs[j].detail;
          ASSERT_NE(r[i].jobs[j].pad, nullptr);
          EXPECT_EQ(r[i].jobs[j].ctr0, r[0].jobs[j].ctr0);
          EXPECT_TRUE(r[i].jobs[j].keystream[0].empty());
          EXPECT_EQ(r[i].jobs[j].pad->party, i);
          pads[i] = r[i].jobs[j].pad;
        }
        EXPECT_TRUE(ctrs.insert(ToHex(r[0].jobs[j].ctr0)).second);
        const Bytes ctr0(r[0].jobs[j].ctr0.begin(), r[0].jobs[j].ctr0.end());
        const Bytes d = Random(j + 1 < jobs.size() ? lens[j] : 333);
        const Bytes want = RefChecksum(key, 9, ctr0, d);
        EXPECT_EQ(ToHex(SignAll(pads, 9, d)), ToHex(Bytes(want.begin() + 16, want.end())))
            << "malicious " << malicious << " key " << key_len << " job " << j;
        // The zero-shares differ per party and XOR to zero.
        Bytes zx(16, 0);
        for (int i = 0; i < 3; ++i)
          for (int k = 0; k < 16; ++k) zx[k] ^= pads[i]->zero[k];
        EXPECT_EQ(zx, Bytes(16, 0));
        EXPECT_NE(pads[0]->zero, pads[1]->zero);
      }
    }
  }
}

TEST(Engine, AnySingleBitFlipFailsIntegrity) {
  Cluster c;
  const std::string id = c.AddKey(Random(32));
  const Bytes p = Random(20);
  const Bytes ct = ClusterEncrypt(c, id, 2, p);
  std::vector<Job> jobs;
  for (size_t bit = 0; bit < 8 * ct.size(); ++bit) {
    Bytes t = ct;
    t[bit / 8] ^= static_cast<uint8_t>(1 << (bit % 8));
    jobs.push_back(DecryptJob(id, 2, t));
  }
  jobs.push_back(DecryptJob(id, 2, ct));
  auto r = c.Run(jobs);
  for (int i = 0; i < 3; ++i) {
    for (size_t j = 0; j + 1 < jobs.size(); ++j) {
      ASSERT_TRUE(Computed(r[i].jobs[j])) << r[i].jobs[j].detail;
      ASSERT_EQ(r[i].jobs[j].status, pb::JOB_INTEGRITY_FAILED) << "bit " << j;
      ASSERT_TRUE(r[i].jobs[j].keystream[0].empty());
      ASSERT_TRUE(r[i].jobs[j].keystream[1].empty());
    }
    EXPECT_EQ(r[i].jobs.back().status, pb::JOB_OK);
  }
  // Checksums too.
  const Bytes d = Random(24);
  auto cr = c.Run({ChecksumJob(id, 9, d)});
  std::array<JobResult, 3> jr = {cr[0].jobs[0], cr[1].jobs[0], cr[2].jobs[0]};
  Bytes full(jr[0].ctr0.begin(), jr[0].ctr0.end());
  const Bytes tag = TagOf(jr);
  full.insert(full.end(), tag.begin(), tag.end());
  std::vector<Job> vj;
  for (size_t bit = 0; bit < 8 * full.size(); ++bit) {
    Bytes t = full;
    t[bit / 8] ^= static_cast<uint8_t>(1 << (bit % 8));
    vj.push_back(VerifyJob(id, 9, d, t));
  }
  for (size_t bit = 0; bit < 8 * d.size(); bit += 13) {
    Bytes t = d;
    t[bit / 8] ^= static_cast<uint8_t>(1 << (bit % 8));
    vj.push_back(VerifyJob(id, 9, t, full));
  }
  auto vr = c.Run(vj);
  for (int i = 0; i < 3; ++i) {
    for (size_t j = 0; j < vj.size(); ++j) ASSERT_EQ(vr[i].jobs[j].status, pb::JOB_INTEGRITY_FAILED) << j;
  }
}

TEST(Engine, DigestMismatchRefusedEverywhere) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  std::vector<Job> a = {EncryptJob(id, 1, 2)};
  std::vector<Job> b = {EncryptJob(id, 1, 3)};
  auto r = c.RunEach(5, {a, a, b});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << i;
  }
  // One party with an extra ENCRYPT job (draws one more counter): refused,
  // and the PRSS stays in step.
  std::vector<Job> c2 = {EncryptJob(id, 1, 2), ChecksumJob(id, 4, {1, 2})};
  r = c.RunEach(6, {a, Cluster::Deal(c2)[1], a});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << i;
  }
  // Same jobs, different batch_seq on one party.
  r = c.RunEach(7, {a, a, a});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r[i].ok());
  // The ring is still in step: a good batch works afterwards (and its
  // keystream is right, so the zero-shares still cancel).
  auto ok = c.Run(a);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Computed(ok[i].jobs[0]));
  ExpectRoundTripHolds(c, id, 3, 30);
}

// Parties whose engine options would make them run different circuits
// (here: one uses the 32-AND S-box for a 3-block batch, the others the
// 34-AND one) refuse every batch in the agreement, on all three, saying
// why, instead of losing the ring's framing mid-batch.
TEST(Engine, DifferentEngineOptionsRefusedEverywhere) {
  EngineOptions odd;
  odd.small_sbox_min_blocks = 1;
  Cluster c({EngineOptions{}, EngineOptions{}, odd});
  const std::string id = c.AddKey(Random(16));
  std::vector<Job> a = {EncryptJob(id, 1, 2)};
  for (int round = 0; round < 2; ++round) {
    auto r = c.RunEach(5 + round, {a, a, a});
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << i;
      EXPECT_TRUE(absl::StrContains(r[i].status().message(),
                                    "--small_sbox_min_blocks"))
          << r[i].status();
    }
  }
}

// A key missing / differently dealt / unusable on one party fails only the
// jobs using it, with the same code on all three parties; the other jobs of
// the batch are computed correctly and the ring stays in step.
TEST(Engine, KeyStoreDisagreementFailsOnlyThatJob) {
  Cluster c;
  const Bytes good_key = Random(16), good_key2 = Random(32);
  const std::string good = c.AddKey(good_key);
  const std::string good2 = c.AddKey(good_key2);
  const std::string gone = c.AddKey(Random(16));
  const Bytes redealt_key = Random(16);
  const std::string redealt = c.AddKey(redealt_key);
  const std::string wrong = c.AddKey(Random(16));
  c.DropKey(1, gone);
  c.RedealOn(2, redealt, redealt_key);
  c.WrongPartyOn(0, wrong);
  const Bytes p = Random(40);
  const Bytes ct = ClusterEncrypt(c, good, 3, p);
  const std::vector<Job> jobs = {
      EncryptJob(good, 1, 2),           // 0 fine
      EncryptJob(gone, 1, 2),           // 1 missing on party 1
      ChecksumJob(redealt, 4, {1, 2}),  // 2 other dealing on party 2
      DecryptJob(good, 3, ct),          // 3 fine
      DecryptJob(wrong, 3, ct),         // 4 party 0 holds party 1's view
      ChecksumJob(good2, 5, {7, 8, 9}), // 5 fine
      EncryptJob(kNoSuchKey, 1, 1),         // 6 missing everywhere
      FinalizeJob(),                   // 7 malformed (not a Run job)
  };
  for (int round = 0; round < 2; ++round) {
    auto r = c.Run(jobs);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(Computed(r[i].jobs[0])) << i << ": " << r[i].jobs[0].detail;
      EXPECT_EQ(r[i].jobs[1].status, pb::JOB_UNKNOWN_KEY) << i;
      EXPECT_NE(r[i].jobs[1].detail.find("party 1"), std::string::npos)
          << r[i].jobs[1].detail;
      EXPECT_EQ(r[i].jobs[2].status, pb::JOB_KEY_INCONSISTENT)
          << i << ": " << r[i].jobs[2].detail;
      EXPECT_TRUE(Computed(r[i].jobs[3])) << i << ": " << r[i].jobs[3].detail;
      EXPECT_EQ(r[i].jobs[3].status, pb::JOB_OK);
      EXPECT_EQ(r[i].jobs[4].status, pb::JOB_KEY_INCONSISTENT)
          << i << ": " << r[i].jobs[4].detail;
      EXPECT_TRUE(Computed(r[i].jobs[5])) << i << ": " << r[i].jobs[5].detail;
      EXPECT_EQ(r[i].jobs[6].status, pb::JOB_UNKNOWN_KEY) << i;
      EXPECT_EQ(r[i].jobs[7].status, pb::JOB_MALFORMED);
      for (size_t j = 0; j < jobs.size(); ++j) {
        EXPECT_EQ(r[i].jobs[j].status, r[0].jobs[j].status) << j;
        EXPECT_EQ(r[i].jobs[j].ctr0, r[0].jobs[j].ctr0) << j;
      }
    }
    // The computed jobs are right.
    ExpectEncryptAndDecryptRight(r, good_key, ct, p);
    // The CHECKSUM verifies.
    std::array<JobResult, 3> cr;
    for (int i = 0; i < 3; ++i) cr[i] = r[i].jobs[5];
    Bytes cks(r[0].jobs[5].ctr0.begin(), r[0].jobs[5].ctr0.end());
    const Bytes tag = TagOf(cr);
    cks.insert(cks.end(), tag.begin(), tag.end());
    auto v = c.Run({VerifyJob(good2, 5, {7, 8, 9}, cks)});
    for (int i = 0; i < 3; ++i) EXPECT_EQ(v[i].jobs[0].status, pb::JOB_OK) << i;
  }
  // Only broken keys in the batch: every job fails alike, the ring is fine.
  auto r = c.Run({EncryptJob(gone, 1, 1), ChecksumJob(redealt, 1, {})});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].jobs[0].status, pb::JOB_UNKNOWN_KEY);
    EXPECT_EQ(r[i].jobs[1].status, pb::JOB_KEY_INCONSISTENT);
  }
  ExpectRoundTripHolds(c, good, 9, 17);
}

// kmpc.proto Job.cipher: a job naming another cipher than the one its key
// id was dealt for fails alone, as JOB_WRONG_CIPHER on all three parties,
// with nothing computed or revealed (no AES-256 key run under AES-128's ten
// rounds, nor the reverse); no cipher or an unknown one is JOB_MALFORMED.
// The other jobs of the batch are computed and right.
TEST(Engine, JobCipherMustBeTheKeysCipher) {
  Cluster c;
  const Bytes k128 = Random(16), k256 = Random(32);
  const std::string id128 = c.AddKey(k128), id256 = c.AddKey(k256);
  ASSERT_EQ(CipherOf(id128), pb::CIPHER_AES128);
  ASSERT_EQ(CipherOf(id256), pb::CIPHER_AES256);
  const Bytes p = Random(40);
  const Bytes ct = ClusterEncrypt(c, id256, 3, p);
  auto with = [](Job j, pb::Cipher cipher) {
    j.cipher = cipher;
    return j;
  };
  const std::vector<Job> jobs = {
      EncryptJob(id128, 1, 2),                                     // 0 fine
      with(EncryptJob(id128, 1, 2), pb::CIPHER_AES256),            // 1 wrong
      with(DecryptJob(id256, 3, ct), pb::CIPHER_AES128),           // 2 wrong
      DecryptJob(id256, 3, ct),                                    // 3 fine
      with(ChecksumJob(id128, 4, {1}), pb::CIPHER_UNSPECIFIED),    // 4 malformed
      with(EncryptJob(id256, 1, 1), static_cast<pb::Cipher>(3)),   // 5 malformed
      with(ChecksumJob(id256, 4, {1, 2}), pb::CIPHER_AES128),      // 6 wrong
      with(EncryptJob(kNoSuchKey, 1, 1), pb::CIPHER_AES256),       // 7 no key
      with(VerifyJob(id128, 4, {1}, Bytes(32, 7)), pb::CIPHER_AES256),  // 8 wrong
  };
  const std::set<size_t> wrong = {1, 2, 6, 8};
  for (int round = 0; round < 2; ++round) {
    auto r = c.Run(jobs);
    for (int i = 0; i < 3; ++i) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        EXPECT_EQ(r[i].jobs[j].status, r[0].jobs[j].status) << i << " " << j;
        EXPECT_EQ(r[i].jobs[j].detail, r[0].jobs[j].detail) << i << " " << j;
      }
      EXPECT_EQ(r[i].jobs[0].status, pb::JOB_OK) << r[i].jobs[0].detail;
      EXPECT_TRUE(Computed(r[i].jobs[0]));
      EXPECT_EQ(r[i].jobs[3].status, pb::JOB_OK) << r[i].jobs[3].detail;
      EXPECT_EQ(r[i].jobs[4].status, pb::JOB_MALFORMED);
      EXPECT_NE(r[i].jobs[4].detail.find("cipher"), std::string::npos);
      EXPECT_EQ(r[i].jobs[5].status, pb::JOB_MALFORMED);
      EXPECT_EQ(r[i].jobs[7].status, pb::JOB_UNKNOWN_KEY);
      for (size_t j : wrong) {
        const JobResult& w = r[i].jobs[j];
        EXPECT_EQ(w.status, pb::JOB_WRONG_CIPHER) << i << " " << j << ": " << w.detail;
        EXPECT_FALSE(Computed(w)) << j;
        EXPECT_TRUE(w.keystream[0].empty() && w.keystream[1].empty()) << j;
        EXPECT_EQ(w.state, nullptr) << j;
        EXPECT_EQ(w.ctr0, (std::array<uint8_t, 16>{})) << j;
      }
      EXPECT_NE(r[i].jobs[1].detail.find("dealt for AES128"), std::string::npos)
          << r[i].jobs[1].detail;
      EXPECT_NE(r[i].jobs[2].detail.find("dealt for AES256"), std::string::npos)
          << r[i].jobs[2].detail;
    }
    // The computed jobs are right: OpenSSL's keystream under k128, and the
    // AES-256 ciphertext's plaintext.
    ExpectEncryptAndDecryptRight(r, k128, ct, p);
  }
  // A batch of wrong-cipher jobs only: all fail alike, with no more ring
  // messages than a batch of jobs that fail their check (the agreement
  // rounds: no AES layer ran on the keys), and the ring stays in step.
  auto messages = [&] { return c.ring().messages_sent(0); };
  uint64_t before = messages();
  c.Run({with(EncryptJob(id256, 1, 1), pb::CIPHER_UNSPECIFIED),
         with(EncryptJob(id128, 1, 1), pb::CIPHER_UNSPECIFIED)});
  const uint64_t malformed_cost = messages() - before;
  before = messages();
  auto r = c.Run({with(EncryptJob(id256, 1, 1), pb::CIPHER_AES128),
                  with(EncryptJob(id128, 1, 1), pb::CIPHER_AES256)});
  EXPECT_EQ(messages() - before, malformed_cost);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].jobs[0].status, pb::JOB_WRONG_CIPHER);
    EXPECT_EQ(r[i].jobs[1].status, pb::JOB_WRONG_CIPHER);
  }
  before = messages();
  c.Run({EncryptJob(id256, 1, 1)});
  EXPECT_GT(messages() - before, malformed_cost + 10);  // 14 AES rounds' ANDs
  auto d = c.Run({DecryptJob(id256, 3, ct)});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d[i].jobs[0].status, pb::JOB_OK) << i;
}

// The job's cipher is an input the three parties agree on: a party given
// another cipher for the same job refuses the batch with the others
// (ABORTED), so a KDC cannot have one party compute under a cipher the
// others refuse.
TEST(Engine, CipherIsInTheAgreementDigest) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  const std::vector<Job> a = {EncryptJob(id, 1, 1)};
  std::vector<Job> b = a;
  b[0].cipher = pb::CIPHER_AES256;
  auto r = c.RunEach(60, {a, a, b});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << i << r[i].status();
  auto ok = c.Run(a);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ok[i].jobs[0].status, pb::JOB_OK) << i;
}

// Jobs that break the contract fail alone, with the contract's status:
// JOB_MALFORMED, or JOB_INTEGRITY_FAILED for inputs that cannot verify
// under any key (contract::CheckJob).
TEST(Engine, MalformedJobsFailAloneOthersStillRun) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  Bytes ff(32, 0xff);
  ff[31] = 0;  // ctr0 = 2^128-1: any block after it wraps to zero
  Bytes ff_ct(ff.begin(), ff.end());
  ff_ct.insert(ff_ct.begin() + 16, 0x00);  // 1 byte of C
  Bytes zero_ctr(48, 0);
  Job bad_type = EncryptJob(id, 1, 1);
  bad_type.type = static_cast<pb::JobType>(77);
  Job enc_with_data = EncryptJob(id, 1, 1);
  enc_with_data.data = {1};
  constexpr pb::JobStatus kBad = pb::JOB_MALFORMED;
  constexpr pb::JobStatus kCannot = pb::JOB_INTEGRITY_FAILED;
  Job preset = EncryptJob(id, 1, 1);
  preset.precheck = {kBad, "checked by the caller"};
  const std::vector<std::pair<Job, pb::JobStatus>> cases = {
      {EncryptJob(id, 1, kMaxJobBlocks + 1), kBad},     // too many
      {EncryptJob("", 1, 1), kBad},                     // no key id
      {EncryptJob(id.substr(1), 1, 1), kBad},           // key id 31 bytes
      {EncryptJob(id + "x", 1, 1), kBad},               // key id 33 bytes
      {DecryptJob(id, 1, Random(31)), kCannot},         // too short
      {DecryptJob(id, 1, ff_ct), kCannot},              // counter wraps
      {DecryptJob(id, 1, zero_ctr), kCannot},           // ctr0 = 0
      {VerifyJob(id, 1, {}, Random(31)), kCannot},      // short checksum
      {bad_type, kBad},
      {enc_with_data, kBad},
      {FinalizeJob(), kBad},                            // not a Run job
      {preset, kBad},                                   // the caller's check
  };
  std::vector<Job> jobs;
  for (const auto& kase : cases) jobs.push_back(kase.first);
  jobs.push_back(EncryptJob(kNoSuchKey, 1, 1));  // unknown key
  jobs.push_back(EncryptJob(id, 1, 1));          // fine
  auto r = c.Run(jobs);
  for (int i = 0; i < 3; ++i) {
    for (size_t j = 0; j < cases.size(); ++j) {
      EXPECT_EQ(r[i].jobs[j].status, cases[j].second)
          << "job " << j << ": " << r[i].jobs[j].detail;
      EXPECT_FALSE(r[i].jobs[j].detail.empty());
    }
    EXPECT_EQ(r[i].jobs[11].detail, "checked by the caller");
    EXPECT_EQ(r[i].jobs[jobs.size() - 2].status, pb::JOB_UNKNOWN_KEY);
    EXPECT_TRUE(r[i].jobs.back().ok());
  }
  // The good job is still right.
  const Bytes ks = Keystream(r, jobs.size() - 1);
  const Bytes ctr0(r[0].jobs.back().ctr0.begin(), r[0].jobs.back().ctr0.end());
  const auto want = OpensslAes(key, Ctr(ctr0, 1).data());
  EXPECT_EQ(ToHex(ks), ToHex(want));
}

// a^(2^128 - 2) = a^-1 in GF(2^128) (GCM bit order; 0 for 0).
protocol::Block GfInverse(const protocol::Block& a) {
  protocol::Block res{}, x = a;
  res[0] = 0x80;  // 1
  for (int i = 1; i < 128; ++i) {
    x = protocol::GfMul(x, x);
    res = protocol::GfMul(res, x);
  }
  return res;
}

// The last GHASH block (the lengths) of FINALIZE over `len` bytes of C.
protocol::Block LengthsBlock(uint32_t usage, size_t len) {
  const uint8_t u[4] = {uint8_t(usage >> 24), uint8_t(usage >> 16),
                        uint8_t(usage >> 8), uint8_t(usage)};
  std::vector<uint8_t> x = protocol::GhashInput(u, Bytes(len, 0));
  protocol::Block b;
  std::memcpy(b.data(), x.data() + x.size() - 16, 16);
  return b;
}

// A KDC that sends each server another ciphertext (C, then C less its
// last byte, then less two, those bytes zero: only the lengths block
// differs) and pairs the two answers that would carry component j of the
// tag: with both components per answer (FinalizeBothComponents, what KeyOps
// wire version 3 sent) the mask cancels and component j of H falls out, so
// H = AES_K(0) (the control); with KeyOps.Finalize's one additive share
// per server (FinalizeShare) no two answers share a component and the
// same computation yields no H.
TEST(Engine, FinalizeSharesOverDifferentCiphertextsRevealNoHashKey) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  const uint32_t usage = 2;
  const uint8_t zero[16] = {};
  const auto h = OpensslAes(key, zero);
  protocol::Block h_true;
  std::memcpy(h_true.data(), h.data(), 16);
  Bytes C = Random(32);
  C[31] = C[30] = 0;
  const Bytes cs[3] = {C, Bytes(C.begin(), C.begin() + 31), Bytes(C.begin(), C.begin() + 30)};
  // Component j is tag[0] of party j and tag[1] of party j-1.
  auto attack = [&](const std::array<protocol::Block, 3>& own,
                    const std::array<protocol::Block, 3>& prev_copy) {
    protocol::Block h{};
    for (int j = 0; j < 3; ++j) {
      const int p = (j + 2) % 3;
      protocol::Block d, delta;
      const protocol::Block lj = LengthsBlock(usage, cs[j].size());
      const protocol::Block lp = LengthsBlock(usage, cs[p].size());
      for (int b = 0; b < 16; ++b) {
        d[b] = own[j][b] ^ prev_copy[p][b];
        delta[b] = lj[b] ^ lp[b];
      }
      const protocol::Block hj = protocol::GfMul(d, GfInverse(delta));
      for (int b = 0; b < 16; ++b) h[b] ^= hj[b];
    }
    return h;
  };
  {  // Control: both components, as wire version 3 answered.
    auto r = c.Run({EncryptJob(id, usage, 2)});
    std::array<protocol::Block, 3> own, copy;
    for (int i = 0; i < 3; ++i) {
      auto f = FinalizeBothComponents(*r[i].jobs[0].state, usage, cs[i]);
      ASSERT_TRUE(f.ok()) << f.status();
      own[i] = f->tag[0];
      copy[i] = f->tag[1];
    }
    EXPECT_EQ(attack(own, copy), h_true) << "the control must recover H";
  }
  // KeyOps.Finalize: one share per server; pairing server j's with server
  // j-1's (the only two answers there are to pair) gives no H, for fresh
  // states again and again.
  for (int trial = 0; trial < 4; ++trial) {
    auto r = c.Run({EncryptJob(id, usage, 2)});
    std::array<protocol::Block, 3> t;
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(FinalizeShare(*r[i].jobs[0].state, usage, cs[i], t[i]).ok());
    EXPECT_NE(attack(t, t), h_true) << trial;
  }
}

TEST(Engine, FinalizeChecks) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  auto r = c.Run({EncryptJob(id, 5, 2)});
  const EncryptState& st = *r[0].jobs[0].state;
  std::array<uint8_t, 16> t{};
  EXPECT_EQ(FinalizeShare(st, 6, Random(20), t).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FinalizeShare(st, 5, Random(33), t).code(), absl::StatusCode::kInvalidArgument);
  // Shorter than the keystream is allowed (the KDC's speculative keystream
  // is sized by a bound and a prefix used); longer is not (above).
  EXPECT_TRUE(FinalizeShare(st, 5, Random(16), t).ok());
  EXPECT_TRUE(FinalizeShare(st, 5, Random(17), t).ok());
  // Never as a Run job: the Run path that answered both components is
  // gone (a KDC asks KeyOps.Finalize, one additive share per server).
  auto fr = c.Run({FinalizeJob()});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(fr[i].jobs[0].status, pb::JOB_MALFORMED) << fr[i].jobs[0].detail;
    EXPECT_EQ(fr[i].jobs[0].tag[0], (std::array<uint8_t, 16>{})) << i;
    EXPECT_EQ(fr[i].jobs[0].tag[1], (std::array<uint8_t, 16>{})) << i;
  }
}

// An ENCRYPT state references the key's stored powers of H when they
// suffice (no copy) and holds only the computed ones for long messages;
// either way FINALIZE gives the reference tag.
TEST(Engine, EncryptStateHoldsNoCopyOfTheStoredPowers) {
  Cluster c;
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  for (size_t len : {size_t{0}, size_t{40}, size_t{16 * 62}, size_t{16 * 62 + 1},
                     size_t{16 * 300 + 5}}) {
    const uint32_t n = static_cast<uint32_t>((len + 15) / 16);
    auto r = c.Run({EncryptJob(id, 9, n)});
    const size_t m = n + 2;  // GHASH blocks: A, C, lengths
    for (int i = 0; i < 3; ++i) {
      const EncryptState& st = *r[i].jobs[0].state;
      EXPECT_GE(st.NumPowers(), m) << len;
      if (m <= static_cast<size_t>(kStoredHPowers)) {
        EXPECT_NE(st.key, nullptr) << len;
        EXPECT_TRUE(st.h_powers[0].empty() && st.h_powers[1].empty()) << len;
        EXPECT_LT(st.OwnBytes(), 512u) << len;
      } else {
        EXPECT_EQ(st.key, nullptr) << len;
        EXPECT_EQ(st.h_powers[0].size(), 16 * m) << len;
      }
    }
    const Bytes p = Random(len);
    Bytes ks = Keystream(r, 0);
    ks.resize(len);
    const Bytes ct = Xor(p, ks);
    std::array<JobResult, 3> f;
    for (int i = 0; i < 3; ++i) {
      auto fr = FinalizeBothComponents(*r[i].jobs[0].state, 9, ct);
      ASSERT_TRUE(fr.ok()) << fr.status();
      f[i] = std::move(*fr);
    }
    const Bytes ctr0(r[0].jobs[0].ctr0.begin(), r[0].jobs[0].ctr0.end());
    const Bytes want = RefEncrypt(key, 9, ctr0, p);
    const Bytes tag = TagOf(f);
    EXPECT_EQ(ToHex(tag), ToHex(Bytes(want.end() - 16, want.end()))) << len;
  }
}

TEST(Engine, LargeMixedBatchUsesDepth6AndStaysCorrect) {
  EngineOptions opt;
  opt.small_sbox_min_blocks = 64;
  opt.chunk_lanes = 256;
  opt.wave_lanes = 512;
  Cluster c(opt);
  const Bytes k1 = Random(16), k2 = Random(32);
  const std::string id1 = c.AddKey(k1), id2 = c.AddKey(k2);
  auto r = c.Run({EncryptJob(id1, 1, 300), EncryptJob(id2, 2, 500), EncryptJob(id1, 3, 7)});
  const Bytes* keys[] = {&k1, &k2, &k1};
  for (int j = 0; j < 3; ++j) {
    const Bytes ks = Keystream(r, j);
    const Bytes ctr0(r[0].jobs[j].ctr0.begin(), r[0].jobs[j].ctr0.end());
    for (size_t b = 0; b < ks.size() / 16; b += 17) {
      const auto want = OpensslAes(*keys[j], Ctr(ctr0, b + 1).data());
      ASSERT_EQ(ToHex(absl::MakeConstSpan(&ks[16 * b], 16)), ToHex(want));
    }
  }
}

TEST(Engine, EmptyBatchAndBatchesInSequence) {
  Cluster c;
  auto r = c.Run({});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r[i].jobs.empty());
  const Bytes key = Random(32);
  const std::string id = c.AddKey(key);
  for (int b = 0; b < 5; ++b) {
    const Bytes p = Random(1 + 37 * b);
    const Bytes ct = ClusterEncrypt(c, id, 11, p);
    EXPECT_EQ(ToHex(ct), ToHex(RefEncrypt(key, 11, Bytes(ct.begin(), ct.begin() + 16), p)));
  }
}

TEST(Engine, RingFailureMakesEngineRefuseLaterBatches) {
  net::InMemoryRing ring(std::chrono::milliseconds(200));
  std::array<std::unique_ptr<Engine>, 3> e;
  RunParties([&](int i) -> absl::Status {
    auto x = Engine::Create(ring.party(i));
    if (x.ok()) e[i] = std::move(*x);
    return x.status();
  });
  for (auto& x : e) ASSERT_NE(x, nullptr);
  auto views = DealKey(Cipher::kAes128, Random(16));
  ASSERT_TRUE(views.ok());
  // Only parties 0 and 1 run: they time out waiting for party 2.
  std::array<absl::StatusOr<BatchResult>, 3> r;
  RunParties([&](int i) -> absl::Status {
    if (i == 2) return absl::OkStatus();
    auto ks = std::make_shared<const KeyShares>((*views)[i]);
    KeyLookup lookup = [ks](absl::string_view)
        -> absl::StatusOr<std::shared_ptr<const KeyShares>> { return ks; };
    r[i] = e[i]->RunBatch(1, {EncryptJob("k", 1, 1)}, lookup);
    return r[i].status();
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].status().code(), absl::StatusCode::kUnavailable);
    auto again = e[i]->RunBatch(2, {}, nullptr);
    EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(Engine, RandomJunkJobsGiveConsistentStatuses) {
  Cluster c;
  const std::string id = c.AddKey(Random(16));
  std::mt19937 rng(1234);
  for (int round = 0; round < 4; ++round) {
    std::vector<Job> jobs;
    for (int k = 0; k < 40; ++k) {
      Job j;
      j.type = static_cast<pb::JobType>(rng() % 7);
      j.key_id = (rng() % 4 == 0) ? kNoSuchKey : id;
      // Mostly the key's cipher; sometimes the other, none or an unknown one.
      const uint32_t cr = rng() % 8;
      j.cipher = cr < 5 ? pb::CIPHER_AES128 : static_cast<pb::Cipher>(cr - 5);
      j.usage = rng();
      j.nblocks = (rng() % 3 == 0) ? rng() : rng() % 5;
      j.data = Random(rng() % 80);
      if (rng() % 2) j.checksum = Random(rng() % 40);
      jobs.push_back(std::move(j));
    }
    auto r = c.Run(jobs);
    for (size_t j = 0; j < jobs.size(); ++j) {
      for (int i = 1; i < 3; ++i) {
        ASSERT_EQ(r[i].jobs[j].status, r[0].jobs[j].status) << j;
        ASSERT_EQ(r[i].jobs[j].detail, r[0].jobs[j].detail) << j;
      }
      // Random ciphertexts and checksums never verify.
      if (jobs[j].type == pb::JOB_DECRYPT || jobs[j].type == pb::JOB_VERIFY_CHECKSUM) {
        EXPECT_FALSE(r[0].jobs[j].ok()) << j;
      }
    }
  }
  // Still in step afterwards.
  auto ok = c.Run({EncryptJob(id, 1, 3)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Computed(ok[i].jobs[0]));
}

// ---- Malicious security (protocol/verify.h) and the cheating harness ----

namespace mal {

EngineOptions Malicious() {
  EngineOptions o;
  o.malicious = true;
  return o;
}

// A login-like batch: a DECRYPT of a TGT-sized AES-256 ciphertext, an
// ENCRYPT, a CHECKSUM and a VERIFY_CHECKSUM.
struct LoginBatch {
  std::string id;
  Bytes key, ct, data, cks;
  std::vector<Job> jobs() const {
    return {DecryptJob(id, 2, ct), EncryptJob(id, 3, 20), ChecksumJob(id, 17, data),
            VerifyJob(id, 17, data, cks)};
  }
};

LoginBatch MakeLogin(Cluster& c, const Bytes& key) {
  LoginBatch b;
  b.key = key;
  b.id = c.AddKey(key);
  b.ct = ClusterEncrypt(c, b.id, 2, Random(300));
  b.data = Random(40);
  auto r = c.Run({ChecksumJob(b.id, 17, b.data)});
  std::array<JobResult, 3> jr = {r[0].jobs[0], r[1].jobs[0], r[2].jobs[0]};
  b.cks.assign(jr[0].ctr0.begin(), jr[0].ctr0.end());
  const Bytes tag = TagOf(jr);
  b.cks.insert(b.cks.end(), tag.begin(), tag.end());
  return b;
}

// The batch ran on all three with every job as expected.
void ExpectHonest(const std::array<absl::StatusOr<BatchResult>, 3>& r) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r[i].ok()) << "party " << i << ": " << r[i].status();
    for (const JobResult& j : r[i]->jobs) EXPECT_EQ(j.status, pb::JOB_OK) << j.detail;
  }
}

// An injected deviation is caught: at least one honest party fails the
// batch with a clear error (DATA_LOSS from the checks, ABORTED from the
// agreement) and returns nothing, so the KDC, which needs the same result
// from all three, gets nothing. (The other honest party may time out, or
// accept: on a one-way ring it hears only the cheater.)
void ExpectCaught(const std::array<absl::StatusOr<BatchResult>, 3>& r, int cheater,
                  const std::string& what) {
  int clear = 0;
  for (int i = 0; i < 3; ++i) {
    if (i == cheater || r[i].ok()) continue;
    const auto code = r[i].status().code();
    if (code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kAborted) ++clear;
  }
  EXPECT_GE(clear, 1) << what << ": no honest party caught it ("
                      << r[0].status() << " / " << r[1].status() << " / "
                      << r[2].status() << ")";
}

// A deviation is caught (as ExpectCaught), or it changed nothing: all
// three parties return results that `right` accepts. An error on a lane
// that carries no block (the tail of a batch's last 64 lanes) never
// reaches an output, and the check skips those lanes (MulLog::AddAnd).
// Returns whether it was caught.
bool ExpectCaughtOrHarmless(const std::array<absl::StatusOr<BatchResult>, 3>& r, int cheater,
                            const std::string& what,
                            const std::function<bool(const std::array<BatchResult, 3>&)>& right) {
  for (int i = 0; i < 3; ++i) {
    if (i == cheater || r[i].ok()) continue;
    const auto code = r[i].status().code();
    if (code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kAborted) return true;
  }
  for (int i = 0; i < 3; ++i) {
    if (!r[i].ok()) {
      ADD_FAILURE() << what << ": not caught, and party " << i << " failed: " << r[i].status();
      return false;
    }
  }
  EXPECT_TRUE(right({*r[0], *r[1], *r[2]})) << what << ": not caught, and the results are wrong";
  return false;
}

// `trials` runs of `jobs` (batch numbers *seq on), each with one bit of one
// of the cheater's messages flipped: a random step of `sizes` (its messages'
// sizes in an honest run of `jobs`; empty ones are skipped), at a random
// byte and bit. Each deviation must be caught or harmless
// (ExpectCaughtOrHarmless, named "`what` step N"); the ring is reconnected
// after each. Adds the number caught to *caught.
void InjectRandomBitFlips(Cluster& c, int cheater, const std::vector<Job>& jobs,
                          const std::vector<size_t>& sizes, int trials, std::mt19937_64& rng,
                          uint64_t* seq, const std::string& what,
                          const std::function<bool(const std::array<BatchResult, 3>&)>& right,
                          int* caught) {
  for (int trial = 0; trial < trials; ++trial) {
    const uint64_t step = rng() % sizes.size();
    if (sizes[step] == 0) continue;
    c.cheat().Arm(step, rng() % sizes[step], static_cast<uint8_t>(1u << (rng() % 8)));
    auto r = c.RunSame((*seq)++, jobs);
    ASSERT_TRUE(c.cheat().fired());
    *caught += ExpectCaughtOrHarmless(r, cheater, absl::StrCat(what, " step ", step), right);
    c.cheat().Disarm();
    c.Connect();
  }
}

}  // namespace mal

// The pads of a PAD batch sign as the enctype's checksum under key.
bool PadsSignRight(const std::array<BatchResult, 3>& r, const std::vector<Job>& jobs,
                   const Bytes& key) {
  bool ok = true;
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::array<std::shared_ptr<const PadState>, 3> pads = {r[0].jobs[j].pad, r[1].jobs[j].pad,
                                                           r[2].jobs[j].pad};
    const Bytes ctr0(r[0].jobs[j].ctr0.begin(), r[0].jobs[j].ctr0.end());
    const Bytes d = Random(j == 0 ? 999 : 16);
    const Bytes want = RefChecksum(key, 5, ctr0, d);
    const Bytes got = SignAll(pads, 5, d);
    EXPECT_EQ(ToHex(got), ToHex(Bytes(want.begin() + 16, want.end())));
    ok = ok && got == Bytes(want.begin() + 16, want.end());
  }
  return ok;
}

// Pads come only from verified batches: an error injected into any
// message of a PAD batch (AES of c0, the H-power products of a 1000-byte
// pad, the openings) is caught, and a party whose checks fail keeps no
// pad; after a reconnect the pads of an honest batch sign correctly.
TEST(Malicious, PadsComeOnlyFromVerifiedBatches) {
  std::mt19937_64 rng(0x706164);
  const int cheater = 1;
  Cluster c(mal::Malicious(), cheater);
  const Bytes key = Random(32);
  const std::string id = c.AddKey(key);
  const std::vector<Job> jobs = {PadJob(id, 5, 1000), PadJob(id, 5, 16)};
  const uint64_t before = c.cheat().sent();
  mal::ExpectHonest(c.RunSame(10, jobs));
  const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
  ASSERT_GT(sizes.size(), 10u);
  uint64_t seq = 20;
  int caught = 0;
  ASSERT_NO_FATAL_FAILURE(mal::InjectRandomBitFlips(
      c, cheater, jobs, sizes, 24, rng, &seq, "pad",
      [&](const std::array<BatchResult, 3>& b) { return PadsSignRight(b, jobs, key); },
      &caught));
  // Most AND-layer bits of a two-pad batch are lanes without a block.
  EXPECT_GE(caught, 4);
  auto r = c.RunSame(seq++, jobs);
  mal::ExpectHonest(r);
  EXPECT_TRUE(PadsSignRight({*r[0], *r[1], *r[2]}, jobs, key));
}

// A verify item's answers under verification pads (keyops_service.cc
// SetVerifyAnswer): each party's SignShare plus the local cross terms of
// its shares of r and of the presented tag t' (dealt after D); their XOR
// is r * (T ^ t'), zero iff t' is the tag.
Bytes VerifyAll(const std::array<std::shared_ptr<const PadState>, 3>& pads, uint32_t usage,
                const Bytes& d, const Bytes& tag) {
  auto dealt = share::Deal(d);
  auto t = share::Deal(tag);
  EXPECT_TRUE(dealt.ok() && t.ok());
  Bytes x(16, 0);
  for (int i = 0; i < 3; ++i) {
    auto s = SignShare(*pads[i], usage, (*dealt)[i].comp[0], (*dealt)[i].comp[1]);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    protocol::GfCrossTerms(pads[i]->r[0].data(), pads[i]->r[1].data(),
                           (*t)[i].comp[0].data(), (*t)[i].comp[1].data(), s->data(), 1);
    for (int k = 0; k < 16; ++k) x[k] ^= (*s)[k];
  }
  return x;
}

// Job 1 (a pad linked to ENCRYPT job 0) signs as the enctype's checksum at
// the ENCRYPT's ctr0 + 2^17, and job 2 (a verification pad at `vctr0`)
// accepts the right tag and refuses a wrong one.
bool LinkedAndVerifyPadsRight(const std::array<BatchResult, 3>& r, const Bytes& key,
                              const Bytes& vctr0) {
  std::array<std::shared_ptr<const PadState>, 3> linked, verify;
  for (int i = 0; i < 3; ++i) {
    if (r[i].jobs[1].pad == nullptr || r[i].jobs[2].pad == nullptr) return false;
    linked[i] = r[i].jobs[1].pad;
    verify[i] = r[i].jobs[2].pad;
  }
  std::string want_ctr0;
  const std::string enc_ctr0(r[0].jobs[0].ctr0.begin(), r[0].jobs[0].ctr0.end());
  const bool at = contract::LinkedPadCtr0(enc_ctr0, &want_ctr0) &&
                  want_ctr0 == std::string(r[0].jobs[1].ctr0.begin(), r[0].jobs[1].ctr0.end());
  const Bytes d = Random(150);
  const Bytes lctr0(r[0].jobs[1].ctr0.begin(), r[0].jobs[1].ctr0.end());
  const Bytes want = RefChecksum(key, 5, lctr0, d);
  const bool signs = SignAll(linked, 5, d) == Bytes(want.begin() + 16, want.end());
  const Bytes vwant = RefChecksum(key, 5, vctr0, d);
  Bytes wrong(vwant.begin() + 16, vwant.end());
  wrong[3] ^= 0x10;
  const bool verifies =
      VerifyAll(verify, 5, d, Bytes(vwant.begin() + 16, vwant.end())) == Bytes(16, 0) &&
      VerifyAll(verify, 5, d, wrong) != Bytes(16, 0);
  EXPECT_TRUE(at && signs && verifies) << at << signs << verifies;
  return at && signs && verifies;
}

// Verification pads (r*H^k and r*E_K(c) products, MaskVerifyPads) and
// linked pads (their counter from an ENCRYPT of the batch) come only from
// verified batches too: an error injected by any one party into any
// message of such a batch is caught, or changes nothing (a lane that
// carries no block): the pads then sign and verify right.
TEST(Malicious, VerificationAndLinkedPadsComeOnlyFromVerifiedBatches) {
  std::mt19937_64 rng(0x76706164);
  int caught = 0;
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(mal::Malicious(), cheater);
    const Bytes key = Random(16);
    const std::string id = c.AddKey(key);
    Bytes vctr0 = Random(16);
    vctr0[0] |= 1;  // not the all-zero block
    Job linked = PadJob(id, 5, 200);
    linked.pad_after = 0;
    Job verify = PadJob(id, 5, 200);
    verify.checksum = vctr0;
    const std::vector<Job> jobs = {EncryptJob(id, 2, 4), linked, verify};
    const uint64_t before = c.cheat().sent();
    auto honest = c.RunSame(10, jobs);
    mal::ExpectHonest(honest);
    if (!honest[0].ok() || !honest[1].ok() || !honest[2].ok()) return;
    EXPECT_TRUE(LinkedAndVerifyPadsRight({*honest[0], *honest[1], *honest[2]}, key, vctr0));
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before,
                                    c.cheat().sizes().end());
    ASSERT_GT(sizes.size(), 10u);
    uint64_t seq = 20;
    ASSERT_NO_FATAL_FAILURE(mal::InjectRandomBitFlips(
        c, cheater, jobs, sizes, 10, rng, &seq, absl::StrCat("cheater ", cheater),
        [&](const std::array<BatchResult, 3>& b) {
          return LinkedAndVerifyPadsRight(b, key, vctr0);
        },
        &caught));
  }
  EXPECT_GE(caught, 5);
}

TEST(Malicious, HonestBatchesMatchTheReference) {
  Cluster c(mal::Malicious());
  for (size_t key_len : {16, 32}) {
    const Bytes key = Random(key_len);
    const std::string id = c.AddKey(key);
    for (size_t plen : {0, 17, 993}) {
      const Bytes p = Random(plen);
      const Bytes ct = ClusterEncrypt(c, id, 7, p);
      const Bytes ctr0(ct.begin(), ct.begin() + 16);
      EXPECT_EQ(ToHex(ct), ToHex(RefEncrypt(key, 7, ctr0, p)));
      auto r = c.Run({DecryptJob(id, 7, ct), DecryptJob(id, 8, ct)});
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(r[i].jobs[0].status, pb::JOB_OK);
        EXPECT_EQ(r[i].jobs[1].status, pb::JOB_INTEGRITY_FAILED);
      }
      Bytes ks = Keystream(r, 0);
      ks.resize(p.size());
      EXPECT_EQ(Xor(Bytes(ct.begin() + 16, ct.end() - 16), ks), p);
    }
  }
  // Messages over the stored powers of H (GF(2^128) doubling rounds).
  const std::string id = c.AddKey(Random(16));
  const Bytes p = Random(16 * (kStoredHPowers + 40));
  const Bytes ct = ClusterEncrypt(c, id, 5, p);
  auto r = c.Run({DecryptJob(id, 5, ct)});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r[i].jobs[0].status, pb::JOB_OK);
}

// After a batch whose checks needed more than MulLog::kMaxRetainedBytes
// (2,000 AES-128 blocks: ~80 MB per party), each party keeps at most that,
// and the next batches (a login, an ENCRYPT) still verify and are right.
TEST(Malicious, LargeBatchBuffersAreNotKept) {
  Cluster c(mal::Malicious());
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  auto big = c.Run({EncryptJob(id, 1, 2000)});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(big[i].jobs[0].status, pb::JOB_OK) << big[i].jobs[0].detail;
    EXPECT_LE(c.engine(i).verify_retained_bytes(), protocol::MulLog::kMaxRetainedBytes)
        << "party " << i;
  }
  const mal::LoginBatch login = mal::MakeLogin(c, Random(32));
  mal::ExpectHonest(c.RunSame(100, login.jobs()));
  const Bytes p = Random(100);
  const Bytes ct = ClusterEncrypt(c, id, 7, p);
  EXPECT_EQ(ToHex(ct), ToHex(RefEncrypt(key, 7, Bytes(ct.begin(), ct.begin() + 16), p)));
  for (int i = 0; i < 3; ++i) {
    // Kept for the next batch: a login batch's buffers.
    EXPECT_GT(c.engine(i).verify_retained_bytes(), 0u) << "party " << i;
    EXPECT_LE(c.engine(i).verify_retained_bytes(), protocol::MulLog::kMaxRetainedBytes);
  }
}

// An AES-256 ENCRYPT of `blocks` random blocks through the cluster equals
// the reference encryption under the same counter.
void ExpectClusterEncryptRight(Cluster& c, size_t blocks) {
  const Bytes key = Random(32);
  const std::string id = c.AddKey(key);
  const Bytes p = Random(16 * blocks);
  const Bytes ct = ClusterEncrypt(c, id, 1, p);
  const Bytes ctr0(ct.begin(), ct.begin() + 16);
  EXPECT_EQ(ToHex(ct), ToHex(RefEncrypt(key, 1, ctr0, p)));
}

// Two waves: the smallest wave_lanes malicious mode accepts (5462, rounded
// up to whole chunks) and a batch over one wave.
TEST(Malicious, SeveralWavesAndTheDepth6Sbox) {
  EngineOptions o = mal::Malicious();
  o.chunk_lanes = 256;
  o.wave_lanes = 22 * 256;
  o.small_sbox_min_blocks = 1000;
  Cluster c(o);
  ExpectClusterEncryptRight(c, 6000);
}

// protocol/verify.h's per-batch bound holds for at most 2^14 Verifies: in
// malicious mode, wave_lanes small enough that the largest batch
// (kMaxBatchBlocks) could run more (ceil(2^20 / wave_lanes) waves of up to
// 14 * 6 + 1 Verifies, and two more) are refused, naming the flag; the
// same options are fine in semi-honest mode, where nothing is verified.
TEST(Malicious, OptionsThatAllowTooManyChecksPerBatchAreRefused) {
  EngineOptions o = mal::Malicious();
  o.chunk_lanes = 64;
  o.wave_lanes = 64;
  o.verify_words = 1;
  absl::Status st = o.Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--wave_lanes=64")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "at least 5462")) << st;
  o.wave_lanes = 5461;  // 193 waves: 193 * 85 + 2 = 16407 > 2^14
  EXPECT_FALSE(o.Validate().ok());
  o.wave_lanes = 5462;  // 192 waves: 16322
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  EXPECT_TRUE(EngineOptions{}.Validate().ok());  // the defaults
  o = mal::Malicious();
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o.malicious = false;
  o.chunk_lanes = 64;
  o.wave_lanes = 64;
  o.verify_words = 1;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
}

// A check after every AND layer (verify_words 1) gives the same
// ciphertext; servers whose verify_words differ refuse every batch.
TEST(Malicious, VerifyWordsShapeTheRoundsAndMustAgree) {
  EngineOptions every_layer = mal::Malicious();
  every_layer.verify_words = 1;
  {
    Cluster c(every_layer);
    ExpectClusterEncryptRight(c, 100);
  }
  Cluster c({mal::Malicious(), mal::Malicious(), every_layer});
  const std::string id = c.AddKey(Random(16));
  const std::vector<Job> a = {EncryptJob(id, 1, 2)};
  auto r = c.RunEach(1, {a, a, a});
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << i;
    EXPECT_TRUE(absl::StrContains(r[i].status().message(), "--verify_words")) << r[i].status();
  }
}

TEST(Malicious, ModesMustAgree) {
  Cluster c({mal::Malicious(), EngineOptions{}, mal::Malicious()});
  const std::string id = c.AddKey(Random(16));
  auto r = c.RunEach(1, {std::vector<Job>{EncryptJob(id, 1, 2)},
                         std::vector<Job>{EncryptJob(id, 1, 2)},
                         std::vector<Job>{EncryptJob(id, 1, 2)}});
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(r[i].ok());
    EXPECT_EQ(r[i].status().code(), absl::StatusCode::kAborted) << r[i].status();
  }
}

// A batch large enough for the AES kernel to check inside its wave
// (protocol::MulLog::kVerifyWords): an error in any message of an in-wave
// check, or in an AND layer before or after one, is caught or harmless,
// and the ring serves an honest batch afterwards.
TEST(Malicious, InWaveChecksCatchTheirLayersAndMessages) {
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(0x77617665);
  const int cheater = 2;
  Cluster c(mal::Malicious(), cheater);
  const Bytes key = Random(16);
  const std::string id = c.AddKey(key);
  // 1,600 blocks and the c0 block: 26 tiles, 5,440 AND words per tile
  // (AES-128, depth-4 S-box): ~141,000 words, one or two checks inside
  // the wave.
  constexpr uint32_t kBlocks = 1600;
  constexpr size_t kTileBytes = 26 * 16 * 8;  // one wire of an AND layer
  static_assert(size_t{26} * 5440 > protocol::MulLog::kVerifyWords + 26 * 16 * 18);
  const std::vector<Job> jobs = {EncryptJob(id, 4, kBlocks)};
  const uint64_t before = c.cheat().sent();
  mal::ExpectHonest(c.RunSame(10, jobs));
  const std::vector<size_t> sizes(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
  // AND-layer messages are whole wires of the 26 tiles; the in-wave
  // checks' messages (coins, reshares, openings, compare) lie between them.
  std::vector<uint64_t> layers, checks;
  for (uint64_t s = 0; s < sizes.size(); ++s)
    if (sizes[s] >= 3 * kTileBytes && sizes[s] % kTileBytes == 0) layers.push_back(s);
  ASSERT_GE(layers.size(), 40u);
  for (uint64_t s = layers.front(); s < layers.back(); ++s)
    if (sizes[s] < kTileBytes) checks.push_back(s);
  // A check of 65,536 words: 2 coins of 2 messages, 1 reshare, 3 per
  // halving or step by 4 (5 of them, 65,537 -> 32,769 -> ... -> 129:
  // protocol/verify.h), 3 for the last compression, 1 opening and 1
  // compare: 25.
  static_assert(protocol::dzkp::kStepFrom == 32769, "the count below assumes one halving");
  ASSERT_GE(checks.size(), 24u) << "no check inside the wave";
  std::vector<uint64_t> steps(checks.begin(), checks.end());
  for (int k = 0; k < 8; ++k) steps.push_back(layers[rng() % layers.size()]);
  auto right = [&](const std::array<BatchResult, 3>& b) {
    for (int i = 0; i < 3; ++i)
      if (!b[i].jobs[0].ok()) return false;
    const Bytes c0(b[0].jobs[0].ctr0.begin(), b[0].jobs[0].ctr0.end());
    const Bytes want = RefEncrypt(key, 4, c0, Bytes(16 * kBlocks, 0));
    Bytes ks = Keystream(b, 0);
    ks.resize(16 * kBlocks);
    return ks == Bytes(want.begin() + 16, want.end() - 16);
  };
  uint64_t seq = 20;
  int caught = 0;
  for (uint64_t s : steps) {
    const size_t off = rng() % sizes[s];
    const bool late = (rng() % 4) == 0;
    c.cheat().Arm(s, off, static_cast<uint8_t>(1u << (rng() % 8)), late);
    auto r = c.RunSame(seq++, jobs);
    ASSERT_TRUE(c.cheat().fired());
    caught += mal::ExpectCaughtOrHarmless(
        r, cheater,
        absl::StrCat("step ", s, "/", sizes.size(), " (", sizes[s], " bytes) offset ", off,
                     late ? " late" : ""),
        right);
    c.cheat().Disarm();
    c.Connect();
  }
  // An error in a coin, reshare, opening or compare of a check always
  // fails it; one in an AND layer is harmless only on the lanes past the
  // 1,601st.
  EXPECT_GE(caught, static_cast<int>(checks.size()));
  auto r = c.RunSame(seq++, jobs);
  mal::ExpectHonest(r);
  EXPECT_TRUE(right({*r[0], *r[1], *r[2]}));
  std::printf("in-wave checks: %zu injections in %.1f s\n", steps.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The attack of issue 16: an error on m31 (depth-4 S-box, AND layer 2) of
// the block AES_K(c0) of a DECRYPT reaches the tag check only for some key
// bytes, so the verdict leaks a key predicate. Semi-honest: the batch runs
// and the verdict is revealed (the test would pass the attack); malicious:
// the deviation is caught before the verdict is opened, whatever the key.
TEST(Malicious, M31AttackOnATgtDecryptIsCaught) {
  for (bool malicious : {false, true}) {
    EngineOptions o = malicious ? mal::Malicious() : EngineOptions{};
    o.depth3_max_blocks = 0;  // the depth-4 S-box, whose m31 this targets
    Cluster c(o, /*cheater=*/1);
    const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
    const std::vector<Job> jobs = {DecryptJob(lb.id, 2, lb.ct)};
    // An honest run gives the message sizes: the first 384-byte message
    // after a 1152-byte one is round 1's AND layer 2 (3 wires, one tile).
    const uint64_t before = c.cheat().sent();
    mal::ExpectHonest(c.RunSame(100, jobs));
    const auto& sizes = c.cheat().sizes();
    uint64_t step = 0;
    bool found = false;
    for (size_t k = before + 1; k < sizes.size() && !found; ++k) {
      if (sizes[k] == 384 && sizes[k - 1] == 1152) {
        step = k - before;
        found = true;
      }
    }
    ASSERT_TRUE(found);
    int caught = 0;
    for (int trial = 0; trial < 16; ++trial) {
      // m31 is wire 1 of its layer's group: word 16 * 1 + byte position p,
      // lane 0 (the DECRYPT's AES_K(c0)).
      const int p = trial % 16;
      c.cheat().Arm(step, (16 * 1 + p) * 8, 0x01);
      auto r = c.RunSame(200 + trial, jobs);
      ASSERT_TRUE(c.cheat().fired());
      if (!malicious) {
        // Semi-honest: all three run to the end and reveal a verdict.
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(r[i].ok()) << r[i].status();
        continue;
      }
      mal::ExpectCaught(r, 1, "m31");
      // The party that hears the other honest one checks the verdict's
      // inputs before it is opened: it fails, so no verdict is opened.
      EXPECT_FALSE(r[2].ok());
      if (!r[2].ok()) ++caught;
      c.Connect();
      mal::ExpectHonest(c.RunSame(300 + trial, jobs));
    }
    if (malicious) EXPECT_GE(caught, 16);
  }
}

// A login batch's results are right: the DECRYPT's keystream as an honest
// run's, the ENCRYPT's keystream and the CHECKSUM's tag as the enctype's
// under the ctr0 each reports, the VERIFY accepted.
bool LoginRight(const std::array<BatchResult, 3>& r, const mal::LoginBatch& lb,
                const Bytes& honest_ks) {
  for (int i = 0; i < 3; ++i)
    for (const JobResult& j : r[i].jobs)
      if (!j.ok()) return false;
  const Bytes e0(r[0].jobs[1].ctr0.begin(), r[0].jobs[1].ctr0.end());
  const Bytes ect = RefEncrypt(lb.key, 3, e0, Bytes(20, 0));
  Bytes eks = Keystream(r, 1);
  eks.resize(20);
  const Bytes c0(r[0].jobs[2].ctr0.begin(), r[0].jobs[2].ctr0.end());
  const Bytes want = RefChecksum(lb.key, 17, c0, lb.data);
  return Keystream(r, 0) == honest_ks && eks == Bytes(ect.begin() + 16, ect.end() - 16) &&
         TagOf({r[0].jobs[2], r[1].jobs[2], r[2].jobs[2]}) == Bytes(want.begin() + 16, want.end());
}

// Every message of a login batch, at random offsets and bits, from each
// party in turn, with each S-box circuit a login batch can get (depth 3
// by default, depth 4 with --depth3_max_blocks=0): each deviation is
// caught, and the ring serves honest batches after a reconnect. Late
// (receive-then-send) variants cover a party that waits for the others'
// part of an opening.
class MaliciousCircuit : public ::testing::TestWithParam<bool> {};

// Runs jobs with the cheater's message `step` armed. A batch that ended
// before that step (every such end is a receive timing out on a loaded
// machine: the step exists in an honest run of the same jobs) is run again,
// up to three times in all.
std::array<absl::StatusOr<BatchResult>, 3> RunArmed(Cluster& c, uint64_t step, size_t off,
                                                     uint8_t mask, bool late,
                                                     const std::vector<Job>& jobs,
                                                     uint64_t& seq) {
  for (int attempt = 0;; ++attempt) {
    c.cheat().Arm(step, off, mask, late);
    auto r = c.RunSame(seq++, jobs);
    if (c.cheat().fired() || attempt == 2) return r;
    bool timed_out = false;
    for (const auto& ri : r) timed_out |= absl::IsUnavailable(ri.status());
    EXPECT_TRUE(timed_out) << "step " << step << " not reached, and no receive timed out: "
                           << r[0].status() << " / " << r[1].status() << " / "
                           << r[2].status();
    if (!timed_out) return r;
    c.cheat().Disarm();
    c.Connect();
  }
}

TEST_P(MaliciousCircuit, RandomInjectionsAreAllCaught) {
  std::mt19937_64 rng(0x6b6d7063);
  int trials = 0, caught = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EngineOptions o = mal::Malicious();
  if (!GetParam()) o.depth3_max_blocks = 0;
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(o, cheater);
    const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
    const std::vector<Job> jobs = lb.jobs();
    const uint64_t before = c.cheat().sent();
    const auto t_honest = std::chrono::steady_clock::now();
    const auto honest = c.RunSame(1000, jobs);
    const auto honest_time = std::chrono::steady_clock::now() - t_honest;
    mal::ExpectHonest(honest);
    const Bytes honest_ks = Keystream({*honest[0], *honest[1], *honest[2]}, 0);
    const std::vector<size_t> sizes(c.cheat().sizes().begin() + before,
                                    c.cheat().sizes().end());
    ASSERT_GT(sizes.size(), 20u);
    c.ScaleCheatTimeout(honest_time);
    c.Connect();
    // Every step once, then random ones.
    std::vector<uint64_t> steps;
    for (uint64_t s = 0; s < sizes.size(); ++s) steps.push_back(s);
    for (int k = 0; k < 20; ++k) steps.push_back(rng() % sizes.size());
    uint64_t seq = 2000;
    for (uint64_t s : steps) {
      if (sizes[s] == 0) continue;
      const size_t off = rng() % sizes[s];
      const uint8_t mask = static_cast<uint8_t>(1u << (rng() % 8));
      const bool late = (rng() % 4) == 0;
      auto r = RunArmed(c, s, off, mask, late, jobs, seq);
      ASSERT_TRUE(c.cheat().fired());
      caught += mal::ExpectCaughtOrHarmless(
          r, cheater,
          absl::StrCat("party ", cheater, " step ", s, "/", sizes.size(), " (", sizes[s],
                       " bytes) offset ", off, late ? " late" : ""),
          [&](const std::array<BatchResult, 3>& b) { return LoginRight(b, lb, honest_ks); });
      ++trials;
      c.cheat().Disarm();
      c.Connect();
      mal::ExpectHonest(c.RunSame(seq++, jobs));
    }
  }
  EXPECT_GT(trials, 100);
  EXPECT_GT(caught, trials * 3 / 4) << "most injections land on lanes that carry a block";
  std::printf("random injections (%s S-box): %d trials in %.1f s\n",
              GetParam() ? "depth-3" : "depth-4", trials,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

INSTANTIATE_TEST_SUITE_P(Sbox, MaliciousCircuit, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Depth3" : "Depth4";
                         });

// The agreement against a cheater that tampers with what it forwards or
// opens (batch_agreement.h AgreeOnBatch, pads.h DrawCounters). Party i forwards party
// i+1's header to party i-1, and its share of the first ctr0 draw rides
// in the same message; what party i-1 decides from them must not put it
// out of step with party i+1, which heard none of it: the batch fails as
// an integrity failure (DATA_LOSS with the integrity payload) on the
// honest parties, never as a ring error or a refusal on one of them only,
// and after the ring is re-established the next batch is served.
namespace desync {

// Each honest party either served the batch or failed it as an integrity
// failure, and at least one failed it.
void ExpectIntegrityFailure(const std::array<absl::StatusOr<BatchResult>, 3>& r, int cheater,
                            const std::string& what) {
  int failed = 0;
  for (int i = 0; i < 3; ++i) {
    if (i == cheater || r[i].ok()) continue;
    EXPECT_TRUE(protocol::IsIntegrityFailure(r[i].status()))
        << what << ": honest party " << i << " failed otherwise: " << r[i].status();
    ++failed;
  }
  EXPECT_GE(failed, 1) << what << ": no honest party failed the batch";
}

// The bytes of the agreement's first message (the header and what rides
// with it): the second message forwards them, then the ctr0 shares.
size_t HeaderBytes(const std::vector<size_t>& sizes) { return sizes[0]; }

// Runs jobs once with nothing armed (batch 100; every party must serve it)
// and returns the sizes of the messages the cheating party sent in it.
std::vector<size_t> HonestRunSizes(Cluster& c, const std::vector<Job>& jobs) {
  const uint64_t before = c.cheat().sent();
  mal::ExpectHonest(c.RunSame(100, jobs));
  return std::vector<size_t>(c.cheat().sizes().begin() + before, c.cheat().sizes().end());
}

}  // namespace desync

TEST(Malicious, ForwardedAgreementHeaderTamperingIsAnIntegrityFailure) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(mal::Malicious(), cheater);
    const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
    const std::vector<Job> jobs = lb.jobs();
    const std::vector<size_t> sizes = desync::HonestRunSizes(c, jobs);
    const size_t h = desync::HeaderBytes(sizes);
    uint64_t seq = 200;
    // The forwarded header's inputs digest, key-view digest, counter count
    // and (past AgreementHeader::kSize) whatever authenticates it.
    for (size_t off : {size_t{3}, size_t{40}, AgreementHeader::kSize - 1, h - 1}) {
      c.cheat().Arm(1, off, 0x01);
      auto r = c.RunSame(seq++, jobs);
      ASSERT_TRUE(c.cheat().fired());
      desync::ExpectIntegrityFailure(
          r, cheater, absl::StrCat("party ", cheater, " forwarded header byte ", off));
      c.cheat().Disarm();
      c.Connect();
      mal::ExpectHonest(c.RunSame(seq++, jobs));
    }
    // The cheater's own header with a wrong tag (step 0): party i-1 takes
    // the header as sent, party i+1 finds the forwarded tag wrong; the
    // header is the same, so the two run in step and i+1 fails the batch.
    c.cheat().Arm(0, h - 1, 0x01);
    desync::ExpectIntegrityFailure(c.RunSame(seq++, jobs), cheater,
                                   absl::StrCat("party ", cheater, " own tag"));
    c.cheat().Disarm();
    c.Connect();
    mal::ExpectHonest(c.RunSame(seq++, jobs));
  }
  std::printf("forwarded-header tampering: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The key views, exchanged and forwarded when they differ (here: one of
// the batch's keys is missing on the cheater, so every party drops its
// job and runs the rest): the forwarded views (step 3) altered.
TEST(Malicious, ForwardedKeyViewTamperingIsAnIntegrityFailure) {
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(mal::Malicious(), cheater);
    const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
    const std::string other = c.AddKey(Random(16));
    c.DropKey(cheater, other);
    std::vector<Job> jobs = lb.jobs();
    jobs.push_back(EncryptJob(other, 3, 20));
    const uint64_t before = c.cheat().sent();
    auto honest = c.RunSame(100, jobs);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(honest[i].ok()) << honest[i].status();
      EXPECT_EQ(honest[i]->jobs.back().status, pb::JOB_UNKNOWN_KEY);
      EXPECT_EQ(honest[i]->jobs[0].status, pb::JOB_OK);
    }
    ASSERT_GE(c.cheat().sent() - before, 5u);
    // Steps 2 and 3: the views, then the views forwarded (the same size).
    const auto& sz = c.cheat().sizes();
    ASSERT_EQ(sz[before + 2], sz[before + 3]);
    ASSERT_GT(sz[before + 2], kForwardTagSize);
    c.cheat().Arm(3, 1, 0x02);
    desync::ExpectIntegrityFailure(c.RunSame(101, jobs), cheater,
                                   absl::StrCat("party ", cheater, " forwarded key views"));
    ASSERT_TRUE(c.cheat().fired());
    c.cheat().Disarm();
    c.Connect();
    auto again = c.RunSame(102, jobs);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(again[i].ok()) << again[i].status();
  }
}

// A forwarded header altered while the honest parties' key views differ
// (a key dropped on one honest party, h): the receiver i-1 puts its own
// header in the forged one's place, so it decides from a header that is
// not the originator's. With h = i-1 (the receiver's own view differs)
// both honest parties still exchange the key views and run in step; the
// receiver skips its PRSS ids past everything the agreement revealed and
// its next compare fails (MulLog::MarkDeviated), so both fail the batch as
// an integrity failure. With h = i+1 (the originator's view differs) the
// two take different paths and the ring breaks: the receiver fails it as
// an integrity failure, the originator with a ring error. Either way no
// honest party returns a result, and after a reconnect the next batches
// are served (the job under the missing key fails alike on all three) and
// compute right, so the fresh PRSS streams are in step.
TEST(Malicious, ForwardedHeaderTamperingWhenHonestKeyViewsDiffer) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int cheater = 0; cheater < 3; ++cheater) {
    for (int h : {(cheater + 1) % 3, (cheater + 2) % 3}) {
      const int receiver = (cheater + 2) % 3, originator = (cheater + 1) % 3;
      const std::string what = absl::StrCat("cheater ", cheater, ", key dropped on ", h);
      Cluster c(mal::Malicious(), cheater);
      const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
      const auto t_honest = std::chrono::steady_clock::now();
      const auto honest = c.RunSame(100, lb.jobs());
      const auto honest_time = std::chrono::steady_clock::now() - t_honest;
      mal::ExpectHonest(honest);
      const Bytes honest_ks = Keystream({*honest[0], *honest[1], *honest[2]}, 0);
      c.ScaleCheatTimeout(honest_time);  // h = i+1 breaks the ring: one timeout
      c.Connect();
      const std::string other = c.AddKey(Random(16));
      c.DropKey(h, other);
      std::vector<Job> jobs = lb.jobs();
      jobs.push_back(EncryptJob(other, 3, 20));
      uint64_t seq = 200;
      // The forwarded header's inputs digest, then its key-view digest.
      for (size_t off : {size_t{3}, size_t{40}}) {
        c.cheat().Arm(1, off, 0x01);
        auto r = c.RunSame(seq++, jobs);
        ASSERT_TRUE(c.cheat().fired()) << what;
        ASSERT_FALSE(r[receiver].ok()) << what << " offset " << off;
        EXPECT_TRUE(protocol::IsIntegrityFailure(r[receiver].status()))
            << what << " offset " << off << ": " << r[receiver].status();
        ASSERT_FALSE(r[originator].ok()) << what << " offset " << off;
        if (h == receiver)
          EXPECT_TRUE(protocol::IsIntegrityFailure(r[originator].status()))
              << what << " offset " << off << ": " << r[originator].status();
        c.cheat().Disarm();
        c.Connect();
        auto next = c.RunSame(seq++, jobs);
        for (int i = 0; i < 3; ++i) {
          ASSERT_TRUE(next[i].ok()) << what << ": party " << i << ": " << next[i].status();
          EXPECT_EQ(next[i]->jobs.back().status, pb::JOB_UNKNOWN_KEY) << what;
          for (size_t j = 0; j + 1 < jobs.size(); ++j)
            EXPECT_EQ(next[i]->jobs[j].status, pb::JOB_OK) << what << " job " << j;
        }
        auto login = c.RunSame(seq++, lb.jobs());
        mal::ExpectHonest(login);
        if (login[0].ok() && login[1].ok() && login[2].ok())
          EXPECT_TRUE(LoginRight({*login[0], *login[1], *login[2]}, lb, honest_ks)) << what;
      }
    }
  }
  std::printf("forwarded-header tampering with differing key views: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The cheater reads ahead its successor's share of the first ctr0 draw,
// computes the value (it knows its own two PRSS components), and sends
// party i-1 the share that opens the counter there as the all-zero block,
// which party i-1 would redraw alone.
TEST(Malicious, ReadAheadCtr0AtTheZeroBlockIsAnIntegrityFailure) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int cheater = 0; cheater < 3; ++cheater) {
    Cluster c(mal::Malicious(), cheater);
    ASSERT_EQ(c.cheat().first_sent().size(), 16u);
    ASSERT_EQ(c.cheat().first_received().size(), 16u);
    const protocol::Prf self(c.cheat().first_sent().data());
    const protocol::Prf next(c.cheat().first_received().data());
    const mal::LoginBatch lb = mal::MakeLogin(c, Random(32));
    const std::vector<Job> jobs = lb.jobs();
    const std::vector<size_t> sizes = desync::HonestRunSizes(c, jobs);
    const size_t h = desync::HeaderBytes(sizes);
    ASSERT_GE(sizes[1], h + 16) << "the batch draws a counter in the agreement";
    bool aimed = false;
    c.cheat().ArmReadAhead(
        1, {sizes[1]}, std::chrono::milliseconds(2000),
        [&](std::vector<uint8_t>& msg, const std::vector<std::vector<uint8_t>>& ahead) {
          if (ahead.empty() || ahead[0].size() < h + 16) return;
          // Our component 1 of the first counter is F(k_{i+1}, id): find id.
          uint8_t blk[16];
          for (uint64_t id = 0; id < (uint64_t{1} << 20); ++id) {
            next.Fill(id, 1, blk);
            if (std::memcmp(blk, msg.data() + h, 16) != 0) continue;
            uint8_t mine[16];
            self.Fill(id, 1, mine);
            for (int k = 0; k < 16; ++k)
              msg[h + k] ^= static_cast<uint8_t>(mine[k] ^ blk[k] ^ ahead[0][h + k]);
            aimed = true;
            return;
          }
        });
    auto r = c.RunSame(200, jobs);
    ASSERT_TRUE(aimed) << "party " << cheater << " did not learn the counter ahead";
    desync::ExpectIntegrityFailure(r, cheater, absl::StrCat("party ", cheater, " ctr0 at zero"));
    c.Connect();
    mal::ExpectHonest(c.RunSame(201, jobs));
  }
  std::printf("read-ahead ctr0 at the zero block: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace kmpc::engine
