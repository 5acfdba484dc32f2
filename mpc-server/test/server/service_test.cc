// Three parties in one process, each with its own LMDB store, TLS ring
// endpoint, Scheduler and KeyOpsService: the service layer end to end
// without gRPC transport (the multi-process tests cover that).
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "net/tls_ring.h"
#include "service/scheduler.h"
#include "service/services.h"
#include "store/share_store.h"

namespace kmpc::service {
namespace {

using ::kmpc::testing::FreeLoopbackPort;

std::string Rand(size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(random());
  return s;
}

std::string AesEcb(const std::string& key, const std::string& in) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                     nullptr, reinterpret_cast<const uint8_t*>(key.data()), nullptr);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  std::string out(in.size(), '\0');
  int n = 0;
  EVP_EncryptUpdate(ctx, reinterpret_cast<uint8_t*>(out.data()), &n,
                    reinterpret_cast<const uint8_t*>(in.data()), in.size());
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

struct Party {
  std::unique_ptr<store::ShareStore> store;
  std::unique_ptr<net::TlsRing> ring;
  std::unique_ptr<KeyCache> keys;
  std::unique_ptr<Scheduler> scheduler;
  Metrics metrics;
  std::unique_ptr<KeyOpsService> keyops;
};

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::kmpc::testing::MakeTestCerts("service-test"));
    ASSERT_FALSE(dir_->empty());
  }

  void SetUp() override {
    int ports[3] = {FreeLoopbackPort(), FreeLoopbackPort(), FreeLoopbackPort()};
    static int instance = 0;
    ++instance;
    for (int i = 0; i < 3; ++i) {
      Party& p = parties_[i];
      auto st = store::ShareStore::Open(absl::StrCat(*dir_, "/store-", instance, "-", i),
                                        size_t{64} << 20);
      ASSERT_TRUE(st.ok()) << st.status();
      p.store = std::move(*st);
      net::TlsRingOptions o;
      o.party = i;
      o.workers = 2;
      o.listen_addr = absl::StrCat("127.0.0.1:", ports[i]);
      o.prev_addr = absl::StrCat("127.0.0.1:", ports[(i + 2) % 3]);
      std::string c = *dir_ + "/certs/";
      o.tls = {c + "party-" + std::to_string(i) + ".pem",
               c + "party-" + std::to_string(i) + ".key", c + "ca.pem"};
      o.recv_timeout = absl::Seconds(2);
      auto ring = net::TlsRing::Start(o);
      ASSERT_TRUE(ring.ok()) << ring.status();
      p.ring = std::move(*ring);
      p.keys = std::make_unique<KeyCache>(p.store.get(), i);
      SchedulerOptions so;
      so.schedule_timeout = absl::Seconds(3);
      so.peer_batch_wait = absl::Milliseconds(500);
      p.scheduler = std::make_unique<Scheduler>(p.ring.get(), p.keys->AsLookup(), so);
      ServiceOptions svc;
      svc.party = i;
      p.keyops = std::make_unique<KeyOpsService>(svc, p.keys.get(), p.scheduler.get(),
                                                 &p.metrics);
      p.scheduler->Start();
    }
  }

  void TearDown() override {
    for (auto& p : parties_) p.scheduler->Stop();
  }

  std::string PutKey(const std::string& key) {
    auto views = engine::DealKey(
        key.size() == 16 ? engine::Cipher::kAes128 : engine::Cipher::kAes256,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
    EXPECT_TRUE(views.ok());
    std::string id = Rand(32);
    for (int i = 0; i < 3; ++i) {
      store::KeyMeta meta;
      std::memcpy(meta.key_id.data(), id.data(), 32);
      meta.cipher = key.size() == 16 ? store::Cipher::kAes128 : store::Cipher::kAes256;
      auto ser = (*views)[i].Serialize();
      EXPECT_TRUE(parties_[i].store->Put(meta, ser, false).ok());
    }
    return id;
  }

  // Runs `reqs[i]` on party i (all three at once).
  std::array<absl::Status, 3> RunAll(const std::array<v1::RunRequest, 3>& reqs,
                                     std::array<v1::RunResponse, 3>* resp,
                                     std::array<bool, 3> send = {true, true, true}) {
    std::array<std::future<absl::Status>, 3> fs;
    for (int i = 0; i < 3; ++i) {
      if (!send[i]) continue;
      fs[i] = std::async(std::launch::async, [&, i] {
        return parties_[i].keyops->DoRun(reqs[i], &(*resp)[i]);
      });
    }
    std::array<absl::Status, 3> st;
    for (int i = 0; i < 3; ++i)
      if (send[i]) st[i] = fs[i].get();
    return st;
  }

  static std::string* dir_;
  Party parties_[3];
};
std::string* ServiceTest::dir_ = nullptr;

