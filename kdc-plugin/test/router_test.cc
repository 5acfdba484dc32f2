// The router (router.h) over two fake clusters: failover when a party of
// the primary is down or hangs, jobs moved at once, both down, a key
// missing on one cluster, integrity failures not retried, deviations
// failed over but never resent to the cluster that detected them.
#include "batcher_fixture.h"

#include <syslog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

// Two fake clusters holding the same key under the same id behind a
// Router (router.h).
class RouterTest : public ::testing::Test {
 protected:
  RouterTest() {
    for (auto& c : clusters_) c.AddKey(kKeyId, kKey);
    options_.window = absl::Milliseconds(5);
  }
  std::unique_ptr<Router> Make() {
    return std::make_unique<Router>(
        options_, std::vector<Transport*>{&clusters_[0], &clusters_[1]},
        &sink_);
  }
  size_t Calls(int c) { return clusters_[c].calls().size(); }
  // Jobs cluster c was sent in Run requests (party 0's copies): where a job
  // ran, whatever the machine's load did to the timing.
  int RunJobs(int c) {
    int n = 0;
    for (const auto& call : clusters_[c].calls())
      if (call.method == "Run" && call.party == 0) n += call.jobs;
    return n;
  }

  std::array<FakeCluster, 2> clusters_;
  BatcherOptions options_;
  CollectingSink sink_;
};

