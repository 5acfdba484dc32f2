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

std::array<uint8_t, 5> ChecksumAad(uint32_t usage) {
  return {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
          static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0x99};
}

namespace {

// This party's share of GHASH_H(pad16(A') || pad16(D) || lens) * H^shift,
// D shared as (share0, share1), XORed into out: the public blocks (A', D
// zeroed, lengths) times the first share of their powers (sum_i of first
// shares is the product with H^k), then the cross terms x_i h_i ^ x_i
// h_{i+1} ^ x_{i+1} h_i of block q of D (X_{2+q}) with H^(m-1-q+shift)
// (Araki et al. CCS 2016 section 2.2). The pad holds H^1 .. H^(m+shift),
// m = ceil(len/16) + 2: the caller checks.
void GhashShare(const PadState& pad, uint32_t usage, absl::Span<const uint8_t> share0,
                absl::Span<const uint8_t> share1, size_t shift, uint8_t* out) {
  const size_t len = share0.size();
  const size_t nd = contract::CeilBlocks(len);
  const size_t m = nd + 2;
  const uint8_t* h0 = pad.Powers(0);
  const uint8_t* h1 = pad.Powers(1);
  const std::array<uint8_t, 5> a = ChecksumAad(usage);
  uint8_t acc[16];
  {
    const std::vector<uint8_t> zeros(len, 0);
    const std::vector<uint8_t> x = protocol::GhashInput(a, zeros);
    protocol::GhashWithPowers(x, h0 + 16 * shift, acc);
    for (int i = 0; i < 16; ++i) out[i] ^= acc[i];
  }
  uint8_t x0[16], x1[16];
  for (size_t q = 0; q < nd; ++q) {
    const size_t n = std::min<size_t>(16, len - 16 * q);
    std::memset(x0, 0, 16);
    std::memset(x1, 0, 16);
    std::memcpy(x0, share0.data() + 16 * q, n);
    std::memcpy(x1, share1.data() + 16 * q, n);
    const size_t k = m - 1 - q + shift;  // H^k at offset 16*(k-1)
    protocol::GfCrossTerms(x0, x1, h0 + 16 * (k - 1), h1 + 16 * (k - 1), out, 1);
  }
  share::Wipe(x0, 16);
  share::Wipe(x1, 16);
  share::Wipe(acc, 16);
}

}  // namespace

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
  std::array<uint8_t, 16> t{};
  GhashShare(pad, usage, share0, share1, 0, t.data());
  for (int i = 0; i < 16; ++i) t[i] ^= pad.mask[0][i] ^ pad.zero[i];
  return t;
}

absl::StatusOr<std::array<uint8_t, 32>> ChainedSignShare(
    const PadState& pad1, const PadState& pad2, uint32_t usage,
    absl::Span<const uint8_t> share0, absl::Span<const uint8_t> share1) {
  if (pad2.party != pad1.party)
    return absl::InvalidArgumentError("Sign chain: the pads belong to different parties");
  if (pad1.verify_only || pad2.verify_only)
    return absl::InvalidArgumentError("Sign chain: a verification pad only verifies");
  if (pad2.key_id != pad1.key_id || pad2.cipher != pad1.cipher)
    return absl::InvalidArgumentError("Sign chain: the pads are under different keys");
  if (pad2.usage != pad1.usage)
    return absl::InvalidArgumentError(absl::StrCat(
        "Sign chain: usages ", pad1.usage, " and ", pad2.usage, " differ"));
  constexpr size_t kLen2 = contract::kChecksumSize;  // D_2 = ctr0_1 || tag_1
  static_assert(contract::kCtr0Size == 16 && contract::kTagSize == 16,
                "D_2's two blocks are ctr0_1 and tag_1");
  if (pad2.max_length < kLen2)
    return absl::InvalidArgumentError(absl::StrCat(
        "Sign chain: the second pad signs at most ", pad2.max_length, " bytes"));
  const size_t m1 = contract::CeilBlocks(share0.size()) + 2;
  // tag_1 * H^2 needs H^(k+2) for every power k of the first signature.
  if (pad1.NumPowers() < m1 + 2)
    return absl::InvalidArgumentError("Sign chain: the first pad lacks powers of H");
  if (pad2.NumPowers() < kLen2 / 16 + 2)
    return absl::InvalidArgumentError("Sign chain: the second pad lacks powers of H");
  absl::StatusOr<std::array<uint8_t, 16>> t1 = SignShare(pad1, usage, share0, share1);
  if (!t1.ok()) return t1.status();
  std::array<uint8_t, 32> out{};
  std::memcpy(out.data(), t1->data(), 16);
  share::Wipe(t1->data(), 16);
  const std::array<uint8_t, 5> a = ChecksumAad(usage);
  uint8_t* t2 = out.data() + 16;
  uint8_t acc[16];
  // Signature 2's public blocks (A', ctr0_1, tag_1's block zeroed, lengths)
  // times the first share of pad 2's powers.
  {
    std::vector<uint8_t> d2(kLen2, 0);
    std::memcpy(d2.data(), pad1.ctr0.data(), 16);
    const std::vector<uint8_t> x = protocol::GhashInput(a, d2);
    protocol::GhashWithPowers(x, pad2.Powers(0), acc);
    for (int i = 0; i < 16; ++i) t2[i] ^= acc[i];
  }
  share::Wipe(acc, 16);
  // tag_1 (block X_3 of signature 2, power H^2) substituted: its GHASH part
  // with pad 1's powers shifted by two, then its pad.
  GhashShare(pad1, usage, share0, share1, 2, t2);
  const uint8_t* h0 = pad1.Powers(0);
  const uint8_t* h1 = pad1.Powers(1);
  // AES_K(ctr0_1) * H^2: both shared, local cross terms.
  protocol::GfCrossTerms(pad1.mask[0].data(), pad1.mask[1].data(), h0 + 16, h1 + 16, t2, 1);
  for (int i = 0; i < 16; ++i) t2[i] ^= pad2.mask[0][i] ^ pad2.zero[i];
  return out;
}

}  // namespace kmpc::engine
