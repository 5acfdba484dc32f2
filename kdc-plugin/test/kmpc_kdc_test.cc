// kmpc_kdc.c, the kdcmpc module's C entry, as krb5kdc drives it: the
// vtable (major version 1; minor 2 adds the exchange plan), init's refusals with the core's message
// in the krb5 context and no module data, the process made non-dumpable, the
// ready line in the KDC log, submit's refusals with their message, and a job
// completed through the verto loop with its krb5 error and message, done
// called exactly once by the loop, and fini leaving no gRPC at work. The
// KDC log (krb5_klog_syslog, from libkadm5srv_mit in krb5kdc) is recorded
// here. OpenSSL's atexit clean-up runs at this program's exit, as at
// krb5kdc's.
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include <grpc/grpc.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kdcmpc_job.h"
#include "test_util.h"

extern "C" {
#include <krb5/kdcmpc_plugin.h>
#include <krb5/krb5.h>
#include <verto.h>

krb5_error_code kdcmpc_kmpc_initvt(krb5_context, int, int, krb5_plugin_vtable);

std::vector<std::string>* g_log = nullptr;

// The KDC log, as libkadm5srv_mit's: recorded for the tests.
krb5_error_code krb5_klog_syslog(int, const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (g_log != nullptr) g_log->push_back(buf);
  return 0;
}
}

namespace {

struct Done {
  int calls = 0;
  krb5_error_code code = -1;
  size_t output_length = 0;
};

void OnDone(void* arg, krb5_error_code code, krb5_data output) {
  auto* d = static_cast<Done*>(arg);
  ++d->calls;
  d->code = code;
  d->output_length = output.length;
  free(output.data);
}

void OnTimeout(verto_ctx*, verto_ev*) {}

class KmpcKdcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_log = &log_;
    ASSERT_EQ(krb5_init_context(&ctx_), 0);
    vctx_ = verto_new(nullptr, static_cast<verto_ev_type>(VERTO_EV_TYPE_IO | VERTO_EV_TYPE_TIMEOUT));
    ASSERT_NE(vctx_, nullptr);
    ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(&vt_)), 0);
  }
  void TearDown() override {
    if (data_ != nullptr) vt_.fini(ctx_, data_);
    verto_free(vctx_);
    krb5_free_context(ctx_);
    g_log = nullptr;
  }

  // Options as the KDC passes them (profile relations "name = value").
  krb5_error_code Init(const std::vector<std::string>& opts) {
    std::vector<const char*> argv;
    for (const auto& o : opts) argv.push_back(o.c_str());
    argv.push_back(nullptr);
    return vt_.init(ctx_, vctx_, argv.data(), &data_);
  }

  // Options of a module whose three servers do not listen.
  std::vector<std::string> UnreachableCluster() {
    dir_ = kmpc::testing::MakeTestCerts("kmpc-kdc-test");
    EXPECT_FALSE(dir_.empty());
    std::string servers;
    for (int i = 0; i < 3; ++i)
      servers += absl::StrCat(i ? "," : "", "127.0.0.1:", kmpc::testing::FreeLoopbackPort());
    return {"servers = " + servers, "certs = " + dir_ + "/certs", "deadline_ms = 1000",
            "batch_window_ms = 5"};
  }

  // UnreachableCluster, where a job nobody kicks waits out a 1 s coalesce
  // delay (and no window flushes it) and a sent job fails at a 50 ms
  // deadline: a kicked job completes after ~50 ms, an unkicked one after
  // more than 1 s, so a loaded host (ctest -j on 2 cores) has ~0.9 s of
  // slack between the two.
  std::vector<std::string> UnkickedUnreachableCluster() {
    std::vector<std::string> opts = UnreachableCluster();
    opts[2] = "deadline_ms = 50";
    opts.push_back("coalesce_us = 1000000");
    opts.push_back("batch_window_ms = 60000");
    return opts;
  }

  std::string Message(krb5_error_code code) {
    const char* m = krb5_get_error_message(ctx_, code);
    std::string s = m;
    krb5_free_error_message(ctx_, m);
    return s;
  }

  krb5_kdcmpc_job Encrypt() {
    return kmpc::kdc::testing::EncryptJob(key_id_, plaintext_);
  }

  // One turn of the verto loop, 50 ms at the most.
  void Turn() {
    verto_add_timeout(vctx_, VERTO_EV_FLAG_NONE, OnTimeout, 50);
    verto_run_once(vctx_);
  }

  // Runs the verto loop until `done()` or `limit` of wall clock has
  // passed. A turn can end early (the core's log lines wake the loop while
  // it retries the unreachable servers), so the bound is time, not turns.
  void RunLoopUntil(const std::function<bool()>& done,
                    std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < end) Turn();
  }
  void RunLoopUntilDone(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    RunLoopUntil([&] { return done_.calls != 0; }, limit);
  }

  krb5_context ctx_ = nullptr;
  verto_ctx* vctx_ = nullptr;
  krb5_kdcmpc_vtable_st vt_{};
  krb5_kdcmpc_moddata data_ = nullptr;
  std::vector<std::string> log_;
  std::string dir_;
  Done done_;
  unsigned char key_id_[KRB5_KDCMPC_KEY_ID_LEN] = {1};
  char plaintext_[20] = "a plaintext ticket";
};

