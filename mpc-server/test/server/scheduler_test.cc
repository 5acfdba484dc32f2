// Three Schedulers in one process over the in-memory ring
// (service/memory_scheduler_ring.h): batches computed end to end and
// checked against OpenSSL, and parties that do not take part.
#include "service/scheduler.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "contract.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "service/memory_scheduler_ring.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

std::string Rand(size_t n) {
  std::string s(n, '\0');
  RAND_bytes(reinterpret_cast<uint8_t*>(s.data()), static_cast<int>(n));
  return s;
}

BatchId RandomBatchId() {
  BatchId id;
  RAND_bytes(id.data(), id.size());
  return id;
}

// AES-128-ECB of the counter blocks c0+1 .. c0+n (big-endian 128 bit).
std::vector<uint8_t> ReferenceKeystream(const std::string& key,
                                        const std::array<uint8_t, 16>& ctr0,
                                        size_t n) {
  unsigned __int128 c0 = 0;
  for (uint8_t b : ctr0) c0 = (c0 << 8) | b;
  std::vector<uint8_t> in(16 * n), out(16 * n);
  for (size_t b = 0; b < n; ++b) {
    const unsigned __int128 c = c0 + b + 1;
    for (int k = 0; k < 16; ++k) in[16 * b + k] = static_cast<uint8_t>(c >> (8 * (15 - k)));
  }
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(ctx, EVP_aes_128_ecb(), nullptr,
                     reinterpret_cast<const uint8_t*>(key.data()), nullptr);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  int len = 0;
  EVP_EncryptUpdate(ctx, out.data(), &len, in.data(), static_cast<int>(in.size()));
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = Rand(16);
    key_id_ = Rand(contract::kKeyIdSize);
    auto views = engine::DealKey(
        engine::Cipher::kAes128,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key_.data()), 16));
    ASSERT_TRUE(views.ok()) << views.status();
    for (int i = 0; i < 3; ++i)
      shares_[i] = std::make_shared<const engine::KeyShares>((*views)[i]);
  }

  void TearDown() override {
    for (auto& s : schedulers_)
      if (s) s->Stop();
  }

  // Schedulers for the parties in `start` (the others never run), on a
  // fresh ring.
  void Start(std::array<bool, 3> start = {true, true, true},
             absl::Duration peer_batch_wait = absl::Milliseconds(300)) {
    TearDown();
    for (auto& s : schedulers_) s.reset();
    rings_ = std::make_unique<MemorySchedulerRings>(workers_, ring_timeout_);
    so_.schedule_timeout = schedule_timeout_;
    so_.peer_batch_wait = peer_batch_wait;
    for (int i = 0; i < 3; ++i) {
      MakeScheduler(i);
      if (start[i]) schedulers_[i]->Start();
    }
  }

  // Party i's Scheduler on the current ring (not started).
  void MakeScheduler(int i) {
    engine::KeyLookup lookup = [this, i](absl::string_view id)
        -> absl::StatusOr<std::shared_ptr<const engine::KeyShares>> {
      if (id != key_id_) return absl::NotFoundError("no such key");
      return shares_[i];
    };
    schedulers_[i] = std::make_unique<Scheduler>(&rings_->party(i), lookup, so_);
  }

  // Submits the batch on the parties in `send`, all at once.
  std::array<BatchOutcome, 3> SubmitAll(const BatchId& id,
                                        const std::vector<engine::Job>& jobs,
                                        std::array<bool, 3> send = {true, true, true},
                                        absl::Time deadline = absl::InfiniteFuture()) {
    std::array<std::future<BatchOutcome>, 3> fs;
    for (int i = 0; i < 3; ++i)
      if (send[i])
        fs[i] = std::async(std::launch::async, [&, i] {
          return schedulers_[i]->Submit(BatchKind::kRun, id, jobs, deadline);
        });
    std::array<BatchOutcome, 3> out;
    for (int i = 0; i < 3; ++i)
      if (send[i]) out[i] = fs[i].get();
    return out;
  }

  engine::Job Encrypt(const std::string& id, uint32_t nblocks) {
    engine::Job j;
    j.type = pb::JOB_ENCRYPT;
    j.cipher = pb::CIPHER_AES128;  // key_ is dealt AES-128
    j.key_id = id;
    j.usage = 3;
    j.nblocks = nblocks;
    return j;
  }

  // Timing limits of the ring and the queue; the tests of timing keep
  // these, a test of correctness may raise them (a loaded CI machine).
  int workers_ = 2;
  absl::Duration ring_timeout_ = absl::Seconds(1);
  absl::Duration schedule_timeout_ = absl::Seconds(2);
  std::unique_ptr<MemorySchedulerRings> rings_;
  SchedulerOptions so_;
  std::string key_, key_id_;
  std::array<std::shared_ptr<const engine::KeyShares>, 3> shares_;
  std::array<std::unique_ptr<Scheduler>, 3> schedulers_;
};

