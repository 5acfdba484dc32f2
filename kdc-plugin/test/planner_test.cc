// The planner (planner.h) through the Batcher on the fake cluster: each
// exchange kind of docs/design/exchange-plan.md
// section 1.5 as the KDC would state it, its later jobs submitted with
// realistic lengths, one Run per exchange counted both by the cluster and
// by the exchange's record, no miss, and every result equal to the
// reference computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "batcher_thread.h"
#include "dispatcher.h"
#include "batcher_fixture.h"
#include "contract.h"
#include "planner.h"

namespace kmpc::kdc {
namespace {

namespace pb = ::kmpc::v1;

// Lengths of a realistic exchange (MIT 1.20 with a PAC of four buffers).
constexpr size_t kPacBytes = 368;       // the PAC, both signatures zeroed
constexpr size_t kTgtPlainBytes = 610;  // an EncTicketPart with that PAC
constexpr size_t kReplyBytes = 190;     // an EncASRepPart
constexpr size_t kDelta = 64;           // exchange-plan.md 1.5 Δ
constexpr size_t kSig = contract::kChecksumSize;

// Records, for party 0, the status of every Run job with a release
// condition (kmpc.proto Job.release_if_ok).
class ConditionTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void Run(int party, const pb::RunRequest& req, pb::RunResponse* resp,
           absl::Time deadline, Done done) override {
    if (party != 0) {
      next_->Run(party, req, resp, deadline, std::move(done));
      return;
    }
    std::vector<bool> cond;
    for (const auto& j : req.jobs()) cond.push_back(j.has_release_if_ok());
    next_->Run(party, req, resp, deadline,
               [this, resp, cond, done = std::move(done)](CallStatus s) {
                 {
                   std::lock_guard<std::mutex> l(mu_);
                   for (int k = 0; k < resp->results_size() &&
                                   k < static_cast<int>(cond.size());
                        ++k)
                     if (cond[k]) statuses_.push_back(resp->results(k).status());
                 }
                 done(std::move(s));
               });
  }
  std::vector<pb::JobStatus> statuses() {
    std::lock_guard<std::mutex> l(mu_);
    return statuses_;
  }

 private:
  std::mutex mu_;
  std::vector<pb::JobStatus> statuses_;
};

// Holds every Run answer until Release(): the KDC's later jobs of a plan
// with nothing given arrive while the Run preparing them is out. With
// `fail`, the held Runs fail instead (a cluster that went away).
class HeldRunTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void Run(int party, const pb::RunRequest& req, pb::RunResponse* resp,
           absl::Time deadline, Done done) override {
    next_->Run(party, req, resp, deadline,
               [this, done = std::move(done)](CallStatus s) {
                 std::unique_lock<std::mutex> l(mu_);
                 if (released_) {
                   l.unlock();
                   done(std::move(s));
                   return;
                 }
                 held_.push_back({done, std::move(s)});
               });
  }
  size_t held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_.size();
  }
  void Release(bool fail) {
    std::vector<std::pair<Done, CallStatus>> h;
    {
      std::lock_guard<std::mutex> l(mu_);
      released_ = true;
      h.swap(held_);
    }
    for (auto& [done, s] : h)
      done(fail ? CallStatus(absl::UnavailableError("gone")) : std::move(s));
  }

 private:
  std::mutex mu_;
  bool released_ = false;
  std::vector<std::pair<Done, CallStatus>> held_;
};

class PlannerTest : public BatcherTest {
 protected:
  const std::string tgt_id_ = std::string(32, 't');
  const std::string tgt_key_ = std::string(32, 'T');
  const std::string svc_id_ = std::string(32, 's');
  const std::string svc_key_ = std::string(32, 'S');
  void SetUp() override {
    BatcherTest::SetUp();
    cluster_.AddKey(tgt_id_, tgt_key_);
    cluster_.AddKey(svc_id_, svc_key_);
  }
  static BatcherOptions Opts() {
    BatcherOptions o;  // self-clocked (early flush)
    o.coalesce = absl::Seconds(2);
    o.deadline = absl::Seconds(10);
    o.speculate_ttl = absl::Seconds(8);  // below the servers' state TTL
    return o;
  }
  std::string KeyOf(const std::string& id) const {
    if (id == tgt_id_) return tgt_key_;
    if (id == svc_id_) return svc_key_;
    return kKey;
  }
  // An item of `role` under key id `key`, its type and usage the role's.
  static PlanItem Item(Role role, const std::string& key, size_t length,
                       uint32_t flags = 0, int gate = -1, int ticket = -1) {
    RoleInfo info;
    EXPECT_TRUE(RoleOf(role, &info));
    PlanItem p;
    p.role = role;
    p.type = info.type;
    p.usage = info.usage;
    p.cipher = pb::CIPHER_AES256;
    p.key_id = key;
    p.flags = flags;
    p.length = length;
    p.gate = gate;
    p.ticket = ticket;
    return p;
  }
  static PlanItem Given(PlanItem p) {
    p.given = true;
    p.flags |= kItemExact;
    return p;
  }
  static Job JobOf(const PlanItem& p, const std::string& input,
                   const std::string& checksum = "") {
    Job j;
    j.type = p.type;
    j.cipher = p.cipher;
    j.key_id = p.key_id;
    j.usage = p.usage;
    j.input.assign(input.begin(), input.end());
    j.checksum = checksum;
    return j;
  }
  // Begins exchange `id` with its given items' inputs, waits for their
  // results; returns their tokens by item.
  std::map<int, uint64_t> Begin(Batcher* b, uint64_t id, const Plan& plan,
                                const std::map<int, std::string>& inputs) {
    std::vector<ItemJob> given;
    std::map<int, uint64_t> tokens;
    for (const auto& [item, in] : inputs) {
      tokens[item] = token_++;
      given.push_back({item, tokens[item], JobOf(plan.items[item], in)});
    }
    const size_t n0 = sink_.counts().size();
    EXPECT_TRUE(b->dispatcher().Begin(id, plan, std::move(given)).ok());
    b->dispatcher().SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + tokens.size()));
    return tokens;
  }
  // Submits the jobs of later items back to back, as the KDC does in one
  // callback, and waits for their results; returns their tokens.
  std::vector<uint64_t> Later(Batcher* b, uint64_t id, const Plan& plan,
                              std::vector<std::pair<int, Job>> jobs) {
    const size_t n0 = sink_.counts().size();
    std::vector<uint64_t> tokens;
    for (auto& [item, j] : jobs) {
      tokens.push_back(token_++);
      EXPECT_TRUE(b->dispatcher().SubmitItem(id, item, tokens.back(), std::move(j)).ok());
    }
    b->dispatcher().SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + tokens.size()));
    return tokens;
  }
  // A ciphertext ctr0 || C || T of `plain` under `key_id` (usage), made by
  // an ordinary job (before the exchange under test).
  std::string Encrypted(Batcher* b, const std::string& key_id, uint32_t usage,
                        const std::string& plain) {
    Job j = Encrypt(plain, usage);
    j.key_id = key_id;
    const uint64_t t = token_++;
    const size_t n0 = sink_.counts().size();
    EXPECT_TRUE(b->dispatcher().Submit(t, std::move(j)).ok());
    b->dispatcher().SubmitterIdle();
    EXPECT_TRUE(sink_.WaitFor(n0 + 1));
    WaitIdle(b);
    EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
    return Str(sink_.Get(t).output);
  }
  // token's result is ctr0 || C || T of `plain` under key_id (usage).
  void ExpectEncrypted(uint64_t token, const std::string& key_id,
                       uint32_t usage, const std::string& plain) {
    const Result r = sink_.Get(token);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.output.size(), plain.size() + 32);
    const std::string out = Str(r.output);
    const std::string ctr0 = out.substr(0, 16), c = out.substr(16, plain.size());
    const std::string ks = cluster_.Keystream(KeyOf(key_id), ctr0, plain.size());
    for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(c[i] ^ ks[i], plain[i]);
    EXPECT_EQ(out.substr(16 + plain.size()),
              cluster_.Tag(KeyOf(key_id), usage, ctr0, c, false));
  }
  // token's result is a checksum of msg under key_id (usage); returns it.
  std::string ExpectSigned(uint64_t token, const std::string& key_id,
                           uint32_t usage, const std::string& msg) {
    const Result r = sink_.Get(token);
    EXPECT_TRUE(r.status.ok()) << r.status;
    if (r.output.size() != kSig) {
      ADD_FAILURE() << "checksum of " << r.output.size() << " bytes";
      return "";
    }
    const std::string out = Str(r.output);
    EXPECT_EQ(out.substr(16),
              cluster_.Tag(KeyOf(key_id), usage, out.substr(0, 16), msg, true));
    return out;
  }
  // Sign requests party 0 received so far.
  size_t Signs() { return static_cast<FakeCluster&>(cluster_).received_signs(0).size(); }
  // The record of exchange id, ended: one Run, no miss.
  void ExpectOneRunNoMiss(Batcher* b, uint64_t id) {
    const std::optional<ExchangeRecord> r = b->dispatcher().End(id);
    ASSERT_TRUE(r.has_value());
    std::string logs;  // the module's reasons, if a job ran again
    for (const std::string& l : sink_.logs()) logs += l + "\n";
    EXPECT_EQ(r->runs, 1u) << ExchangeName(r->kind) << "\n" << logs;
    for (const auto& [role, why] : r->misses)
      ADD_FAILURE() << ExchangeName(r->kind) << ": " << RoleName(role)
                    << " missed (" << MissName(why) << ")";
  }

  // What an AS exchange leaves: the TGT's ciphertext and plaintext, and
  // the PAC's server signature at the TGT's ctr0 + 2^17 (slot 0).
  struct Tgt {
    std::string ct, plain, pac, server_sig;
  };
  Tgt AsExchange(Batcher* b, uint64_t id, bool gate);
  Tgt Renewal(Batcher* b, uint64_t id, const Tgt& tgt, size_t extra);

  uint64_t token_ = 7000;
};
// The fake only: the in-process real cluster (real_cluster.h) serves Run
// and Finalize, not Sign, and every signature here is a Sign item. The
// servers' side of slotted pads is mpc-server services_test's
// LinkedPadsOfOneEncryptTakeDistinctSlots.
INSTANTIATE_TEST_SUITE_P(Cluster, PlannerTest,
                         ::testing::Values(ClusterKind::kFake), KindName);

