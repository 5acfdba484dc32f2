#include "cts/sha1_clear.h"

#include "share/replicated.h"

namespace kmpc::cts {

void Sha1CompressClear(std::array<uint32_t, 5>& h, const uint8_t* block) {
  uint32_t w[80];
  for (int t = 0; t < 16; ++t) {
    w[t] = uint32_t{block[4 * t]} << 24 | uint32_t{block[4 * t + 1]} << 16 |
           uint32_t{block[4 * t + 2]} << 8 | block[4 * t + 3];
  }
  auto rotl = [](uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  for (int t = 16; t < 80; ++t) {
    w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; ++t) {
    uint32_t f;
    if (t < 20) {
      f = (b & c) | (~b & d);
    } else if (t >= 40 && t < 60) {
      f = (b & c) | (b & d) | (c & d);
    } else {
      f = b ^ c ^ d;
    }
    const uint32_t tmp = rotl(a, 5) + f + e + kSha1K[t / 20] + w[t];
    e = d;
    d = c;
    c = rotl(b, 30);
    b = a;
    a = tmp;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  // w held the message schedule of a secret block (the HMAC key pads).
  share::Wipe(w, sizeof w);
}

}  // namespace kmpc::cts