TEST_F(KmpcKdcTest, OnlyInterfaceVersionOneIsServed) {
  krb5_kdcmpc_vtable_st other{};
  EXPECT_EQ(kdcmpc_kmpc_initvt(ctx_, 2, 0, reinterpret_cast<krb5_plugin_vtable>(&other)),
            KRB5_PLUGIN_VER_NOTSUPP);
  EXPECT_EQ(other.name, nullptr);
  EXPECT_EQ(other.init, nullptr);
  EXPECT_STREQ(vt_.name, "kmpc");
  EXPECT_NE(vt_.init, nullptr);
  EXPECT_NE(vt_.fini, nullptr);
  EXPECT_NE(vt_.submit, nullptr);
}

// A KDC that asks for minor version 1 (no plans: every job would run
// alone) is refused with a LOG_ERR line saying why; one that asks for 2
// gets submit and the exchange plan's begin, submit_item and end.
TEST_F(KmpcKdcTest, MinorVersionTwoAddsTheExchangePlan) {
  for (int minor : {0, 1}) {
    krb5_kdcmpc_vtable_st one{};
    log_.clear();
    EXPECT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, minor, reinterpret_cast<krb5_plugin_vtable>(&one)),
              KRB5_PLUGIN_VER_NOTSUPP);
    ASSERT_EQ(log_.size(), 1u);
    EXPECT_TRUE(absl::StrContains(log_[0], "needs the kdcmpc exchange plan (interface 1.2); "
                                           "this KDC offers 1." + std::to_string(minor)))
        << log_[0];
  }
  krb5_kdcmpc_vtable_st two{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(&two)), 0);
  EXPECT_NE(two.submit, nullptr);
  EXPECT_NE(two.begin, nullptr);
  EXPECT_NE(two.submit_item, nullptr);
  EXPECT_NE(two.end, nullptr);
}

