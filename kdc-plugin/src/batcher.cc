#include "batcher.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <syslog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <tuple>
#include <utility>

#include <google/protobuf/arena.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kmpc::kdc {
namespace {
// A job the servers did not compute (its key, or the job itself): neither
// JOB_OK nor an integrity verdict. Nothing is revealed for it.
bool JobFailed(const kmpc::v1::JobResult& r) {
  return r.status() != kmpc::v1::JOB_OK &&
         r.status() != kmpc::v1::JOB_INTEGRITY_FAILED;
}
}  // namespace

namespace pb = kmpc::v1;

namespace {

constexpr int kParties = 3;
// A batch the servers refuse because of one job (unknown key id, malformed
// job) is re-run without that job at most this many times.
constexpr int kMaxAttempts = 3;

std::string RandomId() {
  std::string id(16, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), 16) != 1) {
    // Batch ids need only be fresh, not secret; fall back on a counter.
    static std::atomic<uint64_t> n{0};
    uint64_t v = ++n;
    std::memcpy(id.data(), &v, sizeof(v));
  }
  return id;
}

bool IsUnreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsCancelled(s) || absl::IsUnknown(s) || absl::IsInternal(s) ||
         absl::IsUnauthenticated(s) || absl::IsPermissionDenied(s);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Key usages (RFC 4120 7.5.1) the speculative keystream is about.
constexpr uint32_t kUsageEncTimestamp = 1;
constexpr uint32_t kUsageTicket = 2;
constexpr uint32_t kUsageAsRepPart = 3;
// Plaintexts longer than this are not speculated on, nor learnt from.
constexpr size_t kSpecMaxBytes = 2048;
// FINALIZE-only batches of speculated jobs in flight at once; and how long
// such jobs wait for a Kick() (the KDC kicks when the callback that
// submitted them returns) before they go anyway.
constexpr int kMaxPreInflight = 4;
constexpr absl::Duration kPreFallback = absl::Milliseconds(5);
// Speculation budget: making a speculative group takes a token, and each
// of its two keystreams gives half of it back when a ticket or reply uses
// it. A group whose timestamp did not decrypt, or which expired unused, was
// AES work for nothing, and its token stays spent. Tokens also come back
// at kSpecRefillPerSec, up to speculate_max / 2 (the groups that may be
// held anyway), and no group is made without one. A flood of AS-REQs with
// bad timestamps (unauthenticated) thus gets at most speculate_max / 2
// groups plus kSpecRefillPerSec per second of ticket and reply AES work
// out of the cluster, then only its timestamps' own.
constexpr double kSpecRefillPerSec = 32;
// Lengths learnt from the last this many ENCRYPT jobs of a usage.
constexpr size_t kSpecLearn = 64;

}  // namespace

// A step's request and its three responses live on one protobuf arena:
// a response holds a share pair per job (hundreds of small strings), and
// allocating and freeing them one by one, on the gRPC threads, among the
// KDC's own allocations cost the KDC about a tenth of its CPU per login
// under load (glibc's bins and consolidation). Blocks stay below 64 KB,
// glibc's threshold for consolidating on free. The shares are still wiped
// (ScrubRun and the like) before the arena goes.
google::protobuf::ArenaOptions StepArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 32768;
  return o;
}

// kParties messages on an arena, used like std::array<M, kParties>.
template <class M>
class OnArena {
 public:
  explicit OnArena(google::protobuf::Arena* arena) {
    for (auto& m : p_) m = google::protobuf::Arena::CreateMessage<M>(arena);
  }
  M& operator[](size_t i) { return *p_[i]; }
  const M& operator[](size_t i) const { return *p_[i]; }
  class It {
   public:
    explicit It(M* const* q) : q_(q) {}
    M& operator*() const { return **q_; }
    It& operator++() { ++q_; return *this; }
    bool operator!=(const It& o) const { return q_ != o.q_; }
   private:
    M* const* q_;
  };
  It begin() const { return It(p_.data()); }
  It end() const { return It(p_.data() + p_.size()); }

 private:
  std::array<M*, 3> p_;
};

// An ENCRYPT job whose keystream came from a speculative ENCRYPT of an
// earlier batch: only FINALIZE remains.
struct Prerun {
  std::string run_batch_id;
  uint64_t job_id = 0;
  std::string ctr0;
  std::string ciphertext;  // public
};

struct Queued {
  uint64_t token = 0;
  Job job;
  uint64_t blocks = 0;
  absl::Time enqueued;
  bool spec = false;       // a speculative ENCRYPT: no caller, no delivery
  uint64_t spec_group = 0; // the timestamp DECRYPT and its speculative jobs
  std::shared_ptr<Prerun> pre;
};

// A speculative keystream waiting for its ENCRYPT job.
struct Spec {
  std::string key_id;
  uint32_t usage = 0;
  uint64_t group = 0;
  std::string run_batch_id;
  uint64_t job_id = 0;
  std::string ctr0;
  SecureBytes keystream;
  absl::Time expires;
};

class BatchRun;

struct Batcher::State {
  BatcherOptions options;
  Transport* transport = nullptr;

  std::mutex mu;  // guards everything below up to sink_mu
  std::condition_variable cv;
  bool stopping = false;
  std::deque<Queued> queue;
  uint64_t queued_blocks = 0;
  int inflight = 0;
  bool kicked = false;  // Kick() since the last batch emptied the queue
  // ENCRYPT jobs whose keystream a speculative job already gave: FINALIZE
  // only, no ring work, so they do not wait for the Run batches in flight
  // (max_inflight); they go at the next Kick() (or kPreFallback).
  std::deque<Queued> pre_queue;
  int pre_inflight = 0;
  bool pre_kicked = false;
  std::set<std::shared_ptr<BatchRun>> active;
  BatcherStats stats;
  uint64_t next_seq = 1;
  // Speculative keystream (BatcherOptions::speculate).
  std::deque<Spec> specs;
  // Speculative ENCRYPT jobs queued or in flight (not yet completed):
  // specs + these stay within options.speculate_max.
  size_t spec_pending = 0;
  // Learnt from AS replies only: a ticket (usage 2) submitted right next
  // to a reply part (usage 3, AS-REP only; a TGS-REP's is usage 8/9), so a
  // TGS-REQ's service ticket changes neither the key nor the lengths.
  std::string ticket_key_id;          // the krbtgt key of the last AS reply
  std::deque<size_t> lens[2];         // last plaintext lengths, usage 2 / 3
  uint64_t next_group = 1;
  uint64_t submits = 0;               // Submit calls, for the pairing
  uint64_t last_u2_at = 0, last_u3_at = 0;
  std::string last_u2_key;
  size_t last_u2_len = 0;

