// The freshness of an aes*-cts gate in the module: a decrypted
// PA-ENC-TIMESTAMP (usage 1) or FAST encrypted challenge (usage 54, a
// PA-ENC-TS-ENC too: RFC 6113 section 5.4.6) proves its exchange's shapes
// (planner.h, proven shapes) and releases the jobs held back for it only
// if its patimestamp is within the KDC's clock skew (krb5.conf / kdc.conf
// [libdefaults] clockskew, as krb5_check_clockskew uses it) and its
// ciphertext was not verified before under the same key within that skew
// (a replay cache, as MIT keeps for AP-REQs: RFC 4120 section 3.2.3; MIT
// keeps none for encrypted timestamps).
//
// A replayed gate is refused before any Run (GateBook::Admit; one whose
// first copy was still in flight fails when verified, GateBook::Verdict,
// as the cluster being unavailable, never as a wrong password, which
// MIT's lockout would count); a skewed one completes and MIT's own check
// then answers KRB_AP_ERR_SKEW with the KDC's time (the client may retry
// with its clock corrected); neither proves a shape. The servers check
// the skew again on shares (cts.h StaleTimestamp), since they see the
// ciphertext only as shares and cannot keep such a cache.
//
// One cache per module, made by the module and handed to its gate book
// (gate_book.h), which serves all of the module's clusters: a copy of a
// gate verified on one cluster is caught on another too.
#ifndef KMPC_KDC_PLUGIN_FRESHNESS_H_
#define KMPC_KDC_PLUGIN_FRESHNESS_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kmpc::kdc {

// A gate refused as a copy of one verified, or still in flight, within the
// skew: kResourceExhausted (the KDC answers KDC_ERR_SVC_UNAVAILABLE, which
// MIT's lockout does not count and the router does not count toward
// failover) marked with kReplayedPayload, so that the module's metrics
// count it as cause="replayed": replays (an attacker's, or a client's own
// retransmissions) are neither a capacity alarm ("overloaded") nor a
// wrong password ("integrity").
inline constexpr char kReplayedPayload[] = "kmpc.kdc/replayed";
absl::Status ReplayedGateError(absl::string_view why);
bool IsReplayedGate(const absl::Status& st);

// The patimestamp of a DER PA-ENC-TS-ENC (RFC 4120 section 5.2.7.2) as
// MIT and Heimdal encode it: 30 LL A0 11 18 0F YYYYMMDDHHMMSSZ [A1 ...],
// LL the rest's length; nullopt for anything else.
std::optional<absl::Time> PaTimestamp(absl::Span<const uint8_t> pa_enc_ts);

class GateFreshness {
 public:
  // Verified gates remembered within the skew (~100 bytes each). A full
  // cache forgets nothing before its expiry: a new gate is then kFull
  // (refused as the cluster being unavailable), so that no one's flood of
  // fresh gates of their own key can push out another's entry to replay it.
  static constexpr size_t kMaxEntries = size_t{1} << 19;
  enum class Verdict { kFresh, kSkewed, kReplayed, kFull };

  explicit GateFreshness(absl::Duration skew = absl::Seconds(300),
                         size_t max_entries = kMaxEntries)
      : skew_(skew), max_entries_(max_entries) {}
  void set_skew(absl::Duration skew);
  absl::Duration skew() const;

  // The gate under key_id whose ciphertext is `ciphertext` (its job's
  // input) decrypted to `pa_enc_ts` (the confounder removed): kSkewed if
  // its time is unreadable or further than the skew from now, kReplayed if
  // the same key and ciphertext were kFresh within the skew, else kFresh
  // (and remembered until its time + skew), or kFull (not remembered).
  Verdict Check(const std::string& key_id, absl::Span<const uint8_t> ciphertext,
                absl::Span<const uint8_t> pa_enc_ts, absl::Time now);
  // Whether key_id's `ciphertext` was kFresh within the skew: a replay,
  // refused before any Run (GateBook::Admit), so that it spends nothing of
  // the user's release bound on the servers.
  bool Seen(const std::string& key_id, absl::Span<const uint8_t> ciphertext,
            absl::Time now);
  // A gate's copy that reaches the KDC while another copy of it is in a
  // Run (a racing network attacker, a retransmission MIT's lookaside no
  // longer drops) would have its reply computed, released and counted
  // against the user's bound by the servers before its verdict: such a
  // copy is refused before any Run. Claim: nullopt if the same key id and
  // ciphertext are in flight, else the claim's digest, recorded until
  // Unclaim(digest) (the gate's job completed, or its exchange was refused).
  std::optional<std::string> Claim(const std::string& key_id,
                                   absl::Span<const uint8_t> ciphertext);
  void Unclaim(const std::string& digest);
  size_t in_flight() const;
  size_t size() const;
  void Clear();

 private:
  void ExpireLocked(absl::Time now);
  mutable std::mutex mu_;
  absl::Duration skew_;
  const size_t max_entries_;
  // SHA-256(key_id || ciphertext) -> expiry; (expiry, digest), soonest first.
  std::unordered_map<std::string, absl::Time> seen_;
  using Entry = std::pair<absl::Time, std::string>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> expiry_;
  // Digests of gates in flight (Claim).
  std::unordered_set<std::string> in_flight_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_FRESHNESS_H_
