// The key dealer (kdc-plugin/dealer/, dealer_module.cc) through its two krb5
// plugin vtables, as libkdb5 and kadm5 drive it, with in-process Admin
// servers over mTLS (mpc-server/test/server/fake_admin.h): the initvt
// functions refuse other major versions; `protect` patterns from the
// profile (with and without a realm; krbtgt/* by default); one dealer
// shared by both vtables; a deal without a configuration, or of a key of
// another enctype, refused with a clear error and no handle; a dealt key's
// handle names the id the three servers hold; a failed deal names the
// server, and neither its message nor anything the module writes to
// stderr holds a byte of the key.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fake_admin.h"
#include "test_util.h"  // mpc-server/test/server: MakeTestCerts, FreeLoopbackPort
#include "openssl_at_exit.h"

extern "C" {
#include <kadm5/admin.h>
#include <krb5/kadm5_hook_plugin.h>
#include <krb5/kdcmpc_plugin.h>
#include <krb5/krb5.h>
#include <krb5/mpcdealer_plugin.h>

krb5_error_code mpcdealer_kmpc_initvt(krb5_context, int, int, krb5_plugin_vtable);
krb5_error_code kadm5_hook_kmpc_initvt(krb5_context, int, int, krb5_plugin_vtable);
// libkrb5's ticket decryption (exported; declared in MIT's private
// k5-int.h), which every AP-REQ path calls and which calls the hook.
krb5_error_code KRB5_CALLCONV krb5_decrypt_tkt_part(krb5_context, const krb5_keyblock*,
                                                    krb5_ticket*);
}

namespace {

using kmpc::testing::FakeAdmin;
using kmpc::testing::FreeLoopbackPort;
using kmpc::testing::PutBehaviour;

constexpr char kRealm[] = "KMPC.TEST";
// A key whose bytes (and their hex) cannot occur in a message by chance.
const std::array<uint8_t, 16> kKey = {0x5a, 0xc3, 0x91, 0x7e, 0x28, 0xd4, 0x66, 0x0b,
                                      0xf1, 0x3d, 0xa7, 0x49, 0xbe, 0x12, 0x8c, 0xe5};

class DealerModuleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(kmpc::testing::MakeTestCerts("dealer-module"));
    ASSERT_FALSE(dir_->empty()) << "deploy/gen-certs.sh failed";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Certs() { return *dir_ + "/certs"; }

  void TearDown() override {
    if (dealer_up_) dealer_.fini(ctx_, nullptr);
    if (ctx_ != nullptr) krb5_free_context(ctx_);
  }

  // Three fake servers and kmpc-admin's config file naming them.
  std::string StartServers() {
    std::string conf = *dir_ + "/admin.conf";
    std::ofstream f(conf, std::ios::trunc);
    f << "servers = ";
    for (int i = 0; i < 3; ++i) {
      const int port = FreeLoopbackPort();
      servers_[i] = std::make_unique<FakeAdmin>(Certs(), i, port);
      f << (i ? "," : "") << "127.0.0.1:" << port;
    }
    f << "\nca = " << Certs() << "/ca.pem\ncert = " << Certs()
      << "/admin.pem\nkey = " << Certs() << "/admin.key\n";
    return conf;
  }

  // A krb5 context whose profile has `mpcdealer` (the lines inside
  // [mpcdealer] kmpc = { }), and the dealer's vtable, initialised.
  void Init(const std::string& mpcdealer) {
    const std::string path = *dir_ + "/krb5.conf";
    std::ofstream(path, std::ios::trunc)
        << "[libdefaults]\n  default_realm = " << kRealm << "\n"
        << "[mpcdealer]\n  kmpc = {\n" << mpcdealer << "  }\n";
    setenv("KRB5_CONFIG", path.c_str(), 1);
    ASSERT_EQ(krb5_init_context(&ctx_), 0);
    ASSERT_EQ(mpcdealer_kmpc_initvt(ctx_, 1, 2,
                                    reinterpret_cast<krb5_plugin_vtable>(&dealer_)),
              0);
    ASSERT_EQ(dealer_.init(ctx_, &data_), 0);
    dealer_up_ = true;
  }

