// KeyShares, EncryptState and the dealer.
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "aes/key_expansion.h"
#include "cts/dealer.h"
#include "engine/engine.h"
#include "protocol/gf128.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

constexpr char kMagic[6] = {'K', 'M', 'P', 'C', 'K', 'S'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kVersionCts = 2;  // version 1 plus the aes*-cts material
// Versions 1 and 2 with the origin deal id after deal_id (engine.h).
constexpr uint8_t kVersionOrigin = 3, kVersionCtsOrigin = 4;
constexpr size_t kOriginBytes = 16;
constexpr size_t kHeader = 6 + 1 + 1 + 1 + 2 + 16;

bool KnownCipher(Cipher c) {
  return c == Cipher::kAes128 || c == Cipher::kAes256 || IsCts(c);
}

void PutU32Be(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// Version 2's material section (engine.h, KeyShares::Serialize).
void SerializeCts(const KeyShares& ks, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(ks.cts.size()));
  for (const CtsMaterial& m : ks.cts) {
    out.push_back(static_cast<uint8_t>(m.kind));
    PutU32Be(out, m.usage);
    const size_t len = m.share[0].size();
    out.push_back(static_cast<uint8_t>(len >> 8));
    out.push_back(static_cast<uint8_t>(len & 0xff));
    for (int k = 0; k < 2; ++k) out.insert(out.end(), m.share[k].begin(), m.share[k].end());
  }
}

// Strict parse of the material section: exactly `b`, known kinds, each
// (kind, usage) once.
absl::Status ParseCts(absl::Span<const uint8_t> b, KeyShares& ks) {
  if (b.empty()) return absl::InvalidArgumentError("key shares: no material count");
  const size_t count = b[0];
  size_t at = 1;
  for (size_t i = 0; i < count; ++i) {
    if (b.size() - at < 7) return absl::InvalidArgumentError("key shares: truncated material");
    CtsMaterial m;
    if (b[at] < 1 || b[at] > 3)
      return absl::InvalidArgumentError(absl::StrCat("key shares: material kind ", b[at]));
    m.kind = static_cast<CtsKind>(b[at]);
    m.usage = (uint32_t{b[at + 1]} << 24) | (uint32_t{b[at + 2]} << 16) |
              (uint32_t{b[at + 3]} << 8) | b[at + 4];
    const size_t len = (size_t{b[at + 5]} << 8) | b[at + 6];
    at += 7;
    if (len == 0 || (b.size() - at) / 2 < len)
      return absl::InvalidArgumentError("key shares: truncated material");
    if (ks.FindCts(m.kind, m.usage) != nullptr)
      return absl::InvalidArgumentError("key shares: material dealt twice");
    for (int k = 0; k < 2; ++k, at += len) m.share[k].assign(b.begin() + at, b.begin() + at + len);
    ks.cts.push_back(std::move(m));
  }
  if (at != b.size())
    return absl::InvalidArgumentError("key shares: bytes after the material");
  return absl::OkStatus();
}

// One clear value dealt as three views into material (kind, usage) of
// out[0..2]; `clear` is wiped by its owner (cts::UsageMaterial).
absl::Status DealMaterial(CtsKind kind, uint32_t usage,
                          const absl::StatusOr<cts::UsageMaterial>& clear,
                          std::array<KeyShares, 3>& out) {
  if (!clear.ok()) return clear.status();
  absl::StatusOr<std::array<share::View, 3>> views = share::Deal(clear->bytes);
  if (!views.ok()) return views.status();
  for (int i = 0; i < 3; ++i) {
    CtsMaterial m;
    m.kind = kind;
    m.usage = usage;
    for (int k = 0; k < 2; ++k) m.share[k] = std::move((*views)[i].comp[k]);
    out[i].cts.push_back(std::move(m));
  }
  return absl::OkStatus();
}

// The aes*-cts material of `key` (engine.h, DealKey), dealt into out.
absl::Status DealCts(absl::Span<const uint8_t> key, KeyKind kind,
                     std::array<KeyShares, 3>& out) {
  const auto dealt = [kind](uint32_t u) {
    for (uint32_t s : kCtsServiceUsages)
      if (u == s) return DealsServiceUsages(kind);
    for (uint32_t s : kCtsServiceKeyChecksums)
      if (u == s) return kind == KeyKind::kService;
    return true;
  };
  for (uint32_t u : kCtsDealtUsages) {
    if (!dealt(u)) continue;
    absl::Status st = DealMaterial(CtsKind::kUsage, u, cts::DealUsage(key, u), out);
    if (!st.ok()) return st;
  }
  for (uint32_t u : kCtsDealtChecksums) {
    if (!dealt(u)) continue;
    absl::Status st = DealMaterial(CtsKind::kChecksum, u, cts::DealChecksum(key, u), out);
    if (!st.ok()) return st;
  }
  return DealMaterial(CtsKind::kPrf, 0, cts::DealPrf(key), out);
}

// AES_K(0^128) in the clear, for the dealer only.
absl::Status EncryptZeroBlock(absl::Span<const uint8_t> key, uint8_t* out) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return absl::InternalError("EVP_CIPHER_CTX_new failed");
  const EVP_CIPHER* cipher =
      key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb();
  const uint8_t zero[16] = {0};
  int len = 0;
  bool ok = EVP_EncryptInit_ex(ctx, cipher, nullptr, key.data(), nullptr) == 1 &&
            EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 &&
            EVP_EncryptUpdate(ctx, out, &len, zero, 16) == 1 && len == 16;
  EVP_CIPHER_CTX_free(ctx);
  return ok ? absl::OkStatus() : absl::InternalError("AES-ECB failed");
}

}  // namespace

