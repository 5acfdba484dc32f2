// A received request's shares are wiped before any buffer that held them is
// freed (service/request_wipe.h). This binary replaces free(): while a
// server runs, every block it frees is scanned for an 8-byte marker of which
// the request's shares are made, and each block holding one is counted. The
// client is a child process (forked before gRPC starts in this one) over
// loopback TCP, so its own buffers are not counted: what is counted is what
// the server received, parsed and freed.
#include "service/request_wipe.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "kmpc.grpc.pb.h"

extern "C" void __libc_free(void* p);

namespace {

// The shares of phase v are made of kMarker with each byte XOR v: a block
// that a later allocation reused without overwriting it all still holds an
// earlier phase's pattern, which must not count against this one.
constexpr unsigned char kMarker[8] = {0xC3, 0x5A, 0x96, 0x3C, 0xE1, 0x7B, 0x0F, 0xA4};
unsigned char g_marker[8];  // the armed phase's; set while disarmed
std::atomic<bool> g_armed{false};
std::atomic<int> g_hits{0};
// The first hits of a phase, for the failure message: block size, and how
// many bytes from the first marker on still hold the shares' pattern.
struct Hit {
  size_t size, run;
};
Hit g_hit_log[16];

}  // namespace

// The hook: a freed block that holds the marker while armed is a hit.
extern "C" void free(void* p) {
  if (p != nullptr && g_armed.load(std::memory_order_relaxed)) {
    const size_t n = malloc_usable_size(p);
    if (const void* m = memmem(p, n, g_marker, sizeof(g_marker))) {
      const int k = g_hits.fetch_add(1, std::memory_order_relaxed);
      if (k < 16) {
        const auto* b = static_cast<const unsigned char*>(m);
        const auto* e = static_cast<const unsigned char*>(p) + n;
        size_t run = 0;
        while (b + run < e && b[run] == g_marker[run % 8]) ++run;
        g_hit_log[k] = {n, run};
      }
    }
  }
  __libc_free(p);
}

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

// Made once per variant, before any phase is armed: building it frees
// blocks holding the pattern.
const std::string& Shares(int v) {
  static std::string* made[256];
  if (made[v] == nullptr) {
    auto* s = new std::string;
    for (int i = 0; i < 64; ++i)
      for (unsigned char c : kMarker) s->push_back(static_cast<char>(c ^ v));
    made[v] = s;
  }
  return *made[v];
}

// Answers OK and leaves the request as it got it (the wiping is the
// handler wrapper's); records whether it saw the shares intact.
class PlainKeyOps : public pb::KeyOps::Service {
 public:
  explicit PlainKeyOps(int v) : v_(v) {}
  grpc::Status Run(grpc::ServerContext*, const pb::RunRequest* q, pb::RunResponse*) override {
    seen_ok = seen_ok && q->data_shares() == Shares(v_);
    return grpc::Status::OK;
  }
  grpc::Status Sign(grpc::ServerContext*, const pb::SignRequest* q, pb::SignResponse*) override {
    seen_ok = seen_ok && q->data_shares() == Shares(v_);
    return grpc::Status::OK;
  }
  std::atomic<bool> seen_ok{true};

 private:
  const int v_;
};

class SliceRecorder : public RequestWipeObserver {
 public:
  void ReceivedSliceWiped(absl::string_view method, const uint8_t* data, size_t n) override {
    std::lock_guard<std::mutex> l(mu);
    methods.insert(std::string(method));
    bytes += n;
    zero = zero && std::all_of(data, data + n, [](uint8_t b) { return b == 0; });
  }
  std::mutex mu;
  std::set<std::string> methods;
  size_t bytes = 0;
  bool zero = true;
};

