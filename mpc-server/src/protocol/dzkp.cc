#include "protocol/dzkp.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "protocol/dzkp_simd.h"
#include "share/replicated.h"

namespace kmpc::protocol::dzkp {

Fe Inv(Fe a) {
  // r = a^(2^k - 1) after k - 1 steps of r = r^2 * a; then one squaring.
  Fe r = a;
  for (int i = 0; i < 126; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

F64 Inv(F64 a) {
  F64 r = a;
  for (int i = 0; i < 62; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

namespace {

uint8_t ReverseBits(uint8_t b) {
  b = static_cast<uint8_t>((b & 0xf0) >> 4 | (b & 0x0f) << 4);
  b = static_cast<uint8_t>((b & 0xcc) >> 2 | (b & 0x33) << 2);
  return static_cast<uint8_t>((b & 0xaa) >> 1 | (b & 0x55) << 1);
}

// 1 / prod_{m != j} (e_j + e_m) for j < n, computed once per n.
constexpr int kMaxPoints = kMaxProofPoints + 1;
template <class E>
const E* Denominators(int n) {
  static std::mutex mu;
  static std::array<std::vector<E>, kMaxPoints + 1> table;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<E>& t = table[n];
  if (t.empty()) {
    t.resize(n);
    for (int j = 0; j < n; ++j) {
      E d = Field<E>::Elem(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) d = Mul(d, Field<E>::Elem(static_cast<uint64_t>(j ^ m)));
      }
      t[j] = Inv(d);
    }
  }
  return t.data();
}

}  // namespace

bool ForceScalar(bool force) {
  using simd::ForceScalarFlag;
  const bool prev = ForceScalarFlag();
  ForceScalarFlag() = force;
  return prev;
}

Fe FromGcm(const uint8_t* b) {
  uint8_t r[16];
  for (int i = 0; i < 16; ++i) r[i] = ReverseBits(b[i]);
  const Fe v = Load(r);
  share::Wipe(r, sizeof r);
  return v;
}

void ToGcm(Fe a, uint8_t* b) {
  Store(b, a);
  for (int i = 0; i < 16; ++i) b[i] = ReverseBits(b[i]);
}

template <class E>
void LagrangeAt(int n, E x, E* out) {
  using F = Field<E>;
  const E* den = Denominators<E>(n);
  if (n <= 16) {  // n^2 products: fewer than one inversion's for small n
    for (int j = 0; j < n; ++j) {
      E num = F::Elem(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) num = Mul(num, Add(x, F::Elem(static_cast<uint64_t>(m))));
      }
      out[j] = Mul(num, den[j]);
    }
    return;
  }
  // Barycentric: L_j(x) = den_j * prod_m (x - e_m) / (x - e_j), the n
  // inverses from one (Montgomery's trick); x a node gives a unit vector.
  E d[kMaxPoints], prefix[kMaxPoints];
  E all = F::Elem(1);
  for (int j = 0; j < n; ++j) {
    d[j] = Add(x, F::Elem(static_cast<uint64_t>(j)));
    if (Equal(d[j], F::Elem(0))) {
      for (int m = 0; m < n; ++m) out[m] = F::Elem(m == j);
      return;
    }
    prefix[j] = all;  // d_0 ... d_{j-1}
    all = Mul(all, d[j]);
  }
  E inv = Inv(all);  // 1 / (d_0 ... d_{k})
  for (int j = n - 1; j >= 0; --j) {
    const E inv_dj = Mul(inv, prefix[j]);  // 1 / d_j
    inv = Mul(inv, d[j]);
    out[j] = Mul(Mul(all, inv_dj), den[j]);
  }
}
template void LagrangeAt<Fe>(int, Fe, Fe*);
template void LagrangeAt<F64>(int, F64, F64*);

template <class E>
void Interpolate(int n, const E* v0, const E* v1, E r, E out[2]) {
  E lag[kMaxPoints];
  LagrangeAt(n, r, lag);
  typename Field<E>::Wide acc[2];
  for (int j = 0; j < n; ++j) {
    MulAcc(acc[0], lag[j], v0[j]);
    MulAcc(acc[1], lag[j], v1[j]);
  }
  out[0] = Reduce(acc[0]);
  out[1] = Reduce(acc[1]);
}
template void Interpolate<Fe>(int, const Fe*, const Fe*, Fe, Fe[2]);
template void Interpolate<F64>(int, const F64*, const F64*, F64, F64[2]);

}  // namespace kmpc::protocol::dzkp
