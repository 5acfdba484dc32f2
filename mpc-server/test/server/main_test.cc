// kmpc-mpc-server's main (src/main.cc): its flags, the configuration
// errors it refuses before serving (one message, exit code 1), --flagfile,
// the store lock, and a clean exit 0 on SIGTERM. The built binary is run as
// the systemd unit runs it (KMPC_MPC_SERVER, set by CMake), with certificates
// from deploy/gen-certs.sh (test_util.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using kmpc::testing::FreeLoopbackPort;
using kmpc::testing::MakeTempDir;
using kmpc::testing::MakeTestCerts;
using ::testing::HasSubstr;

// A running kmpc-mpc-server; its stdout and stderr read together.
struct Server {
  pid_t pid = -1;
  int out = -1;
  std::string output;

  explicit Server(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      std::vector<char*> argv{const_cast<char*>(KMPC_MPC_SERVER)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(KMPC_MPC_SERVER, argv.data());
      _exit(127);
    }
    close(fds[1]);
    out = fds[0];
  }
  ~Server() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
  }

  // Reads output until it holds `text` or the output ends; false after
  // timeout_ms.
  bool ReadUntil(const std::string& text, int timeout_ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (output.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now()).count();
      pollfd p{out, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      ssize_t n = read(out, buf, sizeof(buf));
      if (n <= 0) return false;
      output.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // Waits for the exit (killing it after timeout_ms); the exit code, or
  // 128 + the signal.
  int Wait(int timeout_ms) {
    while (ReadUntil("\x01never\x01", timeout_ms)) {}
    int status = 0;
    for (int i = 0; i < timeout_ms / 10 && waitpid(pid, &status, WNOHANG) == 0; ++i)
      usleep(10000);
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class MainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTestCerts("main-test"));
    ASSERT_FALSE(dir_->empty()) << "deploy/gen-certs.sh failed";
  }
  static void TearDownTestSuite() { delete dir_; }

  std::string certs() const { return *dir_ + "/certs"; }

  // A complete, valid command line of party 0 with a fresh store, then
  // extra flags (a later flag overrides an earlier one).
  std::vector<std::string> Flags(std::vector<std::string> extra = {}) {
    store_ = MakeTempDir("main-store");
    std::vector<std::string> f{
        "--party=0", absl::StrCat("--listen=127.0.0.1:", FreeLoopbackPort()),
        absl::StrCat("--ring_listen=127.0.0.1:", FreeLoopbackPort()),
        absl::StrCat("--ring_prev=127.0.0.1:", FreeLoopbackPort()),
        "--cert=" + certs() + "/party-0.pem", "--key=" + certs() + "/party-0.key",
        "--ca=" + certs() + "/ca.pem", "--store_dir=" + store_};
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  }

  // Runs the server with args; it must exit 1 having said `message` once.
  void ExpectRefused(const std::vector<std::string>& args, const std::string& message) {
    Server s(args);
    ASSERT_GT(s.pid, 0);
    EXPECT_EQ(s.Wait(10000), 1) << s.output;
    EXPECT_EQ(Count(s.output, message), 1) << s.output;
    EXPECT_THAT(s.output, ::testing::Not(HasSubstr("listening on"))) << s.output;
  }

  static std::string* dir_;
  std::string store_;
};
std::string* MainTest::dir_ = nullptr;

TEST_F(MainTest, ValidFlagsServeUntilSigtermThenExitZero) {
  Server s(Flags());
  ASSERT_TRUE(s.ReadUntil("listening on", 15000)) << s.output;
  EXPECT_THAT(s.output, HasSubstr("party 0 listening on 127.0.0.1:"));
  EXPECT_THAT(s.output, HasSubstr("2 workers, security malicious"));  // the default
  kill(s.pid, SIGTERM);
  EXPECT_EQ(s.Wait(10000), 0) << s.output;
  EXPECT_THAT(s.output, HasSubstr("signal 15: shutting down"));
}

// --help: the server's own flags, main.cc's and the engine's (abseil's
// default matches none of a binary named kmpc-mpc-server).
TEST_F(MainTest, HelpListsTheServersOwnFlags) {
  Server s({"--help"});
  ASSERT_GT(s.pid, 0);
  EXPECT_EQ(s.Wait(10000), 1) << s.output;
  for (const char* flag : {"--party (", "--ring_spin_us (", "--cts_masked_gates (",
                           "--security (", "--gate_decrypts_per_run ("})
    EXPECT_THAT(s.output, HasSubstr(flag)) << s.output;
  EXPECT_THAT(s.output, ::testing::Not(HasSubstr("No flags matched"))) << s.output;
}

TEST_F(MainTest, PartyOutOfRange) {
  ExpectRefused(Flags({"--party=3"}), "--party must be 0, 1 or 2");
  ExpectRefused(Flags({"--party=-1"}), "--party must be 0, 1 or 2");
}

TEST_F(MainTest, RequiredFlagMissing) {
  for (const char* empty : {"--cert=", "--key=", "--ca=", "--store_dir=", "--ring_prev="})
    ExpectRefused(Flags({empty}),
                  "--cert, --key, --ca, --store_dir and --ring_prev are required");
}