  void LearnPairLocked() {
    auto push = [](std::deque<size_t>& l, size_t n) {
      l.push_back(n);
      if (l.size() > kSpecLearn) l.pop_front();
    };
    ticket_key_id = last_u2_key;
    push(lens[0], last_u2_len);
    last_u2_at = last_u3_at = 0;  // one pair, learnt once
  }

  // The keystream to speculate for a usage: long enough for every recent
  // plaintext length up to one block past the 7/8 quantile's (not the
  // longest: one client's oversized reply, e.g. many addresses, must not
  // make every login's keystream longer), rounded up to blocks; 0 while
  // nothing was learnt. A longer plaintext runs as an ordinary ENCRYPT.
  // The extra block is paid only when a recent length needs it: lengths
  // that vary by a few bytes (names, nonces) mostly fit in the quantile's
  // own last block, and a blind extra block was ~6% of a login's AES work.
  size_t SpecBytesLocked(uint32_t usage) const {
    const auto& l = lens[usage == kUsageTicket ? 0 : 1];
    if (l.empty()) return 0;
    std::vector<size_t> v(l.begin(), l.end());
    const size_t k = (v.size() - 1) * 7 / 8;
    std::nth_element(v.begin(), v.begin() + k, v.end());
    const size_t m = v[k];
    if (m == 0) return 0;
    const auto round_up = [](size_t n) { return (n + kBlock - 1) / kBlock * kBlock; };
    const size_t limit = round_up(m) + kBlock;
    size_t cover = m;
    for (size_t n : l)
      if (n <= limit) cover = std::max(cover, n);
    return round_up(cover);
  }
  // Speculation budget (kSpecRefillPerSec); set by the Batcher.
  double spec_tokens = 0;
  double spec_burst = 0;
  absl::Time spec_tokens_at;
  // Takes a token for a new group; false (and none taken) without one.
  bool TakeSpecTokenLocked(absl::Time now) {
    // A wall-clock step backwards refills nothing (and takes nothing).
    const double dt = std::max(0.0, absl::ToDoubleSeconds(now - spec_tokens_at));
    if (spec_tokens_at != absl::Time())
      spec_tokens = std::min(spec_burst, spec_tokens + kSpecRefillPerSec * dt);
    spec_tokens_at = now;
    if (spec_tokens < 1) return false;
    spec_tokens -= 1;
    return true;
  }
  void SpecUsedLocked() {
    spec_tokens = std::min(spec_burst, spec_tokens + 0.5);
  }
  // Drops expired keystreams (SecureBytes wipes them) from the front:
  // they are held in the order of their Runs, i.e. (almost) of expiry; one
  // behind a later-expiring one waits at most the difference, and is
  // never used meanwhile (Submit checks). Returns the next expiry,
  // InfiniteFuture when none is held.
  absl::Time PruneSpecsLocked(absl::Time now) {
    while (!specs.empty() && specs.front().expires <= now) {
      ++stats.spec_wasted;
      specs.pop_front();
    }
    return specs.empty() ? absl::InfiniteFuture() : specs.front().expires;
  }
  void AddSpecs(std::vector<Spec> add) {
    {
      std::lock_guard<std::mutex> l(mu);
      // After Stop() nothing would prune them: `add` goes out of scope
      // here and SecureBytes wipes the keystreams.
      if (stopping) return;
      for (Spec& s : add) {
        if (specs.size() < options.speculate_max)
          specs.push_back(std::move(s));
        else
          ++stats.spec_wasted;  // AES work for nothing; its token stays spent
      }
    }
    cv.notify_all();  // the dispatcher prunes them when they expire
  }

  // Deliveries pass this gate; Stop() closes it so that nothing reaches the
  // sink after Stop returns.
  std::mutex sink_mu;
  bool closed = false;
  Sink* sink = nullptr;

  void Deliver(Result r) {
    std::lock_guard<std::mutex> l(sink_mu);
    if (!closed) sink->Deliver(std::move(r));
  }
  void Log(int level, std::string line) {
    std::lock_guard<std::mutex> l(sink_mu);
    if (!closed) sink->Log(level, std::move(line));
  }
  void Finished(const std::shared_ptr<BatchRun>& run, bool pre_only,
                uint64_t blocks, bool failed) {
    {
      std::lock_guard<std::mutex> l(mu);
      active.erase(run);
      --(pre_only ? pre_inflight : inflight);
      stats.blocks += blocks;
      if (failed) ++stats.failed_batches;
    }
    cv.notify_all();
  }
};

