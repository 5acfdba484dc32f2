// KeyOpsService (service/keyops_service.cc) on three parties in one
// process (services_testing.h): Run's per-job results against the enctype
// in the clear, each ENCRYPT state finalized once, each pad signing once,
// and the whole-request refusals, alike on the three servers.
#include "services_testing.h"

namespace kmpc::service {
namespace {
// The gate's window is the KDC's clock (RunRequest.now_unix): a Run whose
// clock is further than --cts_clock_tolerance_s (5 s) from the servers'
// fails its aes*-cts DECRYPTs alike (JOB_MALFORMED), and the jobs gated
// on them are withheld; so a compromised KDC cannot move the window.
TEST_F(ServiceTest, CtsGateFailsWhenTheKdcsClockIsOff) {
  const std::string key = Rand(32);
  const std::string id = PutCtsKey(key);
  const std::string ct = ClearCts(cts::EncryptProgram(14, 44), key, 1, Rand(44));
  for (const int64_t off : {-3600, 3600}) {
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()) + off);
    req.set_batch_id(Rand(16));
    auto* d = AddJob(&req, 1, id, v1::JOB_DECRYPT);
    d->set_usage(1);
    d->set_data(ct);
    auto* e = AddJob(&req, 2, id, v1::JOB_ENCRYPT);
    e->set_usage(3);
    e->set_data(Rand(120));
    e->set_release_if_ok(1);
    const v1::JobStatus want[] = {v1::JOB_MALFORMED, v1::JOB_WITHHELD};
    std::array<v1::RunResponse, 3> resp;
    ASSERT_NO_FATAL_FAILURE(RunExpecting(req, want, &resp));
    EXPECT_NE(resp[0].results(0).detail().find("cts_clock_tolerance_s"), std::string::npos)
        << resp[0].results(0).detail();
  }
}

// aes*-cts jobs through KeyOps.Run: a timestamp's DECRYPT (usage 1), the
// reply's ENCRYPT (usage 3, its plaintext dealt as shares) gated on it, an
// undealt usage failing alone; a flipped bit fails the DECRYPT with nothing
// revealed and withholds the reply; the program cache is in the metrics.
TEST_F(ServiceTest, CtsJobsDecryptEncryptAndGate) {
  const std::string key = Rand(32);
  const std::string id = PutCtsKey(key);
  const std::string conf_ts = FreshTimestamp(), reply = Rand(120);
  const std::string ct = ClearCts(cts::EncryptProgram(14, conf_ts.size()), key, 1, conf_ts);
  for (bool flip : {false, true}) {
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(Rand(16));
    auto* d = AddJob(&req, 1, id, v1::JOB_DECRYPT);
    d->set_usage(1);
    d->set_data(ct);
    if (flip) (*d->mutable_data())[7] ^= 2;
    auto* e = AddJob(&req, 2, id, v1::JOB_ENCRYPT);
    e->set_usage(3);
    e->set_data(reply);
    e->set_release_if_ok(1);
    auto* u = AddJob(&req, 3, id, v1::JOB_DECRYPT);
    u->set_usage(2);
    u->set_data(ct);
    const v1::JobStatus ok[] = {v1::JOB_OK, v1::JOB_OK, v1::JOB_UNKNOWN_USAGE};
    const v1::JobStatus bad[] = {v1::JOB_INTEGRITY_FAILED, v1::JOB_WITHHELD,
                                 v1::JOB_UNKNOWN_USAGE};
    std::array<v1::RunResponse, 3> resp;
    ASSERT_NO_FATAL_FAILURE(RunExpecting(req, flip ? bad : ok, &resp));
    if (flip) continue;
    EXPECT_EQ(Combine(resp, 0), conf_ts);
    const std::string out = Combine(resp, 1);
    ASSERT_EQ(out.size(), 16 + reply.size() + 12);
    const std::string back = ClearCts(cts::DecryptProgram(14, out.size() - 12), key, 3, out);
    EXPECT_EQ(back.back() & 1, 0);
    EXPECT_EQ(back.substr(16, reply.size()), reply);
  }
  EXPECT_NE(parties_[0].metrics.Render().find("kmpc_cts_program_cache_total{"),
            std::string::npos);
}

// The PA-REQ-ENC-PA-REP splice through KeyOps.Run (kmpc.proto
// Job.splice_length, splice_offset): the reply's shares hold P then the
// request D with its HMAC inner padding (contract::SplicePadding); the
// servers return C || T of P with D's usage-56 checksum at
// the offset, and nothing else for the job.
TEST_F(ServiceTest, CtsSplicedReplyThroughRun) {
  const std::string key = Rand(32);
  const std::string id = PutCtsKey(key);
  const std::string conf_ts = FreshTimestamp(), d = Rand(90);
  std::string p = Rand(150);
  const size_t off = 100;
  p.replace(off, 12, std::string(12, '\0'));
  const std::string ct = ClearCts(cts::EncryptProgram(14, conf_ts.size()), key, 1, conf_ts);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* dj = AddJob(&req, 1, id, v1::JOB_DECRYPT);
  dj->set_usage(1);
  dj->set_data(ct);
  auto* e = AddJob(&req, 2, id, v1::JOB_ENCRYPT);
  e->set_usage(3);
  const std::string pad = contract::SplicePadding(d.size());
  e->set_data(p + d + pad);  // dealt as one message: P || D || padding
  e->set_release_if_ok(1);
  e->set_splice_length(static_cast<uint32_t>(d.size() + pad.size()));
  e->set_splice_offset(static_cast<uint32_t>(off));
  std::array<v1::RunRequest, 3> reqs = DealMessages(req);
  for (auto& r : reqs) r.mutable_jobs(1)->set_length(static_cast<uint32_t>(p.size()));
  std::array<v1::RunResponse, 3> resp;
  for (auto& st : RunAll(reqs, &resp)) ASSERT_TRUE(st.ok()) << st.error_message();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      ASSERT_EQ(resp[i].results(j).status(), v1::JOB_OK) << resp[i].results(j).detail();
  EXPECT_EQ(Combine(resp, 0), conf_ts);
  const std::string out = Combine(resp, 1);
  ASSERT_EQ(out.size(), 16 + p.size() + 12);
  const std::string back = ClearCts(cts::DecryptProgram(14, out.size() - 12), key, 3, out);
  EXPECT_EQ(back.back() & 1, 0);
  auto ck = cts::DealChecksum(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()), 56);
  auto cp = cts::ChecksumProgram(d.size());
  ASSERT_TRUE(ck.ok() && cp.ok());
  std::vector<uint8_t> in = ck->bytes;
  in.insert(in.end(), d.begin(), d.end());
  std::vector<absl::Span<const uint8_t>> lanes = {in};
  std::vector<uint64_t> w = cts::PackLanes(lanes, 1), t(cp->outputs);
  cts::ClearEngine eng;
  ASSERT_TRUE(cts::Evaluate(*cp, eng, 1, {absl::MakeConstSpan(w), {}}, {absl::MakeSpan(t), {}})
                  .ok());
  const std::vector<uint8_t> sum = cts::UnpackLane(t, 1, 0);
  std::string want = p;
  for (size_t k = 0; k < 12; ++k) want[off + k] ^= static_cast<char>(sum[k]);
  EXPECT_EQ(back.substr(16, p.size()), want);
}

