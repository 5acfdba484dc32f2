// F(k, id) of Araki et al. Protocol 3.8: AES-128 in counter mode with
// AES-NI, 8 blocks in flight, or VAES (4 blocks per 512-bit register,
// 16 in flight) when the CPU has it. The counter block is the 64-bit
// little-endian block index in bytes 0..7 and zero in bytes 8..15.
#ifndef KMPC_PROTOCOL_PRF_H_
#define KMPC_PROTOCOL_PRF_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace kmpc::protocol {

class Prf {
 public:
  Prf() = default;
  explicit Prf(const uint8_t* key16);
  ~Prf();
  Prf(const Prf&) = default;
  Prf& operator=(const Prf&) = default;

  // out[0 .. 16*nblocks) = AES_k(ctr) || AES_k(ctr+1) || ...
  void Fill(uint64_t ctr, size_t nblocks, uint8_t* out) const;
  // out = F(a, ctr..) ^ F(b, ctr..): the zero-share of Protocol 3.8.
  static void FillXor2(const Prf& a, const Prf& b, uint64_t ctr,
                       size_t nblocks, uint8_t* out);

  const uint8_t* round_keys() const { return rk_.data(); }

 private:
  alignas(64) std::array<uint8_t, 11 * 16> rk_{};
};

// Which implementation the dispatcher picked ("vaes" or "aesni").
const char* PrfImplementation();
// Force the AES-NI path (benchmarks); returns the previous setting.
bool PrfForceAesNi(bool force);

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_PRF_H_
