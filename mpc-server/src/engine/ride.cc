// RideAlong (ride.h): the rider's channel, the host's combined exchanges
// and the rider's end.
#include "engine/ride.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>
#include <utility>

#include "share/replicated.h"

namespace kmpc::engine {

namespace {

void WipeAll(std::deque<std::vector<uint8_t>>& q) {
  for (auto& v : q) share::Wipe(v);
  q.clear();
}

}  // namespace

// The rider's view of the ring: a send queues the message for the host's
// next exchange; a receive takes the next part the host delivered.
class RideAlong::Side : public net::RingChannel {
 public:
  explicit Side(RideAlong& r) : r_(r) {}
  int party() const override { return r_.party(); }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    std::lock_guard<std::mutex> lock(r_.mu_);
    if (r_.aborted_) return absl::AbortedError("the Run ended before its rider");
    if (!r_.failed_.ok()) return r_.failed_;
    r_.outbox_.emplace_back(msg.begin(), msg.end());
    r_.cv_.notify_all();
    return absl::OkStatus();
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    std::unique_lock<std::mutex> lock(r_.mu_);
    r_.cv_.wait(lock, [&] { return r_.aborted_ || !r_.failed_.ok() || !r_.inbox_.empty(); });
    if (r_.aborted_) return absl::AbortedError("the Run ended before its rider");
    if (r_.inbox_.empty()) return r_.failed_;
    std::vector<uint8_t>& in = r_.inbox_.front();
    // The host read as many bytes as this party's own send of that round
    // (ride.h); a receive of another size is the rider's own bug.
    if (in.size() != out.size())
      return absl::InternalError("rider: a receive of another size than its round's send");
    std::memcpy(out.data(), in.data(), out.size());
    share::Wipe(in);
    r_.inbox_.pop_front();
    return absl::OkStatus();
  }

 private:
  RideAlong& r_;
};

RideAlong::RideAlong(net::RingChannel& inner) : inner_(inner) {}

RideAlong::~RideAlong() {
  if (thread_.joinable()) (void)Join(true);
}

bool RideAlong::Start(std::function<absl::Status(net::RingChannel&)> rider) {
  if (thread_.joinable()) (void)Join(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = absl::OkStatus();
    rider_status_ = absl::OkStatus();
    aborted_ = false;
    done_ = false;
  }
  try {
    thread_ = std::thread([this, rider = std::move(rider)] {
      Side side(*this);
      absl::Status st;
      try {
        st = rider(side);
      } catch (const std::exception&) {
        st = absl::InternalError("the Run's rider failed");
      }
      std::lock_guard<std::mutex> lock(mu_);
      rider_status_ = std::move(st);
      done_ = true;
      cv_.notify_all();
    });
  } catch (const std::system_error&) {
    return false;
  }
  return true;
}

bool RideAlong::NextSend(std::unique_lock<std::mutex>& lock, std::vector<uint8_t>* msg) {
  cv_.wait(lock, [&] { return done_ || !outbox_.empty(); });
  if (outbox_.empty()) return false;
  *msg = std::move(outbox_.front());
  outbox_.pop_front();
  return true;
}

void RideAlong::Deliver(absl::Status st, absl::Span<const uint8_t> part) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    failed_ = std::move(st);
  } else {
    inbox_.emplace_back(part.begin(), part.end());
  }
  cv_.notify_all();
}

bool RideAlong::Carry(absl::Span<const uint8_t> to_prev, absl::Span<uint8_t> from_next,
                      absl::Status* st) {
  std::vector<uint8_t> rider;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_ || !failed_.ok() || !NextSend(lock, &rider)) return false;
  }
  send_.resize(to_prev.size() + rider.size());
  std::copy(to_prev.begin(), to_prev.end(), send_.begin());
  std::copy(rider.begin(), rider.end(), send_.begin() + static_cast<long>(to_prev.size()));
  recv_.resize(from_next.size() + rider.size());
  *st = inner_.Exchange(send_, absl::MakeSpan(recv_));
  if (st->ok()) std::copy_n(recv_.begin(), from_next.size(), from_next.begin());
  Deliver(*st, absl::MakeConstSpan(recv_).subspan(from_next.size()));
  share::Wipe(rider);
  share::Wipe(send_);
  share::Wipe(recv_);
  return true;
}

absl::Status RideAlong::Exchange(absl::Span<const uint8_t> to_prev,
                                 absl::Span<uint8_t> from_next) {
  absl::Status st;
  if (thread_.joinable() && Carry(to_prev, from_next, &st)) return st;
  return inner_.Exchange(to_prev, from_next);
}

absl::Status RideAlong::Join(bool abort) {
  if (!thread_.joinable()) return absl::OkStatus();
  if (abort) {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  } else {
    // What the rider still sends goes alone, one exchange each.
    absl::Status st;
    while (Carry({}, {}, &st)) {
    }
  }
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  WipeAll(outbox_);
  WipeAll(inbox_);
  absl::Status st = abort ? absl::OkStatus() : rider_status_;
  // A host exchange that failed is the Run's failure; the rider's own
  // status then is only its echo.
  if (!abort && !failed_.ok()) st = failed_;
  return st;
}

}  // namespace kmpc::engine
