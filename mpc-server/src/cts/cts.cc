#include "cts/cts.h"

#include <openssl/sha.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cts/dealer.h"

namespace kmpc::cts {
namespace {

Bits Slice(const Bits& b, size_t from_byte, size_t bytes) {
  return Bits(b.begin() + 8 * from_byte, b.begin() + 8 * (from_byte + bytes));
}

void Append(Bits& out, const Bits& b) { out.insert(out.end(), b.begin(), b.end()); }

// Blocks of n bytes: count, and the bytes of the last one (1..16).
size_t BlockCount(size_t n) { return (n + kBlock - 1) / kBlock; }
size_t LastBytes(size_t n) { return n - kBlock * (BlockCount(n) - 1); }

}  // namespace

UsageKeys UsageKeyInputs(Circuit& c, int nr) {
  UsageKeys k;
  k.ke.nr = nr;
  k.ke.bits = c.Inputs(128 * (nr + 1));
  k.ipad = StateFromBytes(c.Inputs(160));
  k.opad = StateFromBytes(c.Inputs(160));
  return k;
}

size_t UsageMaterialBytes(int nr) { return kBlock * (nr + 1) + 40; }

// C_i = E(P_i ^ C_{i-1}), C_0 = 0, the last block zero-padded; output C_1
// .. C_{n-2}, C_n, and the first |P_n| bytes of C_{n-1}.
Bits CtsEncrypt(Circuit& c, const RoundKeys& k, const Bits& plain) {
  const size_t n = plain.size() / 8, nb = BlockCount(n), m = LastBytes(n);
  std::vector<Bits> cb(nb);
  Bits prev(128, kZero);
  for (size_t i = 0; i < nb; ++i) {
    Bits p = Slice(plain, kBlock * i, i + 1 < nb ? kBlock : m);
    p.resize(128, kZero);
    cb[i] = AesEncryptBlock(c, k, c.Xor(p, prev), Sbox::kFewerAnds);
    prev = cb[i];
  }
  if (nb == 1) return cb[0];
  Bits out;
  for (size_t i = 0; i + 2 < nb; ++i) Append(out, cb[i]);
  Append(out, cb[nb - 1]);
  Append(out, Slice(cb[nb - 2], 0, m));
  return out;
}

// With X = the second-to-last ciphertext block (C_n) and Y = the last
// (the first m bytes of C_{n-1}): D(X) = (P_n || 0) ^ C_{n-1}, so C_{n-1}
// = Y || D(X)[m..16) and P_n = D(X)[0..m) ^ Y; the other blocks are CBC.
Bits CtsDecrypt(Circuit& c, const RoundKeys& k, const Bits& cipher) {
  const size_t n = cipher.size() / 8, nb = BlockCount(n), m = LastBytes(n);
  if (nb == 1) return AesDecryptBlock(c, k, cipher);
  std::vector<Bits> cb(nb);  // C_1 .. C_n in CBC order
  for (size_t i = 0; i + 2 < nb; ++i) cb[i] = Slice(cipher, kBlock * i, kBlock);
  cb[nb - 1] = Slice(cipher, kBlock * (nb - 2), kBlock);
  const Bits dx = AesDecryptBlock(c, k, cb[nb - 1]);
  const Bits y = Slice(cipher, kBlock * (nb - 1), m);
  cb[nb - 2] = y;
  Append(cb[nb - 2], Slice(dx, m, kBlock - m));
  Bits out;
  for (size_t i = 0; i + 1 < nb; ++i) {
    const Bits prev = i == 0 ? Bits(128, kZero) : cb[i - 1];
    Append(out, c.Xor(AesDecryptBlock(c, k, cb[i]), prev));
  }
  Append(out, c.Xor(Slice(dx, 0, m), y));
  return out;
}

Bits HmacSha1_96(Circuit& c, const UsageKeys& k, const Bits& msg) {
  return Slice(HmacSha1(c, k.ipad, k.opad, msg), 0, kTagBytes);
}

Bits Rfc3962Encrypt(Circuit& c, const UsageKeys& k, const Bits& conf_plain) {
  Bits out = CtsEncrypt(c, k.ke, conf_plain);
  Append(out, HmacSha1_96(c, k, conf_plain));
  return out;
}

Decrypted Rfc3962Decrypt(Circuit& c, const UsageKeys& k, const Bits& cipher_tag) {
  const size_t n = cipher_tag.size() / 8 - kTagBytes;
  Decrypted d;
  d.conf_plain = CtsDecrypt(c, k.ke, Slice(cipher_tag, 0, n));
  Bits diff = c.Xor(HmacSha1_96(c, k, d.conf_plain), Slice(cipher_tag, n, kTagBytes));
  while (diff.size() > 1) {  // balanced OR tree
    Bits next;
    for (size_t i = 0; i + 1 < diff.size(); i += 2) next.push_back(c.Or(diff[i], diff[i + 1]));
    if (diff.size() % 2) next.push_back(diff.back());
    diff = next;
  }
  d.mismatch = diff[0];
  return d;
}

namespace {

absl::Status CheckShape(int nr, size_t n) {
  if (nr != 10 && nr != 14) return absl::InvalidArgumentError("cts: nr must be 10 or 14");
  if (n < kBlock || n > kMaxBytes) {
    return absl::InvalidArgumentError("cts: confounder || plaintext must be 16 to 65536 bytes");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Program> EncryptProgram(int nr, size_t n) {
  if (absl::Status st = CheckShape(nr, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  c.Output(Rfc3962Encrypt(c, k, c.Inputs(8 * n)));
  return c.Compile();
}

namespace {

// MAJ(a, b, d) in one AND: the borrow (carry) of a ripple subtraction.
Wire Maj(Circuit& c, Wire a, Wire b, Wire d) {
  return c.Xor(c.And(c.Xor(a, d), c.Xor(b, d)), d);
}

// The AND of all of `bits` (a balanced tree).
Wire AllOf(Circuit& c, Bits bits) {
  while (bits.size() > 1) {
    Bits next;
    for (size_t i = 0; i + 1 < bits.size(); i += 2) next.push_back(c.And(bits[i], bits[i + 1]));
    if (bits.size() % 2) next.push_back(bits.back());
    bits = next;
  }
  return bits.empty() ? kOne : bits[0];
}

// A decryption's outputs: conf || P, then a byte whose bit 0 is the tag
// mismatch and bit 1 `stale`.
void OutputDecrypted(Circuit& c, const Decrypted& d, Wire stale) {
  c.Output(d.conf_plain);
  c.Output(d.mismatch);
  c.Output(stale);
  for (int j = 2; j < 8; ++j) c.Output(kZero);
}

}  // namespace

Wire StaleTimestamp(Circuit& c, const Bits& conf_plain, const Bits& window) {
  const size_t n = conf_plain.size() / 8;
  if (n < kTsEnd || n - kBlock - 2 > 0x7f || window.size() != 8 * kWindowBytes) return kOne;
  Bits ok;
  // Byte `at` of conf || P has the public value v on bits [from, 8).
  const auto expect = [&](size_t at, uint8_t v, int from) {
    for (int j = from; j < 8; ++j) {
      const Wire x = conf_plain[8 * at + j];
      ok.push_back((v >> j) & 1 ? x : c.Not(x));
    }
  };
  // SEQUENCE of the rest, [0] of 17 bytes, GeneralizedTime of 15 (DER).
  const uint8_t header[] = {0x30, static_cast<uint8_t>(n - kBlock - 2), 0xA0, 0x11, 0x18, 0x0F};
  for (size_t i = 0; i < sizeof header; ++i) expect(kBlock + i, header[i], 0);
  expect(kTsEnd - 1, 'Z', 0);
  // Each of YYYYMMDDHHMMSS is '0' .. '9' (0x30 .. 0x39): its high nibble 3
  // here, its low nibble a decimal digit, compared below.
  for (size_t k = 0; k < kTsDigits; ++k) expect(kTsHeaderEnd + k, 0x30, 4);
  // lo <= t and t <= hi on the 14 digits' low nibbles, most significant
  // first: a ripple borrow of t - lo and of hi - t, one AND a bit.
  Wire below = kZero, above = kZero;
  for (size_t k = kTsDigits; k-- > 0;) {
    for (int j = 0; j < 4; ++j) {
      const Wire t = conf_plain[8 * (kTsHeaderEnd + k) + j];
      const Wire lo = window[8 * k + j], hi = window[8 * (kTsDigits + k) + j];
      below = Maj(c, c.Not(t), lo, below);
      above = Maj(c, c.Not(hi), t, above);
    }
  }
  ok.push_back(c.Not(below));
  ok.push_back(c.Not(above));
  return c.Not(AllOf(c, ok));
}

absl::StatusOr<Program> DecryptProgram(int nr, size_t n, bool window) {
  if (absl::Status st = CheckShape(nr, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  const Decrypted d = Rfc3962Decrypt(c, k, c.Inputs(8 * (n + kTagBytes)));
  OutputDecrypted(c, d, window ? StaleTimestamp(c, d.conf_plain, c.Inputs(8 * kWindowBytes))
                               : kZero);
  return c.Compile();
}

namespace {

// A spliced message (a request, a PAC) as dealt: padded for its HMAC's
// inner hash, a multiple of 64 bytes, at most kMaxBytes.
bool DealtPaddedFits(size_t m) { return m >= 64 && m % 64 == 0 && m <= kMaxBytes; }

}  // namespace

bool SpliceFits(size_t n, size_t m, size_t off) {
  return DealtPaddedFits(m) && n >= kBlock + kTagBytes &&
         off <= n - kBlock - kTagBytes;
}

absl::StatusOr<Program> SpliceEncryptProgram(int nr, size_t n, size_t m, size_t off) {
  if (absl::Status st = CheckShape(nr, n); !st.ok()) return st;
  if (m == 0 || m % 64 != 0 || m > kMaxBytes)
    return absl::InvalidArgumentError(
        "cts: a spliced message is dealt padded: a multiple of 64 bytes, at most 65536");
  if (!SpliceFits(n, m, off))
    return absl::InvalidArgumentError("cts: the spliced checksum must lie inside P");
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  UsageKeys ck;
  ck.ipad = StateFromBytes(c.Inputs(160));
  ck.opad = StateFromBytes(c.Inputs(160));
  Bits conf_plain = c.Inputs(8 * n);
  const Bits mac = HmacSha1Padded(c, ck.ipad, ck.opad, c.Inputs(8 * m));
  const Bits t(mac.begin(), mac.begin() + 8 * kTagBytes);
  const size_t at = 8 * (kBlock + off);
  for (size_t i = 0; i < t.size(); ++i) conf_plain[at + i] = c.Xor(conf_plain[at + i], t[i]);
  c.Output(Rfc3962Encrypt(c, k, conf_plain));
  return c.Compile();
}

size_t HashBlocks(size_t n) { return (n + 9 + 63) / 64; }

size_t EncryptClassMax(size_t n) {
  return std::min(kBlock * BlockCount(n), 64 * HashBlocks(n) - 9);
}

size_t ChecksumClassMax(size_t n) { return 64 * HashBlocks(n) - 9; }

// The padding's 0x80 lands at n >= 64 (hb - 1) - 8 for every n of a class.
size_t PaddingFrom(size_t n) {
  const size_t end = 64 * HashBlocks(n);
  return end > 72 ? end - 72 : 0;
}

std::vector<uint8_t> PaddingBytes(size_t n) {
  const size_t from = PaddingFrom(n);
  std::vector<uint8_t> q(64 * HashBlocks(n) - from, 0);
  q[n - from] = 0x80;
  const uint64_t bits = 8 * (uint64_t{64} + n);  // the key block, then n bytes
  for (size_t i = 0; i < 8; ++i) q[q.size() - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  return q;
}

size_t SpliceWindowOffset(size_t off) {
  const size_t end = kBlock + off + kTagBytes;
  return kBlock * BlockCount(end) - kBlock - kTagBytes;
}

namespace {

std::vector<uint8_t> OneHot(size_t bits, size_t bit) {
  std::vector<uint8_t> sel(bits / 8, 0);
  sel[bit / 8] = static_cast<uint8_t>(1u << (bit % 8));
  return sel;
}

}  // namespace

std::vector<uint8_t> SpliceSelector(size_t off) {
  return OneHot(kBlock, (kBlock + off + kTagBytes - 1) % kBlock);
}

size_t TicketClassMax(size_t n) { return 64 * HashBlocks(n) - 9; }

size_t TicketWindowOffset(size_t off) { return 64 * ((kBlock + off) / 64) + 63 - kBlock; }

std::vector<uint8_t> TicketSelector(size_t off) {
  return OneHot(kTicketWindow, (kBlock + off) % kTicketWindow);
}

bool SpliceClassFits(size_t cm, size_t m, size_t off) {
  // The window's first end (off + 28 - 15) must lie inside conf || P.
  return DealtPaddedFits(m) && cm >= kBlock + kTagBytes && off == SpliceWindowOffset(off) &&
         off + kBlock + kTagBytes - (kBlock - 1) <= cm;
}

namespace {

// conf || P || zeros (64 hb bytes) and the lane's padding vector: every
// CBC block in chain order (the zeros past n are CTS's padding of the last
// block, RFC 3962 section 5), then the tag of the padded message.
Bits ClassEncrypt(Circuit& c, const UsageKeys& k, size_t cm, const Bits& x, const Bits& q) {
  const size_t nb = BlockCount(cm), from = PaddingFrom(cm);
  Bits out, prev(128, kZero);
  for (size_t i = 0; i < nb; ++i) {
    prev = AesEncryptBlock(c, k.ke, c.Xor(Slice(x, kBlock * i, kBlock), prev),
                           Sbox::kFewerAnds);
    Append(out, prev);
  }
  Bits msg = x;
  for (size_t i = 0; i < q.size(); ++i) msg[8 * from + i] = c.Xor(msg[8 * from + i], q[i]);
  const Bits mac = HmacSha1Padded(c, k.ipad, k.opad, msg);
  Append(out, Slice(mac, 0, kTagBytes));
  return out;
}

absl::Status CheckClass(int nr, size_t cm) {
  if (absl::Status st = CheckShape(nr, cm); !st.ok()) return st;
  if (64 * HashBlocks(cm) > kMaxBytes)
    return absl::InvalidArgumentError("cts: confounder || plaintext over 64 KiB padded");
  return absl::OkStatus();
}

// conf || P || zeros and the padding vector of a class (inputs).
std::pair<Bits, Bits> ClassInputs(Circuit& c, size_t cm) {
  Bits x = c.Inputs(8 * 64 * HashBlocks(cm));
  Bits q = c.Inputs(8 * (64 * HashBlocks(cm) - PaddingFrom(cm)));
  return {std::move(x), std::move(q)};
}

}  // namespace

namespace {

// The inputs a spliced ENCRYPT reads, in order (cts.h SpliceEncryptProgram,
// TicketClassProgram): the reply's usage keys, the checksum key's ipad and
// opad states, conf || P's class inputs, the message D (hashed here into
// mac), the window's selector.
struct SplicedInputs {
  UsageKeys k;
  Bits x, q, mac, sel;
};

SplicedInputs ReadSplicedInputs(Circuit& c, int nr, size_t cm, size_t m, size_t sel_bits) {
  SplicedInputs in;
  in.k = UsageKeyInputs(c, nr);
  UsageKeys ck;
  ck.ipad = StateFromBytes(c.Inputs(160));
  ck.opad = StateFromBytes(c.Inputs(160));
  std::tie(in.x, in.q) = ClassInputs(c, cm);
  in.mac = HmacSha1Padded(c, ck.ipad, ck.opad, c.Inputs(8 * m));
  in.sel = c.Inputs(sel_bits);
  return in;
}

}  // namespace

absl::StatusOr<Program> EncryptClassProgram(int nr, size_t cm) {
  if (absl::Status st = CheckClass(nr, cm); !st.ok()) return st;
  cm = EncryptClassMax(cm);
  Circuit c;
  const UsageKeys k = UsageKeyInputs(c, nr);
  const auto [x, q] = ClassInputs(c, cm);
  c.Output(ClassEncrypt(c, k, cm, x, q));
  return c.Compile();
}

// The checksum T of D goes where the selector's one bit says: each of the
// window's 16 ends gets T ANDed with its selector bit (16 x 96 ANDs of
// depth 1); ends outside conf || P's class are skipped.
absl::StatusOr<Program> SpliceEncryptClassProgram(int nr, size_t cm, size_t m, size_t off) {
  if (absl::Status st = CheckClass(nr, cm); !st.ok()) return st;
  cm = EncryptClassMax(cm);
  off = SpliceWindowOffset(off);
  if (!SpliceClassFits(cm, m, off))
    return absl::InvalidArgumentError(
        "cts: a spliced message is dealt padded (a multiple of 64 bytes, at most 65536) and "
        "its checksum lies inside P");
  Circuit c;
  SplicedInputs in = ReadSplicedInputs(c, nr, cm, m, kBlock);
  const size_t last_end = kBlock + off + kTagBytes;  // the window's last end
  for (size_t j = 0; j < kBlock; ++j) {
    const size_t end = last_end - (kBlock - 1) + j;
    if (end > cm || end < kBlock + kTagBytes) continue;
    const size_t at = 8 * (end - kTagBytes);
    for (size_t i = 0; i < 8 * kTagBytes; ++i)
      in.x[at + i] = c.Xor(in.x[at + i], c.And(in.sel[j], in.mac[i]));
  }
  c.Output(ClassEncrypt(c, in.k, cm, in.x, in.q));
  return c.Compile();
}

namespace {

// Coefficient j of x^j in a 16-byte string (SP 800-38D 6.3: the first
// bit is the most significant of byte 0) as a circuit index.
size_t GcmBit(size_t j) { return 8 * (j / 8) + 7 - j % 8; }

// The first byte in conf || P of the SHA-1 block whose starts of T_s the
// window of off (a TicketWindowOffset) holds.
size_t TicketBlockStart(size_t off) { return kBlock + off + 1 - kTicketWindow; }

}  // namespace

bool TicketClassFits(size_t cm, size_t m, size_t off, size_t gap) {
  // The window's first start inside P must hold both values inside conf || P.
  const size_t first = std::max(kBlock, TicketBlockStart(off));
  return DealtPaddedFits(m) && off == TicketWindowOffset(off) &&
         cm == TicketClassMax(cm) && first + kTagBytes <= cm &&
         first + gap + kKdcSignatureBytes <= cm;
}

// V_0 = h, V_{i+1} = V_i x: a shift towards the higher coefficients and,
// for the coefficient of x^127 shifted out, x^128 = x^7 + x^2 + x + 1.
// XORs only; the ANDs are d_i AND V_i.
Bits GfMulCircuit(Circuit& c, const Bits& d, size_t bits, const Bits& h) {
  std::vector<Wire> v(128), acc(128, kZero);
  for (size_t j = 0; j < 128; ++j) v[j] = h[GcmBit(j)];
  for (size_t i = 0; i < bits; ++i) {
    const Wire di = d[GcmBit(i)];
    for (size_t j = 0; j < 128; ++j) acc[j] = c.Xor(acc[j], c.And(di, v[j]));
    const Wire top = v[127];
    for (size_t j = 127; j > 0; --j) v[j] = v[j - 1];
    v[0] = top;
    for (size_t j : {1, 2, 7}) v[j] = c.Xor(v[j], top);
  }
  Bits out(128);
  for (size_t j = 0; j < 128; ++j) out[GcmBit(j)] = acc[j];
  return out;
}

absl::StatusOr<Program> TicketClassProgram(int nr, size_t cm, size_t m, size_t off,
                                           size_t gap) {
  if (absl::Status st = CheckClass(nr, cm); !st.ok()) return st;
  cm = TicketClassMax(cm);
  off = TicketWindowOffset(off);
  if (!TicketClassFits(cm, m, off, gap))
    return absl::InvalidArgumentError(
        "cts: a PAC is dealt padded (a multiple of 64 bytes, at most 65536) and both "
        "signatures lie inside P");
  Circuit c;
  SplicedInputs in = ReadSplicedInputs(c, nr, cm, m, kTicketWindow);
  const Bits ctr0 = c.Inputs(128), h2 = c.Inputs(128), l = c.Inputs(128);
  const Bits t_s(in.mac.begin(), in.mac.begin() + 8 * kTagBytes);
  Bits t_s_block = t_s;
  t_s_block.resize(128, kZero);
  Bits sig = ctr0;
  Append(sig, c.Xor(l, GfMulCircuit(c, t_s_block, 8 * kTagBytes, h2)));
  // Each start of T_s in the window gets T_s, and the KDC signature gap
  // bytes after it, ANDed with its selector bit: 64 x (96 + 256) ANDs of
  // depth 1; a start in the confounder, or whose values do not both fit
  // the class, is skipped.
  const size_t block_start = TicketBlockStart(off);
  for (size_t j = 0; j < kTicketWindow; ++j) {
    const size_t at_s = block_start + j, at_k = at_s + gap;
    if (at_s < kBlock || at_s + kTagBytes > cm || at_k + kKdcSignatureBytes > cm) continue;
    for (size_t i = 0; i < t_s.size(); ++i)
      in.x[8 * at_s + i] = c.Xor(in.x[8 * at_s + i], c.And(in.sel[j], t_s[i]));
    for (size_t i = 0; i < sig.size(); ++i)
      in.x[8 * at_k + i] = c.Xor(in.x[8 * at_k + i], c.And(in.sel[j], sig[i]));
  }
  c.Output(ClassEncrypt(c, in.k, cm, in.x, in.q));
  return c.Compile();
}

absl::StatusOr<Program> ChecksumClassProgram(size_t cm) {
  if (64 * HashBlocks(cm) > kMaxBytes)
    return absl::InvalidArgumentError("cts: checksum data over 64 KiB");
  cm = ChecksumClassMax(cm);
  Circuit c;
  UsageKeys k;
  k.ipad = StateFromBytes(c.Inputs(160));
  k.opad = StateFromBytes(c.Inputs(160));
  auto [x, q] = ClassInputs(c, cm);
  const size_t from = PaddingFrom(cm);
  for (size_t i = 0; i < q.size(); ++i) x[8 * from + i] = c.Xor(x[8 * from + i], q[i]);
  c.Output(Slice(HmacSha1Padded(c, k.ipad, k.opad, x), 0, kTagBytes));
  return c.Compile();
}

std::vector<uint8_t> CutClassOutput(size_t n, absl::Span<const uint8_t> out) {
  const size_t nb = BlockCount(n), r = LastBytes(n);
  const auto take = [&](std::vector<uint8_t>& v, size_t from, size_t bytes) {
    v.insert(v.end(), out.begin() + from, out.begin() + from + bytes);
  };
  std::vector<uint8_t> cut;
  cut.reserve(n + kTagBytes);
  if (nb == 1) {
    take(cut, 0, kBlock);
  } else {
    take(cut, 0, kBlock * (nb - 2));
    take(cut, kBlock * (nb - 1), kBlock);  // C_nb
    take(cut, kBlock * (nb - 2), r);       // C_{nb-1}, stolen
  }
  take(cut, out.size() - kTagBytes, kTagBytes);
  return cut;
}

absl::StatusOr<Program> ChecksumProgram(size_t n) {
  if (n > kMaxBytes) return absl::InvalidArgumentError("cts: checksum data over 64 KiB");
  Circuit c;
  UsageKeys k;
  k.ipad = StateFromBytes(c.Inputs(160));
  k.opad = StateFromBytes(c.Inputs(160));
  c.Output(HmacSha1_96(c, k, c.Inputs(8 * n)));
  return c.Compile();
}

absl::StatusOr<Program> PrfProgram(int nr) {
  if (nr != 10 && nr != 14) return absl::InvalidArgumentError("cts: nr must be 10 or 14");
  Circuit c;
  RoundKeys k;
  k.nr = nr;
  k.bits = c.Inputs(128 * (nr + 1));
  c.Output(AesEncryptBlock(c, k, c.Inputs(128)));
  return c.Compile();
}

std::string_view Cf2Pepper(uint32_t usage) {
  switch (usage) {
    case 54:
    case 55: return "challengelongterm";
    case 3: return "replykey";
    default: return {};
  }
}

Bits PrfPlus(Circuit& c, const RoundKeys& prf, std::string_view pepper, size_t bytes) {
  Bits out;
  for (uint8_t i = 1; out.size() < 8 * bytes; ++i) {
    std::string in(1, static_cast<char>(i));
    in.append(pepper);
    uint8_t md[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const uint8_t*>(in.data()), in.size(), md);
    Append(out, AesEncryptBlock(c, prf, Circuit::Constant(absl::MakeConstSpan(md, kBlock))));
  }
  out.resize(8 * bytes);
  return out;
}

Bits DeriveKeyCircuit(Circuit& c, const RoundKeys& key, size_t keylen,
                      absl::Span<const uint8_t> constant) {
  Bits block = Circuit::Constant(constant.size() == kBlock
                                     ? std::vector<uint8_t>(constant.begin(), constant.end())
                                     : NFold(constant, kBlock));
  Bits out;
  while (out.size() < 8 * keylen) {
    block = AesEncryptBlock(c, key, block);
    Append(out, block);
  }
  out.resize(8 * keylen);
  return out;
}

namespace {

// The chaining state after one compression of (key || 0...) ^ pad.
Sha1State PadState(Circuit& c, const Bits& key, uint8_t pad) {
  Bits block(512);
  for (size_t i = 0; i < 512; ++i) {
    const Wire k = i < key.size() ? key[i] : kZero;
    block[i] = ((pad >> (i % 8)) & 1) ? c.Not(k) : k;
  }
  Sha1State iv;
  for (int w = 0; w < 5; ++w) iv[w] = ConstantWord(kSha1Iv[w]);
  return Sha1Compress(c, iv, block);
}

}  // namespace

UsageKeys UsageKeysCircuit(Circuit& c, const Bits& key, uint32_t usage) {
  const size_t keylen = key.size() / 8;
  const RoundKeys base = ExpandKeyCircuit(c, key);
  uint8_t constant[5] = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                         static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0xAA};
  UsageKeys k;
  k.ke = ExpandKeyCircuit(c, DeriveKeyCircuit(c, base, keylen, constant));
  constant[4] = 0x55;
  const Bits ki = DeriveKeyCircuit(c, base, keylen, constant);
  k.ipad = PadState(c, ki, 0x36);
  k.opad = PadState(c, ki, 0x5c);
  return k;
}

namespace {

absl::Status CheckCf2Shape(int nr_k, size_t keylen, uint32_t usage, size_t n) {
  if (keylen != 16 && keylen != 32)
    return absl::InvalidArgumentError("cts: a FAST key is 16 or 32 bytes");
  if (Cf2Pepper(usage).empty())
    return absl::InvalidArgumentError("cts: not a FAST usage (3, 54, 55)");
  return CheckShape(nr_k, n);
}

// The FAST key of a lane: CF2 of the inputs (K's PRF round keys, then X).
UsageKeys Cf2KeyInputs(Circuit& c, int nr_k, size_t keylen, uint32_t usage) {
  RoundKeys prf;
  prf.nr = nr_k;
  prf.bits = c.Inputs(128 * (nr_k + 1));
  const Bits x = c.Inputs(8 * keylen);
  const Bits key = c.Xor(x, PrfPlus(c, prf, Cf2Pepper(usage), keylen));
  return UsageKeysCircuit(c, key, usage);
}

}  // namespace

absl::StatusOr<Program> Cf2EncryptProgram(int nr_k, size_t keylen, uint32_t usage, size_t n) {
  if (absl::Status st = CheckCf2Shape(nr_k, keylen, usage, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = Cf2KeyInputs(c, nr_k, keylen, usage);
  c.Output(Rfc3962Encrypt(c, k, c.Inputs(8 * n)));
  return c.Compile();
}

absl::StatusOr<Program> Cf2EncryptClassProgram(int nr_k, size_t keylen, uint32_t usage,
                                               size_t cm) {
  if (absl::Status st = CheckCf2Shape(nr_k, keylen, usage, cm); !st.ok()) return st;
  if (absl::Status st = CheckClass(nr_k, cm); !st.ok()) return st;
  cm = EncryptClassMax(cm);
  Circuit c;
  const UsageKeys k = Cf2KeyInputs(c, nr_k, keylen, usage);
  const auto [x, q] = ClassInputs(c, cm);
  c.Output(ClassEncrypt(c, k, cm, x, q));
  return c.Compile();
}

absl::StatusOr<Program> Cf2DecryptProgram(int nr_k, size_t keylen, uint32_t usage, size_t n,
                                          bool window) {
  if (absl::Status st = CheckCf2Shape(nr_k, keylen, usage, n); !st.ok()) return st;
  Circuit c;
  const UsageKeys k = Cf2KeyInputs(c, nr_k, keylen, usage);
  const Decrypted d = Rfc3962Decrypt(c, k, c.Inputs(8 * (n + kTagBytes)));
  OutputDecrypted(c, d, window ? StaleTimestamp(c, d.conf_plain, c.Inputs(8 * kWindowBytes))
                               : kZero);
  return c.Compile();
}

}  // namespace kmpc::cts
