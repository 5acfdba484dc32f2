#include "speculator.h"

#include <algorithm>
#include <tuple>

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

namespace {

// Key usages (RFC 4120 7.5.1) the speculative keystream is about.
constexpr uint32_t kUsageEncTimestamp = 1;
constexpr uint32_t kUsageTicket = 2;
constexpr uint32_t kUsageAsRepPart = 3;
// Plaintexts longer than this are not speculated on, nor learnt from.
constexpr size_t kMaxSpeculatedBytes = 2048;
// Budget tokens given back per second (class comment).
constexpr double kBudgetRefillPerSec = 32;
// Lengths learnt from the last this many ENCRYPT jobs of a usage.
constexpr size_t kLengthsLearnt = 64;

void PushLength(std::deque<size_t>* l, size_t n) {
  l->push_back(n);
  if (l->size() > kLengthsLearnt) l->pop_front();
}

}  // namespace

Speculator::Speculator(const BatcherOptions& options)
    : options_(options),
      tokens_(static_cast<double>(options.speculate_max / 2)),
      burst_(static_cast<double>(options.speculate_max / 2)) {}

void Speculator::OnSubmit(PendingJob* job, size_t queue_size,
                          std::vector<PendingJob>* group_jobs) {
  const uint64_t at = ++submits_;
  if (!options_.speculate) return;
  const Job& j = job->job;
  if (j.type == pb::JOB_ENCRYPT &&
      (j.usage == kUsageTicket || j.usage == kUsageAsRepPart) &&
      j.input.size() <= kMaxSpeculatedBytes) {
    Learn(j, at);
    Prune(job->enqueued);
    UseHeld(job);
  } else if (j.type == pb::JOB_DECRYPT && j.usage == kUsageEncTimestamp &&
             !ticket_key_id_.empty() &&
             held_.size() + pending_ + 2 <= options_.speculate_max &&
             // A long queue: the jobs the KDC needs come first.
             queue_size < options_.max_queue / 2) {
    MakeGroup(job, group_jobs);
  }
}

void Speculator::Learn(const Job& j, uint64_t at) {
  if (j.usage == kUsageTicket) {
    last_ticket_at_ = at;
    last_ticket_key_ = j.key_id;
    last_ticket_cipher_ = j.cipher;
    last_ticket_len_ = j.input.size();
    if (last_reply_at_ != 0 && last_reply_at_ + 1 == at) LearnPair();
  } else {
    PushLength(&lengths_[1], j.input.size());
    last_reply_at_ = at;
    if (last_ticket_at_ != 0 && last_ticket_at_ + 1 == at) LearnPair();
  }
}

void Speculator::LearnPair() {
  ticket_key_id_ = last_ticket_key_;
  ticket_cipher_ = last_ticket_cipher_;
  PushLength(&lengths_[0], last_ticket_len_);
  last_ticket_at_ = last_reply_at_ = 0;  // one pair, learnt once
}

// Newest first: the keystream this login's own timestamp brought along,
// rather than an older one left unused (e.g. too short for its ticket),
// which the servers are likelier to have forgotten.
bool Speculator::UseHeld(PendingJob* q) {
  const Job& j = q->job;
  const size_t len = j.input.size();
  for (auto rit = held_.rbegin(); rit != held_.rend(); ++rit) {
    if (rit->usage != j.usage || rit->key_id != j.key_id ||
        rit->cipher != j.cipher ||
        rit->keystream.size() < len || rit->expires <= q->enqueued)
      continue;
    auto it = std::next(rit).base();
    q->output.resize(contract::kCiphertextOverhead + len);
    std::copy(it->ctr0.begin(), it->ctr0.end(), q->output.begin());
    uint8_t* c = q->output.data() + contract::kCtr0Size;
    for (size_t b = 0; b < len; ++b) c[b] = j.input[b] ^ it->keystream[b];
    q->finalize_only = true;
    q->run_batch_id = std::move(it->run_batch_id);
    q->run_job_id = it->run_job_id;
    q->blocks = 0;  // no AES work left
    held_.erase(it);  // the keystream wipes itself
    tokens_ = std::min(burst_, tokens_ + 0.5);
    ++used_;
    return true;
  }
  return false;
}