// A planned exchange stays on the cluster its Begin went to (its prepared
// keystream lives there); once that cluster has failed, a later item runs
// as an ordinary job on the other cluster, counted as a failover miss.
TEST_F(RouterTest, AnExchangeIsPinnedToItsClusterAndFailsOverAsAMiss) {
  auto r = Make();
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  PlanItem ticket;
  ticket.role = Role::kTicket;
  ticket.type = kmpc::v1::JOB_ENCRYPT;
  ticket.cipher = kmpc::v1::CIPHER_AES256;
  ticket.key_id = kKeyId;
  ticket.usage = 2;
  ticket.length = 100;
  plan.items = {ticket};
  auto settle = [&](int runs) {
    for (int i = 0; i < 500 && (RunJobs(0) < runs || r->stats().inflight != 0); ++i)
      absl::SleepFor(absl::Milliseconds(10));
  };
  ASSERT_TRUE(r->Begin(1, plan, {}).ok());
  r->SubmitterIdle();
  settle(1);
  ASSERT_TRUE(r->SubmitItem(1, 0, 1, Encrypt(std::string(60, 'a'))).ok());
  r->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(1));
  ASSERT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  std::optional<ExchangeRecord> rec = r->End(1);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->runs, 1u);
  EXPECT_TRUE(rec->misses.empty());
  EXPECT_EQ(RunJobs(1), 0);

  ASSERT_TRUE(r->Begin(2, plan, {}).ok());
  r->SubmitterIdle();
  settle(2);
  clusters_[0].set_down(1, true);
  ASSERT_TRUE(r->Submit(2, Encrypt("the failure is seen")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  ASSERT_TRUE(r->SubmitItem(2, 0, 3, Encrypt(std::string(60, 'b'))).ok());
  r->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(3));
  ASSERT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
  rec = r->End(2);
  ASSERT_TRUE(rec.has_value());
  ASSERT_EQ(rec->misses.size(), 1u);
  EXPECT_EQ(rec->misses[0].second, Miss::kFailover);
  EXPECT_EQ(r->SubmitItem(2, 0, 4, Encrypt("ended")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(r->End(2).has_value());
}

// A ctr-mpc user's login (exchange-plan.md 1.5 "AS") whose cluster fails
// under it: its PA-REQ-ENC-PA-REP checksum, given gated on the timestamp,
// fails over, and its reply, submitted after the failure, runs on the
// other cluster as an ordinary job. The servers compute either only when
// released on that timestamp's DECRYPT in the same batch (mpc-server
// engine/user_key_rule.h), so each goes there with a copy of the gate and
// gated on it (planner.h GatedOnItsTimestamp); before, both went alone,
// ungated, and the servers now refuse that.
TEST_F(RouterTest, ACtrUsersLoginFailsOverWithItsTimestamp) {
  namespace pb = ::kmpc::v1;
  auto r = Make();
  const std::string ts_plain = "a timestamp, 30 bytes long....";
  ASSERT_TRUE(r->Submit(1, Encrypt(ts_plain, 1)).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  const SecureBytes ts = sink_.Get(1).output;
  auto item = [](Role role, size_t length, bool given) {
    RoleInfo info;
    EXPECT_TRUE(RoleOf(role, &info));
    PlanItem p;
    p.role = role;
    p.type = info.type;
    p.usage = info.usage;
    p.cipher = pb::CIPHER_AES256;
    p.key_id = kKeyId;
    p.length = length;
    p.given = given;
    p.flags = given ? kItemExact : 0;
    if (role != Role::kTimestamp) {
      p.flags |= kItemGated;
      p.gate = 0;
    }
    return p;
  };
  const std::string req = "the AS-REQ", reply(120, 'r');
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  plan.items = {item(Role::kTimestamp, ts.size(), true), item(Role::kReqChecksum, 10, true),
                item(Role::kReply, reply.size(), false)};
  plan.items[2].flags |= kItemExact;
  std::vector<ItemJob> given;
  given.push_back({0, 2, Decrypt(ts, 1)});
  given.push_back({1, 3, Checksum(req, 56)});
  clusters_[0].set_down(1, true);
  ASSERT_TRUE(r->Begin(1, plan, std::move(given)).ok());
  r->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(3));
  ASSERT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
  EXPECT_EQ(Str(sink_.Get(2).output), ts_plain);
  ASSERT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
  ASSERT_TRUE(r->SubmitItem(1, 2, 4, Encrypt(reply, 3)).ok());
  r->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(4));
  ASSERT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  r->End(1);
  // On cluster 2, each CHECKSUM 56 and ENCRYPT 3 was released on a usage-1
  // DECRYPT of its own request.
  int gated = 0;
  for (const std::string& raw : clusters_[1].received(0)) {
    pb::RunRequest rq;
    ASSERT_TRUE(rq.ParseFromString(raw));
    std::map<uint64_t, const pb::Job*> by_id;
    for (const pb::Job& j : rq.jobs()) by_id[j.job_id()] = &j;
    for (const pb::Job& j : rq.jobs()) {
      if (!((j.type() == pb::JOB_CHECKSUM && j.usage() == 56) ||
            (j.type() == pb::JOB_ENCRYPT && j.usage() == 3)))
        continue;
      ASSERT_TRUE(j.has_release_if_ok()) << j.type() << " usage " << j.usage();
      ASSERT_TRUE(by_id.count(j.release_if_ok()));
      EXPECT_EQ(by_id[j.release_if_ok()]->type(), pb::JOB_DECRYPT);
      EXPECT_EQ(by_id[j.release_if_ok()]->usage(), 1u);
      ++gated;
    }
  }
  EXPECT_EQ(gated, 2);
}

TEST_F(RouterTest, PrimaryTakesEverythingWhileHealthy) {
  auto r = Make();
  for (uint64_t t = 1; t <= 20; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(20));
  for (uint64_t t = 1; t <= 20; ++t) EXPECT_TRUE(sink_.Get(t).status.ok());
  EXPECT_GT(Calls(0), 0u);
  EXPECT_EQ(Calls(1), 0u);
  EXPECT_EQ(r->stats().failovers, 0u);
}

// With submitter_kicks (the module's setting) the router's retry thread is
// the failed-over jobs' submitter: it calls SubmitterIdle() itself, so
// they do not wait for the KDC's next submit (none comes here) or for the
// dispatcher's watchdog.
TEST_F(RouterTest, FailoverWithSubmitterKicksNeedsNoFurtherSubmit) {
  options_.early_flush = true;
  options_.coalesce = absl::Seconds(30);
  options_.submitter_kicks = true;
  auto r = Make();
  clusters_[0].set_down(1, true);
  const absl::Time t0 = absl::Now();
  for (uint64_t t = 1; t <= 4; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("x")).ok());
  r->SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(4));
  for (uint64_t t = 1; t <= 4; ++t)
    ASSERT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  EXPECT_GT(Calls(1), 0u);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
}

