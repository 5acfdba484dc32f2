// Ring-free signing with a pad drawn by a JOB_PAD job (engine.h, PadState
// and SignShare; kmpc.proto SignItem).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "engine/engine.h"
#include "protocol/gf128.h"
#include "share/replicated.h"

namespace kmpc::engine {

PadState::~PadState() {
  share::Wipe(zero.data(), zero.size());
  for (auto& x : r) share::Wipe(x.data(), x.size());
}

absl::StatusOr<std::array<uint8_t, 16>> SignShare(
    const PadState& pad, uint32_t usage, absl::Span<const uint8_t> share0,
    absl::Span<const uint8_t> share1) {
  if (pad.party < 0 || pad.party > 2)
    return absl::InvalidArgumentError("Sign: pad has no party");
  if (usage != pad.usage)
    return absl::InvalidArgumentError(absl::StrCat(
        "Sign: usage ", usage, " differs from the pad's ", pad.usage));
  const size_t len = share0.size();
  if (share1.size() != len)
    return absl::InvalidArgumentError(absl::StrCat(
        "Sign: message shares of ", len, " and ", share1.size(), " bytes"));
  if (len > pad.max_length)
    return absl::InvalidArgumentError(absl::StrCat(
        "Sign: message of ", len, " bytes, the pad signs at most ", pad.max_length));
  // GHASH blocks: A' (5 bytes, one block), D, the lengths block.
  const size_t nd = contract::CeilBlocks(len);
  const size_t m = nd + 2;
  if (pad.NumPowers() < m)
    return absl::InvalidArgumentError("Sign: pad lacks powers of H");
  const uint8_t* h0 = pad.Powers(0);
  const uint8_t* h1 = pad.Powers(1);
  // Public blocks (A', D zeroed, lengths) times the first share of their
  // powers: sum_i of first shares is the product with H^k.
  const uint8_t a[5] = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                        static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0x99};
  std::array<uint8_t, 16> t{};
  {
    const std::vector<uint8_t> zeros(len, 0);
    const std::vector<uint8_t> x = protocol::GhashInput(a, zeros);
    protocol::GhashWithPowers(x, h0, t.data());
  }
  // Shared blocks: cross terms x_i h_i ^ x_i h_{i+1} ^ x_{i+1} h_i of block
  // q of D (X_{2+q}) with H^(m-1-q), accumulated into t.
  uint8_t x0[16], x1[16];
  for (size_t q = 0; q < nd; ++q) {
    const size_t n = std::min<size_t>(16, len - 16 * q);
    std::memset(x0, 0, 16);
    std::memset(x1, 0, 16);
    std::memcpy(x0, share0.data() + 16 * q, n);
    std::memcpy(x1, share1.data() + 16 * q, n);
    const size_t k = m - 1 - q;  // H^k at offset 16*(k-1)
    protocol::GfCrossTerms(x0, x1, h0 + 16 * (k - 1), h1 + 16 * (k - 1), t.data(), 1);
  }
  share::Wipe(x0, 16);
  share::Wipe(x1, 16);
  for (int i = 0; i < 16; ++i) t[i] ^= pad.mask[0][i] ^ pad.zero[i];
  return t;
}

}  // namespace kmpc::engine