// The PAC whose server signature the KDC makes (stand-in bytes).
std::string Pac(char fill) { return std::string(kPacBytes, fill); }

// An EncTicketPart of `len` bytes carrying `sig` (the PAC's server
// signature) somewhere inside.
std::string TicketPlain(size_t len, const std::string& sig) {
  std::string t(len, 'e');
  t.replace(100, sig.size(), sig);
  return t;
}

// exchange-plan.md 1.5 "AS, encrypted timestamp, PAC" (gate) and "AS with
// a local client key" (no gate, nothing given: the prepared jobs are the
// Run), as kdc_mpc_as_begin (krb5's AS patch) states them: the timestamp
// and the PA-REQ-ENC-PA-REP checksum given (gated on it), the ticket, the
// PAC server signature linked to it (slot 0), the KDC signature chained to
// it, the reply; exact lengths.
PlannerTest::Tgt PlannerTest::AsExchange(Batcher* b, uint64_t id, bool gate) {
  const std::string ts_plain = "a timestamp, 30 bytes long....";
  const std::string ts = gate ? Encrypted(b, kKeyId, 1, ts_plain) : "";
  const std::string req = "the AS-REQ, for PA-REQ-ENC-PA-REP";
  const size_t before = RunCalls();
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  const uint32_t g = gate ? kItemGated : 0;
  const int gi = gate ? 0 : -1;
  if (gate) {
    plan.items.push_back(Given(Item(Role::kTimestamp, kKeyId, ts.size())));
    plan.items.push_back(Given(Item(Role::kReqChecksum, kKeyId, req.size(), g, gi)));
  }
  const int ticket = static_cast<int>(plan.items.size());
  plan.items.push_back(Item(Role::kTicket, tgt_id_, kTgtPlainBytes, kItemExact | g, gi));
  plan.items.push_back(Item(Role::kSigServer, tgt_id_, kPacBytes, kItemExact | g, gi, ticket));
  plan.items.push_back(Item(Role::kSigKdc, tgt_id_, kSig, kItemExact | g, gi, ticket));
  if (gate) plan.items.push_back(Item(Role::kReply, kKeyId, kReplyBytes, kItemExact | g, gi));
  std::map<int, std::string> in;
  if (gate) {
    in[0] = ts;
    in[1] = req;
  }
  auto given = Begin(b, id, plan, in);
  if (gate) {
    EXPECT_EQ(Str(sink_.Get(given[0]).output), ts_plain);
    ExpectSigned(given[1], kKeyId, 56, req);  // released: the gate held
  }
  WaitIdle(b);
  Tgt t;
  t.pac = Pac('p');
  auto s = Later(b, id, plan, {{ticket + 1, JobOf(plan.items[ticket + 1], t.pac)}});
  t.server_sig = ExpectSigned(s[0], tgt_id_, 17, t.pac);
  // The KDC signature was chained to the server signature's Sign item: it
  // completes with no request of its own.
  const size_t signs = Signs();
  auto k = Later(b, id, plan, {{ticket + 2, JobOf(plan.items[ticket + 2], t.server_sig)}});
  ExpectSigned(k[0], tgt_id_, 17, t.server_sig);
  EXPECT_EQ(Signs(), signs);
  t.plain = TicketPlain(kTgtPlainBytes, t.server_sig);
  std::vector<std::pair<int, Job>> last = {{ticket, JobOf(plan.items[ticket], t.plain)}};
  const std::string reply(kReplyBytes, 'r');
  if (gate) last.push_back({ticket + 3, JobOf(plan.items[ticket + 3], reply)});
  auto e = Later(b, id, plan, std::move(last));
  ExpectEncrypted(e[0], tgt_id_, 2, t.plain);
  if (gate) ExpectEncrypted(e[1], kKeyId, 3, reply);
  t.ct = Str(sink_.Get(e[0]).output);
  // The server signature is at the TGT's ctr0 + 2^17 + 0.
  std::string want;
  EXPECT_TRUE(contract::LinkedPadCtr0(t.ct.substr(0, 16), 0, &want));
  EXPECT_EQ(t.server_sig.substr(0, 16), want);
  WaitIdle(b);
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b, id);
  return t;
}

// exchange-plan.md 1.5 "Renewal / validation" and "Forwarding" (`extra`:
// the addresses' bytes): the presented TGT's server signature verified at
// its linked counter, the new TGT with its server signature linked and the
// KDC signature chained.
PlannerTest::Tgt PlannerTest::Renewal(Batcher* b, uint64_t id, const Tgt& tgt,
                                      size_t extra) {
  const size_t before = RunCalls();
  const size_t lh = tgt.ct.size() - 32;
  Plan plan;
  plan.kind = extra ? ExchangeKind::kForward : ExchangeKind::kRenew;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kTicket, tgt_id_, lh + kDelta + extra, kItemGated, 0),
                Item(Role::kSigServer, tgt_id_, lh, kItemGated, 0, 2),
                Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0, 2),
                Item(Role::kCammacKdc, tgt_id_, 16, kItemGated, 0, 2)};
  auto given = Begin(b, id, plan, {{0, tgt.ct}});
  EXPECT_EQ(Str(sink_.Get(given[0]).output), tgt.plain);
  WaitIdle(b);
  auto v = Later(b, id, plan, {{1, JobOf(plan.items[1], tgt.pac, tgt.server_sig)}});
  EXPECT_TRUE(sink_.Get(v[0]).status.ok()) << sink_.Get(v[0]).status;
  Tgt t;
  t.pac = Pac('q');
  auto s = Later(b, id, plan, {{3, JobOf(plan.items[3], t.pac)}});
  t.server_sig = ExpectSigned(s[0], tgt_id_, 17, t.pac);
  const size_t signs = Signs();  // the KDC signature is chained
  auto k = Later(b, id, plan, {{4, JobOf(plan.items[4], t.server_sig)}});
  ExpectSigned(k[0], tgt_id_, 17, t.server_sig);
  EXPECT_EQ(Signs(), signs);
  t.plain = TicketPlain(lh + 21 + extra, t.server_sig);  // a starttime more
  auto e = Later(b, id, plan, {{2, JobOf(plan.items[2], t.plain)}});
  ExpectEncrypted(e[0], tgt_id_, 2, t.plain);
  t.ct = Str(sink_.Get(e[0]).output);
  WaitIdle(b);
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b, id);
  return t;
}