TEST_F(ServiceTest, KeystreamMatchesOpenSslAndCountersAreFresh) {
  std::string k128 = Rand(16), k256 = Rand(32);
  std::string id128 = PutKey(k128), id256 = PutKey(k256);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  for (int j = 0; j < 6; ++j) {
    auto* job = AddJob(&req, j, j % 2 ? id256 : id128, v1::JOB_ENCRYPT);
    job->set_usage(j);
    job->set_length(1 + 37 * j);
  }
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s.error_message();
  std::set<std::string> ctrs;
  for (int j = 0; j < 6; ++j) {
    const std::string ctr0 = Vals(resp[0], j).ctr0;
    ASSERT_EQ(ctr0.size(), 16u);
    EXPECT_EQ(Vals(resp[1], j).ctr0, ctr0);
    EXPECT_TRUE(ctrs.insert(ctr0).second);
    std::string ks = Combine(resp, j);
    ASSERT_EQ(ks.size(), 1u + 37 * j);
    EXPECT_EQ(ks, RefKeystream(j % 2 ? k256 : k128, ctr0, ks.size())) << j;
  }
  EXPECT_GT(resp[0].stats().ring_bytes_sent(), 0u);
}

TEST_F(ServiceTest, BatchMissingOnOnePartyIsUnavailableAndRingRecovers) {
  std::string id = PutKey(Rand(16));
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* job = AddJob(&req, 0, id, v1::JOB_ENCRYPT);
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
      if (i != missing) {
        EXPECT_EQ(st[i].error_code(), grpc::StatusCode::UNAVAILABLE) << i << st[i].error_message();
        EXPECT_EQ(ErrorOf(st[i]), v1::BATCH_RING_UNAVAILABLE) << i;
      }
  }
  req.set_batch_id(Rand(16));
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(ServiceTest, DifferentInputsOnOnePartyAbort) {
  std::string id = PutKey(Rand(16));
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* job = AddJob(&req, 0, id, v1::JOB_CHECKSUM);
  job->set_data("hello");
  // The message length is a public input: a party told another length
  // refuses with the others.
  std::array<v1::RunRequest, 3> reqs = DealMessages(req);
  v1::RunRequest longer = req;
  longer.mutable_jobs(0)->set_data("hello!");
  reqs[1] = DealMessages(longer)[1];
  std::array<v1::RunResponse, 3> resp;
  auto st = RunAll(reqs, &resp);
  for (auto& s : st) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
    EXPECT_EQ(ErrorOf(s), v1::BATCH_PEERS_DISAGREE);
  }
  // Next batch is fine, although each party's shares differ from the
  // others' (the digest covers the length, never the shares).
  req.set_batch_id(Rand(16));
  reqs = DealMessages(req);
  ASSERT_NE(reqs[0].data_shares(), reqs[1].data_shares());
  for (auto& s : RunAll(reqs, &resp)) EXPECT_TRUE(s.ok()) << s.error_message();
}

// CHECKSUM over dealt shares gives the enctype's checksum (GHASH of
// A' || D in the clear with H = AES_K(0), masked by AES_K(ctr0)), and
// VERIFY_CHECKSUM over fresh shares accepts it and refuses a changed tag or
// message; no server ever had D.
TEST_F(ServiceTest, ChecksumOverSharesMatchesTheEnctypeAndVerifies) {
  for (size_t klen : {16, 32}) {
    const std::string key = Rand(klen);
    const std::string id = PutKey(key);
    const std::string msg = Rand(100);
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(Rand(16));
    auto* job = AddJob(&req, 1, id, v1::JOB_CHECKSUM);
    job->set_usage(23);
    job->set_data(msg);
    const v1::JobStatus ok[] = {v1::JOB_OK};
    std::array<v1::RunResponse, 3> resp;
    ASSERT_NO_FATAL_FAILURE(RunExpecting(req, ok, &resp));
    std::string tag = Vals(resp[0], 0).tag.first;
    for (int i = 1; i < 3; ++i)
      for (int k = 0; k < 16; ++k) tag[k] ^= Vals(resp[i], 0).tag.first[k];
    const std::string ctr0 = Vals(resp[0], 0).ctr0;
    EXPECT_EQ(tag, RefChecksumTag(key, 23, ctr0, msg));

    v1::RunRequest ver;
    ver.set_batch_id(Rand(16));
    std::string bad_tag = ctr0 + tag;
    bad_tag[31] ^= 1;
    std::string bad_msg = msg;
    bad_msg[50] ^= 4;
    const std::pair<std::string, std::string> cases[] = {
        {msg, ctr0 + tag}, {msg, bad_tag}, {bad_msg, ctr0 + tag}};
    for (int j = 0; j < 3; ++j) {
      auto* v = AddJob(&ver, j, id, v1::JOB_VERIFY_CHECKSUM);
      v->set_usage(23);
      v->set_data(cases[j].first);
      v->set_checksum(cases[j].second);
    }
    const v1::JobStatus want_v[] = {v1::JOB_OK, v1::JOB_INTEGRITY_FAILED,
                                    v1::JOB_INTEGRITY_FAILED};
    std::array<v1::RunResponse, 3> vresp;
    ASSERT_NO_FATAL_FAILURE(RunExpecting(ver, want_v, &vresp));
  }
}