// A renewal's plan through the C entry: refusals (FAST, a role's wrong
// usage, a job that is not its item's) with their message; the given
// ticket completes through the loop (here: the cluster is unreachable) and
// end takes the exchange back.
TEST_F(KmpcKdcTest, PlansAreCheckedAndTheirGivenItemsCompleteThroughTheLoop) {
  krb5_kdcmpc_vtable_st vt{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(&vt)), 0);
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  char ct[80] = {0};
  ct[15] = 1;
  krb5_kdcmpc_item items[2] = {};
  items[0].role = KRB5_KDCMPC_ROLE_HEADER_TICKET;
  items[0].type = KRB5_KDCMPC_DECRYPT;
  items[0].enctype = KRB5_KDCMPC_ENCTYPE_AES256;
  items[0].key_id = key_id_;
  items[0].usage = 2;
  items[0].flags = KRB5_KDCMPC_ITEM_EXACT;
  items[0].length = sizeof(ct);
  items[0].gate = items[0].ticket = items[0].splice_from = KRB5_KDCMPC_NO_ITEM;
  items[0].input = krb5_data{KV5M_DATA, sizeof(ct), ct};
  items[0].done = OnDone;
  items[0].arg = &done_;
  items[1] = items[0];
  items[1].role = KRB5_KDCMPC_ROLE_TICKET;
  items[1].type = KRB5_KDCMPC_ENCRYPT;
  items[1].flags = KRB5_KDCMPC_ITEM_GATED;
  items[1].gate = 0;
  items[1].length = 600;
  items[1].input = krb5_data{KV5M_DATA, 0, nullptr};
  items[1].done = nullptr;
  krb5_kdcmpc_plan plan = {static_cast<krb5_kdcmpc_exchange_kind>(9), 2, items};
  krb5_kdcmpc_exchange x = nullptr;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "exchange kind")) << Message(EINVAL);
  plan.kind = KRB5_KDCMPC_EXCH_AS_FAST;
  items[1].usage = 3;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "usage")) << Message(EINVAL);
  EXPECT_EQ(x, nullptr);
  items[1].usage = 2;
  ASSERT_EQ(vt.begin(ctx_, data_, &plan, &x), 0) << Message(0);
  ASSERT_NE(x, nullptr);
  krb5_kdcmpc_job wrong = Encrypt();
  wrong.usage = 3;
  Done other;
  EXPECT_EQ(vt.submit_item(ctx_, data_, x, 1, &wrong, OnDone, &other), EINVAL);
  EXPECT_EQ(vt.submit_item(ctx_, data_, x, 7, &wrong, OnDone, &other), EINVAL);
  RunLoopUntilDone();
  ASSERT_EQ(done_.calls, 1) << "no completion within 10 s";
  EXPECT_EQ(done_.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(other.calls, 0);
  vt.end(ctx_, data_, x);
}

