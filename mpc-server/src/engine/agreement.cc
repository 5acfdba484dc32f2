#include "engine/agreement.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "contract.h"

namespace kmpc::engine {

void AgreementHeader::Encode(absl::Span<uint8_t> out) const {
  std::memcpy(out.data(), inputs.data(), inputs.size());
  std::memcpy(out.data() + 32, keys.data(), keys.size());
  for (int k = 0; k < 4; ++k)
    out[64 + k] = static_cast<uint8_t>(counters >> (24 - 8 * k));
}

absl::StatusOr<AgreementHeader> AgreementHeader::Decode(
    absl::Span<const uint8_t> in) {
  if (in.size() != kSize)
    return absl::DataLossError(absl::StrCat("agreement header of ", in.size(),
                                            " bytes, want ", kSize));
  AgreementHeader h;
  std::memcpy(h.inputs.data(), in.data(), 32);
  std::memcpy(h.keys.data(), in.data() + 32, 32);
  h.counters = (uint32_t{in[64]} << 24) | (uint32_t{in[65]} << 16) |
               (uint32_t{in[66]} << 8) | uint32_t{in[67]};
  if (h.counters > contract::kMaxBatchBlocks)
    return absl::DataLossError("agreement header out of range");
  return h;
}

}  // namespace kmpc::engine
