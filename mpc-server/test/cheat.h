// The cheating-server harness (tests only; never linked into a server):
// a RingChannel wrapper through which one party deviates from the
// protocol. It XORs an error into one byte of one of its outgoing ring
// messages (an AND layer's message is its gates' products t_i, so an error
// at a chosen offset is an additive error on a chosen gate, wire and lane;
// other steps carry GF(2^128) products, reveal shares, triples, hashes),
// and can send that message only after it has received the round's
// incoming one (a late, biased opening).
//
// Read-ahead (ArmReadAhead; in-process rings only: a second thread
// receives while the party's own thread sends): before sending a chosen
// message, the party tries to receive that round's incoming message and
// the next ones from its successor, waiting at most a given time for
// them, then may rewrite its message from what it got (an adaptive
// cheater). The messages received ahead are handed to the party's later
// receives, in order. The ring is one-way and every honest party sends a
// round's message before receiving that round's, so what arrives ahead is
// exactly what the honest parties' protocol releases before this party's
// message reached its predecessor.
#ifndef KMPC_TEST_CORE_CHEAT_H_
#define KMPC_TEST_CORE_CHEAT_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "net/channel.h"

namespace kmpc::testing {

class CheatingChannel : public net::RingChannel {
 public:
  // Rewrites the message about to be sent, given the incoming messages
  // received ahead so far (the round's own first).
  using Adapt = std::function<void(std::vector<uint8_t>& msg,
                                   const std::vector<std::vector<uint8_t>>& ahead)>;

  explicit CheatingChannel(net::RingChannel& inner) : inner_(inner) {}
  ~CheatingChannel() override { JoinReader(); }

  // The `step`-th message sent from now on (0 = the next one) gets
  // `mask` XORed into byte `offset` (modulo its size); late: that round
  // receives before it sends.
  void Arm(uint64_t step, size_t offset, uint8_t mask, bool late = false) {
    armed_ = true;
    step_ = sent_ + step;
    offset_ = offset;
    mask_ = mask;
    late_ = late;
    fired_ = false;
  }
  void Disarm() { armed_ = false; }
  bool fired() const { return fired_; }

  // Before sending the `step`-th message from now on, receive ahead the
  // incoming messages of the given sizes (that round's, then the next
  // ones': the ring is symmetric, so a dry run's sizes() are theirs),
  // waiting at most `wait` for all of them; then adapt(msg, received)
  // (after an Arm'ed error on the same message, if any) and send.
  void ArmReadAhead(uint64_t step, std::vector<size_t> sizes, std::chrono::milliseconds wait,
                    Adapt adapt) {
    JoinReader();
    ra_armed_ = true;
    ra_step_ = sent_ + step;
    ra_sizes_ = std::move(sizes);
    ra_wait_ = wait;
    ra_adapt_ = std::move(adapt);
    ra_before_send_ = 0;
  }
  // After the read-ahead step: how many of the messages had arrived
  // before the send, and how many arrived in all.
  size_t ahead_before_send() const { return ra_before_send_; }
  size_t ahead_received() {
    std::lock_guard<std::mutex> lock(mu_);
    return ra_received_;
  }

  // Messages sent so far, and the size of each.
  uint64_t sent() const { return sent_; }
  // The first message sent and the first received: on a fresh ring, the
  // PRSS keys (Prss::Setup sends k_i and receives k_{i+1}), from which a
  // test plays the cheater's own PRSS (what a real cheater knows).
  const std::vector<uint8_t>& first_sent() const { return first_sent_; }
  const std::vector<uint8_t>& first_received() const { return first_received_; }
  const std::vector<size_t>& sizes() const { return sizes_; }

