// The agreement on the ring (scheduler.h): party 0's workers propose the
// oldest batch and commit it, the followers claim their copies, forward
// the proposal and follow the commit, and all three run the batch on the
// worker's ring connections. The queue the batches wait in is
// scheduler_queue.cc's, the control messages scheduler_control.h's.
#include "service/scheduler.h"

#ifdef KMPC_CHEAT_HARNESS
#include <cstdio>
#include <cstdlib>

#include "cheat.h"
#endif

#include <openssl/rand.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "protocol/verify.h"
#include "net/tls_ring.h"
#include "service/scheduler_control.h"
#include "service/scheduler_queue.h"
#include "util/log.h"

namespace kmpc::service {
namespace {

using namespace scheduling;  // NOLINT: the control messages and the queue's keys

// A batch of at most this many AES blocks (estimated from its jobs) is
// latency-bound: its receives spin (WorkerRing::SpinBatch), the control
// ones of its agreement and the data ones of at most --ring_spin_max_bytes
// (3 KiB by default, ~140 blocks at the ~21 bytes per block per round
// measured for a login's Run). One aes*-cts login is ~72 blocks; a larger
// batch sleeps in every receive, however small its messages.
constexpr uint64_t kSpinControlMaxBlocks = 128;

// A refresh batch (an admin's key reshares: rare, not on a login's path)
// carries items, not jobs, so counting jobs would call every refresh
// small: it is never latency-bound.
bool LatencyBound(BatchKind kind, const std::vector<engine::Job>& jobs) {
  if (kind == BatchKind::kRefresh) return false;
  uint64_t blocks = 0;
  for (const engine::Job& j : jobs)
    blocks += 1 + j.nblocks + (j.data.size() + 15) / 16 + (j.length + 15) / 16;
  return blocks <= kSpinControlMaxBlocks;
}

// A batch that reached the leader this long before a follower was made
// (Scheduler::serving_since_) was sent by the KDC while that follower was
// not serving: it never gets its copy. The KDC sends its three calls at
// once, so the copies arrive within a network round trip of each other;
// the margin also covers the ring transit the age does not count.
constexpr absl::Duration kBeforeStartMargin = absl::Milliseconds(500);

absl::Status NotReceived(int party) {
  return absl::UnavailableError(absl::StrCat(
      "party ", party, " did not receive this batch from the client in time"));
}

// Why a proposal came back without go: the party named in it lacked its
// copy, or refused the batch because its breaker is open (a deviating
// party may claim that falsely: it can fail any batch anyway).
absl::Status NotRun(uint8_t status, int party) {
  if (status == kStatusBreaker) return Breaker::PeerRefusal(party);
  return NotReceived(party);
}

}  // namespace

#ifdef KMPC_CHEAT_HARNESS
// Test-only build (kmpc-mpc-server-cheat, never installed): this party
// deviates through the cheating-server harness (test/cheat.h) as
// KMPC_CHEAT="step:offset:mask[:from_batch[:late[:count]]]" says: in
// every batch from the from_batch-th on (0 = the first this worker runs),
// and in count batches only when count is not 0, the step-th ring message
// it sends (0-based from the batch's start, the agreement's included) gets
// mask XORed into byte offset; late: that round receives before it sends.
// After every batch it logs the sizes of the messages it sent, the map a
// test picks its steps from (sizes are public: they follow from the
// batch's public shape), and which of the messages it received from its
// successor were all zeros (a party gone silent: protocol/verify.cc).
struct CheatPlan {
  uint64_t step = 0, offset = 0, from_batch = 0, count = 0;
  uint8_t mask = 0;
  bool late = false, on = false;
};
CheatPlan ReadCheatPlan() {
  CheatPlan p;
  const char* e = std::getenv("KMPC_CHEAT");
  if (e == nullptr) return p;
  unsigned long long v[6] = {0, 0, 0, 0, 0, 0};
  const int n = std::sscanf(e, "%llu:%llu:%llu:%llu:%llu:%llu", &v[0], &v[1], &v[2],
                            &v[3], &v[4], &v[5]);
  if (n < 3) return p;
  p = {v[0], v[1], v[3], v[5], static_cast<uint8_t>(v[2]), v[4] != 0, true};
  return p;
}

// After a batch: the sizes of the messages the cheating party sent, the
// map a test picks its steps from, and which messages from its successor
// were all zeros (a party gone silent: protocol/verify.cc).
void LogCheatTranscript(const kmpc::testing::CheatingChannel& cheat, uint32_t seq,
                        uint64_t sent_before, size_t received_before) {
  const auto& sizes = cheat.sizes();
  std::string list;
  for (size_t k = sent_before; k < sizes.size() && k < sent_before + 4096; ++k)
    absl::StrAppend(&list, list.empty() ? "" : ",", sizes[k]);
  KMPC_LOG(INFO) << "cheat harness: batch " << seq << " sent " << sizes.size() - sent_before
                 << " ring messages, sizes " << list;
  const auto& zero = cheat.received_zero();
  std::string zeros;
  for (size_t k = received_before; k < zero.size(); ++k)
    if (zero[k]) absl::StrAppend(&zeros, zeros.empty() ? "" : ",", k - received_before);
  KMPC_LOG(INFO) << "cheat harness: batch " << seq << " received "
                 << zero.size() - received_before << " ring messages, all-zero " << zeros;
}
#endif

struct Scheduler::Session {
#ifdef KMPC_CHEAT_HARNESS
  std::unique_ptr<kmpc::testing::CheatingChannel> cheat;
  uint64_t batches = 0;
#endif
  std::unique_ptr<engine::Engine> engine;
  uint64_t generation = 0;
  bool Usable(const WorkerRing& ch) const {
    return engine != nullptr && generation == ch.generation();
  }
};

Scheduler::Scheduler(SchedulerRing* ring, engine::KeyLookup lookup,
                     SchedulerOptions options)
    : ring_(ring), lookup_(std::move(lookup)), options_(options) {
  AskBusy();
}

Scheduler::Scheduler(net::TlsRing* ring, engine::KeyLookup lookup,
                     SchedulerOptions options)
    : owned_ring_(MakeTlsSchedulerRing(ring)),
      ring_(owned_ring_.get()),
      lookup_(std::move(lookup)),
      options_(options) {
  AskBusy();
}

void Scheduler::AskBusy() {
  options_.engine.busy = [this] { return Busy(); };
  // Spinning through the rounds of peers rooms apart takes a core while it
  // lasts: only while this server has one batch in flight, asked at every
  // such wait, so a batch that started alone stops when others arrive.
  for (int w = 0; w < ring_->workers(); ++w)
    ring_->worker(w).SpinThroughWhile([this] { return !Busy(); });
}

Scheduler::~Scheduler() {
  Stop();
  for (int w = 0; w < ring_->workers(); ++w) ring_->worker(w).SpinThroughWhile(nullptr);
}

void Scheduler::Start() {
  for (int w = 0; w < ring_->workers(); ++w) {
    if (party() == 0)
      threads_.emplace_back([this, w] { LeaderLoop(w); });
    else
      threads_.emplace_back([this, w] { FollowerLoop(w); });
  }
}

void Scheduler::Stop() {
  stopping_ = true;
  {
    // Waiters' conditions (Await) are evaluated when mu_ is released.
    absl::MutexLock lock(&mu_);
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

absl::Status Scheduler::RunOnRing(WorkerRing& ch, Session& session,
                                  uint32_t seq, bool new_session, Work& work) {
  const WorkerRing::Counters before = ch.counters();
  ch.BeginBatch(seq, work.deadline);
  if (new_session) {
    session.engine.reset();
#ifdef KMPC_CHEAT_HARNESS
    session.cheat = std::make_unique<kmpc::testing::CheatingChannel>(ch.data());
    auto eng = engine::Engine::Create(*session.cheat, options_.engine);
#else
    auto eng = engine::Engine::Create(ch.data(), options_.engine);
#endif
    if (!eng.ok()) {
      ch.Reset();
      return eng.status();
    }
    session.engine = std::move(*eng);
    session.generation = ch.generation();
  } else if (!session.Usable(ch)) {
    ch.Reset();
    return absl::InternalError("ring: no PRSS session and none was agreed");
  }
  absl::Status ran;
  if (work.kind == BatchKind::kRefresh) {
    // Its own PRSS keys (refresh.h); the session's engine is left as it is.
    auto res = engine::RefreshShares(ch.data(), work.id, seq, work.refresh,
                                     work.refresh_lookup, work.rebuild_party);
    if (res.ok()) work.outcome.refreshed = std::move(*res);
    ran = res.status();
  } else {
#ifdef KMPC_CHEAT_HARNESS
    static const CheatPlan plan = ReadCheatPlan();
    const uint64_t nth = session.batches++;
    if (plan.on && nth >= plan.from_batch &&
        (plan.count == 0 || nth - plan.from_batch < plan.count)) {
      session.cheat->Arm(plan.step, plan.offset, plan.mask, plan.late);
      KMPC_LOG(WARNING) << "cheat harness: corrupting ring message " << plan.step
                        << " of batch " << seq;
    } else {
      session.cheat->Disarm();
    }
    const uint64_t sent_before = session.cheat->sent();
    const size_t received_before = session.cheat->received_zero().size();
#endif
    auto res = session.engine->RunBatch(seq, work.jobs, lookup_);
#ifdef KMPC_CHEAT_HARNESS
    LogCheatTranscript(*session.cheat, seq, sent_before, received_before);
#endif
    if (res.ok()) work.outcome.result = std::move(*res);
    ran = res.status();
  }
  absl::Status flushed =
      ran.ok() ? ch.Flush(std::min(absl::Now() + ring_->recv_timeout(), work.deadline))
               : absl::OkStatus();
  const WorkerRing::Counters after = ch.counters();
  work.outcome.ring_bytes = after.bytes - before.bytes;
  work.outcome.ring_messages = after.messages - before.messages;
  work.outcome.tcp_bytes =
      after.tcp_bytes > before.tcp_bytes ? after.tcp_bytes - before.tcp_bytes : 0;
  if (!ran.ok() || !flushed.ok()) {
    ch.Reset();
    session.engine.reset();
    work.outcome.result = {};
    work.outcome.refreshed.clear();
    return ran.ok() ? flushed : ran;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::LeadBatch(WorkerRing& ch, Session& session,
                                  uint32_t seq, Work& work, bool* again) {
  *again = false;
  // A retry's deadline: the last proposal said which party lacked its copy.
  if (absl::Now() >= work.deadline)
    return work.proposals > 0
               ? NotReceived(work.missing_party)
               : absl::UnavailableError(
                     "the client's deadline passed before the batch was proposed");
  if (absl::Status st = ch.Connect(
          std::min(absl::Now() + options_.connect_timeout, work.deadline));
      !st.ok())
    return absl::UnavailableError(st.message());
  ch.SpinBatch(LatencyBound(work.kind, work.jobs));
  const absl::Time now = absl::Now();
  if (now >= work.deadline)
    return work.proposals > 0
               ? NotReceived(work.missing_party)
               : absl::UnavailableError(
                     "the client's deadline passed while the ring connected");
  Control propose;
  propose.type = kPropose;
  propose.kind = work.kind;
  propose.id = work.id;
  propose.flags = session.Usable(ch) ? 0 : kFlagSession;
  if (work.proposals++ == 0)
    work.retry_until = std::min(now + options_.peer_batch_wait, work.deadline);
  propose.age_ms = Ms(now - work.arrived);
  propose.wait_ms =
      Ms(std::min(options_.proposal_wait, work.retry_until - now));
  if (absl::Status st = ch.SendControl(seq, Encode(propose)); !st.ok()) return st;
  // Each follower waits up to propose.wait_ms for its copy of the batch.
  const absl::Time reply_by =
      std::min(absl::Now() + 2 * absl::Milliseconds(propose.wait_ms) +
                   ring_->recv_timeout(),
               work.deadline);
  absl::StatusOr<Control> back = AwaitReply(ch, seq, propose, reply_by);
  if (!back.ok()) {
    if (absl::IsDataLoss(back.status())) ch.Reset();
    return back.status();
  }
  Control commit = *back;
  commit.type = kCommit;
  commit.flags = (propose.flags | back->flags) & kFlagSession;
  const bool go = back->status == kStatusOk;
  if (go) commit.flags |= kFlagGo;
  // A copy not here yet: propose again after the backoff, the last time at
  // retry_until (with no wait: only copies already there count).
  const absl::Time replied = absl::Now();
  const bool retry = back->status == kStatusMissing && replied < work.retry_until;
  if (retry) {
    work.missing_party = back->status_party;
    work.backoff = work.backoff == absl::ZeroDuration()
                       ? options_.retry_backoff
                       : std::min(2 * work.backoff, options_.retry_backoff_max);
    work.not_before = std::min(replied + work.backoff, work.retry_until);
    commit.flags |= kFlagRetry;
  }
  if (absl::Status st = ch.SendControl(seq, Encode(commit)); !st.ok()) return st;
  if (retry) {
    *again = true;
    return absl::OkStatus();
  }
  if (!go) return NotRun(back->status, back->status_party);
  const absl::Time agreed = absl::Now();
  absl::Status st =
      RunOnRing(ch, session, seq, (commit.flags & kFlagSession) != 0, work);
  KMPC_VLOG(2) << "batch " << IdHex(work.id) << ": schedule "
               << absl::ToDoubleMicroseconds(agreed - work.claimed_at)
               << " us, run " << absl::ToDoubleMicroseconds(absl::Now() - agreed)
               << " us, " << work.outcome.ring_messages << " messages";
  return st;
}

// Every 200 ms of idleness. Connect() re-dials a connection whose peer went
// away and adopts one a restarted peer made, so the ring is whole again
// before the next batch, not during it; and a follower that restarted gets
// our connection (it waits for it) within about 200 ms of its start.
void Scheduler::IdleConnect(WorkerRing& ch) {
  (void)ch.Connect(absl::Now() + absl::Milliseconds(300));
}

void Scheduler::LeaderLoop(int worker) {
  WorkerRing& ch = ring_->worker(worker);
  Session session;
  uint32_t seq = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&seq), sizeof(seq));
  while (!stopping_) {
    std::shared_ptr<Work> work = NextBatch(ch);
    if (work == nullptr) break;  // stopping
    // Queued before the breaker opened: refused now, never proposed.
    if (RefuseIfBreakerOpen(work)) continue;
    bool again = false;
    absl::Status st = LeadBatch(ch, session, ++seq, *work, &again);
    if (again) {
      KMPC_VLOG(1) << "batch " << IdHex(work->id) << ": party " << work->missing_party
                   << " has no copy yet; proposing it again in "
                   << absl::FormatDuration(work->backoff);
      Unclaim(work);
      continue;
    }
    if (!st.ok()) {
      KMPC_LOG(WARNING) << "worker " << worker << ": batch " << IdHex(work->id)
                        << " failed: " << st;
      if (absl::IsUnavailable(st) || absl::IsDataLoss(st)) session.engine.reset();
    }
    Complete(work, st);
  }
  FailQueued();  // whatever is still queued
}

// A proposal a follower received (FollowerLoop): its ring sequence number,
// the control it forwards, when it arrived, this server's copy of the batch
// (null if it has none) and the leader's commit that came back.
struct Scheduler::Proposal {
  uint32_t seq = 0;
  Control fwd;
  bool forwarded = false;  // sent on to the successor
  absl::Time got;
  std::shared_ptr<Work> work;
  Control commit;
};

bool Scheduler::ReceiveProposal(WorkerRing& ch, int worker, Proposal& p,
                                std::optional<Abandoned>& abandoned) {
  if (!ch.InboundReadable(absl::Milliseconds(200))) return false;
  auto msg = ch.RecvControl(&p.seq, absl::Now() + ring_->recv_timeout());
  if (!msg.ok()) return false;  // the channel reset itself
  // The link is ordered: a commit for the abandoned proposal comes before
  // any later proposal, or not at all.
  const std::optional<Abandoned> late = std::exchange(abandoned, std::nullopt);
  auto prop = Decode(*msg);
  if (prop.ok() && prop->type == kCommit && late && p.seq == late->seq) {
    if ((prop->flags & kFlagGo) != 0) {
      // The two others run a batch this party gave up on: they fail fast.
      KMPC_LOG(WARNING) << "worker " << worker << ": go for batch " << IdHex(prop->id)
                        << " after its deadline; dropping the ring";
      ch.Reset();
    } else if (party() == 2 && late->forwarded) {
      (void)ch.SendControl(p.seq, *msg);  // party 1 may still wait for it
    }
    return false;
  }
  if (prop.ok() && prop->type != kPropose)
    prop = absl::DataLossError("ring: expected a batch proposal");
  if (!prop.ok()) {
    KMPC_LOG(WARNING) << "worker " << worker << ": " << prop.status();
    ch.Reset();
    return false;
  }
  p.got = absl::Now();
  p.fwd = *prop;
  return true;
}

void Scheduler::ClaimProposed(Proposal& p) {
  Control& fwd = p.fwd;
  if (fwd.status != kStatusOk) return;
  // A batch from before this server was serving never comes (the
  // constant's comment): only a copy already here is taken.
  const bool before_start = p.got - absl::Milliseconds(fwd.age_ms) <
                            serving_since_ - kBeforeStartMargin;
  const absl::Duration wait =
      before_start ? absl::ZeroDuration()
                   : std::min(options_.peer_batch_wait,
                              absl::Milliseconds(fwd.wait_ms));
  // With the breaker open this server's copy never comes (Enqueue refuses
  // it): answer kStatusBreaker at once, so the leader fails the batch
  // without a retry (BATCH_BREAKER_OPEN), and refuse a copy that arrived
  // before the breaker opened.
  const bool breaker_open = BreakerOpen();
  p.work = Claim(fwd.kind, fwd.id,
                 breaker_open ? absl::InfinitePast() : p.got + wait);
  if (breaker_open) {
    if (p.work != nullptr) Complete(p.work, options_.breaker->RefusalStatus());
    p.work = nullptr;
    fwd.status = kStatusBreaker;
    fwd.status_party = static_cast<uint8_t>(party());
    return;
  }
  if (p.work == nullptr) {
    fwd.status = before_start ? kStatusGone : kStatusMissing;
    fwd.status_party = static_cast<uint8_t>(party());
  }
}

absl::Status Scheduler::ForwardProposal(WorkerRing& ch, Session& session, Proposal& p) {
  Control& fwd = p.fwd;
  // The proposal may have waited in a poll while our predecessor died and
  // came back: re-check the outgoing connection right before forwarding,
  // or the message could vanish into a dead socket.
  absl::Status st = ch.Connect(absl::Now() + options_.connect_timeout);
  if (!session.Usable(ch)) fwd.flags |= kFlagSession;
  const absl::Duration held = absl::Now() - p.got;
  fwd.age_ms = Ms(absl::Milliseconds(fwd.age_ms) + held);
  fwd.wait_ms = Ms(absl::Milliseconds(fwd.wait_ms) - held);
  if (!st.ok()) return st;
  ch.SpinBatch(p.work != nullptr && LatencyBound(p.work->kind, p.work->jobs));
  if (absl::Status sent = ch.SendControl(p.seq, Encode(fwd)); !sent.ok()) return sent;
  p.forwarded = true;
  uint32_t cseq = 0;
  absl::Time until =
      absl::Now() + options_.peer_batch_wait + ring_->recv_timeout();
  if (p.work) until = std::min(until, p.work->deadline);
  auto cmsg = ch.RecvControl(&cseq, until);
  if (!cmsg.ok()) return cmsg.status();
  absl::StatusOr<Control> commit = Decode(*cmsg);
  if (commit.ok() && (commit->type != kCommit || cseq != p.seq ||
                      commit->id != fwd.id || commit->kind != fwd.kind))
    commit = absl::DataLossError("ring: commit for another batch");
  if (!commit.ok()) {
    ch.Reset();
    return commit.status();
  }
  p.commit = *commit;
  // Party 2 passes the commit on to party 1; party 1's prev is the leader.
  if (party() == 2) return ch.SendControl(p.seq, Encode(p.commit));
  return absl::OkStatus();
}

void Scheduler::FollowCommit(WorkerRing& ch, Session& session, int worker, Proposal& p) {
  const Control& commit = p.commit;
  const bool go = (commit.flags & kFlagGo) != 0;
  if (!go) {
    if (p.work == nullptr) return;
    if ((commit.flags & kFlagRetry) != 0)
      Unclaim(p.work);  // for the leader's next proposal of it
    else if (commit.status == kStatusOk)  // AbandonProposal
      Complete(p.work, absl::UnavailableError(
                           "party 0 gave up on this batch before every party "
                           "answered (its client's deadline, or the ring failed)"));
    else
      Complete(p.work, NotRun(commit.status, commit.status_party));
    return;
  }
  if (p.work == nullptr) {  // cannot happen: we would have said "missing"
    ch.Reset();
    return;
  }
  absl::Status st =
      RunOnRing(ch, session, p.seq, (commit.flags & kFlagSession) != 0, *p.work);
  if (!st.ok())
    KMPC_LOG(WARNING) << "worker " << worker << ": batch " << IdHex(p.work->id)
                      << " failed: " << st;
  Complete(p.work, st);
}

void Scheduler::FollowerLoop(int worker) {
  WorkerRing& ch = ring_->worker(worker);
  Session session;
  std::optional<Abandoned> abandoned;
  absl::Time last_warn = absl::Now();  // peers may still be starting
  while (!stopping_) {
    if (absl::Status st = ch.Connect(absl::Now() + absl::Seconds(1)); !st.ok()) {
      if (absl::Now() - last_warn > absl::Seconds(10)) {
        KMPC_LOG(WARNING) << "worker " << worker << ": " << st.message();
        last_warn = absl::Now();
      }
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    Proposal p;
    if (!ReceiveProposal(ch, worker, p, abandoned)) continue;
    ClaimProposed(p);
    if (absl::Status st = ForwardProposal(ch, session, p); !st.ok()) {
      abandoned = Abandoned{p.seq, p.forwarded};
      session.engine.reset();
      if (p.work) Complete(p.work, absl::UnavailableError(st.message()));
      continue;
    }
    FollowCommit(ch, session, worker, p);
  }
}

}  // namespace kmpc::service
