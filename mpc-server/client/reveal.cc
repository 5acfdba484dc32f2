#include "client/reveal.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace kmpc::client {

std::string DefaultPartyName(int party) {
  return absl::StrCat("MPC party ", party);
}

absl::Status Reveal(const std::array<ShareView, kParties>& s,
                    absl::Span<uint8_t> out, absl::string_view what,
                    const PartyNamer& name) {
  const size_t len = out.size();
  for (int p = 0; p < kParties; ++p) {
    if (s[p].first.size() != len || s[p].second.size() != len) {
      OPENSSL_cleanse(out.data(), len);
      return absl::DataLossError(absl::StrCat(
          name(p), " sent a share of the wrong length for the ", what));
    }
  }
  // Check p: party p's copy of s_{p+1} against party p+1's.
  std::vector<int> bad;
  for (int p = 0; p < kParties; ++p) {
    const int q = (p + 1) % kParties;
    if (CRYPTO_memcmp(s[p].second.data(), s[q].first.data(), len) != 0)
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
  const absl::string_view a = s[0].first, b = s[1].first, c = s[2].first;
  for (size_t i = 0; i < len; ++i)
    out[i] = static_cast<uint8_t>(a[i] ^ b[i] ^ c[i]);
  return absl::OkStatus();
}

DealRandom::~DealRandom() { OPENSSL_cleanse(buf_.data(), buf_.size()); }

absl::Status DealRandom::Draw(size_t total_message_bytes) {
  OPENSSL_cleanse(buf_.data(), buf_.size());
  used_ = 0;
  buf_.assign(2 * total_message_bytes, 0);
  if (!buf_.empty() &&
      RAND_bytes(buf_.data(), static_cast<int>(buf_.size())) != 1) {
    OPENSSL_cleanse(buf_.data(), buf_.size());
    buf_.clear();
    return absl::InternalError("random generator failed while dealing shares");
  }
  return absl::OkStatus();
}

absl::Span<const uint8_t> DealRandom::Take(size_t n) {
  if (buf_.size() - used_ < 2 * n) return {};
  absl::Span<const uint8_t> s(buf_.data() + used_, 2 * n);
  used_ += 2 * n;
  return s;
}

absl::Status DealFlat(absl::Span<const uint8_t> data,
                      absl::Span<const uint8_t> random,
                      const std::array<std::string*, kParties>& flat) {
  const size_t n = data.size();
  if (random.size() != 2 * n)
    return absl::InvalidArgumentError(
        "dealing shares: the random bytes do not match the message length");
  // s_0 and s_1 straight from `random`; s_2 computed in place in party
  // 2's buffer (its first share) and copied to party 1's (its second): no
  // other copy of a share is made.
  const char* s0 = reinterpret_cast<const char*>(random.data());
  const char* s1 = s0 + n;
  flat[0]->append(s0, n);
  flat[0]->append(s1, n);
  flat[1]->append(s1, n);
  std::string* f2 = flat[2];
  const size_t at = f2->size();
  f2->resize(at + n);
  for (size_t i = 0; i < n; ++i)
    (*f2)[at + i] = static_cast<char>(data[i] ^ static_cast<uint8_t>(s0[i]) ^
                                      static_cast<uint8_t>(s1[i]));
  flat[1]->append(f2->data() + at, n);
  f2->append(s0, n);
  return absl::OkStatus();
}

absl::Status CombineAdditive(const std::array<const std::string*, kParties>& t,
                             absl::Span<uint8_t> out, absl::string_view what,
                             const PartyNamer& name) {
  return CombineAdditive(
      std::array<absl::string_view, kParties>{*t[0], *t[1], *t[2]}, out, what,
      name);
}

absl::Status CombineAdditive(const std::array<absl::string_view, kParties>& t,
                             absl::Span<uint8_t> out, absl::string_view what,
                             const PartyNamer& name) {
  for (int p = 0; p < kParties; ++p) {
    if (t[p].size() != out.size()) {
      OPENSSL_cleanse(out.data(), out.size());
      return absl::DataLossError(absl::StrCat(
          name(p), " sent a share of the wrong length for the ", what));
    }
  }
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(t[0][i] ^ t[1][i] ^ t[2][i]);
  return absl::OkStatus();
}

}  // namespace kmpc::client
