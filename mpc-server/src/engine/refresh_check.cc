// The check of a refresh's new sharing (refresh.h, "Checking the new
// sharing"). Party i's messages go to party i-1; what it means for party
// i+1 is forwarded by i-1 and carries a tag under a key of a PRSS set up
// for this check that i and i+1 share and the forwarder lacks (party i's
// component 1 of a fresh random value is party i+1's component 0; prss.h).
#include "engine/refresh_check.h"

#include <openssl/crypto.h>

#include <array>
#include <cstring>

#include "absl/strings/cord.h"
#include "engine/agreement.h"
#include "protocol/prss.h"
#include "protocol/verify.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

constexpr size_t kHash = 32;

// SHA-256(label || key (16 bytes, or none) || u64 |context| || context ||
// party || data...): an unkeyed hash of a value its receiver holds, or,
// keyed, a one-time tag of a fixed-length message (as agreement.h's
// ForwardTag).
class Hash {
 public:
  Hash(const char* label, const uint8_t* key, absl::Span<const uint8_t> context, int party) {
    Add(reinterpret_cast<const uint8_t*>(label), std::strlen(label) + 1);
    if (key != nullptr) Add(key, 16);
    uint8_t n[8];
    for (int k = 0; k < 8; ++k) n[k] = static_cast<uint8_t>(context.size() >> (56 - 8 * k));
    Add(n, 8);
    Add(context.data(), context.size());
    const uint8_t p = static_cast<uint8_t>(party);
    Add(&p, 1);
  }

  void Add(const uint8_t* p, size_t n) {
    if (n > 0) sha_.Update(absl::MakeConstSpan(p, n));
  }
  void Add(absl::Span<const uint8_t> s) { Add(s.data(), s.size()); }
  // a ^ b (same size), through a small buffer wiped after use.
  void AddXor(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
    uint8_t buf[256];
    for (size_t pos = 0; pos < a.size(); pos += sizeof buf) {
      const size_t n = std::min(sizeof buf, a.size() - pos);
      for (size_t k = 0; k < n; ++k) buf[k] = a[pos + k] ^ b[pos + k];
      Add(buf, n);
    }
    share::Wipe(buf, sizeof buf);
  }
  bool Final(uint8_t out[kHash]) {
    std::array<uint8_t, kHash> d{};
    const bool ok = sha_.Final(d).ok();
    if (ok) std::memcpy(out, d.data(), kHash);
    return ok;
  }

 private:
  protocol::Sha256 sha_;
};

constexpr char kCopy[] = "kmpc-refresh-check-copy-v1";
constexpr char kDelta[] = "kmpc-refresh-check-delta-v1";
constexpr char kFwd[] = "kmpc-refresh-check-forward-v1";
constexpr char kVerdict[] = "kmpc-refresh-check-verdict-v1";
constexpr uint8_t kAccept = 1;

// Two tag key pairs (agreement.h ForwardTagKeys: wiped when they go), drawn
// in this order: the compare round's, then the verdict round's.
struct Keys {
  explicit Keys(protocol::Prss& prss) : c(prss), v(prss) {}
  ForwardTagKeys c, v;
};

// The forwarded compare message of party `party` (its component 1 and its
// component 0's change), or what this party expects it to be: new0 and
// delta0 ^ delta1 (equal to party i+2's when the sharing is right).
bool CompareTag(const uint8_t key[16], absl::Span<const uint8_t> context, int party,
                absl::Span<const uint8_t> comp, absl::Span<const uint8_t> da,
                absl::Span<const uint8_t> db, uint8_t out[kHash]) {
  Hash h(kFwd, key, context, party);
  h.Add(comp);
  if (db.empty()) h.Add(da);
  else h.AddXor(da, db);
  return h.Final(out);
}

absl::Status Refused(const char* why) {
  absl::Status bad = absl::DataLossError(
      std::string("MPC integrity check of the refreshed shares failed (") + why +
      "): a server deviated from the protocol; no new key stored, the old key id is "
      "unchanged");
  bad.SetPayload(protocol::kIntegrityPayload, absl::Cord("1"));
  return bad;
}