std::string Combine(const std::array<v1::RunResponse, 3>& r, int job) {
  std::string v = r[0].results(job).keystream().first();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].results(job).keystream().second(),
              r[(i + 1) % 3].results(job).keystream().first());
  }
  for (int i = 1; i < 3; ++i) {
    const std::string& s = r[i].results(job).keystream().first();
    for (size_t k = 0; k < v.size(); ++k) v[k] ^= s[k];
  }
  return v;
}

TEST_F(ServiceTest, KeystreamMatchesOpenSslAndCountersAreFresh) {
  std::string k128 = Rand(16), k256 = Rand(32);
  std::string id128 = PutKey(k128), id256 = PutKey(k256);
  v1::RunRequest req;
  req.set_batch_id(Rand(16));
  for (int j = 0; j < 6; ++j) {
    auto* job = req.add_jobs();
    job->set_job_id(j);
    job->set_key_id(j % 2 ? id256 : id128);
    job->set_type(v1::JOB_ENCRYPT);
    job->set_usage(j);
    job->set_length(1 + 37 * j);
  }
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s;
  std::set<std::string> ctrs;
  for (int j = 0; j < 6; ++j) {
    const std::string& ctr0 = resp[0].results(j).ctr0();
    ASSERT_EQ(ctr0.size(), 16u);
    EXPECT_EQ(resp[1].results(j).ctr0(), ctr0);
    EXPECT_TRUE(ctrs.insert(ctr0).second);
    std::string ks = Combine(resp, j);
    ASSERT_EQ(ks.size(), 1u + 37 * j);
    std::string ctrs_in;
    unsigned __int128 c0 = 0;
    for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
    for (size_t b = 1; b <= (ks.size() + 15) / 16; ++b) {
      unsigned __int128 c = c0 + b;
      for (int k = 15; k >= 0; --k) ctrs_in.push_back(static_cast<char>(c >> (8 * k)));
    }
    EXPECT_EQ(ks, AesEcb(j % 2 ? k256 : k128, ctrs_in).substr(0, ks.size())) << j;
  }
  EXPECT_GT(resp[0].stats().ring_bytes_sent(), 0u);
}

TEST_F(ServiceTest, BatchMissingOnOnePartyIsUnavailableAndRingRecovers) {
  std::string id = PutKey(Rand(16));
  v1::RunRequest req;
  req.set_batch_id(Rand(16));
  auto* job = req.add_jobs();
  job->set_key_id(id);
  job->set_type(v1::JOB_ENCRYPT);
  job->set_length(16);
  for (int missing = 0; missing < 3; ++missing) {
    req.set_batch_id(Rand(16));
    std::array<v1::RunRequest, 3> reqs = {req, req, req};
    std::array<v1::RunResponse, 3> resp;
    std::array<bool, 3> send = {true, true, true};
    send[missing] = false;
    absl::Time t0 = absl::Now();
    auto st = RunAll(reqs, &resp, send);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(8));
    for (int i = 0; i < 3; ++i)
      if (i != missing) EXPECT_EQ(st[i].code(), absl::StatusCode::kUnavailable) << i << st[i];
  }
  req.set_batch_id(Rand(16));
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(ServiceTest, DifferentInputsOnOnePartyAbort) {
  std::string id = PutKey(Rand(16));
  v1::RunRequest req;
  req.set_batch_id(Rand(16));
  auto* job = req.add_jobs();
  job->set_key_id(id);
  job->set_type(v1::JOB_CHECKSUM);
  job->set_data("hello");
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  reqs[1].mutable_jobs(0)->set_data("hellO");
  std::array<v1::RunResponse, 3> resp;
  auto st = RunAll(reqs, &resp);
  for (auto& s : st) EXPECT_FALSE(s.ok());
  // Next batch is fine.
  req.set_batch_id(Rand(16));
  reqs = {req, req, req};
  for (auto& s : RunAll(reqs, &resp)) EXPECT_TRUE(s.ok()) << s;
}

