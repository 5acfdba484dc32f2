// The gate book on its own (gate_book.h), without a dispatcher: what it
// admits, holds or refuses; what a gate's verdict releases (behind a copy
// of the gate: the regate) or fails; the compile budget and the budget
// token; the freshness of an aes*-cts timestamp, one cache for all of the
// module's clusters (a replay to another cluster is caught) and injected
// (two books may share one); the failure bound on wrong passwords.
#include "gate_book.h"

#include <gtest/gtest.h>
#include <syslog.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "contract.h"
#include "prepared.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

const std::string kUser(contract::kKeyIdSize, 'u');
constexpr size_t kTimestampBytes = 16 + 28 + 12;  // conf || PA-ENC-TS-ENC || tag
constexpr uint64_t kPlanGroup = uint64_t{1} << 63;

// The PA-ENC-TS-ENC of time t (its pausec as MIT's kinit sends it): what a
// verified timestamp decrypts to.
SecureBytes PaEncTs(absl::Time t) {
  const std::string s = absl::FormatTime("%Y%m%d%H%M%SZ", t, absl::UTCTimeZone());
  SecureBytes b = {0x30, 0x1A, 0xA0, 0x11, 0x18, 0x0F};
  for (char c : s) b.push_back(static_cast<uint8_t>(c));
  for (uint8_t x : {0xA1, 0x05, 0x02, 0x03, 0x01, 0x86, 0xA0}) b.push_back(x);
  return b;
}

// A job of exchange `id` as the planner marks it, its figures made.
PendingJob Marked(uint64_t id, uint64_t token, Job job) {
  PendingJob q;
  q.token = token;
  q.job = std::move(job);
  q.figures = FiguresOf(q.job);
  q.blocks = q.figures.cost;
  q.exchange_id = id;
  q.group = kPlanGroup | id;
  return q;
}

// The aes*-cts user's timestamp of `bytes` (C || T), its ciphertext its
// own by `serial`: the exchange's gate.
PendingJob Gate(uint64_t id, uint8_t serial, size_t bytes = kTimestampBytes) {
  Job j;
  j.type = pb::JOB_DECRYPT;
  j.cipher = pb::CIPHER_AES256_CTS;
  j.key_id = kUser;
  j.usage = kTimestampUsage;
  j.input.assign(bytes, serial);
  PendingJob g = Marked(id, 1, std::move(j));
  g.gate = true;
  return g;
}

// The aes*-cts user's AS reply of `len` bytes, gated on the gate.
PendingJob Reply(uint64_t id, size_t len) {
  Job j;
  j.type = pb::JOB_ENCRYPT;
  j.cipher = pb::CIPHER_AES256_CTS;
  j.key_id = kUser;
  j.usage = 3;
  j.input.assign(len, 1);
  PendingJob r = Marked(id, 2, std::move(j));
  r.gated = true;
  return r;
}

// A keystream prepared for the exchange's ticket (item 5).
PendingJob Prepared(uint64_t id) {
  PendingJob cause;
  cause.group = kPlanGroup | id;
  PendingJob p = PreparedJob(cause, pb::JOB_ENCRYPT, std::string(contract::kKeyIdSize, 't'),
                             pb::CIPHER_AES256, 2, 400);
  p.exchange_id = id;
  p.item = 5;
  return p;
}

contract::CtsShape ShapeOfReply(size_t len) { return Reply(0, len).figures.program; }

BatcherOptions Options() {
  BatcherOptions o;
  o.cts_unproven_per_minute = 30;
  return o;
}

