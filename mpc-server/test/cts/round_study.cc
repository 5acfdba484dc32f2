// The round study's table (docs/design/cts-circuits.md, "Fewer rounds:
// gates of more inputs"): each program a login or a TGS runs on shares,
// re-mapped into k-input gates over masked wires (cts/lut_map.h) for k =
// 2 .. 6, beside today's Rep3 circuit: online rounds, mask-product rounds,
// opened bits and mask products per lane, bits each party sends per lane,
// and what each mapping took (wall and process CPU: on a shared box the
// CPU is the steadier figure).
//
// Usage: kmpc_cts_round_study [--cuts N] [--digest] [k ...]   (default 2 3
// 4 5 6; N the priority cuts kept per node, default 8; --digest ends each
// row with a digest of the whole mapping, every gate's root, leaves, table,
// layer and Rep3 flag, to compare mappings bit for bit across builds)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "contract.h"
#include "cts/cts.h"
#include "cts/lut_map.h"
#include "cts/sha1.h"
#include "sha1_programs.h"

namespace kmpc::cts {
namespace {

using testing::Sha1CompressionProgram;

struct Case {
  std::string name;
  Program p;
};

// The shapes of cts_test's figures: a 44-byte timestamp with the gate's
// window; a 316-byte conf || EncASRepPart with a 250-byte AS-REQ's
// checksum spliced at its end; a 576-byte conf || EncTicketPart with a
// 330-byte PAC's two signatures.
std::vector<Case> Cases() {
  std::vector<Case> v;
  v.push_back({"SHA-1 compression", Sha1CompressionProgram()});
  v.push_back({"timestamp gate (44 B)", *DecryptProgram(14, 44, true)});
  v.push_back({"spliced AS reply (316 B, 250 B AS-REQ)",
               *SpliceEncryptClassProgram(14, 316, contract::SpliceDealtBytes(250), 288)});
  v.push_back({"TGS ticket (576 B, 330 B PAC)",
               *TicketClassProgram(14, 576, contract::SpliceDealtBytes(330), 420,
                                   contract::kTicketSignatureGap)});
  return v;
}

int cuts_per_node = 8;
bool digest = false;

// FNV-1a over every gate's fields in gate order.
uint64_t Digest(const LutMap& m) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t x) {
    for (int i = 0; i < 8; ++i, x >>= 8) h = (h ^ (x & 0xFF)) * 0x100000001b3ull;
  };
  for (const LutGate& g : m.gates) {
    mix(g.root);
    mix(g.leaves.size());
    for (uint32_t l : g.leaves) mix(l);
    mix(g.table);
    mix(static_cast<uint64_t>(g.layer) << 1 | g.rep3);
  }
  return h;
}

LutFigures Row(const Case& cs, int k, int depth_target = 0) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  LutOptions o;
  o.k = k;
  o.cuts_per_node = cuts_per_node;
  o.depth_target = depth_target;
  const LutMap m = MapLuts(cs.p, o);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const LutFigures& f = m.fig;
  // Each party sends one bit per opened gate and one per mask product
  // (a Rep3 AND), against one per AND today.
  const double ands = static_cast<double>(f.ands);
  std::printf("| %s | %d | %d + %d | %zu (%zu Rep3) | %zu (%zu) | %.2fx / %.2fx | %zu",
              cs.name.c_str(), k, f.depth, f.prep_depth, f.gates, f.rep3_gates, f.products,
              f.hybrid_products, static_cast<double>(f.gates + f.products) / ands,
              static_cast<double>(f.gates + f.hybrid_products) / ands, f.products_by_size[2]);
  for (int j = 3; j <= k; ++j) std::printf("/%zu", f.products_by_size[j]);
  std::printf(" | %.2f s (%.2f s CPU) |", s, cpu);
  if (digest) std::printf(" %016llx |", static_cast<unsigned long long>(Digest(m)));
  std::printf("\n");
  std::fflush(stdout);
  return f;
}

// A login's Run: the timestamp's gates beside the reply's, in the reply's
// rounds (the timestamp mapped with the reply's depth as its target).
void LoginRow(const Case& stamp, const Case& reply, int k) {
  const LutFigures r = Row(reply, k);
  const LutFigures t = Row({stamp.name + " in the reply's rounds", stamp.p}, k, r.depth);
  const double ands = static_cast<double>(r.ands + t.ands);
  std::printf("| one login (both) | %d | %d + %d | %zu (%zu Rep3) | %zu (%zu) | %.2fx / %.2fx "
              "| | |\n",
              k, r.depth, std::max(r.prep_depth, t.prep_depth), r.gates + t.gates,
              r.rep3_gates + t.rep3_gates, r.products + t.products,
              r.hybrid_products + t.hybrid_products,
              static_cast<double>(r.gates + r.products + t.gates + t.products) / ands,
              static_cast<double>(r.gates + r.hybrid_products + t.gates + t.hybrid_products) /
                  ands);
}

int Main(int argc, char** argv) {
  std::vector<int> ks;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cuts" && i + 1 < argc) {
      cuts_per_node = std::atoi(argv[++i]);
      continue;
    }
    if (std::string(argv[i]) == "--digest") {
      digest = true;
      continue;
    }
    ks.push_back(std::atoi(argv[i]));
  }
  if (cuts_per_node < 1) {
    std::fprintf(stderr, "--cuts must be at least 1\n");
    return 2;
  }
  if (ks.empty()) ks = {2, 3, 4, 5, 6};
  for (int k : ks) {
    if (k < 2 || k > kMaxLutInputs) {
      std::fprintf(stderr, "k must be 2 .. %d\n", kMaxLutInputs);
      return 2;
    }
  }
  std::printf("| program | k | rounds online + mask products | gates (of them Rep3) "
              "| mask products (hybrid) | bits sent vs today: all masked / hybrid "
              "| products by size 2/3/.. | mapping time (wall, CPU) |\n"
              "|---|---|---|---|---|---|---|---|\n");
  const std::vector<Case> cases = Cases();
  for (const Case& cs : cases) {
    std::printf("| %s | today (Rep3) | %d | | | 1.00x (%zu ANDs) | | |\n", cs.name.c_str(),
                cs.p.depth, cs.p.ands);
    for (int k : ks) Row(cs, k);
  }
  for (int k : ks) LoginRow(cases[1], cases[2], k);
  return 0;
}

}  // namespace
}  // namespace kmpc::cts

int main(int argc, char** argv) { return kmpc::cts::Main(argc, argv); }