int NumRounds(Cipher cipher) {
  switch (cipher) {
    case Cipher::kAes128: case Cipher::kAes128Cts: return 10;
    case Cipher::kAes256: case Cipher::kAes256Cts: return 14;
  }
  return 0;
}

size_t KeyBytes(Cipher cipher) {
  switch (cipher) {
    case Cipher::kAes128: case Cipher::kAes128Cts: return 16;
    case Cipher::kAes256: case Cipher::kAes256Cts: return 32;
  }
  return 0;
}

KeyShares::~KeyShares() {
  for (auto& v : round_keys) share::Wipe(v);
  for (auto& v : h_powers) share::Wipe(v);
  for (auto& m : cts)
    for (auto& v : m.share) share::Wipe(v);
}

size_t DropServiceMaterial(KeyShares& key) {
  const auto service = [](const CtsMaterial& m) {
    if (m.kind == CtsKind::kPrf) return false;
    for (uint32_t s : kCtsServiceUsages)
      if (m.usage == s) return true;
    return false;
  };
  size_t dropped = 0;
  for (CtsMaterial& m : key.cts)
    if (service(m)) {
      for (auto& v : m.share) share::Wipe(v);
      ++dropped;
    }
  key.cts.erase(std::remove_if(key.cts.begin(), key.cts.end(), service), key.cts.end());
  return dropped;
}

const std::array<uint8_t, 16>& KeyShares::Origin() const {
  for (uint8_t b : origin_deal_id)
    if (b != 0) return origin_deal_id;
  return deal_id;
}

const CtsMaterial* KeyShares::FindCts(CtsKind kind, uint32_t usage) const {
  for (const CtsMaterial& m : cts)
    if (m.kind == kind && m.usage == usage) return &m;
  return nullptr;
}

absl::Status KeyShares::Validate() const {
  if (party < 0 || party > 2) {
    return absl::InvalidArgumentError("key shares: party index out of range");
  }
  if (!KnownCipher(cipher)) {
    return absl::InvalidArgumentError("key shares: unknown cipher");
  }
  const size_t rk = 16 * static_cast<size_t>(NumRounds(cipher) + 1);
  for (int k = 0; k < 2; ++k) {
    if (round_keys[k].size() != rk) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key shares: round key share has ", round_keys[k].size(),
          " bytes, want ", rk));
    }
    if (h_powers[k].size() != 16 * static_cast<size_t>(kStoredHPowers)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key shares: H power share has ", h_powers[k].size(),
          " bytes, want ", 16 * kStoredHPowers));
    }
  }
  if (!cts.empty() && !IsCts(cipher))
    return absl::InvalidArgumentError("key shares: aes*-cts material on a ctr-mpc key");
  for (const CtsMaterial& m : cts)
    if (m.share[0].empty() || m.share[0].size() != m.share[1].size() ||
        m.share[0].size() > 0xffff)
      return absl::InvalidArgumentError("key shares: material shares of unequal sizes");
  return absl::OkStatus();
}

