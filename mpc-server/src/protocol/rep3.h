// Interactive steps on replicated shares, each one message to party i-1
// and one from party i+1 (MP-SPDZ's prepare / exchange / finalize rhythm):
//
//   AND / GF(2^128) product of x and y, per party i:
//     t_i = x_i*y_i ^ x_i*y_{i+1} ^ x_{i+1}*y_i ^ a_i   (a = zero-share)
//     send t_i to party i-1, receive t_{i+1}; new shares (t_i, t_{i+1}).
//   Reveal among the servers: send s_{i+1} to party i-1, receive s_{i+2}.
//
// The bulk AND layers of AES live in aes/ (they write t_i straight into
// the wire arrays); these entry points serve the rest and the tests.
#ifndef KMPC_PROTOCOL_REP3_H_
#define KMPC_PROTOCOL_REP3_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "net/channel.h"
#include "protocol/prss.h"
#include "protocol/verify.h"

namespace kmpc::protocol {

class Rep3 {
 public:
  Rep3(net::RingChannel& channel, Prss& prss)
      : channel_(channel), prss_(prss) {}

  int party() const { return prss_.party(); }
  // Malicious security (verify.h): while a log is set, And, GfMul, Reveal
  // and the AES kernels record every product and opening in it.
  MulLog* log() const { return log_; }
  void set_log(MulLog* log) { log_ = log; }
  net::RingChannel& channel() { return channel_; }
  Prss& prss() { return prss_; }

  // One AND layer over n = x0.size() words (64 ANDs per word). Outputs
  // must not alias inputs.
  absl::Status And(absl::Span<const uint64_t> x0, absl::Span<const uint64_t> x1,
                   absl::Span<const uint64_t> y0, absl::Span<const uint64_t> y1,
                   absl::Span<uint64_t> z0, absl::Span<uint64_t> z1);

  // And's products of n words without logging them: the caller logged
  // (or staged in the log, MulLog::AppendAnd) the operands already. z0
  // and z1 must not alias the inputs.
  absl::Status AndUnlogged(const uint64_t* x0, const uint64_t* x1, const uint64_t* y0,
                           const uint64_t* y1, uint64_t* z0, uint64_t* z1, size_t n);

  // n = x0.size()/16 shared GF(2^128) products in one round. Outputs must
  // not alias inputs.
  absl::Status GfMul(absl::Span<const uint8_t> x0, absl::Span<const uint8_t> x1,
                     absl::Span<const uint8_t> y0, absl::Span<const uint8_t> y1,
                     absl::Span<uint8_t> z0, absl::Span<uint8_t> z1);

  // Local operations on shared GF(2^128) elements (n = x0.size()/16):
  // z = c * x for public c (16 bytes, or 16*n: one per element), and
  // z = x^2 (squaring is additive in characteristic 2). Component-wise,
  // no communication. Outputs may alias inputs.
  static void GfMulPublic(absl::Span<const uint8_t> c,
                          absl::Span<const uint8_t> x0,
                          absl::Span<const uint8_t> x1, absl::Span<uint8_t> z0,
                          absl::Span<uint8_t> z1);
  static void GfSquare(absl::Span<const uint8_t> x0,
                       absl::Span<const uint8_t> x1, absl::Span<uint8_t> z0,
                       absl::Span<uint8_t> z1);

  // Opens shared bytes among the three servers (one round).
  absl::Status Reveal(absl::Span<const uint8_t> c0, absl::Span<const uint8_t> c1,
                      absl::Span<uint8_t> out);

 private:
  net::RingChannel& channel_;
  Prss& prss_;
  MulLog* log_ = nullptr;
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_REP3_H_