// Rounds 2 and 3 (the compare rounds): whether this party's copies and its
// missing component's change agree with both other holders'.
absl::StatusOr<bool> Compare(net::RingChannel& ch, absl::Span<const uint8_t> context,
                             const NewSharing& m, const Keys& keys) {
  const int me = ch.party(), next = (me + 1) % 3, next2 = (me + 2) % 3;
  const bool refresh = !m.delta0.empty();
  std::array<uint8_t, 3 * kHash> out{}, in{};
  bool ok = true;
  {
    Hash d1(kCopy, nullptr, context, me);
    d1.Add(m.new0);
    ok = d1.Final(out.data()) && ok;
    if (refresh) {
      Hash d2(kDelta, nullptr, context, me);
      d2.Add(m.delta1);
      ok = d2.Final(out.data() + kHash) && ok;
    }
    ok = CompareTag(keys.c.k1, context, me, m.new1, m.delta0, {}, out.data() + 2 * kHash) && ok;
  }
  if (!ok) return absl::InternalError("SHA-256 failed");
  if (absl::Status st = ch.Exchange(out, absl::MakeSpan(in)); !st.ok()) return st;
  std::array<uint8_t, kHash> fwd{}, want{};
  if (absl::Status st = ch.Exchange(absl::MakeConstSpan(in.data() + 2 * kHash, kHash),
                                    absl::MakeSpan(fwd));
      !st.ok())
    return st;
  bool same = true;
  Hash d1(kCopy, nullptr, context, next);  // party i+1's component 0 is my 1
  d1.Add(m.new1);
  if (!d1.Final(want.data())) return absl::InternalError("SHA-256 failed");
  same = CRYPTO_memcmp(want.data(), in.data(), kHash) == 0 && same;
  if (refresh) {  // party i+1's component 1 changed by delta0 ^ delta1
    Hash d2(kDelta, nullptr, context, next);
    d2.AddXor(m.delta0, m.delta1);
    if (!d2.Final(want.data())) return absl::InternalError("SHA-256 failed");
    same = CRYPTO_memcmp(want.data(), in.data() + kHash, kHash) == 0 && same;
  }
  if (!CompareTag(keys.c.k0, context, next2, m.new0, m.delta0, m.delta1, want.data()))
    return absl::InternalError("SHA-256 failed");
  same = CRYPTO_memcmp(want.data(), fwd.data(), kHash) == 0 && same;
  return same;
}

// Rounds 4 and 5: every party's verdict to both others (tagged for the
// party it reaches forwarded). True if all three accepted.
absl::StatusOr<bool> Verdicts(net::RingChannel& ch, absl::Span<const uint8_t> context,
                              bool mine, const Keys& keys) {
  const int me = ch.party();
  std::array<uint8_t, 1 + kHash> out{}, in{}, fwd{}, want{};
  out[0] = mine ? kAccept : 0;
  Hash t(kVerdict, keys.v.k1, context, me);
  t.Add(out.data(), 1);
  if (!t.Final(out.data() + 1)) return absl::InternalError("SHA-256 failed");
  if (absl::Status st = ch.Exchange(out, absl::MakeSpan(in)); !st.ok()) return st;
  if (absl::Status st = ch.Exchange(in, absl::MakeSpan(fwd)); !st.ok()) return st;
  want[0] = kAccept;  // party i+2's, forwarded by i+1
  Hash c(kVerdict, keys.v.k0, context, (me + 2) % 3);
  c.Add(want.data(), 1);
  if (!c.Final(want.data() + 1)) return absl::InternalError("SHA-256 failed");
  return mine && in[0] == kAccept && CRYPTO_memcmp(want.data(), fwd.data(), want.size()) == 0;
}

}  // namespace

absl::Status CheckNewSharing(net::RingChannel& channel, absl::Span<const uint8_t> context,
                             const NewSharing& mine) {
  if (mine.new0.size() != mine.new1.size() || mine.delta0.size() != mine.delta1.size() ||
      (!mine.delta0.empty() && mine.delta0.size() != mine.new0.size()))
    return absl::InternalError("refresh check: component buffers of different sizes");
  // Round 1: tag keys drawn afresh, after every share of the run is fixed.
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  const Keys keys(*prss);
  absl::StatusOr<bool> same = Compare(channel, context, mine, keys);
  if (!same.ok()) return same.status();
  absl::StatusOr<bool> all = Verdicts(channel, context, *same && mine.local_ok, keys);
  if (!all.ok()) return all.status();
  if (!mine.local_ok) return Refused("this server's own part of the run failed");
  if (!*same) return Refused("the servers' copies of the new shares differ");
  if (!*all) return Refused("another server refused the new shares");
  return absl::OkStatus();
}

}  // namespace kmpc::engine
