#include "protocol/prf.h"

#include <immintrin.h>

#include <atomic>

#include "share/replicated.h"

namespace kmpc::protocol {
namespace {

template <int kRcon>
inline __m128i ExpandStep(__m128i key) {
  __m128i t = _mm_aeskeygenassist_si128(key, kRcon);
  t = _mm_shuffle_epi32(t, 0xff);
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  return _mm_xor_si128(key, t);
}

inline __m128i Rk(const uint8_t* rk, int r) {
  return _mm_load_si128(reinterpret_cast<const __m128i*>(rk + 16 * r));
}

// AES-NI: 8 counter blocks per iteration hide the 4-cycle aesenc latency.
template <bool kTwo>
void FillAesNi(const uint8_t* rka, const uint8_t* rkb, uint64_t ctr,
               size_t nblocks, uint8_t* out) {
  constexpr int kPar = kTwo ? 4 : 8;
  size_t i = 0;
  for (; i + kPar <= nblocks; i += kPar) {
    __m128i a[kPar], b[kPar];
    #pragma GCC unroll 16
    for (int j = 0; j < kPar; ++j) {
      __m128i c = _mm_set_epi64x(0, static_cast<int64_t>(ctr + i + j));
      a[j] = _mm_xor_si128(c, Rk(rka, 0));
      if constexpr (kTwo) b[j] = _mm_xor_si128(c, Rk(rkb, 0));
    }
    #pragma GCC unroll 16
    for (int r = 1; r < 10; ++r) {
      const __m128i ka = Rk(rka, r);
      #pragma GCC unroll 16
      for (int j = 0; j < kPar; ++j) a[j] = _mm_aesenc_si128(a[j], ka);
      if constexpr (kTwo) {
        const __m128i kb = Rk(rkb, r);
        #pragma GCC unroll 16
        for (int j = 0; j < kPar; ++j) b[j] = _mm_aesenc_si128(b[j], kb);
      }
    }
    #pragma GCC unroll 16
    for (int j = 0; j < kPar; ++j) {
      __m128i v = _mm_aesenclast_si128(a[j], Rk(rka, 10));
      if constexpr (kTwo) v = _mm_xor_si128(v, _mm_aesenclast_si128(b[j], Rk(rkb, 10)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * (i + j)), v);
    }
  }
  for (; i < nblocks; ++i) {
    __m128i c = _mm_set_epi64x(0, static_cast<int64_t>(ctr + i));
    __m128i a = _mm_xor_si128(c, Rk(rka, 0));
    __m128i b = _mm_xor_si128(c, Rk(rkb, 0));
    #pragma GCC unroll 16
    for (int r = 1; r < 10; ++r) {
      a = _mm_aesenc_si128(a, Rk(rka, r));
      if constexpr (kTwo) b = _mm_aesenc_si128(b, Rk(rkb, r));
    }
    __m128i v = _mm_aesenclast_si128(a, Rk(rka, 10));
    if constexpr (kTwo) v = _mm_xor_si128(v, _mm_aesenclast_si128(b, Rk(rkb, 10)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * i), v);
  }
}

// The loops over registers and rounds must be unrolled: otherwise (GCC -O2)
// the state arrays live on the stack and every aesenc waits on a load and a
// store, which VAES's four blocks per instruction cannot hide.

// VAES: four blocks per zmm register, four registers per key in flight.
template <bool kTwo>
__attribute__((target("avx512f,vaes"))) void FillVaes(
    const uint8_t* rka, const uint8_t* rkb, uint64_t ctr, size_t nblocks,
    uint8_t* out) {
  constexpr int kPar = 4;  // registers per key
  __m512i ka[11], kb[11];
  #pragma GCC unroll 16
  for (int r = 0; r < 11; ++r) {
    ka[r] = _mm512_broadcast_i32x4(Rk(rka, r));
    if constexpr (kTwo) kb[r] = _mm512_broadcast_i32x4(Rk(rkb, r));
  }
  const __m512i kStep = _mm512_set_epi64(0, 3, 0, 2, 0, 1, 0, 0);
  const __m512i kFour = _mm512_set_epi64(0, 4, 0, 4, 0, 4, 0, 4);
  size_t i = 0;
  __m512i c = _mm512_add_epi64(
      _mm512_set_epi64(0, static_cast<int64_t>(ctr), 0, static_cast<int64_t>(ctr), 0,
                       static_cast<int64_t>(ctr), 0, static_cast<int64_t>(ctr)),
      kStep);
  for (; i + 4 * kPar <= nblocks; i += 4 * kPar) {
    __m512i a[kPar], b[kPar];
    #pragma GCC unroll 16
    for (int j = 0; j < kPar; ++j) {
      a[j] = _mm512_xor_si512(c, ka[0]);
      if constexpr (kTwo) b[j] = _mm512_xor_si512(c, kb[0]);
      c = _mm512_add_epi64(c, kFour);
    }
    #pragma GCC unroll 16
    for (int r = 1; r < 10; ++r) {
      #pragma GCC unroll 16
      for (int j = 0; j < kPar; ++j) a[j] = _mm512_aesenc_epi128(a[j], ka[r]);
      if constexpr (kTwo) {
        #pragma GCC unroll 16
        for (int j = 0; j < kPar; ++j) b[j] = _mm512_aesenc_epi128(b[j], kb[r]);
      }
    }
    #pragma GCC unroll 16
    for (int j = 0; j < kPar; ++j) {
      __m512i v = _mm512_aesenclast_epi128(a[j], ka[10]);
      if constexpr (kTwo) v = _mm512_xor_si512(v, _mm512_aesenclast_epi128(b[j], kb[10]));
      _mm512_storeu_si512(out + 16 * (i + 4 * j), v);
    }
  }
  // Tail: one register (4 blocks) at a time, then AES-NI for the rest.
  for (; i + 4 <= nblocks; i += 4) {
    __m512i a = _mm512_xor_si512(c, ka[0]);
    __m512i b;
    if constexpr (kTwo) b = _mm512_xor_si512(c, kb[0]);
    c = _mm512_add_epi64(c, kFour);
    #pragma GCC unroll 16
    for (int r = 1; r < 10; ++r) {
      a = _mm512_aesenc_epi128(a, ka[r]);
      if constexpr (kTwo) b = _mm512_aesenc_epi128(b, kb[r]);
    }
    __m512i v = _mm512_aesenclast_epi128(a, ka[10]);
    if constexpr (kTwo) v = _mm512_xor_si512(v, _mm512_aesenclast_epi128(b, kb[10]));
    _mm512_storeu_si512(out + 16 * i, v);
  }
  if (i < nblocks) {
    FillAesNi<kTwo>(rka, rkb, ctr + i, nblocks - i, out + 16 * i);
  }
}

std::atomic<bool> g_force_aesni{false};

bool HaveVaes() {
  static const bool have = __builtin_cpu_supports("vaes") &&
                           __builtin_cpu_supports("avx512f");
  return have;
}

}  // namespace

Prf::Prf(const uint8_t* key16) {
  __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key16));
  __m128i* rk = reinterpret_cast<__m128i*>(rk_.data());
  rk[0] = k;
  k = ExpandStep<0x01>(k); rk[1] = k;
  k = ExpandStep<0x02>(k); rk[2] = k;
  k = ExpandStep<0x04>(k); rk[3] = k;
  k = ExpandStep<0x08>(k); rk[4] = k;
  k = ExpandStep<0x10>(k); rk[5] = k;
  k = ExpandStep<0x20>(k); rk[6] = k;
  k = ExpandStep<0x40>(k); rk[7] = k;
  k = ExpandStep<0x80>(k); rk[8] = k;
  k = ExpandStep<0x1b>(k); rk[9] = k;
  k = ExpandStep<0x36>(k); rk[10] = k;
  k = _mm_setzero_si128();
}

Prf::~Prf() { share::Wipe(rk_.data(), rk_.size()); }

void Prf::Fill(uint64_t ctr, size_t nblocks, uint8_t* out) const {
  if (HaveVaes() && !g_force_aesni.load(std::memory_order_relaxed)) {
    FillVaes<false>(rk_.data(), rk_.data(), ctr, nblocks, out);
  } else {
    FillAesNi<false>(rk_.data(), rk_.data(), ctr, nblocks, out);
  }
}

void Prf::FillXor2(const Prf& a, const Prf& b, uint64_t ctr, size_t nblocks,
                   uint8_t* out) {
  if (HaveVaes() && !g_force_aesni.load(std::memory_order_relaxed)) {
    FillVaes<true>(a.rk_.data(), b.rk_.data(), ctr, nblocks, out);
  } else {
    FillAesNi<true>(a.rk_.data(), b.rk_.data(), ctr, nblocks, out);
  }
}

const char* PrfImplementation() {
  return (HaveVaes() && !g_force_aesni.load()) ? "vaes" : "aesni";
}

bool PrfForceAesNi(bool force) { return g_force_aesni.exchange(force); }

}  // namespace kmpc::protocol