  // The kadm5_hook vtable, initialised as kadm5 does in kadmind (which
  // registers the ticket hook).
  void InitHook(kadm5_hook_vftable_1* h, kadm5_hook_modinfo** info) {
    ASSERT_EQ(kadm5_hook_kmpc_initvt(ctx_, 1, 2, reinterpret_cast<krb5_plugin_vtable>(h)), 0);
    ASSERT_EQ(h->init(ctx_, info), 0);
  }

  bool Protects(const char* name) {
    krb5_principal p = nullptr;
    EXPECT_EQ(krb5_parse_name(ctx_, name, &p), 0);
    const bool yes = dealer_.protects(ctx_, data_, p);
    krb5_free_principal(ctx_, p);
    return yes;
  }

  // Deals `key` of `enctype` for `name` as libkdb5 does (deal_origin with
  // `flags`; deal, the minor-1 method, if `v1`); the error's message in *msg.
  krb5_error_code Deal(const char* name, krb5_enctype enctype,
                       krb5_keyblock* handle, std::string* msg,
                       krb5_flags flags = KRB5_MPCDEALER_RANDOM_KEY, bool v1 = false) {
    krb5_principal p = nullptr;
    EXPECT_EQ(krb5_parse_name(ctx_, name, &p), 0);
    krb5_keyblock key{};
    key.magic = KV5M_KEYBLOCK;
    key.enctype = enctype;
    key.length = kKey.size();
    key.contents = const_cast<krb5_octet*>(kKey.data());
    handle->contents = reinterpret_cast<krb5_octet*>(1);  // must be cleared
    handle->length = 7;
    const krb5_error_code ret =
        v1 ? dealer_.deal(ctx_, data_, p, 5, &key, handle)
           : dealer_.deal_origin(ctx_, data_, p, 5, &key, flags, handle);
    krb5_free_principal(ctx_, p);
    const char* m = krb5_get_error_message(ctx_, ret);
    *msg = m;
    krb5_free_error_message(ctx_, m);
    return ret;
  }

  static void ExpectNoKeyIn(const std::string& text) {
    const std::string raw(reinterpret_cast<const char*>(kKey.data()), kKey.size());
    EXPECT_EQ(text.find(raw.substr(0, 6)), std::string::npos);
    const std::string hex = absl::BytesToHexString(raw);
    EXPECT_EQ(text.find(hex.substr(0, 12)), std::string::npos) << text;
    EXPECT_EQ(absl::AsciiStrToUpper(text).find(absl::AsciiStrToUpper(hex.substr(0, 12))),
              std::string::npos);
  }

  krb5_context ctx_ = nullptr;
  krb5_mpcdealer_vtable_st dealer_{};
  krb5_mpcdealer_moddata data_ = nullptr;
  bool dealer_up_ = false;
  std::array<std::unique_ptr<FakeAdmin>, 3> servers_;
  static std::string* dir_;
};
std::string* DealerModuleTest::dir_ = nullptr;

TEST_F(DealerModuleTest, InitvtRefusesOtherMajorVersions) {
  ASSERT_EQ(krb5_init_context(&ctx_), 0);
  krb5_mpcdealer_vtable_st d{};
  kadm5_hook_vftable_1 h{};
  auto* dv = reinterpret_cast<krb5_plugin_vtable>(&d);
  auto* hv = reinterpret_cast<krb5_plugin_vtable>(&h);
  EXPECT_EQ(mpcdealer_kmpc_initvt(ctx_, 2, 1, dv), KRB5_PLUGIN_VER_NOTSUPP);
  EXPECT_EQ(kadm5_hook_kmpc_initvt(ctx_, 2, 1, hv), KRB5_PLUGIN_VER_NOTSUPP);
  EXPECT_EQ(d.name, nullptr);
  ASSERT_EQ(mpcdealer_kmpc_initvt(ctx_, 1, 1, dv), 0);
  EXPECT_EQ(d.deal_origin, nullptr);  // beyond a minor-1 caller's vtable
  ASSERT_EQ(mpcdealer_kmpc_initvt(ctx_, 1, 2, dv), 0);
  ASSERT_EQ(kadm5_hook_kmpc_initvt(ctx_, 1, 2, hv), 0);
  EXPECT_STREQ(d.name, "kmpc");
  EXPECT_STREQ(h.name, "kmpc");
  EXPECT_TRUE(d.init && d.fini && d.protects && d.deal && d.deal_origin);
  EXPECT_TRUE(h.init && h.fini && h.chpass && h.create && h.remove);
}

