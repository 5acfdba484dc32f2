#include "service/scheduler.h"

#ifdef KMPC_CHEAT_HARNESS
#include <cstdio>
#include <cstdlib>

#include "cheat.h"
#endif

#include <openssl/rand.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "protocol/verify.h"
#include "net/tls_ring.h"
#include "util/log.h"

namespace kmpc::service {
namespace {

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

// Control message (32 bytes):
//   0 type (kPropose / kCommit)   1 kind   2 status   3 status party
//   4 flags (bit 0: need / new PRSS session; bit 1: go, COMMIT only;
//     bit 2: retry, COMMIT without go only: the leader proposes the batch
//     again, the followers keep their copies for it)
//   5..7 zero   8..23 batch id
//   24..27 age_ms (PROPOSE): how long ago the batch reached the leader,
//     plus the time each follower that forwarded it held it
//   28..31 wait_ms (PROPOSE): how long a follower may wait for its copy
//     (SchedulerOptions::proposal_wait, and the rest of the batch's retry
//     time at most, less the time the followers before it held it); both
//     big-endian, 0 in a COMMIT
// Status: kStatusMissing, the copy has not arrived (yet): the leader may
// retry; kStatusGone, it never will (kBeforeStartMargin): it fails at once;
// kStatusBreaker, that party's deviation breaker is open (breaker.h): it
// fails at once, as BATCH_BREAKER_OPEN on every server.
enum : uint8_t { kPropose = 1, kCommit = 2 };
enum : uint8_t { kStatusOk = 0, kStatusMissing = 1, kStatusGone = 2, kStatusBreaker = 3 };
enum : uint8_t { kFlagSession = 1, kFlagGo = 2, kFlagRetry = 4 };
constexpr size_t kControlSize = 8 + kBatchIdSize + 8;

// A batch that reached the leader this long before a follower was made
// (Scheduler::serving_since_) was sent by the KDC while that follower was
// not serving: it never gets its copy. The KDC sends its three calls at
// once, so the copies arrive within a network round trip of each other;
// the margin also covers the ring transit the age does not count.
constexpr absl::Duration kBeforeStartMargin = absl::Milliseconds(500);

struct Control {
  uint8_t type = 0;
  BatchKind kind = BatchKind::kRun;
  uint8_t status = kStatusOk;
  uint8_t status_party = 0;
  uint8_t flags = 0;
  BatchId id{};
  uint32_t age_ms = 0;
  uint32_t wait_ms = 0;
};

void PutU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 |
         uint32_t{p[3]};
}

// Whether ring sequence number a precedes b: a worker's numbers count up
// from a random start and wrap, so they compare as serial numbers (RFC
// 1982, section 3.2, for 32 bits).
bool SeqBefore(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(b - a) > 0;
}

// d in ms, clamped to [0, 2^32 - 1].
uint32_t Ms(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<uint32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d), UINT32_MAX));
}

std::vector<uint8_t> Encode(const Control& c) {
  std::vector<uint8_t> out(kControlSize, 0);
  out[0] = c.type;
  out[1] = static_cast<uint8_t>(c.kind);
  out[2] = c.status;
  out[3] = c.status_party;
  out[4] = c.flags;
  std::memcpy(out.data() + 8, c.id.data(), kBatchIdSize);
  PutU32(out.data() + 8 + kBatchIdSize, c.age_ms);
  PutU32(out.data() + 12 + kBatchIdSize, c.wait_ms);
  return out;
}

// The leader's abort of a proposal whose reply it stopped waiting for
// (the batch's deadline passed, or the ring failed): a COMMIT with neither
// go nor retry and status OK, which the followers take as "the leader gave
// up" (FollowCommit). A follower still waiting for the commit is released
// at once; one that gave up too drops it (ReceiveProposal). Best effort:
// on a broken link there is no one to tell.
void AbandonProposal(WorkerRing& ch, uint32_t seq, const Control& propose) {
  if (!ch.connected()) return;
  Control abort = propose;
  abort.type = kCommit;
  abort.status = kStatusOk;
  abort.status_party = 0;
  abort.flags = 0;
  abort.age_ms = abort.wait_ms = 0;
  (void)ch.SendControl(seq, Encode(abort));
}

