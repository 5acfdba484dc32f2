// The aes*-cts gate (gate_book.h; planner.h, "Proven shapes";
// docs/reviews/2026-11-26-splice-and-cts-refresh.md, "Unauthenticated
// program churn") through the batcher and the router (the gate book on
// its own: gate_book_test.cc), and ProvenShapes: a gated aes*-cts reply
// whose shape no verified gate proved is not in its gate's Run; it goes in
// a Run of its own after the gate verified, never after a failed one; a
// proven shape goes in the gate's Run (one Run per exchange). The servers are a scripted transport:
// a DECRYPT's tag holds or not as the test says, a job gated on a failed
// DECRYPT is JOB_WITHHELD, every revealed value is zeros; what the test
// reads is what the servers were sent.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batcher_thread.h"
#include "dispatcher.h"
#include "batcher_fixture.h"
#include "contract.h"
#include "gate_book.h"
#include "planner.h"
#include "router.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

// What a server saw of one Run job.
struct Sent {
  pb::JobType type;
  uint32_t usage;
  uint64_t length, splice_length;
  bool gated;
  bool pad_after;  // a PAD linked to a ticket ENCRYPT of the request
};

// conf || PA-ENC-TS-ENC of now (zeros after the time), len bytes.
std::string FreshTimestamp(size_t len) {
  std::string v(len, '\0');
  if (len < 37) return v;
  const std::string t =
      absl::FormatTime("%Y%m%d%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  const char header[] = {0x30, static_cast<char>(len - 18), static_cast<char>(0xA0), 0x11, 0x18,
                         0x0F};
  v.replace(16, sizeof header, header, sizeof header);
  v.replace(22, t.size(), t);
  return v;
}

class CtsScriptTransport : public Transport {
 public:
  std::atomic<bool> password_ok{true};
  // Every Run call fails as a cluster failure (UNAVAILABLE) after it was
  // recorded.
  std::atomic<bool> failing{false};

  void Run(int party, const pb::RunRequest& req, pb::RunResponse* resp, absl::Time,
           Done done) override {
    const int n = req.jobs_size();
    std::vector<pb::JobStatus> st(n, pb::JOB_OK);
    std::map<uint64_t, int> at;  // job id -> position
    for (int k = 0; k < n; ++k) {
      at[req.jobs(k).job_id()] = k;
      if (req.jobs(k).type() == pb::JOB_DECRYPT && !password_ok)
        st[k] = pb::JOB_INTEGRITY_FAILED;
    }
    std::vector<Sent> sent;
    std::string shares, ctr0s;
    for (int k = 0; k < n; ++k) {
      const pb::Job& j = req.jobs(k);
      if (j.has_release_if_ok() && st[at.at(j.release_if_ok())] != pb::JOB_OK)
        st[k] = pb::JOB_WITHHELD;
      sent.push_back({j.type(), j.usage(), j.length(), j.splice_length(), j.has_release_if_ok(),
                      j.has_pad_after()});
      pb::JobResult* r = resp->add_results();
      r->set_job_id(j.job_id());
      r->set_status(st[k]);
      const contract::JobShape shape = contract::ShapeOf(j);
      if (contract::ResultHasCtr0(shape, st[k]))
        ctr0s.append(contract::kCtr0Size, static_cast<char>(0x10 + k));
      const size_t len = contract::RevealedShareBytes(shape, st[k]);
      if (j.type() == pb::JOB_DECRYPT && len > 0) {
        // A fresh PA-ENC-TS-ENC (freshness.h), shared as (v, 0, 0).
        const std::string v = FreshTimestamp(len);
        shares.append(party == 0 ? v : std::string(len, '\0'));
        shares.append(party == 2 ? v : std::string(len, '\0'));
      } else {
        shares.append(2 * len, '\0');
      }
    }
    resp->set_wire_version(contract::kWireVersion);
    resp->set_party(party);
    resp->set_batch_id(req.batch_id());
    resp->set_ctr0s(ctr0s);
    resp->set_shares(shares);
    if (party == 0) {
      std::lock_guard<std::mutex> l(mu_);
      runs_.push_back(std::move(sent));
    }
    if (failing) {
      done(CallStatus(absl::UnavailableError("scripted cluster failure")));
      return;
    }
    done(CallStatus());
  }
  void Finalize(int, const pb::FinalizeRequest&, pb::FinalizeResponse*, absl::Time,
                Done done) override {
    done(CallStatus(absl::UnimplementedError("no FINALIZE under aes*-cts")));
  }
  std::string PartyName(int party) const override { return absl::StrCat("party ", party); }

