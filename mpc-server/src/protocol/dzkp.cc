#include "protocol/dzkp.h"

#include <array>
#include <cstring>
#include <mutex>

namespace kmpc::protocol::dzkp {

Fe Inv(Fe a) {
  // r = a^(2^k - 1) after k - 1 steps of r = r^2 * a; then one squaring.
  Fe r = a;
  for (int i = 0; i < 126; ++i) r = Mul(Mul(r, r), a);
  return Mul(r, r);
}

namespace {

uint8_t ReverseBits(uint8_t b) {
  b = static_cast<uint8_t>((b & 0xf0) >> 4 | (b & 0x0f) << 4);
  b = static_cast<uint8_t>((b & 0xcc) >> 2 | (b & 0x33) << 2);
  return static_cast<uint8_t>((b & 0xaa) >> 1 | (b & 0x55) << 1);
}

// 1 / prod_{m != j} (e_j + e_m) for j < n, computed once per n.
constexpr int kMaxPoints = 64;
const Fe* Denominators(int n) {
  static std::mutex mu;
  static std::array<std::vector<Fe>, kMaxPoints + 1> table;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Fe>& t = table[n];
  if (t.empty()) {
    t.resize(n);
    for (int j = 0; j < n; ++j) {
      Fe d = FromU64(1);
      for (int m = 0; m < n; ++m) {
        if (m != j) d = Mul(d, FromU64(static_cast<uint64_t>(j ^ m)));
      }
      t[j] = Inv(d);
    }
  }
  return t.data();
}

// 8 x 8 bit matrix transpose (Hacker's Delight, 7-3): byte i bit j ->
// byte j bit i.
inline uint64_t Transpose8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x ^= t ^ (t << 28);
  return x;
}

// The words of a group -> per lane l the kGroupWords-bit pattern whose
// bit j is lane l of word j.
using Pattern = uint32_t;
static_assert(kGroupWords == 8 * sizeof(Pattern));
void TransposeGroup(const uint64_t* w, Pattern out[64]) {
  std::memset(out, 0, 64 * sizeof(Pattern));
  for (int h = 0; h < kGroupWords / 8; ++h) {
    for (int k = 0; k < 8; ++k) {
      uint64_t m = 0;
      for (int j = 0; j < 8; ++j) m |= ((w[8 * h + j] >> (8 * k)) & 0xff) << (8 * j);
      m = Transpose8(m);
      for (int l = 0; l < 8; ++l) {
        out[8 * k + l] |= static_cast<Pattern>((m >> (8 * l)) & 0xff) << (8 * h);
      }
    }
  }
}

// Sums of coefficients over the set bits of a byte: t[b] = sum c_j, bit j
// of b set (j < 8).
void SubsetSums(const Fe* c, Fe* t) {
  t[0] = Zero();
  for (int j = 0; j < 8; ++j) {
    const int half = 1 << j;
    for (int b = 0; b < half; ++b) t[half + b] = Add(t[b], c[j]);
  }
}

// The words of group k of a share array (zero past n).
inline void LoadGroup(const uint64_t* a, size_t n, size_t k, uint64_t* out) {
  const size_t first = k * kGroupWords;
  for (int j = 0; j < kGroupWords; ++j) {
    out[j] = first + j < n ? a[first + j] : 0;
  }
}

}  // namespace

Fe FromGcm(const uint8_t* b) {
  uint8_t r[16];
  for (int i = 0; i < 16; ++i) r[i] = ReverseBits(b[i]);
  const Fe v = Load(r);
  std::memset(r, 0, sizeof r);
  return v;
}

void ToGcm(Fe a, uint8_t* b) {
  Store(b, a);
  for (int i = 0; i < 16; ++i) b[i] = ReverseBits(b[i]);
}

void LagrangeAt(int n, Fe x, Fe* out) {
  const Fe* den = Denominators(n);
  for (int j = 0; j < n; ++j) {
    Fe num = FromU64(1);
    for (int m = 0; m < n; ++m) {
      if (m != j) num = Mul(num, Add(x, FromU64(static_cast<uint64_t>(m))));
    }
    out[j] = Mul(num, den[j]);
  }
}

