// Correlated randomness without interaction (Araki et al., CCS 2016,
// section 2.2, Protocol 3.8): party i holds PRF keys k_i and k_{i+1}; every
// pair of parties shares one key. For a fresh id (a counter that all three
// parties advance in lock-step and never reuse):
//   zero-share   a_i = F(k_i, id) ^ F(k_{i+1}, id)   (a_0 ^ a_1 ^ a_2 = 0)
//   random value r   = r_0 ^ r_1 ^ r_2, r_j = F(k_j, id); party i knows
//                      (r_i, r_{i+1}), a replicated sharing of r.
#ifndef KMPC_PROTOCOL_PRSS_H_
#define KMPC_PROTOCOL_PRSS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "net/channel.h"
#include "protocol/prf.h"

namespace kmpc::protocol {

class Prss {
 public:
  // Key set-up on the ring: party i draws k_i, sends it to party i-1 and
  // receives k_{i+1} from party i+1 (one exchange).
  static absl::StatusOr<Prss> Setup(net::RingChannel& channel);
  // For tests: explicit keys.
  Prss(int party, const uint8_t* k_self, const uint8_t* k_next);

  int party() const { return party_; }
  // Blocks of F used so far (the next id).
  uint64_t counter() const { return counter_; }

  // out[0..nbytes) = this party's share of zero (nbytes any size).
  void ZeroShare(uint8_t* out, size_t nbytes);
  // Advances the id counter (keeps parties in step after a batch in which
  // they drew different amounts).
  void Skip(uint64_t blocks) { counter_ += blocks; }

  // comp0/comp1 = this party's two components of a fresh random value.
  void RandomShares(uint8_t* comp0, uint8_t* comp1, size_t nbytes);

 private:
  int party_ = 0;
  Prf self_;   // k_i
  Prf next_;   // k_{i+1}
  uint64_t counter_ = 0;
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_PRSS_H_