  std::vector<std::vector<Sent>> runs() {
    std::lock_guard<std::mutex> l(mu_);
    return runs_;
  }
  // Every ENCRYPT any Run carried.
  std::vector<Sent> encrypts() {
    std::vector<Sent> out;
    for (const auto& r : runs())
      for (const Sent& s : r)
        if (s.type == pb::JOB_ENCRYPT) out.push_back(s);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<Sent>> runs_;
};

const std::string kUser(contract::kKeyIdSize, 'u');

PlanItem CtsItem(Role role, uint32_t usage, size_t length) {
  RoleInfo info;
  EXPECT_TRUE(RoleOf(role, &info));
  PlanItem p;
  p.role = role;
  p.type = info.type;
  p.usage = usage;
  p.cipher = pb::CIPHER_AES256_CTS;
  p.key_id = kUser;
  p.length = length;
  p.flags = kItemExact;
  p.given = true;
  return p;
}

Job JobOf(const PlanItem& p, size_t bytes) {
  Job j;
  j.type = p.type;
  j.cipher = p.cipher;
  j.key_id = p.key_id;
  j.usage = p.usage;
  j.cts_key = p.cts_key;
  // Each gate's ciphertext its own (freshness.h: one seen twice is a
  // replay).
  static std::atomic<uint64_t> serial{0};
  j.input.assign(bytes, 0x42);
  const uint64_t n = ++serial;
  for (size_t i = 0; i < 8 && i < bytes; ++i) j.input[i] = static_cast<uint8_t>(n >> (8 * i));
  if (p.cts_key != pb::CTS_KEY_DEALT) j.cf2_half.assign(contract::CtsKeyBytes(p.cts_key), 0x5a);
  return j;
}

constexpr size_t kTimestampBytes = 16 + 28 + 12;  // conf || PA-ENC-TS-ENC || tag

// An AS plan of the aes*-cts user: the timestamp (the gate), then the
// reply of n bytes gated on it.
Plan PlainAsPlan(size_t n) {
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  plan.items.push_back(CtsItem(Role::kTimestamp, 1, kTimestampBytes));
  PlanItem reply = CtsItem(Role::kReply, 3, n);
  reply.flags |= kItemGated;
  reply.gate = 0;
  plan.items.push_back(reply);
  return plan;
}

class CtsGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BatcherOptions o;  // self-clocked
    o.deadline = absl::Seconds(10);
    b_ = std::make_unique<Batcher>(o, &servers_, &sink_);
  }

  struct Exchange {
    uint64_t ts = 0, reply = 0;
    ExchangeRecord record;
  };
  // An AS exchange of the aes*-cts user as the KDC states it (krb5 patch
  // 0021): the timestamp (the gate), the request's checksum spliced into
  // the reply (n bytes) at `off`; the request m bytes. Waits for both
  // results; ends the exchange.
  Exchange SplicedAs(size_t n, size_t m, size_t off = 100) {
    Plan plan;
    plan.kind = ExchangeKind::kAs;
    plan.items.push_back(CtsItem(Role::kTimestamp, 1, kTimestampBytes));
    PlanItem cksum = CtsItem(Role::kReqChecksum, 56, m);
    PlanItem reply = CtsItem(Role::kReply, 3, n);
    reply.splice_from = 1;
    reply.splice_offset = off;
    for (PlanItem* p : {&cksum, &reply}) {
      p->flags |= kItemGated;
      p->gate = 0;
    }
    plan.items.push_back(cksum);
    plan.items.push_back(reply);
    Job r = JobOf(reply, n);
    r.splice.assign(m, 0x30);  // D, then its HMAC inner padding (module.cc)
    const std::string pad = contract::SplicePadding(m);
    r.splice.insert(r.splice.end(), pad.begin(), pad.end());
    r.splice_offset = static_cast<uint32_t>(off);
    return Run(std::move(plan), {{0, JobOf(plan.items[0], kTimestampBytes)}, {2, std::move(r)}});
  }
  // The same without PA-REQ-ENC-PA-REP: timestamp and reply only.
  Exchange PlainAs(size_t n) {
    Plan plan = PlainAsPlan(n);
    return Run(std::move(plan),
               {{0, JobOf(plan.items[0], kTimestampBytes)}, {1, JobOf(plan.items[1], n)}});
  }
  Exchange Run(Plan plan, std::vector<std::pair<int, Job>> jobs) {
    const uint64_t id = next_id_++;
    std::vector<ItemJob> given;
    Exchange x;
    for (auto& [item, job] : jobs) {
      const uint64_t t = next_token_++;
      (item == 0 ? x.ts : x.reply) = t;
      given.push_back({item, t, std::move(job)});
    }
    const size_t n0 = sink_.counts().size();
    EXPECT_TRUE(b_->dispatcher().Begin(id, std::move(plan), std::move(given)).ok());
    b_->dispatcher().SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + 2));
    std::optional<ExchangeRecord> r = b_->dispatcher().End(id);
    EXPECT_TRUE(r.has_value());
    if (r) x.record = *r;
    return x;
  }

  CtsScriptTransport servers_;
  CollectingSink sink_;
  std::unique_ptr<Batcher> b_;
  uint64_t next_id_ = 1, next_token_ = 1;
};

