// What a user's password-derived aes*-ctr-mpc key runs (engine/
// user_key_rule.h): the rule on its own, and three parties in one process
// running what a compromised KDC host asks under such a key (issue 62,
// finding 4): every job but the timestamp's DECRYPT and what is gated on
// it fails JOB_MALFORMED with nothing revealed, and a login still works.
#include "engine/user_key_rule.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "net/memory_ring.h"
#include "share/replicated.h"
#include "enctype_reference.h"
#include "test_util.h"

namespace kmpc::engine {
namespace {

using ::kmpc::testing::Random;
using ::kmpc::testing::RunParties;
using Bytes = std::vector<uint8_t>;

Job Ctr(pb::JobType type, const std::string& id, uint32_t usage) {
  Job j;
  j.type = type;
  j.cipher = pb::CIPHER_AES256;
  j.key_id = id;
  j.usage = usage;
  return j;
}

// The rule alone: a job list and the verdict on job j.
bool Allowed(const std::vector<Job>& jobs, size_t j, KeyKind kind) {
  return CheckCtrUserKey(jobs, j, kind).empty();
}

TEST(CtrUserKeyRule, OnlyTheAsExchangeUnderAUsersKey) {
  const std::string id(contract::kKeyIdSize, 'u'), other(contract::kKeyIdSize, 'o');
  Job ts = Ctr(pb::JOB_DECRYPT, id, 1);
  Job reply = Ctr(pb::JOB_ENCRYPT, id, 3);
  reply.release_if_ok = 0;
  Job sum = Ctr(pb::JOB_CHECKSUM, id, 56);
  sum.release_if_ok = 0;
  const std::vector<Job> login = {ts, reply, sum};
  for (KeyKind k : {KeyKind::kUser, KeyKind::kUserService})
    for (size_t j = 0; j < login.size(); ++j) EXPECT_TRUE(Allowed(login, j, k)) << j;

  // The reply ungated, gated on itself, on another key's or usage's DECRYPT.
  Job ungated = reply;
  ungated.release_if_ok = Job::kNoCondition;
  Job other_ts = Ctr(pb::JOB_DECRYPT, other, 1);
  Job ticket_dec = Ctr(pb::JOB_DECRYPT, id, 2);
  Job on_other = reply, on_usage2 = reply, sum_ungated = sum;
  on_other.release_if_ok = 1;
  on_usage2.release_if_ok = 2;
  sum_ungated.release_if_ok = Job::kNoCondition;
  Job pad17 = Ctr(pb::JOB_PAD, id, 17), vpad17 = pad17;
  vpad17.checksum = Bytes(16, 1);
  const std::vector<Job> bad = {ungated,
                                other_ts,
                                ticket_dec,
                                on_other,
                                on_usage2,
                                sum_ungated,
                                Ctr(pb::JOB_ENCRYPT, id, 2),
                                Ctr(pb::JOB_ENCRYPT, id, 1),
                                Ctr(pb::JOB_CHECKSUM, id, 17),
                                pad17,
                                Ctr(pb::JOB_PAD, id, 3),
                                Ctr(pb::JOB_VERIFY_CHECKSUM, id, 17),
                                Ctr(pb::JOB_DECRYPT, id, 3)};
  for (size_t j : {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
    EXPECT_FALSE(Allowed(bad, j, KeyKind::kUser)) << j;
    EXPECT_TRUE(Allowed(bad, j, KeyKind::kService)) << j;
  }
  EXPECT_NE(CheckCtrUserKey(bad, 0, KeyKind::kUser).find("release_if_ok"), std::string::npos);

  // A user+service key also takes a ticket to it: its keystream (2) and
  // the PAC's server signature (17, a checksum or a signing pad); never a
  // ticket's DECRYPT, a verification pad or a CAMMAC verifier (as aes*-cts).
  const std::vector<Job> svc = {Ctr(pb::JOB_ENCRYPT, id, 2), Ctr(pb::JOB_CHECKSUM, id, 17),
                                pad17, ticket_dec, vpad17, Ctr(pb::JOB_CHECKSUM, id, 64),
                                Ctr(pb::JOB_VERIFY_CHECKSUM, id, 17)};
  for (size_t j = 0; j < svc.size(); ++j) {
    EXPECT_EQ(Allowed(svc, j, KeyKind::kUserService), j < 3) << j;
    EXPECT_FALSE(Allowed(svc, j, KeyKind::kUser)) << j;
  }
  // An aes*-cts job is CheckUserGate's and FindCtsMaterial's.
  Job cts = ungated;
  cts.cipher = pb::CIPHER_AES256_CTS;
  EXPECT_TRUE(Allowed({cts}, 0, KeyKind::kUser));
}

// Three parties holding ctr-mpc keys dealt with a kind, as a server's key
// lookup sets it from the record (service/key_cache.cc).
class Cluster {
 public:
  Cluster() {
    ring_ = std::make_unique<net::InMemoryRing>(std::chrono::milliseconds(20000));
    auto st = RunParties([&](int i) -> absl::Status {
      auto e = Engine::Create(ring_->party(i), opt_);
      if (!e.ok()) return e.status();
      engines_[i] = std::move(*e);
      return absl::OkStatus();
    });
    for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
  }
  std::string AddKey(const Bytes& key, KeyKind kind) {
    auto views = DealKey(Cipher::kAes256, key, kind);
    EXPECT_TRUE(views.ok()) << views.status();
    std::string id = "user-" + std::to_string(next_++);
    id.resize(contract::kKeyIdSize, '.');
    for (int i = 0; i < 3; ++i) {
      auto parsed = KeyShares::Parse((*views)[i].Serialize());
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      parsed->kind = kind;
      store_[i][id] = std::make_shared<const KeyShares>(std::move(*parsed));
    }
    return id;
  }
  void SetKind(int party, const std::string& id, KeyKind kind) {
    auto copy = KeyShares::Parse(store_[party][id]->Serialize());
    ASSERT_TRUE(copy.ok());
    copy->kind = kind;
    store_[party][id] = std::make_shared<const KeyShares>(std::move(*copy));
  }
  // A CHECKSUM's message (its `data`) goes as fresh shares.
  std::array<BatchResult, 3> Run(const std::vector<Job>& jobs) {
    std::array<std::vector<Job>, 3> each = {jobs, jobs, jobs};
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].type != pb::JOB_CHECKSUM) continue;
      auto views = share::Deal(jobs[j].data);
      EXPECT_TRUE(views.ok());
      for (int i = 0; i < 3; ++i) {
        each[i][j].data.clear();
        each[i][j].data_shares = (*views)[i].comp;
      }
    }
    std::array<BatchResult, 3> out;
    RunParties([&](int i) -> absl::Status {
      KeyLookup lookup = [this, i](absl::string_view id)
          -> absl::StatusOr<std::shared_ptr<const KeyShares>> {
        auto it = store_[i].find(std::string(id));
        if (it == store_[i].end()) return absl::NotFoundError("no such key");
        return it->second;
      };
      auto r = engines_[i]->RunBatch(seq_, each[i], lookup);
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) out[i] = std::move(*r);
      return r.status();
    });
    ++seq_;
    return out;
  }

 private:
  EngineOptions opt_;
  std::unique_ptr<net::InMemoryRing> ring_;
  std::array<std::unique_ptr<Engine>, 3> engines_;
  std::array<std::map<std::string, std::shared_ptr<const KeyShares>>, 3> store_;
  int next_ = 0;
  uint64_t seq_ = 1;
};