// One batch on its way through Run (and Finalize). Shared by the transport
// callbacks; every job completes exactly once (Complete checks `done`).
class BatchRun : public std::enable_shared_from_this<BatchRun> {
 public:
  BatchRun(std::shared_ptr<Batcher::State> state, uint64_t seq,
           std::vector<Queued> jobs, absl::Time start, bool pre_only = false)
      : state_(std::move(state)),
        seq_(seq),
        pre_only_(pre_only),
        start_(start),
        deadline_(start + state_->options.deadline) {
    entries_.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      entries_[i].token = jobs[i].token;
      entries_[i].job = std::move(jobs[i].job);
      entries_[i].enqueued = jobs[i].enqueued;
      entries_[i].spec = jobs[i].spec;
      entries_[i].spec_group = jobs[i].spec_group;
      if (jobs[i].pre) {
        Entry& e = entries_[i];
        e.pre = true;
        e.ctr0 = std::move(jobs[i].pre->ctr0);
        e.ciphertext = std::move(jobs[i].pre->ciphertext);
        e.pre_run_batch_id = std::move(jobs[i].pre->run_batch_id);
        e.pre_job_id = jobs[i].pre->job_id;
      }
    }
    open_ = entries_.size();
  }

  absl::Time deadline() const { return deadline_; }

  void Start() {
    std::vector<size_t> run, pre;
    for (size_t i = 0; i < entries_.size(); ++i)
      (entries_[i].pre ? pre : run).push_back(i);
    // The jobs whose keystream a speculative ENCRYPT already gave go
    // straight to FINALIZE, in a request of their own: the servers take a
    // request's ENCRYPT states all or nothing, and one of these may be gone
    // (a server restarted, or its TTL was shorter than speculate_ttl). If
    // it fails, only these jobs are re-run as ordinary ENCRYPT jobs
    // (OnFinalize); the batch's other jobs never depend on it.
    if (!pre.empty()) {
      auto fin = std::make_shared<FinalizeStep>();
      fin->pre = true;
      fin->req.set_batch_id(RandomId());
      for (size_t i : pre) {
        const Entry& e = entries_[i];
        pb::FinalizeItem* item = fin->req.add_items();
        item->set_run_batch_id(e.pre_run_batch_id);
        item->set_job_id(e.pre_job_id);
        item->set_ciphertext(e.ciphertext);
        fin->idx.push_back(i);
      }
      StartFinalize(fin);
    }
    if (!run.empty()) StartRun(std::move(run), 1);
  }

  // The deadline passed: every job still open fails.
  void Expire() {
    FailOpen(absl::UnavailableError(absl::StrFormat(
                 "the MPC cluster did not answer within %d ms",
                 absl::ToInt64Milliseconds(state_->options.deadline))),
             true);
  }

 private:
  struct Entry {
    uint64_t token = 0;
    Job job;
    absl::Time enqueued;
    bool done = false;
    bool spec = false;        // speculative ENCRYPT (no delivery)
    bool pre = false;         // keystream known: FINALIZE only
    uint64_t spec_group = 0;
    std::string ctr0;         // ENCRYPT, between Run and Finalize
    std::string ciphertext;   // ENCRYPT: C (public)
    std::string pre_run_batch_id;  // pre: the speculative job's Run batch
    uint64_t pre_job_id = 0;
  };

  struct RunStep {
    google::protobuf::Arena arena{StepArenaOptions()};
    pb::RunRequest& req =
        *google::protobuf::Arena::CreateMessage<pb::RunRequest>(&arena);
    OnArena<pb::RunResponse> resp{&arena};
    std::array<absl::Status, kParties> st;
    std::atomic<int> left{kParties};
    std::vector<size_t> idx;  // request job k is entries_[idx[k]]
    int attempt = 1;
    absl::Time started;
  };
  struct FinalizeStep {
    google::protobuf::Arena arena{StepArenaOptions()};
    pb::FinalizeRequest& req =
        *google::protobuf::Arena::CreateMessage<pb::FinalizeRequest>(&arena);
    OnArena<pb::FinalizeResponse> resp{&arena};
    std::array<absl::Status, kParties> st;
    std::atomic<int> left{kParties};
    std::vector<size_t> idx;
    bool pre = false;  // speculative keystreams only (Start)
    // A speculative step's jobs are re-run once, from the first failing
    // party's answer (not after all three: the others may take until the
    // deadline, e.g. a peer waiting for the restarted server).
    std::atomic<bool> rerun{false};
    absl::Time started;
  };

  std::string Party(int p) const { return state_->transport->PartyName(p); }

  void StartRun(std::vector<size_t> idx, int attempt) {
    auto step = std::make_shared<RunStep>();
    step->attempt = attempt;
    step->req.set_batch_id(RandomId());
    for (size_t k = 0; k < idx.size(); ++k) {
      const Entry& e = entries_[idx[k]];
      pb::Job* j = step->req.add_jobs();
      j->set_job_id(idx[k]);
      j->set_key_id(e.job.key_id);
      j->set_usage(e.job.usage);
      switch (e.job.type) {
        case JobType::kEncrypt:
          // The plaintext never leaves the KDC: only its length.
          j->set_type(pb::JOB_ENCRYPT);
          j->set_length(static_cast<uint32_t>(e.job.input.size()));
          break;
        case JobType::kDecrypt:
          j->set_type(pb::JOB_DECRYPT);
          j->set_data(e.job.input.data(), e.job.input.size());
          break;
        case JobType::kChecksum:
          j->set_type(pb::JOB_CHECKSUM);
          j->set_data(e.job.input.data(), e.job.input.size());
          break;
        case JobType::kVerify:
          j->set_type(pb::JOB_VERIFY_CHECKSUM);
          j->set_data(e.job.input.data(), e.job.input.size());
          j->set_checksum(e.job.checksum);
          break;
      }
    }
    step->idx = std::move(idx);
    step->started = absl::Now();
    auto self = shared_from_this();
    for (int p = 0; p < kParties; ++p) {
      state_->transport->Run(
          p, step->req, &step->resp[p], deadline_,
          [self, step, p](absl::Status s) {
            step->st[p] = s;
            if (!s.ok() && IsUnreachable(s))
              self->PartyUnreachable(p, s, step->idx);
            if (step->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
              self->OnRun(step);
          });
    }
  }

  // Fail fast: one unreachable party is enough to fail the step's jobs;
  // the other two calls are left to finish or time out on their own.
  void PartyUnreachable(int p, const absl::Status& s,
                        const std::vector<size_t>& idx) {
    FailOpen(absl::UnavailableError(absl::StrCat(
                 "MPC ", Party(p), " unreachable: ",
                 absl::StatusCodeToString(s.code()), ": ", s.message())),
             true, &idx);
  }

  // Jobs the servers named as the reason they refused the batch.
  std::vector<std::pair<size_t, absl::Status>> Culprits(const RunStep& step) {
    std::vector<std::pair<size_t, absl::Status>> out;
    for (const absl::Status& s : step.st) {
      if (s.ok()) continue;
      absl::string_view msg = s.message();
      if (absl::IsNotFound(s) && absl::ConsumePrefix(&msg, "unknown key id ")) {
        std::string hex(absl::StripAsciiWhitespace(msg).substr(0, 64));
        std::string kid = absl::HexStringToBytes(hex);
        for (size_t k = 0; k < step.idx.size(); ++k)
          if (entries_[step.idx[k]].job.key_id == kid)
            out.emplace_back(step.idx[k],
                             absl::NotFoundError("the MPC cluster holds no "
                                                 "shares for this key id"));
      } else if (absl::IsInvalidArgument(s) &&
                 absl::ConsumePrefix(&msg, "job ")) {
        size_t colon = msg.find(':');
        size_t k;
        if (colon != absl::string_view::npos &&
            absl::SimpleAtoi(msg.substr(0, colon), &k) && k < step.idx.size())
          out.emplace_back(step.idx[k],
                           absl::InvalidArgumentError(absl::StrCat(
                               "the MPC cluster refused the job: ",
                               msg.substr(colon + 1))));
      }
    }
    return out;
  }

  void OnRun(const std::shared_ptr<RunStep>& step) {
    run_us_ = absl::ToInt64Microseconds(absl::Now() - step->started);
    bool all_ok = true;
    for (const auto& s : step->st) all_ok &= s.ok();
    if (!all_ok) {
      for (int p = 0; p < kParties; ++p)
        if (!step->st[p].ok() && IsUnreachable(step->st[p])) return;  // failed
      auto culprits = Culprits(*step);
      if (!culprits.empty() && step->attempt < kMaxAttempts) {
        std::set<size_t> out;
        for (auto& [i, st] : culprits)
          if (out.insert(i).second) Complete(i, st, {});
        std::vector<size_t> rest;
        for (size_t i : step->idx)
          if (!out.count(i)) rest.push_back(i);
        if (!rest.empty()) StartRun(std::move(rest), step->attempt + 1);
        return;
      }
      absl::Status first;
      int party = 0;
      for (int p = 0; p < kParties; ++p)
        if (!step->st[p].ok()) {
          first = step->st[p];
          party = p;
          break;
        }
      absl::Status st =
          absl::IsNotFound(first)
              ? absl::NotFoundError(absl::StrCat("MPC ", Party(party), ": ",
                                                 first.message()))
              : absl::UnavailableError(absl::StrCat(
                    "MPC ", Party(party), " refused the batch: ",
                    absl::StatusCodeToString(first.code()), ": ",
                    first.message()));
      FailOpen(st, !absl::IsNotFound(first), &step->idx);
      return;
    }

    absl::Status bad = CheckRunResponses(*step);
    if (!bad.ok()) {
      state_->Log(LOG_ERR, absl::StrCat("kdcmpc: batch #", seq_,
                                        " rejected: ", bad.message()));
      FailOpen(absl::UnavailableError(bad.message()), true, &step->idx);
      ScrubRun(step.get());
      return;
    }
    blocks_ += step->resp[0].stats().aes_blocks();
    if (state_->options.debug) {
      // The slowest party's view (BatchStats): waiting for the scheduler,
      // then the handshake and the MPC rounds.
      uint64_t q = 0, c = 0;
      for (const auto& r : step->resp) {
        q = std::max<uint64_t>(q, r.stats().queue_us());
        c = std::max<uint64_t>(c, r.stats().compute_us());
      }
      srv_queue_us_ += q;
      srv_compute_us_ += c;
      ring_messages_ += step->resp[0].stats().ring_messages();
    }

    // Everything checked: complete what needs no Finalize, collect the
    // ciphertexts that do.
    auto fin = std::make_shared<FinalizeStep>();
    fin->req.set_batch_id(RandomId());
    const int n = step->req.jobs_size();
    // Speculative keystreams first: the KDC may submit the ENCRYPT jobs
    // they are for as soon as it has the timestamp DECRYPT's result.
    std::set<uint64_t> failed_groups;  // their timestamp did not decrypt
    for (int k = 0; k < n; ++k) {
      const Entry& e = entries_[step->idx[k]];
      const pb::JobResult& r = step->resp[0].results(k);
      if (e.job.type == JobType::kDecrypt && e.spec_group != 0 &&
          r.status() != pb::JOB_OK)
        failed_groups.insert(e.spec_group);
    }
    std::vector<Spec> specs;
    const absl::Time spec_expires =
        step->started + state_->options.speculate_ttl;
    for (int k = 0; k < n; ++k) {
      size_t i = step->idx[k];
      Entry& e = entries_[i];
      if (!e.spec) continue;
      const pb::JobResult& r = step->resp[0].results(k);
      // Kept for the ENCRYPT job it was made for, unless its timestamp
      // failed (the servers drop the state after their TTL). Nothing is
      // delivered for it.
      if (!JobFailed(r) && !failed_groups.count(e.spec_group) &&
          !IsDone(i)) {
        Spec sp;
        Combine(*step, k, &pb::JobResult::keystream, &sp.keystream);
        sp.key_id = e.job.key_id;
        sp.usage = e.job.usage;
        sp.group = e.spec_group;
        sp.run_batch_id = step->req.batch_id();
        sp.job_id = i;
        sp.ctr0 = r.ctr0();
        sp.expires = spec_expires;
        specs.push_back(std::move(sp));
      }
      Complete(i, absl::OkStatus(), {});
    }
    if (!specs.empty()) state_->AddSpecs(std::move(specs));
    if (!failed_groups.empty()) {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->stats.spec_wasted += failed_groups.size();  // tokens stay spent
    }
    for (int k = 0; k < n; ++k) {
      size_t i = step->idx[k];
      Entry& e = entries_[i];
      if (e.spec) continue;  // above
      const pb::JobResult& r = step->resp[0].results(k);
      if (JobFailed(r)) {
        // A per-job failure fails only this job (the three servers agreed on
        // it, CheckRunResponses): an unknown key -> KRB5_KT_NOTFOUND; a key
        // the servers hold inconsistently or any other server-side problem
        // -> SVC_UNAVAILABLE.
        absl::Status st;
        switch (r.status()) {
          case pb::JOB_UNKNOWN_KEY:
            st = absl::NotFoundError(absl::StrCat(
                "the MPC cluster holds no shares for this key id (",
                r.detail(), ")"));
            break;
          case pb::JOB_MALFORMED:
            st = absl::InvalidArgumentError(absl::StrCat(
                "the MPC cluster failed the job: ", r.detail()));
            break;
          case pb::JOB_KEY_INCONSISTENT:
            st = absl::UnavailableError(absl::StrCat(
                "the MPC servers hold inconsistent shares of this key: ",
                r.detail()));
            break;
          default:
            st = absl::UnavailableError(absl::StrCat(
                "the MPC cluster failed the job: ", r.detail()));
        }
        Complete(i, st, {});
        continue;
      }
      bool verified = r.status() == pb::JOB_OK;
      switch (e.job.type) {
        case JobType::kVerify:
          Complete(i, verified ? absl::OkStatus()
                               : IntegrityError("checksum did not verify"),
                   {});
          break;
        case JobType::kDecrypt: {
          if (!verified) {
            Complete(i, IntegrityError("ciphertext tag did not verify"), {});
            break;
          }
          SecureBytes ks;
          Combine(*step, k, &pb::JobResult::keystream, &ks);  // checked above
          SecureBytes out(e.job.input.begin() + kBlock,
                          e.job.input.end() - kBlock);
          for (size_t b = 0; b < out.size(); ++b) out[b] ^= ks[b];
          Complete(i, absl::OkStatus(), std::move(out));
          break;
        }
        case JobType::kChecksum: {
          SecureBytes tag;
          Combine(*step, k, &pb::JobResult::tag, &tag);
          SecureBytes out(r.ctr0().begin(), r.ctr0().end());
          out.insert(out.end(), tag.begin(), tag.end());
          Complete(i, absl::OkStatus(), std::move(out));
          break;
        }
        case JobType::kEncrypt: {
          if (IsDone(i)) break;  // the batch already failed (deadline)
          SecureBytes ks;
          Combine(*step, k, &pb::JobResult::keystream, &ks);
          e.ctr0 = r.ctr0();
          e.ciphertext.resize(e.job.input.size());
          for (size_t b = 0; b < ks.size(); ++b)
            e.ciphertext[b] = static_cast<char>(e.job.input[b] ^ ks[b]);
          pb::FinalizeItem* item = fin->req.add_items();
          item->set_run_batch_id(step->req.batch_id());
          item->set_job_id(i);
          item->set_ciphertext(e.ciphertext);
          fin->idx.push_back(i);
          break;
        }
      }
    }
    ScrubRun(step.get());
    if (fin->idx.empty()) return;
    StartFinalize(fin);
  }

  void StartFinalize(const std::shared_ptr<FinalizeStep>& fin) {
    fin->started = absl::Now();
    auto self = shared_from_this();
    for (int p = 0; p < kParties; ++p) {
      state_->transport->Finalize(
          p, fin->req, &fin->resp[p], deadline_,
          [self, fin, p](absl::Status s) {
            fin->st[p] = s;
            // A speculative step's jobs are re-run instead, at once.
            if (!s.ok()) {
              if (!fin->pre)
                self->PartyUnreachable(p, s, fin->idx);
              else if (!fin->rerun.exchange(true, std::memory_order_acq_rel))
                self->RerunPre(*fin, p, s);
            }
            if (fin->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
              self->OnFinalize(fin);
          });
    }
  }

  // A speculative FINALIZE failed (most likely NOT_FOUND: a server no
  // longer holds the ENCRYPT state). The servers take a request's states
  // all or nothing and revealed no tag, so the jobs are simply encrypted
  // again, as ordinary ENCRYPT jobs with a fresh counter range.
  // Safe while the other parties' answers are still on their way: the
  // jobs get a fresh counter range, and OnFinalize only scrubs a step that
  // has a failed party.
  void RerunPre(const FinalizeStep& fin, int party, const absl::Status& first) {
    if (absl::Now() >= deadline_) return;  // Expire fails them (or did)
    std::vector<size_t> again;
    for (size_t i : fin.idx) {
      if (IsDone(i)) continue;  // the deadline passed meanwhile
      Entry& e = entries_[i];
      e.pre = false;
      e.ciphertext.clear();
      e.ctr0.clear();
      again.push_back(i);
    }
    if (again.empty()) return;
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->stats.spec_rerun += again.size();
    }
    state_->Log(LOG_WARNING,
                absl::StrCat("kdcmpc: batch #", seq_, ": FINALIZE of ",
                             again.size(), " speculative keystream(s) failed "
                             "on MPC ", Party(party), " (",
                             absl::StatusCodeToString(first.code()), ": ",
                             first.message(), "); re-running them"));
    StartRun(std::move(again), 1);
  }

  static void ScrubFinalize(FinalizeStep* fin) {
    for (auto& r : fin->resp)
      for (auto& res : *r.mutable_results()) {
        Cleanse(res.mutable_tag()->mutable_first());
        Cleanse(res.mutable_tag()->mutable_second());
      }
  }

  void OnFinalize(const std::shared_ptr<FinalizeStep>& fin) {
    fin_us_ = absl::ToInt64Microseconds(absl::Now() - fin->started);
    for (const auto& s : fin->st)
      if (!s.ok()) {
        ScrubFinalize(fin.get());  // tag shares of the parties that answered
        return;  // re-run (speculative) or failed (PartyUnreachable) already
      }
    const int n = fin->req.items_size();
    std::string bad;
    for (int p = 0; p < kParties && bad.empty(); ++p) {
      const pb::FinalizeResponse& r = fin->resp[p];
      if (r.party() != static_cast<uint32_t>(p))
        bad = PartyOrderError(p, r.party());
      else if (r.batch_id() != fin->req.batch_id())
        bad = absl::StrCat(Party(p), " answered for another batch");
      else if (r.results_size() != n)
        bad = absl::StrCat(Party(p), " returned ", r.results_size(),
                           " tags for ", n, " items");
      for (int k = 0; k < n && bad.empty(); ++k)
        if (r.results(k).job_id() != fin->req.items(k).job_id() ||
            r.results(k).run_batch_id() != fin->req.items(k).run_batch_id())
          bad = absl::StrCat(Party(p), " returned tags out of order");
    }
    std::vector<SecureBytes> tags(n);
    for (int k = 0; k < n && bad.empty(); ++k) {
      std::array<const pb::SharePair*, kParties> s;
      for (int p = 0; p < kParties; ++p) s[p] = &fin->resp[p].results(k).tag();
      bad = CombineShares(s, kBlock, &tags[k], "tag", k);
    }
    ScrubFinalize(fin.get());
    if (!bad.empty()) {
      state_->Log(LOG_ERR,
                  absl::StrCat("kdcmpc: batch #", seq_, " rejected: ", bad));
      FailOpen(absl::UnavailableError(bad), true, &fin->idx);
      return;
    }
    for (int k = 0; k < n; ++k) {
      Entry& e = entries_[fin->idx[k]];
      SecureBytes out;
      out.reserve(kOverhead + e.ciphertext.size());
      out.insert(out.end(), e.ctr0.begin(), e.ctr0.end());
      out.insert(out.end(), e.ciphertext.begin(), e.ciphertext.end());
      out.insert(out.end(), tags[k].begin(), tags[k].end());
      Complete(fin->idx[k], absl::OkStatus(), std::move(out));
    }
  }

  std::string PartyOrderError(int p, uint32_t answered) const {
    return absl::StrCat("the server listed as party ", p, " (",
                        Party(p), ") answered as party ", answered,
                        ": list the servers in party order");
  }

  // Checks the public parts of the three Run answers and both copies of
  // every share; returns an error message naming the parties, never a
  // share.
  absl::Status CheckRunResponses(const RunStep& step) {
    const int n = step.req.jobs_size();
    for (int p = 0; p < kParties; ++p) {
      const pb::RunResponse& r = step.resp[p];
      if (r.party() != static_cast<uint32_t>(p))
        return absl::AbortedError(PartyOrderError(p, r.party()));
      if (r.batch_id() != step.req.batch_id())
        return absl::AbortedError(
            absl::StrCat(Party(p), " answered for another batch"));
      if (r.results_size() != n)
        return absl::AbortedError(absl::StrCat(Party(p), " returned ",
                                               r.results_size(),
                                               " results for ", n, " jobs"));
    }
    for (int k = 0; k < n; ++k) {
      const pb::Job& job = step.req.jobs(k);
      const pb::JobResult& r0 = step.resp[0].results(k);
      for (int p = 0; p < kParties; ++p) {
        const pb::JobResult& r = step.resp[p].results(k);
        if (r.job_id() != job.job_id())
          return absl::AbortedError(
              absl::StrCat(Party(p), " returned results out of order"));
        if (r.status() != r0.status() || r.ctr0() != r0.ctr0())
          return absl::AbortedError(absl::StrCat(
              Party(p), " and ", Party(0),
              " disagree on the public result of job ", k));
      }
      if (JobFailed(r0)) continue;
      const Entry& e = entries_[step.idx[k]];
      SecureBytes scratch;
      std::string bad;
      switch (e.job.type) {
        case JobType::kEncrypt:
          // Invariant 4 (enctype.md) is the cluster's to keep; a counter
          // range through the all-zero block is refused here as well.
          if (r0.status() != pb::JOB_OK ||
              !CounterRangeOk(r0.ctr0(), CeilBlocks(e.job.input.size())))
            return absl::AbortedError(absl::StrCat(
                "malformed ENCRYPT result (status or ctr0) for job ", k));
          bad = CombineFrom(step, k, &pb::JobResult::keystream,
                            e.job.input.size(), &scratch, "keystream");
          break;
        case JobType::kDecrypt:
          if (r0.status() == pb::JOB_OK)
            bad = CombineFrom(step, k, &pb::JobResult::keystream,
                              e.job.input.size() - kOverhead, &scratch,
                              "keystream");
          else if (r0.status() != pb::JOB_INTEGRITY_FAILED)
            return absl::AbortedError(
                absl::StrCat("malformed DECRYPT result for job ", k));
          break;
        case JobType::kChecksum:
          if (r0.status() != pb::JOB_OK || !CounterRangeOk(r0.ctr0(), 0))
            return absl::AbortedError(absl::StrCat(
                "malformed CHECKSUM result (status or ctr0) for job ", k));
          bad = CombineFrom(step, k, &pb::JobResult::tag, kBlock, &scratch,
                            "tag");
          break;
        case JobType::kVerify:
          if (r0.status() != pb::JOB_OK &&
              r0.status() != pb::JOB_INTEGRITY_FAILED)
            return absl::AbortedError(
                absl::StrCat("malformed VERIFY result for job ", k));
          break;
      }
      if (!bad.empty()) return absl::AbortedError(bad);
    }
    return absl::OkStatus();
  }

  using PairGetter = const pb::SharePair& (pb::JobResult::*)() const;

  std::string CombineFrom(const RunStep& step, int k, PairGetter get,
                          size_t len, SecureBytes* out, const char* what) {
    std::array<const pb::SharePair*, kParties> s;
    for (int p = 0; p < kParties; ++p) s[p] = &(step.resp[p].results(k).*get)();
    return CombineShares(s, len, out, what, k);
  }
  void Combine(const RunStep& step, int k, PairGetter get, SecureBytes* out) {
    size_t len = 0;
    const Entry& e = entries_[step.idx[k]];
    if (e.job.type == JobType::kEncrypt) len = e.job.input.size();
    else if (e.job.type == JobType::kDecrypt) len = e.job.input.size() - kOverhead;
    else len = kBlock;
    (void)CombineFrom(step, k, get, len, out, "");
  }

  // v = s_0 ^ s_1 ^ s_2, where party p sent (s_p, s_{p+1}). Each share
  // arrives twice (party p's second copy and party p+1's first); the
  // copies must agree (architecture.md, "Reveal to the KDC").
  std::string CombineShares(const std::array<const pb::SharePair*, kParties>& s,
                            size_t len, SecureBytes* out, const char* what,
                            int job) {
    for (int p = 0; p < kParties; ++p)
      if (s[p]->first().size() != len || s[p]->second().size() != len)
        return absl::StrCat(Party(p), " sent a ", what, " share of the wrong "
                            "length for job ", job);
    std::vector<int> bad;  // check p: party p's s_{p+1} vs party p+1's s_{p+1}
    for (int p = 0; p < kParties; ++p)
      if (CRYPTO_memcmp(s[p]->second().data(), s[(p + 1) % 3]->first().data(),
                        len) != 0)
        bad.push_back(p);
    if (!bad.empty()) {
      std::string blame;
      if (bad.size() == 2) {
        // Two failed checks share exactly one party: the one that lied.
        int a = bad[0], b = bad[1];
        int culprit = (a + 1) % 3 == b ? b : a;
        blame = absl::StrCat("; ", Party(culprit), " is the common party of "
                             "both disagreements");
      }
      int p = bad[0];
      return absl::StrCat("the two copies of share s_", (p + 1) % 3, " of the ",
                          what, " of job ", job, " from ", Party(p), " and ",
                          Party((p + 1) % 3), " disagree (", bad.size(),
                          " of 3 share checks failed", blame, ")");
    }
    out->assign(s[0]->first().begin(), s[0]->first().end());
    for (size_t b = 0; b < len; ++b)
      (*out)[b] ^= static_cast<uint8_t>(s[1]->first()[b] ^ s[2]->first()[b]);
    return "";
  }

  static void ScrubRun(RunStep* step) {
    for (auto& r : step->resp)
      for (auto& res : *r.mutable_results()) {
        Cleanse(res.mutable_keystream()->mutable_first());
        Cleanse(res.mutable_keystream()->mutable_second());
        Cleanse(res.mutable_tag()->mutable_first());
        Cleanse(res.mutable_tag()->mutable_second());
      }
  }

  void Complete(size_t i, absl::Status st, SecureBytes out) {
    bool finished = false;
    bool deliver;
    Result r;
    {
      std::lock_guard<std::mutex> l(mu_);
      Entry& e = entries_[i];
      if (e.done) return;
      e.done = true;
      if (!st.ok() && !e.spec) ++failed_;
      finished = --open_ == 0;
      deliver = !e.spec;
      r.token = e.token;
      r.status = std::move(st);
      r.output = std::move(out);
    }
    if (deliver) {
      state_->Deliver(std::move(r));
    } else {
      std::lock_guard<std::mutex> l(state_->mu);
      if (state_->spec_pending > 0) --state_->spec_pending;
    }
    if (finished) Finish();
  }

  bool IsDone(size_t i) {
    std::lock_guard<std::mutex> l(mu_);
    return entries_[i].done;
  }

  // Fails the open jobs among `only` (every open job when null).
  void FailOpen(const absl::Status& st, bool log,
                const std::vector<size_t>* only = nullptr) {
    std::vector<size_t> open;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (only) {
        for (size_t i : *only)
          if (!entries_[i].done) open.push_back(i);
      } else {
        for (size_t i = 0; i < entries_.size(); ++i)
          if (!entries_[i].done) open.push_back(i);
      }
      if (open.empty()) return;
      if (log && !failure_logged_) {
        failure_logged_ = true;
        log = true;
      } else {
        log = false;
      }
    }
    if (log)
      state_->Log(LOG_ERR, absl::StrCat("kdcmpc: batch #", seq_, " of ",
                                        entries_.size(), " jobs failed: ",
                                        st.message()));
    for (size_t i : open) Complete(i, st, {});
  }

  void Finish() {
    absl::Time now = absl::Now();
    size_t failed;
    {
      std::lock_guard<std::mutex> l(mu_);
      failed = failed_;
    }
    if (state_->options.debug) {
      absl::Duration queued = absl::ZeroDuration();
      uint64_t job_blocks = 0;
      for (const Entry& e : entries_) {
        queued = std::max(queued, start_ - e.enqueued);
        job_blocks += JobBlocks(e.job);
      }
      state_->Log(LOG_DEBUG,
                  absl::StrFormat("kdcmpc: batch #%d: %d jobs (%d failed), "
                                  "%d AES blocks (%d requested), queued %.1f "
                                  "ms, run %.1f ms (servers: queue %.1f ms, "
                                  "compute %.1f ms, %d ring messages), "
                                  "finalize %.1f ms, total %.1f ms",
                                  seq_, entries_.size(), failed, blocks_.load(),
                                  job_blocks,
                                  Ms(queued), run_us_.load() / 1000.0,
                                  srv_queue_us_.load() / 1000.0,
                                  srv_compute_us_.load() / 1000.0,
                                  ring_messages_.load(),
                                  fin_us_.load() / 1000.0,
                                  Ms(now - start_)));
    }
    state_->Finished(shared_from_this(), pre_only_, blocks_.load(), failed > 0);
  }

  std::shared_ptr<Batcher::State> state_;
  const uint64_t seq_;
  const bool pre_only_;  // FINALIZE of speculated jobs only (pre_queue)
  const absl::Time start_;
  const absl::Time deadline_;
  std::mutex mu_;  // guards done flags, open_, failed_
  std::vector<Entry> entries_;
  size_t open_ = 0;
  size_t failed_ = 0;
  bool failure_logged_ = false;
  // Figures for the debug line; written by the step callbacks, read by
  // whichever thread finishes the batch (possibly the deadline watchdog).
  std::atomic<uint64_t> blocks_{0};
  std::atomic<int64_t> run_us_{0}, fin_us_{0};
  std::atomic<uint64_t> srv_queue_us_{0}, srv_compute_us_{0}, ring_messages_{0};
};