absl::StatusOr<Control> Decode(const std::vector<uint8_t>& in) {
  if (in.size() != kControlSize)
    return absl::DataLossError("ring: malformed scheduling message (size)");
  Control c;
  c.type = in[0];
  c.status = in[2];
  c.status_party = in[3];
  c.flags = in[4];
  const bool bad_retry =
      (c.flags & kFlagRetry) != 0 && (c.type != kCommit || (c.flags & kFlagGo) != 0);
  const bool bad_kind = in[1] != static_cast<uint8_t>(BatchKind::kRun) &&
                        in[1] != static_cast<uint8_t>(BatchKind::kRefresh);
  if ((c.type != kPropose && c.type != kCommit) || bad_kind ||
      c.status > kStatusBreaker || c.status_party > 2 || (c.flags & ~7) != 0 ||
      bad_retry || in[5] != 0 || in[6] != 0 || in[7] != 0)
    return absl::DataLossError("ring: malformed scheduling message");
  c.kind = static_cast<BatchKind>(in[1]);
  std::memcpy(c.id.data(), in.data() + 8, kBatchIdSize);
  c.age_ms = GetU32(in.data() + 8 + kBatchIdSize);
  c.wait_ms = GetU32(in.data() + 12 + kBatchIdSize);
  return c;
}

// The leader's wait for the reply to its proposal `seq` (its PROPOSE come
// back around the ring). A receive that fails abandons the proposal
// (AbandonProposal) and returns that status; a message that is not the
// reply is DATA_LOSS (the caller drops the link). The reply to an earlier
// proposal of this worker that came after the leader had given it up is
// skipped: the link is ordered, so it comes before this proposal's reply,
// and it must not fail this batch.
absl::StatusOr<Control> AwaitReply(WorkerRing& ch, uint32_t seq,
                                   const Control& propose, absl::Time reply_by) {
  for (;;) {
    uint32_t rseq = 0;
    auto reply = ch.RecvControl(&rseq, reply_by);
    if (!reply.ok()) {
      AbandonProposal(ch, seq, propose);
      return reply.status();
    }
    absl::StatusOr<Control> back = Decode(*reply);
    if (back.ok() && back->type == kPropose && SeqBefore(rseq, seq)) {
      KMPC_VLOG(1) << "dropped a late reply to abandoned proposal " << rseq;
      continue;
    }
    if (back.ok() && (back->type != kPropose || rseq != seq ||
                      back->id != propose.id || back->kind != propose.kind))
      back = absl::DataLossError("ring: scheduling message for another batch");
    return back;
  }
}

std::string Key(BatchKind kind, const BatchId& id) {
  std::string k(1, static_cast<char>(kind));
  k.append(reinterpret_cast<const char*>(id.data()), id.size());
  return k;
}

std::string IdHex(const BatchId& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}

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

// The BatchErrorCode of a batch that failed on the ring: the engine's
// whole-batch refusals (engine.h, RunBatch) and the ring's failures.
kmpc::v1::BatchErrorCode FailureCode(const absl::Status& st) {
  if (Breaker::IsRefusal(st)) return kmpc::v1::BATCH_BREAKER_OPEN;
  if (protocol::IsIntegrityFailure(st)) return kmpc::v1::BATCH_INTEGRITY_CHECK_FAILED;
  switch (st.code()) {
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
      return kmpc::v1::BATCH_PEERS_DISAGREE;
    case absl::StatusCode::kInvalidArgument:
      return kmpc::v1::BATCH_TOO_LARGE;
    case absl::StatusCode::kInternal:
      return kmpc::v1::BATCH_INTERNAL;
    default:  // UNAVAILABLE, DATA_LOSS, DEADLINE_EXCEEDED: the ring
      return kmpc::v1::BATCH_RING_UNAVAILABLE;
  }
}

}  // namespace

struct Scheduler::Work {
  BatchKind kind;
  BatchId id;
  std::vector<engine::Job> jobs;
  std::vector<engine::RefreshItem> refresh;  // kRefresh
  engine::RefreshLookup refresh_lookup;
  int rebuild_party = engine::kNoRebuild;  // kRefresh
  absl::Time arrived;
  absl::Time deadline = absl::InfiniteFuture();  // the client's
  absl::Time claimed_at;
  bool claimed = false;
  // Party 0's retries (scheduler.h, COMMIT): proposals made so far, when
  // the last may be made (peer_batch_wait after the first, the deadline at
  // most), the next's earliest time and the backoff before it.
  int proposals = 0;
  absl::Time retry_until = absl::InfiniteFuture();
  absl::Time not_before = absl::InfinitePast();
  absl::Duration backoff = absl::ZeroDuration();
  int missing_party = 0;  // in the last proposal's reply
  bool done = false;
  BatchOutcome outcome;
};

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
    : ring_(ring), lookup_(std::move(lookup)), options_(options) {}