// A key unknown everywhere, deleted on one server only, or differently
// dealt on one server fails only its jobs (JOB_UNKNOWN_KEY /
// JOB_KEY_INCONSISTENT, the same on the three servers) and quickly; the
// other jobs succeed.
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
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  const std::string ids[4] = {good, gone, Rand(32), stale};
  for (int j = 0; j < 8; ++j) {
    auto* job = AddJob(&req, 100 + j, ids[j % 4], v1::JOB_ENCRYPT);
    job->set_length(20);
  }
  for (int round = 0; round < 2; ++round) {
    req.set_batch_id(Rand(16));
    std::array<v1::RunRequest, 3> reqs = {req, req, req};
    std::array<v1::RunResponse, 3> resp;
    absl::Time t0 = absl::Now();
    for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
    for (int j = 0; j < 8; ++j) {
      const v1::JobStatus want = j % 4 == 0   ? v1::JOB_OK
                                 : j % 4 == 3 ? v1::JOB_KEY_INCONSISTENT
                                              : v1::JOB_UNKNOWN_KEY;
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(resp[i].results(j).status(), want)
            << "job " << j << " party " << i << ": " << resp[i].results(j).detail();
        EXPECT_EQ(resp[i].results(j).detail(), resp[0].results(j).detail());
      }
      if (want != v1::JOB_OK) {
        EXPECT_FALSE(Vals(resp[0], j).has_keystream());
        continue;
      }
      std::string ks = Combine(resp, j);
      ASSERT_EQ(ks.size(), 20u);
      EXPECT_EQ(ks, RefKeystream(key, Vals(resp[0], j).ctr0, 20)) << j;
    }
    EXPECT_NE(resp[0].results(1).detail().find("party 1"), std::string::npos)
        << resp[0].results(1).detail();
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
  EncryptStates states(o.encrypt_state_ttl, o.max_pending_encrypts,
                       o.max_pending_encrypt_bytes);
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
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* job = AddJob(&req, 42, id, v1::JOB_ENCRYPT);
  job->set_length(20);
  std::array<v1::RunRequest, 3> reqs = {req, req, req};
  std::array<v1::RunResponse, 3> resp;
  for (auto& s : RunAll(reqs, &resp)) ASSERT_TRUE(s.ok()) << s.error_message();
  v1::FinalizeRequest fin;
  fin.set_batch_id(Rand(16));
  auto* item = fin.add_items();
  item->set_run_batch_id(req.batch_id());
  item->set_job_id(42);
  // Longer than the keystream (a shorter one is a valid prefix): refused,
  // nothing consumed.
  item->set_ciphertext(std::string(21, 'x'));
  v1::FinalizeResponse fr;
  grpc::Status refused = parties_[0].keyops->DoFinalize(V(fin), &fr);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorOf(refused), v1::BATCH_MALFORMED);
  item->set_ciphertext(std::string(20, 'x'));
  // Ring-free: each server answers alone and at once (one after the other
  // here: no peer is asked at the same time).
  std::array<v1::FinalizeResponse, 3> frs;
  for (int i : {2, 0, 1}) {
    const absl::Time t0 = absl::Now();
    EXPECT_TRUE(parties_[i].keyops->DoFinalize(V(fin), &frs[i]).ok());
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(200));
  }
  std::string tag(16, '\0');
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(frs[i].results_size(), 1);
    EXPECT_EQ(frs[i].tags().size(), 16u);  // one additive share, no copy
    for (int k = 0; k < 16; ++k) tag[k] ^= Vals(frs[i], 0).tag.first[k];
  }
  // The enctype's tag: GHASH_H(usage || C) ^ AES_K(ctr0), usage 0.
  EXPECT_EQ(tag, RefTag(key, std::string(4, '\0'), Vals(resp[0], 0).ctr0, std::string(20, 'x')));
  fin.set_batch_id(Rand(16));
  for (int i = 0; i < 3; ++i) {
    grpc::Status st = parties_[i].keyops->DoFinalize(V(fin), &fr);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(ErrorOf(st), v1::BATCH_UNKNOWN_ENCRYPT);
  }

  // Request errors: precise codes, nothing scheduled.
  auto expect_refused = [](const grpc::Status& st, grpc::StatusCode code,
                           v1::BatchErrorCode error) {
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_EQ(ErrorOf(st), error) << st.error_message();
  };
  v1::RunRequest bad = req;
  bad.set_batch_id("short");
  expect_refused(parties_[0].keyops->DoRun(V(bad), &resp[0]),
                 grpc::StatusCode::INVALID_ARGUMENT, v1::BATCH_MALFORMED);
  bad = req;
  *bad.add_jobs() = req.jobs(0);  // duplicate job id
  expect_refused(parties_[0].keyops->DoRun(V(bad), &resp[0]),
                 grpc::StatusCode::INVALID_ARGUMENT, v1::BATCH_MALFORMED);
  bad.clear_jobs();
  expect_refused(parties_[0].keyops->DoRun(V(bad), &resp[0]),
                 grpc::StatusCode::INVALID_ARGUMENT, v1::BATCH_MALFORMED);
  for (int j = 0; j < 17; ++j) {
    auto* big = AddJob(&bad, j, id, v1::JOB_ENCRYPT);
    big->set_length(65536 * 16);
  }
  expect_refused(parties_[0].keyops->DoRun(V(bad), &resp[0]),
                 grpc::StatusCode::RESOURCE_EXHAUSTED, v1::BATCH_TOO_LARGE);
  // CHECKSUM jobs count their data (contract::JobCost): 17 of 1 MiB are
  // over the batch limit although they need only 17 AES blocks.
  bad.clear_jobs();
  const std::string mib(65536 * 16, 'd');
  for (int j = 0; j < 17; ++j) {
    auto* big = AddJob(&bad, j, id, v1::JOB_CHECKSUM);
    big->set_usage(17);
    big->set_length(static_cast<uint32_t>(mib.size()));
    bad.mutable_data_shares()->append(mib);
    bad.mutable_data_shares()->append(mib);
  }
  expect_refused(parties_[0].keyops->DoRun(V(bad), &resp[0]),
                 grpc::StatusCode::RESOURCE_EXHAUSTED, v1::BATCH_TOO_LARGE);
  // More jobs than the server's limit.
  ServiceOptions small;
  small.max_batch_jobs = 1;
  KeyOpsService limited(small, parties_[0].keys.get(), parties_[0].scheduler.get(),
                        &parties_[0].metrics);
  bad = req;
  bad.add_jobs()->set_job_id(43);
  expect_refused(limited.DoRun(V(bad), &resp[0]), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 v1::BATCH_TOO_LARGE);

  // A job of an unknown type fails alone (JOB_MALFORMED) on the three
  // servers; the batch's other job runs.
  bad = req;
  bad.set_batch_id(Rand(16));
  bad.mutable_jobs(0)->set_type(static_cast<v1::JobType>(77));
  *bad.add_jobs() = req.jobs(0);
  bad.mutable_jobs(1)->set_job_id(43);
  std::array<v1::RunRequest, 3> breqs = {bad, bad, bad};
  std::array<v1::RunResponse, 3> bresp;
  for (auto& s : RunAll(breqs, &bresp)) ASSERT_TRUE(s.ok()) << s.error_message();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(bresp[i].results_size(), 2);
    EXPECT_EQ(bresp[i].results(0).status(), v1::JOB_MALFORMED);
    EXPECT_FALSE(bresp[i].results(0).detail().empty());
    EXPECT_FALSE(Vals(bresp[i], 0).has_keystream());
    EXPECT_EQ(bresp[i].results(1).status(), v1::JOB_OK);
  }
  EXPECT_EQ(Combine(bresp, 1).size(), 20u);
}

// A batch mixing jobs that break the contract, an unknown key and good
// jobs: every server reports the same per-job results (status, detail,
// public values), the good jobs compute, the batch is not refused.
// A KDC module of another KeyOps wire version (kmpc.proto, "Shares travel
// flat"): every request is refused as a whole, BATCH_MALFORMED, with both
// versions named, before anything is computed or any state is used; the
// same requests at the current version go through.
TEST_F(ServiceTest, AnotherWireVersionIsRefusedByName) {
  const std::string id = PutKey(Rand(16));
  v1::RunRequest run;
  run.set_batch_id(Rand(16));
  auto* job = AddJob(&run, 1, id, v1::JOB_ENCRYPT);
  job->set_usage(2);
  job->set_length(20);
  v1::FinalizeRequest fin;
  fin.set_batch_id(Rand(16));
  auto* it = fin.add_items();
  it->set_run_batch_id(run.batch_id());
  it->set_job_id(1);
  it->set_ciphertext(std::string(20, 'c'));
  v1::SignRequest sign;
  sign.set_request_id(Rand(16));
  sign.add_items()->set_run_batch_id(Rand(16));
  auto named = [](const grpc::Status& st, uint32_t v) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(ErrorOf(st), v1::BATCH_MALFORMED) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(),
                                  absl::StrCat("wire version ", v)))
        << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(),
                                  absl::StrCat("version ", contract::kWireVersion)))
        << st.error_message();
  };
  // kWireVersion - 1: the version before this one.
  for (uint32_t v : {0u, 1u, contract::kWireVersion - 1, contract::kWireVersion + 1}) {
    run.set_wire_version(v);
    fin.set_wire_version(v);
    sign.set_wire_version(v);
    v1::RunResponse rr;
    v1::FinalizeResponse fr;
    v1::SignResponse sr;
    named(parties_[0].keyops->DoRun(run, &rr), v);
    named(parties_[0].keyops->DoFinalize(fin, &fr), v);
    named(parties_[0].keyops->DoSign(sign, &sr), v);
    EXPECT_EQ(rr.results_size(), 0);
    EXPECT_TRUE(rr.shares().empty());
  }
  // The current version: the Run computes, its ENCRYPT state was kept
  // through the refused Finalize requests above, and one Finalize takes it.
  std::array<v1::RunResponse, 3> resp;
  for (auto& st : RunAll({run, run, run}, &resp)) ASSERT_TRUE(st.ok()) << st.error_message();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(resp[i].wire_version(), contract::kWireVersion);
    EXPECT_EQ(resp[i].ctr0s().size(), 16u);
    EXPECT_EQ(resp[i].shares().size(), 40u);  // two 20-byte keystream shares
    v1::FinalizeResponse fr;
    ASSERT_TRUE(parties_[i].keyops->DoFinalize(V(fin), &fr).ok()) << i;
    EXPECT_EQ(fr.wire_version(), contract::kWireVersion);
    EXPECT_EQ(fr.tags().size(), 16u);
  }
}