TEST_P(PlannerTest, AsWithGateIsOneRun) {
  auto b = Make(Opts());
  AsExchange(b.get(), 1, true);
}

TEST_P(PlannerTest, AsWithLocalClientKeyIsOneRun) {
  auto b = Make(Opts());
  AsExchange(b.get(), 1, false);
}

// exchange-plan.md 1.5 "AS with a local client key": nothing is given,
// so the KDC submits the PAC's server signature at once, while the Run
// preparing its pad is out; the module keeps the job until that Run is
// back, and it is a Sign item then (no Run of its own, no miss). If that
// Run fails instead, the job runs alone (a miss, reason failover).
TEST_P(PlannerTest, LaterJobsWaitForTheRunPreparingThem) {
  for (bool fail : {false, true}) {
    HeldRunTransport t(&cluster_);
    auto b = std::make_unique<Batcher>(Opts(), &t, &sink_);
    Plan plan;
    plan.kind = ExchangeKind::kAs;
    plan.items = {Item(Role::kTicket, tgt_id_, kTgtPlainBytes, kItemExact),
                  Item(Role::kSigServer, tgt_id_, kPacBytes, kItemExact, -1, 0)};
    ASSERT_TRUE(b->dispatcher().Begin(1, plan, {}).ok());
    b->dispatcher().SubmitterIdle();
    for (int i = 0; i < 500 && t.held() < 3; ++i) absl::SleepFor(absl::Milliseconds(2));
    ASSERT_EQ(t.held(), 3u);  // the Run, at each party
    const size_t n0 = sink_.counts().size();
    const uint64_t tok = token_++;
    ASSERT_TRUE(b->dispatcher().SubmitItem(1, 1, tok, JobOf(plan.items[1], Pac('w'))).ok());
    b->dispatcher().SubmitterIdle();
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(sink_.counts().size(), n0);  // parked: no answer, no request
    t.Release(fail);
    ASSERT_TRUE(sink_.WaitFor(n0 + 1));
    ExpectSigned(tok, tgt_id_, 17, Pac('w'));
    WaitIdle(b.get());
    const std::optional<ExchangeRecord> r = b->dispatcher().End(1);
    ASSERT_TRUE(r.has_value());
    if (!fail) {
      EXPECT_EQ(r->runs, 1u);
      EXPECT_TRUE(r->misses.empty());
    } else {
      EXPECT_EQ(r->runs, 2u);
      ASSERT_EQ(r->misses.size(), 1u);
      EXPECT_EQ(r->misses[0].second, Miss::kFailover);
    }
  }
}

// A renewal, then a forwarding of the renewed TGT: each one Run, the
// second verifying the signature the first made at its linked counter.
TEST_P(PlannerTest, RenewalAndForwardingAreOneRunEach) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  const Tgt renewed = Renewal(b.get(), 2, tgt, 0);
  Renewal(b.get(), 3, renewed, 24);
}

// exchange-plan.md 1.5 "TGS, service ticket" for a service under a handle:
// the TGT verified, the ticket signature and KDC signature unlinked, the
// service ticket with its server signature linked to it.
TEST_P(PlannerTest, TgsIsOneRun) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  const size_t before = RunCalls();
  const size_t lh = tgt.ct.size() - 32;
  Plan plan;
  plan.kind = ExchangeKind::kTgs;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kVerifyCammac, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kSigTicket, tgt_id_, lh + kDelta, kItemGated, 0),
                Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0),
                Item(Role::kTicket, svc_id_, lh + kDelta, kItemGated, 0),
                Item(Role::kSigServer, svc_id_, lh, kItemGated, 0, 5)};
  Begin(b.get(), 2, plan, {{0, tgt.ct}});
  WaitIdle(b.get());
  auto v = Later(b.get(), 2, plan, {{1, JobOf(plan.items[1], tgt.pac, tgt.server_sig)}});
  ASSERT_TRUE(sink_.Get(v[0]).status.ok()) << sink_.Get(v[0]).status;
  const std::string enc_part(lh + 30, 'x');
  auto st = Later(b.get(), 2, plan, {{3, JobOf(plan.items[3], enc_part)},
                                     {6, JobOf(plan.items[6], Pac('v'))}});
  ExpectSigned(st[0], tgt_id_, 17, enc_part);
  const std::string sig = ExpectSigned(st[1], svc_id_, 17, Pac('v'));
  auto k = Later(b.get(), 2, plan, {{4, JobOf(plan.items[4], sig)}});
  ExpectSigned(k[0], tgt_id_, 17, sig);
  const std::string ticket = TicketPlain(lh + 40, sig);
  auto e = Later(b.get(), 2, plan, {{5, JobOf(plan.items[5], ticket)}});
  ExpectEncrypted(e[0], svc_id_, 2, ticket);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b.get(), 2);  // the unused CAMMAC pad is dropped
}

// exchange-plan.md 1.5 "User-to-user": two tickets given, each one's
// server signature verified at its own linked counter.
TEST_P(PlannerTest, U2uIsOneRun) {
  auto b = Make(Opts());
  const Tgt a = AsExchange(b.get(), 1, false);
  const Tgt c = AsExchange(b.get(), 2, false);
  const size_t before = RunCalls();
  const size_t lh = a.ct.size() - 32;
  Plan plan;
  plan.kind = ExchangeKind::kU2u;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, a.ct.size())),
                Given(Item(Role::kSecondTicket, tgt_id_, c.ct.size())),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 1),
                Item(Role::kSigTicket, tgt_id_, lh + kDelta, kItemGated, 0),
                Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0)};
  auto given = Begin(b.get(), 3, plan, {{0, a.ct}, {1, c.ct}});
  EXPECT_EQ(Str(sink_.Get(given[1]).output), c.plain);
  WaitIdle(b.get());
  auto v = Later(b.get(), 3, plan, {{2, JobOf(plan.items[2], a.pac, a.server_sig)},
                                    {3, JobOf(plan.items[3], c.pac, c.server_sig)}});
  for (uint64_t t : v) EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  const std::string enc_part(lh + 21, 'u');
  auto s = Later(b.get(), 3, plan, {{4, JobOf(plan.items[4], enc_part)}});
  ExpectSigned(s[0], tgt_id_, 17, enc_part);
  const std::string sig = Str(sink_.Get(s[0]).output);
  auto k = Later(b.get(), 3, plan, {{5, JobOf(plan.items[5], sig)}});
  ExpectSigned(k[0], tgt_id_, 17, sig);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b.get(), 3);
}

