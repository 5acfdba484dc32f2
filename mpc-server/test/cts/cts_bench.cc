// Figures of the RFC 3962 circuits: ANDs and AND depth (ring rounds) of a
// SHA-1 compression, an AES-256 decryption, a login's timestamp decryption
// and reply encryption, and a reply with the PA-REQ-ENC-PA-REP checksum
// spliced in (316 bytes, a 250-byte request) beside the same reply plain;
// and their wall time among three parties in one process over the
// in-memory ring (no network latency: a lower bound on the rounds' cost),
// semi-honest and with the malicious check, for 1 and 64 logins bitsliced
// in one run.
//   kmpc_cts_bench [--lanes=N]...
// With --cpu[=R]: only the spliced reply, at 64, 128 and 256 logins (or
// the --lanes given), semi-honest and malicious: the process CPU time
// (CLOCK_PROCESS_CPUTIME_ID, the three parties together) and wall time of
// a Run, medians of R runs (default 5) after a warm-up, and the CPU per
// login and party.
// With --masked[=R]: the spliced reply as k-input gates over masked wires
// (cts/masked.h, k = 6) beside the same program on Rep3 ANDs, in one run:
// messages, ANDs and opened bits per lane, the mapping's compile time,
// how many masked gates of a message share a shape (GateShapes), and CPU
// and wall per Run as --cpu, both modes; and one party's masked Run alone
// over a ring that sends nowhere (the walk's own CPU, no wake-ups);
// --masked-walk=R prints only that, medians of R runs.
// With --walk[=R]: the gate walk alone of the spliced reply at the --lanes
// given (default 226 and 256): one thread, two share components as a
// server holds, every AND layer's products computed locally (no ring, no
// check), so the figure is the walk's own CPU per Run (gather, the packed
// last words, scatter, the XORs); medians of R runs (default 9).
// With --ticket[=R]: one TGS ticket to a service under aes256-cts per Run
// (cts.h TicketClassProgram: a 576-byte conf || EncTicketPart, a 330-byte
// PAC, both signatures spliced), against its two programs of before (the
// PAC's checksum, then the ticket) run one after the other: CPU per party
// and wall time per ticket, medians of R runs (default 5), both modes.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cts/cts.h"
#include "contract.h"
#include "cts/dealer.h"
#include "cts_testing.h"
#include "engine/cts_jobs.h"
#include "masked_testing.h"
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