void Lift::Init(const Fe* lambda) {
  for (int l = 0; l < 64; ++l) lambda_[l] = lambda[l];
  for (int b = 0; b < 8; ++b) SubsetSums(lambda + 8 * b, t_[b]);
}

void FirstLevelH(const AndShares& s, const AndWeights& w, Fe* out, Fe claim[2]) {
  constexpr int G = kGroupWords;
  const size_t groups = (s.n + G - 1) / G;
  static thread_local Wide S[G][G];
  for (auto& row : S) for (auto& v : row) v = Wide();
  Wide z[2];
  uint64_t x0[G], x1[G], y0[G], yy[G], zc[G];
  for (size_t k = 0; k < groups; ++k) {
    LoadGroup(s.x[0], s.n, k, x0);
    LoadGroup(s.x[1], s.n, k, x1);
    LoadGroup(s.y[0], s.n, k, y0);
    LoadGroup(s.y[1], s.n, k, yy);
    for (int j = 0; j < G; ++j) yy[j] ^= y0[j];
    const Fe nu = w.nu[k];
    // Weak share of x_j & y_j': x0 & (y0 ^ y1) ^ x1 & y0, lane-wise.
    for (int j = 0; j < G; ++j) {
      for (int j2 = 0; j2 < G; ++j2) {
        MulAcc(S[j][j2], nu, w.lift((x0[j] & yy[j2]) ^ (x1[j] & y0[j2])));
      }
    }
    for (int c = 0; c < 2; ++c) {
      LoadGroup(s.z[c], s.n, k, zc);
      Wide t;
      for (int j = 0; j < G; ++j) MulAcc(t, w.tau[j], w.lift(zc[j]));
      MulAcc(z[c], nu, Reduce(t));
    }
  }
  for (int c = 0; c < 2; ++c) claim[c] = Reduce(z[c]);
  // h(p) = sum_{j,j'} L_j(p) L_j'(p) tau_j S_{j,j'}; L_j(e_p) = [j = p]
  // for p < G.
  static thread_local Fe sr[G][G];
  for (int j = 0; j < G; ++j)
    for (int j2 = 0; j2 < G; ++j2) sr[j][j2] = Reduce(S[j][j2]);
  for (int p = 1; p < kHPoints; ++p) {
    if (p < G) {
      out[p - 1] = Mul(w.tau[p], sr[p][p]);
      continue;
    }
    Fe lag[G];
    LagrangeAt(G, FromU64(static_cast<uint64_t>(p)), lag);
    Wide acc;
    for (int j = 0; j < G; ++j) {
      Wide inner;
      for (int j2 = 0; j2 < G; ++j2) MulAcc(inner, lag[j2], sr[j][j2]);
      MulAcc(acc, Mul(lag[j], w.tau[j]), Reduce(inner));
    }
    out[p - 1] = Reduce(acc);
  }
  for (auto& row : S) for (auto& v : row) v = Wide();
  for (auto& row : sr) for (auto& v : row) v = Zero();
  std::memset(x0, 0, sizeof x0);
  std::memset(x1, 0, sizeof x1);
  std::memset(y0, 0, sizeof y0);
  std::memset(yy, 0, sizeof yy);
  std::memset(zc, 0, sizeof zc);
}

