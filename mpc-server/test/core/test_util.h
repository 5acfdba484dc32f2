// Helpers for the core tests: hex, OpenSSL references, three parties in
// one process.
#ifndef KMPC_TEST_CORE_TEST_UTIL_H_
#define KMPC_TEST_CORE_TEST_UTIL_H_

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kmpc::testing {

inline std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

inline std::string ToHex(absl::Span<const uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(d[x >> 4]);
    s.push_back(d[x & 15]);
  }
  return s;
}

inline std::vector<uint8_t> Random(size_t n) {
  std::vector<uint8_t> v(n);
  if (n > 0) RAND_bytes(v.data(), static_cast<int>(n));
  return v;
}

// OpenSSL AES-ECB of one block: the independent reference.
inline std::array<uint8_t, 16> OpensslAes(absl::Span<const uint8_t> key,
                                          const uint8_t* in) {
  std::array<uint8_t, 16> out{};
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                     nullptr, key.data(), nullptr);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  int len = 0;
  EVP_EncryptUpdate(ctx, out.data(), &len, in, 16);
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

// Runs f(0), f(1), f(2) on three threads and returns their statuses.
inline std::array<absl::Status, 3> RunParties(
    const std::function<absl::Status(int)>& f) {
  std::array<absl::Status, 3> st;
  std::array<std::thread, 3> t;
  for (int i = 0; i < 3; ++i) t[i] = std::thread([&, i] { st[i] = f(i); });
  for (auto& x : t) x.join();
  return st;
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_TEST_UTIL_H_
