#include "protocol/prss.h"

#include <cstring>

#include "share/replicated.h"

namespace kmpc::protocol {

absl::StatusOr<Prss> Prss::Setup(net::RingChannel& channel) {
  uint8_t k_self[16], k_next[16];
  absl::Status st = share::RandomBytes(absl::MakeSpan(k_self));
  if (st.ok()) {
    st = channel.Exchange(absl::MakeConstSpan(k_self), absl::MakeSpan(k_next));
  }
  if (!st.ok()) {
    share::Wipe(k_self, sizeof k_self);
    share::Wipe(k_next, sizeof k_next);
    return st;
  }
  Prss prss(channel.party(), k_self, k_next);
  share::Wipe(k_self, sizeof k_self);
  share::Wipe(k_next, sizeof k_next);
  return prss;
}

Prss::Prss(int party, const uint8_t* k_self, const uint8_t* k_next)
    : party_(party), self_(k_self), next_(k_next) {}

void Prss::ZeroShare(uint8_t* out, size_t nbytes) {
  const size_t full = nbytes / 16;
  Prf::FillXor2(self_, next_, counter_, full, out);
  counter_ += full;
  if (nbytes % 16 != 0) {
    uint8_t tail[16];
    Prf::FillXor2(self_, next_, counter_, 1, tail);
    counter_ += 1;
    std::memcpy(out + 16 * full, tail, nbytes % 16);
    share::Wipe(tail, sizeof tail);
  }
}

void Prss::RandomShares(uint8_t* comp0, uint8_t* comp1, size_t nbytes) {
  const size_t blocks = (nbytes + 15) / 16;
  const size_t full = nbytes / 16;
  self_.Fill(counter_, full, comp0);
  next_.Fill(counter_, full, comp1);
  if (full != blocks) {
    uint8_t tail[16];
    self_.Fill(counter_ + full, 1, tail);
    std::memcpy(comp0 + 16 * full, tail, nbytes % 16);
    next_.Fill(counter_ + full, 1, tail);
    std::memcpy(comp1 + 16 * full, tail, nbytes % 16);
    share::Wipe(tail, sizeof tail);
  }
  counter_ += blocks;
}

}  // namespace kmpc::protocol
