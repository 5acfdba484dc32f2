// The cheating-server harness (tests only; never linked into a server):
// a RingChannel wrapper through which one party deviates from the
// protocol. It XORs an error into one byte of one of its outgoing ring
// messages (an AND layer's message is its gates' products t_i, so an error
// at a chosen offset is an additive error on a chosen gate, wire and lane;
// other steps carry GF(2^128) products, reveal shares, triples, hashes),
// and can send that message only after it has received the round's
// incoming one (a late, biased opening).
#ifndef KMPC_TEST_CORE_CHEAT_H_
#define KMPC_TEST_CORE_CHEAT_H_

#include <cstdint>
#include <vector>

#include "net/channel.h"

namespace kmpc::testing {

class CheatingChannel : public net::RingChannel {
 public:
  explicit CheatingChannel(net::RingChannel& inner) : inner_(inner) {}

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
  // Messages sent so far, and the size of each.
  uint64_t sent() const { return sent_; }
  const std::vector<size_t>& sizes() const { return sizes_; }

  int party() const override { return inner_.party(); }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    sizes_.push_back(msg.size());
    const bool hit = armed_ && sent_ == step_ && !msg.empty();
    ++sent_;
    if (!hit) return inner_.SendToPrev(msg);
    std::vector<uint8_t> bad(msg.begin(), msg.end());
    bad[offset_ % bad.size()] ^= mask_;
    fired_ = true;
    return inner_.SendToPrev(bad);
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    return inner_.RecvFromNext(out);
  }
  absl::Status Exchange(absl::Span<const uint8_t> to_prev,
                        absl::Span<uint8_t> from_next) override {
    if (armed_ && late_ && sent_ == step_) {
      absl::Status s = inner_.RecvFromNext(from_next);
      if (!s.ok()) return s;
      return SendToPrev(to_prev);
    }
    absl::Status s = SendToPrev(to_prev);
    if (!s.ok()) return s;
    return inner_.RecvFromNext(from_next);
  }

 private:
  net::RingChannel& inner_;
  bool armed_ = false, late_ = false, fired_ = false;
  uint64_t step_ = 0, sent_ = 0;
  size_t offset_ = 0;
  uint8_t mask_ = 0;
  std::vector<size_t> sizes_;
};

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_CHEAT_H_
