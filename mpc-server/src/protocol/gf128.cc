#include "protocol/gf128.h"

#include <emmintrin.h>
#include <smmintrin.h>
#include <tmmintrin.h>
#include <wmmintrin.h>

#include <cstring>

namespace kmpc::protocol {
namespace {

inline __m128i ByteSwap(__m128i x) {
  const __m128i kRev =
      _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm_shuffle_epi8(x, kRev);
}

// Unreduced 256-bit carry-less product of two byte-reflected operands.
inline void ClmulWide(__m128i a, __m128i b, __m128i* lo, __m128i* hi) {
  __m128i t3 = _mm_clmulepi64_si128(a, b, 0x00);
  __m128i t4 = _mm_clmulepi64_si128(a, b, 0x10);
  __m128i t5 = _mm_clmulepi64_si128(a, b, 0x01);
  __m128i t6 = _mm_clmulepi64_si128(a, b, 0x11);
  t4 = _mm_xor_si128(t4, t5);
  t5 = _mm_slli_si128(t4, 8);
  t4 = _mm_srli_si128(t4, 8);
  *lo = _mm_xor_si128(t3, t5);
  *hi = _mm_xor_si128(t6, t4);
}

// Shift the 256-bit product left by one (bit reflection) and reduce modulo
// x^128 + x^7 + x^2 + x + 1 (Intel white paper, Figure 5).
inline __m128i Reduce(__m128i t3, __m128i t6) {
  __m128i t7 = _mm_srli_epi32(t3, 31);
  __m128i t8 = _mm_srli_epi32(t6, 31);
  t3 = _mm_slli_epi32(t3, 1);
  t6 = _mm_slli_epi32(t6, 1);
  __m128i t9 = _mm_srli_si128(t7, 12);
  t8 = _mm_slli_si128(t8, 4);
  t7 = _mm_slli_si128(t7, 4);
  t3 = _mm_or_si128(t3, t7);
  t6 = _mm_or_si128(t6, t8);
  t6 = _mm_or_si128(t6, t9);
  t7 = _mm_slli_epi32(t3, 31);
  t8 = _mm_slli_epi32(t3, 30);
  t9 = _mm_slli_epi32(t3, 25);
  t7 = _mm_xor_si128(t7, t8);
  t7 = _mm_xor_si128(t7, t9);
  t8 = _mm_srli_si128(t7, 4);
  t7 = _mm_slli_si128(t7, 12);
  t3 = _mm_xor_si128(t3, t7);
  __m128i t2 = _mm_srli_epi32(t3, 1);
  __m128i t4 = _mm_srli_epi32(t3, 2);
  __m128i t5 = _mm_srli_epi32(t3, 7);
  t2 = _mm_xor_si128(t2, t4);
  t2 = _mm_xor_si128(t2, t5);
  t2 = _mm_xor_si128(t2, t8);
  t3 = _mm_xor_si128(t3, t2);
  return _mm_xor_si128(t6, t3);
}

inline __m128i Load(const uint8_t* p) {
  return ByteSwap(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void Store(uint8_t* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), ByteSwap(v));
}

}  // namespace

void GfMul(const uint8_t* a, const uint8_t* b, uint8_t* out) {
  __m128i lo, hi;
  ClmulWide(Load(a), Load(b), &lo, &hi);
  Store(out, Reduce(lo, hi));
}

void GfCrossTerms(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
                  const uint8_t* y1, uint8_t* t, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    const size_t o = 16 * j;
    const __m128i a0 = Load(x0 + o), a1 = Load(x1 + o);
    const __m128i b0 = Load(y0 + o), b1 = Load(y1 + o);
    __m128i lo1, hi1, lo2, hi2;
    ClmulWide(a0, _mm_xor_si128(b0, b1), &lo1, &hi1);
    ClmulWide(a1, b0, &lo2, &hi2);
    const __m128i r = Reduce(_mm_xor_si128(lo1, lo2), _mm_xor_si128(hi1, hi2));
    Store(t + o, _mm_xor_si128(r, Load(t + o)));
  }
}

Block GfMul(const Block& a, const Block& b) {
  Block out;
  GfMul(a.data(), b.data(), out.data());
  return out;
}

Block GfMulReference(const Block& x, const Block& y) {
  Block z{};
  Block v = y;
  for (int i = 0; i < 128; ++i) {
    if ((x[i / 8] >> (7 - i % 8)) & 1) {
      for (int k = 0; k < 16; ++k) z[k] ^= v[k];
    }
    const bool lsb = v[15] & 1;
    for (int k = 15; k > 0; --k) {
      v[k] = static_cast<uint8_t>((v[k] >> 1) | (v[k - 1] << 7));
    }
    v[0] >>= 1;
    if (lsb) v[0] ^= 0xe1;
  }
  return z;
}

std::vector<uint8_t> GhashInput(absl::Span<const uint8_t> a,
                                absl::Span<const uint8_t> c) {
  const size_t m = GhashBlocks(a.size(), c.size());
  std::vector<uint8_t> x(m * 16, 0);
  if (!a.empty()) std::memcpy(x.data(), a.data(), a.size());
  const size_t c_off = (a.size() + 15) / 16 * 16;
  if (!c.empty()) std::memcpy(x.data() + c_off, c.data(), c.size());
  uint8_t* lens = x.data() + (m - 1) * 16;
  const uint64_t abits = static_cast<uint64_t>(a.size()) * 8;
  const uint64_t cbits = static_cast<uint64_t>(c.size()) * 8;
  for (int k = 0; k < 8; ++k) {
    lens[k] = static_cast<uint8_t>(abits >> (56 - 8 * k));
    lens[8 + k] = static_cast<uint8_t>(cbits >> (56 - 8 * k));
  }
  return x;
}

void GhashWithPowers(absl::Span<const uint8_t> x, const uint8_t* powers,
                     uint8_t* out) {
  const size_t m = x.size() / 16;
  // Lazy reduction: sum the unreduced products, reduce once.
  __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();
  for (size_t j = 0; j < m; ++j) {
    __m128i l, h;
    ClmulWide(Load(x.data() + 16 * j), Load(powers + 16 * (m - 1 - j)), &l,
              &h);
    lo = _mm_xor_si128(lo, l);
    hi = _mm_xor_si128(hi, h);
  }
  Store(out, Reduce(lo, hi));
}

Block Ghash(const Block& h, absl::Span<const uint8_t> x) {
  Block y{};
  for (size_t j = 0; j + 16 <= x.size(); j += 16) {
    for (int k = 0; k < 16; ++k) y[k] ^= x[j + k];
    y = GfMul(y, h);
  }
  return y;
}

}  // namespace kmpc::protocol
