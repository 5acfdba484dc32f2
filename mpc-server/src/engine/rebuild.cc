// Rebuilding a lost party (rebuild.h, refresh.h).
#include "engine/rebuild.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "engine/refresh_check.h"
#include "engine/refresh_components.h"

namespace kmpc::engine::refresh {
namespace {

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

}  // namespace

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

}  // namespace kmpc::engine::refresh