// exchange-plan.md 1.5 "S4U2Self" (the new PAC bounded by the realm's
// ticket cap) and "S4U2Proxy" with an evidence ticket under a handle
// (issued by a planned TGS: its server signature at its linked counter).
TEST_P(PlannerTest, S4uExchangesAreOneRunEach) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  const size_t lh = tgt.ct.size() - 32;
  size_t before = RunCalls();
  Plan self;
  self.kind = ExchangeKind::kS4u2Self;
  self.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kSigTicket, tgt_id_, 4096, kItemGated, 0),
                Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0)};
  Begin(b.get(), 2, self, {{0, tgt.ct}});
  WaitIdle(b.get());
  auto v = Later(b.get(), 2, self, {{1, JobOf(self.items[1], tgt.pac, tgt.server_sig)}});
  ASSERT_TRUE(sink_.Get(v[0]).status.ok()) << sink_.Get(v[0]).status;
  const std::string user_part(1500, 'i');  // the impersonated user's PAC
  auto s = Later(b.get(), 2, self, {{2, JobOf(self.items[2], user_part)}});
  const std::string sig = ExpectSigned(s[0], tgt_id_, 17, user_part);
  auto k = Later(b.get(), 2, self, {{3, JobOf(self.items[3], sig)}});
  ExpectSigned(k[0], tgt_id_, 17, sig);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b.get(), 2);

  // The evidence ticket: a service ticket whose PAC server signature is
  // linked to it, as a planned TGS makes it (TgsIsOneRun).
  before = RunCalls();
  Plan tgs;
  tgs.kind = ExchangeKind::kTgs;
  tgs.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
               Item(Role::kTicket, svc_id_, lh + kDelta, kItemGated, 0),
               Item(Role::kSigServer, svc_id_, lh, kItemGated, 0, 1)};
  Begin(b.get(), 3, tgs, {{0, tgt.ct}});
  WaitIdle(b.get());
  const std::string evidence_pac = Pac('w');
  auto es = Later(b.get(), 3, tgs, {{2, JobOf(tgs.items[2], evidence_pac)}});
  const std::string evidence_sig = ExpectSigned(es[0], svc_id_, 17, evidence_pac);
  const std::string evidence_plain = TicketPlain(lh + 21, evidence_sig);
  auto ee = Later(b.get(), 3, tgs, {{1, JobOf(tgs.items[1], evidence_plain)}});
  const std::string evidence = Str(sink_.Get(ee[0]).output);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b.get(), 3);

  before = RunCalls();
  Plan proxy;
  proxy.kind = ExchangeKind::kS4u2Proxy;
  proxy.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                 Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                 Given(Item(Role::kSecondTicket, svc_id_, evidence.size())),
                 Item(Role::kVerifyServer, svc_id_, lh, kItemGated, 0, 2),
                 Item(Role::kSigTicket, tgt_id_, evidence_plain.size() + kDelta,
                      kItemGated, 0),
                 Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0)};
  auto pg = Begin(b.get(), 4, proxy, {{0, tgt.ct}, {2, evidence}});
  EXPECT_EQ(Str(sink_.Get(pg[2]).output), evidence_plain);
  WaitIdle(b.get());
  auto pv = Later(b.get(), 4, proxy,
                  {{1, JobOf(proxy.items[1], tgt.pac, tgt.server_sig)},
                   {3, JobOf(proxy.items[3], evidence_pac, evidence_sig)}});
  for (uint64_t t : pv) EXPECT_TRUE(sink_.Get(t).status.ok()) << sink_.Get(t).status;
  const std::string proxied(evidence_plain.size() + 10, 'y');
  auto ps = Later(b.get(), 4, proxy, {{4, JobOf(proxy.items[4], proxied)}});
  const std::string psig = ExpectSigned(ps[0], tgt_id_, 17, proxied);
  auto pk = Later(b.get(), 4, proxy, {{5, JobOf(proxy.items[5], psig)}});
  ExpectSigned(pk[0], tgt_id_, 17, psig);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 1);
  ExpectOneRunNoMiss(b.get(), 4);
}

// Sixty-four renewals begun together and their later jobs submitted in a
// shuffled order: each exchange is in exactly one Run, with no miss,
// however the Runs cut them.
TEST_P(PlannerTest, SixtyFourInterleavedRenewalsEachOneRun) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  constexpr uint64_t kN = 64, kFirst = 100;
  const size_t lh = tgt.ct.size() - 32;
  Plan plan;
  plan.kind = ExchangeKind::kRenew;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0),
                Item(Role::kTicket, tgt_id_, lh + kDelta, kItemGated, 0),
                Item(Role::kSigServer, tgt_id_, lh, kItemGated, 0, 2)};
  const size_t n0 = sink_.counts().size();
  for (uint64_t id = kFirst; id < kFirst + kN; ++id) {
    std::vector<ItemJob> given;
    given.push_back({0, token_++, JobOf(plan.items[0], tgt.ct)});
    ASSERT_TRUE(b->dispatcher().Begin(id, plan, std::move(given)).ok());
  }
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + kN));
  WaitIdle(b.get());
  std::vector<std::pair<uint64_t, int>> order;
  for (uint64_t id = kFirst; id < kFirst + kN; ++id)
    for (int item : {1, 3}) order.emplace_back(id, item);
  std::shuffle(order.begin(), order.end(), std::mt19937(40));
  std::map<std::pair<uint64_t, int>, uint64_t> tok;
  const size_t n1 = sink_.counts().size();
  for (const auto& [id, item] : order) {
    tok[{id, item}] = token_;
    Job j = item == 1 ? JobOf(plan.items[1], tgt.pac, tgt.server_sig)
                      : JobOf(plan.items[3], Pac(static_cast<char>(id)));
    ASSERT_TRUE(b->dispatcher().SubmitItem(id, item, token_++, std::move(j)).ok());
  }
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n1 + order.size()));
  const size_t n2 = sink_.counts().size();
  std::map<uint64_t, std::string> plain;
  for (uint64_t id = kFirst; id < kFirst + kN; ++id) {
    ASSERT_TRUE(sink_.Get(tok[{id, 1}]).status.ok());
    const std::string sig = ExpectSigned(tok[{id, 3}], tgt_id_, 17,
                                         Pac(static_cast<char>(id)));
    plain[id] = TicketPlain(lh + 21, sig);
    tok[{id, 2}] = token_;
    ASSERT_TRUE(b->dispatcher().SubmitItem(id, 2, token_++, JobOf(plan.items[2], plain[id])).ok());
  }
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n2 + kN));
  WaitIdle(b.get());
  for (uint64_t id = kFirst; id < kFirst + kN; ++id) {
    ExpectEncrypted(tok[{id, 2}], tgt_id_, 2, plain[id]);
    ExpectOneRunNoMiss(b.get(), id);
  }
}

// A timestamp that does not decrypt: every conditional job of the Run (the
// prepared keystreams, the early PA-REQ-ENC-PA-REP checksum given with the
// timestamp) is withheld by the servers: nothing is released.
TEST_P(PlannerTest, GateFailureReleasesNothing) {
  ConditionTransport t(&cluster_);
  auto b = std::make_unique<Batcher>(Opts(), &t, &sink_);
  std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  ts[20] ^= 1;  // a wrong password
  Plan plan;
  plan.kind = ExchangeKind::kAs;
  const std::string req = "the AS-REQ, for PA-REQ-ENC-PA-REP";
  plan.items = {Given(Item(Role::kTimestamp, kKeyId, ts.size())),
                Item(Role::kTicket, tgt_id_, kTgtPlainBytes, kItemExact | kItemGated, 0),
                Item(Role::kSigServer, tgt_id_, kPacBytes, kItemExact | kItemGated, 0, 1),
                Item(Role::kReply, kKeyId, kReplyBytes, kItemExact | kItemGated, 0),
                Given(Item(Role::kReqChecksum, kKeyId, req.size(), kItemGated, 0))};
  auto given = Begin(b.get(), 1, plan, {{0, ts}, {4, req}});
  EXPECT_EQ(sink_.Get(given[0]).status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(sink_.Get(given[4]).status.ok());  // withheld, not revealed
  EXPECT_TRUE(sink_.Get(given[4]).output.empty());
  WaitIdle(b.get());
  const std::vector<pb::JobStatus> st = t.statuses();
  EXPECT_EQ(st.size(), 3u);  // the ticket and reply keystreams, the checksum
  for (pb::JobStatus s : st) EXPECT_EQ(s, pb::JOB_WITHHELD);
  const std::optional<ExchangeRecord> r = b->dispatcher().End(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->runs, 1u);
  EXPECT_TRUE(r->misses.empty());
}

// A ticket over its bound costs exactly one more Run and one miss
// (reason "bound"); its result is still right.
TEST_P(PlannerTest, InputOverItsBoundCostsOneRunAndOneMiss) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  const size_t before = RunCalls();
  Plan plan;
  plan.kind = ExchangeKind::kRenew;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kTicket, tgt_id_, 100, kItemGated, 0)};
  Begin(b.get(), 2, plan, {{0, tgt.ct}});
  WaitIdle(b.get());
  const std::string long_ticket(400, 'L');
  auto e = Later(b.get(), 2, plan, {{1, JobOf(plan.items[1], long_ticket)}});
  ExpectEncrypted(e[0], tgt_id_, 2, long_ticket);
  WaitIdle(b.get());
  EXPECT_EQ(RunCalls() - before, 2);
  const std::optional<ExchangeRecord> r = b->dispatcher().End(2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->runs, 2u);
  ASSERT_EQ(r->misses.size(), 1u);
  EXPECT_EQ(r->misses[0].first, Role::kTicket);
  EXPECT_EQ(r->misses[0].second, Miss::kBound);
}

