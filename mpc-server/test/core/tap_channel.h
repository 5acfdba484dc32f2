// A RingChannel wrapper for the check's attack tests: records every
// message its party sends and receives and, for a cheater, XORs a delta
// into one outgoing message (Shift). Unlike CheatingChannel (../cheat.h)
// it keeps the messages' contents, so a test can compare a party's
// transcript with an honest run's.
#ifndef KMPC_TEST_CORE_TAP_CHANNEL_H_
#define KMPC_TEST_CORE_TAP_CHANNEL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "net/channel.h"

namespace kmpc::testing {

class TapChannel : public net::RingChannel {
 public:
  using Msgs = std::vector<std::vector<uint8_t>>;

  explicit TapChannel(net::RingChannel& inner) : inner_(inner) {}
  // Message number `at` (0 = the first this channel sends) gets `delta`
  // XORed into its first bytes.
  void Shift(uint64_t at, std::vector<uint8_t> delta) {
    at_ = at;
    delta_ = std::move(delta);
  }
  int party() const override { return inner_.party(); }
  absl::Status SendToPrev(absl::Span<const uint8_t> msg) override {
    std::vector<uint8_t> m(msg.begin(), msg.end());
    if (sent_.size() == at_)
      for (size_t k = 0; k < m.size() && k < delta_.size(); ++k) m[k] ^= delta_[k];
    sent_.push_back(m);
    return inner_.SendToPrev(m);
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    absl::Status st = inner_.RecvFromNext(out);
    if (st.ok()) received_.emplace_back(out.begin(), out.end());
    return st;
  }
  const Msgs& sent() const { return sent_; }
  const Msgs& received() const { return received_; }

 private:
  net::RingChannel& inner_;
  uint64_t at_ = ~uint64_t{0};
  std::vector<uint8_t> delta_;
  Msgs sent_, received_;
};

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_TAP_CHANNEL_H_