TEST_F(ServiceTest, MixedBatchPerJobResultsIdenticalOnTheThreeServers) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto add = [&](v1::JobType type) {
    auto* job = AddJob(&req, (req.jobs_size() + 1) * 10, id, type);
    job->set_usage(7);
    return job;
  };
  add(v1::JOB_ENCRYPT)->set_length(33);                  // 0 good
  add(v1::JOB_ENCRYPT)->set_key_id(id.substr(0, 31));    // 1 key id 31 bytes
  add(v1::JOB_ENCRYPT)->set_key_id(Rand(32));            // 2 unknown key
  add(v1::JOB_DECRYPT)->set_data(Rand(31));              // 3 shorter than ctr0||T
  add(v1::JOB_CHECKSUM)->set_data("hello");              // 4 good
  auto* enc_data = add(v1::JOB_ENCRYPT);                 // 5 ENCRYPT with data
  enc_data->set_length(4);
  enc_data->set_data("x");
  add(v1::JOB_FINALIZE);                                 // 6 not a Run job
  add(v1::JOB_VERIFY_CHECKSUM)->set_checksum(Rand(15));  // 7 short ctr0
  auto* big = add(v1::JOB_CHECKSUM);                     // 8 over the job limit
  big->set_data(std::string(contract::kMaxJobBytes + 1, 'd'));
  auto* clear = add(v1::JOB_CHECKSUM);                   // 9 message in the clear
  clear->set_length(5);
  clear->set_data("hello");
  const v1::JobStatus want[] = {
      v1::JOB_OK,        v1::JOB_MALFORMED, v1::JOB_UNKNOWN_KEY,
      v1::JOB_INTEGRITY_FAILED, v1::JOB_OK, v1::JOB_MALFORMED,
      v1::JOB_MALFORMED, v1::JOB_INTEGRITY_FAILED, v1::JOB_MALFORMED,
      v1::JOB_MALFORMED};
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, want, &resp));
  for (int j = 0; j < req.jobs_size(); ++j) {
    for (int i = 0; i < 3; ++i) {
      const v1::JobResult& r = resp[i].results(j);
      if (want[j] == v1::JOB_MALFORMED || want[j] == v1::JOB_UNKNOWN_KEY) {
        EXPECT_FALSE(r.detail().empty()) << j;
      }
    }
  }
  // The good ENCRYPT's keystream is AES-CTR under the key.
  std::string ks = Combine(resp, 0);
  ASSERT_EQ(ks.size(), 33u);
  EXPECT_EQ(ks, RefKeystream(key, Vals(resp[0], 0).ctr0, 33));
  // The CHECKSUM's tag shares have consistent copies.
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Vals(resp[i], 4).tag.second, Vals(resp[(i + 1) % 3], 4).tag.first);
  // A refused message is not echoed back.
  EXPECT_TRUE(absl::StrContains(resp[0].results(9).detail(), "shares"))
      << resp[0].results(9).detail();
  EXPECT_FALSE(absl::StrContains(resp[0].results(9).detail(), "hello"));
}

// RunRequest.data_shares of another size than 2 x the CHECKSUM and
// VERIFY_CHECKSUM lengths refuses the batch (BATCH_MALFORMED, naming both
// sizes) before any slice is taken: a short or long buffer would shift a
// later job onto another job's shares.
TEST_F(ServiceTest, RunShareBufferOfTheWrongSizeIsRefused) {
  const std::string id = PutKey(Rand(16));
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  for (int j = 0; j < 3; ++j) {
    auto* job = AddJob(&req, j + 1, id, j == 1 ? v1::JOB_ENCRYPT : v1::JOB_CHECKSUM);
    job->set_usage(7);
    if (j == 1) job->set_length(5);
    else job->set_data(j == 0 ? "first" : "second message");
  }
  const std::array<v1::RunRequest, 3> dealt = DealMessages(req);
  ASSERT_EQ(dealt[0].data_shares().size(), 38u);  // 2 x (5 + 14)
  const std::string full = dealt[0].data_shares();
  for (const std::string& bad : {full.substr(0, 37), full.substr(0, 10), full + "xy",
                                 std::string()}) {
    v1::RunRequest r = dealt[0];
    *r.mutable_data_shares() = bad;
    v1::RunResponse resp;
    const grpc::Status st = parties_[0].keyops->DoRun(V(r), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(ErrorOf(st), v1::BATCH_MALFORMED) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), absl::StrCat(bad.size(), " bytes")))
        << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "take 38")) << st.error_message();
    EXPECT_EQ(resp.results_size(), 0);
  }
  // The right buffer runs (the three servers, every job OK).
  const v1::JobStatus want[] = {v1::JOB_OK, v1::JOB_OK, v1::JOB_OK};
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, want, &resp));
}

// kmpc.proto Job.cipher over the service: a key dealt AES-128 named
// CIPHER_AES256 and a key dealt AES-256 named CIPHER_AES128 fail alone as
// JOB_WRONG_CIPHER (nothing revealed, the same on the three servers,
// counted in the failure metrics); CIPHER_UNSPECIFIED and an unknown value
// are JOB_MALFORMED; the batch's other jobs compute.
TEST_F(ServiceTest, JobCipherMustBeTheKeysCipher) {
  const std::string k128 = Rand(16), k256 = Rand(32);
  const std::string id128 = PutKey(k128), id256 = PutKey(k256);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto add = [&](const std::string& id, v1::Cipher cipher) {
    auto* job = AddJob(&req, req.jobs_size() + 1, id, v1::JOB_ENCRYPT);
    job->set_cipher(cipher);
    job->set_usage(3);
    job->set_length(20);
    return job;
  };
  add(id128, v1::CIPHER_AES128);                    // 0 ok
  add(id128, v1::CIPHER_AES256);                    // 1 wrong
  add(id256, v1::CIPHER_AES256);                    // 2 ok
  add(id256, v1::CIPHER_AES128);                    // 3 wrong
  add(id128, v1::CIPHER_UNSPECIFIED);               // 4 malformed
  add(id256, static_cast<v1::Cipher>(9));           // 5 malformed
  add(id256, v1::CIPHER_AES128)->set_type(v1::JOB_CHECKSUM);  // 6 wrong
  req.mutable_jobs(6)->clear_length();
  req.mutable_jobs(6)->set_data("data");
  const v1::JobStatus want[] = {v1::JOB_OK,        v1::JOB_WRONG_CIPHER,
                                v1::JOB_OK,        v1::JOB_WRONG_CIPHER,
                                v1::JOB_MALFORMED, v1::JOB_MALFORMED,
                                v1::JOB_WRONG_CIPHER};
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, want, &resp));
  for (int j = 0; j < req.jobs_size(); ++j) {
    for (int i = 0; i < 3; ++i) {
      const v1::JobResult& r = resp[i].results(j);
      if (want[j] != v1::JOB_OK) {
        EXPECT_TRUE(Vals(resp[i], j).ctr0.empty()) << j;
        EXPECT_FALSE(r.detail().empty()) << j;
      }
    }
  }
  EXPECT_TRUE(absl::StrContains(resp[0].results(1).detail(), "dealt for AES128"))
      << resp[0].results(1).detail();
  EXPECT_TRUE(absl::StrContains(resp[0].results(3).detail(), "dealt for AES256"))
      << resp[0].results(3).detail();
  EXPECT_TRUE(absl::StrContains(resp[0].results(4).detail(), "cipher"))
      << resp[0].results(4).detail();
  // The computed ones are the right cipher's keystream.
  for (int j : {0, 2}) {
    EXPECT_EQ(Combine(resp, j), RefKeystream(j == 0 ? k128 : k256, Vals(resp[0], j).ctr0, 20))
        << j;
  }
  // Counted like the other per-job failures, on every server.
  for (int i = 0; i < 3; ++i) {
    const std::string text = parties_[i].metrics.Render();
    EXPECT_TRUE(absl::StrContains(
        text, "status=\"JOB_WRONG_CIPHER\"} 3\n"))
        << text;
  }
}