// The budget against unauthenticated floods: with one token, the first
// gated plan is prepared and the second runs its gate alone, its ticket
// then in a Run of its own (a miss, reason "budget"); the first plan's
// verified gate gives its token back for the next.
TEST_P(PlannerTest, BudgetRefusedPlanRunsTheGateAlone) {
  BatcherOptions o = Opts();
  o.speculate_max = 3;  // a burst of one token, room for the AS exchange
  auto b = Make(o);
  const Tgt tgt = AsExchange(b.get(), 1, false);
  Plan plan;
  plan.kind = ExchangeKind::kRenew;
  plan.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
                Item(Role::kTicket, tgt_id_, 700, kItemGated, 0)};
  const size_t n0 = sink_.counts().size();
  for (uint64_t id : {2, 3}) {
    std::vector<ItemJob> given;
    given.push_back({0, token_++, JobOf(plan.items[0], tgt.ct)});
    ASSERT_TRUE(b->dispatcher().Begin(id, plan, std::move(given)).ok());
  }
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 2));
  WaitIdle(b.get());
  const std::string t(650, 'n');
  for (uint64_t id : {2, 3}) {
    auto e = Later(b.get(), id, plan, {{1, JobOf(plan.items[1], t)}});
    ExpectEncrypted(e[0], tgt_id_, 2, t);
  }
  WaitIdle(b.get());
  std::optional<ExchangeRecord> first = b->dispatcher().End(2), second = b->dispatcher().End(3);
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(first->misses.empty());
  EXPECT_EQ(first->runs, 1u);
  ASSERT_EQ(second->misses.size(), 1u);
  EXPECT_EQ(second->misses[0].second, Miss::kBudget);
  EXPECT_EQ(second->runs, 2u);
  // The first gate verified: its token is back, the next plan prepared.
  Begin(b.get(), 4, plan, {{0, tgt.ct}});
  WaitIdle(b.get());
  auto e = Later(b.get(), 4, plan, {{1, JobOf(plan.items[1], t)}});
  ExpectEncrypted(e[0], tgt_id_, 2, t);
  ExpectOneRunNoMiss(b.get(), 4);
}

// Plans that contradict their roles, or jobs that contradict their item,
// are refused at once with what is wrong.
TEST_P(PlannerTest, BadPlansAndJobsAreRefused) {
  auto b = Make(Opts());
  Plan bad;
  bad.kind = ExchangeKind::kTgs;
  PlanItem wrong = Item(Role::kTicket, tgt_id_, 100);
  wrong.usage = 3;
  bad.items = {wrong};
  absl::Status st = b->dispatcher().Begin(1, bad, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("usage"), std::string::npos) << st;
  bad.items = {Item(Role::kSigServer, tgt_id_, 100, 0, -1, 5)};
  EXPECT_EQ(b->dispatcher().Begin(1, bad, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->dispatcher().Begin(1, Plan(), {}).code(), absl::StatusCode::kInvalidArgument);
  Plan gate;  // a given item without its job
  gate.kind = ExchangeKind::kTgs;
  gate.items = {Given(Item(Role::kHeaderTicket, tgt_id_, 80))};
  EXPECT_EQ(b->dispatcher().Begin(1, gate, {}).code(), absl::StatusCode::kInvalidArgument);
  Plan ok;
  ok.kind = ExchangeKind::kAs;
  ok.items = {Item(Role::kTicket, tgt_id_, 100, kItemExact)};
  ASSERT_TRUE(b->dispatcher().Begin(2, ok, {}).ok());
  EXPECT_EQ(b->dispatcher().Begin(2, ok, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->dispatcher().SubmitItem(2, 0, 1, JobOf(ok.items[0], std::string(99, 'x'))).code(),
            absl::StatusCode::kInvalidArgument);  // exact: 100 bytes
  Job other = JobOf(ok.items[0], std::string(100, 'x'));
  other.key_id = kKeyId;
  EXPECT_EQ(b->dispatcher().SubmitItem(2, 0, 1, std::move(other)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->dispatcher().SubmitItem(3, 0, 1, JobOf(ok.items[0], std::string(100, 'x'))).code(),
            absl::StatusCode::kInvalidArgument);  // no such exchange
  WaitIdle(b.get());
  EXPECT_TRUE(b->dispatcher().End(2).has_value());
  EXPECT_FALSE(b->dispatcher().End(2).has_value());
}


// ---- Prepared work through the steps -----------------------------------
//
// A plan's prepared keystreams and pads when the servers forgot them, a
// server deviates, hangs or is busy, the budget runs out or preparation is
// off: the FINALIZE of a prepared keystream and the Sign and verify items
// under prepared pads (batch_step.h), with AS and TGS plans as the KDC
// states them (exchange-plan.md 1.5). The keystream cases run on the fake
// and on the real servers' code; the pad cases on the fake only (Sign).

constexpr size_t kTicketBytes = 64;  // the plans' ticket and reply bounds
constexpr size_t kReplyBytes2 = 64;

class PreparedTest : public PlannerTest {
 protected:
  // An AS exchange's plan: 0 the timestamp (given: the gate), 1 the
  // ticket, 2 the reply; with `pads` 3 the PAC's server signature and 4 its
  // KDC signature, linked to the ticket.
  Plan AsPlan(size_t ts_len, bool pads) const {
    Plan plan;
    plan.kind = ExchangeKind::kAs;
    plan.items = {Given(Item(Role::kTimestamp, kKeyId, ts_len)),
                  Item(Role::kTicket, tgt_id_, kTicketBytes, kItemGated, 0),
                  Item(Role::kReply, kKeyId, kReplyBytes2, kItemGated, 0)};
    if (pads) {
      plan.items.push_back(Item(Role::kSigServer, tgt_id_, kPacBytes, kItemGated, 0, 1));
      plan.items.push_back(Item(Role::kSigKdc, tgt_id_, kSig, kItemGated, 0, 1));
    }
    return plan;
  }
  // Begins exchange `id` of `plan` with the timestamp `ts` and waits until
  // its Run is over (its prepared work held).
  void BeginAs(Batcher* b, uint64_t id, const Plan& plan, const std::string& ts) {
    auto given = Begin(b, id, plan, {{0, ts}});
    ASSERT_TRUE(sink_.Get(given[0]).status.ok()) << sink_.Get(given[0]).status;
    WaitIdle(b);
  }
  // Submits job j as item `item` of exchange `id` under `token`.
  void SubmitItemJob(Batcher* b, uint64_t id, int item, uint64_t token, Job j) {
    ASSERT_TRUE(b->dispatcher().SubmitItem(id, item, token, std::move(j)).ok());
  }
  // Every pad named in party p's Sign requests (a chained item's two).
  std::vector<std::pair<std::string, uint64_t>> SignedPads(int p) {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const std::string& raw : fake().received_signs(p)) {
      pb::SignRequest r;
      EXPECT_TRUE(r.ParseFromString(raw));
      for (const auto& it : r.items()) {
        out.emplace_back(it.run_batch_id(), it.job_id());
        if (it.has_chain()) out.emplace_back(it.chain().run_batch_id(), it.chain().job_id());
      }
    }
    return out;
  }
  FakeCluster& fake() { return static_cast<FakeCluster&>(cluster_); }
  const std::string ticket_ = std::string(kTicketBytes, 't');
  const std::string reply_ = std::string(kReplyBytes2, 'r');
};
INSTANTIATE_TEST_SUITE_P(Cluster, PreparedTest,
                         ::testing::Values(ClusterKind::kFake, ClusterKind::kReal),
                         KindName);

// Pads: the fake only (RealCluster answers Sign as unimplemented).
class PreparedPadTest : public PreparedTest {};
INSTANTIATE_TEST_SUITE_P(Cluster, PreparedPadTest,
                         ::testing::Values(ClusterKind::kFake), KindName);

// The servers forgot the prepared ENCRYPT states (a restart, or a TTL
// shorter than speculate_ttl): FINALIZE of the ticket and reply fails with
// BATCH_UNKNOWN_ENCRYPT. They are re-run as ordinary ENCRYPT jobs and
// succeed; the ordinary job submitted with them is not affected.
TEST_P(PreparedTest, ForgottenKeystreamIsReRunAndOtherJobsSucceed) {
  auto b = Make(Opts());
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  ASSERT_EQ(b->stats().keystreams_held, 2u);
  cluster_.ForgetEncryptStates();
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  ASSERT_TRUE(b->dispatcher().Submit(7, Encrypt(std::string(100, 'o'), 7)).ok());  // ordinary
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 3));
  EXPECT_EQ(b->stats().speculative_used, 2u);
  EXPECT_EQ(b->stats().finalize_only_rerun, 2u);
  EXPECT_EQ(RunCalls(), runs0 + 2);  // job 7's Run, and the re-run
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  ExpectEncrypted(7, kKeyId, 7, std::string(100, 'o'));
  EXPECT_EQ(b->stats().failed_batches, 0u);
  EXPECT_TRUE(sink_.Logged({"re-running them"}));
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// The prepared TTL runs from the Run's answer: a Run slower than
// speculate_ttl (a compile inside it, a loaded host) still leaves its
// keystreams usable, and the later items need no Run of their own.
TEST_P(PreparedTest, ARunSlowerThanTheTtlKeepsWhatItPrepared) {
  BatcherOptions o = Opts();
  o.speculate_ttl = absl::Milliseconds(400);
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  cluster_.set_run_delay(absl::Milliseconds(900));
  BeginAs(b.get(), 1, plan, ts);
  cluster_.set_run_delay(absl::ZeroDuration());
  ASSERT_EQ(b->stats().keystreams_held, 2u);
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 2));
  EXPECT_EQ(b->stats().speculative_used, 2u);
  EXPECT_EQ(RunCalls(), runs0);  // FINALIZE only
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  const std::optional<ExchangeRecord> r = b->dispatcher().End(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->misses.empty());
}