// A key unknown everywhere, deleted on one server only, or differently
// dealt on one server fails only its jobs (NOT_FOUND / FAILED_PRECONDITION,
// the same on the three servers) and quickly; the other jobs succeed.
TEST_F(ServiceTest, KeyMissingOrStaleOnOnePartyFailsOnlyItsJobs) {
  std::string key = Rand(16), stale_key = Rand(16);
  std::string good = PutKey(key), gone = PutKey(Rand(16)), stale = PutKey(stale_key);
  store::KeyId gone_id;
  std::memcpy(gone_id.data(), gone.data(), 32);
  ASSERT_TRUE(parties_[1].store->Delete(gone_id).ok());
  parties_[1].keys->Invalidate(gone);
  {  // party 2 gets its view of another dealing of the same key
    auto views = engine::DealKey(
        engine::Cipher::kAes128,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(stale_key.data()), 16));
    ASSERT_TRUE(views.ok());
    store::KeyMeta meta;
    std::memcpy(meta.key_id.data(), stale.data(), 32);
    meta.cipher = store::Cipher::kAes128;
    ASSERT_TRUE(parties_[2].store->Put(meta, (*views)[2].Serialize(), true).ok());
    parties_[2].keys->Invalidate(stale);
  }
  v1::RunRequest req;
  const std::string ids[4] = {good, gone, Rand(32), stale};
  for (int j = 0; j < 8; ++j) {
    auto* job = req.add_jobs();
    job->set_job_id(100 + j);
    job->set_key_id(ids[j % 4]);
    job->set_type(v1::JOB_ENCRYPT);
    job->set_length(20);
  }
  for (int round = 0; round < 2; ++round) {
    req.set_batch_id(Rand(16));
    std::array<v1::RunRequest, 3> reqs = {req, req, req};
    std::array<v1::RunResponse, 3> resp;
    absl::Time t0 = absl::Now();
    for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
    for (int j = 0; j < 8; ++j) {
      const int want = j % 4 == 0   ? 0
                       : j % 4 == 3 ? static_cast<int>(absl::StatusCode::kFailedPrecondition)
                                    : static_cast<int>(absl::StatusCode::kNotFound);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(resp[i].results(j).error_code(), want)
            << "job " << j << " party " << i << ": " << resp[i].results(j).error_message();
      }
      if (want != 0) {
        EXPECT_FALSE(resp[0].results(j).has_keystream());
        continue;
      }
      std::string ks = Combine(resp, j);
      ASSERT_EQ(ks.size(), 20u);
      const std::string& ctr0 = resp[0].results(j).ctr0();
      unsigned __int128 c0 = 0;
      for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
      std::string ctrs_in;
      for (int b = 1; b <= 2; ++b) {
        unsigned __int128 c = c0 + b;
        for (int k = 15; k >= 0; --k) ctrs_in.push_back(static_cast<char>(c >> (8 * k)));
      }
      EXPECT_EQ(ks, AesEcb(key, ctrs_in).substr(0, 20)) << j;
    }
    EXPECT_NE(resp[0].results(1).error_message().find("party 1"), std::string::npos)
        << resp[0].results(1).error_message();
  }
}

// A PutKey/DeleteKey (store change + Invalidate) that lands while a cache
// miss is loading the old shares must not leave the old shares cached.
TEST_F(ServiceTest, KeyCacheInvalidateDuringLoadIsNotLost) {
  store::ShareStore* st = parties_[0].store.get();
  KeyCache cache(st, 0);
  const std::string id = PutKey(Rand(16));
  store::KeyMeta meta;
  std::memcpy(meta.key_id.data(), id.data(), 32);
  meta.cipher = store::Cipher::kAes128;
  auto redeal = [&] {
    auto views = engine::DealKey(
        engine::Cipher::kAes128,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(Rand(16).data()), 16));
    EXPECT_TRUE(views.ok());
    EXPECT_TRUE(st->Put(meta, (*views)[0].Serialize(), true).ok());
    return (*views)[0].deal_id;
  };
  // Re-dealt (PutKey --replace) while the load runs.
  bool once = true;
  std::array<uint8_t, 16> new_deal{};
  cache.SetLoadHookForTest([&] {
    if (!once) return;
    once = false;
    new_deal = redeal();
    cache.Invalidate(id);
  });
  auto first = cache.Get(id);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE((*first)->deal_id, new_deal);  // read before the change
  auto second = cache.Get(id);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->deal_id, new_deal);  // not the stale cached value
  auto third = cache.Get(id);  // cached now
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->get(), second->get());
  // Deleted while the load runs.
  cache.Invalidate(id);
  once = true;
  cache.SetLoadHookForTest([&] {
    if (!once) return;
    once = false;
    store::KeyId kid;
    std::memcpy(kid.data(), id.data(), 32);
    EXPECT_TRUE(st->Delete(kid).ok());
    cache.Invalidate(id);
  });
  EXPECT_TRUE(cache.Get(id).ok());  // overlapped the delete
  EXPECT_TRUE(absl::IsNotFound(cache.Get(id).status())) << cache.Get(id).status();
  // An Invalidate of another id does not keep a load out of the cache.
  const std::string other = PutKey(Rand(16));
  cache.SetLoadHookForTest([&] { cache.Invalidate(id); });
  auto a = cache.Get(other);
  cache.SetLoadHookForTest(nullptr);
  auto b = cache.Get(other);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
}