// The attack: AS-REQs of ever new lengths with a wrong password. No reply
// (no ENCRYPT, no program of a reply's shape) reaches the servers; each
// exchange is its timestamp's Run alone, and the reply completes with the
// gate's verdict as a withheld one would.
TEST_F(CtsGateTest, AFailedGateNeverSendsAnUnprovenReply) {
  servers_.password_ok = false;
  for (size_t m : {180u, 181u, 233u, 600u}) {
    const Exchange x = SplicedAs(300, m);
    EXPECT_TRUE(absl::IsDataLoss(sink_.Get(x.ts).status)) << sink_.Get(x.ts).status;
    EXPECT_TRUE(absl::IsUnauthenticated(sink_.Get(x.reply).status)) << sink_.Get(x.reply).status;
    EXPECT_TRUE(sink_.Get(x.reply).output.empty());
    EXPECT_EQ(x.record.runs, 1u);
  }
  const Exchange plain = PlainAs(250);
  EXPECT_TRUE(absl::IsUnauthenticated(sink_.Get(plain.reply).status));
  EXPECT_TRUE(servers_.encrypts().empty());
  ASSERT_EQ(servers_.runs().size(), 5u);
  for (const auto& r : servers_.runs()) {
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].type, pb::JOB_DECRYPT);
  }
  const BatcherStats s = b_->stats();
  EXPECT_EQ(s.cts_deferred, 5u);
  EXPECT_EQ(s.cts_deferred_sent, 0u);
  // Every callback exactly once.
  for (const auto& [token, count] : sink_.counts()) EXPECT_EQ(count, 1) << token;
}

// A right password of a new shape: the gate's Run, then the reply in a
// Run of its own, gated again on a copy of the gate (the servers compute
// a user key's reply only on its timestamp in the same Run, kmpc.proto
// KeyKind); the next login of that shape is one Run, the reply gated in
// it; another request length is new again.
TEST_F(CtsGateTest, APassedGateSendsTheReplyAfterItThenItsShapeIsOneRun) {
  const Exchange first = SplicedAs(300, 180);
  EXPECT_TRUE(sink_.Get(first.ts).status.ok()) << sink_.Get(first.ts).status;
  ASSERT_TRUE(sink_.Get(first.reply).status.ok()) << sink_.Get(first.reply).status;
  EXPECT_EQ(sink_.Get(first.reply).output.size(),
            contract::kCtsConfounder + 300 + contract::kCtsTag);
  EXPECT_EQ(first.record.runs, 2u);
  auto runs = servers_.runs();
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(runs[0].size(), 1u);
  EXPECT_EQ(runs[0][0].type, pb::JOB_DECRYPT);
  ASSERT_EQ(runs[1].size(), 2u);
  EXPECT_EQ(runs[1][0].type, pb::JOB_DECRYPT);  // the gate again
  EXPECT_EQ(runs[1][0].usage, 1u);
  EXPECT_EQ(runs[1][0].length, runs[0][0].length);
  EXPECT_EQ(runs[1][1].type, pb::JOB_ENCRYPT);
  EXPECT_EQ(runs[1][1].length, 300u);
  EXPECT_EQ(runs[1][1].splice_length, 192u);  // 180 bytes and the padding
  EXPECT_TRUE(runs[1][1].gated);

  const Exchange again = SplicedAs(300, 180);
  ASSERT_TRUE(sink_.Get(again.reply).status.ok()) << sink_.Get(again.reply).status;
  EXPECT_EQ(again.record.runs, 1u);
  runs = servers_.runs();
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_EQ(runs[2].size(), 2u);
  EXPECT_EQ(runs[2][0].type, pb::JOB_DECRYPT);
  EXPECT_EQ(runs[2][1].type, pb::JOB_ENCRYPT);
  EXPECT_TRUE(runs[2][1].gated);

  // Another request length of the same SHA-1 block count is the same
  // shape (the request is dealt padded), and so is another reply length
  // of the same class (conf || P of 312 to 320 bytes) and another offset
  // of the same window; another block count, another offset window,
  // another reply class: each a shape of its own.
  EXPECT_EQ(SplicedAs(300, 181).record.runs, 1u);
  EXPECT_EQ(SplicedAs(300, 183).record.runs, 1u);
  EXPECT_EQ(SplicedAs(304, 180).record.runs, 1u);
  EXPECT_EQ(SplicedAs(300, 180, 99).record.runs, 1u);
  EXPECT_EQ(SplicedAs(300, 250).record.runs, 2u);
  EXPECT_EQ(SplicedAs(300, 180, 101).record.runs, 2u);
  EXPECT_EQ(SplicedAs(305, 180).record.runs, 2u);
  EXPECT_EQ(SplicedAs(300, 250).record.runs, 1u);
  const BatcherStats s = b_->stats();
  EXPECT_EQ(s.cts_deferred, 4u);
  EXPECT_EQ(s.cts_deferred_sent, 4u);
}