std::vector<uint8_t> KeyShares::Serialize() const {
  std::vector<uint8_t> out;
  // Sized once, the material included: a reallocation would free a copy
  // of the shares unwiped.
  const bool origin = Origin() != deal_id;
  size_t size = kHeader + (origin ? kOriginBytes : 0) + 2 * round_keys[0].size() +
                2 * h_powers[0].size();
  if (IsCts(cipher)) {
    size += 1;  // SerializeCts: the count, then per material 7 bytes and two shares
    for (const CtsMaterial& m : cts) size += 7 + 2 * m.share[0].size();
  }
  out.reserve(size);
  // push_back, not a range insert: GCC 12 reads the insert into the
  // reserved but empty vector as a write into a region of size 0
  // (-Wstringop-overflow, a false positive).
  for (char c : kMagic) out.push_back(static_cast<uint8_t>(c));
  out.push_back(IsCts(cipher) ? (origin ? kVersionCtsOrigin : kVersionCts)
                              : (origin ? kVersionOrigin : kVersion));
  out.push_back(static_cast<uint8_t>(party));
  out.push_back(static_cast<uint8_t>(cipher));
  out.push_back(static_cast<uint8_t>(kStoredHPowers >> 8));
  out.push_back(static_cast<uint8_t>(kStoredHPowers & 0xff));
  out.insert(out.end(), deal_id.begin(), deal_id.end());
  if (origin) out.insert(out.end(), Origin().begin(), Origin().end());
  for (int k = 0; k < 2; ++k) {
    out.insert(out.end(), round_keys[k].begin(), round_keys[k].end());
  }
  for (int k = 0; k < 2; ++k) {
    out.insert(out.end(), h_powers[k].begin(), h_powers[k].end());
  }
  if (IsCts(cipher)) SerializeCts(*this, out);
  return out;
}

absl::StatusOr<KeyShares> KeyShares::Parse(absl::Span<const uint8_t> b) {
  if (b.size() < kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat("key shares: ", b.size(), " bytes is shorter than the ",
                     kHeader, "-byte header"));
  }
  if (std::memcmp(b.data(), kMagic, 6) != 0) {
    return absl::InvalidArgumentError("key shares: bad magic");
  }
  if (b[6] < kVersion || b[6] > kVersionCtsOrigin) {
    return absl::InvalidArgumentError(
        absl::StrCat("key shares: unsupported version ", b[6]));
  }
  const bool cts_version = b[6] == kVersionCts || b[6] == kVersionCtsOrigin;
  const size_t header =
      kHeader + (b[6] == kVersionOrigin || b[6] == kVersionCtsOrigin ? kOriginBytes : 0);
  KeyShares ks;
  if (b[7] > 2) {
    return absl::InvalidArgumentError("key shares: party index out of range");
  }
  ks.party = b[7];
  ks.cipher = static_cast<Cipher>(b[8]);
  if (!KnownCipher(ks.cipher) || IsCts(ks.cipher) != cts_version) {
    return absl::InvalidArgumentError(
        absl::StrCat("key shares: unknown cipher ", b[8], " for version ", b[6]));
  }
  const size_t hp = (static_cast<size_t>(b[9]) << 8) | b[10];
  if (hp != static_cast<size_t>(kStoredHPowers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key shares: ", hp, " H powers, want ", kStoredHPowers));
  }
  std::memcpy(ks.deal_id.data(), b.data() + 11, 16);
  const size_t rk = 16 * static_cast<size_t>(NumRounds(ks.cipher) + 1);
  const size_t want = header + 2 * rk + 2 * 16 * hp;
  if (IsCts(ks.cipher) ? b.size() <= want : b.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key shares: ", b.size(), " bytes, want ", want));
  }
  ks.origin_deal_id = ks.deal_id;
  if (header != kHeader) {
    std::memcpy(ks.origin_deal_id.data(), b.data() + kHeader, kOriginBytes);
    if (ks.origin_deal_id == ks.deal_id)  // Serialize writes version 1 or 2
      return absl::InvalidArgumentError("key shares: origin equal to deal_id in version 3/4");
  }
  const uint8_t* p = b.data() + header;
  for (int k = 0; k < 2; ++k, p += rk) ks.round_keys[k].assign(p, p + rk);
  for (int k = 0; k < 2; ++k, p += 16 * hp) {
    ks.h_powers[k].assign(p, p + 16 * hp);
  }
  if (IsCts(ks.cipher)) {
    if (absl::Status st = ParseCts(b.subspan(want), ks); !st.ok()) return st;
  }
  return ks;
}