// CPU time so far, in ms: the process's (the three parties'), or with
// CLOCK_THREAD_CPUTIME_ID the calling thread's.
double CpuMs(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec t{};
  clock_gettime(clock, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
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

// kM: a 250-byte request as dealt with its HMAC inner padding (5 blocks).
constexpr size_t kN = 316, kM = 320, kOff = kN - 16 - kTagBytes;

// How many masked gates of one message share a shape (masked.h Form: the
// leaf count, the monomials read, each term's monomials and S): gates
// of one shape could share a word in a one-lane job's walk (gates, not
// lanes, in a word). Prints the gates and distinct shapes a message, and
// the share of gates in shapes of at least 8 and 32.
void GateShapes(const MaskedProgram& mp) {
  size_t gates = 0, shapes = 0, in8 = 0, in32 = 0, messages = 0;
  for (const MaskedProgram::Round& rd : mp.round) {
    std::map<uint32_t, size_t> count;  // gates a form (masked.h Form)
    for (const auto* list : {&rd.opens, &rd.local}) {
      for (uint32_t gi : *list) {
        ++count[mp.gates[gi].form];
      }
    }
    if (count.empty()) continue;
    ++messages;
    for (const auto& [key, k] : count) {
      gates += k;
      in8 += k >= 8 ? k : 0;
      in32 += k >= 32 ? k : 0;
    }
    shapes += count.size();
  }
  const double m = static_cast<double>(std::max<size_t>(messages, 1));
  const double g = static_cast<double>(std::max<size_t>(gates, 1));
  std::printf("masked gates a message %.1f in %.1f shapes; %.0f%% of gates in shapes of >= 8 "
              "a message, %.0f%% in shapes of >= 32 (%zu messages with gates)\n",
              static_cast<double>(gates) / m, static_cast<double>(shapes) / m,
              100.0 * static_cast<double>(in8) / g, 100.0 * static_cast<double>(in32) / g,
              messages);
}

// A ring whose messages go nowhere and come back as zeros: one party's
// masked walk with no peers (its cost does not depend on the values).
class NullRing final : public net::RingChannel {
 public:
  int party() const override { return 0; }
  absl::Status SendToPrev(absl::Span<const uint8_t>) override { return absl::OkStatus(); }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    std::fill(out.begin(), out.end(), 0);
    return absl::OkStatus();
  }
};

// One party's semi-honest masked Run of n lanes over a NullRing: the walk,
// the PRSS draws and the packing, with no wake-ups; median ms CPU a Run.
double MaskedWalkMs(const MaskedProgram& mp, protocol::Prss& prss, size_t n, int rounds) {
  NullRing ring;
  protocol::Rep3 solo(ring, prss);
  const size_t wn = (n + 63) / 64;
  std::vector<uint64_t> in(mp.inputs * wn, 0x5a5a5a5a5a5a5a5aULL);
  std::vector<uint64_t> out0(mp.outputs * wn), out1(out0.size());
  const MaskedJob job{&mp, wn, {in, in}, {absl::MakeSpan(out0), absl::MakeSpan(out1)}, n};
  std::vector<double> cpu;
  for (int r = 0; r <= rounds; ++r) {  // the first is a warm-up
    const double c0 = CpuMs(CLOCK_THREAD_CPUTIME_ID);
    if (absl::Status st = EvaluateMaskedAll(absl::MakeConstSpan(&job, 1), solo); !st.ok())
      std::fprintf(stderr, "walk failed: %s\n", st.ToString().c_str());
    if (r > 0) cpu.push_back(CpuMs(CLOCK_THREAD_CPUTIME_ID) - c0);
  }
  return Median(cpu);
}

void PrintMaskedWalk(const MaskedProgram& mp, protocol::Prss& prss, size_t n, int rounds) {
  const double walk = MaskedWalkMs(mp, prss, n, rounds);
  std::printf("%zu lanes, masked walk alone (one party, semi-honest, no ring): %.2f ms CPU/Run, "
              "%.2f us a message\n",
              n, walk, 1000 * walk / std::max(mp.rounds, 1));
}

// --masked-walk (see the head of this file).
int MaskedWalkMain(std::vector<size_t> lanes, int rounds) {
  if (lanes.empty()) lanes = {1, 64};
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  absl::StatusOr<MaskedProgram> mp = CompileMasked(MapLuts(spliced, LutOptions{6}));
  if (!mp.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", mp.status().ToString().c_str());
    return 1;
  }
  ::kmpc::testing::Rep3Cluster solo;
  for (size_t n : lanes) PrintMaskedWalk(*mp, *solo.prss[0], n, rounds);
  return 0;
}

// --masked (see the head of this file).
int MaskedMain(std::vector<size_t> lanes, int rounds) {
  if (lanes.empty()) lanes = {64, 256};
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  const double c0 = CpuMs(CLOCK_THREAD_CPUTIME_ID);
  const LutMap map = MapLuts(spliced, LutOptions{6});
  const double c1 = CpuMs(CLOCK_THREAD_CPUTIME_ID);
  absl::StatusOr<MaskedProgram> mp = CompileMasked(map);
  const double c2 = CpuMs(CLOCK_THREAD_CPUTIME_ID);
  if (!mp.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", mp.status().ToString().c_str());
    return 1;
  }
  std::printf("spliced reply: Rep3 %d rounds, %zu ANDs/lane; masked k=6: %d messages (%d of "
              "products), %zu ANDs + %zu opened bits/lane (%.2fx bits); map %.0f ms, compile "
              "%.0f ms CPU\n",
              spliced.depth, spliced.ands, mp->rounds, mp->prep_rounds, mp->ands, mp->opened,
              static_cast<double>(mp->ands + mp->opened) / static_cast<double>(spliced.ands),
              c1 - c0, c2 - c1);
  {
    // The gate walk's work (masked_eval.cc GateShare): per masked gate the
    // monomials of its leaves' m it builds, its terms, and the monomials
    // its terms' c_S sum.
    size_t mono = 0, xors = 0;
    size_t terms = 0;
    for (const auto& g : mp->gates) {
      const MaskedProgram::Form& f = mp->forms[g.form];
      mono += static_cast<size_t>(__builtin_popcountll(f.need_r & ~uint64_t{1}));
      terms += f.terms;
      for (size_t t = 0; t < f.terms; ++t)
        xors += static_cast<size_t>(__builtin_popcountll(mp->terms[f.term_at + t].r));
    }
    const double n = static_cast<double>(std::max<size_t>(mp->gates.size(), 1));
    std::printf("masked gates %zu: %.1f monomials, %.1f terms, %.1f monomial XORs a gate; "
                "%.1f MiB held (the Rep3 program %.1f MiB); %zu value slots, %zu product slots, "
                "%zu forms of %zu terms\n",
                mp->gates.size(), static_cast<double>(mono) / n,
                static_cast<double>(terms) / n, static_cast<double>(xors) / n,
                static_cast<double>(engine::MaskedProgramBytes(*mp)) / (1 << 20),
                static_cast<double>(engine::ProgramBytes(spliced)) / (1 << 20), mp->slots,
                mp->products, mp->forms.size(), mp->terms.size());
  }
  GateShapes(*mp);
  ::kmpc::testing::Rep3Cluster cl, solo;  // solo: the walk alone's PRSS
  const std::array<protocol::Rep3*, 3> rep3{cl.rep3[0].get(), cl.rep3[1].get(),
                                            cl.rep3[2].get()};
  for (size_t n : lanes) {
    PrintMaskedWalk(*mp, *solo.prss[0], n, 2 * rounds + 1);
    const auto sin = SpliceLanes(n, kN, kM, kOff);
    for (bool mal : {false, true}) {
      for (bool masked : {false, true}) {
        auto run = [&] {
          if (!masked) return TimeRun(cl, spliced, sin, mal);
          std::array<absl::Status, 3> st;
          const auto t0 = std::chrono::steady_clock::now();
          testing::RunMaskedAll(rep3, {&*mp}, {sin}, mal, &st);
          for (const auto& s : st)
            if (!s.ok()) std::fprintf(stderr, "run failed: %s\n", s.ToString().c_str());
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count();
        };
        run();  // warm-up
        std::vector<double> cpu, wall;
        for (int r = 0; r < rounds; ++r) {
          const double t = CpuMs();
          wall.push_back(run());
          cpu.push_back(CpuMs() - t);
        }
        std::printf("%zu lanes, %s, %s: %.1f ms CPU/Run (3 parties), %.1f ms wall/Run, "
                    "%.0f us CPU/login/party\n",
                    n, mal ? "malicious" : "semi-honest", masked ? "masked k=6" : "Rep3",
                    Median(cpu), Median(wall), 1000 * Median(cpu) / 3 / static_cast<double>(n));
      }
    }
  }
  return 0;
}

// --cpu: CPU per Run of the spliced reply (see the head of this file).
int CpuMain(std::vector<size_t> lanes, int rounds) {
  if (lanes.empty()) lanes = {64, 128, 256};
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  std::printf("spliced reply (%zu bytes, a request dealt as %zu): %zu ANDs, %zu XORs, %d rounds\n",
              kN, kM, spliced.ands, spliced.xors, spliced.depth);
  ::kmpc::testing::Rep3Cluster cl;
  for (size_t n : lanes) {
    const auto sin = SpliceLanes(n, kN, kM, kOff);
    for (bool mal : {false, true}) {
      TimeRun(cl, spliced, sin, mal);  // warm-up
      std::vector<double> cpu, wall;
      for (int r = 0; r < rounds; ++r) {
        const double c0 = CpuMs();
        wall.push_back(TimeRun(cl, spliced, sin, mal));
        cpu.push_back(CpuMs() - c0);
      }
      const double c = Median(cpu);
      std::printf("cpu %zu lanes (wn=%zu), %s: %.1f ms CPU/Run (3 parties), %.1f ms wall/Run, "
                  "%.0f us CPU/login/party\n",
                  n, (n + 63) / 64, mal ? "malicious" : "semi-honest", c, Median(wall),
                  1000 * c / 3 / static_cast<double>(n));
    }
  }
  return 0;
}

// --walk's engine: a server's two components, each AND word's products
// computed in place of the ring (x & y per component: not a sharing, only
// the walk's memory traffic matters here).
class LocalEngine : public Engine {
 public:
  int comps() const override { return 2; }
  uint64_t OneWord(int c) const override { return c == 0 ? ~uint64_t{0} : 0; }
  absl::Status AndLayer(std::array<const uint64_t*, 2> x, std::array<const uint64_t*, 2> y,
                        std::array<uint64_t*, 2> z, size_t n) override {
    for (int c = 0; c < 2; ++c)
      for (size_t i = 0; i < n; ++i) z[c][i] = x[c][i] & y[c][i];
    return absl::OkStatus();
  }
};

// --walk (see the head of this file).
int WalkMain(std::vector<size_t> lanes, int rounds) {
  if (lanes.empty()) lanes = {226, 256};
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  LocalEngine e;
  for (size_t n : lanes) {
    const size_t wn = (n + 63) / 64;
    const Bytes bytes = ::kmpc::testing::Random(8 * spliced.inputs * wn);
    std::vector<uint64_t> in(spliced.inputs * wn);
    std::memcpy(in.data(), bytes.data(), bytes.size());
    std::vector<uint64_t> out0(spliced.outputs * wn), out1(out0.size());
    const Job job{&spliced, wn, {in, in}, {absl::MakeSpan(out0), absl::MakeSpan(out1)}, n};
    std::vector<double> cpu;
    for (int r = 0; r <= rounds; ++r) {  // the first is a warm-up
      const double c0 = CpuMs(CLOCK_THREAD_CPUTIME_ID);
      if (absl::Status st = EvaluateAll(absl::MakeConstSpan(&job, 1), e); !st.ok()) {
        std::fprintf(stderr, "walk failed: %s\n", st.ToString().c_str());
        return 1;
      }
      if (r > 0) cpu.push_back(CpuMs(CLOCK_THREAD_CPUTIME_ID) - c0);
    }
    std::printf("walk %zu lanes (wn=%zu): %.2f ms CPU/Run (one party), %.1f us per login\n", n,
                wn, Median(cpu), 1000 * Median(cpu) / static_cast<double>(n));
  }
  return 0;
}

// --ticket: one ticket per Run (see the head of this file). Lanes hold
// random material of the right sizes: the cost does not depend on values.
std::vector<Views> RandomLanes(const Program& p) {
  return {testing::DealViews(::kmpc::testing::Random(p.inputs / 8))};
}

int TicketMain(int rounds) {
  constexpr size_t kTn = 576, kPac = 330, kTo = 420;
  const size_t m = contract::SpliceDealtBytes(kPac);
  const Program ticket = *TicketClassProgram(14, kTn, m, kTo, contract::kTicketSignatureGap);
  const Program plain = *EncryptClassProgram(14, kTn), sum = *ChecksumClassProgram(kPac);
  std::printf("ticket (%zu bytes, PAC %zu): one program %zu ANDs, %d rounds; before: "
              "checksum %zu ANDs, %d rounds, then ticket %zu ANDs, %d rounds\n",
              kTn, kPac, ticket.ands, ticket.depth, sum.ands, sum.depth, plain.ands,
              plain.depth);
  ::kmpc::testing::Rep3Cluster cl;
  const auto tin = RandomLanes(ticket), pin = RandomLanes(plain), sin = RandomLanes(sum);
  for (bool mal : {false, true}) {
    TimeRun(cl, ticket, tin, mal);  // warm-up
    TimeRun(cl, plain, pin, mal);
    TimeRun(cl, sum, sin, mal);
    std::vector<double> cpu1, wall1, cpu2, wall2;
    for (int r = 0; r < rounds; ++r) {
      double c0 = CpuMs();
      wall1.push_back(TimeRun(cl, ticket, tin, mal));
      cpu1.push_back(CpuMs() - c0);
      c0 = CpuMs();
      wall2.push_back(TimeRun(cl, sum, sin, mal) + TimeRun(cl, plain, pin, mal));
      cpu2.push_back(CpuMs() - c0);
    }
    std::printf("%s: one Run %.1f ms CPU/party, %.1f ms wall; two Runs of before %.1f ms "
                "CPU/party, %.1f ms wall\n",
                mal ? "malicious" : "semi-honest", Median(cpu1) / 3, Median(wall1),
                Median(cpu2) / 3, Median(wall2));
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<size_t> lanes = {1, 64};
  bool lanes_given = false;
  int cpu_rounds = 0, walk_rounds = 0, masked_rounds = 0, masked_walk_rounds = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--lanes=", 8) == 0) {
      if (!lanes_given) lanes.clear();
      lanes_given = true;
      lanes.push_back(std::stoul(argv[i] + 8));
    }
    if (std::strcmp(argv[i], "--cpu") == 0) cpu_rounds = 5;
    if (std::strncmp(argv[i], "--cpu=", 6) == 0) cpu_rounds = std::max(1, std::stoi(argv[i] + 6));
    if (std::strcmp(argv[i], "--walk") == 0) walk_rounds = 9;
    if (std::strcmp(argv[i], "--masked") == 0) masked_rounds = 3;
    if (std::strncmp(argv[i], "--masked=", 9) == 0)
      masked_rounds = std::max(1, std::stoi(argv[i] + 9));
    if (std::strncmp(argv[i], "--masked-walk=", 14) == 0)
      masked_walk_rounds = std::max(1, std::stoi(argv[i] + 14));
    if (std::strncmp(argv[i], "--walk=", 7) == 0) walk_rounds = std::max(1, std::stoi(argv[i] + 7));
    if (std::strcmp(argv[i], "--ticket") == 0) return TicketMain(5);
    if (std::strncmp(argv[i], "--ticket=", 9) == 0)
      return TicketMain(std::max(1, std::stoi(argv[i] + 9)));
  }
  if (masked_walk_rounds > 0)
    return MaskedWalkMain(lanes_given ? lanes : std::vector<size_t>{}, masked_walk_rounds);
  if (masked_rounds > 0)
    return MaskedMain(lanes_given ? lanes : std::vector<size_t>{}, masked_rounds);
  if (walk_rounds > 0) return WalkMain(lanes_given ? lanes : std::vector<size_t>{}, walk_rounds);
  if (cpu_rounds > 0) return CpuMain(lanes_given ? lanes : std::vector<size_t>{}, cpu_rounds);
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
  const auto c3 = std::chrono::steady_clock::now();
  const Program plain = *EncryptProgram(14, kN);
  const auto c4 = std::chrono::steady_clock::now();
  const Program spliced = *SpliceEncryptProgram(14, kN, kM, kOff);
  const auto c5 = std::chrono::steady_clock::now();
  std::printf("reply encrypt+HMAC (%zu bytes): %zu ANDs, %d rounds; compiled in %.0f ms, "
              "%.1f MiB\n", kN, plain.ands, plain.depth, ms(c3, c4), mib(plain));
  std::printf("the same, the checksum of a request dealt as %zu bytes spliced at %zu: %zu ANDs, %d rounds; "
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
