// Streaming SHA-256 (protocol/sha256.h) against FIPS 180-2's examples and
// OpenSSL's one-shot digest: in pieces, with Peeks in between, after a
// Reset, and over 64-bit words.
#include "protocol/sha256.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace kmpc::protocol {
namespace {

absl::Span<const uint8_t> Bytes(absl::string_view s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string Hex(const std::array<uint8_t, 32>& d) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

// OpenSSL's digest of s in one call.
std::string OneShot(absl::string_view s) {
  std::array<uint8_t, 32> d{};
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(s.data(), s.size(), d.data(), &len, EVP_sha256(), nullptr), 1);
  return Hex(d);
}

std::string Digest(Sha256& h) {
  std::array<uint8_t, 32> d{};
  EXPECT_TRUE(h.Final(d).ok());
  return Hex(d);
}

TEST(Sha256, Fips180Examples) {
  Sha256 empty;
  EXPECT_EQ(Digest(empty), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.Update(Bytes("abc"));
  EXPECT_EQ(Digest(abc), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 two;  // two blocks, fed in pieces
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  for (size_t i = 0; i < m.size(); i += 7) two.Update(Bytes(absl::string_view(m).substr(i, 7)));
  EXPECT_EQ(Digest(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// A Peek is the digest so far, and hashing goes on after it.
TEST(Sha256, PeekLetsHashingGoOn) {
  Sha256 h;
  std::array<uint8_t, 32> d{};
  std::string so_far;
  const std::vector<std::string> pieces = {"", "a", "bc", std::string(200, 'x')};
  for (const std::string& piece : pieces) {
    h.Update(Bytes(piece));
    so_far += piece;
    ASSERT_TRUE(h.Peek(d).ok());
    EXPECT_EQ(Hex(d), OneShot(so_far)) << so_far.size();
    ASSERT_TRUE(h.Peek(d).ok());  // twice: the same
    EXPECT_EQ(Hex(d), OneShot(so_far));
  }
  EXPECT_EQ(Digest(h), OneShot(so_far));
}

// Reset starts a new digest; words are hashed as their 8 bytes in memory.
TEST(Sha256, ResetAndWords) {
  Sha256 h;
  h.Update(Bytes("discarded"));
  h.Reset();
  const uint64_t w[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  h.Update(w, 2);
  const std::string bytes(reinterpret_cast<const char*>(w), sizeof w);
  EXPECT_EQ(Digest(h), OneShot(bytes));
  h.Reset();
  h.Update(Bytes("abc"));
  EXPECT_EQ(Digest(h), OneShot("abc"));
}

}  // namespace
}  // namespace kmpc::protocol