absl::StatusOr<std::array<KeyShares, 3>> DealKey(
    Cipher cipher, absl::Span<const uint8_t> key, KeyKind kind) {
  if (!KnownCipher(cipher)) {
    return absl::InvalidArgumentError("DealKey: unknown cipher");
  }
  if (key.size() != KeyBytes(cipher)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DealKey: key has ", key.size(), " bytes, cipher needs ",
                     KeyBytes(cipher)));
  }
  absl::StatusOr<std::vector<uint8_t>> rk = aes::ExpandKey(key);
  if (!rk.ok()) return rk.status();
  std::vector<uint8_t> powers(16 * kStoredHPowers);
  uint8_t h[16];
  absl::Status st = EncryptZeroBlock(key, h);
  if (!st.ok()) {
    share::Wipe(*rk);
    share::Wipe(h, sizeof h);
    return st;
  }
  std::memcpy(powers.data(), h, 16);
  for (int i = 1; i < kStoredHPowers; ++i) {
    protocol::GfMul(powers.data() + 16 * (i - 1), h, powers.data() + 16 * i);
  }
  share::Wipe(h, sizeof h);
  absl::StatusOr<std::array<share::View, 3>> rk_views = share::Deal(*rk);
  absl::StatusOr<std::array<share::View, 3>> hp_views = share::Deal(powers);
  share::Wipe(*rk);
  share::Wipe(powers);
  // share::View does not wipe itself: on a failure below, wipe whichever
  // views were dealt before they are freed.
  auto wipe_views = [&] {
    for (auto* v : {&rk_views, &hp_views})
      if (v->ok())
        for (share::View& view : **v)
          for (auto& c : view.comp) share::Wipe(c);
  };
  if (!rk_views.ok() || !hp_views.ok()) {
    absl::Status bad = !rk_views.ok() ? rk_views.status() : hp_views.status();
    wipe_views();
    return bad;
  }
  std::array<uint8_t, 16> deal_id;
  st = share::RandomBytes(absl::MakeSpan(deal_id));
  if (!st.ok()) {
    wipe_views();
    return st;
  }
  std::array<KeyShares, 3> out;
  for (int i = 0; i < 3; ++i) {
    out[i].party = i;
    out[i].cipher = cipher;
    out[i].kind = kind;
    out[i].deal_id = deal_id;
    out[i].origin_deal_id = deal_id;
    for (int k = 0; k < 2; ++k) {
      out[i].round_keys[k] = std::move((*rk_views)[i].comp[k]);
      out[i].h_powers[k] = std::move((*hp_views)[i].comp[k]);
    }
  }
  if (IsCts(cipher)) {
    if (st = DealCts(key, kind, out); !st.ok()) return st;  // out's views wipe themselves
  }
  return out;
}

TagState::~TagState() {
  for (auto& m : mask) share::Wipe(m.data(), m.size());
  for (auto& v : h_powers) share::Wipe(v);
}

const uint8_t* TagState::Powers(int comp) const {
  if (!h_powers[comp].empty() || key == nullptr) return h_powers[comp].data();
  return key->h_powers[comp].data();
}

size_t TagState::NumPowers() const {
  if (!h_powers[0].empty() || key == nullptr) {
    return std::min(h_powers[0].size(), h_powers[1].size()) / 16;
  }
  return std::min(key->h_powers[0].size(), key->h_powers[1].size()) / 16;
}

size_t TagState::OwnHeapBytes() const {
  return key_id.capacity() + h_powers[0].capacity() + h_powers[1].capacity();
}

}  // namespace kmpc::engine
