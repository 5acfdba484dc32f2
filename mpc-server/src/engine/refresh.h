// Share refresh: the three parties re-randomise the replicated shares of
// stored keys, so that shares from before and after a refresh never combine
// into a key (proactive secret sharing: Herzberg, Jarecki, Krawczyk, Yung,
// "Proactive Secret Sharing Or: How to Cope With Perpetual Leakage",
// CRYPTO 1995, section 3; here in the 2-of-3 replicated form of Araki,
// Furukawa, Lindell, Nof, Ohara, CCS 2016, section 2.2).
//
// Every shared component v = x_0 ^ x_1 ^ x_2 of a key (its round keys, its
// powers of H, and for an aes*-cts key each entry of its dealt material,
// engine.h KeyShares::cts) is refreshed in one ring round:
//   party i draws alpha_i with alpha_0 ^ alpha_1 ^ alpha_2 = 0 from PRSS
//     keys set up afresh for this refresh (prss.h: alpha_i = F(k_i, id) ^
//     F(k_{i+1}, id), the same zero-sharing the AND gate's resharing uses,
//     Protocol 3.8 of the paper),
//   x_i' = x_i ^ alpha_i; party i sends x_i' to party i-1 (which holds
//     share i as its second component) and receives x_{i+1}' from i+1,
//   its new view is (x_i', x_{i+1}'); x_0' ^ x_1' ^ x_2' = v.
// Why an old view of one party and a new view of another reveal nothing:
// old P_j holds (x_j, x_{j+1}), new P_k (x_k', x_{k+1}') with k != j. Any
// XOR of these that would give v leaves one alpha unmasked, and every
// alpha_m contains F(k_m, id) or F(k_{m+1}, id) under a PRF key held only
// by the two other parties' memory for the length of one refresh (keys are
// drawn per refresh and never stored), so it is pseudorandom to whoever
// holds the two stores. A party corrupted *during* a refresh counts as
// corrupted in both epochs (the standard proactive model).
//
// Ring rounds of one refresh batch (one message to party i-1 and one from
// party i+1 each):
//   1  PRSS key set-up (fresh keys for this refresh only, Prss::Setup);
//   2  agreement: SHA-256 of the public inputs (batch id, sequence number,
//      (old, new) pairs) and of the party's per-pair views (old key present?
//      cipher, dealing id, metadata digest, origin deal id; new id free?), sent and
//      forwarded, as engine.h's agreement: what a party forwards carries
//      its originator's tag under a key of this refresh's PRSS that the
//      forwarder lacks (agreement.h ForwardTag);
//   2  only if the views differ, and in every rebuild: the per-pair views
//      (tagged the same way), so that every party fails the same pairs;
//   1  the masked shares of every pair that goes ahead (none in a rebuild,
//      whose rounds are below).
// The metadata digest covers the pair's public metadata (RefreshSource::
// public_meta) and, for an aes*-cts key, the public layout of its dealt
// material: kind, usage and length of each entry in the record's order.
// Equal views therefore mean equal layouts on the parties compared (all
// three in a refresh, the two survivors in a rebuild); a pair whose
// layouts differ fails on all three as JOB_KEY_INCONSISTENT, and every new
// view keeps the layout (same entries, same order).
// A forwarded header or view list whose tag fails: the receiver puts its
// own in its place (with the honest parties' inputs and stores equal,
// what the originator sent), runs on in step, and fails the whole refresh
// as an integrity failure (protocol::IsIntegrityFailure) with no new view
// returned; the caller stores nothing, the old views stay.
//
// Rebuilding a lost party L (rebuild_party = L): L runs with an empty store
// (a new server) and the two survivors A = L+1 and B = L+2 give it a view of
// every key without any key being reconstructed anywhere, re-randomising
// their own views at the same time. With v = x_L ^ x_{L+1} ^ x_{L+2}, A
// holding (x_{L+1}, x_{L+2}) and B holding (x_{L+2}, x_L), and s, t fresh
// uniform masks known to A and B only:
//   x_L' = x_L ^ s,  x_{L+1}' = x_{L+1} ^ t,  x_{L+2}' = x_{L+2} ^ s ^ t.
// Ring links (party i sends to i-1): B -> A, A -> L, L -> B. Messages:
//   B -> A  sigma (32 bytes): s and t are AES-256-CTR(sigma) streams;
//   L -> B  pi (32 bytes): p = AES-256-CTR(pi), a pad B uses to send x_L'
//           to L through A;
//   B -> A  x_L ^ s ^ p (A lacks p: it learns nothing of x_L);
//   A -> L  the public metadata of every pair (with an aes*-cts key's
//           layout), x_{L+1} ^ t, x_L ^ s ^ p.
// L has no store: it takes each pair's cipher, dealing id and origin from
// A's view (which B's matched) and its metadata and layout from A's message, which
// must hash to the views' metadata digest; otherwise L refuses in the
// check (a survivor cannot make L store another layout or metadata than
// the one both survivors' views carry). The layout sizes the share
// messages, so a layout L cannot read at all ends the run on L at once.
// New views: L (x_L', x_{L+1}'), A (x_{L+1}', x_{L+2}'), B (x_{L+2}', x_L').
// Why nothing combines into v: the lost party's old view (x_L, x_{L+1})
// with A's new view yields t but not s (nor x_{L+2} ^ s ^ t's mask); with
// B's new view it yields s but not t; L's new view with a survivor's old
// view misses the other mask. s and t are never stored and never leave A
// and B; p never leaves B and L. This is Herzberg et al.'s share recovery
// (CRYPTO 1995, section 4) in the replicated form: the survivors' shares
// are re-randomised as part of it, so it is also a refresh of every key it
// covers (the old party's store, backups and certificate are worthless
// against the new views).
//
// Checking the new sharing (refresh_check.h), in both security modes (a
// refresh is rare; the check costs five ring rounds of at most 96 bytes
// and a few SHA-256 passes over the key material), after the last message
// that carries shares and before any party returns a new view:
//   1  a PRSS set up for the check alone (its keys drawn after every share
//      of the run is fixed): per party two one-time tag key pairs;
//   2  party i sends party i-1 H(x_i') (its component 0, which i-1 holds as
//      its component 1), in a refresh H(d_{i+1}) (d = new ^ old of a
//      component; i-1 lacks share i+1 of d), and, for party i+1 through
//      i-1, T_i = SHA-256(key shared by i and i+1 || x_{i+1}' || d_i);
//   3  party i-1 forwards T_i to party i+1;
//   each party compares: its component 1 with its successor's hash, its
//   component 0 and (refresh) its missing change d_{i+2} = d_i ^ d_{i+1}
//   with T_{i+2} under the key it shares with party i+2, and (refresh) the
//   same change with its successor's H(d_{i+2});
//   4  every party's verdict (one byte) to party i-1 with a tag for i+1,
//   5  forwarded: a party accepts only if its own comparisons held, its
//      successor's verdict is "accept" and the tagged verdict of party i+2
//      is "accept" with a valid tag.
// Soundness (one deviating party c, honest h1 = c+1, h2 = c+2): h1's direct
// messages come from h2, and what h2 needs from h1 travels through c with
// a tag under a key only h1 and h2 hold (k_{c+2} of the check's PRSS, sent
// by h2 to h1 directly), so each honest party compares the component the
// two honest parties share (x_{c+2}') with the other honest party's copy,
// and (refresh) its missing change with the honest holder's: h1 gets
// d_c from h2 directly, h2 gets d_{c+1} from h1 tagged. An honest party
// accepts only if the honest parties' copies agree and d_{c+1} ^ d_{c+2}
// ^ d_c = 0, i.e. the new sharing, as the honest parties hold it, is the
// old key. What c may do with its own copies only makes its own later
// messages wrong, which the malicious-mode batch check catches like any
// other deviation. Error: a SHA-256 collision (c knows everything it
// would need to collide, so this is SHA-256's collision resistance,
// 2^-128 work) or a forged one-time tag under a 16-byte key c lacks
// (2^-128 per try); far below the 2^-40 of the batch check. A deviation in any message up to round 3 makes both
// honest parties refuse (each decides on honest data alone, and a refusal
// reaches the other honest party either directly or tagged through c);
// in rounds 4 and 5 c can still make one honest party refuse while the
// other accepts a sharing that passed its checks (abort without
// unanimity: the new id is then on some servers only and never used, the
// old id unchanged, kmpc-admin drops the new id).
// Leakage when every party is honest: each hash a party receives is of a
// value it holds itself (x_i' is party i-1's component 1; d_{i+1} = d_i ^
// d_{i+2}, both party i-1's), the forwarder of T_i sees a SHA-256 output
// under a key it lacks, and the verdicts are "accept": nothing new about
// any key, share or mask; no value is opened.
// Limits. In a rebuild the lost party holds no old view, so only the
// copies are checked (every message of the rebuild included): a survivor
// that uses a different old share consistently (the one component only
// it still holds: x_{L+1} on A, x_L on B) moves the key by an error it
// knows, undetected, because nothing outside the survivors commits to the
// old components. Checking that needs a commitment to every component
// kept by the party that lacks it (not done). Such a commitment must be
// hiding, e.g. SHA-256(r_j || x_j) with r_j known only to x_j's two
// holders: the party that lacks x_j holds the other two components, so an
// unsalted SHA-256(x_j) would let it test guesses of the key (x_j = K ^
// its two components), an offline password-guessing oracle for every
// password-derived key. A refresh's change check has no such
// gap: every old component has two holders.
#ifndef KMPC_ENGINE_REFRESH_H_
#define KMPC_ENGINE_REFRESH_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "net/channel.h"