void FirstLevelFold(const AndShares& s, const AndWeights& w, Fe r, Fe* f0,
                    Fe* f1, Fe* g0, Fe* g1) {
  constexpr int G = kGroupWords;
  const size_t groups = (s.n + G - 1) / G;
  Fe lag[G], a[G];
  LagrangeAt(G, r, lag);
  for (int j = 0; j < G; ++j) a[j] = Mul(lag[j], w.tau[j]);
  // Subset sums of a (x side) and of the Lagrange values (y side), per
  // byte of the lane pattern.
  constexpr int kBytes = G / 8;
  static thread_local Fe ta[kBytes][256], tb[kBytes][256];
  for (int h = 0; h < kBytes; ++h) {
    SubsetSums(a + 8 * h, ta[h]);
    SubsetSums(lag + 8 * h, tb[h]);
  }
  Fe* f[2] = {f0, f1};
  Fe* g[2] = {g0, g1};
  uint64_t words[G];
  Pattern pat[64];
  Fe mu[64];
  for (size_t k = 0; k < groups; ++k) {
    for (int l = 0; l < 64; ++l) mu[l] = Mul(w.nu[k], w.lift.lambda(l));
    for (int c = 0; c < 2; ++c) {
      LoadGroup(s.x[c], s.n, k, words);
      TransposeGroup(words, pat);
      Fe* fo = f[c] + 64 * k;
      for (int l = 0; l < 64; ++l) {
        Fe v = ta[0][pat[l] & 0xff];
        for (int h = 1; h < kBytes; ++h) v = Add(v, ta[h][(pat[l] >> (8 * h)) & 0xff]);
        fo[l] = Mul(mu[l], v);
      }
      LoadGroup(s.y[c], s.n, k, words);
      TransposeGroup(words, pat);
      Fe* go = g[c] + 64 * k;
      for (int l = 0; l < 64; ++l) {
        Fe v = tb[0][pat[l] & 0xff];
        for (int h = 1; h < kBytes; ++h) v = Add(v, tb[h][(pat[l] >> (8 * h)) & 0xff]);
        go[l] = v;
      }
    }
  }
  std::memset(words, 0, sizeof words);
  std::memset(pat, 0, sizeof pat);
}

void Interpolate(int n, const Fe* v0, const Fe* v1, Fe r, Fe out[2]) {
  Fe lag[kMaxPoints];
  LagrangeAt(n, r, lag);
  Wide acc[2];
  for (int j = 0; j < n; ++j) {
    MulAcc(acc[0], lag[j], v0[j]);
    MulAcc(acc[1], lag[j], v1[j]);
  }
  out[0] = Reduce(acc[0]);
  out[1] = Reduce(acc[1]);
}

void HalveH(const Fe* const f[2], const Fe* const g[2], size_t n, Fe out[2]) {
  Wide h1, h2;
  const size_t m = n / 2;
  // Weak share of a * b: a0 * (b0 + b1) + a1 * b0.
  auto weak = [](Wide& acc, Fe a0, Fe a1, Fe b0, Fe b1) {
    MulAcc(acc, a0, Add(b0, b1));
    MulAcc(acc, a1, b0);
  };
  for (size_t k = 0; k < m; ++k) {
    const Fe a0 = f[0][2 * k], a1 = f[1][2 * k], b0 = f[0][2 * k + 1], b1 = f[1][2 * k + 1];
    const Fe c0 = g[0][2 * k], c1 = g[1][2 * k], d0 = g[0][2 * k + 1], d1 = g[1][2 * k + 1];
    weak(h1, b0, b1, d0, d1);
    // f(e_2) = a + x (a + b)
    weak(h2, Add(a0, MulX(Add(a0, b0))), Add(a1, MulX(Add(a1, b1))),
         Add(c0, MulX(Add(c0, d0))), Add(c1, MulX(Add(c1, d1))));
  }
  if (n % 2 == 1) {  // (a, 0): f(1) = 0, f(e_2) = (1 + x) a
    const Fe a0 = f[0][n - 1], a1 = f[1][n - 1], c0 = g[0][n - 1], c1 = g[1][n - 1];
    weak(h2, Add(a0, MulX(a0)), Add(a1, MulX(a1)), Add(c0, MulX(c0)), Add(c1, MulX(c1)));
  }
  out[0] = Reduce(h1);
  out[1] = Reduce(h2);
}

void HalveFold(Fe* const f[2], Fe* const g[2], size_t n, Fe r) {
  const size_t m = n / 2;
  for (int c = 0; c < 2; ++c) {
    for (size_t k = 0; k < m; ++k) {
      const Fe a = f[c][2 * k], b = f[c][2 * k + 1];
      f[c][k] = Add(a, Mul(r, Add(a, b)));
      const Fe u = g[c][2 * k], v = g[c][2 * k + 1];
      g[c][k] = Add(u, Mul(r, Add(u, v)));
    }
    if (n % 2 == 1) {  // b = 0: (1 + r) a
      const Fe a = f[c][n - 1], u = g[c][n - 1];
      const Fe one_r = Add(FromU64(1), r);
      f[c][m] = Mul(one_r, a);
      g[c][m] = Mul(one_r, u);
    }
  }
}

}  // namespace kmpc::protocol::dzkp
