// References for the engine's tests, independent of the engine: the
// enctype of enctype.md in the clear (OpenSSL AES, GHASH with the
// bit-by-bit GF(2^128) multiply), the shared vector file, and the XOR of
// the three parties' SignShare.
#ifndef KMPC_TEST_CORE_ENCTYPE_REFERENCE_H_
#define KMPC_TEST_CORE_ENCTYPE_REFERENCE_H_

#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "protocol/gf128.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::engine::reference {

using Bytes = std::vector<uint8_t>;
using ::kmpc::testing::OpensslAes;

// Reference GHASH with the bit-by-bit multiply (independent of PCLMUL).
inline Bytes RefGhash(const Bytes& key, const Bytes& a, const Bytes& c) {
  const uint8_t zero[16] = {0};
  const auto h16 = OpensslAes(key, zero);
  protocol::Block h, y{};
  std::copy(h16.begin(), h16.end(), h.begin());
  Bytes x = a;
  x.resize((a.size() + 15) / 16 * 16, 0);
  x.insert(x.end(), c.begin(), c.end());
  x.resize(x.size() + (16 - c.size() % 16) % 16, 0);
  for (int k = 7; k >= 0; --k) x.push_back(static_cast<uint8_t>((8 * a.size()) >> (8 * k)));
  for (int k = 7; k >= 0; --k) x.push_back(static_cast<uint8_t>((8 * c.size()) >> (8 * k)));
  for (size_t j = 0; j < x.size(); j += 16) {
    for (int k = 0; k < 16; ++k) y[k] ^= x[j + k];
    y = protocol::GfMulReference(y, h);
  }
  return Bytes(y.begin(), y.end());
}

inline Bytes Ctr(const Bytes& ctr0, uint64_t i) {
  Bytes c = ctr0;
  for (int k = 15; k >= 0 && i; --k) {
    const uint64_t s = c[k] + (i & 0xff);
    c[k] = static_cast<uint8_t>(s);
    i = (i >> 8) + (s >> 8);
  }
  return c;
}

// The enctype of enctype.md in the clear, with a given ctr0.
inline Bytes RefEncrypt(const Bytes& key, uint32_t usage, const Bytes& ctr0, const Bytes& p) {
  Bytes out = ctr0, c;
  const size_t n = (p.size() + 15) / 16;
  for (size_t i = 1; i <= n; ++i) {
    const auto ks = OpensslAes(key, Ctr(ctr0, i).data());
    for (size_t k = 0; k < 16 && 16 * (i - 1) + k < p.size(); ++k) {
      c.push_back(p[16 * (i - 1) + k] ^ ks[k]);
    }
  }
  const Bytes a = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                   static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage)};
  Bytes s = RefGhash(key, a, c);
  const auto e0 = OpensslAes(key, ctr0.data());
  for (int k = 0; k < 16; ++k) s[k] ^= e0[k];
  out.insert(out.end(), c.begin(), c.end());
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

inline Bytes RefChecksum(const Bytes& key, uint32_t usage, const Bytes& ctr0, const Bytes& d) {
  const Bytes a = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
                   static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0x99};
  Bytes s = RefGhash(key, a, d);
  const auto e0 = OpensslAes(key, ctr0.data());
  for (int k = 0; k < 16; ++k) s[k] ^= e0[k];
  Bytes out = ctr0;
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

inline std::string ReadFile(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Minimal extraction of the flat objects of one array of the vector file.
inline std::vector<std::map<std::string, std::string>> Section(const std::string& json,
                                                        const std::string& name) {
  std::vector<std::map<std::string, std::string>> out;
  const size_t start = json.find("\"" + name + "\"");
  if (start == std::string::npos) return out;
  const size_t open = json.find('[', start);
  const size_t close = json.find(']', open);
  const std::string body = json.substr(open, close - open);
  std::regex obj("\\{([^}]*)\\}");
  std::regex kv("\"([a-z0-9_]+)\"\\s*:\\s*(\"([^\"]*)\"|([0-9]+))");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), obj);
       it != std::sregex_iterator(); ++it) {
    std::map<std::string, std::string> m;
    const std::string o = (*it)[1];
    for (auto k = std::sregex_iterator(o.begin(), o.end(), kv);
         k != std::sregex_iterator(); ++k) {
      m[(*k)[1]] = (*k)[3].matched ? std::string((*k)[3]) : std::string((*k)[4]);
    }
    out.push_back(m);
  }
  return out;
}

// The three parties' SignShare of a message dealt afresh; their XOR.
inline Bytes SignAll(const std::array<std::shared_ptr<const PadState>, 3>& pads,
              uint32_t usage, const Bytes& d, std::array<Bytes, 3>* shares_out = nullptr) {
  auto dealt = share::Deal(d);
  EXPECT_TRUE(dealt.ok());
  Bytes tag(16, 0);
  for (int i = 0; i < 3; ++i) {
    auto t = SignShare(*pads[i], usage, (*dealt)[i].comp[0], (*dealt)[i].comp[1]);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    if (shares_out != nullptr) (*shares_out)[i].assign(t->begin(), t->end());
    for (int k = 0; k < 16; ++k) tag[k] ^= (*t)[k];
  }
  return tag;
}

inline std::array<std::shared_ptr<const PadState>, 3> Const(
    const std::array<std::shared_ptr<PadState>, 3>& p) {
  return {p[0], p[1], p[2]};
}

}  // namespace kmpc::engine::reference

#endif  // KMPC_TEST_CORE_ENCTYPE_REFERENCE_H_