// A party of the primary down: every job fails over and completes once;
// a ciphertext made by cluster 2 decrypts on cluster 1 (same key, same id).
TEST_F(RouterTest, FailsOverWhenAPartyOfThePrimaryIsDown) {
  auto r = Make();
  clusters_[0].set_down(1, true);
  const std::string pt = "an EncTicketPart";
  for (uint64_t t = 1; t <= 10; ++t) ASSERT_TRUE(r->Submit(t, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(10));
  for (uint64_t t = 1; t <= 10; ++t)
    ASSERT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  EXPECT_GT(Calls(1), 0u);
  EXPECT_GT(r->stats().failovers, 0u);
  // The primary is avoided now: new jobs go straight to cluster 2.
  const size_t before = Calls(0);
  ASSERT_TRUE(r->Submit(11, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(11));
  EXPECT_EQ(Calls(0), before);
  // Back after Router::kDownFor: cluster 1 decrypts cluster 2's ciphertext.
  clusters_[0].set_down(1, false);
  absl::SleepFor(Router::kDownFor + absl::Milliseconds(50));
  const size_t on2 = Calls(1);
  ASSERT_TRUE(r->Submit(12, Decrypt(sink_.Get(11).output)).ok());
  ASSERT_TRUE(sink_.WaitFor(12));
  Result d = sink_.Get(12);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(Str(d.output), pt);
  EXPECT_EQ(Calls(1), on2);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
  const std::vector<std::string> logs = sink_.logs();
  EXPECT_TRUE(std::any_of(logs.begin(), logs.end(), [](const std::string& l) {
    return absl::StrContains(l, "jobs go to cluster 2");
  }));
}

// A hung party (no answer, no error) fails the primary's batch only at
// its deadline; the jobs still get their try on cluster 2. Where each job
// ran is counted (RunJobs), not timed: a job that went straight to a
// healthy cluster waited for no deadline, one that was sent to the hung
// primary is in its count. The deadline is long against a loaded machine's
// stalls, since a failed job is retried only within kRetryWithin deadlines
// of its submission.
TEST_F(RouterTest, HungPrimaryFailsOverAtItsDeadline) {
  options_.deadline = absl::Seconds(1);
  auto r = Make();
  clusters_[0].set_hang(2, true);
  const absl::Time start = absl::Now();
  for (uint64_t t = 1; t <= 3; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  for (uint64_t t = 1; t <= 3; ++t)
    EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  EXPECT_GE(sink_.At(1) - start, options_.deadline);
  EXPECT_EQ(RunJobs(1), 3);
  // Submits jobs from..to and waits for them: all succeed; returns how
  // many each cluster was sent meanwhile, and the failovers among them.
  struct Went {
    int primary, second;
    uint64_t failovers;
  };
  auto run = [&](uint64_t from, uint64_t to) {
    const int p0 = RunJobs(0), s0 = RunJobs(1);
    const uint64_t f0 = r->stats().failovers;
    for (uint64_t t = from; t <= to; ++t)
      EXPECT_TRUE(r->Submit(t, Encrypt("y")).ok());
    EXPECT_TRUE(sink_.WaitFor(to));
    for (uint64_t t = from; t <= to; ++t)
      EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
    return Went{RunJobs(0) - p0, RunJobs(1) - s0, r->stats().failovers - f0};
  };
  // While it is down, jobs go to cluster 2 at once: none to the primary.
  Went w = run(4, 8);
  EXPECT_EQ(w.primary, 0);
  EXPECT_EQ(w.second, 5);
  EXPECT_EQ(w.failovers, 0u);
  // Its down time over, one job probes it (and fails over at the
  // deadline); the others still go to cluster 2 at once.
  absl::SleepFor(Router::kDownFor);
  w = run(9, 13);
  EXPECT_EQ(w.primary, 1);
  EXPECT_EQ(w.second, 5);
  EXPECT_EQ(w.failovers, 1u);
  // Back: the next probe finds it answering, and it is the primary again.
  clusters_[0].set_hang(2, false);
  absl::SleepFor(2 * Router::kDownFor + absl::Milliseconds(300));
  w = run(14, 14);
  EXPECT_EQ(w.primary, 1);  // the probe went to cluster 1
  EXPECT_EQ(w.second, 0);
  w = run(15, 18);
  EXPECT_EQ(w.primary, 4);
  EXPECT_EQ(w.second, 0);
  EXPECT_EQ(w.failovers, 0u);
}

// Jobs queued behind the hung batch (max_inflight 1) go to cluster 2 as
// soon as that batch fails, not into the hung cluster's next batch: the
// primary is sent job 1 only (counted, not timed), and all six succeed.
TEST_F(RouterTest, JobsQueuedOnAFailedClusterMoveAtOnce) {
  options_.deadline = absl::Seconds(1);  // retried within 2 (kRetryWithin)
  options_.max_inflight = 1;
  auto r = Make();
  clusters_[0].set_hang(0, true);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(r->Submit(1, Encrypt("a")).ok());
  // Jobs 2..6 are queued behind batch 1 once it is in flight (its call
  // recorded, then left unanswered).
  for (int i = 0; i < 5000 && RunJobs(0) == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(RunJobs(0), 1);
  for (uint64_t t = 2; t <= 6; ++t) ASSERT_TRUE(r->Submit(t, Encrypt("b")).ok());
  ASSERT_TRUE(sink_.WaitFor(6));
  for (uint64_t t = 1; t <= 6; ++t) {
    EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
    EXPECT_GE(sink_.At(t) - start, options_.deadline) << t;  // behind batch 1
  }
  EXPECT_EQ(RunJobs(0), 1);  // no second batch on the hung cluster
  EXPECT_EQ(RunJobs(1), 6);
  EXPECT_EQ(r->stats().failovers, 6u);
  clusters_[0].set_hang(0, false);
}

TEST_F(RouterTest, BothClustersDownFailsOnceUnavailable) {
  auto r = Make();
  clusters_[0].set_down(0, true);
  clusters_[1].set_down(2, true);
  ASSERT_TRUE(r->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_EQ(sink_.Get(1).status.code(), absl::StatusCode::kUnavailable);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink_.counts().at(1), 1);
}

// A key missing on the primary (kNotFound) is found on cluster 2 without
// taking the primary out of service.
TEST_F(RouterTest, KeyMissingOnThePrimaryIsTriedOnTheOther) {
  const std::string other(32, 'o');
  clusters_[1].AddKey(other, kKey);
  auto r = Make();
  Job j = Encrypt("x");
  j.key_id = other;
  ASSERT_TRUE(r->Submit(1, std::move(j)).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  const size_t before = Calls(0);
  ASSERT_TRUE(r->Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_GT(Calls(0), before);
}

// A tag that does not verify is final: no second try on another cluster.
TEST_F(RouterTest, IntegrityFailureIsNotRetried) {
  auto r = Make();
  ASSERT_TRUE(r->Submit(1, Encrypt("a ticket")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  SecureBytes bad = sink_.Get(1).output;
  bad[18] ^= 1;
  ASSERT_TRUE(r->Submit(2, Decrypt(bad)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_EQ(sink_.Get(2).status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Calls(1), 0u);
}

// A batch a server refused with BATCH_INTEGRITY_CHECK_FAILED (its check
// found that a server of cluster 1 deviated): the job goes to cluster 2,
// never back to cluster 1; counted as a deviation, not as a wrong password.
TEST_F(RouterTest, DeviationFailsOverButNeverBackToThatCluster) {
  clusters_[0].set_refuse(1, kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED);
  auto r = Make();
  ASSERT_TRUE(r->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(RunJobs(0), 1);
  EXPECT_EQ(RunJobs(1), 1);
  EXPECT_EQ(r->stats().deviations, 1u);
  EXPECT_EQ(r->stats().failovers, 1u);
  bool logged = false;
  for (const auto& line : sink_.logs())
    logged = logged || absl::StrContains(line, "detected a deviation");
  EXPECT_TRUE(logged);
}

// Both clusters detect a deviation: the job was sent to each once, and
// fails SVC_UNAVAILABLE-style (kUnavailable, marked IsDeviation), once.
TEST_F(RouterTest, DeviationOnEveryClusterIsSentToEachOnce) {
  clusters_[0].set_refuse(2, kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED);
  clusters_[1].set_refuse(0, kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED);
  auto r = Make();
  ASSERT_TRUE(r->Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  const absl::Status st = sink_.Get(1).status;
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(IsDeviation(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "BATCH_INTEGRITY_CHECK_FAILED")) << st;
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(RunJobs(0), 1);
  EXPECT_EQ(RunJobs(1), 1);
  EXPECT_EQ(sink_.counts().at(1), 1);
  EXPECT_EQ(r->stats().deviations, 2u);
}

// One cluster: an integrity-failed batch is not resent at all; an open
// breaker (BATCH_BREAKER_OPEN) shows in the gauge until a Run succeeds.
TEST_F(RouterTest, OneClusterNeverResendsAndShowsTheBreaker) {
  Router r(options_, {&clusters_[0]}, &sink_);
  clusters_[0].set_refuse(1, kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED);
  ASSERT_TRUE(r.Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(IsDeviation(sink_.Get(1).status)) << sink_.Get(1).status;
  clusters_[0].set_refuse(1, kmpc::v1::BATCH_BREAKER_OPEN);
  ASSERT_TRUE(r.Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_EQ(sink_.Get(2).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsDeviation(sink_.Get(2).status));
  EXPECT_TRUE(absl::StrContains(sink_.Get(2).status.message(), "BATCH_BREAKER_OPEN"));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(RunJobs(0), 2);  // one Run per job, none resent
  EXPECT_EQ(r.stats().deviations, 1u);
  EXPECT_EQ(r.stats().breakers_open, 1u);
  clusters_[0].set_refuse(1, kmpc::v1::BATCH_ERROR_UNSPECIFIED);
  ASSERT_TRUE(r.Submit(3, Encrypt("z")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
  EXPECT_EQ(r.stats().breakers_open, 0u);
}

}  // namespace
}  // namespace kmpc::kdc
