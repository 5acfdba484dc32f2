#include "service/memory_scheduler_ring.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kmpc::service {
namespace {

struct Frame {
  uint64_t epoch = 0;  // of the link it was sent on
  bool control = false;
  uint32_t seq = 0;
  std::vector<uint8_t> payload;
};

// Messages into one party's worker, from its next party, in send order.
// `epoch` numbers the connection of that link, as a TLS connection would
// be one: a Reset at either end closes it (epoch + 1). The reader still
// reads what was sent on the connection it adopted, then fails at once
// (as after a peer's close); the writer's sends fail until it adopts the
// new connection (Connect, or a Reset of its own), which drops the rest.
struct Inbox {
  absl::Mutex mu;
  uint64_t epoch ABSL_GUARDED_BY(mu) = 0;
  std::deque<Frame> queue ABSL_GUARDED_BY(mu);

  // A message sent on connection `e` is waiting (epochs grow in send
  // order).
  bool Has(uint64_t e) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return std::any_of(queue.begin(), queue.end(),
                       [e](const Frame& f) { return f.epoch == e; });
  }
  // Drops what was sent on connections before `e`.
  void DropBefore(uint64_t e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!queue.empty() && queue.front().epoch < e) queue.pop_front();
  }
  // Closes the connection `*mine` (unless the other end already did) and
  // adopts the current one.
  void Close(uint64_t* mine) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (*mine == epoch) ++epoch;
    *mine = epoch;
  }
};

}  // namespace

class MemorySchedulerRings::Shared {
 public:
  Shared(int workers, absl::Duration recv_timeout)
      : workers(workers), recv_timeout(recv_timeout) {
    for (auto& p : inbox) {
      p.reserve(workers);
      for (int w = 0; w < workers; ++w) p.push_back(std::make_unique<Inbox>());
    }
  }
  bool down() const { return down_.load(); }
  // Waiters re-check their condition when an inbox's mutex is released.
  void Shutdown() {
    down_ = true;
    for (auto& p : inbox)
      for (auto& box : p) absl::MutexLock lock(&box->mu);
  }

  const int workers;
  const absl::Duration recv_timeout;
  std::array<std::atomic<int64_t>, 3> control_delay_us{};  // DelayControlSends
  std::atomic<int> control_sends_delayed{0};
  std::array<std::vector<std::unique_ptr<Inbox>>, 3> inbox;  // [party][worker]

 private:
  std::atomic<bool> down_{false};
};

namespace {

class Worker final : public WorkerRing, public net::RingChannel {
 public:
  Worker(std::shared_ptr<MemorySchedulerRings::Shared> shared, int party, int w)
      : shared_(std::move(shared)), party_(party), worker_(w) {}

  // net::RingChannel
  int party() const override { return party_; }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    Frame f;
    f.payload.assign(msg.begin(), msg.end());
    bytes_ += msg.size();
    ++messages_;
    return Push(std::move(f));
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    absl::StatusOr<Frame> f = Pop(absl::Now() + shared_->recv_timeout);
    if (!f.ok()) return f.status();
    if (f->control || f->payload.size() != out.size())
      return absl::DataLossError(absl::StrCat(
          "party ", party_, ": expected a data message of ", out.size(),
          " bytes, got ", f->control ? "a control message" : "another size"));
    if (!out.empty()) std::memcpy(out.data(), f->payload.data(), out.size());
    return absl::OkStatus();
  }

  // WorkerRing
  net::RingChannel& data() override { return *this; }
  // Adopts the current connection of both links (re-dials a closed one).
  absl::Status Connect(absl::Time) override {
    if (shared_->down()) return absl::UnavailableError("ring shut down");
    {
      Inbox& in = Mine();
      absl::MutexLock lock(&in.mu);
      in_epoch_ = in.epoch;
      in.DropBefore(in_epoch_);
    }
    Inbox& out = Prev();
    absl::MutexLock lock(&out.mu);
    out_epoch_ = out.epoch;
    return absl::OkStatus();
  }
  bool connected() const override { return !shared_->down(); }
  uint64_t generation() const override { return generation_; }
  bool InboundReadable(absl::Duration wait) override {
    Inbox& in = Mine();
    absl::MutexLock lock(&in.mu);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(in.mu) {
      return in.Has(in_epoch_) || shared_->down();
    };
    in.mu.AwaitWithTimeout(absl::Condition(&ready), wait);
    in.DropBefore(in_epoch_);
    return !in.queue.empty() && in.queue.front().epoch == in_epoch_;
  }
  void BeginBatch(uint32_t, absl::Time) override {}
  absl::Status SendControl(uint32_t seq, absl::Span<const uint8_t> msg) override {
    if (const int64_t us = shared_->control_delay_us[party_].load(); us > 0) {
      absl::SleepFor(absl::Microseconds(us));
      ++shared_->control_sends_delayed;
    }
    Frame f;
    f.control = true;
    f.seq = seq;
    f.payload.assign(msg.begin(), msg.end());
    return Push(std::move(f));
  }
  absl::StatusOr<std::vector<uint8_t>> RecvControl(uint32_t* seq,
                                                   absl::Time deadline) override {
    absl::StatusOr<Frame> f = Pop(deadline);
    if (!f.ok()) return f.status();
    if (!f->control) return absl::DataLossError("ring: expected a control message");
    *seq = f->seq;
    return std::move(f->payload);
  }
  absl::Status Flush(absl::Time) override { return absl::OkStatus(); }
  void Reset() override {
    {
      Inbox& in = Mine();
      absl::MutexLock lock(&in.mu);
      in.Close(&in_epoch_);
      in.DropBefore(in_epoch_);
    }
    {
      Inbox& out = Prev();
      absl::MutexLock lock(&out.mu);
      out.Close(&out_epoch_);
    }
    ++generation_;
  }
  Counters counters() const override { return {bytes_.load(), messages_.load(), 0}; }
  void SpinThroughWhile(std::function<bool()> allowed) override {
    absl::MutexLock lock(&spin_through_mu_);
    spin_through_ = std::move(allowed);
  }
  bool SpinThroughAllowed() {
    absl::MutexLock lock(&spin_through_mu_);
    return spin_through_ && spin_through_();
  }

