// kmpc_core_bench: three parties in one process (threads) over the
// in-memory ring, ENCRYPT batches of n AES blocks; prints blocks/s, latency
// and bytes sent per block per party. The real three-process benchmark
// over TLS lives with the server.
//
//   kmpc_core_bench [--avx2] [--aesni] [--chunk=N] [--wave=N] [--verify-words=N]
//                   [--depth3|--depth4|--depth6] [--malicious]
//                   [--reps=N] [--sizes=1,128,12800,100000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <ctime>

#include <sys/resource.h>
#include <vector>

#include "aes/aes.h"
#include "engine/engine.h"
#include "net/memory_ring.h"
#include "protocol/prf.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "share/replicated.h"

using namespace kmpc;

namespace {

// A channel that drops what it is sent and receives zeros: one party's
// computation alone (the --solo profile; results are garbage).
class NullChannel : public net::RingChannel {
 public:
  int party() const override { return 0; }
  absl::Status SendToPrev(absl::Span<const uint8_t>) override {
    return absl::OkStatus();
  }
  absl::Status RecvFromNext(absl::Span<uint8_t> out) override {
    std::memset(out.data(), 0, out.size());
    return absl::OkStatus();
  }
};

double ThreadCpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// One party's bitsliced AES over n lanes, timed by thread CPU time.
void Solo(const std::vector<uint32_t>& sizes, const aes::SharedOptions& o,
          int reps) {
  NullChannel ch;
  uint8_t k0[16] = {1}, k1[16] = {2};
  protocol::Prss prss(0, k0, k1);
  protocol::Rep3 rep3(ch, prss);
  aes::Workspace ws;
  for (int nr : {10, 14}) {
    std::vector<uint8_t> rk0((nr + 1) * 16, 3), rk1((nr + 1) * 16, 5);
    for (uint32_t n : sizes) {
      std::vector<uint8_t> in(16 * n, 7), o0(16 * n), o1(16 * n);
      std::vector<aes::SharedLane> lanes(n);
      for (uint32_t l = 0; l < n; ++l) {
        lanes[l] = {{rk0.data(), rk1.data()}, nr, &in[16 * l], {&o0[16 * l], &o1[16 * l]}};
      }
      for (aes::SboxCircuit c : {aes::SboxCircuit::kDepth3, aes::SboxCircuit::kDepth4,
                                 aes::SboxCircuit::kDepth6}) {
        double best = 1e9;
        for (int r = 0; r < std::max(reps, 3); ++r) {
          const double t0 = ThreadCpu();
          (void)aes::EncryptShared(rep3, lanes, c, o, &ws);
          best = std::min(best, ThreadCpu() - t0);
        }
        std::printf("solo AES-%d %s n=%6u  %8.3f ms cpu  %7.3f us/block/party\n",
                    nr == 10 ? 128 : 256,
                    c == aes::SboxCircuit::kDepth3   ? "depth3"
                    : c == aes::SboxCircuit::kDepth4 ? "depth4"
                                                     : "depth6",
                    n,
                    best * 1e3, best * 1e6 / n);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  engine::EngineOptions opt;
  int reps = 0;
  bool only128 = false;
  bool solo = false;
  uint32_t job_blocks = 62;  // typical Kerberos message: no extra H powers
  std::vector<uint32_t> sizes = {1, 128, 12800, 100000};
  for (int a = 1; a < argc; ++a) {
    std::string s = argv[a];
    if (s == "--avx2") aes::ForceAvx2(true);
    else if (s == "--aesni") protocol::PrfForceAesNi(true);
    else if (s.rfind("--chunk=", 0) == 0) opt.chunk_lanes = std::stoul(s.substr(8));
    else if (s.rfind("--wave=", 0) == 0) opt.wave_lanes = std::stoul(s.substr(7));
    else if (s.rfind("--verify-words=", 0) == 0) opt.verify_words = std::stoul(s.substr(15));
    else if (s == "--depth3") opt.depth3_max_blocks = ~0u;
    else if (s == "--depth4") opt.small_sbox_min_blocks = ~0u, opt.depth3_max_blocks = 0;
    else if (s == "--aes128") only128 = true;
    else if (s == "--solo") solo = true;
    else if (s.rfind("--job-blocks=", 0) == 0) job_blocks = std::stoul(s.substr(13));
    else if (s == "--depth6") opt.small_sbox_min_blocks = 0, opt.depth3_max_blocks = 0;
    else if (s == "--malicious") opt.malicious = true;
    else if (s.rfind("--reps=", 0) == 0) reps = std::stoi(s.substr(7));
    else if (s.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      std::string v = s.substr(8);
      size_t p = 0;
      while (p < v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        sizes.push_back(std::stoul(v.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", s.c_str());
      return 2;
    }
  }
  std::printf("kernel=%s prf=%s chunk_lanes=%u wave_lanes=%u depth3_to=%u depth6_from=%u "
              "blocks job_blocks=%u\n",
              aes::KernelName(), protocol::PrfImplementation(), opt.chunk_lanes,
              opt.wave_lanes, opt.depth3_max_blocks, opt.small_sbox_min_blocks, job_blocks);
  if (solo) {
    aes::SharedOptions o;
    o.chunk_lanes = opt.chunk_lanes;
    o.wave_lanes = opt.wave_lanes;
    Solo(sizes, o, reps);
    return 0;
  }
  net::InMemoryRing ring(std::chrono::milliseconds(60000));
  std::unique_ptr<engine::Engine> eng[3];
  {
    std::thread t[3];
    for (int i = 0; i < 3; ++i) {
      t[i] = std::thread([&, i] { eng[i] = std::move(*engine::Engine::Create(ring.party(i), opt)); });
    }
    for (auto& x : t) x.join();
  }
  uint64_t seq = 1;
  for (engine::Cipher cipher : {engine::Cipher::kAes128, engine::Cipher::kAes256}) {
    if (only128 && cipher != engine::Cipher::kAes128) continue;
    std::vector<uint8_t> key(engine::KeyBytes(cipher));
    (void)share::RandomBytes(absl::MakeSpan(key));
    auto views = engine::DealKey(cipher, key);
    std::shared_ptr<const engine::KeyShares> ks[3];
    for (int i = 0; i < 3; ++i) ks[i] = std::make_shared<engine::KeyShares>((*views)[i]);
    for (uint32_t n : sizes) {
      std::vector<engine::Job> jobs;
      // ENCRYPT jobs of up to job_blocks blocks; each adds the AES_K(c0)
      // block (counted in bytes/block, not in blocks/s).
      uint32_t left = n;
      while (left > 0) {
        engine::Job j;
        j.type = kmpc::v1::JOB_ENCRYPT;
        j.cipher = static_cast<kmpc::v1::Cipher>(cipher);
        j.key_id = std::string(contract::kKeyIdSize, 'k');
        j.usage = 1;
        j.nblocks = std::min<uint32_t>(left, job_blocks);
        left -= j.nblocks;
        jobs.push_back(j);
      }
      const int r = reps > 0 ? reps : (n <= 128 ? 200 : n <= 12800 ? 10 : 3);
      std::vector<double> times;
      auto cpu_now = [] {
        rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
               1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
      };
      const double cpu0 = cpu_now();
      const uint64_t bytes0 = ring.bytes_sent(0), msgs0 = ring.messages_sent(0);
      for (int rep = 0; rep < r; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        std::thread t[3];
        bool ok[3] = {false, false, false};
        for (int i = 0; i < 3; ++i) {
          t[i] = std::thread([&, i] {
            engine::KeyLookup lookup = [&](absl::string_view)
                -> absl::StatusOr<std::shared_ptr<const engine::KeyShares>> { return ks[i]; };
            auto res = eng[i]->RunBatch(seq, jobs, lookup);
            ok[i] = res.ok() && res->jobs[0].ok();
          });
        }
        for (auto& x : t) x.join();
        ++seq;
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!ok[0] || !ok[1] || !ok[2]) {
          std::fprintf(stderr, "batch failed\n");
          return 1;
        }
        times.push_back(dt);
      }
      const double cpu = (cpu_now() - cpu0) / r;
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double lanes = n + jobs.size();
      const double bytes = double(ring.bytes_sent(0) - bytes0) / r;
      const double msgs = double(ring.messages_sent(0) - msgs0) / r;
      std::printf("%s n=%6u  median %9.3f ms  min %9.3f ms  %10.0f blocks/s  "
                  "%7.1f bytes/block/party  %5.0f msgs/batch  cpu %7.3f us/block "
                  "(3 parties)\n",
                  cipher == engine::Cipher::kAes128 ? "AES-128" : "AES-256", n,
                  med * 1e3, times[0] * 1e3, n / med, bytes / lanes, msgs,
                  cpu * 1e6 / n);
      std::fflush(stdout);
    }
  }
  return 0;
}