// A renewal's header ticket under a service's aes*-cts key (usage 2, the
// exchange's gate; cts_items.h): a length no exchange proved takes the
// compile budget's token, and its verified tag proves the shape without a
// timestamp's freshness check (it carries none), so the next ticket of
// that length takes none; a ticket of another length, past the budget, is
// refused before any Run.
TEST(CtsGateTicketTest, APresentedTicketsVerifiedTagProvesItsLength) {
  CtsScriptTransport servers;
  CollectingSink sink;
  BatcherOptions o;
  o.deadline = absl::Seconds(10);
  o.cts_unproven_per_minute = 1;
  Batcher b(o, &servers, &sink);
  uint64_t token = 1;
  auto renew = [&](uint64_t id, size_t bytes) {
    Plan plan;
    plan.kind = ExchangeKind::kRenew;
    plan.items.push_back(CtsItem(Role::kHeaderTicket, 2, bytes));
    std::vector<ItemJob> given;
    given.push_back({0, token++, JobOf(plan.items[0], bytes)});
    const size_t n0 = sink.counts().size();
    absl::Status st = b.dispatcher().Begin(id, std::move(plan), std::move(given));
    if (st.ok()) {
      b.dispatcher().SubmitterIdle();
      EXPECT_TRUE(sink.WaitFor(n0 + 1));
      EXPECT_TRUE(sink.Get(token - 1).status.ok()) << sink.Get(token - 1).status;
      EXPECT_EQ(sink.Get(token - 1).output.size(), bytes - contract::kCtsConfounder -
                                                       contract::kCtsTag);
      b.dispatcher().End(id);
    }
    return st;
  };
  EXPECT_TRUE(renew(1, 900).ok());  // the one token
  EXPECT_TRUE(renew(2, 900).ok());  // proven: no token
  absl::Status other = renew(3, 901);
  EXPECT_TRUE(absl::IsResourceExhausted(other)) << other;
  EXPECT_EQ(servers.runs().size(), 2u);
  for (const auto& r : servers.runs()) {
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].type, pb::JOB_DECRYPT);
    EXPECT_EQ(r[0].usage, 2u);
  }
}

// An S4U2Proxy evidence ticket under a service's aes*-cts key whose
// header ticket the KDC decrypted itself (a plan of the SECOND_TICKET
// alone, kdc_mpc_back.c): its verified tag proves its own length, so the
// next evidence ticket of that length takes no compile token; another
// length, past the budget, is refused before any Run.
TEST(CtsGateTicketTest, AnEvidenceTicketsVerifiedTagProvesItsLength) {
  CtsScriptTransport servers;
  CollectingSink sink;
  BatcherOptions o;
  o.deadline = absl::Seconds(10);
  o.cts_unproven_per_minute = 1;
  Batcher b(o, &servers, &sink);
  uint64_t token = 1;
  auto proxy = [&](uint64_t id, size_t bytes) {
    Plan plan;
    plan.kind = ExchangeKind::kS4u2Proxy;
    plan.items.push_back(CtsItem(Role::kSecondTicket, 2, bytes));
    std::vector<ItemJob> given;
    given.push_back({0, token++, JobOf(plan.items[0], bytes)});
    const size_t n0 = sink.counts().size();
    absl::Status st = b.dispatcher().Begin(id, std::move(plan), std::move(given));
    if (st.ok()) {
      b.dispatcher().SubmitterIdle();
      EXPECT_TRUE(sink.WaitFor(n0 + 1));
      EXPECT_TRUE(sink.Get(token - 1).status.ok()) << sink.Get(token - 1).status;
      b.dispatcher().End(id);
    }
    return st;
  };
  EXPECT_TRUE(proxy(1, 1000).ok());  // the one token
  const absl::Status again = proxy(2, 1000);
  EXPECT_TRUE(again.ok()) << again;  // proven: no token
  const absl::Status other = proxy(3, 1001);
  EXPECT_TRUE(absl::IsResourceExhausted(other)) << other;
  EXPECT_EQ(servers.runs().size(), 2u);
}

