#include "share/replicated.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>

namespace kmpc::share {

absl::Status RandomBytes(absl::Span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    size_t n = std::min<size_t>(out.size() - done, INT_MAX / 2);
    if (RAND_bytes(out.data() + done, static_cast<int>(n)) != 1) {
      return absl::InternalError("RAND_bytes failed");
    }
    done += n;
  }
  return absl::OkStatus();
}

void Wipe(void* p, size_t n) {
  // explicit_bzero: memset speed, never optimised away (glibc >= 2.25).
  if (p != nullptr && n > 0) explicit_bzero(p, n);
}

absl::StatusOr<std::array<View, 3>> Deal(absl::Span<const uint8_t> secret) {
  const size_t n = secret.size();
  std::array<std::vector<uint8_t>, 3> s;
  for (auto& v : s) v.resize(n);
  absl::Status st = RandomBytes(absl::MakeSpan(s[0]));
  if (st.ok()) st = RandomBytes(absl::MakeSpan(s[1]));
  if (!st.ok()) {
    for (auto& v : s) Wipe(v);
    return st;
  }
  for (size_t j = 0; j < n; ++j) s[2][j] = secret[j] ^ s[0][j] ^ s[1][j];
  std::array<View, 3> views;
  for (int i = 0; i < kParties; ++i) {
    views[i].comp[0] = s[i];
    views[i].comp[1] = s[NextParty(i)];
  }
  for (auto& v : s) Wipe(v);
  return views;
}

absl::StatusOr<std::vector<uint8_t>> Open(const std::array<View, 3>& views) {
  const size_t n = views[0].size();
  for (int i = 0; i < kParties; ++i) {
    if (views[i].comp[0].size() != n || views[i].comp[1].size() != n) {
      return absl::InvalidArgumentError("share views differ in length");
    }
  }
  for (int i = 0; i < kParties; ++i) {
    if (views[i].comp[1] != views[NextParty(i)].comp[0]) {
      return absl::DataLossError("the two copies of a share disagree");
    }
  }
  std::vector<uint8_t> out(n);
  for (size_t j = 0; j < n; ++j) {
    out[j] = views[0].comp[0][j] ^ views[1].comp[0][j] ^ views[2].comp[0][j];
  }
  return out;
}

void XorInPlace(View& a, const View& b) {
  for (int k = 0; k < 2; ++k) {
    for (size_t j = 0; j < a.comp[k].size() && j < b.comp[k].size(); ++j) {
      a.comp[k][j] ^= b.comp[k][j];
    }
  }
}

void XorPublic(int party, View& a, absl::Span<const uint8_t> pub) {
  for (int k = 0; k < 2; ++k) {
    if (!HoldsPublicIn(party, k)) continue;
    for (size_t j = 0; j < a.comp[k].size() && j < pub.size(); ++j) {
      a.comp[k][j] ^= pub[j];
    }
  }
}

void Not(int party, View& a) {
  for (int k = 0; k < 2; ++k) {
    if (!HoldsPublicIn(party, k)) continue;
    for (auto& b : a.comp[k]) b = static_cast<uint8_t>(~b);
  }
}

}  // namespace kmpc::share
