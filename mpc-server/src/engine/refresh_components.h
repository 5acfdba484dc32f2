// A key's shared components as a refresh or a rebuild (refresh.h) moves
// them: their order on the wire, an aes*-cts key's public layout, the
// exchange's secret buffers, and the public values a run derives (the new
// dealing id, the check's context). Shared by refresh.cc, the pairs'
// agreement (refresh_agreement.h) and the rebuild (rebuild.h).
#ifndef KMPC_ENGINE_REFRESH_COMPONENTS_H_
#define KMPC_ENGINE_REFRESH_COMPONENTS_H_

#include <openssl/evp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/refresh.h"

namespace kmpc::engine::refresh {

// SHA-256 of what is fed to it (OpenSSL EVP); Final fails if any step did.
struct Digest {
  Digest();
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void Update(const void* p, size_t n);
  void U64(uint64_t v);               // 8 bytes big-endian
  void Str(const std::string& s);     // U64(size), then the bytes
  absl::Status Final(std::array<uint8_t, 32>& out);
  EVP_MD_CTX* ctx;
  bool ok;
};

// Component sizes of a key of `cipher` (engine.h, KeyShares).
size_t RoundKeyBytes(Cipher c);
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

CtsLayout LayoutOf(const KeyShares& k);
size_t MaterialBytes(const CtsLayout& l);
// Known kinds, non-empty shares, each (kind, usage) once (as the share
// store's parser requires), within the bounds above.
bool UsableLayout(const CtsLayout& l);
// count (1) | count x (kind (1) | usage (u32 BE) | len (u16 BE)): the share
// store's material header (engine.h KeyShares::Serialize) without shares.
void EncodeLayout(const CtsLayout& l, std::vector<uint8_t>& out);
// The layout encoded at msg[pos..] (advancing pos); nullopt when it is
// truncated or not UsableLayout.
std::optional<CtsLayout> DecodeLayout(const std::vector<uint8_t>& msg, size_t& pos);

// A pair's metadata digest (the view's): SHA-256(public_meta) for a
// ctr-mpc key; for an aes*-cts key SHA-256(tag || u64 |meta| || meta ||
// EncodeLayout(layout)), so that comparing the views compares the layouts.
absl::Status MetaDigest(bool cts, const std::string& meta, const CtsLayout& layout,
                        std::array<uint8_t, 32>& out);

// Dealing id of the refreshed key: public, the same on the three parties,
// new for every refresh (the batch id is fresh per request), so that a
// party holding the shares of another run of the same pair is caught by the
// engine's key-view agreement instead of computing garbage.
absl::Status NewDealId(absl::Span<const uint8_t> batch_id, uint64_t seq,
                       const RefreshItem& item, const uint8_t* old_deal_id,
                       std::array<uint8_t, 16>& out);

// What the check of the new sharing binds its hashes and tags to: this
// run (batch id, sequence number, rebuild party).
std::vector<uint8_t> CheckContext(absl::Span<const uint8_t> batch_id, uint64_t seq,
                                  int rebuild_party);

// Component k (0 or 1) of every shared value of `key` in the order every
// exchange of a refresh or rebuild uses: round keys, powers of H, then
// each aes*-cts material entry's share in the record's order.
std::vector<const std::vector<uint8_t>*> Components(const KeyShares& key, int k);
size_t ComponentBytes(const KeyShares& k);

// Secret buffers of the exchange, wiped on every way out.
struct Buffers {
  std::vector<uint8_t> out, in, mask;
  ~Buffers();
};

// A new view's components from the exchange's buffers: component 0 from
// `b.out`, 1 from `b.in`, at `pos` (round keys, rk bytes, then H powers, hp
// bytes, then the aes*-cts material of `layout`, as Components orders
// them); advances pos.
void TakeComponents(const Buffers& b, size_t rk, size_t hp, const CtsLayout& layout,
                    size_t& pos, KeyShares& ks);

}  // namespace kmpc::engine::refresh

#endif  // KMPC_ENGINE_REFRESH_COMPONENTS_H_