// S4U2Proxy with an evidence ticket under a service's aes*-cts key: the
// plan's verification pads linked to the evidence ticket's DECRYPT are not
// drawn (a CBC-CTS ciphertext has no ctr0; its first block is the
// client's choice): the Run carries the two DECRYPTs only.
TEST(CtsGateTicketTest, NoVerificationPadIsLinkedToACtsEvidenceTicket) {
  CtsScriptTransport servers;
  CollectingSink sink;
  BatcherOptions o;
  o.deadline = absl::Seconds(10);
  Batcher b(o, &servers, &sink);
  Plan plan;
  plan.kind = ExchangeKind::kS4u2Proxy;
  plan.items.push_back(CtsItem(Role::kHeaderTicket, 2, 900));
  plan.items.push_back(CtsItem(Role::kSecondTicket, 2, 1000));
  PlanItem verify;
  verify.role = Role::kVerifyKdc;
  RoleInfo info;
  ASSERT_TRUE(RoleOf(verify.role, &info));
  verify.type = info.type;
  verify.usage = info.usage;
  verify.cipher = pb::CIPHER_AES256;
  verify.key_id = std::string(contract::kKeyIdSize, 't');
  verify.length = 1000;
  verify.flags = kItemGated;
  verify.gate = 0;
  verify.ticket = 1;
  plan.items.push_back(verify);
  ASSERT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
  std::vector<ItemJob> given;
  given.push_back({0, 1, JobOf(plan.items[0], 900)});
  given.push_back({1, 2, JobOf(plan.items[1], 1000)});
  ASSERT_TRUE(b.dispatcher().Begin(1, std::move(plan), std::move(given)).ok());
  b.dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink.WaitFor(2));
  EXPECT_TRUE(sink.Get(2).status.ok()) << sink.Get(2).status;
  b.dispatcher().End(1);
  const auto runs = servers.runs();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].size(), 2u);
  for (const Sent& s : runs[0]) EXPECT_EQ(s.type, pb::JOB_DECRYPT);
}

// A proven shape with a wrong password: one Run, and the servers withhold
// the reply (its gate is in the Run).
TEST_F(CtsGateTest, AProvenShapeWithAWrongPasswordIsWithheldByTheServers) {
  EXPECT_EQ(SplicedAs(300, 180).record.runs, 2u);
  servers_.password_ok = false;
  const Exchange x = SplicedAs(300, 180);
  EXPECT_EQ(x.record.runs, 1u);
  EXPECT_TRUE(absl::IsUnauthenticated(sink_.Get(x.reply).status)) << sink_.Get(x.reply).status;
  const auto runs = servers_.runs();
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_EQ(runs[2].size(), 2u);
  EXPECT_TRUE(runs[2][1].gated);
}

// A failed login proves nothing: the next right one of that shape is still
// two Runs. A plain (unspliced) reply is deferred likewise.
TEST_F(CtsGateTest, AFailedGateProvesNothing) {
  servers_.password_ok = false;
  SplicedAs(300, 180);
  PlainAs(250);
  servers_.password_ok = true;
  EXPECT_EQ(SplicedAs(300, 180).record.runs, 2u);
  EXPECT_EQ(PlainAs(250).record.runs, 2u);
  EXPECT_EQ(PlainAs(250).record.runs, 1u);
}

// A failed gate does not un-prove its shape (issue 48 finding 2: every
// wrong password pushed the next honest login of its shape to two Runs):
// wrong passwords of a proven shape go in the gate's Run (the servers
// withhold the reply), and the right one after them is still one Run.
// What bounds the servers' compiles for wrong passwords is that the
// module proves fewer shapes than a server keeps (ProvenShapes) and that
// a proven program evicted on the servers was evicted by a compile
// someone else paid for (docs/reviews/2026-11-26-splice-and-cts-refresh.md,
// review3 finding C).
TEST_F(CtsGateTest, AFailedGateKeepsItsShapesProven) {
  EXPECT_EQ(SplicedAs(300, 180).record.runs, 2u);
  servers_.password_ok = false;
  for (int i = 0; i < 3; ++i) {
    const Exchange x = SplicedAs(300, 180);
    EXPECT_EQ(x.record.runs, 1u);
    EXPECT_TRUE(absl::IsUnauthenticated(sink_.Get(x.reply).status)) << sink_.Get(x.reply).status;
  }
  servers_.password_ok = true;
  EXPECT_EQ(SplicedAs(300, 180).record.runs, 1u);
}

