// Share refresh (refresh.h): agreement on the pairs, then one zero-sharing
// round per batch. Secret buffers (masks, masked shares) are wiped on every
// way out.
#include "engine/refresh.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "engine/agreement.h"
#include "engine/refresh_check.h"
#include "protocol/prss.h"
#include "protocol/verify.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// One party's view of one pair, compared among the three parties:
//   code (1: KeyView, agreement.h; kViewNone for a malformed pair, decided
//   from the inputs alone) | cipher (1) | deal_id (16) |
//   metadata digest (32, MetaDigest: the public metadata and, for an
//   aes*-cts key, its material's layout) | origin deal id (16,
//   KeyShares::Origin: the new key's origin) | new id taken (1)
constexpr size_t kViewBytes = 67;
constexpr size_t kViewOrigin = 50;

struct Digest {
  Digest() : ctx(EVP_MD_CTX_new()) {
    ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  }
  ~Digest() { EVP_MD_CTX_free(ctx); }
  void Update(const void* p, size_t n) {
    if (ok && n > 0) ok = EVP_DigestUpdate(ctx, p, n) == 1;
  }
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(v >> (56 - 8 * k));
    Update(b, 8);
  }
  void Str(const std::string& s) {
    U64(s.size());
    Update(s.data(), s.size());
  }
  absl::Status Final(std::array<uint8_t, 32>& out) {
    unsigned int len = 0;
    if (!ok || EVP_DigestFinal_ex(ctx, out.data(), &len) != 1 || len != 32)
      return absl::InternalError("SHA-256 failed");
    return absl::OkStatus();
  }
  EVP_MD_CTX* ctx;
  bool ok;
};

struct Plan {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  std::shared_ptr<const KeyShares> key;
  std::string public_meta;  // this party's (RefreshSource::public_meta)
  std::array<uint8_t, kViewBytes> view{};
  bool live() const { return status == pb::JOB_OK; }
  void Fail(pb::JobStatus s, std::string why) {
    status = s;
    detail = std::move(why);
    key.reset();
  }
};

// The pair's outcome from the three views (views[p] is party p's): the same
// on every party, since all three hold the same three views.
void Decide(Plan& w, const std::array<const uint8_t*, 3>& views) {
  if (views[0][0] == kViewNone && views[1][0] == kViewNone &&
      views[2][0] == kViewNone)
    return;  // malformed: already failed alike
  std::vector<int> taken;
  bool same = true;
  for (int p = 0; p < 3; ++p) {
    if (views[p][kViewBytes - 1] != 0) taken.push_back(p);
    // Everything but the "taken" byte must agree.
    if (std::memcmp(views[p], views[0], kViewBytes - 1) != 0) same = false;
  }
  auto [status, why] = KeyPresence(views);
  if (status != pb::JOB_OK) {
    w.Fail(status, std::move(why));
  } else if (!same) {
    w.Fail(pb::JOB_KEY_INCONSISTENT,
           "the MPC servers hold different dealings or metadata of this key "
           "(deal_id, cipher, kvno or label differ)");
  } else if (!taken.empty()) {
    w.Fail(pb::JOB_MALFORMED,
           absl::StrCat("the new key id is already taken on MPC party ",
                        PartyList(taken)));
  }
}

// The pairs' checks that depend on the inputs only (the same on all
// parties): id sizes, old != new, no new id twice or also an old id.
void CheckInputs(absl::Span<const RefreshItem> items, std::vector<Plan>& plan) {
  std::set<std::string> olds, news;
  for (const RefreshItem& it : items) olds.insert(it.old_key_id);
  for (size_t j = 0; j < items.size(); ++j) {
    const RefreshItem& it = items[j];
    if (it.old_key_id.size() != contract::kKeyIdSize ||
        it.new_key_id.size() != contract::kKeyIdSize) {
      plan[j].Fail(pb::JOB_MALFORMED,
                   absl::StrCat("key ids must be ", contract::kKeyIdSize, " bytes"));
    } else if (olds.count(it.new_key_id) != 0) {
      plan[j].Fail(pb::JOB_MALFORMED, "the new key id is an old key id of the batch");
    } else if (!news.insert(it.new_key_id).second) {
      plan[j].Fail(pb::JOB_MALFORMED, "the new key id appears twice in the batch");
    }
  }
}