Scheduler::Scheduler(net::TlsRing* ring, engine::KeyLookup lookup,
                     SchedulerOptions options)
    : owned_ring_(MakeTlsSchedulerRing(ring)),
      ring_(owned_ring_.get()),
      lookup_(std::move(lookup)),
      options_(options) {}

Scheduler::~Scheduler() { Stop(); }

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

BatchOutcome Scheduler::Submit(BatchKind kind, const BatchId& id,
                               std::vector<engine::Job> jobs,
                               absl::Time deadline) {
  auto work = std::make_shared<Work>();
  work->kind = kind;
  work->id = id;
  work->jobs = std::move(jobs);
  work->deadline = deadline;
  return Enqueue(std::move(work));
}

BatchOutcome Scheduler::SubmitRefresh(const BatchId& id,
                                      std::vector<engine::RefreshItem> items,
                                      engine::RefreshLookup lookup,
                                      int rebuild_party) {
  auto work = std::make_shared<Work>();
  work->kind = BatchKind::kRefresh;
  work->id = id;
  work->refresh = std::move(items);
  work->refresh_lookup = std::move(lookup);
  work->rebuild_party = rebuild_party;
  return Enqueue(std::move(work));
}

BatchOutcome Scheduler::Enqueue(std::shared_ptr<Work> work) {
  work->arrived = absl::Now();
  const BatchId& id = work->id;
  const std::string key = Key(work->kind, id);
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    work->outcome.status = absl::UnavailableError("server is shutting down");
    work->outcome.error = kmpc::v1::BATCH_SHUTTING_DOWN;
    return std::move(work->outcome);
  }
  if (BreakerOpen()) {
    work->outcome.status = options_.breaker->RefusalStatus();
    work->outcome.error = kmpc::v1::BATCH_BREAKER_OPEN;
    return std::move(work->outcome);
  }
  if (pending_.count(key) != 0) {
    work->outcome.status = absl::AlreadyExistsError(absl::StrCat(
        "batch ", IdHex(id), " is already waiting on this server"));
    work->outcome.error = kmpc::v1::BATCH_MALFORMED;
    return std::move(work->outcome);
  }
  pending_[key] = work;
  if (party() == 0) queue_.push_back(work);
  const bool client_first =
      work->deadline < work->arrived + options_.schedule_timeout;
  const absl::Time deadline =
      std::min(work->arrived + options_.schedule_timeout, work->deadline);
  // A follower's copy may be claimed, then put back for a retry (Unclaim):
  // the deadline holds whenever it is not claimed.
  // The waits name their condition (absl::Mutex re-evaluates it when the
  // mutex is released), so this thread wakes only when its own batch moved,
  // not at every other batch's arrival, claim or completion.
  Work* const w = work.get();
  auto claimed_or_done = [this, w] { return w->done || w->claimed || stopping_; };
  auto unclaimed_or_done = [w] { return w->done || !w->claimed; };
  while (!work->done) {
    if (work->claimed) {
      mu_.Await(absl::Condition(&unclaimed_or_done));
      continue;
    }
    // Stop() ends this wait: no worker will claim the batch any more.
    const bool timed_out =
        !stopping_ &&
        !mu_.AwaitWithDeadline(absl::Condition(&claimed_or_done), deadline);
    if ((timed_out || stopping_) && !work->claimed && !work->done) {
      auto it = pending_.find(key);
      if (it != pending_.end() && it->second == work) pending_.erase(it);
      for (auto q = queue_.begin(); q != queue_.end(); ++q)
        if (*q == work) {
          queue_.erase(q);
          break;
        }
      work->outcome.status =
          stopping_ ? absl::UnavailableError("server is shutting down")
                    : absl::UnavailableError(absl::StrCat(
                          "batch was not scheduled on the ring within ",
                          absl::FormatDuration(deadline - work->arrived),
                          client_first ? " (the client's deadline)" : "",
                          " (a peer server is down, or did not receive the batch)"));
      work->outcome.error = stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN
                                      : kmpc::v1::BATCH_RING_UNAVAILABLE;
      return std::move(work->outcome);
    }
  }
  return std::move(work->outcome);
}