// The compile budget (issue 48 items 4, 5): timestamps of lengths no login
// proved make the servers compile a DECRYPT program each; past
// cts_unproven_per_minute such exchanges are refused at Begin
// (kResourceExhausted: SVC_UNAVAILABLE) before anything is queued, and
// counted. The usual timestamp (44 bytes of conf || P) and a length a
// verified login proved still go. Before the budget every one of them
// was sent (the servers compiled a program per length).
TEST_F(CtsGateTest, UnprovenGateLengthsArePastABudgetRefused) {
  BatcherOptions o;
  o.deadline = absl::Seconds(10);
  o.cts_unproven_per_minute = 3;
  b_ = std::make_unique<Batcher>(o, &servers_, &sink_);
  auto begin = [&](size_t ts_bytes) {
    Plan plan = PlainAsPlan(250);
    plan.items[0].length = ts_bytes;
    std::vector<ItemJob> given;
    given.push_back({0, next_token_++, JobOf(plan.items[0], ts_bytes)});
    given.push_back({1, next_token_++, JobOf(plan.items[1], 250)});
    const uint64_t id = next_id_++;
    const size_t n0 = sink_.counts().size();
    absl::Status st = b_->dispatcher().Begin(id, std::move(plan), std::move(given));
    if (st.ok()) {
      b_->dispatcher().SubmitterIdle();
      EXPECT_TRUE(sink_.WaitFor(n0 + 2));
    }
    b_->dispatcher().End(id);
    return st;
  };
  servers_.password_ok = false;  // unauthenticated: wrong passwords
  for (size_t len : {80, 81, 82}) EXPECT_TRUE(begin(len).ok()) << len;
  const size_t runs = servers_.runs().size();
  const absl::Status over = begin(83);
  EXPECT_TRUE(absl::IsResourceExhausted(over)) << over;
  EXPECT_TRUE(absl::IsResourceExhausted(begin(80)));  // a wrong password proved nothing
  EXPECT_EQ(servers_.runs().size(), runs);           // nothing of them sent
  EXPECT_EQ(b_->stats().cts_unproven_refused, 2u);
  EXPECT_TRUE(begin(kTimestampBytes).ok());          // the usual timestamp
  servers_.password_ok = true;
  o.cts_unproven_per_minute = 1;
  b_ = std::make_unique<Batcher>(o, &servers_, &sink_);
  EXPECT_TRUE(begin(90).ok());   // the budget's one token; the login proves 90
  EXPECT_TRUE(begin(90).ok());   // proven: no token needed
  EXPECT_FALSE(begin(91).ok());  // a new length: over the budget
}

// Bounded depth (issue 48 item 4): a spliced request longer than any real
// client sends is refused at Begin, SVC_UNAVAILABLE's status with the
// reason (kOutOfRange), before any job of it is queued: it never shares a batch with
// other logins. The longest allowed request still logs in.
TEST_F(CtsGateTest, AnOversizedRequestIsRefusedBeforeAnyBatch) {
  const size_t longest = contract::kMaxCtsSpliceBytes - 9;
  ASSERT_EQ(contract::SpliceDealtBytes(longest), contract::kMaxCtsSpliceBytes);
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  plan.items.push_back(CtsItem(Role::kTimestamp, 1, kTimestampBytes));
  PlanItem cksum = CtsItem(Role::kReqChecksum, 56, longest + 1);
  PlanItem reply = CtsItem(Role::kReply, 3, 300);
  reply.splice_from = 1;
  reply.splice_offset = 100;
  for (PlanItem* p : {&cksum, &reply}) {
    p->flags |= kItemGated;
    p->gate = 0;
  }
  plan.items.push_back(cksum);
  plan.items.push_back(reply);
  Job r = JobOf(reply, 300);
  r.splice.assign(longest + 1, 0x30);
  const std::string pad = contract::SplicePadding(longest + 1);
  r.splice.insert(r.splice.end(), pad.begin(), pad.end());
  r.splice_offset = 100;
  std::vector<ItemJob> given;
  given.push_back({0, next_token_++, JobOf(plan.items[0], kTimestampBytes)});
  given.push_back({2, next_token_++, std::move(r)});
  const absl::Status st = b_->dispatcher().Begin(next_id_++, std::move(plan), std::move(given));
  EXPECT_TRUE(absl::IsOutOfRange(st)) << st;
  EXPECT_NE(st.message().find("length cap"), absl::string_view::npos) << st;
  b_->dispatcher().SubmitterIdle();
  EXPECT_TRUE(servers_.runs().empty());
  EXPECT_EQ(SplicedAs(300, longest).record.runs, 2u);
  ASSERT_EQ(servers_.runs().size(), 2u);
  // The held-back Run: the gate again, then the reply.
  ASSERT_EQ(servers_.runs()[1].size(), 2u);
  EXPECT_EQ(servers_.runs()[1][0].type, pb::JOB_DECRYPT);
  EXPECT_EQ(servers_.runs()[1][1].splice_length, contract::kMaxCtsSpliceBytes);
}

TEST(ProvenShapesTest, FewerThanAServerKeepsCompiledAndForgettable) {
  ProvenShapes p;
  const auto s = contract::MakeCtsShape(pb::JOB_ENCRYPT, 14, 316, 0, 3, 250, 100);
  p.Prove(s);
  EXPECT_TRUE(p.Has(s));
  p.Forget(s);
  EXPECT_FALSE(p.Has(s));
  EXPECT_EQ(p.size(), 0u);
  p.Forget(s);  // forgetting an unknown shape is a no-op
  EXPECT_EQ(p.size(), 0u);
}