// Decide for a rebuild of party `lost`: its store is empty, so its view is
// replaced by the first survivor's (the survivors must agree between
// themselves); only its "new id taken" byte counts.
void DecideRebuild(Plan& w, const std::array<const uint8_t*, 3>& views, int lost) {
  std::array<uint8_t, kViewBytes> copy;
  std::memcpy(copy.data(), views[(lost + 1) % 3], kViewBytes);
  copy[kViewBytes - 1] = views[lost][kViewBytes - 1];
  std::array<const uint8_t*, 3> v = views;
  v[lost] = copy.data();
  if (views[lost][0] == kViewPresent) {
    // A party that still holds the key is not lost: refresh instead.
    w.Fail(pb::JOB_MALFORMED,
           absl::StrCat("MPC party ", lost, " still holds this key: it is not a "
                        "new server (refresh instead of rebuilding it)"));
    return;
  }
  Decide(w, v);
}

// Component sizes of a key of `cipher` (engine.h, KeyShares).
size_t RoundKeyBytes(Cipher c) { return 16 * static_cast<size_t>(NumRounds(c) + 1); }
constexpr size_t kHPowerBytes = 16 * static_cast<size_t>(kStoredHPowers);

// The public layout of an aes*-cts key's dealt material (KeyShares::cts):
// kind, usage and share length of each entry, in the record's order (empty
// for a ctr-mpc key). It is part of the pair's metadata digest, so the
// three parties compare it, and survivor A sends it to a rebuilt party
// with the metadata; every new view keeps it (same entries, same order).
struct CtsSlot {
  CtsKind kind;
  uint32_t usage;
  size_t len;
};
using CtsLayout = std::vector<CtsSlot>;

// Bounds of a layout this resharing takes: the share store's encoding
// (a count byte, u16 lengths) and at most kMaxCtsMaterialBytes of material
// per key (a dealing holds ~1.2 KiB: cts/dealer.h), which bounds what a
// rebuilt party allocates on a survivor's word.
constexpr size_t kMaxCtsSlots = 255;
constexpr size_t kMaxCtsMaterialBytes = 16384;
constexpr size_t kCtsSlotBytes = 7;  // kind (1) | usage (u32 BE) | len (u16 BE)

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

// Known kinds, non-empty shares, each (kind, usage) once (as the share
// store's parser requires), within the bounds above.
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

// count (1) | count x (kind (1) | usage (u32 BE) | len (u16 BE)): the share
// store's material header (engine.h KeyShares::Serialize) without shares.
void EncodeLayout(const CtsLayout& l, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(l.size()));
  for (const CtsSlot& s : l) {
    out.push_back(static_cast<uint8_t>(s.kind));
    for (int b = 24; b >= 0; b -= 8) out.push_back(static_cast<uint8_t>(s.usage >> b));
    out.push_back(static_cast<uint8_t>(s.len >> 8));
    out.push_back(static_cast<uint8_t>(s.len & 0xff));
  }
}

// The layout encoded at msg[pos..] (advancing pos); nullopt when it is
// truncated or not UsableLayout.
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

// A pair's metadata digest (the view's): SHA-256(public_meta) for a
// ctr-mpc key; for an aes*-cts key SHA-256(tag || u64 |meta| || meta ||
// EncodeLayout(layout)), so that comparing the views compares the layouts.
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

// This party's view of pair j (a live plan): sets w.key when usable.
absl::Status LookUp(int party, const RefreshItem& item, const RefreshLookup& lookup,
                    Plan& w) {
  RefreshSource src = lookup ? lookup(item) : RefreshSource{};
  uint8_t* v = w.view.data();
  if (!src.old_key.ok() || *src.old_key == nullptr) {
    v[0] = (src.old_key.ok() || absl::IsNotFound(src.old_key.status())) ? kViewMissing
                                                                        : kViewBad;
  } else if (!(*src.old_key)->Validate().ok() || (*src.old_key)->party != party ||
             !UsableLayout(LayoutOf(**src.old_key))) {
    v[0] = kViewBad;
  } else {
    w.key = *src.old_key;
    w.public_meta = src.public_meta;
    v[0] = kViewPresent;
    v[1] = static_cast<uint8_t>(w.key->cipher);
    std::memcpy(v + 2, w.key->deal_id.data(), 16);
    std::array<uint8_t, 32> md;
    if (absl::Status st =
            MetaDigest(IsCts(w.key->cipher), src.public_meta, LayoutOf(*w.key), md);
        !st.ok())
      return st;
    std::memcpy(v + 18, md.data(), 32);
    std::memcpy(v + kViewOrigin, w.key->Origin().data(), 16);
  }
  v[kViewBytes - 1] = src.new_id_taken ? 1 : 0;
  return absl::OkStatus();
}