std::shared_ptr<Scheduler::Work> Scheduler::Claim(BatchKind kind,
                                                  const BatchId& id,
                                                  absl::Time deadline) {
  const std::string key = Key(kind, id);
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      std::shared_ptr<Work> w = it->second;
      pending_.erase(it);
      w->claimed = true;
      w->claimed_at = absl::Now();
      return w;
    }
    auto arrived = [this, &key] {
      mu_.AssertReaderHeld();
      return stopping_ || pending_.count(key) != 0;
    };
    if (stopping_ ||
        !mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) {
      if (absl::Now() >= deadline || stopping_) return nullptr;
    }
  }
}

void Scheduler::Complete(const std::shared_ptr<Work>& work, absl::Status status) {
  // Counted once per failed batch, on each server that detected it (the
  // deviating server reports nothing); outside mu_ (the breaker may write
  // its state file).
  if (options_.breaker != nullptr && protocol::IsIntegrityFailure(status))
    options_.breaker->RecordDeviation();
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    work->outcome.status = status;
    work->outcome.error =
        stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN : FailureCode(status);
  }
  work->outcome.queue_time = work->claimed_at - work->arrived;
  work->outcome.run_time = absl::Now() - work->claimed_at;
  work->done = true;
}

bool Scheduler::BreakerOpen() const {
  return options_.breaker != nullptr && options_.breaker->open();
}

bool Scheduler::RefuseIfBreakerOpen(const std::shared_ptr<Work>& work) {
  if (!BreakerOpen()) return false;
  Complete(work, options_.breaker->RefusalStatus());
  return true;
}

void Scheduler::Unclaim(const std::shared_ptr<Work>& work) {
  absl::MutexLock lock(&mu_);
  const std::string key = Key(work->kind, work->id);
  if (party() == 0) {
    // Stays claimed for Enqueue (queue_time counts to its first proposal);
    // a leader loop that stops fails whatever is in queue_.
    if (pending_.count(key) == 0) pending_[key] = work;
    queue_.push_front(work);  // the oldest: its place in the queue
  } else if (stopping_ || pending_.count(key) != 0) {
    // Shutting down, or the client sent the batch again meanwhile (that
    // copy is the one proposed next).
    work->done = true;
    work->outcome.status =
        stopping_ ? absl::UnavailableError("server is shutting down")
                  : absl::AlreadyExistsError(absl::StrCat(
                        "batch ", IdHex(work->id), " was sent to this server again"));
    work->outcome.error =
        stopping_ ? kmpc::v1::BATCH_SHUTTING_DOWN : kmpc::v1::BATCH_MALFORMED;
  } else {
    work->claimed = false;
    pending_[key] = work;
  }
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
    std::shared_ptr<Work> work;
    {
      absl::MutexLock lock(&mu_);
      // The oldest batch not waiting for a retry's backoff.
      while (!stopping_) {
        const absl::Time now = absl::Now();
        absl::Time wake = now + absl::Milliseconds(200);
        auto ready = queue_.end();
        for (auto q = queue_.begin(); q != queue_.end(); ++q) {
          if ((*q)->not_before <= now) {
            ready = q;
            break;
          }
          wake = std::min(wake, (*q)->not_before);
        }
        if (ready != queue_.end()) {
          work = *ready;
          queue_.erase(ready);
          break;
        }
        const bool idle = queue_.empty();
        // Woken only when a batch is ready for it (one worker per batch:
        // absl::Mutex hands the lock to one waiter whose condition holds,
        // and once that one took the batch the others' is false again).
        auto ready_batch = [this] {
          mu_.AssertReaderHeld();
          if (stopping_) return true;
          const absl::Time t = absl::Now();
          for (const auto& q : queue_)
            if (q->not_before <= t) return true;
          return false;
        };
        if (!mu_.AwaitWithDeadline(absl::Condition(&ready_batch), wake) &&
            idle && queue_.empty()) {
          mu_.Unlock();
          IdleConnect(ch);
          mu_.Lock();
        }
      }
      if (work == nullptr) break;  // stopping
      auto it = pending_.find(Key(work->kind, work->id));
      if (it != pending_.end() && it->second == work) pending_.erase(it);
      if (!work->claimed) {
        work->claimed = true;
        work->claimed_at = absl::Now();
      }
    }
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
  // Fail whatever is still queued.
  absl::MutexLock lock(&mu_);
  for (auto& w : queue_) {
    w->claimed = w->done = true;
    w->outcome.status = absl::UnavailableError("server is shutting down");
    w->outcome.error = kmpc::v1::BATCH_SHUTTING_DOWN;
  }
  queue_.clear();
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