// The PA-REQ-ENC-PA-REP splice as the KDC states it (kdc_mpc_as.c): the
// REQ_CHECKSUM item given now is no job of its own; it completes once,
// with no output and the code of the REPLY it is spliced into. Any other
// splice is refused at begin.
TEST_F(KmpcKdcTest, ASplicedChecksumCompletesWithItsReplyAndNothingElse) {
  krb5_kdcmpc_vtable_st vt{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(&vt)), 0);
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  char ts[16 + 30 + 12] = {0};
  char req[180];
  char reply[250];
  memset(req, 0x30, sizeof(req));
  memset(reply, 0, sizeof(reply));
  Done ts_done, cksum_done;
  krb5_kdcmpc_item items[3] = {};
  items[0].role = KRB5_KDCMPC_ROLE_TIMESTAMP;
  items[0].type = KRB5_KDCMPC_DECRYPT;
  items[0].enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  items[0].key_id = key_id_;
  items[0].usage = 1;
  items[0].flags = KRB5_KDCMPC_ITEM_EXACT;
  items[0].length = sizeof(ts);
  items[0].gate = items[0].ticket = items[0].splice_from = KRB5_KDCMPC_NO_ITEM;
  items[0].input = krb5_data{KV5M_DATA, sizeof(ts), ts};
  items[0].done = OnDone;
  items[0].arg = &ts_done;
  items[1] = items[0];
  items[1].role = KRB5_KDCMPC_ROLE_REQ_CHECKSUM;
  items[1].type = KRB5_KDCMPC_CHECKSUM;
  items[1].usage = 56;
  items[1].flags = KRB5_KDCMPC_ITEM_EXACT | KRB5_KDCMPC_ITEM_GATED;
  items[1].gate = 0;
  items[1].length = sizeof(req);
  items[1].input = krb5_data{KV5M_DATA, sizeof(req), req};
  items[1].arg = &cksum_done;
  items[2] = items[1];
  items[2].role = KRB5_KDCMPC_ROLE_REPLY;
  items[2].type = KRB5_KDCMPC_ENCRYPT;
  items[2].usage = 3;
  items[2].length = sizeof(reply);
  items[2].input = krb5_data{KV5M_DATA, sizeof(reply), reply};
  items[2].arg = &done_;
  items[2].splice_from = 1;
  items[2].splice_offset = 200;
  krb5_kdcmpc_plan plan = {KRB5_KDCMPC_EXCH_AS, 3, items};
  krb5_kdcmpc_exchange x = nullptr;
  // Refused: the checksum alone (released to the KDC), a splice from the
  // timestamp, one whose 12 bytes do not fit, one from no item.
  items[2].splice_from = KRB5_KDCMPC_NO_ITEM;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  items[2].splice_from = 0;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  items[2].splice_from = 5;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  items[2].splice_from = 1;
  items[2].splice_offset = sizeof(reply) - 11;
  EXPECT_EQ(vt.begin(ctx_, data_, &plan, &x), EINVAL);
  EXPECT_EQ(x, nullptr);
  items[2].splice_offset = 200;
  ASSERT_EQ(vt.begin(ctx_, data_, &plan, &x), 0) << Message(0);
  ASSERT_NE(x, nullptr);
  RunLoopUntil([&] { return done_.calls && cksum_done.calls && ts_done.calls; });
  EXPECT_EQ(ts_done.calls, 1);
  ASSERT_EQ(done_.calls, 1) << "no completion within 10 s";
  EXPECT_EQ(done_.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(cksum_done.calls, 1);
  EXPECT_EQ(cksum_done.code, done_.code);
  EXPECT_EQ(cksum_done.output_length, 0u);
  for (int i = 0; i < 5; ++i) Turn();
  EXPECT_EQ(cksum_done.calls, 1);
  EXPECT_EQ(done_.calls, 1);
  vt.end(ctx_, data_, x);
}

TEST_F(KmpcKdcTest, InitRefusesBadOptionsWithTheCoresMessage) {
  EXPECT_EQ(Init({"servers = 127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "certs = /c",
                  "batch_windw_ms = 5"}), EINVAL);
  EXPECT_EQ(data_, nullptr);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "unknown kdcmpc option \"batch_windw_ms\""))
      << Message(EINVAL);
  for (const auto& line : log_) EXPECT_FALSE(absl::StrContains(line, "ready")) << line;
}

