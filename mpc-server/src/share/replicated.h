// Replicated 2-of-3 XOR sharing (Araki et al., CCS 2016, section 2.2).
//
// A secret v is split as v = s_0 ^ s_1 ^ s_2; party i (0, 1, 2) holds the
// pair (s_i, s_{i+1}), indices mod 3, called its components 0 and 1. So any
// two parties hold all three shares and any single party holds none of v.
// XOR of two shared values and XOR with a public value are local; AND and
// GF(2^128) multiplication need one message (protocol/).
//
// A public value c is shared as (c, 0, 0): party 0 adds it to component 0,
// party 2 (whose component 1 is s_0) to component 1, party 1 does nothing.
#ifndef KMPC_SHARE_REPLICATED_H_
#define KMPC_SHARE_REPLICATED_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kmpc::share {

inline constexpr int kParties = 3;
inline int NextParty(int i) { return (i + 1) % kParties; }
inline int PrevParty(int i) { return (i + 2) % kParties; }

// Whether party `party` adds a public value to its component `comp`.
inline bool HoldsPublicIn(int party, int comp) {
  return (party == 0 && comp == 0) || (party == 2 && comp == 1);
}

// One party's view of a shared byte string: comp[k] = s_{party+k}.
struct View {
  std::array<std::vector<uint8_t>, 2> comp;
  size_t size() const { return comp[0].size(); }
};

// Fills `out` from the operating system's CSPRNG (OpenSSL RAND_bytes).
absl::Status RandomBytes(absl::Span<uint8_t> out);

// Wipes memory in a way the compiler keeps (explicit_bzero).
void Wipe(void* p, size_t n);
inline void Wipe(std::vector<uint8_t>& v) { Wipe(v.data(), v.size()); }

// The dealer: splits `secret` with fresh randomness into the three views
// (s_0, s_1 random, s_2 = secret ^ s_0 ^ s_1).
absl::StatusOr<std::array<View, 3>> Deal(absl::Span<const uint8_t> secret);

// Recombines three views (tests, the KDC side); fails if a share's two
// copies (party i's comp 1 and party i+1's comp 0) disagree.
absl::StatusOr<std::vector<uint8_t>> Open(const std::array<View, 3>& views);

// Local algebra on a view (byte strings of equal length).
void XorInPlace(View& a, const View& b);
void XorPublic(int party, View& a, absl::Span<const uint8_t> pub);
void Not(int party, View& a);

// Word-level variants used by the bitsliced code.
inline void XorWords(uint64_t* d, const uint64_t* a, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] ^= a[i];
}

}  // namespace kmpc::share

#endif  // KMPC_SHARE_REPLICATED_H_