void Speculator::MakeGroup(PendingJob* ts,
                           std::vector<PendingJob>* group_jobs) {
  const size_t ticket = KeystreamBytes(kUsageTicket);
  const size_t reply = KeystreamBytes(kUsageAsRepPart);
  if (ticket == 0 || reply == 0 || !TakeToken(ts->enqueued)) return;
  ts->group = next_group_++;
  // The reply is under the client's key, as its timestamp (same key id and
  // enctype); the ticket under the krbtgt key and enctype last seen.
  for (auto [key, cipher, usage, bytes] :
       {std::tuple<const std::string*, pb::Cipher, uint32_t, size_t>{
            &ticket_key_id_, ticket_cipher_, kUsageTicket, ticket},
        {&ts->job.key_id, ts->job.cipher, kUsageAsRepPart, reply}}) {
    PendingJob x;
    x.speculative = true;
    x.group = ts->group;
    x.job.type = pb::JOB_ENCRYPT;
    x.job.key_id = *key;
    x.job.cipher = cipher;
    x.job.usage = usage;
    x.job.input.assign(bytes, 0);  // only the length is sent
    x.blocks = JobBlocks(x.job);
    x.enqueued = ts->enqueued;
    group_jobs->push_back(std::move(x));
  }
  encrypts_ += 2;
  pending_ += 2;
}

// The keystream to speculate for a usage: long enough for every recent
// plaintext length up to one block past the 7/8 quantile's (not the
// longest: one client's oversized reply, e.g. many addresses, must not make
// every login's keystream longer), rounded up to blocks; 0 while nothing
// was learnt. A longer plaintext runs as an ordinary ENCRYPT. The extra
// block is paid only when a recent length needs it: lengths that vary by a
// few bytes (names, nonces) mostly fit in the quantile's own last block.
size_t Speculator::KeystreamBytes(uint32_t usage) const {
  const auto& l = lengths_[usage == kUsageTicket ? 0 : 1];
  if (l.empty()) return 0;
  std::vector<size_t> v(l.begin(), l.end());
  const size_t k = (v.size() - 1) * 7 / 8;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  const size_t m = v[k];
  if (m == 0) return 0;
  const auto round_up = [](size_t n) {
    return contract::CeilBlocks(n) * contract::kBlockSize;
  };
  const size_t limit = round_up(m) + contract::kBlockSize;
  size_t cover = m;
  for (size_t n : l)
    if (n <= limit) cover = std::max(cover, n);
  return round_up(cover);
}

bool Speculator::TakeToken(absl::Time now) {
  // A wall-clock step backwards refills nothing (and takes nothing).
  const double dt = std::max(0.0, absl::ToDoubleSeconds(now - tokens_at_));
  if (tokens_at_ != absl::Time())
    tokens_ = std::min(burst_, tokens_ + kBudgetRefillPerSec * dt);
  tokens_at_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void Speculator::Hold(std::vector<HeldKeystream>* keystreams) {
  for (HeldKeystream& k : *keystreams) {
    if (held_.size() < options_.speculate_max)
      held_.push_back(std::move(k));
    else
      ++wasted_;  // AES work for nothing; its token stays spent
  }
}

// Expired keystreams go from the front: they are held in the order of
// their Runs, i.e. (almost) of expiry; one behind a later-expiring one
// waits at most the difference, and is never used meanwhile (UseHeld
// checks).
absl::Time Speculator::Prune(absl::Time now) {
  while (!held_.empty() && held_.front().expires <= now) {
    ++wasted_;
    held_.pop_front();
  }
  return held_.empty() ? absl::InfiniteFuture() : held_.front().expires;
}

void Speculator::Clear() {
  held_.clear();  // SecureBytes wipes the keystreams
  pending_ = 0;
}

}  // namespace kmpc::kdc