TEST_F(DealerModuleTest, ProtectsKrbtgtByDefault) {
  Init("");
  EXPECT_TRUE(Protects("krbtgt/KMPC.TEST@KMPC.TEST"));
  EXPECT_FALSE(Protects("user@KMPC.TEST"));
}

TEST_F(DealerModuleTest, ProtectPatternsWithAndWithoutARealm) {
  Init("    protect = host/*\n    protect = admin@OTHER.TEST\n");
  EXPECT_TRUE(Protects("host/a.example@KMPC.TEST"));  // the name without realm
  EXPECT_TRUE(Protects("admin@OTHER.TEST"));
  EXPECT_FALSE(Protects("admin@KMPC.TEST"));  // another realm than the pattern's
  EXPECT_FALSE(Protects("krbtgt/KMPC.TEST@KMPC.TEST"));  // not the default now
}

// `service` and `user_service` patterns protect their principals and
// name the kind their keys are dealt with (no KDB entry here, so no
// kmpc_key_kind attribute overrides them); a name neither matches is a
// user's.
TEST_F(DealerModuleTest, ServicePatternsProtectAndNameTheKind) {
  Init("    config = " + StartServers() + "\n    service = host/*\n"
       "    user_service = svc-*@KMPC.TEST\n");
  EXPECT_TRUE(Protects("host/a.example@KMPC.TEST"));
  EXPECT_TRUE(Protects("svc-build@KMPC.TEST"));
  EXPECT_FALSE(Protects("svc-build@OTHER.TEST"));
  EXPECT_TRUE(Protects("krbtgt/KMPC.TEST@KMPC.TEST"));  // protect's default stays
  EXPECT_FALSE(Protects("alice@KMPC.TEST"));
  const struct {
    const char* name;
    kmpc::v1::KeyKind kind;
  } cases[] = {{"host/a.example@KMPC.TEST", kmpc::v1::KEY_KIND_SERVICE},
               {"svc-build@KMPC.TEST", kmpc::v1::KEY_KIND_USER_SERVICE},
               {"alice@KMPC.TEST", kmpc::v1::KEY_KIND_USER}};
  for (const auto& c : cases) {
    krb5_keyblock handle{};
    std::string msg;
    ASSERT_EQ(Deal(c.name, ENCTYPE_AES128_CTS_HMAC_SHA1_96, &handle, &msg), 0) << msg;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(servers_[i]->last_kind(), c.kind) << c.name;
    krb5_free_keyblock_contents(ctx_, &handle);
  }
}

// The attack: a password set on a principal the `service` pattern (or its
// kmpc_key_kind attribute) names (kadmin.local cpw -pw X host/...) was
// dealt as a random service key, whose AS reply the servers release
// ungated and under which they decrypt tickets: an offline verifier of the
// password. A key libkdb5 does not mark random (a password's, or any key
// from a minor-1 libkdb5) is dealt as user+service.
TEST_F(DealerModuleTest, APasswordIsNeverDealtAsAServiceKey) {
  Init("    config = " + StartServers() + "\n    service = host/*\n"
       "    user_service = svc-*@KMPC.TEST\n");
  const struct {
    const char* name;
    krb5_flags flags;
    bool v1;
    kmpc::v1::KeyKind kind;
  } cases[] = {
      {"host/a.example@KMPC.TEST", 0, false, kmpc::v1::KEY_KIND_USER_SERVICE},
      {"host/a.example@KMPC.TEST", 0, true, kmpc::v1::KEY_KIND_USER_SERVICE},
      {"host/a.example@KMPC.TEST", KRB5_MPCDEALER_RANDOM_KEY, false,
       kmpc::v1::KEY_KIND_SERVICE},
      {"svc-build@KMPC.TEST", 0, false, kmpc::v1::KEY_KIND_USER_SERVICE},
      {"alice@KMPC.TEST", 0, false, kmpc::v1::KEY_KIND_USER},
      {"alice@KMPC.TEST", KRB5_MPCDEALER_RANDOM_KEY, false, kmpc::v1::KEY_KIND_USER},
  };
  for (const auto& c : cases) {
    krb5_keyblock handle{};
    std::string msg;
    ASSERT_EQ(Deal(c.name, ENCTYPE_AES128_CTS_HMAC_SHA1_96, &handle, &msg, c.flags, c.v1), 0)
        << msg;
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(servers_[i]->last_kind(), c.kind) << c.name << " flags " << c.flags;
    krb5_free_keyblock_contents(ctx_, &handle);
  }
}