// FAST (kdcmpc plan of kdc_mpc_plan_fast()): the KDC's challenge and the
// reply, both gated ENCRYPTs under the FAST key, wait for the client's
// challenge alike.
TEST_F(CtsGateTest, FastItemsOfUnprovenShapesWaitForTheirGate) {
  auto fast = [&] {
    Plan plan;
    plan.kind = ExchangeKind::kAsFast;
    PlanItem gate = CtsItem(Role::kChallenge, 54, kTimestampBytes);
    gate.cts_key = pb::CTS_KEY_CF2_AES256;
    plan.items.push_back(gate);
    for (auto [role, usage, n] : {std::tuple{Role::kKdcChallenge, 55u, size_t{30}},
                                  std::tuple{Role::kReply, 3u, size_t{280}}}) {
      PlanItem it = CtsItem(role, usage, n);
      it.flags |= kItemGated;
      it.gate = 0;
      it.cts_key = pb::CTS_KEY_CF2_AES256;
      plan.items.push_back(it);
    }
    std::vector<ItemJob> given;
    for (int i = 0; i < 3; ++i)
      given.push_back({i, next_token_++,
                       JobOf(plan.items[i], i == 0 ? kTimestampBytes : plan.items[i].length)});
    const uint64_t id = next_id_++;
    const size_t n0 = sink_.counts().size();
    EXPECT_TRUE(b_->dispatcher().Begin(id, plan, std::move(given)).ok());
    b_->dispatcher().SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + 3));
    return b_->dispatcher().End(id)->runs;
  };
  servers_.password_ok = false;
  EXPECT_EQ(fast(), 1u);
  EXPECT_TRUE(servers_.encrypts().empty());
  servers_.password_ok = true;
  EXPECT_EQ(fast(), 2u);
  const auto runs = servers_.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].size(), 1u);
  ASSERT_EQ(runs[2].size(), 3u);  // the gate again, both held-back jobs in one Run
  EXPECT_EQ(runs[2][0].type, pb::JOB_DECRYPT);
  EXPECT_EQ(runs[2][0].usage, 54u);
  EXPECT_TRUE(runs[2][1].gated && runs[2][2].gated);
  EXPECT_EQ(fast(), 1u);
}

// What the plan's later items need (the ticket's keystream under the
// krbtgt, a PAC signature's pad linked to it) goes with a held-back reply:
// nothing of it for a wrong password, and for a right one in the reply's
// Run, gated again on the gate's copy, the pad still linked to the
// ticket's keystream in that request, held from that Run (the KDC submits
// the later items after it).
TEST_F(CtsGateTest, PreparedJobsGoWithAHeldBackReply) {
  const std::string krbtgt(contract::kKeyIdSize, 't');
  auto as = [&](size_t n) {
    Plan plan = PlainAsPlan(n);
    PlanItem ticket;
    ticket.role = Role::kTicket;
    ticket.type = pb::JOB_ENCRYPT;
    ticket.usage = 2;
    ticket.cipher = pb::CIPHER_AES256;
    ticket.key_id = krbtgt;
    ticket.length = 700;
    ticket.flags = kItemGated;
    ticket.gate = 0;
    plan.items.push_back(ticket);
    PlanItem sig = ticket;
    sig.role = Role::kSigServer;
    sig.type = pb::JOB_CHECKSUM;
    sig.usage = 17;
    sig.length = 400;
    sig.ticket = 2;
    plan.items.push_back(sig);
    EXPECT_TRUE(Planner::Check(plan).ok()) << Planner::Check(plan);
    return Run(std::move(plan),
               {{0, JobOf(plan.items[0], kTimestampBytes)}, {1, JobOf(plan.items[1], n)}});
  };
  servers_.password_ok = false;
  as(250);
  auto runs = servers_.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].size(), 1u);  // the timestamp alone: nothing prepared
  EXPECT_EQ(b_->stats().keystreams_held, 0u);

  servers_.password_ok = true;
  const Exchange x = as(250);
  ASSERT_TRUE(sink_.Get(x.reply).status.ok()) << sink_.Get(x.reply).status;
  runs = servers_.runs();
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_EQ(runs[1].size(), 1u);
  // The gate again, the reply, the ticket's keystream, the pad.
  ASSERT_EQ(runs[2].size(), 4u);
  EXPECT_EQ(runs[2][0].type, pb::JOB_DECRYPT);
  EXPECT_EQ(runs[2][1].type, pb::JOB_ENCRYPT);
  EXPECT_EQ(runs[2][1].usage, 3u);
  EXPECT_EQ(runs[2][2].type, pb::JOB_ENCRYPT);
  EXPECT_EQ(runs[2][2].usage, 2u);
  EXPECT_EQ(runs[2][3].type, pb::JOB_PAD);
  EXPECT_TRUE(runs[2][3].pad_after);
  EXPECT_TRUE(runs[2][1].gated && runs[2][2].gated);
  EXPECT_FALSE(runs[2][3].gated);  // a signing pad reveals nothing

  // Proven: one Run with the gate, everything gated on it.
  as(250);
  runs = servers_.runs();
  ASSERT_EQ(runs.size(), 4u);
  ASSERT_EQ(runs[3].size(), 4u);
  EXPECT_EQ(runs[3][0].type, pb::JOB_DECRYPT);
  for (size_t k = 1; k < 3; ++k) EXPECT_TRUE(runs[3][k].gated) << k;
}

