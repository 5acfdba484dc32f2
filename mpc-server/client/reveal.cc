#include "client/reveal.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

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

absl::Status Deal(absl::Span<const uint8_t> data,
                  const std::array<kmpc::v1::SharePair*, kParties>& out) {
  const size_t n = data.size();
  std::array<std::string, kParties> s;
  for (auto& x : s) x.assign(n, '\0');
  auto wipe = [&] {
    for (auto& x : s) OPENSSL_cleanse(x.data(), x.size());
  };
  if (n > 0 && (RAND_bytes(reinterpret_cast<unsigned char*>(s[0].data()),
                           static_cast<int>(n)) != 1 ||
                RAND_bytes(reinterpret_cast<unsigned char*>(s[1].data()),
                           static_cast<int>(n)) != 1)) {
    wipe();
    for (auto* p : out) p->Clear();
    return absl::InternalError("random generator failed while dealing shares");
  }
  for (size_t i = 0; i < n; ++i)
    s[2][i] = static_cast<char>(data[i] ^ static_cast<uint8_t>(s[0][i]) ^
                                static_cast<uint8_t>(s[1][i]));
  for (int p = 0; p < kParties; ++p) {
    out[p]->set_first(s[p]);
    out[p]->set_second(s[(p + 1) % kParties]);
  }
  wipe();
  return absl::OkStatus();
}

absl::Status CombineAdditive(const std::array<const std::string*, kParties>& t,
                             absl::Span<uint8_t> out, absl::string_view what,
                             const PartyNamer& name) {
  for (int p = 0; p < kParties; ++p) {
    if (t[p]->size() != out.size()) {
      OPENSSL_cleanse(out.data(), out.size());
      return absl::DataLossError(absl::StrCat(
          name(p), " sent a share of the wrong length for the ", what));
    }
  }
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>((*t[0])[i] ^ (*t[1])[i] ^ (*t[2])[i]);
  return absl::OkStatus();
}

}  // namespace kmpc::client
