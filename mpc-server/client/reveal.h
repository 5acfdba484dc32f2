// Reveal to a client of the cluster (architecture.md, "Reveal to the KDC";
// Araki et al., CCS 2016, section 2.2): party p sends its two replicated
// shares (s_p, s_{p+1}) of a value v = s_0 ^ s_1 ^ s_2. Every share thus
// arrives twice, from two different servers; the copies must agree before
// the value is used, so one server alone cannot change what the client
// learns without being noticed.
#ifndef KMPC_CLIENT_REVEAL_H_
#define KMPC_CLIENT_REVEAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kmpc::client {

inline constexpr int kParties = 3;

// How to name party p in an error ("MPC party 1 (127.0.0.1:7001)").
using PartyNamer = std::function<std::string(int party)>;
std::string DefaultPartyName(int party);

// One server's two shares of a value, s_p then s_{p+1} for party p: slices
// of the three responses' flat share buffers (kmpc.proto, "Shares travel
// flat"); the views must outlive the call that reads them.
struct ShareView {
  absl::string_view first, second;
};

// Checks the three servers' share pairs of one value of `out.size()` bytes
// and writes v = s_0 ^ s_1 ^ s_2 to `out`. On failure `out` is wiped and
// the status (DATA_LOSS) says which share had the wrong length or which
// share's two copies disagree, and names the party common to two failed
// checks (the one that lied) when there is one. `what` names the value in
// the message ("keystream of job 3"). No share bytes appear in messages.
absl::Status Reveal(const std::array<ShareView, kParties>& pairs,
                    absl::Span<uint8_t> out, absl::string_view what,
                    const PartyNamer& name = DefaultPartyName);

// Randomness for dealing the messages of one request with one call to the
// generator (RAND_bytes has a fixed cost per call, paid per message
// otherwise): Draw(total) draws 2 * total bytes, and each message of n
// bytes takes its own 2n-byte slice (Take) for DealFlat below, so no two
// messages share a byte of it. Wiped when it goes (OPENSSL_cleanse).
class DealRandom {
 public:
  DealRandom() = default;
  DealRandom(const DealRandom&) = delete;
  DealRandom& operator=(const DealRandom&) = delete;
  ~DealRandom();
  // INTERNAL if the random generator fails.
  absl::Status Draw(size_t total_message_bytes);
  // The next 2n bytes; empty if fewer are left (DealFlat then refuses).
  absl::Span<const uint8_t> Take(size_t n);

 private:
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
};

// Deals a secret message to the three servers: s_0 || s_1 = `random`
// (2 * data.size() uniform bytes from DealRandom::Take, used for this
// message alone), s_2 = data ^ s_0 ^ s_1, and appends party p's two shares
// (s_p then s_{p+1}) to the flat buffer *flat[p] (kmpc.proto
// RunRequest.data_shares, SignRequest.data_shares). Any two shares are
// uniform and independent of `data`, so no one server learns anything of
// it; fresh for every message: never deal the same shares to two jobs.
// INVALID_ARGUMENT (nothing appended) if `random` is not 2 * data.size()
// bytes. The caller wipes the buffers after sending them.
absl::Status DealFlat(absl::Span<const uint8_t> data,
                      absl::Span<const uint8_t> random,
                      const std::array<std::string*, kParties>& flat);

// The additive reveal of a ring-free request (kmpc.proto SignResult):
// out = t_0 ^ t_1 ^ t_2 for three 16-byte values, one from each server.
// No copy to compare: one server can make the result wrong, never learn
// more or bias it by a secret-dependent amount. DATA_LOSS (out wiped) for
// a value of the wrong length, naming the party.
absl::Status CombineAdditive(const std::array<const std::string*, kParties>& t,
                             absl::Span<uint8_t> out, absl::string_view what,
                             const PartyNamer& name = DefaultPartyName);
absl::Status CombineAdditive(const std::array<absl::string_view, kParties>& t,
                             absl::Span<uint8_t> out, absl::string_view what,
                             const PartyNamer& name = DefaultPartyName);

}  // namespace kmpc::client

#endif  // KMPC_CLIENT_REVEAL_H_
