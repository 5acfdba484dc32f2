// The header each party sends in the first agreement round of a batch
// (engine.h): what the three parties compare before computing anything.
//
// Wire format (kSize = 68 bytes, the same on all parties of one version):
//   inputs digest (32) | key-view digest (32) | counters (u32 big-endian)
// `inputs` is SHA-256 over the canonical encoding of the batch's public
// inputs and the engine options that shape the rounds; `keys` is SHA-256
// over the party's view of every job's key (present? cipher, dealing id);
// `counters` is how many fresh ctr0 values the party reveals in the second
// round (at most kMaxBatchBlocks: a receiver sizes its next read by it).
// On the ring the header is followed by a forwarding tag (ForwardTag).
#ifndef KMPC_ENGINE_AGREEMENT_H_
#define KMPC_ENGINE_AGREEMENT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kmpc.pb.h"

namespace kmpc::protocol {
class Prss;
}  // namespace kmpc::protocol

namespace kmpc::engine {

struct AgreementHeader {
  static constexpr size_t kSize = 68;

  std::array<uint8_t, 32> inputs{};
  std::array<uint8_t, 32> keys{};
  uint32_t counters = 0;

  // Writes kSize bytes to `out` (out.size() must be kSize).
  void Encode(absl::Span<uint8_t> out) const;
  // DATA_LOSS for a header of another size or with more counters than a
  // batch may draw (kMaxBatchBlocks).
  static absl::StatusOr<AgreementHeader> Decode(absl::Span<const uint8_t> in);

  bool SameInputs(const AgreementHeader& o) const { return inputs == o.inputs; }
  bool SameKeys(const AgreementHeader& o) const { return keys == o.keys; }
};

// What a party forwards (the header, or the key views, of party i+1 sent
// on to party i-1) carries a tag of its originator under a PRSS key that
// the originator and the final receiver share and the forwarder does not
// hold (party j's component 1 of a fresh random value is party j+1's
// component 0; prss.h): a forwarder that alters what it forwards is
// caught (forgery probability 2^-128 per message) instead of making the
// final receiver decide differently from the originator. Tag: the first
// kForwardTagSize bytes of SHA-256(domain || key || message); the key is
// fresh per message, so this is a one-time MAC of a fixed-length message.
inline constexpr size_t kForwardTagSize = 16;
void ForwardTag(const uint8_t key[16], absl::Span<const uint8_t> msg,
                uint8_t tag[kForwardTagSize]);
// Whether `tag` is msg's under key (constant-time compare).
bool ForwardTagOk(const uint8_t key[16], absl::Span<const uint8_t> msg,
                  const uint8_t tag[kForwardTagSize]);

// The key pair of one tagged forwarding exchange, a fresh PRSS random
// value: k1 (component 1) tags what this party sends for party i+1, which
// receives it forwarded by party i-1; k0 (component 0) checks what party
// i-1 sent, forwarded by party i+1. Wiped when it goes, on every path.
struct ForwardTagKeys {
  explicit ForwardTagKeys(protocol::Prss& prss);
  ~ForwardTagKeys();
  ForwardTagKeys(const ForwardTagKeys&) = delete;
  ForwardTagKeys& operator=(const ForwardTagKeys&) = delete;
  uint8_t k0[16], k1[16];
};

// A forwarded message `fwd` (its body, then the originator's tag in its
// last kForwardTagSize bytes) checked under k0. True if the tag holds;
// otherwise fwd's body is overwritten with the first bytes of `mine` (this
// party's own message of the same exchange: with honest parties' inputs
// equal, what the originator sent) and false is returned, so that the
// caller stays in step with its peers and fails the run as an integrity
// failure once it has run in step.
bool ForwardedOrMine(const uint8_t k0[16], absl::Span<uint8_t> fwd,
                     absl::Span<const uint8_t> mine);

// The first byte of one party's view of a key, compared among the three
// parties (a batch's jobs in keys.cc, a refresh's pairs in
// refresh_agreement.cc).
enum KeyView : uint8_t {
  kViewNone = 0,     // no key needed, or the item already failed alike
  kViewMissing = 1,  // the store has no shares for the key id
  kViewBad = 2,      // shares unusable here (malformed, other party, I/O)
  kViewPresent = 3,
};

// "0", "0 and 2", "0, 1 and 2".
std::string PartyList(const std::vector<int>& parties);

// Whether the key is present on all three parties, from the first byte of
// each party's view: JOB_OK, or the failure and a detail naming the parties
// (public): JOB_UNKNOWN_KEY where shares are missing, JOB_KEY_INCONSISTENT
// where they are unusable. The same on every party (all hold the three
// views).
std::pair<::kmpc::v1::JobStatus, std::string> KeyPresence(
    const std::array<const uint8_t*, 3>& views);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_AGREEMENT_H_
