// The module's C++ core through its C interface (core.h, module.cc), as
// kmpc_kdc.c drives it: options refused with a clear message, jobs refused
// at submit (malformed, not an MPC enctype, a job type not served under an
// aes*-cts key, an unknown job type), and an accepted job completed on the eventfd with the krb5 error
// its failure maps to (KRB5KDC_ERR_SVC_UNAVAILABLE: no server listens).
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kdcmpc_job.h"
#include "test_util.h"

extern "C" {
#include <krb5/krb5.h>
#include <krb5/kdcmpc_plugin.h>

#include "core.h"
#include "openssl_at_exit.h"
}

namespace {

struct Done {
  int calls = 0;
};
void OnDone(void* arg, krb5_error_code, krb5_data) {
  ++static_cast<Done*>(arg)->calls;  // never called: kmpc_core_next hands back
}

krb5_error_code Create(std::vector<std::string> opts, kmpc_core** core,
                       std::string* msg) {
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  argv.push_back(nullptr);
  char* m = nullptr;
  krb5_error_code code = kmpc_core_create(argv.data(), core, &m);
  *msg = m ? m : "";
  free(m);
  return code;
}

TEST(ModuleOptionsTest, BadOptionsAreRefusedWithTheirName) {
  kmpc_core* core = nullptr;
  std::string msg;
  EXPECT_EQ(Create({"servers = 127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "certs = /c",
                    "batch_windw_ms = 5"}, &core, &msg), EINVAL);
  EXPECT_EQ(core, nullptr);
  EXPECT_TRUE(absl::StrContains(msg, "unknown kdcmpc option \"batch_windw_ms\"")) << msg;
}

class ModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kmpc::testing::MakeTestCerts("kmpc-module-test");
    ASSERT_FALSE(dir_.empty());
    for (int i = 0; i < 3; ++i)
      servers_ += absl::StrCat(i ? "," : "", "127.0.0.1:",
                               kmpc::testing::FreeLoopbackPort());
    Recreate("batch_window_ms = 5");
  }
  // A new core on the same (unreachable) servers with option `extra`.
  void Recreate(const std::string& extra) {
    if (core_) kmpc_core_destroy(core_);
    core_ = nullptr;
    std::string msg;
    ASSERT_EQ(Create({"servers = " + servers_, "certs = " + dir_ + "/certs",
                      "deadline_ms = 1000", extra}, &core_, &msg), 0)
        << msg;
  }
  void TearDown() override {
    if (core_) kmpc_core_destroy(core_);
  }
  krb5_error_code Submit(const krb5_kdcmpc_job& job, std::string* msg) {
    char* m = nullptr;
    krb5_error_code code = kmpc_core_submit(core_, &job, OnDone, &done_, 0, &m);
    *msg = m ? m : "";
    free(m);
    return code;
  }
  krb5_kdcmpc_job Encrypt() {
    return kmpc::kdc::testing::EncryptJob(key_id_, plaintext_);
  }

  std::string dir_, servers_;
  kmpc_core* core_ = nullptr;
  Done done_;
  unsigned char key_id_[KRB5_KDCMPC_KEY_ID_LEN] = {1};
  char plaintext_[20] = "a plaintext ticket";
};