Batcher::Batcher(BatcherOptions options, Transport* transport, Sink* sink)
    : options_(options), state_(std::make_shared<State>()) {
  state_->options = options;
  state_->spec_burst = state_->spec_tokens =
      static_cast<double>(options.speculate_max / 2);
  state_->transport = transport;
  state_->sink = sink;
  dispatcher_ = std::thread([this] { Dispatch(); });
}

Batcher::~Batcher() { Stop(); }

absl::Status Batcher::Submit(uint64_t token, Job job) {
  if (absl::Status st = ValidateJob(job); !st.ok()) return st;
  Queued q;
  q.token = token;
  q.blocks = JobBlocks(job);
  q.job = std::move(job);
  q.enqueued = absl::Now();
  const bool spec_on = options_.speculate;
  std::vector<Queued> extra;  // speculative ENCRYPT jobs
  bool wake;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    State& s = *state_;
    if (state_->stopping)
      return absl::UnavailableError("the kdcmpc module is shutting down");
    if (state_->queue.size() + state_->pre_queue.size() >= options_.max_queue)
      return absl::UnavailableError(absl::StrCat(
          "the MPC cluster is overloaded: ",
          state_->queue.size() + state_->pre_queue.size(), " jobs wait"));
    const Job& j = q.job;
    const uint64_t at = ++s.submits;
    if (spec_on && j.type == JobType::kEncrypt &&
        (j.usage == kUsageTicket || j.usage == kUsageAsRepPart) &&
        j.input.size() <= kSpecMaxBytes) {
      if (j.usage == kUsageTicket) {
        s.last_u2_at = at;
        s.last_u2_key = j.key_id;
        s.last_u2_len = j.input.size();
        if (s.last_u3_at != 0 && s.last_u3_at + 1 == at) s.LearnPairLocked();
      } else {
        auto& l = s.lens[1];
        l.push_back(j.input.size());
        if (l.size() > kSpecLearn) l.pop_front();
        s.last_u3_at = at;
        if (s.last_u2_at != 0 && s.last_u2_at + 1 == at) s.LearnPairLocked();
      }
      s.PruneSpecsLocked(q.enqueued);
      // Newest first: the keystream this login's own timestamp brought
      // along, rather than an older one left unused (e.g. too short for its
      // ticket), which the servers are likelier to have forgotten.
      for (auto rit = s.specs.rbegin(); rit != s.specs.rend(); ++rit) {
        if (rit->usage != j.usage || rit->key_id != j.key_id ||
            rit->keystream.size() < j.input.size() ||
            rit->expires <= q.enqueued)
          continue;
        auto it = std::next(rit).base();
        auto pre = std::make_shared<Prerun>();
        pre->run_batch_id = std::move(it->run_batch_id);
        pre->job_id = it->job_id;
        pre->ctr0 = std::move(it->ctr0);
        pre->ciphertext.resize(j.input.size());
        for (size_t b = 0; b < j.input.size(); ++b)
          pre->ciphertext[b] = static_cast<char>(j.input[b] ^ it->keystream[b]);
        s.specs.erase(it);  // the keystream wipes itself
        s.SpecUsedLocked();
        q.pre = std::move(pre);
        q.blocks = 0;  // no AES work left
        ++s.stats.spec_used;
        break;
      }
    } else if (spec_on && j.type == JobType::kDecrypt &&
               j.usage == kUsageEncTimestamp && !s.ticket_key_id.empty() &&
               s.specs.size() + s.spec_pending + 2 <= options_.speculate_max &&
               // A long queue: the jobs the KDC needs come first.
               s.queue.size() < options_.max_queue / 2) {
      const size_t nt = s.SpecBytesLocked(kUsageTicket);
      const size_t nr = s.SpecBytesLocked(kUsageAsRepPart);
      if (nt > 0 && nr > 0 && s.TakeSpecTokenLocked(q.enqueued)) {
        q.spec_group = s.next_group++;
        for (auto [key, usage, bytes] :
             {std::tuple<const std::string*, uint32_t, size_t>{
                  &s.ticket_key_id, kUsageTicket, nt},
              {&j.key_id, kUsageAsRepPart, nr}}) {
          Queued x;
          x.spec = true;
          x.spec_group = q.spec_group;
          x.job.type = JobType::kEncrypt;
          x.job.key_id = *key;
          x.job.usage = usage;
          x.job.input.assign(bytes, 0);  // only the length is sent
          x.blocks = JobBlocks(x.job);
          x.enqueued = q.enqueued;
          extra.push_back(std::move(x));
        }
        s.stats.spec_encrypts += extra.size();
        s.spec_pending += extra.size();
      }
    }
    if (q.pre) {
      // FINALIZE only: flushed at the next Kick(), or kPreFallback after
      // the first of them if no Kick comes.
      wake = state_->pre_queue.empty();
      state_->pre_queue.push_back(std::move(q));
    } else {
      // Wake the dispatcher only when this job changes its decision: the
      // flush time depends on the oldest queued job (or a full queue), and
      // the dispatcher re-evaluates after every batch start and completion
      // anyway. A wake-up per job (three per login) cost the KDC's event
      // loop a futex call and usually a context switch each, under load.
      const bool was_empty = state_->queue.empty();
      const uint64_t blocks_before = state_->queued_blocks;
      const size_t size_before = state_->queue.size();
      state_->queued_blocks += q.blocks;
      state_->queue.push_back(std::move(q));
      for (Queued& x : extra) {
        state_->queued_blocks += x.blocks;
        state_->queue.push_back(std::move(x));
      }
      wake = was_empty ||
             (size_before < options_.max_jobs &&
              state_->queue.size() >= options_.max_jobs) ||
             (blocks_before < options_.max_blocks &&
              state_->queued_blocks >= options_.max_blocks);
    }
  }
  if (wake) state_->cv.notify_one();  // the dispatcher is the only waiter
  return absl::OkStatus();
}