Job Encrypt(const std::string& id, uint32_t usage, uint32_t nblocks) {
  Job j = Ctr(pb::JOB_ENCRYPT, id, usage);
  j.nblocks = nblocks;
  return j;
}
Job Checksum(const std::string& id, uint32_t usage, Bytes d) {
  Job j = Ctr(pb::JOB_CHECKSUM, id, usage);
  j.length = static_cast<uint32_t>(d.size());
  j.data = std::move(d);
  return j;
}
Job Pad(const std::string& id, uint32_t usage) {
  Job j = Ctr(pb::JOB_PAD, id, usage);
  j.length = 64;
  return j;
}
Job Decrypt(const Bytes& key, const std::string& id, uint32_t usage, const Bytes& plain) {
  Job j = Ctr(pb::JOB_DECRYPT, id, usage);
  Bytes ctr0 = Random(16);
  ctr0[0] |= 1;
  j.data = reference::RefEncrypt(key, usage, ctr0, plain);
  return j;
}

// Nothing of job j left any party: no keystream, tag, state or pad.
void ExpectNothing(const std::array<BatchResult, 3>& r, size_t j, pb::JobStatus want) {
  for (int i = 0; i < 3; ++i) {
    const JobResult& x = r[i].jobs[j];
    EXPECT_EQ(x.status, want) << "party " << i << " job " << j << ": " << x.detail;
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(x.keystream[k].empty()) << j;
    EXPECT_EQ(x.state, nullptr) << j;
    EXPECT_EQ(x.pad, nullptr) << j;
    EXPECT_EQ(x.tag[0], (std::array<uint8_t, 16>{})) << j;
  }
}