// Dealing id of the refreshed key: public, the same on the three parties,
// new for every refresh (the batch id is fresh per request), so that a
// party holding the shares of another run of the same pair is caught by the
// engine's key-view agreement instead of computing garbage.
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

// What the check of the new sharing binds its hashes and tags to: this
// run (batch id, sequence number, rebuild party).
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

// Component k (0 or 1) of every shared value of `key` in the order every
// exchange of this file uses: round keys, powers of H, then each aes*-cts
// material entry's share in the record's order.
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

// Secret buffers of the exchange, wiped on every way out.
struct Buffers {
  std::vector<uint8_t> out, in, mask;
  ~Buffers() {
    share::Wipe(out);
    share::Wipe(in);
    share::Wipe(mask);
  }
};

// A new view's components from the exchange's buffers: component 0 from
// `b.out`, 1 from `b.in`, at `pos` (round keys, rk bytes, then H powers, hp
// bytes, then the aes*-cts material of `layout`, as Components orders
// them); advances pos.
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

// len bytes of AES-256-CTR(seed) keystream, counter block `stream` (the
// masks s, t and the pad p are three streams).
absl::Status Expand(const std::array<uint8_t, 32>& seed, uint8_t stream,
                    std::vector<uint8_t>& out, size_t len) {
  out.assign(len, 0);
  if (len == 0) return absl::OkStatus();
  uint8_t iv[16] = {0};
  iv[0] = stream;
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int n = 0;
  const bool ok =
      ctx != nullptr &&
      EVP_EncryptInit_ex(ctx, EVP_aes_256_ctr(), nullptr, seed.data(), iv) == 1 &&
      EVP_EncryptUpdate(ctx, out.data(), &n, out.data(), static_cast<int>(len)) == 1 &&
      static_cast<size_t>(n) == len;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) return absl::InternalError("AES-CTR mask expansion failed");
  return absl::OkStatus();
}

// A 32-byte seed, wiped when it goes.
struct Seed {
  std::array<uint8_t, 32> b{};
  ~Seed() { OPENSSL_cleanse(b.data(), b.size()); }
  absl::Status Draw() {
    if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1)
      return absl::InternalError("no randomness for the rebuild masks");
    return absl::OkStatus();
  }
};

void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<uint8_t>(v >> (56 - 8 * k)));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v = (v << 8) | p[k];
  return v;
}

// One live pair of a rebuild: its cipher, old dealing id and aes*-cts
// layout (from this party's key; on the lost party the cipher and dealing
// id from survivor A's view, which B's matched, and the layout from A's
// metadata message, checked against the view's metadata digest).
struct RebuildPair {
  size_t j;
  Cipher cipher;
  const uint8_t* deal_id;
  const uint8_t* origin;       // KeyShares::Origin, kept by the new key
  const uint8_t* meta_digest;  // lost party only
  CtsLayout layout;
};

// The public state of one rebuild of party `lost` (refresh.h): survivors A
// = lost + 1 and B = lost + 2, the pairs that go ahead and their total
// component bytes.
struct Rebuild {
  net::RingChannel& channel;
  const std::vector<Plan>& plan;
  int me, lost, a, b;
  std::vector<RebuildPair> live;
  size_t total = 0;

  // Concatenated share `share` of every live pair (survivors only), each
  // pair's components in Components' order. Component k of this party's
  // view is share (me + k) % 3.
  void Gather(int share, std::vector<uint8_t>& dst) const {
    dst.clear();
    dst.reserve(total);
    const int k = (share - me + 3) % 3;  // 0 or 1 on a survivor
    for (const RebuildPair& l : live)
      for (const auto* c : Components(*plan[l.j].key, k))
        dst.insert(dst.end(), c->begin(), c->end());
  }
};

// Fills r.live and r.total from the plan, and every pair's status into out.
// On the lost party r.total lacks the aes*-cts material until
// ReadRebuiltMeta has read the layouts.
absl::Status CollectRebuildPairs(Rebuild& r, const std::vector<uint8_t>& survivor_views,
                                 std::vector<RefreshOutcome>& out) {
  const std::vector<Plan>& plan = r.plan;
  for (size_t j = 0; j < plan.size(); ++j) {
    out[j].status = plan[j].status;
    out[j].detail = plan[j].detail;
    if (!plan[j].live()) continue;
    RebuildPair l{j, Cipher::kAes128, nullptr, nullptr, nullptr, {}};
    if (r.me == r.lost) {
      if (survivor_views.size() != kViewBytes * plan.size())
        return absl::InternalError("rebuild: the survivors' views are missing");
      const uint8_t* v = &survivor_views[kViewBytes * j];
      const std::optional<Cipher> cipher = CipherFromProto(v[1]);
      if (!cipher) return absl::DataLossError("rebuild: a survivor named an unknown cipher");
      l.cipher = *cipher;
      l.deal_id = v + 2;
      l.origin = v + kViewOrigin;
      l.meta_digest = v + 18;
    } else {
      l.cipher = plan[j].key->cipher;
      l.deal_id = plan[j].key->deal_id.data();
      l.origin = plan[j].key->Origin().data();
      l.layout = LayoutOf(*plan[j].key);
    }
    r.total += RoundKeyBytes(l.cipher) + kHPowerBytes + MaterialBytes(l.layout);
    r.live.push_back(std::move(l));
  }
  return absl::OkStatus();
}