// The child: for each (port, reps, variant) the parent writes, reps times
// one Run and one Sign carrying Shares(variant), then one byte back; port 0
// ends it.
[[noreturn]] void Client(int from_parent, int to_parent) {
  int job[3];
  while (read(from_parent, job, sizeof(job)) == sizeof(job) && job[0] != 0) {
    auto stub = pb::KeyOps::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(job[0]), grpc::InsecureChannelCredentials()));
    pb::RunRequest run;
    run.set_data_shares(Shares(job[2]));
    pb::SignRequest sign;
    sign.set_data_shares(Shares(job[2]));
    char ok = 1;
    for (int i = 0; i < job[1] && ok; ++i) {
      pb::RunResponse r1;
      pb::SignResponse r2;
      grpc::ClientContext c1, c2;
      c1.set_wait_for_ready(true);
      c2.set_wait_for_ready(true);
      ok = stub->Run(&c1, run, &r1).ok() && stub->Sign(&c2, sign, &r2).ok();
    }
    if (write(to_parent, &ok, 1) != 1) break;
  }
  _exit(0);
}

struct Phase {
  int hits = -1;
  bool client_ok = false;
  double us_per_request = 0;      // wall time
  double cpu_us_per_request = 0;  // this process's CPU time: the server's
};

double ProcessCpuUs() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

// Serves svc on a loopback port for reps Runs and Signs from the child;
// with armed, counts the freed blocks holding the marker until the server
// is gone.
Phase Serve(grpc::Service* svc, int v, int to_child, int from_child, int reps,
            bool armed) {
  Phase out;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(svc);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (server == nullptr || port == 0) return out;
  g_hits = 0;
  for (int i = 0; i < 8; ++i) g_marker[i] = kMarker[i] ^ v;
  g_armed = armed;
  char ok = 0;
  const int job[3] = {port, reps, v};
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuUs();
  if (write(to_child, job, sizeof(job)) == sizeof(job) && read(from_child, &ok, 1) == 1)
    out.client_ok = ok == 1;
  out.cpu_us_per_request = (ProcessCpuUs() - cpu0) / (2.0 * reps);
  out.us_per_request = std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - t0).count() / (2.0 * reps);
  server->Shutdown();
  server->Wait();
  server.reset();
  g_armed = false;
  out.hits = g_hits.load();
  return out;
}