void ExpectOk(const std::array<BatchResult, 3>& r, size_t j) {
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(r[i].jobs[j].status, pb::JOB_OK) << "party " << i << " job " << j << ": "
                                               << r[i].jobs[j].detail;
}

// Issue 62, finding 4: with the KDC's client certificate, under a user's
// aes*-ctr-mpc key id, an ungated ENCRYPT under usage 3, an ENCRYPT under
// usage 2, a CHECKSUM, a PAD and a DECRYPT under another usage each gave
// the KDC an offline password verifier (JOB_OK: a keystream, a tag, a pad
// for ring-free Sign, a plaintext) for a user who never logged in. Now
// each fails JOB_MALFORMED, nothing computed, while the same batch's
// service key and a login's gated reply are computed.
TEST(CtrUserKeyRule, CompromisedKdcGetsNoVerifierUnderAUsersKey) {
  Cluster c;
  const Bytes key = Random(32), svc = Random(32);
  const std::string uid = c.AddKey(key, KeyKind::kUser);
  const std::string sid = c.AddKey(svc, KeyKind::kService);
  Job gated_elsewhere = Encrypt(uid, 3, 4);
  gated_elsewhere.release_if_ok = 7;  // the service key's DECRYPT
  auto r = c.Run({Encrypt(uid, 3, 4), Encrypt(uid, 2, 4), Checksum(uid, 17, Random(40)),
                  Pad(uid, 17), Decrypt(key, uid, 2, Random(40)), Checksum(uid, 56, Random(40)),
                  gated_elsewhere, Decrypt(svc, sid, 1, Random(30)), Encrypt(sid, 2, 4)});
  for (size_t j : {0, 1, 2, 3, 4, 5, 6}) ExpectNothing(r, j, pb::JOB_MALFORMED);
  EXPECT_NE(r[0].jobs[1].detail.find("KEY_KIND_USER"), std::string::npos) << r[0].jobs[1].detail;
  ExpectOk(r, 7);
  ExpectOk(r, 8);

  // A login: the timestamp's DECRYPT, the reply and the PA-REQ-ENC-PA-REP
  // checksum released on it; a wrong timestamp withholds both.
  const Bytes plain = Random(30);
  Job reply = Encrypt(uid, 3, 4), sum = Checksum(uid, 56, Random(40));
  reply.release_if_ok = sum.release_if_ok = 0;
  auto l = c.Run({Decrypt(key, uid, 1, plain), reply, sum});
  for (size_t j : {0, 1, 2}) ExpectOk(l, j);
  Job bad = Decrypt(key, uid, 1, plain);
  bad.data[20] ^= 1;
  auto w = c.Run({bad, reply, sum});
  ExpectNothing(w, 0, pb::JOB_INTEGRITY_FAILED);
  ExpectNothing(w, 1, pb::JOB_WITHHELD);
  ExpectNothing(w, 2, pb::JOB_WITHHELD);
}

// A user+service key (kmpc-admin share --also-service) also takes a ticket
// to it (ENCRYPT 2, PAC signature 17 as a CHECKSUM or a signing pad).
TEST(CtrUserKeyRule, UserServiceKeyTakesTicketsToIt) {
  Cluster c;
  const Bytes key = Random(32);
  const std::string id = c.AddKey(key, KeyKind::kUserService);
  auto r = c.Run({Encrypt(id, 2, 4), Checksum(id, 17, Random(40)), Pad(id, 17),
                  Encrypt(id, 3, 4), Decrypt(key, id, 2, Random(40))});
  for (size_t j : {0, 1, 2}) ExpectOk(r, j);
  ExpectNothing(r, 3, pb::JOB_MALFORMED);
  ExpectNothing(r, 4, pb::JOB_MALFORMED);
}

// The kind is in the key view the parties compare: a server whose record
// says service while the others say user fails the key's jobs alike on all
// three (none computes what the others refuse), and the batch goes on.
TEST(CtrUserKeyRule, KindIsPartOfTheKeyView) {
  Cluster c;
  const Bytes key = Random(32), svc = Random(32);
  const std::string uid = c.AddKey(key, KeyKind::kUser);
  const std::string sid = c.AddKey(svc, KeyKind::kService);
  c.SetKind(2, uid, KeyKind::kService);
  auto r = c.Run({Encrypt(uid, 2, 4), Encrypt(sid, 2, 4)});
  ExpectNothing(r, 0, pb::JOB_KEY_INCONSISTENT);
  ExpectOk(r, 1);
}

}  // namespace
}  // namespace kmpc::engine