// ---- Pads and KeyOps.Sign ----

class SignTest : public ServiceTest {
 protected:
  // Runs PAD jobs (job ids 1..n, max lengths `lens`) under `id`; returns
  // the batch id and the ctr0 of each (the same on the three servers).
  std::pair<std::string, std::vector<std::string>> DrawPads(
      const std::string& id, uint32_t usage, const std::vector<uint32_t>& lens) {
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(Rand(16));
    for (size_t j = 0; j < lens.size(); ++j) {
      auto* job = AddJob(&req, j + 1, id, v1::JOB_PAD);
      job->set_usage(usage);
      job->set_length(lens[j]);
    }
    std::vector<v1::JobStatus> want(lens.size(), v1::JOB_OK);
    std::array<v1::RunResponse, 3> resp;
    RunExpecting(req, want.data(), &resp);
    std::vector<std::string> ctrs;
    for (size_t j = 0; j < lens.size(); ++j) {
      EXPECT_EQ(Vals(resp[0], j).ctr0.size(), 16u);
      EXPECT_FALSE(Vals(resp[0], j).has_tag());
      EXPECT_FALSE(Vals(resp[0], j).has_keystream());
      ctrs.push_back(Vals(resp[0], j).ctr0);
    }
    return {req.batch_id(), ctrs};
  }

  struct Item {
    std::string batch;
    uint64_t job;
    uint32_t usage;
    std::string msg;
    std::string verify_tag = {};  // a verify item (SignItem.verify), dealt
    std::string chain_batch = {};  // a chained item (SignItem.chain)
    uint64_t chain_job = 0;
  };
  // One Sign request per party in `to` (messages dealt afresh); results by
  // party (empty for a party not asked).
  std::array<v1::SignResponse, 3> Sign(const std::vector<Item>& items,
                                       std::array<bool, 3> to = {true, true, true}) {
    std::array<v1::SignRequest, 3> reqs;
    const std::string rid = Rand(16);
    for (auto& r : reqs) r.set_request_id(rid);
    for (const Item& it : items) {
      std::array<v1::SignItem*, 3> o;
      for (int i = 0; i < 3; ++i) {
        o[i] = reqs[i].add_items();
        o[i]->set_run_batch_id(it.batch);
        o[i]->set_job_id(it.job);
        o[i]->set_usage(it.usage);
        o[i]->set_length(static_cast<uint32_t>(it.msg.size()));
        if (!it.verify_tag.empty()) o[i]->set_verify(true);
        if (!it.chain_batch.empty()) {
          o[i]->mutable_chain()->set_run_batch_id(it.chain_batch);
          o[i]->mutable_chain()->set_job_id(it.chain_job);
        }
      }
      // A verify item's presented tag is dealt after the message
      // (kmpc.proto SignItem.verify).
      const std::string value = it.msg + it.verify_tag;
      auto views = share::Deal(absl::MakeConstSpan(
          reinterpret_cast<const uint8_t*>(value.data()), value.size()));
      EXPECT_TRUE(views.ok());
      for (int i = 0; i < 3; ++i) {
        AppendShares(reqs[i].mutable_data_shares(), (*views)[i].comp);
      }
    }
    std::array<v1::SignResponse, 3> out;
    for (int i = 0; i < 3; ++i) {
      if (!to[i]) continue;
      grpc::Status st = parties_[i].keyops->DoSign(V(reqs[i]), &out[i]);
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(out[i].party(), static_cast<uint32_t>(i));
      EXPECT_EQ(out[i].results_size(), static_cast<int>(items.size()));
    }
    return out;
  }

  static std::string Combined(const std::array<v1::SignResponse, 3>& r, int k) {
    std::string t(16, '\0');
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(r[i].results(k).status(), v1::JOB_OK) << r[i].results(k).detail();
      EXPECT_EQ(TagShare(r[i], k).size(), 16u);
      if (TagShare(r[i], k).size() != 16) return "";
      for (int b = 0; b < 16; ++b) t[b] ^= TagShare(r[i], k)[b];
    }
    return t;
  }
};

// Pads drawn by a Run sign messages up to their length on each server
// alone; the three tag shares XOR to the enctype's checksum (both ciphers,
// 0 to 1000 bytes: beyond the stored powers of H).
TEST_F(SignTest, SignGivesTheEnctypeChecksum) {
  for (size_t klen : {16, 32}) {
    const std::string key = Rand(klen);
    const std::string id = PutKey(key);
    const std::vector<uint32_t> lens = {0, 1, 16, 17, 1000, 1000};
    auto [batch, ctrs] = DrawPads(id, 2, lens);
    std::vector<Item> items;
    std::vector<std::string> msgs;
    for (size_t j = 0; j < lens.size(); ++j) {
      msgs.push_back(Rand(j + 1 < lens.size() ? lens[j] : 500));  // last: shorter
      items.push_back({batch, j + 1, 2, msgs.back()});
    }
    auto r = Sign(items);
    for (size_t j = 0; j < lens.size(); ++j) {
      EXPECT_EQ(Combined(r, j), RefChecksumTag(key, 2, ctrs[j], msgs[j]))
          << klen << " job " << j;
      // One server's share is not the tag.
      EXPECT_NE(TagShare(r[0], j), RefChecksumTag(key, 2, ctrs[j], msgs[j]));
    }
  }
  const std::string text = parties_[0].metrics.Render();
  EXPECT_TRUE(absl::StrContains(text, "kind=\"sign\",result=\"ok\"} 2\n")) << text;
}

// A chained item (SignItem.chain) answers t_1,i || t_2,i: tag_1 is the
// checksum of D under pad 1, tag_2 the checksum of ctr0_1 || tag_1 under
// pad 2 (the reference's), one server's halves are not the tags, and both
// pads are spent on every server.
TEST_F(SignTest, ChainedItemSignsTheFirstSignature) {
  for (size_t klen : {16, 32}) {
    const std::string key = Rand(klen);
    const std::string id = PutKey(key);
    for (uint32_t len : {64u, 77u}) {
      auto [batch, ctrs] = DrawPads(id, 17, {len + 32, 32});
      const std::string msg = Rand(len);
      auto r = Sign({{batch, 1, 17, msg, "", batch, 2}});
      std::string t1(16, '\0'), t2(16, '\0');
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(r[i].results(0).status(), v1::JOB_OK) << r[i].results(0).detail();
        ASSERT_EQ(r[i].tag_shares().size(), 32u);
        for (int b = 0; b < 16; ++b) {
          t1[b] ^= r[i].tag_shares()[b];
          t2[b] ^= r[i].tag_shares()[16 + b];
        }
      }
      const std::string want1 = RefChecksumTag(key, 17, ctrs[0], msg);
      EXPECT_EQ(t1, want1) << klen << " " << len;
      EXPECT_EQ(t2, RefChecksumTag(key, 17, ctrs[1], ctrs[0] + want1)) << klen << " " << len;
      for (int i = 0; i < 3; ++i) EXPECT_NE(r[i].tag_shares().substr(16), t2);
      for (uint64_t job : {1, 2}) {
        auto again = Sign({{batch, job, 17, Rand(16)}});
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(again[i].results(0).status(), v1::JOB_PAD_UNAVAILABLE) << job << " " << i;
      }
    }
  }
}