TEST(RequestWipe, NoFreedServerBufferHoldsARequestsShares) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kPlain = 0, kWiping = 0x33;  // the two phases' variants
  ASSERT_EQ(Shares(kPlain).size(), 512u);
  ASSERT_EQ(Shares(kWiping).size(), 512u);
  int p2c[2], c2p[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) Client(p2c[0], c2p[1]);

  // The generated service, as registered before: the received bytes and
  // the parsed strings are freed as they are (what the hook must see).
  PlainKeyOps plain(kPlain);
  const Phase before = Serve(&plain, kPlain, p2c[1], c2p[0], 1, true);
  // The same service behind WipingKeyOps, as main.cc registers it.
  SliceRecorder rec;
  SetRequestWipeObserverForTesting(&rec);
  PlainKeyOps inner(kWiping);
  std::unique_ptr<grpc::Service> wiping = WipingKeyOps(&inner);
  const Phase after = Serve(wiping.get(), kWiping, p2c[1], c2p[0], 1, true);
  SetRequestWipeObserverForTesting(nullptr);
  // The cost (KMPC_REQUEST_WIPE_BENCH=N: N Run+Sign pairs per phase, the
  // hook off, each service twice, alternating; one connection per phase).
  if (const char* n = std::getenv("KMPC_REQUEST_WIPE_BENCH")) {
    const int reps = std::max(1, std::atoi(n));
    constexpr int kRounds = 4;
    double plain_us = 0, wiping_us = 0, plain_cpu = 0, wiping_cpu = 0;
    for (int round = 0; round < kRounds; ++round) {
      const Phase p = Serve(&plain, kPlain, p2c[1], c2p[0], reps, false);
      const Phase w = Serve(wiping.get(), kWiping, p2c[1], c2p[0], reps, false);
      plain_us += p.us_per_request / kRounds;
      plain_cpu += p.cpu_us_per_request / kRounds;
      wiping_us += w.us_per_request / kRounds;
      wiping_cpu += w.cpu_us_per_request / kRounds;
    }
    std::printf("request_wipe_test bench: %d rounds of %d unary requests (%zu share "
                "bytes) per service: generated handler %.1f us wall, %.1f us server "
                "CPU per request; wiping handler %.1f us wall, %.1f us server CPU\n",
                kRounds, 2 * reps, Shares(kPlain).size(), plain_us, plain_cpu, wiping_us,
                wiping_cpu);
  }

  const int stop = 0;
  ASSERT_EQ(write(p2c[1], &stop, sizeof(stop)), static_cast<ssize_t>(sizeof(stop)));
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);

  EXPECT_TRUE(before.client_ok);
  EXPECT_TRUE(plain.seen_ok);
  EXPECT_GT(before.hits, 0) << "the hook saw no unwiped request buffer";
  EXPECT_TRUE(after.client_ok);
  EXPECT_TRUE(inner.seen_ok) << "the handler did not get the shares intact";
  std::string hits;
  for (int i = 0; i < std::min(after.hits, 16); ++i)
    hits += " " + std::to_string(g_hit_log[i].size) + "/" + std::to_string(g_hit_log[i].run);
  EXPECT_EQ(after.hits, 0) << "freed blocks still held the request's shares "
                           << "(block size/pattern bytes):" << hits;
  EXPECT_EQ(rec.methods, (std::set<std::string>{"/kmpc.v1.KeyOps/Run",
                                                 "/kmpc.v1.KeyOps/Sign"}));
  EXPECT_GE(rec.bytes, 2 * Shares(kWiping).size());
  EXPECT_TRUE(rec.zero);
  std::printf("request_wipe_test: unwiped blocks freed: %d before, %d after; %lld ms\n",
              before.hits, after.hits,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count()));
}

// Every string and bytes field, nested and repeated, is zeroed in place
// (sizes kept); the others are untouched.
TEST(RequestWipe, WipeMessageStringsReachesNestedFields) {
  pb::SignRequest s;
  s.set_data_shares(Shares(0));
  s.set_request_id(std::string(16, '\x11'));
  pb::SignItem* it = s.add_items();
  it->set_run_batch_id(std::string(16, '\x22'));
  it->set_job_id(7);
  WipeMessageStrings(&s);
  auto zero = [](const std::string& x) {
    return std::all_of(x.begin(), x.end(), [](char c) { return c == 0; });
  };
  EXPECT_EQ(s.data_shares().size(), Shares(0).size());
  EXPECT_TRUE(zero(s.data_shares()));
  EXPECT_TRUE(zero(s.request_id()));
  EXPECT_TRUE(zero(s.items(0).run_batch_id()));
  EXPECT_EQ(s.items(0).job_id(), 7u);
}

// A method of kmpc.proto without a wiping handler would answer
// UNIMPLEMENTED; the factories refuse to build such a service.
TEST(RequestWipeDeathTest, AServiceMissingAMethodIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  pb::KeyOps::Service keyops;
  pb::Admin::Service admin;
  EXPECT_NE(WipingKeyOps(&keyops), nullptr);
  EXPECT_NE(WipingAdmin(&admin), nullptr);
  using S = pb::KeyOps::Service;
  EXPECT_DEATH(
      {
        WipingService partial;
        partial.AddUnary("/kmpc.v1.KeyOps/Run", &keyops, &S::Run);
        partial.AddUnary("/kmpc.v1.KeyOps/Finalize", &keyops, &S::Finalize);
        partial.RequireEveryMethodOf("kmpc.v1.KeyOps");
      },
      "a method of kmpc.v1.KeyOps has no wiping handler");
}

}  // namespace
}  // namespace kmpc::service
