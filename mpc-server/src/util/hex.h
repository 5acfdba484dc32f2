// Hex text to bytes, refusing what is not hex. absl's HexStringToBytes
// that returns a bool first shipped in abseil 20230802 (Debian 13);
// Debian 12's 20220623 has only the string-returning one, which
// Debian 13's abseil deprecates. This one builds warning-free on both.
#ifndef KMPC_UTIL_HEX_H_
#define KMPC_UTIL_HEX_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kmpc::util {

namespace hex_detail {
inline int Nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace hex_detail

// The bytes `hex` spells (upper or lower case) in *out. False, with *out
// cleared, for an odd length or a character that is not a hex digit.
inline bool HexToBytes(absl::string_view hex, std::string* out) {
  out->clear();
  if (hex.size() % 2 != 0) return false;
  out->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_detail::Nibble(hex[i]);
    const int lo = hex_detail::Nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      out->clear();
      return false;
    }
    out->push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

}  // namespace kmpc::util

#endif  // KMPC_UTIL_HEX_H_