// A chain that does not fit (second pad under another key or usage, too
// short, the first pad without two spare powers, a verify item, the pad
// itself) is JOB_MALFORMED and keeps both pads, which then sign; a second
// pad that is not there is JOB_PAD_UNAVAILABLE and keeps the first.
TEST_F(SignTest, ChainThatDoesNotFitKeepsBothPads) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key), other = PutKey(Rand(16));
  auto [batch, ctrs] = DrawPads(id, 17, {100, 32, 31, 1000});
  auto [b18, c18] = DrawPads(id, 18, {32});
  auto [bo, co] = DrawPads(other, 17, {32});
  const std::string msg = Rand(60);
  auto refused = [&](const Item& it, v1::JobStatus want) {
    auto r = Sign({it});
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(r[i].results(0).status(), want) << i << " " << r[i].results(0).detail();
      EXPECT_TRUE(r[i].tag_shares().empty());
    }
  };
  refused({batch, 1, 17, msg, "", bo, 1}, v1::JOB_MALFORMED);        // another key
  refused({batch, 1, 17, msg, "", b18, 1}, v1::JOB_MALFORMED);       // another usage
  refused({batch, 1, 17, msg, "", batch, 3}, v1::JOB_MALFORMED);     // 31 bytes
  refused({batch, 1, 17, msg, "", batch, 1}, v1::JOB_MALFORMED);     // itself
  refused({batch, 1, 17, msg, Rand(16), batch, 2}, v1::JOB_MALFORMED);  // verify
  refused({batch, 1, 17, msg, "", Rand(16), 9}, v1::JOB_PAD_UNAVAILABLE);
  // 1000 bytes under a 1000-byte pad: its 65 powers, none to spare.
  const std::string big = Rand(1000);
  refused({batch, 4, 17, big, "", batch, 2}, v1::JOB_MALFORMED);
  // Every pad is still there: each signs once, correctly.
  auto r = Sign({{batch, 1, 17, msg}, {batch, 2, 17, msg.substr(0, 32)},
                 {batch, 3, 17, "x"}, {batch, 4, 17, big}, {b18, 1, 18, "y"},
                 {bo, 1, 17, "z"}});
  EXPECT_EQ(Combined(r, 0), RefChecksumTag(key, 17, ctrs[0], msg));
  EXPECT_EQ(Combined(r, 1), RefChecksumTag(key, 17, ctrs[1], msg.substr(0, 32)));
  EXPECT_EQ(Combined(r, 3), RefChecksumTag(key, 17, ctrs[3], big));
  for (int k = 2; k < 6; ++k) Combined(r, k);
}

// One tag per pad, whoever asks: a second use is JOB_PAD_UNAVAILABLE on
// every server, also when the first went to one server only, and also
// within one request.
TEST_F(SignTest, APadSignsOnce) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key);
  auto [batch, ctrs] = DrawPads(id, 3, {64, 64});
  auto first = Sign({{batch, 1, 3, "first message"}});
  Combined(first, 0);
  auto again = Sign({{batch, 1, 3, "other message"}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(again[i].results(0).status(), v1::JOB_PAD_UNAVAILABLE) << i;
    EXPECT_TRUE(TagShare(again[i], 0).empty());
  }
  // Pad 2: first use to server 1 alone; server 1 then refuses, the others
  // serve their first use; after that, all three refuse.
  auto lone = Sign({{batch, 2, 3, "to one"}}, {false, true, false});
  EXPECT_EQ(lone[1].results(0).status(), v1::JOB_OK);
  auto second = Sign({{batch, 2, 3, "to all"}});
  EXPECT_EQ(second[1].results(0).status(), v1::JOB_PAD_UNAVAILABLE);
  EXPECT_EQ(second[0].results(0).status(), v1::JOB_OK);
  EXPECT_EQ(second[2].results(0).status(), v1::JOB_OK);
  auto third = Sign({{batch, 2, 3, "to all"}});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(third[i].results(0).status(), v1::JOB_PAD_UNAVAILABLE) << i;
  // Twice in one request: the second item finds nothing.
  auto [b2, c2] = DrawPads(id, 3, {16});
  auto twice = Sign({{b2, 1, 3, "a"}, {b2, 1, 3, "b"}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(twice[i].results(0).status(), v1::JOB_OK);
    EXPECT_EQ(twice[i].results(1).status(), v1::JOB_PAD_UNAVAILABLE);
  }
  EXPECT_EQ(Combined(twice, 0), RefChecksumTag(key, 3, c2[0], "a"));
}

// A malformed item (usage or length not the pad's, a short run_batch_id)
// is JOB_MALFORMED and keeps the pad, which then signs; request-level
// errors (a share buffer of the wrong size among them) refuse the whole
// request and keep the pad too.
TEST_F(SignTest, MalformedItemsKeepThePad) {
  const std::string key = Rand(32);
  const std::string id = PutKey(key);
  auto [batch, ctrs] = DrawPads(id, 4, {20});
  auto bad = Sign({{batch, 1, 5, "usage differs"},
                   {batch, 1, 4, std::string(21, 'l')},
                   {batch.substr(1), 1, 4, "short batch id"}});
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(bad[i].results(k).status(), v1::JOB_MALFORMED) << i << " " << k;
      EXPECT_FALSE(bad[i].results(k).detail().empty());
      EXPECT_TRUE(TagShare(bad[i], k).empty());
    }
  {  // 7 bytes of shares for a 4-byte message (it takes 8): refused whole
    v1::SignRequest odd;
    odd.set_request_id(Rand(16));
    auto* it = odd.add_items();
    it->set_run_batch_id(batch);
    it->set_job_id(1);
    it->set_usage(4);
    it->set_length(4);
    odd.mutable_data_shares()->append("abcabcd");
    v1::SignResponse r;
    const grpc::Status st = parties_[0].keyops->DoSign(V(odd), &r);
    EXPECT_EQ(ErrorOf(st), v1::BATCH_MALFORMED) << st.error_message();
    EXPECT_FALSE(absl::StrContains(st.error_message(), "abc"));
  }
  auto good = Sign({{batch, 1, 4, "the real message"}});
  EXPECT_EQ(Combined(good, 0), RefChecksumTag(key, 4, ctrs[0], "the real message"));

  auto expect_refused = [](const grpc::Status& st, grpc::StatusCode code,
                           v1::BatchErrorCode error) {
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_EQ(ErrorOf(st), error) << st.error_message();
  };
  v1::SignRequest req;
  v1::SignResponse resp;
  req.set_request_id("short");
  req.add_items()->set_run_batch_id(batch);
  expect_refused(parties_[0].keyops->DoSign(V(req), &resp), grpc::StatusCode::INVALID_ARGUMENT,
                 v1::BATCH_MALFORMED);
  req.set_request_id(Rand(16));
  req.clear_items();
  expect_refused(parties_[0].keyops->DoSign(V(req), &resp), grpc::StatusCode::INVALID_ARGUMENT,
                 v1::BATCH_MALFORMED);
  ServiceOptions small;
  small.max_sign_items = 1;
  KeyOpsService limited(small, parties_[0].keys.get(), parties_[0].scheduler.get(),
                        &parties_[0].metrics);
  req.add_items();
  req.add_items();
  expect_refused(limited.DoSign(V(req), &resp), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 v1::BATCH_TOO_LARGE);
  req.clear_items();
  for (int k = 0; k < 20; ++k) req.add_items()->set_length(1 << 20);
  expect_refused(parties_[0].keyops->DoSign(V(req), &resp),
                 grpc::StatusCode::RESOURCE_EXHAUSTED, v1::BATCH_TOO_LARGE);
}