  int party() const override { return inner_.party(); }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    sizes_.push_back(msg.size());
    if (sent_ == 0) first_sent_.assign(msg.begin(), msg.end());
    const bool hit = armed_ && sent_ == step_ && !msg.empty();
    const bool ahead = ra_armed_ && sent_ == ra_step_;
    ++sent_;
    if (!hit && !ahead) return inner_.SendToPrev(msg);
    std::vector<uint8_t> bad(msg.begin(), msg.end());
    if (hit) {
      bad[offset_ % bad.size()] ^= mask_;
      fired_ = true;
    }
    if (ahead) ReadAheadAndAdapt(bad);
    return inner_.SendToPrev(bad);
  }
  // For each message received so far: whether every byte was zero (what a
  // party that found its views diverged sends: verify.cc ConfirmedRing).
  const std::vector<bool>& received_zero() const { return received_zero_; }

  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    absl::Status st = Receive(out);
    if (st.ok()) {
      received_zero_.push_back(
          std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
    }
    return st;
  }

  absl::Status Receive(absl::Span<uint8_t> out) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !buffer_.empty() || !reading_; });
      if (!buffer_.empty()) {
        std::vector<uint8_t> m = std::move(buffer_.front());
        buffer_.pop_front();
        if (m.size() != out.size()) {
          return absl::DataLossError(absl::StrCat("read-ahead: expected ", out.size(),
                                                  " bytes, got ", m.size()));
        }
        std::copy(m.begin(), m.end(), out.begin());
        return absl::OkStatus();
      }
      if (!reader_status_.ok()) {
        absl::Status st = reader_status_;
        reader_status_ = absl::OkStatus();
        return st;
      }
    }
    JoinReader();
    absl::Status st = inner_.RecvFromNext(out);
    if (st.ok() && !received_any_) {
      received_any_ = true;
      first_received_.assign(out.begin(), out.end());
    }
    return st;
  }

  // Starts the reader thread on ra_sizes_, waits for it at most ra_wait_,
  // and adapts msg from what it received by then.
  void ReadAheadAndAdapt(std::vector<uint8_t>& msg) {
    ra_armed_ = false;
    JoinReader();
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = true;
      ra_received_ = 0;
    }
    reader_ = std::thread([this, sizes = ra_sizes_] {
      for (size_t n : sizes) {
        std::vector<uint8_t> m(n);
        absl::Status st = inner_.RecvFromNext(absl::MakeSpan(m));
        std::lock_guard<std::mutex> lock(mu_);
        if (!st.ok()) {
          reader_status_ = st;
          break;
        }
        buffer_.push_back(m);
        got_.push_back(std::move(m));
        ++ra_received_;
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      cv_.notify_all();
    });
    std::vector<std::vector<uint8_t>> got;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, ra_wait_, [&] { return ra_received_ == ra_sizes_.size() || !reading_; });
      ra_before_send_ = ra_received_;
      got.swap(got_);
      got_.clear();
    }
    if (ra_adapt_) ra_adapt_(msg, got);
  }
  void JoinReader() {
    if (reader_.joinable()) reader_.join();
    std::lock_guard<std::mutex> lock(mu_);
    got_.clear();
  }

  net::RingChannel& inner_;
  bool armed_ = false, late_ = false, fired_ = false;
  uint64_t step_ = 0, sent_ = 0;
  size_t offset_ = 0;
  uint8_t mask_ = 0;
  std::vector<size_t> sizes_;
  std::vector<bool> received_zero_;
  std::vector<uint8_t> first_sent_, first_received_;
  bool received_any_ = false;
  // Read-ahead: the plan, then the reader thread's buffer (guarded by mu_).
  bool ra_armed_ = false;
  uint64_t ra_step_ = 0;
  std::vector<size_t> ra_sizes_;
  std::chrono::milliseconds ra_wait_{0};
  Adapt ra_adapt_;
  size_t ra_before_send_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread reader_;
  bool reading_ = false;
  size_t ra_received_ = 0;
  std::deque<std::vector<uint8_t>> buffer_;
  std::vector<std::vector<uint8_t>> got_;  // received before the send
  absl::Status reader_status_;
};

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_CHEAT_H_