// The ENCRYPT states awaiting FINALIZE are bounded by memory, not only by
// count; finalized and expired states give their bytes back.
TEST(EncryptStatesTest, ByteBudget) {
  ServiceOptions o;
  o.max_pending_encrypt_bytes = 1 << 20;
  o.encrypt_state_ttl = absl::Milliseconds(200);
  EncryptStates states(o);
  auto big = [] {
    auto s = std::make_shared<engine::EncryptState>();
    for (auto& v : s->h_powers) v.resize(300 << 10);  // 600 KiB
    return std::shared_ptr<const engine::EncryptState>(std::move(s));
  };
  auto small = [] {
    return std::shared_ptr<const engine::EncryptState>(
        std::make_shared<engine::EncryptState>());
  };
  const absl::Time now = absl::Now();
  ASSERT_TRUE(states.Put("a", {big(), 1, now}).ok());
  EXPECT_GT(states.bytes(), size_t{600} << 10);
  absl::Status st = states.Put("b", {big(), 1, now});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(states.Put(absl::StrCat("s", i), {small(), 1, now}).ok());
  EXPECT_EQ(states.size(), 101u);
  auto taken = states.TakeAll({"a"});
  ASSERT_TRUE(taken.ok());
  EXPECT_LT(states.bytes(), size_t{100} << 10);
  EXPECT_TRUE(states.Put("b", {big(), 1, absl::Now()}).ok());
  // Expired entries are swept on a later Put and free their bytes.
  absl::SleepFor(absl::Milliseconds(1300));
  EXPECT_TRUE(states.Put("c", {big(), 1, absl::Now()}).ok());
  EXPECT_EQ(states.size(), 1u);
  EXPECT_FALSE(states.TakeAll({"b"}).ok());
  EXPECT_TRUE(states.TakeAll({"c"}).ok());
  EXPECT_EQ(states.bytes(), 0u);
}

TEST_F(ServiceTest, FinalizeOnceAndRequestErrors) {
  std::string key = Rand(16);
  std::string id = PutKey(key);
  v1::RunRequest req;
  req.set_batch_id(Rand(16));
  auto* job = req.add_jobs();
  job->set_job_id(42);
  job->set_key_id(id);
  job->set_type(v1::JOB_ENCRYPT);
  job->set_length(20);
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s;
  v1::FinalizeRequest fin;
  fin.set_batch_id(Rand(16));
  auto* item = fin.add_items();
  item->set_run_batch_id(req.batch_id());
  item->set_job_id(42);
  // Longer than the keystream (a shorter one is a valid prefix): refused,
  // nothing consumed.
  item->set_ciphertext(std::string(21, 'x'));
  v1::FinalizeResponse fr;
  EXPECT_EQ(parties_[0].keyops->DoFinalize(fin, &fr).code(),
            absl::StatusCode::kInvalidArgument);
  item->set_ciphertext(std::string(20, 'x'));
  std::array<std::future<absl::Status>, 3> fs;
  std::array<v1::FinalizeResponse, 3> frs;
  for (int i = 0; i < 3; ++i)
    fs[i] = std::async(std::launch::async,
                       [&, i] { return parties_[i].keyops->DoFinalize(fin, &frs[i]); });
  for (auto& f : fs) EXPECT_TRUE(f.get().ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(frs[i].results_size(), 1);
    EXPECT_EQ(frs[i].results(0).tag().second(), frs[(i + 1) % 3].results(0).tag().first());
  }
  fin.set_batch_id(Rand(16));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(parties_[i].keyops->DoFinalize(fin, &fr).code(), absl::StatusCode::kNotFound);

  // Request errors: precise codes, nothing scheduled.
  v1::RunRequest bad = req;
  bad.set_batch_id("short");
  EXPECT_EQ(parties_[0].keyops->DoRun(bad, &resp[0]).code(), absl::StatusCode::kInvalidArgument);
  bad = req;
  bad.mutable_jobs(0)->set_type(static_cast<v1::JobType>(77));
  EXPECT_EQ(parties_[2].keyops->DoRun(bad, &resp[2]).code(), absl::StatusCode::kInvalidArgument);
  bad = req;
  *bad.add_jobs() = req.jobs(0);  // duplicate job id
  EXPECT_EQ(parties_[0].keyops->DoRun(bad, &resp[0]).code(), absl::StatusCode::kInvalidArgument);
  bad.clear_jobs();
  EXPECT_EQ(parties_[0].keyops->DoRun(bad, &resp[0]).code(), absl::StatusCode::kInvalidArgument);
  for (int j = 0; j < 17; ++j) {
    auto* big = bad.add_jobs();
    big->set_job_id(j);
    big->set_key_id(id);
    big->set_type(v1::JOB_ENCRYPT);
    big->set_length(65536 * 16);
  }
  EXPECT_EQ(parties_[0].keyops->DoRun(bad, &resp[0]).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kmpc::service