// Two clusters (router.h): the gate's Run fails on the first (a cluster
// failure: UNAVAILABLE, or a batch past its deadline), and the gate goes to
// the second. A wrong password must still release no reply and make no
// server compute one: the held-back reply may not go there as an ordinary,
// ungated job (released and compiled whatever the timestamp's verdict).
// (review3 finding B: Dispatcher::GateFailed handed the reply to the
// router with the gate's UNAVAILABLE, which failed it over as an ordinary
// job; Dispatcher::TakeQueued moved it likewise.)
TEST(CtsGateRouterTest, AFailedOverGateTakesNoUngatedReplyAlong) {
  CtsScriptTransport one, two;
  one.failing = true;
  one.password_ok = false;
  two.password_ok = false;
  BatcherOptions o;
  o.deadline = absl::Seconds(10);
  CollectingSink sink;
  Router r(o, {&one, &two}, &sink);
  Plan plan = PlainAsPlan(250);
  std::vector<ItemJob> given;
  given.push_back({0, 1, JobOf(plan.items[0], kTimestampBytes)});
  given.push_back({1, 2, JobOf(plan.items[1], 250)});
  ASSERT_TRUE(r.Begin(1, plan, std::move(given)).ok());
  r.SubmitterIdle();
  ASSERT_TRUE(sink.WaitFor(2));
  absl::SleepFor(absl::Milliseconds(200));  // nothing more comes
  r.End(1);
  ASSERT_FALSE(one.runs().empty());  // control: the first cluster failed the gate's Run
  EXPECT_TRUE(one.encrypts().empty());
  EXPECT_TRUE(absl::IsDataLoss(sink.Get(1).status)) << sink.Get(1).status;
  EXPECT_FALSE(sink.Get(2).status.ok()) << "a reply released after a failed gate";
  EXPECT_TRUE(sink.Get(2).output.empty());
  EXPECT_TRUE(two.encrypts().empty()) << "the second cluster computed the reply";
  for (const auto& [token, count] : sink.counts()) EXPECT_EQ(count, 1) << token;
}

TEST(ProvenShapesTest, TheLeastRecentlyProvenGoesFirst) {
  ProvenShapes p;
  auto shape = [](uint64_t m) {
    return contract::MakeCtsShape(pb::JOB_ENCRYPT, 14, 316, 0, 3, m, 100);
  };
  for (uint64_t m = 1; m <= ProvenShapes::kProvenShapes; ++m) p.Prove(shape(m));
  EXPECT_EQ(p.size(), ProvenShapes::kProvenShapes);
  p.Prove(shape(1));  // proven again: the most recent
  p.Prove(shape(ProvenShapes::kProvenShapes + 1));
  EXPECT_EQ(p.size(), ProvenShapes::kProvenShapes);
  EXPECT_TRUE(p.Has(shape(1)));
  EXPECT_FALSE(p.Has(shape(2)));
  EXPECT_TRUE(p.Has(shape(3)));
  EXPECT_TRUE(p.Has(shape(ProvenShapes::kProvenShapes + 1)));
}

// The module keys shapes as the servers key programs: the usage counts
// only under a FAST key, the splice only on an ENCRYPT, n is conf || P.
TEST(ProvenShapesTest, AJobsShapeIsTheServersProgramKey) {
  Job reply;
  reply.type = pb::JOB_ENCRYPT;
  reply.cipher = pb::CIPHER_AES128_CTS;
  reply.key_id = kUser;
  reply.usage = 3;
  reply.input.assign(250, 1);
  reply.splice.assign(180, 2);
  reply.splice_offset = 200;
  EXPECT_EQ(contract::CtsShapeOf(ShapeOf(reply)),
            contract::MakeCtsShape(pb::JOB_ENCRYPT, 10, 16 + 250, 0, 0, 180, 200));
  Job ts = reply;
  ts.type = pb::JOB_DECRYPT;
  ts.cipher = pb::CIPHER_AES256_CTS;
  ts.usage = 1;
  ts.splice.clear();
  ts.splice_offset = 0;
  ts.input.assign(kTimestampBytes, 3);
  EXPECT_EQ(contract::CtsShapeOf(ShapeOf(ts)),
            contract::MakeCtsShape(pb::JOB_DECRYPT, 14, kTimestampBytes - 12, 0, 0));
  Job kdc_challenge = reply;
  kdc_challenge.usage = 55;
  kdc_challenge.splice.clear();
  kdc_challenge.splice_offset = 0;
  kdc_challenge.cts_key = pb::CTS_KEY_CF2_AES128;
  kdc_challenge.cf2_half.assign(16, 4);
  EXPECT_EQ(contract::CtsShapeOf(ShapeOf(kdc_challenge)),
            contract::MakeCtsShape(pb::JOB_ENCRYPT, 10, 16 + 250, 16, 55));
}

}  // namespace
}  // namespace kmpc::kdc