// Round 1: B -> A sigma, L -> B pi.
absl::Status ShareRebuildSeeds(const Rebuild& r, Seed& sigma, Seed& pi) {
  net::RingChannel& channel = r.channel;
  if (r.me == r.b) {
    if (absl::Status st = sigma.Draw(); !st.ok()) return st;
    if (absl::Status st = channel.SendToPrev(sigma.b); !st.ok()) return st;
    if (absl::Status st = channel.RecvFromNext(absl::MakeSpan(pi.b)); !st.ok()) return st;
  } else if (r.me == r.a) {
    if (absl::Status st = channel.RecvFromNext(absl::MakeSpan(sigma.b)); !st.ok())
      return st;
  } else {
    if (absl::Status st = pi.Draw(); !st.ok()) return st;
    if (absl::Status st = channel.SendToPrev(pi.b); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Round 3 on survivor A: A -> L  metadata (per pair: u64 length | public
// metadata | for an aes*-cts key EncodeLayout), x_{L+1} ^ t, x_L ^ s ^ p
// (x.in holds x_L ^ s ^ p from B; x.out gets x_{L+1}).
absl::Status SendToLost(const Rebuild& r, const Buffers& t, Buffers& x) {
  std::vector<uint8_t> meta_msg;
  for (const RebuildPair& l : r.live) {
    const std::string& m = r.plan[l.j].public_meta;
    PutU64(meta_msg, m.size());
    meta_msg.insert(meta_msg.end(), m.begin(), m.end());
    if (IsCts(l.cipher)) EncodeLayout(l.layout, meta_msg);
  }
  std::vector<uint8_t> len;
  PutU64(len, meta_msg.size());
  if (absl::Status st = r.channel.SendToPrev(len); !st.ok()) return st;
  if (absl::Status st = r.channel.SendToPrev(meta_msg); !st.ok()) return st;
  r.Gather(r.a, x.out);
  x.mask.resize(2 * r.total);
  for (size_t k = 0; k < r.total; ++k) x.mask[k] = x.out[k] ^ t.mask[k];
  std::memcpy(x.mask.data() + r.total, x.in.data(), r.total);
  return r.channel.SendToPrev(x.mask);
}

// Rounds 2 and 3 on the survivors. x.out / x.in: their shares; x.mask:
// B's message.
absl::Status SendMaskedShares(const Rebuild& r, const Buffers& s, const Buffers& t,
                              Buffers& x) {
  net::RingChannel& channel = r.channel;
  const size_t total = r.total;
  if (r.me == r.b) {
    // Round 2: B -> A  x_L ^ s ^ p.
    r.Gather(r.lost, x.out);
    x.mask.resize(total);
    for (size_t k = 0; k < total; ++k) x.mask[k] = x.out[k] ^ s.mask[k] ^ t.in[k];
    return channel.SendToPrev(x.mask);
  }
  x.in.resize(total);  // x_L ^ s ^ p from B
  if (absl::Status st = channel.RecvFromNext(absl::MakeSpan(x.in)); !st.ok()) return st;
  return SendToLost(r, t, x);
}

// On the lost party: each live pair's metadata (into out) and, for an
// aes*-cts key, its layout (into r.live, its material's bytes into r.total)
// from A's metadata message, checked against the digest the survivors'
// views agreed on. A mismatch is this party's own failure (`local`: it
// runs on in step and refuses in the check). An error returned: the
// message cannot size the share message that follows (a truncated or
// unusable layout), and the rebuild stops here on this party.
absl::Status ReadRebuiltMeta(Rebuild& r, const std::vector<uint8_t>& msg,
                             std::vector<RefreshOutcome>& out, absl::Status& local) {
  size_t pos = 0;
  for (size_t i = 0; i < r.live.size(); ++i) {
    RebuildPair& l = r.live[i];
    const bool cts = IsCts(l.cipher);
    std::string m;
    bool whole = msg.size() - pos >= 8;
    if (whole) {
      const uint64_t n = GetU64(&msg[pos]);
      pos += 8;
      whole = msg.size() - pos >= n;
      if (whole) {
        m.assign(reinterpret_cast<const char*>(&msg[pos]), n);
        pos += n;
      }
    }
    std::optional<CtsLayout> layout = CtsLayout{};
    if (whole && cts) layout = DecodeLayout(msg, pos);
    if (!whole || !layout) {
      const char* why = whole ? "rebuild: survivor A sent an unusable aes*-cts layout"
                              : "rebuild: the survivors' metadata is truncated";
      // The pairs from here on are not located in the message: only
      // ctr-mpc pairs, whose sizes the cipher gives, leave it in step.
      for (size_t k = i; k < r.live.size(); ++k)
        if (IsCts(r.live[k].cipher)) return absl::DataLossError(why);
      if (local.ok()) local = absl::DataLossError(why);
      return absl::OkStatus();
    }
    std::array<uint8_t, 32> md;
    if (absl::Status st = MetaDigest(cts, m, *layout, md); !st.ok()) return st;
    if (std::memcmp(md.data(), l.meta_digest, 32) != 0 && local.ok())
      local = absl::DataLossError(
          "rebuild: the metadata survivor A sent does not match the agreed views");
    r.total += MaterialBytes(*layout);
    l.layout = *std::move(layout);
    out[l.j].public_meta = std::move(m);
  }
  return absl::OkStatus();
}

// Round 3 on the lost party: A's metadata message (ReadRebuiltMeta), then
// x_{L+1} ^ t and x_L ^ s ^ p into x.mask.
absl::Status ReceiveFromA(Rebuild& r, Buffers& x, std::vector<RefreshOutcome>& out,
                          absl::Status& local) {
  net::RingChannel& channel = r.channel;
  uint8_t len[8];
  if (absl::Status st = channel.RecvFromNext(absl::MakeSpan(len)); !st.ok()) return st;
  const uint64_t n = GetU64(len);
  uint64_t cts_pairs = 0;
  for (const RebuildPair& l : r.live) cts_pairs += IsCts(l.cipher) ? 1 : 0;
  if (n > 8 * r.live.size() + cts_pairs * (1 + kMaxCtsSlots * kCtsSlotBytes) +
              (uint64_t{1} << 24))
    return absl::DataLossError("rebuild: the survivors' metadata is too large");
  std::vector<uint8_t> meta_msg(n);
  if (absl::Status st = channel.RecvFromNext(absl::MakeSpan(meta_msg)); !st.ok()) return st;
  if (absl::Status st = ReadRebuiltMeta(r, meta_msg, out, local); !st.ok()) return st;
  x.mask.resize(2 * r.total);
  return channel.RecvFromNext(absl::MakeSpan(x.mask));
}

// New views into views.out / views.in (component 0 and 1). Survivor A:
// (x_{L+1} ^ t, x_{L+2} ^ s ^ t); B: (x_{L+2} ^ s ^ t, x_L ^ s); L: (x_L ^
// s, x_{L+1} ^ t) = (msg2 ^ p, msg1).
void NewRebuildViews(const Rebuild& r, const Buffers& s, const Buffers& t, Buffers& x,
                     Buffers& views) {
  const size_t total = r.total;
  std::vector<uint8_t> c0(total), c1(total);
  if (r.me == r.a) {
    r.Gather(r.b, x.in);  // x_{L+2}
    for (size_t k = 0; k < total; ++k) {
      c0[k] = x.out[k] ^ t.mask[k];
      c1[k] = x.in[k] ^ s.mask[k] ^ t.mask[k];
    }
  } else if (r.me == r.b) {
    r.Gather(r.b, x.in);  // x_{L+2}
    for (size_t k = 0; k < total; ++k) {
      c0[k] = x.in[k] ^ s.mask[k] ^ t.mask[k];
      c1[k] = x.out[k] ^ s.mask[k];
    }
  } else {
    for (size_t k = 0; k < total; ++k) {
      c0[k] = x.mask[total + k] ^ t.in[k];
      c1[k] = x.mask[k];
    }
  }
  views.out.swap(c0);  // views wipes c0, c1 on the way out
  views.in.swap(c1);
}

// The rebuild of party `lost` (refresh.h) for the pairs that go ahead.
// `deviated`: a forwarded agreement message failed its tag on this party,
// whose verdict in the check then refuses, so neither honest party keeps
// the new sharing.
absl::StatusOr<std::vector<RefreshOutcome>> RebuildExchange(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const std::vector<Plan>& plan, int lost,
    const std::vector<uint8_t>& survivor_views, bool deviated) {
  const int me = channel.party();
  Rebuild r{channel, plan, me, lost, (lost + 1) % 3, (lost + 2) % 3, {}, 0};
  std::vector<RefreshOutcome> out(items.size());
  if (absl::Status st = CollectRebuildPairs(r, survivor_views, out); !st.ok()) return st;
  if (r.live.empty()) return out;

  Seed sigma, pi;
  if (absl::Status st = ShareRebuildSeeds(r, sigma, pi); !st.ok()) return st;
  Buffers s, t;  // masks (survivors); t.in: the pad p (B and L)
  if (me != lost) {
    if (absl::Status st = Expand(sigma.b, 1, s.mask, r.total); !st.ok()) return st;
    if (absl::Status st = Expand(sigma.b, 2, t.mask, r.total); !st.ok()) return st;
  }
  if (me == r.b)
    if (absl::Status st = Expand(pi.b, 3, t.in, r.total); !st.ok()) return st;

  Buffers x;  // x.out / x.in: shares of the survivors; x.mask: messages
  absl::Status local;  // this party's own failure, reported after the check
  if (me == lost) {
    if (absl::Status st = ReceiveFromA(r, x, out, local); !st.ok()) return st;
    // The pad's length is known once the layouts are.
    if (absl::Status st = Expand(pi.b, 3, t.in, r.total); !st.ok()) return st;
  } else if (absl::Status st = SendMaskedShares(r, s, t, x); !st.ok()) {
    return st;
  }
  Buffers views;
  NewRebuildViews(r, s, t, x, views);

  size_t pos = 0;
  for (const RebuildPair& l : r.live) {
    auto ks = std::make_shared<KeyShares>();
    ks->party = me;
    ks->cipher = l.cipher;
    if (absl::Status st = NewDealId(batch_id, seq, items[l.j], l.deal_id, ks->deal_id);
        !st.ok())
      return st;
    std::memcpy(ks->origin_deal_id.data(), l.origin, 16);
    TakeComponents(views, RoundKeyBytes(l.cipher), kHPowerBytes, l.layout, pos, *ks);
    out[l.j].shares = std::move(ks);
  }
  // The new views' copies checked before anyone reports them (refresh.h;
  // a rebuild has no old view on every party, so no change check).
  const NewSharing check{views.out, views.in, {}, {}, local.ok() && !deviated};
  absl::Status st = CheckNewSharing(channel, CheckContext(batch_id, seq, lost), check);
  if (!local.ok()) return local;
  if (!st.ok()) return st;
  return out;
}

// This party's agreement header of a refresh: the digests of the inputs and
// of its views of the pairs.
absl::Status RefreshHeader(absl::Span<const uint8_t> batch_id, uint64_t seq,
                           absl::Span<const RefreshItem> items, int rebuild_party,
                           const std::vector<Plan>& plan, AgreementHeader& mine) {
  static constexpr char kTag[] = "kmpc-refresh-v1";
  Digest inputs, views;
  inputs.Update(kTag, sizeof kTag);
  inputs.Update(batch_id.data(), batch_id.size());
  inputs.U64(seq);
  inputs.U64(items.size());
  inputs.U64(static_cast<uint64_t>(rebuild_party + 1));
  for (const RefreshItem& it : items) {
    inputs.Str(it.old_key_id);
    inputs.Str(it.new_key_id);
  }
  for (const Plan& w : plan) views.Update(w.view.data(), kViewBytes);
  if (absl::Status st = inputs.Final(mine.inputs); !st.ok()) return st;
  return views.Final(mine.keys);
}

// The public state of one refresh's agreement: the refresh's PRSS (the
// forwarding tags' keys) and whether a forwarded message failed its tag
// (agreement.h ForwardedOrMine), which fails the refresh as an integrity
// failure once it has run in step (RefreshShares).
struct Agreement {
  net::RingChannel& channel;
  protocol::Prss& prss;
  int rebuild_party;
  bool deviated = false;
};

// Same pairs, different views (or a rebuild): exchange the views, each
// party's tagged for the party that receives it forwarded (as the
// headers), and fail the same pairs on all three parties. On the rebuilt
// party, survivor_views gets the survivors' views of every pair (cipher,
// dealing id and metadata digest of what it receives).
absl::Status ExchangeViews(Agreement& a, std::vector<Plan>& plan,
                           std::vector<uint8_t>& survivor_views) {
  net::RingChannel& channel = a.channel;
  const bool rebuild = a.rebuild_party != kNoRebuild;
  const int me = channel.party();
  const size_t n = kViewBytes * plan.size();
  std::vector<uint8_t> vmine(n + kForwardTagSize), vnext(n + kForwardTagSize),
      vnext2(n + kForwardTagSize);
  for (size_t j = 0; j < plan.size(); ++j)
    std::memcpy(&vmine[kViewBytes * j], plan[j].view.data(), kViewBytes);
  const ForwardTagKeys keys(a.prss);
  ForwardTag(keys.k1, absl::MakeConstSpan(vmine.data(), n), vmine.data() + n);
  if (absl::Status st = channel.Exchange(vmine, absl::MakeSpan(vnext)); !st.ok())
    return st;
  if (absl::Status st = channel.Exchange(vnext, absl::MakeSpan(vnext2)); !st.ok())
    return st;
  if (!ForwardedOrMine(keys.k0, absl::MakeSpan(vnext2), vmine)) a.deviated = true;
  for (size_t j = 0; j < plan.size(); ++j) {
    std::array<const uint8_t*, 3> v;
    v[me] = &vmine[kViewBytes * j];
    v[(me + 1) % 3] = &vnext[kViewBytes * j];
    v[(me + 2) % 3] = &vnext2[kViewBytes * j];
    if (rebuild) DecideRebuild(plan[j], v, a.rebuild_party);
    else Decide(plan[j], v);
  }
  if (rebuild && me == a.rebuild_party) {
    vnext.resize(n);  // the views without their tag
    survivor_views = std::move(vnext);
  }
  return absl::OkStatus();
}

// Agreement (the engine's two rounds, agreement.h, without counters; what
// a party forwards carries its originator's tag, ForwardTag), then every
// pair's outcome decided alike on the three parties.
absl::Status AgreeOnRefresh(Agreement& a, absl::Span<const uint8_t> batch_id, uint64_t seq,
                            absl::Span<const RefreshItem> items, std::vector<Plan>& plan,
                            std::vector<uint8_t>& survivor_views) {
  const int rebuild_party = a.rebuild_party;
  AgreementHeader mine;
  if (absl::Status st = RefreshHeader(batch_id, seq, items, rebuild_party, plan, mine);
      !st.ok())
    return st;
  constexpr size_t kMsg = AgreementHeader::kSize + kForwardTagSize;
  uint8_t raw[kMsg], raw_next[kMsg], raw_next2[kMsg];
  mine.Encode(absl::MakeSpan(raw, AgreementHeader::kSize));
  {
    const ForwardTagKeys keys(a.prss);
    ForwardTag(keys.k1, absl::MakeConstSpan(raw, AgreementHeader::kSize),
               raw + AgreementHeader::kSize);
    if (absl::Status st = a.channel.Exchange(raw, absl::MakeSpan(raw_next)); !st.ok())
      return st;
    if (absl::Status st = a.channel.Exchange(raw_next, absl::MakeSpan(raw_next2)); !st.ok())
      return st;
    if (!ForwardedOrMine(keys.k0, absl::MakeSpan(raw_next2), raw)) a.deviated = true;
  }
  auto next = AgreementHeader::Decode(absl::MakeConstSpan(raw_next, AgreementHeader::kSize));
  if (!next.ok()) return next.status();
  auto next2 = AgreementHeader::Decode(absl::MakeConstSpan(raw_next2, AgreementHeader::kSize));
  if (!next2.ok()) return next2.status();
  if (!mine.SameInputs(*next) || !mine.SameInputs(*next2))
    return absl::AbortedError(
        "refresh refused: the MPC servers received different refresh requests");
  // A rebuild always exchanges the views: the rebuilt party learns the
  // survivors' views.
  if (rebuild_party != kNoRebuild || !mine.SameKeys(*next) || !mine.SameKeys(*next2))
    return ExchangeViews(a, plan, survivor_views);
  for (Plan& w : plan) Decide(w, {w.view.data(), w.view.data(), w.view.data()});
  return absl::OkStatus();
}

// The refresh proper (no rebuild) of the pairs that go ahead: one
// zero-sharing round. `deviated` as for RebuildExchange.
absl::StatusOr<std::vector<RefreshOutcome>> RefreshExchange(
    net::RingChannel& channel, protocol::Prss& prss, absl::Span<const uint8_t> batch_id,
    uint64_t seq, absl::Span<const RefreshItem> items, const std::vector<Plan>& plan,
    bool deviated) {
  const int me = channel.party();
  std::vector<RefreshOutcome> out(items.size());
  size_t total = 0;
  for (size_t j = 0; j < plan.size(); ++j) {
    out[j].status = plan[j].status;
    out[j].detail = plan[j].detail;
    if (plan[j].live()) total += ComponentBytes(*plan[j].key);
  }
  if (total == 0) return out;  // nothing goes ahead, on all three parties

  Buffers buf;
  buf.out.resize(total);
  buf.in.resize(total);
  buf.mask.resize(total);
  prss.ZeroShare(buf.mask.data(), total);
  size_t pos = 0;
  for (const Plan& w : plan) {
    if (!w.live()) continue;
    for (const auto* comp : Components(*w.key, 0)) {
      for (size_t k = 0; k < comp->size(); ++k)
        buf.out[pos + k] = (*comp)[k] ^ buf.mask[pos + k];
      pos += comp->size();
    }
  }
  if (absl::Status st = channel.Exchange(buf.out, absl::MakeSpan(buf.in)); !st.ok())
    return st;
  pos = 0;
  for (size_t j = 0; j < plan.size(); ++j) {
    const Plan& w = plan[j];
    if (!w.live()) continue;
    auto ks = std::make_shared<KeyShares>();
    ks->party = me;
    ks->cipher = w.key->cipher;
    if (absl::Status st =
            NewDealId(batch_id, seq, items[j], w.key->deal_id.data(), ks->deal_id);
        !st.ok())
      return st;
    ks->origin_deal_id = w.key->Origin();
    ks->kind = w.key->kind;  // a copy is the same kind of key (the record's)
    TakeComponents(buf, w.key->round_keys[0].size(), w.key->h_powers[0].size(),
                   LayoutOf(*w.key), pos, *ks);
    out[j].shares = std::move(ks);
  }
  // The new sharing checked before anyone reports it (refresh.h): copies,
  // and each component's change (component 0's is the mask; component 1's
  // is new ^ old) a sharing of zero.
  Buffers delta;  // delta.out: component 1's change
  delta.out.reserve(total);
  for (const Plan& w : plan)
    if (w.live())
      for (const auto* comp : Components(*w.key, 1))
        delta.out.insert(delta.out.end(), comp->begin(), comp->end());
  for (size_t k = 0; k < total; ++k) delta.out[k] ^= buf.in[k];
  const NewSharing check{buf.out, buf.in, buf.mask, delta.out, !deviated};
  if (absl::Status st =
          CheckNewSharing(channel, CheckContext(batch_id, seq, kNoRebuild), check);
      !st.ok())
    return st;
  return out;
}

}  // namespace

absl::StatusOr<std::vector<RefreshOutcome>> RefreshShares(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const RefreshLookup& lookup,
    int rebuild_party) {
  if (items.size() > kMaxRefreshPairs)
    return absl::InvalidArgumentError(absl::StrCat(
        "a refresh batch holds at most ", kMaxRefreshPairs, " pairs"));
  if (rebuild_party != kNoRebuild && (rebuild_party < 0 || rebuild_party > 2))
    return absl::InvalidArgumentError("the party to rebuild must be 0, 1 or 2");
  const int me = channel.party();
  std::vector<Plan> plan(items.size());
  CheckInputs(items, plan);
  for (size_t j = 0; j < items.size(); ++j)
    if (plan[j].live())
      if (absl::Status st = LookUp(me, items[j], lookup, plan[j]); !st.ok()) return st;

  // Fresh PRSS keys for this refresh only (the forwarding tags' keys, then
  // the masks): the masks never depend on keys an earlier (possibly since
  // evicted) intruder saw; they are wiped when `prss` goes.
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  Agreement a{channel, *prss, rebuild_party};
  std::vector<uint8_t> survivor_views;  // on the rebuilt party only
  absl::StatusOr<std::vector<RefreshOutcome>> out =
      [&]() -> absl::StatusOr<std::vector<RefreshOutcome>> {
    if (absl::Status st = AgreeOnRefresh(a, batch_id, seq, items, plan, survivor_views);
        !st.ok())
      return st;
    if (rebuild_party != kNoRebuild)
      return RebuildExchange(channel, batch_id, seq, items, plan, rebuild_party,
                             survivor_views, a.deviated);
    return RefreshExchange(channel, *prss, batch_id, seq, items, plan, a.deviated);
  }();
  // A forwarded message failed its tag: whatever came after, the refresh
  // fails here (no new view is stored; the old ones stay as they are).
  if (a.deviated) return protocol::IntegrityFailure();
  return out;
}

}  // namespace kmpc::engine