// Admit holds an unproven reply and what is prepared for its exchange; the
// gate's verdict releases them behind a copy of the gate (the regate),
// proves the reply's shape on the gate's cluster and gives the budget
// token back; the next reply of that shape is sent with its gate.
TEST(GateBookTest, AnUnprovenReplyWaitsForItsGateThenGoesBehindItsCopy) {
  GateBook book(Options());
  const absl::Time now = absl::Now();
  std::vector<PendingJob> given;
  given.push_back(Gate(7, 0x11));
  given.push_back(Reply(7, 250));
  ASSERT_FALSE(book.Proven(0, ShapeOfReply(250)));
  GateBook::Admission a = book.Admit(0, 7, &given, /*token=*/true, now);
  EXPECT_EQ(a.decision, GateBook::Decision::kHold);
  EXPECT_TRUE(a.token);
  ASSERT_EQ(given.size(), 1u);  // the gate alone goes now
  EXPECT_TRUE(given[0].gate);
  EXPECT_EQ(book.counts(0).deferred, 1u);
  std::vector<PendingJob> prepared;
  prepared.push_back(Prepared(7));
  EXPECT_EQ(book.Admit(0, 7, &prepared, false, now).decision, GateBook::Decision::kHold);
  EXPECT_TRUE(prepared.empty());  // held back with the reply

  absl::Status st = absl::OkStatus();
  const absl::Time later = now + absl::Milliseconds(5);
  GateBook::Outcome o = book.Verdict(given[0], &st, PaEncTs(now), later);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(o.fail.empty());
  EXPECT_TRUE(o.log.empty());
  ASSERT_EQ(o.release.size(), 3u);
  EXPECT_TRUE(o.release[0].regate);  // the gate's copy leads
  EXPECT_TRUE(o.release[0].prepared);
  EXPECT_FALSE(o.release[0].gate);
  EXPECT_EQ(o.release[0].job.input, given[0].job.input);
  EXPECT_EQ(o.release[0].group, given[0].group);
  EXPECT_EQ(o.release[1].token, 2u);
  EXPECT_TRUE(o.release[1].gated);
  EXPECT_TRUE(o.release[2].prepared);
  for (const PendingJob& q : o.release) EXPECT_EQ(q.enqueued, later);
  EXPECT_EQ(book.counts(0).deferred_sent, 1u);
  EXPECT_TRUE(book.Proven(0, ShapeOfReply(250)));

  // Proven now: the next exchange's reply of that shape goes with its gate.
  std::vector<PendingJob> next;
  next.push_back(Gate(8, 0x12));
  next.push_back(Reply(8, 250));
  EXPECT_EQ(book.Admit(0, 8, &next, false, now).decision, GateBook::Decision::kSend);
  EXPECT_EQ(next.size(), 2u);
  EXPECT_TRUE(book.Verdict(8, absl::OkStatus(), now).release.empty());
  book.End(7);
  book.End(8);
}

// The budget token of a plan with a gate: taken at Admit, given back only
// when the gate verified (a failed one keeps it spent).
TEST(GateBookTest, ABudgetTokenComesBackWhenItsGateVerifies) {
  BatcherOptions o = Options();
  o.speculate_max = 2;  // one token, refilled at kBudgetRefillPerSec
  GateBook book(o);
  const absl::Time now = absl::Now();  // no time passes: no refill
  auto admit = [&](uint64_t id) {
    std::vector<PendingJob> given;
    given.push_back(Gate(id, static_cast<uint8_t>(id)));
    return book.Admit(0, id, &given, /*token=*/true, now).token;
  };
  EXPECT_TRUE(admit(1));
  EXPECT_FALSE(admit(2));
  book.Verdict(2, absl::DataLossError("ciphertext tag did not verify"), now);
  EXPECT_FALSE(admit(3));  // a failed gate held no token, and gives none back
  book.Verdict(1, absl::OkStatus(), now);
  EXPECT_TRUE(admit(4));
  book.Verdict(1, absl::OkStatus(), now);  // once
  EXPECT_FALSE(admit(5));
}

