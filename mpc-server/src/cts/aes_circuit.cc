#include "cts/aes_circuit.h"

#include <algorithm>
#include <vector>

namespace kmpc::cts {
namespace {

// Boyar and Peralta's wires y1..y21 (top linear layer) from x0..x7, x0
// the most significant bit (their and BearSSL aes_ct.c's numbering).
struct Top {
  Wire y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
      y16, y17, y18, y19, y20, y21, x7;
};

Top TopLinear(Circuit& c, const Wire* x) {
  Top t;
  auto X = [&c](Wire a, Wire b) { return c.Xor(a, b); };
  t.y14 = X(x[3], x[5]);
  t.y13 = X(x[0], x[6]);
  t.y9 = X(x[0], x[3]);
  t.y8 = X(x[0], x[5]);
  const Wire u0 = X(x[1], x[2]);
  t.y1 = X(u0, x[7]);
  t.y4 = X(t.y1, x[3]);
  t.y12 = X(t.y13, t.y14);
  t.y2 = X(t.y1, x[0]);
  t.y5 = X(t.y1, x[6]);
  t.y3 = X(t.y5, t.y8);
  const Wire u1 = X(x[4], t.y12);
  t.y15 = X(u1, x[5]);
  t.y20 = X(u1, x[1]);
  t.y6 = X(t.y15, x[7]);
  t.y10 = X(t.y15, u0);
  t.y11 = X(t.y20, t.y9);
  t.y7 = X(x[7], t.y11);
  t.y17 = X(t.y10, t.y11);
  t.y19 = X(t.y10, t.y8);
  t.y16 = X(u0, t.y11);
  t.y21 = X(t.y13, t.y16);
  t.y18 = X(x[0], t.y16);
  t.x7 = x[7];
  return t;
}

// The GF(2^4) element (t21, t22, t23, t24) to invert: AND layer 1 and the
// middle linear layer.
std::array<Wire, 4> MiddleIn(Circuit& c, const Top& y) {
  auto X = [&c](Wire a, Wire b) { return c.Xor(a, b); };
  auto A = [&c](Wire a, Wire b) { return c.And(a, b); };
  const Wire t2 = A(y.y12, y.y15), t3 = A(y.y3, y.y6), t5 = A(y.y4, y.x7),
             t7 = A(y.y13, y.y16), t8 = A(y.y5, y.y1), t10 = A(y.y2, y.y7),
             t12 = A(y.y9, y.y11), t13 = A(y.y14, y.y17),
             t15 = A(y.y8, y.y10);
  const Wire t4 = X(t3, t2), t6 = X(t5, t2), t9 = X(t8, t7),
             t11 = X(t10, t7), t14 = X(t13, t12), t16 = X(t15, t12);
  const Wire t17 = X(t4, t14), t18 = X(t6, t16), t19 = X(t9, t14),
             t20 = X(t11, t16);
  return {X(t17, y.y20), X(t18, y.y19), X(t19, y.y21), X(t20, y.y18)};
}

// SEC 2012 inversion in GF(2^4), AND depth 2 (7 ANDs): returns their
// (M37, M39, M40, M38), aes/circuit.h's (t29, t33, t37, t40).
std::array<Wire, 4> Inv4(Circuit& c, const std::array<Wire, 4>& t) {
  auto X = [&c](Wire a, Wire b) { return c.Xor(a, b); };
  auto A = [&c](Wire a, Wire b) { return c.And(a, b); };
  const Wire t21 = t[0], t22 = t[1], t23 = t[2], t24 = t[3];
  const Wire m24 = X(t23, t24), m27 = X(t21, t22);
  const Wire m25 = A(t23, t21), m31 = A(t21, t24), m34 = A(t22, t23);
  const Wire m26 = X(t22, m25), m28 = X(t24, m25);
  const Wire m29 = A(m28, m27), m30 = A(m26, m24), m32 = A(m27, m31),
             m35 = A(m24, m34);
  const Wire m33 = X(m27, m25), m36 = X(m24, m25);
  return {X(t22, m29), X(t24, m30), X(m35, m36), X(m32, m33)};
}

// Boyar and Peralta's earlier inversion in GF(2^4) ("A new combinational
// logic minimization technique with applications to cryptology", SEA
// 2010, the 32-AND S-box): 5 ANDs, AND depth 4; the same outputs as Inv4.
std::array<Wire, 4> Inv4FewerAnds(Circuit& c, const std::array<Wire, 4>& t) {
  auto X = [&c](Wire a, Wire b) { return c.Xor(a, b); };
  auto A = [&c](Wire a, Wire b) { return c.And(a, b); };
  const Wire t21 = t[0], t22 = t[1], t23 = t[2], t24 = t[3];
  const Wire t25 = X(t21, t22), t26 = A(t21, t23), t27 = X(t24, t26);
  const Wire t28 = A(t25, t27), t29 = X(t28, t22), t30 = X(t23, t24),
             t31 = X(t22, t26);
  const Wire t32 = A(t31, t30), t33 = X(t32, t24), t34 = X(t23, t33),
             t35 = X(t27, t33);
  const Wire t36 = A(t24, t35), t37 = X(t36, t34), t38 = X(t27, t36);
  const Wire t39 = A(t29, t38), t40 = X(t25, t39);
  return {t29, t33, t37, t40};
}

// The 18 output ANDs and the bottom linear layer (with the affine
// constant 0x63 as four complements); returns s0..s7 (s0 the most
// significant bit).
std::array<Wire, 8> Bottom(Circuit& c, const Top& y,
                           const std::array<Wire, 4>& inv) {
  auto X = [&c](Wire a, Wire b) { return c.Xor(a, b); };
  auto A = [&c](Wire a, Wire b) { return c.And(a, b); };
  const Wire t29 = inv[0], t33 = inv[1], t37 = inv[2], t40 = inv[3];
  const Wire t41 = X(t40, t37), t42 = X(t29, t33), t43 = X(t29, t40),
             t44 = X(t33, t37), t45 = X(t42, t41);
  const Wire z0 = A(t44, y.y15), z1 = A(t37, y.y6), z2 = A(t33, y.x7),
             z3 = A(t43, y.y16), z4 = A(t40, y.y1), z5 = A(t29, y.y7),
             z6 = A(t42, y.y11), z7 = A(t45, y.y17), z8 = A(t41, y.y10),
             z9 = A(t44, y.y12), z10 = A(t37, y.y3), z11 = A(t33, y.y4),
             z12 = A(t43, y.y13), z13 = A(t40, y.y5), z14 = A(t29, y.y2),
             z15 = A(t42, y.y9), z16 = A(t45, y.y14), z17 = A(t41, y.y8);
  const Wire t46 = X(z15, z16), t47 = X(z10, z11), t48 = X(z5, z13),
             t49 = X(z9, z10), t50 = X(z2, z12), t51 = X(z2, z5),
             t52 = X(z7, z8), t53 = X(z0, z3), t54 = X(z6, z7),
             t55 = X(z16, z17);
  const Wire t56 = X(z12, t48), t57 = X(t50, t53), t58 = X(z4, t46),
             t59 = X(z3, t54);
  const Wire t60 = X(t46, t57), t61 = X(z14, t57), t62 = X(t52, t58),
             t63 = X(t49, t58), t64 = X(z4, t59);
  const Wire t65 = X(t61, t62), t66 = X(z1, t63);
  std::array<Wire, 8> s;
  s[0] = X(t59, t63);
  s[6] = c.Not(X(t56, t62));
  s[7] = c.Not(X(t48, t60));
  const Wire t67 = X(t64, t65);
  s[3] = X(t53, t66);
  s[4] = X(t51, t66);
  s[5] = X(t47, t65);
  s[1] = c.Not(X(t64, s[3]));
  s[2] = c.Not(X(t55, t67));
  return s;
}

// FIPS-197 5.3.2: b'_i = b_{i+2} ^ b_{i+5} ^ b_{i+7} ^ d_i, d = 0x05.
Bits InvAffine(Circuit& c, const Bits& b) {
  Bits r(8);
  for (int i = 0; i < 8; ++i) {
    r[i] = c.Xor(c.Xor(b[(i + 2) % 8], b[(i + 5) % 8]), b[(i + 7) % 8]);
    if ((0x05 >> i) & 1) r[i] = c.Not(r[i]);
  }
  return r;
}

Bits Byte(const Bits& s, int p) { return Bits(s.begin() + 8 * p, s.begin() + 8 * p + 8); }

void PutByte(Bits& s, int p, const Bits& b) {
  std::copy(b.begin(), b.end(), s.begin() + 8 * p);
}

// Multiplication by x in GF(2^8) mod x^8 + x^4 + x^3 + x + 1 (FIPS-197
// 4.2.1), linear.
Bits Xtime(Circuit& c, const Bits& v) {
  return {v[7], c.Xor(v[0], v[7]), v[1], c.Xor(v[2], v[7]),
          c.Xor(v[3], v[7]), v[4], v[5], v[6]};
}

// v times the public constant k.
Bits MulConst(Circuit& c, Bits v, int k) {
  Bits r(8, kZero);
  for (int i = 0; i < 8; ++i, v = Xtime(c, v)) {
    if ((k >> i) & 1) r = c.Xor(r, v);
  }
  return r;
}

// MixColumns (5.1.3) with coefficients (2, 3, 1, 1) or InvMixColumns
// (5.3.3) with (14, 11, 13, 9): out_r = sum_k m[k] a_{r+k}.
Bits MixColumnsWith(Circuit& c, const Bits& s, const int m[4]) {
  Bits out(128);
  for (int col = 0; col < 4; ++col) {
    for (int r = 0; r < 4; ++r) {
      Bits acc(8, kZero);
      for (int k = 0; k < 4; ++k) {
        acc = c.Xor(acc, MulConst(c, Byte(s, (r + k) % 4 + 4 * col), m[k]));
      }
      PutByte(out, r + 4 * col, acc);
    }
  }
  return out;
}

// ShiftRows (5.1.2): new[r + 4c] = old[r + 4((c + r) mod 4)]; the inverse
// (5.3.1) shifts the other way.
Bits ShiftRows(const Bits& s, bool inverse) {
  Bits out(128);
  for (int col = 0; col < 4; ++col) {
    for (int r = 0; r < 4; ++r) {
      const int from = inverse ? (col + 4 - r) % 4 : (col + r) % 4;
      PutByte(out, r + 4 * col, Byte(s, r + 4 * from));
    }
  }
  return out;
}

Bits SubBytes(Circuit& c, const Bits& s, bool inverse, Sbox v) {
  Bits out(128);
  for (int p = 0; p < 16; ++p) {
    PutByte(out, p, inverse ? InvSubByte(c, Byte(s, p)) : SubByte(c, Byte(s, p), v));
  }
  return out;
}

}  // namespace

Bits SubByte(Circuit& c, const Bits& x, Sbox v) {
  Wire xs[8];
  for (int k = 0; k < 8; ++k) xs[k] = x[7 - k];
  const Top y = TopLinear(c, xs);
  const std::array<Wire, 4> mid = MiddleIn(c, y);
  const std::array<Wire, 8> s =
      Bottom(c, y, v == Sbox::kFewerAnds ? Inv4FewerAnds(c, mid) : Inv4(c, mid));
  Bits out(8);
  for (int k = 0; k < 8; ++k) out[7 - k] = s[k];
  return out;
}

Bits InvSubByte(Circuit& c, const Bits& x) {
  return InvAffine(c, SubByte(c, InvAffine(c, x)));
}

// FIPS-197 5.1 (Figure 5).
Bits AesEncryptBlock(Circuit& c, const RoundKeys& k, const Bits& in, Sbox v) {
  static constexpr int kMix[4] = {2, 3, 1, 1};
  Bits s = c.Xor(in, k.Round(0));
  for (int r = 1; r <= k.nr; ++r) {
    s = ShiftRows(SubBytes(c, s, false, v), false);
    if (r < k.nr) s = MixColumnsWith(c, s, kMix);
    s = c.Xor(s, k.Round(r));
  }
  return s;
}

RoundKeys ExpandKeyCircuit(Circuit& c, const Bits& key) {
  const int nk = static_cast<int>(key.size() / 32);  // words of the key
  RoundKeys k;
  k.nr = nk == 4 ? 10 : 14;
  const int words = 4 * (k.nr + 1);
  std::vector<Bits> w(words);
  for (int i = 0; i < nk; ++i) w[i] = Bits(key.begin() + 32 * i, key.begin() + 32 * (i + 1));
  uint8_t rcon = 1;
  for (int i = nk; i < words; ++i) {
    Bits t = w[i - 1];
    if (i % nk == 0) {
      // RotWord, SubWord, then Rcon into the first byte.
      Bits r(32);
      for (int b = 0; b < 4; ++b) {
        const Bits s = SubByte(c, Byte(t, (b + 1) % 4));
        std::copy(s.begin(), s.end(), r.begin() + 8 * b);
      }
      for (int j = 0; j < 8; ++j)
        if ((rcon >> j) & 1) r[j] = c.Not(r[j]);
      rcon = static_cast<uint8_t>((rcon << 1) ^ ((rcon & 0x80) ? 0x1b : 0));
      t = r;
    } else if (nk > 6 && i % nk == 4) {
      Bits r(32);
      for (int b = 0; b < 4; ++b) {
        const Bits s = SubByte(c, Byte(t, b));
        std::copy(s.begin(), s.end(), r.begin() + 8 * b);
      }
      t = r;
    }
    w[i] = c.Xor(w[i - nk], t);
  }
  for (const Bits& x : w) k.bits.insert(k.bits.end(), x.begin(), x.end());
  return k;
}

// FIPS-197 5.3 (Figure 12), the inverse cipher.
Bits AesDecryptBlock(Circuit& c, const RoundKeys& k, const Bits& in) {
  static constexpr int kInvMix[4] = {14, 11, 13, 9};
  Bits s = c.Xor(in, k.Round(k.nr));
  for (int r = k.nr - 1; r >= 0; --r) {
    s = SubBytes(c, ShiftRows(s, true), true, Sbox::kDepth4);
    s = c.Xor(s, k.Round(r));
    if (r > 0) s = MixColumnsWith(c, s, kInvMix);
  }
  return s;
}

}  // namespace kmpc::cts