TEST_F(SchedulerTest, EncryptKeystreamMatchesOpenSslAesCtr) {
  Start();
  for (int batch = 0; batch < 3; ++batch) {  // a new PRSS session, then reuse
    const std::vector<engine::Job> jobs = {
        Encrypt(key_id_, 5), Encrypt(Rand(contract::kKeyIdSize), 1),
        Encrypt(key_id_, 1)};
    auto out = SubmitAll(RandomBatchId(), jobs);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
      ASSERT_EQ(out[i].result.jobs.size(), jobs.size());
      EXPECT_GT(out[i].ring_bytes, 0u);
      EXPECT_EQ(out[i].result.jobs[1].status, pb::JOB_UNKNOWN_KEY);
    }
    for (size_t j : {size_t{0}, size_t{2}}) {
      const auto& r0 = out[0].result.jobs[j];
      std::vector<uint8_t> ks(r0.keystream[0].size(), 0);
      for (int i = 0; i < 3; ++i) {
        const auto& r = out[i].result.jobs[j];
        ASSERT_EQ(r.status, pb::JOB_OK) << r.detail;
        EXPECT_EQ(r.ctr0, r0.ctr0);
        // Party i's second share is party i+1's first.
        EXPECT_EQ(r.keystream[1], out[(i + 1) % 3].result.jobs[j].keystream[0]);
        ASSERT_EQ(r.keystream[0].size(), 16 * size_t{jobs[j].nblocks});
        for (size_t k = 0; k < ks.size(); ++k) ks[k] ^= r.keystream[0][k];
      }
      EXPECT_EQ(ks, ReferenceKeystream(key_, r0.ctr0, jobs[j].nblocks))
          << "batch " << batch << " job " << j;
    }
  }
}

// A batch one party never got: the other two fail with
// BATCH_RING_UNAVAILABLE within their waits, and the ring runs the next
// batch.
TEST_F(SchedulerTest, BatchMissingOnOnePartyFailsCleanly) {
  Start();
  for (int missing = 0; missing < 3; ++missing) {
    std::array<bool, 3> send = {true, true, true};
    send[missing] = false;
    const absl::Time t0 = absl::Now();
    auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, send);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
    for (int i = 0; i < 3; ++i) {
      if (i == missing) continue;
      EXPECT_TRUE(absl::IsUnavailable(out[i].status)) << i << ": " << out[i].status;
      EXPECT_EQ(out[i].error, pb::BATCH_RING_UNAVAILABLE) << i;
    }
  }
  auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(out[i].status.ok()) << i << out[i].status;
}

// A party whose scheduler does not run at all: the two others fail
// cleanly (no hang) with BATCH_RING_UNAVAILABLE.
TEST_F(SchedulerTest, PartyNotRunningFailsTheOthersCleanly) {
  for (int absent = 0; absent < 3; ++absent) {
    SCOPED_TRACE(absent);
    std::array<bool, 3> run = {true, true, true};
    run[absent] = false;
    Start(run);
    const absl::Time t0 = absl::Now();
    auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, run);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(8));
    for (int i = 0; i < 3; ++i) {
      if (i == absent) continue;
      EXPECT_FALSE(out[i].status.ok()) << i;
      EXPECT_EQ(out[i].error, pb::BATCH_RING_UNAVAILABLE) << i << ": " << out[i].status;
    }
  }
}