// Only one server forgot the states and the two others are slow to answer
// the FINALIZE: the jobs are re-run as soon as the first failure arrives,
// not after the slow answers, and the late answers re-run nothing twice.
TEST_P(PreparedTest, OnePartyForgotReRunsWithoutWaitingForTheOthers) {
  BatcherOptions o = Opts();
  o.deadline = absl::Seconds(5);
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  cluster_.ForgetEncryptStates(1);
  const int fin0 = cluster_.finalize_answers();
  // Below the 5 s deadline, which would fail the FINALIZE.
  const absl::Duration slow = absl::Seconds(3);
  cluster_.DelayNextFinalize(0, slow);
  cluster_.DelayNextFinalize(2, slow);
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  const absl::Time t0 = absl::Now();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 2, absl::Seconds(5)));
  for (uint64_t t : {5, 6}) EXPECT_LT(sink_.At(t) - t0, slow) << t;
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  for (int i = 0; i < 600 && cluster_.finalize_answers() < fin0 + 3; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(cluster_.finalize_answers(), fin0 + 3);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(b->stats().finalize_only_rerun, 2u);
  EXPECT_EQ(RunCalls(), runs0 + 1);  // one re-run
  EXPECT_EQ(b->stats().failed_batches, 0u);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// The only Run job of the batch fails per job (unknown key id); the
// finalize_only ticket and reply of that callback still finalize.
TEST_P(PreparedTest, UnknownKeyRunJobBesideFinalizeOnlyJobs) {
  BatcherOptions o = Opts();
  o.deadline = absl::Seconds(3);
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  Job unknown = Encrypt(std::string(20, 'u'), 7);
  unknown.key_id = std::string(32, 'u');
  ASSERT_TRUE(b->dispatcher().Submit(7, std::move(unknown)).ok());
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 3));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(7).status)) << sink_.Get(7).status;
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  EXPECT_EQ(RunCalls(), runs0 + 1);
  EXPECT_EQ(b->stats().finalize_only_rerun, 0u);
}

// A batch cut never splits an exchange's first Run: its prepared jobs are
// released only if its gate's tag holds, and the servers can check that
// only within one request (release_if_ok names a job of the same batch).
// Groups of three (the timestamp, the ticket's and the reply's keystreams)
// queued behind a cut at 4 jobs go in whole.
TEST_P(PreparedTest, ABatchCutNeverSplitsAnExchangesFirstRun) {
  BatcherOptions o = Opts();
  o.max_jobs = 4;
  o.backlog_jobs = 4;
  o.max_inflight = 1;
  o.speculate_max = 1000;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  const size_t runs0 = Runs().size(), n0 = sink_.counts().size();
  for (uint64_t i = 0; i < 5; ++i) {
    std::vector<ItemJob> given{{0, 10 + i, JobOf(plan.items[0], ts)}};
    ASSERT_TRUE(b->dispatcher().Begin(1 + i, plan, std::move(given)).ok());
  }
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 5));
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(sink_.Get(10 + i).status.ok()) << i;
  const std::vector<int> sizes = RunSizes();
  ASSERT_GT(sizes.size(), runs0 + 1);  // the cut happened
  for (size_t k = runs0; k < sizes.size(); ++k) EXPECT_EQ(sizes[k] % 3, 0) << k;
}

// Under load, without early flush (the window): the ticket's and reply's
// FINALIZE goes when the KDC calls SubmitterIdle() without waiting for the
// Run batch in flight (max_inflight 1): a login needs one Run, not two.
TEST_P(PreparedTest, UnderLoadTheFinalizeDoesNotWaitForTheRunInFlight) {
  BatcherOptions o = Opts();
  o.window = absl::Milliseconds(20);
  o.early_flush = false;
  o.max_inflight = 1;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  cluster_.set_run_delay(absl::Seconds(2));  // another login's batch
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  ASSERT_TRUE(b->dispatcher().Submit(10, Encrypt(std::string(100, 'o'), 7)).ok());
  WaitRunCalls(runs0 + 1);
  const absl::Time t0 = absl::Now();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 2));
  EXPECT_LT(sink_.At(6) - t0, absl::Seconds(1));
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  ASSERT_TRUE(sink_.WaitFor(n0 + 3));
  ExpectEncrypted(10, kKeyId, 7, std::string(100, 'o'));
  EXPECT_GT(sink_.At(10), sink_.At(6));
  EXPECT_EQ(RunCalls(), runs0 + 1);  // 5 and 6: FINALIZE only
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// The KDC normally calls SubmitterIdle() after a ticket and a reply;
// without it their FINALIZE still goes within milliseconds, not after the
// coalesce delay.
TEST_P(PreparedTest, FinalizeOnlyJobsGoWithoutSubmitterIdle) {
  auto b = Make(Opts());  // coalesce 2 s
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  const size_t n0 = sink_.counts().size();
  const absl::Time t0 = absl::Now();
  SubmitItemJob(b.get(), 1, 1, 5, JobOf(plan.items[1], ticket_));
  SubmitItemJob(b.get(), 1, 2, 6, JobOf(plan.items[2], reply_));
  ASSERT_TRUE(sink_.WaitFor(n0 + 2, absl::Seconds(5)));
  EXPECT_LT(sink_.At(6) - t0, absl::Milliseconds(1500));
  ExpectEncrypted(5, tgt_id_, 2, ticket_);
  ExpectEncrypted(6, kKeyId, 3, reply_);
  EXPECT_EQ(b->stats().speculative_used, 2u);
}

// Timestamps that do not decrypt (an unauthenticated flood of bad
// pre-authentication) spend the budget: a plan with a gate takes a token
// that only its verified gate gives back, so of 400 bad timestamps only
// speculate_max / 2 (plus the slow refill) bring keystreams along, each
// released by the servers only if its gate holds (release_if_ok: they
// withheld them), and every one counted wasted, none held.
TEST_P(PreparedTest, FailedGatesUseUpTheBudget) {
  BatcherOptions o = Opts();
  o.early_flush = false;
  o.window = absl::Milliseconds(20);
  o.speculate_max = 200;  // budget: 100 exchanges
  auto b = Make(o);
  std::string bad = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  bad[20] ^= 1;
  const Plan plan = AsPlan(bad.size(), false);
  const absl::Time t0 = absl::Now();
  const size_t n0 = sink_.counts().size();
  for (uint64_t i = 0; i < 400; ++i) {
    std::vector<ItemJob> given{{0, 2000 + i, JobOf(plan.items[0], bad)}};
    ASSERT_TRUE(b->dispatcher().Begin(1 + i, plan, std::move(given)).ok());
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ASSERT_TRUE(sink_.WaitFor(n0 + 400));
  for (uint64_t i = 0; i < 400; ++i)
    ASSERT_TRUE(absl::IsDataLoss(sink_.Get(2000 + i).status));
  WaitIdle(b.get());
  const BatcherStats s = b->stats();
  const uint64_t exchanges = s.speculative_encrypts / 2;
  EXPECT_GE(exchanges, 99u);
  EXPECT_LE(static_cast<double>(exchanges), 100 + 32 * secs + 1) << secs;
  EXPECT_EQ(static_cast<uint64_t>(cluster_.conditional_jobs()), s.speculative_encrypts);
  EXPECT_EQ(s.speculative_wasted, s.speculative_encrypts);
  EXPECT_EQ(s.keystreams_held, 0u);
}

// BatcherOptions::speculate off: a plan's first Run is its given jobs
// alone, and each later job a Run of its own (a miss, reason budget). The
// reply, under the timestamp's aes*-ctr-mpc key, goes gated on a copy of
// its timestamp (Planner::Take), as the servers compute a user's reply
// only so (mpc-server engine/user_key_rule.h); the ticket goes ungated.
TEST_P(PreparedTest, WithoutPreparationLaterJobsRunAlone) {
  BatcherOptions o = Opts();
  o.speculate = false;
  ConditionTransport t(&cluster_);
  auto b = std::make_unique<Batcher>(o, &t, &sink_);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), false);
  BeginAs(b.get(), 1, plan, ts);
  EXPECT_EQ(RunSizes().back(), 1);
  EXPECT_EQ(b->stats().speculative_encrypts, 0u);
  auto e = Later(b.get(), 1, plan, {{1, JobOf(plan.items[1], ticket_)},
                                    {2, JobOf(plan.items[2], reply_)}});
  ExpectEncrypted(e[0], tgt_id_, 2, ticket_);
  ExpectEncrypted(e[1], kKeyId, 3, reply_);
  WaitIdle(b.get());
  const std::optional<ExchangeRecord> r = b->dispatcher().End(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->runs, 2u);
  ASSERT_EQ(r->misses.size(), 2u);
  for (const auto& [role, why] : r->misses) EXPECT_EQ(why, Miss::kBudget);
  EXPECT_EQ(t.statuses(), std::vector<pb::JobStatus>{pb::JOB_OK});
}