TEST_F(ModuleTest, JobsTheModuleCannotTakeAreRefusedAtSubmit) {
  std::string msg;
  krb5_kdcmpc_job no_key = Encrypt();
  no_key.key_id = nullptr;
  EXPECT_EQ(Submit(no_key, &msg), EINVAL);
  EXPECT_EQ(msg, "kdcmpc: malformed job");
  krb5_kdcmpc_job rc4 = Encrypt();
  rc4.enctype = ENCTYPE_ARCFOUR_HMAC;
  EXPECT_EQ(Submit(rc4, &msg), KRB5_BAD_ENCTYPE);
  EXPECT_EQ(msg, "kdcmpc: not an MPC enctype");
  // A handle of aes*-cts-hmac-sha1-96 names a key of CIPHER_AES*_CTS, under
  // which the core serves DECRYPT, ENCRYPT and CHECKSUM only (cts_items.h):
  // anything else is refused, as unavailable.
  krb5_kdcmpc_job cts = Encrypt();
  cts.enctype = ENCTYPE_AES128_CTS_HMAC_SHA1_96;
  cts.type = KRB5_KDCMPC_VERIFY;
  EXPECT_EQ(Submit(cts, &msg), KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(msg, "kdcmpc: VERIFY_CHECKSUM jobs under aes*-cts-hmac-sha1-96 keys are not "
                 "served");
  // Outside a plan only a service ticket's ENCRYPT (usage 2), PAC server
  // signature (CHECKSUM, usage 17) and CAMMAC service verifier (CHECKSUM,
  // usage 64); the AS jobs (DECRYPT usage 1,
  // ENCRYPT usage 3, CHECKSUM usage 56) and a DECRYPT of a ticket (usage
  // 2) only as plan items, or not at all.
  cts.enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  const std::pair<krb5_kdcmpc_job_type, krb5_keyusage> plan_only[] = {
      {KRB5_KDCMPC_DECRYPT, 1}, {KRB5_KDCMPC_DECRYPT, 2}, {KRB5_KDCMPC_ENCRYPT, 3},
      {KRB5_KDCMPC_CHECKSUM, 56}, {KRB5_KDCMPC_CHECKSUM, 2}};
  for (const auto& [t, u] : plan_only) {
    cts.type = t;
    cts.usage = u;
    EXPECT_EQ(Submit(cts, &msg), KRB5KDC_ERR_SVC_UNAVAILABLE) << t << " " << u;
    EXPECT_EQ(msg, "kdcmpc: jobs under aes*-cts-hmac-sha1-96 keys are served only as "
                   "items of an exchange plan, but for a service ticket's (ENCRYPT "
                   "usage 2, CHECKSUM usage 17 or 64)");
  }
  krb5_kdcmpc_job unknown = Encrypt();
  unknown.type = static_cast<krb5_kdcmpc_job_type>(99);
  EXPECT_EQ(Submit(unknown, &msg), EINVAL);
  EXPECT_EQ(msg, "kdcmpc: unknown job type");
  {
    kmpc_completion c;
    EXPECT_EQ(kmpc_core_next(core_, &c), 0);  // nothing was accepted
  }
  EXPECT_EQ(done_.calls, 0);
}

// A service ticket to a principal under an aes*-cts handle: its ENCRYPT
// (usage 2) and PAC server signature (CHECKSUM, usage 17) are taken
// outside a plan, and complete (here: unavailable, the cluster is
// unreachable).
TEST_F(ModuleTest, AServiceTicketsJobsUnderACtsHandleAreTakenOutsideAPlan) {
  std::string msg;
  krb5_kdcmpc_job enc = Encrypt();
  enc.enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  ASSERT_EQ(Submit(enc, &msg), 0) << msg;
  krb5_kdcmpc_job ck = enc;
  ck.type = KRB5_KDCMPC_CHECKSUM;
  ck.usage = 17;
  ASSERT_EQ(Submit(ck, &msg), 0) << msg;
  kmpc_core_kick(core_);
  int got = 0;
  for (int i = 0; i < 100 && got < 2; ++i) {
    pollfd p{kmpc_core_fd(core_), POLLIN, 0};
    poll(&p, 1, 100);
    kmpc_core_ack(core_);
    int level;
    char* line;
    while (kmpc_core_next_log(core_, &level, &line)) free(line);
    kmpc_completion c{};
    while (kmpc_core_next(core_, &c) != 0) {
      ++got;
      EXPECT_EQ(c.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
      EXPECT_EQ(c.output.length, 0u);
      free(c.message);
      free(c.output.data);
      c = {};
    }
  }
  EXPECT_EQ(got, 2) << "no completion within 10 s";
}

TEST_F(ModuleTest, AnUnreachableClusterCompletesTheJobAsServiceUnavailable) {
  std::string msg;
  ASSERT_EQ(Submit(Encrypt(), &msg), 0) << msg;
  kmpc_core_kick(core_);
  kmpc_completion c{};
  bool got = false;
  for (int i = 0; i < 100 && !got; ++i) {
    pollfd p{kmpc_core_fd(core_), POLLIN, 0};
    poll(&p, 1, 100);
    kmpc_core_ack(core_);
    int level;
    char* line;
    while (kmpc_core_next_log(core_, &level, &line)) free(line);
    got = kmpc_core_next(core_, &c) != 0;
  }
  ASSERT_TRUE(got) << "no completion within 10 s";
  EXPECT_EQ(c.done, &OnDone);
  EXPECT_EQ(c.arg, &done_);
  EXPECT_EQ(c.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(c.output.length, 0u);
  ASSERT_NE(c.message, nullptr);
  EXPECT_TRUE(absl::StrContains(c.message, "unreachable") ||
              absl::StrContains(c.message, "did not answer"))
      << c.message;
  // The plaintext is never in the message.
  EXPECT_FALSE(absl::StrContains(c.message, plaintext_));
  free(c.message);
  free(c.output.data);
  EXPECT_EQ(done_.calls, 0);  // the KDC's loop calls done, not the core
}

// kmpc_core_arm_kick with a full eventfd counter (a write would pass
// 2^64 - 2: EAGAIN): the fd is readable, so the kick is armed.
TEST_F(ModuleTest, AFullEventfdCounterCountsAsArmed) {
  ASSERT_EQ(kmpc_core_arm_kick(core_), 1);  // early flush is on by default
  kmpc_core_ack(core_);
  const uint64_t almost_full = 0xfffffffffffffffeULL;
  ASSERT_EQ(write(kmpc_core_fd(core_), &almost_full, sizeof(almost_full)),
            static_cast<ssize_t>(sizeof(almost_full)));
  EXPECT_EQ(kmpc_core_arm_kick(core_), 1);
  pollfd p{kmpc_core_fd(core_), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
  kmpc_core_ack(core_);
}

// An eventfd that cannot be written (here: a read-only fd in its place)
// cannot arm the kick: the kick happens at once, so a job queued under a
// 60 s window still goes to the cluster now and completes (servers
// unreachable) long before the window; the failure is logged once.
TEST_F(ModuleTest, AnUnwritableEventfdKicksAtOnceAndLogsOnce) {
  Recreate("batch_window_ms = 60000");
  const int ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  ASSERT_EQ(dup2(ro, kmpc_core_fd(core_)), kmpc_core_fd(core_));
  close(ro);
  std::string msg;
  ASSERT_EQ(Submit(Encrypt(), &msg), 0) << msg;
  EXPECT_EQ(kmpc_core_arm_kick(core_), 0);
  EXPECT_EQ(kmpc_core_arm_kick(core_), 0);
  kmpc_completion c{};
  bool got = false;
  int failures_logged = 0;
  for (int i = 0; i < 100 && !got; ++i) {  // no wake-up: the fd is /dev/null
    absl::SleepFor(absl::Milliseconds(100));
    int level;
    char* line;
    while (kmpc_core_next_log(core_, &level, &line)) {
      if (absl::StrContains(line, "cannot arm the event loop's kick")) ++failures_logged;
      free(line);
    }
    got = kmpc_core_next(core_, &c) != 0;
  }
  ASSERT_TRUE(got) << "the job waited: the kick was lost";
  EXPECT_EQ(c.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(failures_logged, 1);
  free(c.message);
  free(c.output.data);
}

}  // namespace