// A batch one party never received fails on the two others by its
// client's deadline, not after the follower's peer_batch_wait.
TEST_F(SchedulerTest, BatchNeverWaitsPastItsClientDeadline) {
  Start({true, true, true}, /*peer_batch_wait=*/absl::Seconds(4));
  for (int missing = 1; missing < 3; ++missing) {  // a follower
    SCOPED_TRACE(missing);
    std::array<bool, 3> send = {true, true, true};
    send[missing] = false;
    const absl::Time t0 = absl::Now();
    auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, send,
                         t0 + absl::Milliseconds(300));
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
    for (int i = 0; i < 3; ++i) {
      if (i == missing) continue;
      EXPECT_EQ(out[i].error, pb::BATCH_RING_UNAVAILABLE) << i << ": " << out[i].status;
    }
  }
  // Past its deadline already: never proposed.
  auto late = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, {true, true, true},
                        absl::Now() - absl::Milliseconds(1));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(late[i].error, pb::BATCH_RING_UNAVAILABLE) << i << ": " << late[i].status;
  auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(out[i].status.ok()) << i << out[i].status;
}

// A follower's reply that comes after the leader gave up on its batch (the
// client's deadline passed while party 1, the follower that answers the
// leader, slept before sending it) is still on the link when the next
// batch's reply is awaited on that worker (one worker here, so the next
// batch is on it): the leader skips it by its older sequence number, and
// the followers take the leader's abort for the abandoned batch, so the
// next batch runs. (Before, the leader read the late reply as the next
// batch's: "scheduling message for another batch", and that batch failed.)
// The order is certain whatever the load: party 1 sends its reply only
// after sleeping longer than the whole deadline.
TEST_F(SchedulerTest, LateReplyToAnAbandonedBatchDoesNotFailTheNext) {
  workers_ = 1;
  Start();
  const absl::Duration deadline = absl::Seconds(1);
  rings_->DelayControlSends(1, 3 * deadline);
  const absl::Time t0 = absl::Now();
  auto first = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, {true, true, true},
                         t0 + deadline);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(first[i].error, pb::BATCH_RING_UNAVAILABLE) << i << ": " << first[i].status;
  // The batch was proposed and party 1 answered it, late. Its answer may
  // still be on the way: on a loaded machine the proposal can reach party
  // 1 after its own Submit gave up at the deadline.
  for (int i = 0; i < 1000 && rings_->control_sends_delayed() == 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(rings_->control_sends_delayed(), 1);
  rings_->DelayControlSends(1, absl::ZeroDuration());
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
    EXPECT_EQ(out[0].result.jobs[0].keystream[1], out[1].result.jobs[0].keystream[0]);
  }
}

// A follower (re)started after a batch reached the leader will never get
// its copy (the KDC sent it while that server was down): it answers
// "missing" at once instead of waiting peer_batch_wait, so a restarted
// server does not hold the ring up over the batches queued before it came.
TEST_F(SchedulerTest, RestartedFollowerDoesNotWaitForBatchesFromBeforeItsStart) {
  // The leader's workers start late: the batch waits in its queue as it
  // would while its ring connect to the down party fails (the in-memory
  // ring has no connections to fail).
  Start({false, false, true}, /*peer_batch_wait=*/absl::Seconds(4));
  schedulers_[1].reset();  // "down": made again below, as a restart
  const absl::Time t0 = absl::Now();
  auto early = std::async(std::launch::async, [&] {
    return SubmitAll(RandomBatchId(), {Encrypt(key_id_, 1)}, {true, false, true});
  });
  absl::SleepFor(absl::Milliseconds(900));
  MakeScheduler(1);
  schedulers_[1]->Start();
  schedulers_[0]->Start();
  auto out = early.get();
  // Without the age check: 0.9 s + peer_batch_wait (4 s).
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2.5));
  for (int i : {0, 2})
    EXPECT_EQ(out[i].error, pb::BATCH_RING_UNAVAILABLE) << i << ": " << out[i].status;
  auto ok = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ok[i].status.ok()) << i << ok[i].status;
}

