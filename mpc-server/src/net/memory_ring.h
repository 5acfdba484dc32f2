// InMemoryRing: the three RingChannels of one ring inside one process, for
// tests and the core benchmark (one thread per party). Sends never block
// (unbounded queues); receives wait at most `timeout`.
#ifndef KMPC_NET_MEMORY_RING_H_
#define KMPC_NET_MEMORY_RING_H_

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "net/channel.h"

namespace kmpc::net {

class InMemoryRing {
 public:
  explicit InMemoryRing(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  ~InMemoryRing();
  InMemoryRing(const InMemoryRing&) = delete;
  InMemoryRing& operator=(const InMemoryRing&) = delete;

  RingChannel& party(int i);

  // Makes every pending and future receive fail with UNAVAILABLE.
  void Shutdown();

  // Bytes party i has sent so far.
  uint64_t bytes_sent(int i) const;
  uint64_t messages_sent(int i) const;

 private:
  class Channel;
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::vector<uint8_t>> queue;
    std::vector<std::vector<uint8_t>> spare;  // consumed buffers, reused
  };
  friend class Channel;
  std::chrono::milliseconds timeout_;
  std::array<Inbox, 3> inbox_;  // inbox_[i]: messages from party i+1 to i
  std::array<std::unique_ptr<Channel>, 3> channels_;
  std::mutex shutdown_mu_;
  bool shutdown_ = false;
};

}  // namespace kmpc::net

#endif  // KMPC_NET_MEMORY_RING_H_
