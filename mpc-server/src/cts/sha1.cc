#include "cts/sha1.h"

#include <utility>
#include <vector>

namespace kmpc::cts {
namespace {

Word Rotl(const Word& w, int n) {
  Word r;
  for (int i = 0; i < 32; ++i) r[(i + n) % 32] = w[i];
  return r;
}

Word XorWords(Circuit& c, const Word& a, const Word& b) {
  Word r;
  for (int i = 0; i < 32; ++i) r[i] = c.Xor(a[i], b[i]);
  return r;
}

// One carry-save layer: a + b + d = sum + carry (full adders; the carry
// of bit 31 falls off mod 2^32). maj(a, b, d) = ((a ^ d) & (b ^ d)) ^ d.
std::pair<Word, Word> CarrySave(Circuit& c, const Word& a, const Word& b, const Word& d) {
  Word sum, carry;
  carry[0] = kZero;
  for (int i = 0; i < 32; ++i) {
    sum[i] = c.Xor(c.Xor(a[i], b[i]), d[i]);
    if (i < 31) carry[i + 1] = c.Xor(c.And(c.Xor(a[i], d[i]), c.Xor(b[i], d[i])), d[i]);
  }
  return {sum, carry};
}

// f_t (FIPS 180-4 section 4.1.1) with one AND layer: Ch = d ^ (b & (c ^
// d)), Maj = (b & (c ^ d)) ^ (c & d), Parity = b ^ c ^ d.
Word StepF(Circuit& c, int t, const Word& b, const Word& cw, const Word& d) {
  Word f;
  for (int i = 0; i < 32; ++i) {
    const Wire m = c.Xor(cw[i], d[i]);
    if (t < 20) {
      f[i] = c.Xor(d[i], c.And(b[i], m));
    } else if (t >= 40 && t < 60) {
      f[i] = c.Xor(c.And(b[i], m), c.And(cw[i], d[i]));
    } else {
      f[i] = c.Xor(b[i], m);
    }
  }
  return f;
}

// T = ROTL5(a) + f + e + w + k: f, e, w and k reduced to two words by two
// carry-save layers (off the critical path), then one carry-save layer with
// ROTL5(a) and a prefix adder.
Word StepSum(Circuit& c, int t, const Word& a, const Word& b, const Word& cw,
             const Word& d, const Word& e, const Word& w, uint32_t k) {
  const auto [s1, c1] = CarrySave(c, e, w, ConstantWord(k));
  const auto [s2, c2] = CarrySave(c, StepF(c, t, b, cw, d), s1, c1);
  const auto [s3, c3] = CarrySave(c, Rotl(a, 5), s2, c2);
  return AddWords(c, s3, c3);
}

}  // namespace

Word ConstantWord(uint32_t v) {
  Word w;
  for (int i = 0; i < 32; ++i) w[i] = ((v >> i) & 1) ? kOne : kZero;
  return w;
}

// Sklansky: after level k, (G_i, P_i) cover bits [i with its low k + 1
// bits cleared, i]; bit i's carry-in is G_{i-1} over [0, i - 1].
Word AddGenProp(Circuit& c, const Word& g, const Word& p) {
  Word G = g, P = p;
  for (int k = 0; k < 5; ++k) {
    for (int i = 0; i < 32; ++i) {
      if (!((i >> k) & 1)) continue;
      const int j = ((i >> k) << k) - 1;  // top of the lower half
      G[i] = c.Xor(G[i], c.And(P[i], G[j]));
      P[i] = c.And(P[i], P[j]);
    }
  }
  Word s;
  s[0] = p[0];
  for (int i = 1; i < 32; ++i) s[i] = c.Xor(p[i], G[i - 1]);
  return s;
}

Word AddWords(Circuit& c, const Word& a, const Word& b) {
  Word g, p;
  for (int i = 0; i < 32; ++i) {
    g[i] = c.And(a[i], b[i]);
    p[i] = c.Xor(a[i], b[i]);
  }
  return AddGenProp(c, g, p);
}

Word BigEndianWord(const Bits& b, size_t k) {
  Word w;
  for (int i = 0; i < 32; ++i) w[i] = b[8 * (4 * k + 3 - i / 8) + i % 8];
  return w;
}

void AppendBigEndian(const Word& w, Bits& out) {
  for (int byte = 0; byte < 4; ++byte) {
    for (int j = 0; j < 8; ++j) out.push_back(w[8 * (3 - byte) + j]);
  }
}

Sha1State StateFromBytes(const Bits& b) {
  Sha1State h;
  for (size_t k = 0; k < 5; ++k) h[k] = BigEndianWord(b, k);
  return h;
}

// FIPS 180-4 section 6.1.2, with the words renamed each step (a, b, c, d,
// e) -> (T, a, ROTL30(b), c, d).
Sha1State Sha1Compress(Circuit& c, const Sha1State& h, const Bits& block) {
  std::vector<Word> w(80);
  for (int t = 0; t < 16; ++t) w[t] = BigEndianWord(block, t);
  for (int t = 16; t < 80; ++t) {
    w[t] = Rotl(XorWords(c, XorWords(c, w[t - 3], w[t - 8]),
                         XorWords(c, w[t - 14], w[t - 16])),
                1);
  }
  Word a = h[0], b = h[1], cw = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; ++t) {
    const Word next = StepSum(c, t, a, b, cw, d, e, w[t], kSha1K[t / 20]);
    e = d;
    d = cw;
    cw = Rotl(b, 30);
    b = a;
    a = next;
  }
  return {AddWords(c, h[0], a), AddWords(c, h[1], b), AddWords(c, h[2], cw),
          AddWords(c, h[3], d), AddWords(c, h[4], e)};
}

Bits Sha1From(Circuit& c, const Sha1State& h, size_t prefix_bytes,
              const Bits& msg) {
  const size_t n = msg.size() / 8;
  const uint64_t total_bits = 8 * (uint64_t{prefix_bytes} + n);
  // msg || 0x80 || 0^k || 64-bit big-endian length, a multiple of 64 bytes.
  std::vector<uint8_t> pad(1, 0x80);
  while ((n + pad.size() + 8) % 64 != 0) pad.push_back(0);
  for (int k = 7; k >= 0; --k) pad.push_back(static_cast<uint8_t>(total_bits >> (8 * k)));
  Bits all = msg;
  const Bits tail = Circuit::Constant(pad);
  all.insert(all.end(), tail.begin(), tail.end());
  Sha1State s = h;
  for (size_t off = 0; off < all.size(); off += 512) {
    s = Sha1Compress(c, s, Bits(all.begin() + off, all.begin() + off + 512));
  }
  Bits out;
  for (const Word& x : s) AppendBigEndian(x, out);
  return out;
}

Bits HmacSha1(Circuit& c, const Sha1State& ipad_state,
              const Sha1State& opad_state, const Bits& msg) {
  const Bits inner = Sha1From(c, ipad_state, 64, msg);
  return Sha1From(c, opad_state, 64, inner);
}

Bits HmacSha1Padded(Circuit& c, const Sha1State& ipad_state,
                    const Sha1State& opad_state, const Bits& padded) {
  Sha1State s = ipad_state;
  for (size_t off = 0; off + 512 <= padded.size(); off += 512)
    s = Sha1Compress(c, s, Bits(padded.begin() + off, padded.begin() + off + 512));
  Bits inner;
  for (const Word& x : s) AppendBigEndian(x, inner);
  return Sha1From(c, opad_state, 64, inner);
}

}  // namespace kmpc::cts
