// Figures of the RFC 3962 circuits: ANDs and AND depth (ring rounds) of a
// SHA-1 compression, an AES-256 decryption, a login's timestamp decryption
// and reply encryption, and a reply with the PA-REQ-ENC-PA-REP checksum
// spliced in (316 bytes, a 250-byte request) beside the same reply plain;
// and their wall time among three parties in one process over the
// in-memory ring (no network latency: a lower bound on the rounds' cost),
// semi-honest and with the malicious check, for 1 and 64 logins bitsliced
// in one run.
//   kmpc_cts_bench [--lanes=N]...
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cts/cts.h"
#include "cts/dealer.h"
#include "cts_testing.h"
#include "rep3_cluster.h"

namespace kmpc::cts {
namespace {

using testing::Bytes;
using testing::Views;

double TimeRun(::kmpc::testing::Rep3Cluster& cl, const Program& p,
               const std::vector<Views>& in, bool malicious) {
  std::array<absl::Status, 3> st;
  const auto t0 = std::chrono::steady_clock::now();
  testing::RunShared({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()}, p, in, malicious,
                     &st);
  const auto t1 = std::chrono::steady_clock::now();
  for (const auto& s : st) {
    if (!s.ok()) std::fprintf(stderr, "run failed: %s\n", s.ToString().c_str());
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

std::vector<Views> Lanes(size_t lanes, uint32_t usage, size_t n, bool decrypt) {
  std::vector<Views> in;
  for (size_t l = 0; l < lanes; ++l) {
    const Bytes key = ::kmpc::testing::Random(32);
    const Bytes data = ::kmpc::testing::Random(n);
    const Views m = testing::DealViews(DealUsage(key, usage)->bytes);
    in.push_back(testing::Concat(
        {m, decrypt ? testing::PublicViews(testing::RefEncrypt(key, usage, data))
                    : testing::DealViews(data)}));
  }
  return in;
}

// Spliced replies (cts.h SpliceEncryptProgram): usage-3 material, the
// usage-56 checksum material, conf || P with zeros at off, D.
std::vector<Views> SpliceLanes(size_t lanes, size_t n, size_t m, size_t off) {
  std::vector<Views> in;
  for (size_t l = 0; l < lanes; ++l) {
    const Bytes key = ::kmpc::testing::Random(32);
    Bytes data = ::kmpc::testing::Random(n);
    std::fill(data.begin() + 16 + off, data.begin() + 16 + off + kTagBytes, 0);
    in.push_back(testing::Concat({testing::DealViews(DealUsage(key, 3)->bytes),
                                  testing::DealViews(DealChecksum(key, 56)->bytes),
                                  testing::DealViews(data),
                                  testing::DealViews(::kmpc::testing::Random(m))}));
  }
  return in;
}

int Main(int argc, char** argv) {
  std::vector<size_t> lanes = {1, 64};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--lanes=", 8) == 0) lanes = {std::stoul(argv[i] + 8)};
  }
  const auto c0 = std::chrono::steady_clock::now();
  const Program dec = *DecryptProgram(14, 44);
  const auto c1 = std::chrono::steady_clock::now();
  const Program enc = *EncryptProgram(14, 300);
  const auto c2 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  auto mib = [](const Program& p) {
    size_t b = 0;
    for (const auto& l : p.layers) b += 4 * (l.ands.size() + l.xors.size());
    return b / 1048576.0;
  };
  std::printf("timestamp decrypt+HMAC (44 bytes): %zu ANDs, %zu XORs, %d rounds; compiled in "
              "%.0f ms, %.1f MiB\n", dec.ands, dec.xors, dec.depth, ms(c0, c1), mib(dec));
  std::printf("reply encrypt+HMAC (300 bytes): %zu ANDs, %zu XORs, %d rounds; compiled in "
              "%.0f ms, %.1f MiB\n", enc.ands, enc.xors, enc.depth, ms(c1, c2), mib(enc));
  constexpr size_t kN = 316, kM = 250, kOff = kN - 16 - kTagBytes;
  const auto c3 = std::chrono::steady_clock::now();
  const Program plain = *EncryptProgram(14, kN);
  const auto c4 = std::chrono::steady_clock::now();
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  const auto c5 = std::chrono::steady_clock::now();
  std::printf("reply encrypt+HMAC (%zu bytes): %zu ANDs, %d rounds; compiled in %.0f ms, "
              "%.1f MiB\n", kN, plain.ands, plain.depth, ms(c3, c4), mib(plain));
  std::printf("the same, a %zu-byte request's checksum spliced at %zu: %zu ANDs, %d rounds; "
              "compiled in %.0f ms, %.1f MiB\n", kM, kOff, spliced.ands, spliced.depth,
              ms(c4, c5), mib(spliced));
  ::kmpc::testing::Rep3Cluster cl;
  for (size_t n : lanes) {
    const auto pin = Lanes(n, 3, kN, false), sin = SpliceLanes(n, kN, kM, kOff);
    for (bool mal : {false, true}) {
      TimeRun(cl, plain, pin, mal);  // warm-up
      const double tp = TimeRun(cl, plain, pin, mal), ts = TimeRun(cl, spliced, sin, mal);
      std::printf("%zu login(s), %s: reply %.1f ms, spliced reply %.1f ms\n", n,
                  mal ? "malicious" : "semi-honest", tp, ts);
    }
  }
  for (size_t n : lanes) {
    const auto din = Lanes(n, 1, 44, true), ein = Lanes(n, 3, 300, false);
    for (bool mal : {false, true}) {
      TimeRun(cl, dec, din, mal);  // warm-up
      const double td = TimeRun(cl, dec, din, mal), te = TimeRun(cl, enc, ein, mal);
      std::printf("%zu login(s), %s: timestamp %.1f ms (%.1f us/round), reply %.1f ms "
                  "(%.1f us/round)\n",
                  n, mal ? "malicious" : "semi-honest", td, 1000 * td / dec.depth, te,
                  1000 * te / enc.depth);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kmpc::cts

int main(int argc, char** argv) { return kmpc::cts::Main(argc, argv); }
