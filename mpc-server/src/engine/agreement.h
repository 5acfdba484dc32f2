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
#ifndef KMPC_ENGINE_AGREEMENT_H_
#define KMPC_ENGINE_AGREEMENT_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

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

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_AGREEMENT_H_