void Batcher::Kick() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    bool wake = false;
    if (!state_->pre_queue.empty() && !state_->pre_kicked) {
      state_->pre_kicked = true;
      wake = true;
    }
    if (options_.early_flush && !state_->queue.empty() && !state_->kicked) {
      state_->kicked = true;
      // With a batch in flight the queue waits for it anyway; its
      // completion wakes the dispatcher, which then sees `kicked`.
      wake |= state_->inflight == 0;
    }
    if (!wake) return;
  }
  state_->cv.notify_one();
}

void Batcher::Dispatch() {
  // No exception may end this thread (std::terminate would take the KDC
  // with it): after a failure (memory), try again shortly. A job lost that
  // way fails at its batch's deadline; one still queued is retried.
  for (;;) {
    try {
      DispatchLoop();
      return;
    } catch (...) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void Batcher::DispatchLoop() {
  State& s = *state_;
  const BatcherOptions& o = options_;
  std::unique_lock<std::mutex> lk(s.mu);
  while (!s.stopping) {
    absl::Time now = absl::Now();
    // Unused keystreams go at their expiry, not at the next submit: an
    // idle KDC must not keep them in memory.
    absl::Time wake = s.PruneSpecsLocked(now);

    // Watchdog: a batch past its deadline fails even if a transport never
    // calls back.
    std::vector<std::shared_ptr<BatchRun>> expired;
    for (const auto& run : s.active) {
      if (run->deadline() <= now) expired.push_back(run);
      else wake = std::min(wake, run->deadline());
    }
    if (!expired.empty()) {
      lk.unlock();
      for (auto& run : expired) run->Expire();
      expired.clear();
      lk.lock();
      continue;
    }

    // Speculated ENCRYPT jobs: their FINALIZE needs no ring work, so it
    // does not wait for the Run batch in flight.
    if (!s.pre_queue.empty() && s.pre_inflight < kMaxPreInflight) {
      const absl::Time at =
          s.pre_kicked ? now : s.pre_queue.front().enqueued + kPreFallback;
      if (at <= now) {
        std::vector<Queued> batch;
        const size_t take = std::max(o.max_jobs, o.backlog_jobs);
        while (!s.pre_queue.empty() && batch.size() < take) {
          batch.push_back(std::move(s.pre_queue.front()));
          s.pre_queue.pop_front();
        }
        if (s.pre_queue.empty()) s.pre_kicked = false;
        ++s.stats.batches;
        s.stats.jobs += batch.size();
        auto run = std::make_shared<BatchRun>(state_, s.next_seq++,
                                              std::move(batch), now, true);
        s.active.insert(run);
        ++s.pre_inflight;
        lk.unlock();
        run->Start();
        run.reset();
        lk.lock();
        continue;
      }
      wake = std::min(wake, at);
    }
    if (!s.queue.empty() && s.inflight < o.max_inflight) {
      absl::Time flush_at;
      if (s.queue.size() >= o.max_jobs || s.queued_blocks >= o.max_blocks)
        flush_at = now;
      else if (o.early_flush && s.inflight == 0)
        flush_at = s.kicked ? now : s.queue.front().enqueued + o.coalesce;
      else
        flush_at = s.queue.front().enqueued + o.window;
      if (flush_at <= now) {
        std::vector<Queued> batch;
        uint64_t blocks = 0;
        const size_t take_jobs = std::max(o.max_jobs, o.backlog_jobs);
        const uint64_t take_blocks = std::max(o.max_blocks, o.backlog_blocks);
        while (!s.queue.empty() && batch.size() < take_jobs &&
               (batch.empty() ||
                blocks + s.queue.front().blocks <= take_blocks)) {
          blocks += s.queue.front().blocks;
          s.queued_blocks -= s.queue.front().blocks;
          batch.push_back(std::move(s.queue.front()));
          s.queue.pop_front();
        }
        if (s.queue.empty()) s.kicked = false;
        ++s.stats.batches;
        s.stats.jobs += batch.size();
        auto run = std::make_shared<BatchRun>(state_, s.next_seq++,
                                              std::move(batch), now);
        s.active.insert(run);
        ++s.inflight;
        lk.unlock();
        run->Start();
        run.reset();
        lk.lock();
        continue;
      }
      wake = std::min(wake, flush_at);
    }
    if (wake == absl::InfiniteFuture()) {
      s.cv.wait(lk);
    } else {
      s.cv.wait_for(lk, absl::ToChronoMicroseconds(wake - absl::Now()) +
                            std::chrono::microseconds(50));
    }
  }
}

void Batcher::Stop() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  {
    std::lock_guard<std::mutex> l(state_->sink_mu);
    state_->closed = true;
  }
  std::lock_guard<std::mutex> l(state_->mu);
  state_->queue.clear();
  state_->pre_queue.clear();
  state_->queued_blocks = 0;
  state_->specs.clear();  // SecureBytes wipes the keystreams
  state_->spec_pending = 0;
}

BatcherStats Batcher::stats() const {
  std::lock_guard<std::mutex> l(state_->mu);
  BatcherStats out = state_->stats;
  out.inflight = state_->inflight + state_->pre_inflight;
  out.spec_held = state_->specs.size();
  return out;
}

}  // namespace kmpc::kdc
