#include "client/reveal.h"

#include <openssl/crypto.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace kmpc::client {

std::string DefaultPartyName(int party) {
  return absl::StrCat("MPC party ", party);
}

absl::Status Reveal(const std::array<const kmpc::v1::SharePair*, kParties>& s,
                    absl::Span<uint8_t> out, absl::string_view what,
                    const PartyNamer& name) {
  const size_t len = out.size();
  for (int p = 0; p < kParties; ++p) {
    if (s[p]->first().size() != len || s[p]->second().size() != len) {
      OPENSSL_cleanse(out.data(), len);
      return absl::DataLossError(absl::StrCat(
          name(p), " sent a share of the wrong length for the ", what));
    }
  }
  // Check p: party p's copy of s_{p+1} against party p+1's.
  std::vector<int> bad;
  for (int p = 0; p < kParties; ++p) {
    const int q = (p + 1) % kParties;
    if (CRYPTO_memcmp(s[p]->second().data(), s[q]->first().data(), len) != 0)
      bad.push_back(p);
  }
  if (!bad.empty()) {
    OPENSSL_cleanse(out.data(), len);
    std::string blame;
    if (bad.size() == 2) {
      // Two failed checks share exactly one party: the one that lied.
      const int a = bad[0], b = bad[1];
      const int culprit = (a + 1) % kParties == b ? b : a;
      blame = absl::StrCat("; ", name(culprit),
                           " is the common party of both disagreements");
    }
    const int p = bad[0];
    return absl::DataLossError(absl::StrCat(
        "the two copies of share s_", (p + 1) % kParties, " of the ", what,
        " from ", name(p), " and ", name((p + 1) % kParties), " disagree (",
        bad.size(), " of 3 share checks failed", blame, ")"));
  }
  const std::string& a = s[0]->first();
  const std::string& b = s[1]->first();
  const std::string& c = s[2]->first();
  for (size_t i = 0; i < len; ++i)
    out[i] = static_cast<uint8_t>(a[i] ^ b[i] ^ c[i]);
  return absl::OkStatus();
}

}  // namespace kmpc::client