TEST_F(MainTest, EngineFlags) {
  ExpectRefused(Flags({"--security=paranoid"}),
                "--security must be semi-honest or malicious");
  ExpectRefused(Flags({"--small_sbox_min_blocks=-1"}), "--small_sbox_min_blocks must be >= 0");
  ExpectRefused(Flags({"--depth3_max_blocks=-2"}), "--depth3_max_blocks must be >= -1");
  ExpectRefused(Flags({"--chunk_lanes=100"}),
                "--chunk_lanes / --wave_lanes: chunk_lanes must be a positive multiple of 64");
  ExpectRefused(Flags({"--chunk_lanes=128", "--wave_lanes=64"}),
                "--chunk_lanes / --wave_lanes: wave_lanes must be >= chunk_lanes");
  // Too many checks per batch for protocol/verify.h's bound (malicious only).
  ExpectRefused(Flags({"--security=malicious", "--chunk_lanes=64", "--wave_lanes=64",
                       "--verify_words=1"}),
                "--chunk_lanes / --wave_lanes: --wave_lanes=64 with --security=malicious");
}

TEST_F(MainTest, CrlErrorsNameTheFlagOnce) {
  ExpectRefused(Flags({"--crl=/nonexistent/crl.pem"}), "--crl: CRL file /nonexistent/crl.pem");
  Server s(Flags({"--crl=/nonexistent/crl.pem", "--ca=/nonexistent/ca.pem"}));
  EXPECT_EQ(s.Wait(10000), 1) << s.output;
  EXPECT_THAT(s.output, HasSubstr("--crl: cannot read the CA file /nonexistent/ca.pem"));
  EXPECT_EQ(Count(s.output, "--crl:"), 1) << s.output;
}

TEST_F(MainTest, ClientPolicies) {
  ExpectRefused(Flags({"--keyops_clients=sha256:12"}), "--keyops_clients: ");
  ExpectRefused(Flags({"--admin_clients=sha256:12"}), "--admin_clients: ");
}

TEST_F(MainTest, ServiceLimitsMustBePositive) {
  ExpectRefused(Flags({"--encrypt_state_ttl_ms=0"}),
                "--encrypt_state_ttl_ms and --max_pending_encrypt_mb must be positive");
  ExpectRefused(Flags({"--max_pending_pad_mb=0"}),
                "--pad_ttl_ms and --max_pending_pad_mb must be positive");
}

// --allow_ungate_keys names keys with their dealing (KEYID:DEALID): a bare
// key id, a short id or a non-hex deal id is refused before serving.
TEST_F(MainTest, UngateEntriesNameTheKeyAndItsDealing) {
  const std::string kid(64, 'a'), deal(32, '0');
  for (const std::string& bad : {kid, kid + ":", kid + ":" + deal.substr(2),
                                 kid.substr(2) + ":" + deal, kid + ":" + deal + ":" + deal,
                                 kid + ":" + std::string(32, 'g')})
    ExpectRefused(Flags({"--allow_ungate_keys=" + bad}), "--allow_ungate_keys: \"");
  Server s(Flags({"--allow_ungate_keys=" + kid + ":" + deal + ", " + kid + ":" + deal}));
  ASSERT_TRUE(s.ReadUntil("listening on", 15000)) << s.output;
}

// The failure budget's flags (engine/gate_budget.h), and its file: a
// STORE_DIR/gate-failures that cannot be read stops the server.
TEST_F(MainTest, GateBudgetFlagsAndFile) {
  const std::string why =
      "--gate_decrypts_per_run and --gate_failures_per_window must be >= 0, "
      "--gate_failure_window_s positive";
  ExpectRefused(Flags({"--gate_decrypts_per_run=-1"}), why);
  ExpectRefused(Flags({"--gate_failures_per_window=-1"}), why);
  ExpectRefused(Flags({"--gate_failure_window_s=0"}), why);
  std::vector<std::string> flags = Flags();
  ASSERT_EQ(mkdir((store_ + "/gate-failures").c_str(), 0700), 0);  // a directory
  ExpectRefused(flags, "--gate_failures_per_window: ");
}

// The ring loads the certificate and key first (net/tls_conn.cc).
TEST_F(MainTest, UnreadableKeyMaterial) {
  ExpectRefused(Flags({"--key=/nonexistent/party-0.key"}),
                "cannot load private key /nonexistent/party-0.key");
  ExpectRefused(Flags({"--ca=/nonexistent/ca.pem"}), "cannot load CA /nonexistent/ca.pem");
}

TEST_F(MainTest, MetricsAddressThatCannotBeBound) {
  ExpectRefused(Flags({"--metrics_addr=192.0.2.1:1"}), "--metrics_addr 192.0.2.1:1: ");
}

TEST_F(MainTest, FlagfileIsReadAndCommandLineOverridesIt) {
  const std::string file = MakeTempDir("main-flags") + "/party.flags";
  std::vector<std::string> good = Flags();
  {
    std::ofstream f(file);
    for (const auto& flag : good) f << flag << "\n";
    f << "--party=7\n";
  }
  ExpectRefused({"--flagfile=" + file}, "--party must be 0, 1 or 2");
  Server s({"--flagfile=" + file, "--party=0"});
  ASSERT_TRUE(s.ReadUntil("listening on", 15000)) << s.output;
}

TEST_F(MainTest, SecondServerOnTheSameStoreStops) {
  std::vector<std::string> flags = Flags();
  Server first(flags);
  ASSERT_TRUE(first.ReadUntil("listening on", 15000)) << first.output;
  // Same store, other ports.
  flags.push_back(absl::StrCat("--listen=127.0.0.1:", FreeLoopbackPort()));
  flags.push_back(absl::StrCat("--ring_listen=127.0.0.1:", FreeLoopbackPort()));
  Server second(flags);
  EXPECT_EQ(second.Wait(10000), 1) << second.output;
  EXPECT_THAT(second.output, HasSubstr("is in use by another process")) << second.output;
  EXPECT_THAT(second.output, ::testing::Not(HasSubstr("listening on")));
}

}  // namespace