// Batches only the leader received (a client that sends to party 0 only)
// hold no worker while they wait for copies that do not come: the leader
// proposes each again after a short backoff until peer_batch_wait has
// passed, and a normal batch sent to all three meanwhile runs at once even
// with twice as many such batches as workers. They then fail with the
// clear error. (Before, each held a worker on all three servers for
// peer_batch_wait: the normal batch waited behind them past 2 s.)
TEST_F(SchedulerTest, BatchesSentToTheLeaderOnlyDoNotHoldTheWorkers) {
  // "Not held" is an order, not a wall-clock bound: each normal batch ends
  // while all the stalled ones are still being proposed, which a batch
  // queued behind them could not (two workers, four stalled batches). The
  // wait is long against a batch on a loaded machine.
  const absl::Duration peer_wait = absl::Seconds(4);
  Start({true, true, true}, peer_wait);
  constexpr int kStalled = 4;  // MemorySchedulerRings: 2 workers
  std::atomic<int> stalled_done{0};
  std::vector<std::future<std::pair<BatchOutcome, absl::Duration>>> stalled;
  for (int k = 0; k < kStalled; ++k)
    stalled.push_back(std::async(std::launch::async, [&] {
      const absl::Time t = absl::Now();
      BatchOutcome o = schedulers_[0]->Submit(BatchKind::kRun, RandomBatchId(),
                                              {Encrypt(key_id_, 1)});
      const absl::Duration took = absl::Now() - t;
      ++stalled_done;
      return std::make_pair(std::move(o), took);
    }));
  absl::SleepFor(absl::Milliseconds(100));  // all proposed at least once
  absl::Duration slowest;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    const absl::Time t0 = absl::Now();
    auto out = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
    slowest = std::max(slowest, absl::Now() - t0);
    EXPECT_EQ(stalled_done.load(), 0) << "a normal batch waited behind batches only the "
                                         "leader received";
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
    EXPECT_EQ(out[0].result.jobs[0].keystream[1], out[1].result.jobs[0].keystream[0]);
    absl::SleepFor(absl::Milliseconds(200));
  }
  for (auto& f : stalled) {
    auto [o, took] = f.get();
    EXPECT_TRUE(absl::IsUnavailable(o.status)) << o.status;
    EXPECT_EQ(o.error, pb::BATCH_RING_UNAVAILABLE) << o.status;
    // Party 2 is the first follower on the ring (0 -> 2 -> 1).
    EXPECT_NE(o.status.message().find(
                  "party 2 did not receive this batch from the client in time"),
              absl::string_view::npos)
        << o.status;
    // Proposed again until peer_batch_wait had passed, not failed at once,
    // and not held past it longer than a batch took here.
    EXPECT_GE(took, peer_wait - absl::Milliseconds(50));
    EXPECT_LT(took, peer_wait + 2 * slowest + absl::Milliseconds(500)) << slowest;
  }
}

// A follower's copy that arrives late (here party 1's, the second
// follower, 300 ms after the others): party 2 puts its claimed copy back
// after each "missing", and the batch runs on the first proposal after
// party 1's copy is in.
TEST_F(SchedulerTest, LateCopyRunsOnARetry) {
  Start({true, true, true}, absl::Seconds(2));
  const BatchId id = RandomBatchId();
  const std::vector<engine::Job> jobs = {Encrypt(key_id_, 3)};
  const absl::Time t0 = absl::Now();
  auto late = std::async(std::launch::async, [&] {
    absl::SleepFor(absl::Milliseconds(300));
    return schedulers_[1]->Submit(BatchKind::kRun, id, jobs);
  });
  auto out = SubmitAll(id, jobs, {true, false, true});
  out[1] = late.get();
  const absl::Duration took = absl::Now() - t0;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
  std::vector<uint8_t> ks(48, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].result.jobs[0].keystream[1],
              out[(i + 1) % 3].result.jobs[0].keystream[0]);
    for (size_t k = 0; k < ks.size(); ++k) ks[k] ^= out[i].result.jobs[0].keystream[0][k];
  }
  EXPECT_EQ(ks, ReferenceKeystream(key_, out[0].result.jobs[0].ctr0, 3));
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Milliseconds(900)) << took;  // backoffs of 100 ms at most
}