// A share buffer of another size than 2 x the sum of the item lengths is
// refused as a whole (BATCH_MALFORMED, naming both sizes) before any pad
// is taken: a short buffer would otherwise give the second item slices of
// the wrong bytes and spend its pad on them. The same request with the
// right buffer then signs under the same pads.
TEST_F(SignTest, ShareBufferOfTheWrongSizeIsRefusedAndKeepsThePads) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key);
  auto [batch, ctrs] = DrawPads(id, 6, {8, 8});
  const std::string m1 = "12345678", m2 = "abcdefgh";
  std::array<v1::SignRequest, 3> reqs;
  const std::string rid = Rand(16);
  for (int i = 0; i < 3; ++i) reqs[i].set_request_id(rid);
  for (int j = 0; j < 2; ++j) {
    const std::string& m = j == 0 ? m1 : m2;
    auto views = share::Deal(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(m.data()), m.size()));
    ASSERT_TRUE(views.ok());
    for (int i = 0; i < 3; ++i) {
      auto* it = reqs[i].add_items();
      it->set_run_batch_id(batch);
      it->set_job_id(j + 1);
      it->set_usage(6);
      it->set_length(8);
      AppendShares(reqs[i].mutable_data_shares(), (*views)[i].comp);
    }
  }
  for (int i = 0; i < 3; ++i) ASSERT_EQ(reqs[i].data_shares().size(), 32u);
  for (const std::string& bad : {reqs[0].data_shares().substr(0, 31),
                                 reqs[0].data_shares() + "x"}) {
    v1::SignRequest r = reqs[0];
    *r.mutable_data_shares() = bad;
    v1::SignResponse resp;
    const grpc::Status st = parties_[0].keyops->DoSign(V(r), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(ErrorOf(st), v1::BATCH_MALFORMED) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), absl::StrCat(bad.size(), " bytes")))
        << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "take 32")) << st.error_message();
    EXPECT_EQ(resp.results_size(), 0);
  }
  std::array<v1::SignResponse, 3> out;
  for (int i = 0; i < 3; ++i) {
    const grpc::Status st = parties_[i].keyops->DoSign(V(reqs[i]), &out[i]);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(Combined(out, 0), RefChecksumTag(key, 6, ctrs[0], m1));
  EXPECT_EQ(Combined(out, 1), RefChecksumTag(key, 6, ctrs[1], m2));
}

// A pad can never be finalized and an ENCRYPT state never signed (two
// stores); each stays usable for its own purpose afterwards.
TEST_F(SignTest, PadsAndEncryptStatesDoNotMix) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* enc = AddJob(&req, 1, id, v1::JOB_ENCRYPT);
  enc->set_length(16);
  auto* pad = req.add_jobs();
  *pad = *enc;
  pad->set_job_id(2);
  pad->set_type(v1::JOB_PAD);
  const v1::JobStatus ok[] = {v1::JOB_OK, v1::JOB_OK};
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, ok, &resp));
  const std::string pad_ctr0 = Vals(resp[0], 1).ctr0;
  // FINALIZE of the pad: unknown as an ENCRYPT state, on every server.
  v1::FinalizeRequest fin;
  fin.set_batch_id(Rand(16));
  auto* item = fin.add_items();
  item->set_run_batch_id(req.batch_id());
  item->set_job_id(2);
  item->set_ciphertext(std::string(16, 'c'));
  for (int i = 0; i < 3; ++i) {
    v1::FinalizeResponse fr;
    grpc::Status st = parties_[i].keyops->DoFinalize(V(fin), &fr);
    EXPECT_EQ(ErrorOf(st), v1::BATCH_UNKNOWN_ENCRYPT) << i;
  }
  // Sign of the ENCRYPT job: no pad, on every server.
  auto r = Sign({{req.batch_id(), 1, 0, std::string(16, 'm')}});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(r[i].results(0).status(), v1::JOB_PAD_UNAVAILABLE) << i;
  // Both still serve their own use.
  item->set_job_id(1);
  for (int i = 0; i < 3; ++i) {
    v1::FinalizeResponse fr;
    EXPECT_TRUE(parties_[i].keyops->DoFinalize(V(fin), &fr).ok()) << i;
  }
  auto s = Sign({{req.batch_id(), 2, 0, std::string(16, 'm')}});
  EXPECT_EQ(Combined(s, 0), RefChecksumTag(key, 0, pad_ctr0, std::string(16, 'm')));
}

// A linked PAD (Job.pad_after) sits at its ENCRYPT's ctr0 + 2^17 and signs
// there; a PAD naming no ENCRYPT, or two PADs naming one, fail alike on
// every server, and a linked pad fails with its ENCRYPT.
TEST_F(SignTest, LinkedPadFollowsItsEncrypt) {
  const std::string key = Rand(32);
  const std::string id = PutKey(key);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* enc = AddJob(&req, 7, id, v1::JOB_ENCRYPT);
  enc->set_usage(2);
  enc->set_length(100);
  auto* pad = req.add_jobs();
  *pad = *enc;
  pad->set_job_id(8);
  pad->set_type(v1::JOB_PAD);
  pad->set_usage(17);
  pad->set_length(64);
  pad->set_pad_after(7);
  const v1::JobStatus ok[] = {v1::JOB_OK, v1::JOB_OK};
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, ok, &resp));
  std::string want;
  ASSERT_TRUE(contract::LinkedPadCtr0(Vals(resp[0], 0).ctr0, &want));
  EXPECT_EQ(Vals(resp[0], 1).ctr0, want);
  auto s = Sign({{req.batch_id(), 8, 17, "a PAC"}});
  EXPECT_EQ(Combined(s, 0), RefChecksumTag(key, 17, want, "a PAC"));

  // Two PADs naming one ENCRYPT; one naming a PAD; one naming no job.
  v1::RunRequest bad = req;
  bad.set_batch_id(Rand(16));
  const v1::Job linked = bad.jobs(1);  // a copy: add_jobs may reallocate
  for (auto [id, after] : {std::pair<int, int>{9, 7}, {10, 8}, {11, 99}}) {
    v1::Job* p = bad.add_jobs();
    *p = linked;
    p->set_job_id(id);
    p->set_pad_after(after);
  }
  const v1::JobStatus mixed[] = {v1::JOB_OK, v1::JOB_MALFORMED, v1::JOB_MALFORMED,
                                 v1::JOB_MALFORMED, v1::JOB_MALFORMED};
  std::array<v1::RunResponse, 3> bad_resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(bad, mixed, &bad_resp));

  // The ENCRYPT fails (wrong cipher): so does its linked pad.
  v1::RunRequest failed = req;
  failed.set_batch_id(Rand(16));
  failed.mutable_jobs(0)->set_cipher(v1::CIPHER_AES128);
  const v1::JobStatus both[] = {v1::JOB_WRONG_CIPHER, v1::JOB_WITHHELD};
  std::array<v1::RunResponse, 3> failed_resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(failed, both, &failed_resp));
}