 private:
  Inbox& Mine() { return *shared_->inbox[party_][worker_]; }
  Inbox& Prev() { return *shared_->inbox[(party_ + 2) % 3][worker_]; }
  absl::Status Push(Frame f) {
    if (shared_->down()) return absl::UnavailableError("ring shut down");
    Inbox& prev = Prev();
    absl::MutexLock lock(&prev.mu);
    if (prev.epoch != out_epoch_)
      return absl::UnavailableError(absl::StrCat(
          "party ", party_, ": connection to the previous party was reset"));
    f.epoch = out_epoch_;
    prev.queue.push_back(std::move(f));
    return absl::OkStatus();
  }
  absl::StatusOr<Frame> Pop(absl::Time deadline) {
    Inbox& in = Mine();
    absl::MutexLock lock(&in.mu);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(in.mu) {
      return in.Has(in_epoch_) || in.epoch != in_epoch_ || shared_->down();
    };
    in.mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (shared_->down()) return absl::UnavailableError("ring shut down");
    in.DropBefore(in_epoch_);
    const bool readable = !in.queue.empty() && in.queue.front().epoch == in_epoch_;
    if (!readable && in.epoch != in_epoch_)
      return absl::UnavailableError(absl::StrCat(
          "party ", party_, ": connection from the next party was reset"));
    if (!readable)
      return absl::UnavailableError(
          absl::StrCat("party ", party_, ": receive timed out"));
    Frame f = std::move(in.queue.front());
    in.queue.pop_front();
    return f;
  }

  std::shared_ptr<MemorySchedulerRings::Shared> shared_;
  const int party_;
  const int worker_;
  uint64_t generation_ = 0;
  uint64_t in_epoch_ = 0, out_epoch_ = 0;  // the connections adopted
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> messages_{0};
  absl::Mutex spin_through_mu_;
  std::function<bool()> spin_through_ ABSL_GUARDED_BY(spin_through_mu_);
};

}  // namespace

class MemorySchedulerRings::Party final : public SchedulerRing {
 public:
  Party(const std::shared_ptr<Shared>& shared, int party)
      : shared_(shared), party_(party) {
    for (int w = 0; w < shared->workers; ++w)
      workers_.push_back(std::make_unique<Worker>(shared, party, w));
  }
  int party() const override { return party_; }
  int workers() const override { return static_cast<int>(workers_.size()); }
  WorkerRing& worker(int w) override { return *workers_[w]; }
  Worker& memory_worker(int w) { return *workers_[w]; }
  bool AllConnected() const override { return !shared_->down(); }
  absl::Duration recv_timeout() const override { return shared_->recv_timeout; }

 private:
  std::shared_ptr<Shared> shared_;
  int party_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

MemorySchedulerRings::MemorySchedulerRings(int workers, absl::Duration recv_timeout)
    : shared_(std::make_shared<Shared>(workers, recv_timeout)) {
  for (int i = 0; i < 3; ++i) parties_[i] = std::make_unique<Party>(shared_, i);
}

MemorySchedulerRings::~MemorySchedulerRings() { Shutdown(); }

SchedulerRing& MemorySchedulerRings::party(int i) { return *parties_[i]; }

void MemorySchedulerRings::Shutdown() { shared_->Shutdown(); }

void MemorySchedulerRings::DelayControlSends(int i, absl::Duration d) {
  shared_->control_delay_us[i] = absl::ToInt64Microseconds(d);
}

bool MemorySchedulerRings::SpinThroughAllowed(int party, int worker) {
  return parties_[party]->memory_worker(worker).SpinThroughAllowed();
}

int MemorySchedulerRings::control_sends_delayed() const {
  return shared_->control_sends_delayed.load();
}

}  // namespace kmpc::service