// A share refresh goes through the same ring, interleaved with KDC
// batches: the three parties' new shares are consistent, still hold the key
// (ENCRYPT under them matches OpenSSL), and a party given other pairs fails
// the refresh on all three while the ring goes on.
TEST_F(SchedulerTest, RefreshRunsOnTheRingBetweenBatches) {
  std::array<std::shared_ptr<const engine::KeyShares>, 3> fresh;
  const std::string new_id = Rand(contract::kKeyIdSize);
  // The KDC's batch waits behind the two refreshes on a machine that may be
  // busy (ctest -j): what is tested here is the outcome, not its timing.
  ring_timeout_ = absl::Seconds(10);
  schedule_timeout_ = absl::Seconds(20);
  Start();
  auto refresh_all = [&](const std::array<std::string, 3>& new_ids) {
    std::array<std::future<BatchOutcome>, 3> fs;
    const BatchId id = RandomBatchId();
    for (int i = 0; i < 3; ++i)
      fs[i] = std::async(std::launch::async, [&, i] {
        engine::RefreshLookup lookup = [this, i](const engine::RefreshItem& it) {
          engine::RefreshSource src;
          if (it.old_key_id == key_id_) src.old_key = shares_[i];
          src.public_meta = "meta";
          return src;
        };
        return schedulers_[i]->SubmitRefresh(
            id, {engine::RefreshItem{key_id_, new_ids[i]}}, lookup);
      });
    std::array<BatchOutcome, 3> out;
    for (int i = 0; i < 3; ++i) out[i] = fs[i].get();
    return out;
  };
  auto kdc = std::async(std::launch::async, [&] {
    return SubmitAll(RandomBatchId(), {Encrypt(key_id_, 2)});
  });
  auto bad = refresh_all({new_id, new_id, Rand(contract::kKeyIdSize)});
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(bad[i].status.ok()) << i;
    EXPECT_EQ(bad[i].error, pb::BATCH_PEERS_DISAGREE) << i << ": " << bad[i].status;
  }
  auto out = refresh_all({new_id, new_id, new_id});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status;
    ASSERT_EQ(out[i].refreshed.size(), 1u);
    ASSERT_EQ(out[i].refreshed[0].status, pb::JOB_OK) << out[i].refreshed[0].detail;
    fresh[i] = out[i].refreshed[0].shares;
  }
  for (const auto& r : kdc.get()) EXPECT_TRUE(r.status.ok()) << r.status;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(fresh[i]->round_keys[1], fresh[(i + 1) % 3]->round_keys[0]);
    EXPECT_NE(fresh[i]->round_keys[0], shares_[i]->round_keys[0]);
  }
  // Compute with the refreshed shares under the old id: same keystream.
  shares_ = fresh;
  auto enc = SubmitAll(RandomBatchId(), {Encrypt(key_id_, 3)});
  std::vector<uint8_t> ks(48, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(enc[i].status.ok()) << enc[i].status;
    ASSERT_EQ(enc[i].result.jobs[0].status, pb::JOB_OK);
    for (size_t k = 0; k < ks.size(); ++k) ks[k] ^= enc[i].result.jobs[0].keystream[0][k];
  }
  EXPECT_EQ(ks, ReferenceKeystream(key_, enc[0].result.jobs[0].ctr0, 3));
}

TEST_F(SchedulerTest, StoppedSchedulerRefusesAsShuttingDown) {
  Start();
  schedulers_[1]->Stop();
  BatchOutcome out =
      schedulers_[1]->Submit(BatchKind::kRun, RandomBatchId(), {Encrypt(key_id_, 1)});
  EXPECT_TRUE(absl::IsUnavailable(out.status)) << out.status;
  EXPECT_EQ(out.error, pb::BATCH_SHUTTING_DOWN);
}

}  // namespace
}  // namespace kmpc::service