TEST_F(KmpcKdcTest, InitMakesTheProcessNonDumpableAndLogsReady) {
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  ASSERT_NE(data_, nullptr);
  // Shares of keystreams and session keys never reach a core dump.
  EXPECT_EQ(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
  bool ready = false;
  for (const auto& line : log_) ready |= line == "kdcmpc: kmpc module ready";
  EXPECT_TRUE(ready);
  vt_.fini(ctx_, data_);
  data_ = nullptr;
  vt_.fini(ctx_, nullptr);  // krb5kdc may call fini without module data
}

TEST_F(KmpcKdcTest, SubmitRefusalsCarryTheirMessage) {
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  krb5_kdcmpc_job rc4 = Encrypt();
  rc4.enctype = ENCTYPE_ARCFOUR_HMAC;
  EXPECT_EQ(vt_.submit(ctx_, data_, &rc4, OnDone, &done_), KRB5_BAD_ENCTYPE);
  EXPECT_EQ(Message(KRB5_BAD_ENCTYPE), "kdcmpc: not an MPC enctype");
  // A handle of the standard AES enctypes names a key the cluster holds;
  // outside a plan only a service ticket's ENCRYPT (usage 2) and PAC
  // server signature (CHECKSUM, usage 17) are served (cts_items.h): a
  // checksum under another usage is an unavailable service, never a key.
  for (krb5_enctype e : {ENCTYPE_AES128_CTS_HMAC_SHA1_96, ENCTYPE_AES256_CTS_HMAC_SHA1_96}) {
    krb5_kdcmpc_job cts = Encrypt();
    cts.enctype = e;
    cts.type = KRB5_KDCMPC_CHECKSUM;
    cts.usage = 56;
    EXPECT_EQ(vt_.submit(ctx_, data_, &cts, OnDone, &done_), KRB5KDC_ERR_SVC_UNAVAILABLE);
    EXPECT_EQ(Message(KRB5KDC_ERR_SVC_UNAVAILABLE),
              "kdcmpc: jobs under aes*-cts-hmac-sha1-96 keys are served only as items of "
              "an exchange plan, but for a service ticket's (ENCRYPT usage 2, CHECKSUM "
              "usage 17 or 64)");
  }
  krb5_kdcmpc_job no_key = Encrypt();
  no_key.key_id = nullptr;
  EXPECT_EQ(vt_.submit(ctx_, data_, &no_key, OnDone, &done_), EINVAL);
  EXPECT_EQ(Message(EINVAL), "kdcmpc: malformed job");
  // Twice the 1 s deadline: a job wrongly queued would have failed by then.
  RunLoopUntilDone(std::chrono::seconds(2));
  EXPECT_EQ(done_.calls, 0);  // a refused job never completes
}

// Minor version 3 (a KDC that asks for it after 1.2) adds submit_ticket:
// a service ticket's ENCRYPT whose PAC server and KDC signatures the
// cluster makes (kdcmpc_plugin.h). A KDC of 1.2 gets none, and makes the
// signatures by CHECKSUM jobs.
TEST_F(KmpcKdcTest, MinorVersionThreeAddsTheTicketSignedInTheCluster) {
  krb5_kdcmpc_vtable_st two{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(&two)), 0);
  EXPECT_EQ(two.submit_ticket, nullptr);
  krb5_kdcmpc_vtable_st three{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 3, reinterpret_cast<krb5_plugin_vtable>(&three)), 0);
  EXPECT_NE(three.submit_ticket, nullptr);
  EXPECT_NE(three.begin, nullptr);
}