// Signatures submitted in one callback (of two logins) go as one Sign
// request per server, an item per signature, each under its own pad.
TEST_P(PreparedPadTest, SignaturesOfOneCallbackShareOneRequest) {
  auto b = Make(Opts());
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  BeginAs(b.get(), 2, plan, ts);
  const BatcherStats s0 = b->stats();
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  SubmitItemJob(b.get(), 1, 3, 5, JobOf(plan.items[3], Pac('a')));
  SubmitItemJob(b.get(), 2, 3, 6, JobOf(plan.items[3], Pac('b')));
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(n0 + 2));
  ExpectSigned(5, tgt_id_, 17, Pac('a'));
  ExpectSigned(6, tgt_id_, 17, Pac('b'));
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 1u);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  EXPECT_EQ(s1.sign_rerun, 0u);
  EXPECT_EQ(RunCalls(), runs0);
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(fake().received_signs(p).size(), 1u) << p;
    auto pads = SignedPads(p);
    const std::set<std::pair<std::string, uint64_t>> once(pads.begin(), pads.end());
    EXPECT_EQ(once.size(), pads.size()) << p;  // each pad named once
    for (const std::string& raw : fake().received_signs(p))
      EXPECT_EQ(raw.find(std::string(40, 'a')), std::string::npos);
  }
}

// A pad the servers no longer hold (one restarted, or their TTL passed):
// JOB_PAD_UNAVAILABLE from that server, and the checksum runs as an
// ordinary CHECKSUM at once, with a right tag and its message as shares.
TEST_P(PreparedPadTest, UnavailablePadFallsBackToARun) {
  auto b = Make(Opts());
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  fake().ForgetPads(1);
  const BatcherStats s0 = b->stats();
  auto t = Later(b.get(), 1, plan, {{3, JobOf(plan.items[3], Pac('f'))}});
  ExpectSigned(t[0], tgt_id_, 17, Pac('f'));
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 1u);
  EXPECT_EQ(s1.sign_rerun, 1u);
  EXPECT_EQ(s1.run_requests - s0.run_requests, 1u);
  EXPECT_EQ(s1.failed_batches, 0u);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
  for (int p = 0; p < 3; ++p)
    for (const std::string& raw : fake().received(p))
      EXPECT_EQ(raw.find(std::string(40, 'f')), std::string::npos);
}