// A failed gate fails what was held back for it, never sent: the reply
// with the gate's verdict as the servers would withhold it, the prepared
// job lost; its shapes stay unproven. A gate that left its cluster's
// queue (the dispatcher's TakeQueued) fails them too, with a status the
// router never resends.
TEST(GateBookTest, AFailedGateFailsItsHeldBackJobs) {
  GateBook book(Options());
  const absl::Time now = absl::Now();
  std::vector<PendingJob> given;
  given.push_back(Gate(7, 0x21));
  given.push_back(Reply(7, 251));
  book.Admit(0, 7, &given, false, now);
  std::vector<PendingJob> prepared;
  prepared.push_back(Prepared(7));
  book.Admit(0, 7, &prepared, false, now);
  absl::Status st = absl::DataLossError("ciphertext tag did not verify");
  GateBook::Outcome o = book.Verdict(given[0], &st, {}, now);
  EXPECT_TRUE(absl::IsDataLoss(st));
  EXPECT_TRUE(o.release.empty());
  ASSERT_EQ(o.fail.size(), 2u);
  EXPECT_EQ(o.fail[0].token, 2u);
  EXPECT_TRUE(o.fail[1].prepared);
  EXPECT_TRUE(absl::IsUnauthenticated(o.why)) << o.why;
  EXPECT_FALSE(book.Proven(0, ShapeOfReply(251)));
  EXPECT_TRUE(book.Verdict(7, absl::OkStatus(), now).release.empty());  // too late
  EXPECT_FALSE(book.Proven(0, ShapeOfReply(251)));

  std::vector<PendingJob> again;
  again.push_back(Gate(9, 0x22));
  again.push_back(Reply(9, 251));
  book.Admit(0, 9, &again, false, now);
  o = book.Verdict(9, absl::CancelledError("its gate left this cluster's queue"), now);
  ASSERT_EQ(o.fail.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(o.why)) << o.why;
  EXPECT_TRUE(book.Verdict(9, absl::CancelledError("again"), now).fail.empty());
  book.End(9);
  EXPECT_EQ(book.counts(0).deferred, 2u);
  EXPECT_EQ(book.counts(0).deferred_sent, 0u);
  // What they complete with: never a status the router fails over.
  EXPECT_EQ(GateBook::DeferredFailure(absl::DataLossError("x")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(GateBook::DeferredFailure(absl::UnavailableError("x")).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(GateBook::HeldBackFailure("x").code(), absl::StatusCode::kCancelled);
}

// The compile budget: one token per given aes*-cts DECRYPT of an unproven
// shape, all of them or the exchange is refused and nothing of it kept;
// the usual timestamps are proven from the start; 0 is no limit; Clear
// keeps the usual ones proven.
TEST(GateBookTest, TheCompileBudgetCountsUnprovenGatesOnly) {
  BatcherOptions o = Options();
  o.cts_unproven_per_minute = 1;
  GateBook book(o);
  const absl::Time now = absl::Now();
  auto admit = [&](GateBook& b, uint64_t id, size_t bytes) {
    std::vector<PendingJob> given;
    given.push_back(Gate(id, 0x31, bytes));
    given.push_back(Reply(id, 250));
    const GateBook::Admission a = b.Admit(0, id, &given, false, now);
    if (a.decision == GateBook::Decision::kRefuse) {
      EXPECT_TRUE(absl::IsResourceExhausted(a.why)) << a.why;
      EXPECT_TRUE(absl::StrContains(a.why.message(), "over the compile budget")) << a.why;
      EXPECT_EQ(given.size(), 2u);  // nothing held
    }
    return a.decision;
  };
  EXPECT_EQ(admit(book, 1, kTimestampBytes), GateBook::Decision::kHold);  // the usual
  EXPECT_EQ(admit(book, 2, kTimestampBytes + 9), GateBook::Decision::kHold);  // the token
  EXPECT_EQ(admit(book, 3, kTimestampBytes + 9), GateBook::Decision::kRefuse);
  EXPECT_TRUE(book.Verdict(3, absl::OkStatus(), now).release.empty());  // nothing kept
  EXPECT_EQ(admit(book, 4, kTimestampBytes), GateBook::Decision::kHold);
  EXPECT_EQ(book.counts(0).unproven_refused, 1u);
  book.Verdict(2, absl::OkStatus(), now);  // proves the odd length
  EXPECT_EQ(admit(book, 5, kTimestampBytes + 9), GateBook::Decision::kSend);
  BatcherOptions none = Options();
  none.cts_unproven_per_minute = 0;
  GateBook free(none);
  for (uint64_t id = 10; id < 15; ++id)
    EXPECT_NE(admit(free, id, kTimestampBytes + 9), GateBook::Decision::kRefuse);
  book.Clear(0);
  EXPECT_EQ(admit(book, 6, kTimestampBytes + 9), GateBook::Decision::kRefuse);
  EXPECT_TRUE(book.Proven(0, Gate(0, 0).figures.program));
}

// A ticket presented back (an S4U2Proxy evidence ticket under a service's
// key, given with its exchange's gate): a length no exchange proved takes
// a token of the compile budget, and once the gate verified (a ticket: no
// freshness to check) its shape is proven, so that the next evidence
// ticket of that length takes none.
TEST(GateBookTest, AnEvidenceTicketsLengthTakesATokenUntilProven) {
  BatcherOptions o = Options();
  o.cts_unproven_per_minute = 2;
  GateBook book(o);
  const absl::Time now = absl::Now();
  auto exchange = [](uint64_t id, size_t evidence_bytes) {
    std::vector<PendingJob> given;
    given.push_back(Gate(id, 0x41, 900));  // the header ticket
    given[0].job.usage = contract::kTicketUsage;
    given[0].figures = FiguresOf(given[0].job);
    PendingJob evidence = Gate(id, 0x42, evidence_bytes);
    evidence.token = 2;
    evidence.gate = false;
    evidence.job.usage = contract::kTicketUsage;
    evidence.job.key_id = std::string(contract::kKeyIdSize, 's');
    evidence.figures = FiguresOf(evidence.job);
    given.push_back(std::move(evidence));
    return given;
  };
  std::vector<PendingJob> first = exchange(1, 1100);
  ASSERT_EQ(book.Admit(0, 1, &first, false, now).decision, GateBook::Decision::kSend);
  EXPECT_EQ(first.size(), 2u);  // a given DECRYPT is never held back
  absl::Status st = absl::OkStatus();
  const GateBook::Outcome v = book.Verdict(first[0], &st, {}, now);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(v.release.empty() && v.fail.empty() && v.log.empty());
  EXPECT_TRUE(book.Proven(0, first[1].figures.program));
  std::vector<PendingJob> second = exchange(2, 1100);
  EXPECT_EQ(book.Admit(0, 2, &second, false, now).decision, GateBook::Decision::kSend);
  std::vector<PendingJob> longer = exchange(3, 1101);  // a new length, no token left
  EXPECT_EQ(book.Admit(0, 3, &longer, false, now).decision, GateBook::Decision::kRefuse);
  EXPECT_EQ(book.counts(0).unproven_refused, 1u);
}

// One freshness cache for all of the module's clusters: a timestamp
// verified on cluster 1 is refused before any Run when it comes again
// (Admit), and a copy that passed Admit while the first was in flight,
// sent to cluster 2, fails when verified there (as the cluster being
// unavailable, never as a wrong password: no failure counted), releases
// nothing and proves nothing.
TEST(GateBookTest, AReplayToAnotherClusterIsCaught) {
  GateBook book(Options(), /*clusters=*/2);
  const absl::Time now = absl::Now();
  const PendingJob gate = Gate(1, 0x51);
  GateBook::Claim first;
  ASSERT_EQ(book.Admit(gate.job, now, &first).decision, GateBook::Decision::kSend);
  EXPECT_TRUE(first.held());
  // Its copy while the first is in flight: claimed already.
  GateBook::Claim copy;
  GateBook::Admission a = book.Admit(gate.job, now, &copy);
  EXPECT_EQ(a.decision, GateBook::Decision::kRefuse);
  EXPECT_TRUE(IsReplayedGate(a.why)) << a.why;
  EXPECT_FALSE(copy.held());

  std::vector<PendingJob> one;
  one.push_back(gate);
  one.push_back(Reply(1, 250));
  ASSERT_EQ(book.Admit(0, 1, &one, false, now).decision, GateBook::Decision::kHold);
  // The racing copy, on the other cluster (it passed Admit before the
  // first verified; its reply's shape is unproven there too).
  PendingJob raced = gate;
  raced.exchange_id = 2;
  std::vector<PendingJob> two;
  two.push_back(raced);
  two.push_back(Reply(2, 250));
  ASSERT_EQ(book.Admit(1, 2, &two, false, now).decision, GateBook::Decision::kHold);

  absl::Status st = absl::OkStatus();
  EXPECT_EQ(book.Verdict(one[0], &st, PaEncTs(now), now).release.size(), 2u);
  ASSERT_TRUE(st.ok()) << st;
  first = GateBook::Claim();  // its job completed
  a = book.Admit(gate.job, now + absl::Seconds(1));
  EXPECT_EQ(a.decision, GateBook::Decision::kRefuse);
  EXPECT_TRUE(IsReplayedGate(a.why)) << a.why;
  EXPECT_TRUE(absl::StrContains(a.why.message(), "a replayed timestamp")) << a.why;

  st = absl::OkStatus();
  const GateBook::Outcome r = book.Verdict(two[0], &st, PaEncTs(now), now + absl::Seconds(1));
  EXPECT_TRUE(IsReplayedGate(st)) << st;
  EXPECT_TRUE(absl::IsResourceExhausted(st));
  EXPECT_TRUE(r.release.empty());
  ASSERT_EQ(r.fail.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(r.why)) << r.why;
  EXPECT_EQ(r.log_level, LOG_NOTICE);
  EXPECT_TRUE(absl::StrContains(r.log, "a replayed aes*-cts PA-ENC-TIMESTAMP")) << r.log;
  EXPECT_TRUE(book.Proven(0, ShapeOfReply(250)));
  EXPECT_FALSE(book.Proven(1, ShapeOfReply(250)));
  // Not a wrong password: the key's next gate is admitted.
  EXPECT_EQ(book.Admit(Gate(3, 0x52).job, now).decision, GateBook::Decision::kSend);
}

// The cache is injected: two books given one share it (so would two
// modules' books in one process, were they made so); a full cache refuses
// a new gate as the cluster being unavailable, logged.
TEST(GateBookTest, TheFreshnessCacheIsInjected) {
  auto cache = std::make_shared<GateFreshness>(absl::Seconds(300), 1);
  GateBook one(Options(), 1, cache), two(Options(), 1, cache);
  const absl::Time now = absl::Now();
  std::vector<PendingJob> given;
  given.push_back(Gate(1, 0x61));
  one.Admit(0, 1, &given, false, now);
  absl::Status st = absl::OkStatus();
  one.Verdict(given[0], &st, PaEncTs(now), now);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(IsReplayedGate(two.Admit(given[0].job, now).why));
  two.set_skew(absl::Seconds(30));  // the module's clockskew, for both
  EXPECT_EQ(cache->skew(), absl::Seconds(30));
  // Full (one entry): another gate is refused when verified, logged.
  std::vector<PendingJob> other;
  other.push_back(Gate(2, 0x62));
  other.push_back(Reply(2, 250));
  two.Admit(0, 2, &other, false, now);
  st = absl::OkStatus();
  const GateBook::Outcome o = two.Verdict(other[0], &st, PaEncTs(now), now);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_FALSE(IsReplayedGate(st));
  EXPECT_EQ(o.log_level, LOG_WARNING);
  EXPECT_TRUE(absl::StrContains(o.log, "replay cache is full")) << o.log;
  EXPECT_EQ(o.fail.size(), 1u);
}

// A timestamp outside the KDC's clock skew completes (MIT's own check
// then answers KRB_AP_ERR_SKEW), but proves nothing and releases nothing:
// what was held back for it is withheld.
TEST(GateBookTest, ASkewedTimestampReleasesNothing) {
  GateBook book(Options());
  const absl::Time now = absl::Now();
  std::vector<PendingJob> given;
  given.push_back(Gate(1, 0x71));
  given.push_back(Reply(1, 250));
  book.Admit(0, 1, &given, false, now);
  absl::Status st = absl::OkStatus();
  const GateBook::Outcome o = book.Verdict(given[0], &st, PaEncTs(now - absl::Hours(1)), now);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(o.release.empty());
  ASSERT_EQ(o.fail.size(), 1u);
  EXPECT_TRUE(absl::IsUnauthenticated(o.why)) << o.why;
  EXPECT_FALSE(book.Proven(0, ShapeOfReply(250)));
  // Not remembered: the same ciphertext with a fresh time is no replay.
  EXPECT_EQ(book.Admit(given[0].job, now).decision, GateBook::Decision::kSend);
}

// The failure bound: gates in flight hold slots, a tag that did not hold
// counts in its key's window, and past the limit the key's gates are
// refused before any Run (a ctr-mpc timestamp too: any cipher).
TEST(GateBookTest, WrongPasswordsPastTheBoundAreRefused) {
  BatcherOptions o = Options();
  o.gate_failures = 2;
  GateBook book(o);
  const absl::Time now = absl::Now();
  PendingJob gate = Gate(0, 0x81);
  gate.gate = false;  // outside an exchange: its verdict counts all the same
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(book.Admit(gate.job, now).decision, GateBook::Decision::kSend) << i;
    absl::Status st = absl::DataLossError("ciphertext tag did not verify");
    const GateBook::Outcome v = book.Verdict(gate, &st, {}, now);
    EXPECT_TRUE(v.release.empty() && v.fail.empty());
  }
  const GateBook::Admission a = book.Admit(gate.job, now);
  EXPECT_EQ(a.decision, GateBook::Decision::kRefuse);
  EXPECT_TRUE(absl::IsResourceExhausted(a.why)) << a.why;
  EXPECT_FALSE(IsReplayedGate(a.why));
  Job ctr = gate.job;
  ctr.cipher = pb::CIPHER_AES256;
  EXPECT_EQ(book.Admit(ctr, now).decision, GateBook::Decision::kRefuse);
  Job other = gate.job;
  other.key_id = std::string(contract::kKeyIdSize, 'v');
  EXPECT_EQ(book.Admit(other, now).decision, GateBook::Decision::kSend);
  // Not a gate: never refused.
  EXPECT_EQ(book.Admit(Reply(0, 250).job, now).decision, GateBook::Decision::kSend);
}

TEST(GateBookTest, ARegateIsACopyOfTheGateSentAgain) {
  const PendingJob gate = Gate(4, 0x91);
  const PendingJob r = GateBook::Regate(gate);
  EXPECT_EQ(r.job.input, gate.job.input);
  EXPECT_EQ(r.figures.program, gate.figures.program);
  EXPECT_EQ(r.blocks, gate.blocks);
  EXPECT_EQ(r.group, gate.group);
  EXPECT_EQ(r.exchange_id, 4u);
  EXPECT_TRUE(r.prepared && r.regate);
  EXPECT_FALSE(r.gate);
  EXPECT_EQ(r.token, 0u);
}

}  // namespace
}  // namespace kmpc::kdc
