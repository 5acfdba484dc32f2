// A key's shared components in a refresh (refresh_components.h).
#include "engine/refresh_components.h"

#include <cstring>
#include <utility>

#include "share/replicated.h"

namespace kmpc::engine::refresh {

Digest::Digest() : ctx(EVP_MD_CTX_new()) {
  ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
}

Digest::~Digest() { EVP_MD_CTX_free(ctx); }

void Digest::Update(const void* p, size_t n) {
  if (ok && n > 0) ok = EVP_DigestUpdate(ctx, p, n) == 1;
}

void Digest::U64(uint64_t v) {
  uint8_t b[8];
  for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(v >> (56 - 8 * k));
  Update(b, 8);
}

void Digest::Str(const std::string& s) {
  U64(s.size());
  Update(s.data(), s.size());
}

absl::Status Digest::Final(std::array<uint8_t, 32>& out) {
  unsigned int len = 0;
  if (!ok || EVP_DigestFinal_ex(ctx, out.data(), &len) != 1 || len != 32)
    return absl::InternalError("SHA-256 failed");
  return absl::OkStatus();
}

size_t RoundKeyBytes(Cipher c) { return 16 * static_cast<size_t>(NumRounds(c) + 1); }

CtsLayout LayoutOf(const KeyShares& k) {
  CtsLayout l;
  l.reserve(k.cts.size());
  for (const CtsMaterial& m : k.cts) l.push_back({m.kind, m.usage, m.share[0].size()});
  return l;
}

size_t MaterialBytes(const CtsLayout& l) {
  size_t n = 0;
  for (const CtsSlot& s : l) n += s.len;
  return n;
}

bool UsableLayout(const CtsLayout& l) {
  if (l.size() > kMaxCtsSlots) return false;
  size_t total = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const uint8_t kind = static_cast<uint8_t>(l[i].kind);
    if (kind < static_cast<uint8_t>(CtsKind::kUsage) ||
        kind > static_cast<uint8_t>(CtsKind::kPrf) || l[i].len == 0 || l[i].len > 0xffff)
      return false;
    total += l[i].len;
    for (size_t k = 0; k < i; ++k)
      if (l[k].kind == l[i].kind && l[k].usage == l[i].usage) return false;
  }
  return total <= kMaxCtsMaterialBytes;
}

void EncodeLayout(const CtsLayout& l, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(l.size()));
  for (const CtsSlot& s : l) {
    out.push_back(static_cast<uint8_t>(s.kind));
    for (int b = 24; b >= 0; b -= 8) out.push_back(static_cast<uint8_t>(s.usage >> b));
    out.push_back(static_cast<uint8_t>(s.len >> 8));
    out.push_back(static_cast<uint8_t>(s.len & 0xff));
  }
}

std::optional<CtsLayout> DecodeLayout(const std::vector<uint8_t>& msg, size_t& pos) {
  if (pos >= msg.size()) return std::nullopt;
  const size_t count = msg[pos++];
  if ((msg.size() - pos) / kCtsSlotBytes < count) return std::nullopt;
  CtsLayout l(count);
  for (CtsSlot& s : l) {
    const uint8_t* p = &msg[pos];
    s.kind = static_cast<CtsKind>(p[0]);
    s.usage = (uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 8) | p[4];
    s.len = (size_t{p[5]} << 8) | p[6];
    pos += kCtsSlotBytes;
  }
  if (!UsableLayout(l)) return std::nullopt;
  return l;
}

absl::Status MetaDigest(bool cts, const std::string& meta, const CtsLayout& layout,
                        std::array<uint8_t, 32>& out) {
  Digest d;
  if (cts) {
    static constexpr char kTag[] = "kmpc-refresh-cts-layout-v1";
    d.Update(kTag, sizeof kTag);
    d.Str(meta);
    std::vector<uint8_t> enc;
    EncodeLayout(layout, enc);
    d.Update(enc.data(), enc.size());
  } else {
    d.Update(meta.data(), meta.size());
  }
  return d.Final(out);
}

absl::Status NewDealId(absl::Span<const uint8_t> batch_id, uint64_t seq,
                       const RefreshItem& item, const uint8_t* old_deal_id,
                       std::array<uint8_t, 16>& out) {
  static constexpr char kTag[] = "kmpc-refresh-deal-v1";
  Digest d;
  d.Update(kTag, sizeof kTag);
  d.Update(batch_id.data(), batch_id.size());
  d.U64(seq);
  d.Str(item.new_key_id);
  d.Update(old_deal_id, 16);
  std::array<uint8_t, 32> h;
  if (absl::Status st = d.Final(h); !st.ok()) return st;
  std::memcpy(out.data(), h.data(), 16);
  return absl::OkStatus();
}

std::vector<uint8_t> CheckContext(absl::Span<const uint8_t> batch_id, uint64_t seq,
                                  int rebuild_party) {
  static constexpr char kTag[] = "kmpc-refresh-run-v1";
  std::vector<uint8_t> c;
  c.reserve(sizeof kTag + batch_id.size() + 9);
  for (char ch : kTag) c.push_back(static_cast<uint8_t>(ch));
  for (uint8_t b : batch_id) c.push_back(b);
  for (int k = 0; k < 8; ++k) c.push_back(static_cast<uint8_t>(seq >> (56 - 8 * k)));
  c.push_back(static_cast<uint8_t>(rebuild_party + 1));
  return c;
}

std::vector<const std::vector<uint8_t>*> Components(const KeyShares& key, int k) {
  std::vector<const std::vector<uint8_t>*> c = {&key.round_keys[k], &key.h_powers[k]};
  for (const CtsMaterial& m : key.cts) c.push_back(&m.share[k]);
  return c;
}

size_t ComponentBytes(const KeyShares& k) {
  size_t n = 0;
  for (const auto* c : Components(k, 0)) n += c->size();
  return n;
}

Buffers::~Buffers() {
  share::Wipe(out);
  share::Wipe(in);
  share::Wipe(mask);
}

void TakeComponents(const Buffers& b, size_t rk, size_t hp, const CtsLayout& layout,
                    size_t& pos, KeyShares& ks) {
  ks.round_keys[0].assign(b.out.begin() + pos, b.out.begin() + pos + rk);
  ks.round_keys[1].assign(b.in.begin() + pos, b.in.begin() + pos + rk);
  pos += rk;
  ks.h_powers[0].assign(b.out.begin() + pos, b.out.begin() + pos + hp);
  ks.h_powers[1].assign(b.in.begin() + pos, b.in.begin() + pos + hp);
  pos += hp;
  ks.cts.clear();
  ks.cts.reserve(layout.size());
  for (const CtsSlot& s : layout) {
    CtsMaterial m;
    m.kind = s.kind;
    m.usage = s.usage;
    m.share[0].assign(b.out.begin() + pos, b.out.begin() + pos + s.len);
    m.share[1].assign(b.in.begin() + pos, b.in.begin() + pos + s.len);
    pos += s.len;
    ks.cts.push_back(std::move(m));
  }
}

}  // namespace kmpc::engine::refresh
