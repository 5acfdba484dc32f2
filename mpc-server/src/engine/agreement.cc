#include "engine/agreement.h"

#include <openssl/crypto.h>

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "protocol/prss.h"
#include "protocol/verify.h"
#include "share/replicated.h"

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

void ForwardTag(const uint8_t key[16], absl::Span<const uint8_t> msg,
                uint8_t tag[kForwardTagSize]) {
  static constexpr char kDomain[] = "kmpc-forward-tag-v1";
  protocol::Sha256 h;
  h.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(kDomain), sizeof kDomain));
  h.Update(absl::MakeConstSpan(key, 16));
  h.Update(msg);
  std::array<uint8_t, 32> d{};
  // A failed digest leaves d zero: the tags then never verify, and every
  // forwarded message counts as a deviation (fails closed).
  if (h.Final(d).ok()) std::memcpy(tag, d.data(), kForwardTagSize);
  else std::memset(tag, 0, kForwardTagSize);
}

bool ForwardTagOk(const uint8_t key[16], absl::Span<const uint8_t> msg,
                  const uint8_t tag[kForwardTagSize]) {
  uint8_t want[kForwardTagSize];
  ForwardTag(key, msg, want);
  const bool ok = CRYPTO_memcmp(want, tag, kForwardTagSize) == 0;
  share::Wipe(want, sizeof want);
  return ok;
}

ForwardTagKeys::ForwardTagKeys(protocol::Prss& prss) { prss.RandomShares(k0, k1, 16); }

ForwardTagKeys::~ForwardTagKeys() {
  share::Wipe(k0, sizeof k0);
  share::Wipe(k1, sizeof k1);
}

bool ForwardedOrMine(const uint8_t k0[16], absl::Span<uint8_t> fwd,
                     absl::Span<const uint8_t> mine) {
  const size_t n = fwd.size() - kForwardTagSize;
  if (ForwardTagOk(k0, fwd.subspan(0, n), fwd.data() + n)) return true;
  std::memcpy(fwd.data(), mine.data(), n);
  return false;
}

std::string PartyList(const std::vector<int>& parties) {
  std::string s;
  for (size_t k = 0; k < parties.size(); ++k)
    absl::StrAppend(&s, k == 0 ? "" : (k + 1 == parties.size() ? " and " : ", "),
                    parties[k]);
  return s;
}

std::pair<::kmpc::v1::JobStatus, std::string> KeyPresence(
    const std::array<const uint8_t*, 3>& views) {
  std::vector<int> missing, bad;
  for (int p = 0; p < 3; ++p) {
    if (views[p][0] == kViewMissing) missing.push_back(p);
    if (views[p][0] == kViewBad || views[p][0] == kViewNone) bad.push_back(p);
  }
  if (!missing.empty())
    return {::kmpc::v1::JOB_UNKNOWN_KEY,
            missing.size() == 3
                ? std::string("unknown key id")
                : absl::StrCat("unknown key id: no shares on MPC party ",
                               PartyList(missing),
                               " (the key store of the cluster is inconsistent)")};
  if (!bad.empty())
    return {::kmpc::v1::JOB_KEY_INCONSISTENT,
            absl::StrCat("stored key shares are unusable on MPC party ",
                         PartyList(bad))};
  return {::kmpc::v1::JOB_OK, ""};
}

}  // namespace kmpc::engine