namespace kmpc::engine {

// Most pairs one refresh batch may hold (the service refuses more).
inline constexpr size_t kMaxRefreshPairs = 4096;

struct RefreshItem {
  std::string old_key_id;  // contract::kKeyIdSize bytes
  std::string new_key_id;
};

// This party's facts about one pair, from its store.
struct RefreshSource {
  // Shares of the key under old_key_id: NOT_FOUND when the store has none,
  // another error when they are unusable.
  absl::StatusOr<std::shared_ptr<const KeyShares>> old_key =
      absl::NotFoundError("not looked up");
  // Public metadata the new record copies (kvno, label): the parties
  // compare a digest of it, so all three store the same.
  std::string public_meta;
  // new_key_id is stored (or was, and may not be reused) on this party.
  bool new_id_taken = false;
};

using RefreshLookup = std::function<RefreshSource(const RefreshItem& item)>;

struct RefreshOutcome {
  // The same on all three parties (see kmpc.proto, RefreshResult).
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  // JOB_OK: this party's new view (party, cipher as before, a new dealing
  // id common to the three parties, the old key's origin deal id: a copy
  // shares its original's per-deal bounds, gate_budget.h).
  std::shared_ptr<const KeyShares> shares;
  // JOB_OK in a rebuild, on the rebuilt party only: the pair's public
  // metadata as the survivors hold it (RefreshSource::public_meta), checked
  // against the digests in both survivors' views.
  std::string public_meta;
};

// No party is rebuilt: an ordinary refresh.
inline constexpr int kNoRebuild = -1;

// Runs one refresh batch; all three parties must call it at the same time
// with the same batch_id, seq, items (same order) and rebuild_party (a
// party index, or kNoRebuild: see above). Per-pair failures are
// in the outcomes; a returned error fails the whole batch: ABORTED (the
// parties were given different batches), INVALID_ARGUMENT (too many pairs),
// an integrity failure (a forwarded message failed its tag, above), or a
// channel error; after an integrity failure or a channel error the ring
// must be re-established.
absl::StatusOr<std::vector<RefreshOutcome>> RefreshShares(
    net::RingChannel& channel, absl::Span<const uint8_t> batch_id, uint64_t seq,
    absl::Span<const RefreshItem> items, const RefreshLookup& lookup,
    int rebuild_party = kNoRebuild);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_REFRESH_H_
