// MakeTlsSchedulerRing: the Scheduler's ring over net::TlsRing.
#include <memory>
#include <vector>

#include "net/tls_ring.h"
#include "service/ring.h"

namespace kmpc::service {
namespace {

class TlsWorker final : public WorkerRing {
 public:
  explicit TlsWorker(net::TlsRingChannel* ch) : ch_(*ch) {}
  net::RingChannel& data() override { return ch_; }
  absl::Status Connect(absl::Time deadline) override { return ch_.Connect(deadline); }
  bool connected() const override { return ch_.connected(); }
  uint64_t generation() const override { return ch_.generation(); }
  bool InboundReadable(absl::Duration wait) override {
    return ch_.InboundReadable(wait);
  }
  void BeginBatch(uint32_t seq, absl::Time deadline) override {
    ch_.BeginBatch(seq, deadline);
  }
  absl::Status SendControl(uint32_t seq, absl::Span<const uint8_t> msg) override {
    return ch_.SendControl(seq, msg);
  }
  absl::StatusOr<std::vector<uint8_t>> RecvControl(uint32_t* seq,
                                                   absl::Time deadline) override {
    return ch_.RecvControl(seq, deadline);
  }
  void SpinBatch(bool on) override {
    ch_.set_spin_control(on);
    ch_.set_spin_data(on);
  }
  void SpinThroughWhile(std::function<bool()> allowed) override {
    ch_.set_spin_through(std::move(allowed));
  }
  absl::Status Flush(absl::Time deadline) override { return ch_.Flush(deadline); }
  void Reset() override { ch_.Reset(); }
  Counters counters() const override {
    return {ch_.bytes_sent(), ch_.steps_sent(), ch_.tcp_bytes_sent()};
  }

 private:
  net::TlsRingChannel& ch_;
};

class TlsSchedulerRing final : public SchedulerRing {
 public:
  explicit TlsSchedulerRing(net::TlsRing* ring) : ring_(*ring) {
    for (int w = 0; w < ring_.workers(); ++w)
      workers_.push_back(std::make_unique<TlsWorker>(ring_.channel(w)));
  }
  int party() const override { return ring_.options().party; }
  int workers() const override { return static_cast<int>(workers_.size()); }
  WorkerRing& worker(int w) override { return *workers_[w]; }
  bool AllConnected() const override { return ring_.AllConnected(); }
  absl::Duration recv_timeout() const override { return ring_.options().recv_timeout; }

 private:
  net::TlsRing& ring_;
  std::vector<std::unique_ptr<TlsWorker>> workers_;
};

}  // namespace

std::unique_ptr<SchedulerRing> MakeTlsSchedulerRing(net::TlsRing* ring) {
  return std::make_unique<TlsSchedulerRing>(ring);
}

}  // namespace kmpc::service