// submit_ticket takes an aes*-cts ticket ENCRYPT (usage 2) with its PAC
// and an aes*-ctr-mpc krbtgt: anything else is refused with its message
// and never completes; a well-formed one completes through the loop.
TEST_F(KmpcKdcTest, ATicketSignedInTheClusterIsCheckedThenQueued) {
  krb5_kdcmpc_vtable_st vt{};
  ASSERT_EQ(kdcmpc_kmpc_initvt(ctx_, 1, 3, reinterpret_cast<krb5_plugin_vtable>(&vt)), 0);
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  char plain[200] = {0};
  char pac[64];
  memset(plain, 'T', sizeof(plain));
  memset(plain + 100, 0, 12);  // the server signature's slot
  memset(plain + 116, 0, 32);  // the KDC signature's, 16 bytes after it
  memset(pac, 'P', sizeof(pac));
  unsigned char krbtgt[KRB5_KDCMPC_KEY_ID_LEN] = {2};
  krb5_kdcmpc_job t = Encrypt();
  t.enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  t.input = krb5_data{KV5M_DATA, sizeof(plain), plain};
  t.pac = krb5_data{KV5M_DATA, sizeof(pac), pac};
  t.pac_sig_offset = 100;
  t.sign_enctype = KRB5_KDCMPC_ENCTYPE_AES256;
  t.sign_key_id = krbtgt;
  Done refused;
  krb5_kdcmpc_job no_pac = t;
  no_pac.pac = krb5_data{KV5M_DATA, 0, nullptr};
  EXPECT_EQ(vt.submit_ticket(ctx_, data_, &no_pac, OnDone, &refused), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "no PAC")) << Message(EINVAL);
  krb5_kdcmpc_job reply = t;
  reply.usage = 3;
  EXPECT_EQ(vt.submit_ticket(ctx_, data_, &reply, OnDone, &refused), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "usage 2")) << Message(EINVAL);
  krb5_kdcmpc_job ctr = t;
  ctr.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
  EXPECT_EQ(vt.submit_ticket(ctx_, data_, &ctr, OnDone, &refused), EINVAL);
  krb5_kdcmpc_job cts_krbtgt = t;
  cts_krbtgt.sign_enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  EXPECT_EQ(vt.submit_ticket(ctx_, data_, &cts_krbtgt, OnDone, &refused), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "aes*-ctr-mpc")) << Message(EINVAL);
  // Anything but zeros in either slot (the servers XOR the signatures in),
  // or a slot past the ticket's end, is refused.
  for (const size_t at : {100, 111, 116, 147}) {
    plain[at] = 'X';
    EXPECT_EQ(vt.submit_ticket(ctx_, data_, &t, OnDone, &refused), EINVAL) << at;
    EXPECT_TRUE(absl::StrContains(Message(EINVAL), "not zeros")) << Message(EINVAL);
    plain[at] = 0;
  }
  krb5_kdcmpc_job past = t;
  past.pac_sig_offset = sizeof(plain) - 47;
  EXPECT_EQ(vt.submit_ticket(ctx_, data_, &past, OnDone, &refused), EINVAL);
  EXPECT_TRUE(absl::StrContains(Message(EINVAL), "past its end")) << Message(EINVAL);
  ASSERT_EQ(vt.submit_ticket(ctx_, data_, &t, OnDone, &done_), 0) << Message(0);
  RunLoopUntilDone();
  ASSERT_EQ(done_.calls, 1) << "no completion within 10 s";
  EXPECT_EQ(done_.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(refused.calls, 0);
}