// Slotted linked pads (Job.pad_slot, wire version 6; five slots since 13):
// kPadSlots PADs name one
// ENCRYPT at ctr0 + 2^17 + slot and each signs at its own counter; a slot
// taken twice, a slot past kPadSlots or a slot without pad_after fail as
// JOB_MALFORMED on every server.
TEST_F(SignTest, LinkedPadsOfOneEncryptTakeDistinctSlots) {
  const std::string key = Rand(32);
  const std::string id = PutKey(key);
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  req.set_batch_id(Rand(16));
  auto* enc = AddJob(&req, 7, id, v1::JOB_ENCRYPT);
  enc->set_usage(2);
  enc->set_length(100);
  const v1::Job ticket = *enc;
  for (uint32_t slot = 0; slot < contract::kPadSlots; ++slot) {
    v1::Job* pad = req.add_jobs();
    *pad = ticket;
    pad->set_job_id(20 + slot);
    pad->set_type(v1::JOB_PAD);
    pad->set_usage(17);
    pad->set_length(64);
    pad->set_pad_after(7);
    pad->set_pad_slot(slot);
  }
  const std::vector<v1::JobStatus> ok(1 + contract::kPadSlots, v1::JOB_OK);
  std::array<v1::RunResponse, 3> resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, ok.data(), &resp));
  for (uint32_t slot = 0; slot < contract::kPadSlots; ++slot) {
    std::string want;
    ASSERT_TRUE(contract::LinkedPadCtr0(Vals(resp[0], 0).ctr0, slot, &want));
    EXPECT_EQ(Vals(resp[0], 1 + slot).ctr0, want) << slot;
    const std::string m = "message " + std::to_string(slot);
    auto s = Sign({{req.batch_id(), 20 + slot, 17, m}});
    EXPECT_EQ(Combined(s, 0), RefChecksumTag(key, 17, want, m)) << slot;
  }

  v1::RunRequest bad = req;
  bad.set_batch_id(Rand(16));
  const v1::Job linked = bad.jobs(1);  // slot 0
  v1::Job* again = bad.add_jobs();     // slot 0 a second time
  *again = linked;
  again->set_job_id(30);
  v1::Job* past = bad.add_jobs();      // slot kPadSlots
  *past = linked;
  past->set_job_id(31);
  past->set_pad_slot(contract::kPadSlots);
  v1::Job* unlinked = bad.add_jobs();  // a slot, no pad_after
  *unlinked = linked;
  unlinked->set_job_id(32);
  unlinked->clear_pad_after();
  unlinked->set_pad_slot(2);
  // The ENCRYPT and slots 1 .. kPadSlots-1 hold; slot 0, named twice, the
  // slot past the last and the unlinked slot are malformed.
  std::vector<v1::JobStatus> mixed(1 + contract::kPadSlots + 3, v1::JOB_OK);
  mixed[1] = v1::JOB_MALFORMED;
  for (size_t j = 1 + contract::kPadSlots; j < mixed.size(); ++j)
    mixed[j] = v1::JOB_MALFORMED;
  std::array<v1::RunResponse, 3> bad_resp;
  ASSERT_NO_FATAL_FAILURE(RunExpecting(bad, mixed.data(), &bad_resp));
}

// A verification pad (a PAD with a counter) at a signature's ctr0: a
// verify item holds iff the presented tag is the signature's; the KDC gets
// x_0, x_1 and party 2's digest only (never the tag); it verifies once,
// never signs, and a signing pad never verifies.
TEST_F(SignTest, VerificationPadVerifiesOnceAndNeverSigns) {
  const std::string key = Rand(16);
  const std::string id = PutKey(key);
  const std::string msg = Rand(300);
  auto [sb, sc] = DrawPads(id, 17, {320});
  const std::string tag = Combined(Sign({{sb, 1, 17, msg}}), 0);
  ASSERT_EQ(tag, RefChecksumTag(key, 17, sc[0], msg));
  auto draw = [&](int n) {
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(Rand(16));
    for (int j = 1; j <= n; ++j) {
      auto* p = AddJob(&req, j, id, v1::JOB_PAD);
      p->set_usage(17);
      p->set_length(320);
      p->set_checksum(sc[0]);
    }
    const std::vector<v1::JobStatus> ok(n, v1::JOB_OK);
    std::array<v1::RunResponse, 3> resp;
    RunExpecting(req, ok.data(), &resp);
    EXPECT_EQ(Vals(resp[0], 0).ctr0, sc[0]);
    return req.batch_id();
  };
  // What the KDC combines: r * (T ^ t'), zero iff the tag holds.
  auto sum = [](const std::array<v1::SignResponse, 3>& r, int k) {
    std::string x(16, '\0');
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(r[i].results(k).status(), v1::JOB_OK) << r[i].results(k).detail();
      EXPECT_EQ(TagShare(r[i], k).size(), 16u);
      if (TagShare(r[i], k).size() != 16) return std::string("?");
      for (int b = 0; b < 16; ++b) x[b] ^= TagShare(r[i], k)[b];
    }
    return x;
  };
  auto holds = [&](const std::array<v1::SignResponse, 3>& r, int k) {
    return sum(r, k) == std::string(16, '\0');
  };
  const std::string vb = draw(4);
  std::string wrong = tag;
  wrong[5] ^= 0x20;
  auto r = Sign({{vb, 1, 17, msg, tag}, {vb, 2, 17, msg, wrong},
                 {vb, 3, 17, msg + "x", tag}});
  EXPECT_TRUE(holds(r, 0));
  EXPECT_FALSE(holds(r, 1));
  EXPECT_FALSE(holds(r, 2));
  // A failed check shows the KDC neither the tag nor T ^ t' (the sum is
  // masked by r), and the same wrong tag gives another sum each time.
  std::string diff(16, '\0');
  for (int b = 0; b < 16; ++b) diff[b] = tag[b] ^ wrong[b];
  EXPECT_NE(sum(r, 1), diff);
  EXPECT_NE(sum(r, 1), tag);
  const std::string vb2 = draw(1);
  EXPECT_NE(sum(Sign({{vb2, 1, 17, msg, wrong}}), 0), sum(r, 1));
  // Used: every server refuses a second verification.
  auto again = Sign({{vb, 1, 17, msg, tag}});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(again[i].results(0).status(), v1::JOB_PAD_UNAVAILABLE) << i;
  // Pad 4 refuses to sign (kept), then verifies; a signing pad refuses to
  // verify (kept), then signs.
  auto sign4 = Sign({{vb, 4, 17, msg}});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(sign4[i].results(0).status(), v1::JOB_MALFORMED) << i;
  EXPECT_TRUE(holds(Sign({{vb, 4, 17, msg, tag}}), 0));
  auto [pb2, pc2] = DrawPads(id, 17, {320});
  auto v = Sign({{pb2, 1, 17, msg, tag}});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(v[i].results(0).status(), v1::JOB_MALFORMED) << i;
  EXPECT_EQ(Combined(Sign({{pb2, 1, 17, msg}}), 0), RefChecksumTag(key, 17, pc2[0], msg));
}

}  // namespace
}  // namespace kmpc::service