// A krbtgt's key decrypts tickets: a service's, whatever the patterns say,
// as kmpc-admin share deals it (kadmin.local cpw -randkey krbtgt/REALM, the
// admin guide's "A krbtgt no KDB ever held"). Of a user's kind, the
// servers would run no ticket under it (mpc-server engine/user_key_rule.h).
TEST_F(DealerModuleTest, AKrbtgtKeyIsDealtAsAServicesKey) {
  Init("    config = " + StartServers() + "\n");
  krb5_keyblock handle{};
  std::string msg;
  ASSERT_EQ(Deal("krbtgt/KMPC.TEST@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &handle, &msg,
                 KRB5_MPCDEALER_RANDOM_KEY),
            0)
      << msg;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(servers_[i]->last_kind(), kmpc::v1::KEY_KIND_SERVICE);
  krb5_free_keyblock_contents(ctx_, &handle);
}

// One door per password: a key that may come from a password (not marked
// random) of a user kind is dealt under aes*-cts only, whose login the
// servers gate on shares; an aes*-ctr-mpc copy of it (the same RFC 3962
// key) would reach every server whole at each login. Refused before any
// server is asked, unless kmpc-admin's config opts in (user_ctr_mpc); a
// random key, and a service's, are dealt under any cipher.
TEST_F(DealerModuleTest, APasswordIsDealtUnderAesCtsOnly) {
  Init("    config = " + StartServers() + "\n    service = host/*\n");
  const struct {
    const char* name;
    krb5_enctype enctype;
    krb5_flags flags;
    bool dealt;
  } cases[] = {
      {"alice@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96, 0, true},  // connects first
      {"alice@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, 0, false},
      {"host/a.example@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, 0, false},  // user+service
      {"alice@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, KRB5_MPCDEALER_RANDOM_KEY, true},
      {"host/a.example@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, KRB5_MPCDEALER_RANDOM_KEY,
       true},
  };
  for (const auto& c : cases) {
    const int before = servers_[0]->calls();
    krb5_keyblock handle{};
    std::string msg;
    const krb5_error_code ret = Deal(c.name, c.enctype, &handle, &msg, c.flags);
    if (c.dealt) {
      EXPECT_EQ(ret, 0) << c.name << " " << c.enctype << ": " << msg;
      krb5_free_keyblock_contents(ctx_, &handle);
    } else {
      EXPECT_NE(ret, 0) << c.name << " " << c.enctype;
      EXPECT_NE(msg.find("aes256/aes128-cts-hmac-sha1-96 only"), std::string::npos) << msg;
      EXPECT_EQ(servers_[0]->calls(), before) << "a server was asked";
      ExpectNoKeyIn(msg);
    }
  }
}

// A password is one door whatever enctypes hold it: the aes256 and aes128
// keys libkdb5 deals for one change of a user's password count their
// gate's failures under one deal on the servers (client::KeyMeta::origin,
// engine/gate_budget.h), so naming the other enctype buys a guesser no
// second budget. Another principal's password, and a random key, are
// deals of their own.
TEST_F(DealerModuleTest, OnePasswordsKeysCountAsOneDeal) {
  Init("    config = " + StartServers() + "\n");
  auto origin_of = [&](const char* name, krb5_enctype enctype, krb5_flags flags) {
    krb5_keyblock handle{};
    std::string msg;
    EXPECT_EQ(Deal(name, enctype, &handle, &msg, flags), 0) << msg;
    krb5_free_keyblock_contents(ctx_, &handle);
    const std::string o = servers_[0]->last_origin();
    for (int i = 1; i < 3; ++i) EXPECT_EQ(servers_[i]->last_origin(), o);
    EXPECT_EQ(o.size(), 32u);
    return o;
  };
  // Two keys of one change (kKey is an AES-128 key: the fixture deals
  // aes128-cts twice, as a key/salt list with two salts would).
  const std::string first = origin_of("alice@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96, 0);
  const std::string second = origin_of("alice@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96, 0);
  EXPECT_EQ(first, second);
  EXPECT_NE(origin_of("bob@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96, 0), first);
  EXPECT_NE(origin_of("carol@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96,
                      KRB5_MPCDEALER_RANDOM_KEY),
            first);
}

TEST_F(DealerModuleTest, UserCtrMpcDealsAPasswordUnderCtrMpcOnRequest) {
  const std::string conf = StartServers();
  std::ofstream(conf, std::ios::app) << "user_ctr_mpc = true\n";
  Init("    config = " + conf + "\n");
  krb5_keyblock handle{};
  std::string msg;
  ASSERT_EQ(Deal("alice@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &handle, &msg, 0), 0) << msg;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(servers_[i]->last_kind(), kmpc::v1::KEY_KIND_USER);
  krb5_free_keyblock_contents(ctx_, &handle);
}

// kadmind's own principals, once libkdb5 deals their keys (they hold a
// handle), get random service keys, under which the servers decrypt the
// tickets kadmind accepts; a password on one is refused, as is any key of
// a minor-1 libkdb5, which does not say it is random.
TEST_F(DealerModuleTest, KadmindsPrincipalsGetRandomServiceKeysOnly) {
  Init("    config = " + StartServers() + "\n");
  for (const char* name : {"kadmin/admin@KMPC.TEST", "kadmin/changepw@KMPC.TEST",
                           "kadmin/kdc.kmpc.test@KMPC.TEST", "kiprop/kdc.kmpc.test@KMPC.TEST"}) {
    krb5_keyblock handle{};
    std::string msg;
    ASSERT_EQ(Deal(name, ENCTYPE_AES128_CTS_HMAC_SHA1_96, &handle, &msg), 0) << msg;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(servers_[i]->last_kind(), kmpc::v1::KEY_KIND_SERVICE);
    krb5_free_keyblock_contents(ctx_, &handle);
    EXPECT_EQ(Deal(name, ENCTYPE_AES128_CTS_HMAC_SHA1_96, &handle, &msg, 0),
              KADM5_MPC_DEAL_FAILED) << name;
    EXPECT_NE(msg.find("never a password"), std::string::npos) << msg;
    EXPECT_EQ(Deal(name, ENCTYPE_AES128_CTS_HMAC_SHA1_96, &handle, &msg, 0, true),
              KADM5_MPC_DEAL_FAILED) << name;
  }
}

TEST_F(DealerModuleTest, BothVtablesShareOneDealer) {
  Init("    protect = host/*\n");
  kadm5_hook_vftable_1 h{};
  kadm5_hook_modinfo* info = nullptr;
  ASSERT_NO_FATAL_FAILURE(InitHook(&h, &info));
  dealer_.fini(ctx_, data_);
  dealer_up_ = false;
  EXPECT_TRUE(Protects("host/a@KMPC.TEST"));  // the hook still holds it
  h.fini(ctx_, info);
  EXPECT_FALSE(Protects("host/a@KMPC.TEST"));  // gone with the last holder
}

// What kadmind's ticket hook (krb5_mpc_set_ticket_decrypt, registered by
// the kadm5_hook's init) answers for a ticket to `server` under an aes256-cts
// handle, through libkrb5's krb5_decrypt_tkt_part as an AP-REQ does; the
// message in *msg. No cluster is configured here: a ticket the hook takes
// fails only when it looks for one.
krb5_error_code HookDecrypt(krb5_context ctx, const char* server, std::string* msg) {
  std::array<krb5_octet, KRB5_KDCMPC_HANDLE_LEN> handle_bytes{};
  std::memcpy(handle_bytes.data(), KRB5_KDCMPC_HANDLE_MAGIC, KRB5_KDCMPC_HANDLE_MAGIC_LEN);
  krb5_keyblock handle{KV5M_KEYBLOCK, ENCTYPE_AES256_CTS_HMAC_SHA1_96,
                       KRB5_KDCMPC_HANDLE_LEN, handle_bytes.data()};
  std::array<char, 96> cipher{};
  krb5_ticket ticket{};
  EXPECT_EQ(krb5_parse_name(ctx, server, &ticket.server), 0);
  ticket.enc_part.enctype = ENCTYPE_AES256_CTS_HMAC_SHA1_96;
  ticket.enc_part.ciphertext =
      krb5_data{KV5M_DATA, static_cast<unsigned int>(cipher.size()), cipher.data()};
  const krb5_error_code ret = krb5_decrypt_tkt_part(ctx, &handle, &ticket);
  krb5_free_principal(ctx, ticket.server);
  const char* m = krb5_get_error_message(ctx, ret);
  *msg = m;
  krb5_free_error_message(ctx, m);
  return ret;
}

// The attack: the KDB: keytab hands kadmind any principal's key, so an
// AP-REQ to kadmind carrying a ticket to another service in the cluster
// (host/...) was decrypted through the cluster. The hook now refuses any
// ticket but one to kadmind's own principals of its realm, before it asks
// the cluster for anything.
TEST_F(DealerModuleTest, KadmindsHookDecryptsTicketsToItsOwnPrincipalsOnly) {
  Init("");
  kadm5_hook_vftable_1 h{};
  kadm5_hook_modinfo* info = nullptr;
  ASSERT_NO_FATAL_FAILURE(InitHook(&h, &info));
  std::string msg;
  for (const char* other : {"host/svc.kmpc.test@KMPC.TEST", "alice@KMPC.TEST",
                            "kadmin/history@KMPC.TEST", "kadmin/admin@OTHER.TEST",
                            "krbtgt/KMPC.TEST@KMPC.TEST"}) {
    EXPECT_EQ(HookDecrypt(ctx_, other, &msg), KRB5KRB_AP_ERR_NOKEY) << other;
    EXPECT_NE(msg.find("its own principals only"), std::string::npos) << other << ": " << msg;
  }
  for (const char* own : {"kadmin/admin@KMPC.TEST", "kadmin/changepw@KMPC.TEST",
                          "kadmin/kdc.kmpc.test@KMPC.TEST", "kiprop/kdc.kmpc.test@KMPC.TEST"}) {
    EXPECT_EQ(HookDecrypt(ctx_, own, &msg), KRB5KRB_AP_ERR_NOKEY) << own;
    EXPECT_NE(msg.find("no cluster configuration"), std::string::npos) << own << ": " << msg;
  }
  h.fini(ctx_, info);
}

TEST_F(DealerModuleTest, ADealWithoutAConfigurationIsRefused) {
  Init("");
  krb5_keyblock handle{};
  std::string msg;
  EXPECT_EQ(Deal("u1@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &handle, &msg),
            KADM5_MPC_DEAL_FAILED);
  EXPECT_EQ(handle.contents, nullptr);
  EXPECT_EQ(handle.length, 0u);
  EXPECT_NE(msg.find("the new key of u1@KMPC.TEST could not be stored on the MPC "
                     "servers, so nothing was changed"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("no cluster configuration"), std::string::npos) << msg;
}

TEST_F(DealerModuleTest, ARc4OrDesKeyIsNotKept) {
  Init("    config = " + StartServers() + "\n");
  // rc4-hmac (an NT hash: a password equivalent), rc4-hmac-exp, des3, des:
  // 16-byte "keys" of each are refused before any server is asked.
  for (krb5_enctype e : {ENCTYPE_ARCFOUR_HMAC, ENCTYPE_ARCFOUR_HMAC_EXP,
                         ENCTYPE_DES3_CBC_SHA1, ENCTYPE_DES_CBC_CRC}) {
    krb5_keyblock handle{};
    std::string msg;
    EXPECT_EQ(Deal("u1@KMPC.TEST", e, &handle, &msg), KADM5_MPC_DEAL_FAILED) << e;
    EXPECT_NE(msg.find("is not one the cluster holds"), std::string::npos) << msg;
    EXPECT_EQ(handle.contents, nullptr);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(servers_[i]->calls(), 0) << i;
}

TEST_F(DealerModuleTest, AnAes128CtsKeyIsDealtWithItsUsageMaterial) {
  Init("    config = " + StartServers() + "\n");
  krb5_keyblock cts{}, ctr{};
  std::string msg;
  ASSERT_EQ(Deal("u1@KMPC.TEST", ENCTYPE_AES128_CTS_HMAC_SHA1_96, &cts, &msg), 0)
      << msg;
  // The handle keeps the standard enctype (what unmodified clients negotiate).
  EXPECT_EQ(cts.enctype, ENCTYPE_AES128_CTS_HMAC_SHA1_96);
  ASSERT_EQ(cts.length, static_cast<unsigned>(KRB5_KDCMPC_HANDLE_LEN));
  const std::string id(reinterpret_cast<const char*>(cts.contents) +
                           KRB5_KDCMPC_HANDLE_MAGIC_LEN, KRB5_KDCMPC_KEY_ID_LEN);
  std::array<size_t, 3> cts_size{};
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(servers_[i]->Has(id)) << i;
    EXPECT_EQ(servers_[i]->last_cipher(), kmpc::v1::CIPHER_AES128_CTS) << i;
    // No kmpc_key_kind string attribute (no KDB entry here): a user's
    // password-derived key, dealt without ticket or PAC material.
    EXPECT_EQ(servers_[i]->last_kind(), kmpc::v1::KEY_KIND_USER) << i;
    cts_size[i] = servers_[i]->last_shares_size();
  }
  // The same key as aes128-ctr-mpc: its record lacks the aes*-cts usage
  // material (DealUsage(K, 1), DealUsage(K, 3), DealChecksum, DealPrf).
  ASSERT_EQ(Deal("u1@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &ctr, &msg), 0) << msg;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(servers_[i]->last_cipher(), kmpc::v1::CIPHER_AES128) << i;
    EXPECT_GT(cts_size[i], servers_[i]->last_shares_size()) << i;
  }
  krb5_free_keyblock_contents(ctx_, &cts);
  krb5_free_keyblock_contents(ctx_, &ctr);
}

TEST_F(DealerModuleTest, ADealtKeysHandleNamesTheIdTheServersHold) {
  Init("    config = " + StartServers() + "\n");
  krb5_keyblock handle{};
  std::string msg;
  ASSERT_EQ(Deal("u1@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &handle, &msg), 0) << msg;
  ASSERT_EQ(handle.length, static_cast<unsigned>(KRB5_KDCMPC_HANDLE_LEN));
  EXPECT_EQ(handle.enctype, KRB5_KDCMPC_ENCTYPE_AES128);
  const std::string h(reinterpret_cast<const char*>(handle.contents), handle.length);
  EXPECT_EQ(h.substr(0, KRB5_KDCMPC_HANDLE_MAGIC_LEN), KRB5_KDCMPC_HANDLE_MAGIC);
  const std::string id = h.substr(KRB5_KDCMPC_HANDLE_MAGIC_LEN);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(servers_[i]->Has(id)) << i;
    EXPECT_EQ(servers_[i]->PartyOf(id), i);
    EXPECT_EQ(servers_[i]->last_label(), "u1@KMPC.TEST");
    EXPECT_EQ(servers_[i]->last_kvno(), 5u);
  }
  krb5_free_keyblock_contents(ctx_, &handle);
}

TEST_F(DealerModuleTest, AFailedDealNamesTheServerAndNoSecret) {
  Init("    config = " + StartServers() + "\n");
  servers_[1]->set_put(PutBehaviour::kFail);
  krb5_keyblock handle{};
  std::string msg;
  ::testing::internal::CaptureStderr();
  const krb5_error_code ret =
      Deal("u1@KMPC.TEST", KRB5_KDCMPC_ENCTYPE_AES128, &handle, &msg);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ret, KADM5_MPC_DEAL_FAILED);
  EXPECT_EQ(handle.contents, nullptr);
  EXPECT_NE(msg.find("server 1 (127.0.0.1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  ExpectNoKeyIn(msg);
  ExpectNoKeyIn(err);
  // All or nothing: the servers that stored their shares gave them back.
  for (int i = 0; i < 3; ++i) EXPECT_GE(servers_[i]->deletes(), 1) << i;
}

}  // namespace