// A server whose Sign answer carries tag shares of another total size than
// one per JOB_OK result (surplus or short): the request fails, naming that
// party, and the checksum runs as an ordinary CHECKSUM with a right tag.
TEST_P(PreparedPadTest, TagSharesOfTheWrongSizeFailTheSign) {
  BatcherOptions o = Opts();
  o.chain_signatures = false;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  uint64_t id = 1, reruns = 0;
  for (const int extra : {16, -1}) {
    BeginAs(b.get(), id, plan, ts);
    fake().set_tag_shares_extra(2, extra);
    const BatcherStats s0 = b->stats();
    const char fill = extra > 0 ? 'u' : 'v';
    auto t = Later(b.get(), id++, plan, {{3, JobOf(plan.items[3], Pac(fill))}});
    ExpectSigned(t[0], tgt_id_, 17, Pac(fill));
    const BatcherStats s1 = b->stats();
    EXPECT_EQ(s1.sign_requests - s0.sign_requests, 1u) << extra;
    EXPECT_EQ(s1.sign_rerun, ++reruns) << extra;
    EXPECT_EQ(s1.run_requests - s0.run_requests, 1u) << extra;
    const std::string want = absl::StrCat("party 2 (fake) returned ", 16 + extra,
                                          " bytes of tag shares for 1 JOB_OK results");
    EXPECT_TRUE(sink_.Logged({want})) << want;
    fake().set_tag_shares_extra(2, 0);
    WaitIdle(b.get());
  }
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// A server that adds an error to its share of the chained second tag
// makes only that signature wrong (what the KDC signature's verifier
// refuses); the first is right. One that makes the chain fail (a pad
// forgotten) costs a Run for the first, and the second takes its own way:
// both right, each answered once.
TEST_P(PreparedPadTest, DeviatingServerInAChainOnlyBreaksThatSignature) {
  auto b = Make(Opts());
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  fake().set_chain_tag_share_error(1, std::string(16, '\x5a'));
  auto s = Later(b.get(), 1, plan, {{3, JobOf(plan.items[3], Pac('p'))}});
  const std::string sig = ExpectSigned(s[0], tgt_id_, 17, Pac('p'));
  auto k = Later(b.get(), 1, plan, {{4, JobOf(plan.items[4], sig)}});
  const std::string out = Str(sink_.Get(k[0]).output);
  ASSERT_EQ(out.size(), kSig);
  std::string want = cluster_.Tag(tgt_key_, 17, out.substr(0, 16), sig, true);
  EXPECT_NE(out.substr(16), want);
  for (int i = 0; i < 16; ++i) want[i] ^= 0x5a;
  EXPECT_EQ(out.substr(16), want);  // off by exactly that server's error
  fake().set_chain_tag_share_error(1, "");
  BeginAs(b.get(), 2, plan, ts);
  fake().ForgetPads(2);
  const BatcherStats s0 = b->stats();
  auto s2 = Later(b.get(), 2, plan, {{3, JobOf(plan.items[3], Pac('q'))}});
  const std::string sig2 = ExpectSigned(s2[0], tgt_id_, 17, Pac('q'));
  auto k2 = Later(b.get(), 2, plan, {{4, JobOf(plan.items[4], sig2)}});
  ExpectSigned(k2[0], tgt_id_, 17, sig2);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_rerun - s0.sign_rerun, 1u);
  EXPECT_EQ(s1.chained_used, s0.chained_used);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// With chain_signatures off, the server and KDC signatures are two Sign
// requests, each item under its own pad.
TEST_P(PreparedPadTest, UnchainedKdcSignatureIsARequestOfItsOwn) {
  BatcherOptions o = Opts();
  o.chain_signatures = false;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  const BatcherStats s0 = b->stats();
  auto s = Later(b.get(), 1, plan, {{3, JobOf(plan.items[3], Pac('p'))}});
  const std::string sig = ExpectSigned(s[0], tgt_id_, 17, Pac('p'));
  auto k = Later(b.get(), 1, plan, {{4, JobOf(plan.items[4], sig)}});
  ExpectSigned(k[0], tgt_id_, 17, sig);
  const BatcherStats s1 = b->stats();
  EXPECT_EQ(s1.sign_batches - s0.sign_batches, 2u);
  EXPECT_EQ(s1.sign_requests - s0.sign_requests, 2u);
  EXPECT_EQ(s1.chains_sent, 0u);
  EXPECT_EQ(s1.chained_used, 0u);
  EXPECT_EQ(s1.pads_used - s0.pads_used, 2u);
}

// One deviating server (issue 25, "Signing stays secure"): an error it
// XORs into its share of a verify item's answer makes the answers refuse a
// signature that holds; the Run's VERIFY_CHECKSUM re-checks it, accepts,
// and the security event is logged and counted. A wrong tag stays refused.
// An error in a signing item's share gives a tag off by exactly that error.
TEST_P(PreparedPadTest, DeviatingServerInASignOrVerifyItem) {
  auto b = Make(Opts());
  const Tgt tgt = AsExchange(b.get(), 1, false);
  const size_t lh = tgt.ct.size() - 32;
  Plan tgs;
  tgs.kind = ExchangeKind::kTgs;
  tgs.items = {Given(Item(Role::kHeaderTicket, tgt_id_, tgt.ct.size())),
               Item(Role::kVerifyServer, tgt_id_, lh, kItemGated, 0, 0)};
  const std::string error = "\x01 sixteen bytes";
  uint64_t id = 10;
  auto verify = [&](const std::string& checksum) {
    Begin(b.get(), id, tgs, {{0, tgt.ct}});
    WaitIdle(b.get());
    auto v = Later(b.get(), id++, tgs, {{1, JobOf(tgs.items[1], tgt.pac, checksum)}});
    return sink_.Get(v[0]).status;
  };
  for (int cheat = 0; cheat < 3; ++cheat) {
    fake().set_tag_share_error(cheat, /*sign=*/false, error);
    const BatcherStats s0 = b->stats();
    EXPECT_TRUE(verify(tgt.server_sig).ok()) << cheat;
    const BatcherStats s1 = b->stats();
    EXPECT_EQ(s1.verify_pads_used - s0.verify_pads_used, 1u) << cheat;
    EXPECT_EQ(s1.run_requests - s0.run_requests, 2u) << cheat;  // + re-check
    EXPECT_EQ(s1.verify_disagreed - s0.verify_disagreed, 1u) << cheat;
    EXPECT_TRUE(sink_.Logged({"ring-free verify disagreed with the MPC check"}));
    std::string wrong = tgt.server_sig;
    wrong[20] ^= 1;
    EXPECT_TRUE(absl::IsDataLoss(verify(wrong))) << cheat;
    EXPECT_EQ(b->stats().verify_disagreed, s1.verify_disagreed) << cheat;
    fake().set_tag_share_error(cheat, false, "");
  }
  // A signing item: the tag is off by the error, nothing else changes.
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 2, plan, ts);
  fake().set_tag_share_error(1, /*sign=*/true, error);
  auto s = Later(b.get(), 2, plan, {{3, JobOf(plan.items[3], Pac('k'))}});
  const std::string out = Str(sink_.Get(s[0]).output);
  ASSERT_EQ(out.size(), kSig);
  std::string want = cluster_.Tag(tgt_key_, 17, out.substr(0, 16), Pac('k'), true);
  for (int i = 0; i < 16; ++i) want[i] ^= error[i];
  EXPECT_EQ(out.substr(16), want);
  fake().set_tag_share_error(1, true, "");
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// A Sign request goes at once: not behind the Run in flight (max_inflight
// 1, the ring busy for 2 s), not after the window.
TEST_P(PreparedPadTest, SignDoesNotWaitForTheRunInFlightOrTheWindow) {
  BatcherOptions o = Opts();
  o.window = absl::Seconds(30);
  o.max_inflight = 1;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  cluster_.set_run_delay(absl::Seconds(2));
  const int runs0 = RunCalls();
  const size_t n0 = sink_.counts().size();
  ASSERT_TRUE(b->dispatcher().Submit(9000, Encrypt(std::string(100, 'x'), 7)).ok());
  b->dispatcher().SubmitterIdle();
  WaitRunCalls(runs0 + 1);
  const absl::Time t0 = absl::Now();
  SubmitItemJob(b.get(), 1, 3, 9001, JobOf(plan.items[3], Pac('q')));
  ASSERT_TRUE(sink_.WaitFor(n0 + 1, absl::Seconds(5)));
  EXPECT_LT(sink_.At(9001) - t0, absl::Seconds(1));
  ExpectSigned(9001, tgt_id_, 17, Pac('q'));
  EXPECT_EQ(sink_.counts().count(9000), 0u);  // the Run is still in flight
  EXPECT_EQ(RunCalls(), runs0 + 1);
  ASSERT_TRUE(sink_.WaitFor(n0 + 2, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(9000).status.ok());
}

// Pads unused for speculate_ttl are dropped (the servers forget them after
// their own, longer, TTL) and counted wasted; the signature then runs, a
// miss (reason expired).
TEST_P(PreparedPadTest, UnusedPadsExpire) {
  BatcherOptions o = Opts();
  o.speculate_ttl = absl::Milliseconds(300);
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  for (int i = 0; i < 200 && b->stats().pads_held != 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));  // pruned without any submit
  EXPECT_EQ(b->stats().pads_held, 0u);
  EXPECT_EQ(b->stats().pads_wasted, 2u);
  const BatcherStats s0 = b->stats();
  auto t = Later(b.get(), 1, plan, {{3, JobOf(plan.items[3], Pac('e'))}});
  ExpectSigned(t[0], tgt_id_, 17, Pac('e'));
  EXPECT_EQ(b->stats().sign_requests, s0.sign_requests);
  EXPECT_EQ(b->stats().run_requests, s0.run_requests + 1);
  const std::optional<ExchangeRecord> r = b->dispatcher().End(1);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->misses.size(), 1u);
  EXPECT_EQ(r->misses[0].second, Miss::kExpired);
}

// A server that does not answer a Sign: the checksum fails at the
// deadline, once; a server that is down: it fails at once (its re-run as a
// Run cannot reach the cluster either), once.
TEST_P(PreparedPadTest, SignFailuresCompleteTheJobOnce) {
  BatcherOptions o = Opts();
  o.deadline = absl::Milliseconds(800);
  o.chain_signatures = false;
  auto b = Make(o);
  const std::string ts = Encrypted(b.get(), kKeyId, 1, "a timestamp");
  const Plan plan = AsPlan(ts.size(), true);
  BeginAs(b.get(), 1, plan, ts);
  BeginAs(b.get(), 2, plan, ts);
  const uint64_t used0 = b->stats().pads_used;
  fake().set_hang(2, true);
  const absl::Time t0 = absl::Now();
  auto hung = Later(b.get(), 1, plan, {{3, JobOf(plan.items[3], Pac('h'))}});
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(hung[0]).status)) << sink_.Get(hung[0]).status;
  EXPECT_GE(sink_.At(hung[0]) - t0, absl::Milliseconds(700));
  fake().set_hang(2, false);
  fake().set_down(1, true);
  auto down = Later(b.get(), 2, plan, {{3, JobOf(plan.items[3], Pac('d'))}});
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(down[0]).status)) << sink_.Get(down[0]).status;
  fake().set_down(1, false);
  EXPECT_EQ(b->stats().pads_used - used0, 2u);  // each pad taken once
  absl::SleepFor(absl::Milliseconds(200));
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// MIT 1.21's full-PAC (extended KDC) signature ([MS-PAC] 2.8.5): made and
// checked as the other PAC signatures are, usage 17, at a linked-pad slot of
// its own, the fifth (contract::kPadSlots).
TEST(PlanRoles, FullPacSignatureHasSlotFour) {
  RoleInfo sig, verify;
  ASSERT_TRUE(RoleOf(Role::kSigFull, &sig));
  ASSERT_TRUE(RoleOf(Role::kVerifyFull, &verify));
  EXPECT_EQ(sig.type, pb::JOB_CHECKSUM);
  EXPECT_EQ(verify.type, pb::JOB_VERIFY_CHECKSUM);
  EXPECT_EQ(sig.usage, 17u);
  EXPECT_EQ(verify.usage, 17u);
  EXPECT_EQ(sig.slot, 4);
  EXPECT_EQ(verify.slot, 4);
  EXPECT_LT(4u, contract::kPadSlots);
  EXPECT_STREQ(RoleName(Role::kSigFull), "sig_full");
  EXPECT_STREQ(RoleName(Role::kVerifyFull), "verify_full");
  RoleInfo none;
  EXPECT_FALSE(RoleOf(static_cast<Role>(21), &none));
}

}  // namespace
}  // namespace kmpc::kdc