TEST_F(KmpcKdcTest, AJobCompletesThroughTheLoopWithItsKrb5Error) {
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  const krb5_kdcmpc_job job = Encrypt();
  ASSERT_EQ(vt_.submit(ctx_, data_, &job, OnDone, &done_), 0);
  RunLoopUntilDone();
  ASSERT_EQ(done_.calls, 1) << "no completion within 10 s";
  EXPECT_EQ(done_.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_EQ(done_.output_length, 0u);
  // The core's detail is in the context for the KDC's log line, without
  // the plaintext.
  const std::string m = Message(KRB5KDC_ERR_SVC_UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(m, "unreachable") || absl::StrContains(m, "did not answer"))
      << m;
  EXPECT_FALSE(absl::StrContains(m, plaintext_)) << m;
  // More loop turns call done no second time.
  for (int i = 0; i < 4; ++i) Turn();
  EXPECT_EQ(done_.calls, 1);
}

// The next step of an exchange: a done callback that submits another job
// (as krb5's PAC signer submits the KDC signature from the server
// signature's callback).
struct Chain {
  krb5_kdcmpc_vtable_st* vt;
  krb5_context ctx;
  krb5_kdcmpc_moddata data;
  const krb5_kdcmpc_job* next;
  Done first, second;
  krb5_error_code submit_code = -1;
  std::chrono::steady_clock::time_point submitted;
};

void OnSecondDone(void* arg, krb5_error_code code, krb5_data output) {
  OnDone(&static_cast<Chain*>(arg)->second, code, output);
}

void OnFirstDoneSubmitNext(void* arg, krb5_error_code code, krb5_data output) {
  auto* c = static_cast<Chain*>(arg);
  OnDone(&c->first, code, output);
  c->submitted = std::chrono::steady_clock::now();
  c->submit_code = c->vt->submit(c->ctx, c->data, c->next, OnSecondDone, c);
}

TEST_F(KmpcKdcTest, AJobSubmittedFromADoneCallbackGoesOutWhenTheDrainEnds) {
  // The unreachable cluster fails a job at its 50 ms deadline; a job that
  // nobody kicks first waits out the 1 s coalesce delay, then that.
  ASSERT_EQ(Init(UnkickedUnreachableCluster()), 0) << Message(0);
  const krb5_kdcmpc_job job = Encrypt();
  Chain c{&vt_, ctx_, data_, &job};
  ASSERT_EQ(vt_.submit(ctx_, data_, &job, OnFirstDoneSubmitNext, &c), 0);
  RunLoopUntil([&] { return c.second.calls != 0; });
  ASSERT_EQ(c.first.calls, 1);
  ASSERT_EQ(c.submit_code, 0);
  ASSERT_EQ(c.second.calls, 1) << "the chained job did not complete within 10 s";
  EXPECT_EQ(c.second.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - c.submitted);
  // Sent at the end of the drain that ran its callback (the kick): failed
  // at its deadline (50 ms), not after the coalesce delay and then that.
  EXPECT_LT(took.count(), 1000) << "the chained job waited " << took.count() << " ms";
  for (int i = 0; i < 4; ++i) Turn();
  EXPECT_EQ(c.first.calls, 1);
  EXPECT_EQ(c.second.calls, 1);
}

TEST_F(KmpcKdcTest, JobsSubmittedFromADrainOfManyCompletionsGoOutAtTheNextTurn) {
  // Eight jobs of one batch complete together (one drain, or a few: more
  // than a lone exchange's, so their callbacks' jobs are kicked at the
  // loop's next turn); none of the chained jobs may wait out the coalesce
  // delay.
  ASSERT_EQ(Init(UnkickedUnreachableCluster()), 0) << Message(0);
  const krb5_kdcmpc_job job = Encrypt();
  constexpr int kJobs = 8;
  std::vector<Chain> chains(kJobs, Chain{&vt_, ctx_, data_, &job});
  for (Chain& c : chains)
    ASSERT_EQ(vt_.submit(ctx_, data_, &job, OnFirstDoneSubmitNext, &c), 0);
  auto all_done = [&] {
    for (const Chain& c : chains)
      if (c.second.calls == 0) return false;
    return true;
  };
  RunLoopUntil(all_done);
  ASSERT_TRUE(all_done()) << "a chained job did not complete within 10 s";
  const auto now = std::chrono::steady_clock::now();
  for (const Chain& c : chains) {
    EXPECT_EQ(c.first.calls, 1);
    EXPECT_EQ(c.submit_code, 0);
    EXPECT_EQ(c.second.calls, 1);
    EXPECT_EQ(c.second.code, KRB5KDC_ERR_SVC_UNAVAILABLE);
    // About the 50 ms deadline after its submission (and the last first
    // job's callback), not the coalesce delay first.
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - c.submitted);
    EXPECT_LT(took.count(), 1000) << "a chained job waited " << took.count() << " ms";
  }
}

TEST_F(KmpcKdcTest, FiniLeavesGrpcShutDownWithinSecondsWhenServersAreUnreachable) {
  // A job failed against servers that do not listen: gRPC keeps trying to
  // connect to them until fini. After fini gRPC is shut down (no thread of
  // it is at work at the process's exit), within seconds.
  ASSERT_EQ(Init(UnreachableCluster()), 0) << Message(0);
  const krb5_kdcmpc_job job = Encrypt();
  ASSERT_EQ(vt_.submit(ctx_, data_, &job, OnDone, &done_), 0);
  RunLoopUntilDone();
  ASSERT_EQ(done_.calls, 1) << "no completion within 10 s";
  const auto start = std::chrono::steady_clock::now();
  vt_.fini(ctx_, data_);
  data_ = nullptr;
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  RecordProperty("fini_ms", static_cast<int>(took.count()));
  EXPECT_EQ(grpc_is_initialized(), 0);
  EXPECT_LT(took.count(), 5000) << "fini took " << took.count() << " ms";
}

}  // namespace
