#include "net/memory_ring.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kmpc::net {

class InMemoryRing::Channel : public RingChannel {
 public:
  Channel(InMemoryRing& ring, int party) : ring_(ring), party_(party) {}

  int party() const override { return party_; }

  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    Inbox& box = ring_.inbox_[(party_ + 2) % 3];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (Down()) return absl::UnavailableError("ring shut down");
      std::vector<uint8_t> buf;
      if (!box.spare.empty()) {
        buf = std::move(box.spare.back());
        box.spare.pop_back();
      }
      buf.assign(msg.begin(), msg.end());
      box.queue.push_back(std::move(buf));
    }
    box.cv.notify_one();
    bytes_.fetch_add(msg.size(), std::memory_order_relaxed);
    messages_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    Inbox& box = ring_.inbox_[party_];
    std::unique_lock<std::mutex> lock(box.mu);
    if (!box.cv.wait_for(lock, ring_.timeout_, [&] {
          return !box.queue.empty() || Down();
        })) {
      return absl::UnavailableError(
          absl::StrCat("party ", party_, ": receive timed out"));
    }
    if (box.queue.empty()) return absl::UnavailableError("ring shut down");
    std::vector<uint8_t> msg = std::move(box.queue.front());
    box.queue.pop_front();
    lock.unlock();
    absl::Status st;
    if (msg.size() != out.size()) {
      st = absl::DataLossError(absl::StrCat("party ", party_, ": expected ",
                                            out.size(), " bytes, got ",
                                            msg.size()));
    } else if (!msg.empty()) {
      std::memcpy(out.data(), msg.data(), msg.size());
    }
    lock.lock();
    if (box.spare.size() < 64) box.spare.push_back(std::move(msg));
    return st;
  }

  uint64_t bytes() const { return bytes_.load(); }
  uint64_t messages() const { return messages_.load(); }

 private:
  bool Down() {
    std::lock_guard<std::mutex> lock(ring_.shutdown_mu_);
    return ring_.shutdown_;
  }
  InMemoryRing& ring_;
  int party_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> messages_{0};
};

InMemoryRing::InMemoryRing(std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  for (int i = 0; i < 3; ++i) channels_[i] = std::make_unique<Channel>(*this, i);
}

InMemoryRing::~InMemoryRing() = default;

RingChannel& InMemoryRing::party(int i) { return *channels_[i]; }

void InMemoryRing::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    shutdown_ = true;
  }
  for (auto& box : inbox_) {
    std::lock_guard<std::mutex> lock(box.mu);
    box.cv.notify_all();
  }
}

uint64_t InMemoryRing::bytes_sent(int i) const { return channels_[i]->bytes(); }
uint64_t InMemoryRing::messages_sent(int i) const {
  return channels_[i]->messages();
}

}  // namespace kmpc::net
