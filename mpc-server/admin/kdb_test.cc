// The KDB side of kmpc-admin (admin/kdb.h) without a KDB: the enctype
// names and MPC counterparts, key bytes that wipe themselves, and a realm
// whose KDB cannot be opened refused with an error naming it. (Reading and
// writing principals runs against a real KDB in
// integration-tests/test_admin.py.)
#include "admin/kdb.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <string>

#include "test_util.h"  // mpc-server/test/server: MakeTempDir

namespace kmpc::admin {
namespace {

// purge-unreferenced's realm filter: a label is the principal's canonical
// name (krb5_unparse_name), maybe with the migrated suffix.
TEST(KdbTest, LabelRealmIsAfterTheFirstUnescapedAt) {
  EXPECT_EQ(LabelRealm("alice@EXAMPLE.ORG"), "EXAMPLE.ORG");
  EXPECT_EQ(LabelRealm("HTTP/www.example.org@EXAMPLE.ORG"), "EXAMPLE.ORG");
  EXPECT_EQ(LabelRealm("krbtgt/OTHER.ORG@EXAMPLE.ORG"), "EXAMPLE.ORG");
  EXPECT_EQ(LabelRealm(std::string("bob@EXAMPLE.ORG") + kMigratedSuffix), "EXAMPLE.ORG");
  EXPECT_EQ(LabelRealm("odd\\@name@OTHER.ORG"), "OTHER.ORG");  // an escaped '@'
  EXPECT_EQ(LabelRealm("no-realm"), "");
  EXPECT_EQ(LabelRealm("trailing\\@"), "");
  EXPECT_EQ(LabelRealm(""), "");
}

TEST(KdbTest, EachAesEnctypeHasItsMpcCounterpart) {
  EXPECT_EQ(MpcEnctypeFor(kEnctypeAes128Cts), kEnctypeAes128Mpc);
  EXPECT_EQ(MpcEnctypeFor(kEnctypeAes256Cts), kEnctypeAes256Mpc);
  EXPECT_EQ(MpcEnctypeFor(kEnctypeAes128Mpc), kEnctypeAes128Mpc);
  EXPECT_EQ(MpcEnctypeFor(kEnctypeAes256Mpc), kEnctypeAes256Mpc);
  EXPECT_EQ(MpcEnctypeFor(23), 0);  // rc4-hmac: no MPC form
  EXPECT_STREQ(EnctypeName(kEnctypeAes256Mpc), "aes256-ctr-mpc");
  EXPECT_STREQ(EnctypeName(kEnctypeAes128Cts), "aes128-cts-hmac-sha1-96");
  EXPECT_STREQ(EnctypeName(25), "(another enctype)");  // camellia128
}

TEST(KdbTest, ShareEnctypesAndTheKeysAProtectedPrincipalNeverKeeps) {
  EXPECT_EQ(EnctypeOfName("aes256-ctr-mpc"), kEnctypeAes256Mpc);
  EXPECT_EQ(EnctypeOfName("aes128-ctr-mpc"), kEnctypeAes128Mpc);
  EXPECT_EQ(EnctypeOfName("aes256-cts-hmac-sha1-96"), kEnctypeAes256Cts);
  EXPECT_EQ(EnctypeOfName("aes128-cts-hmac-sha1-96"), kEnctypeAes128Cts);
  EXPECT_EQ(EnctypeOfName("aes256-cts"), kEnctypeAes256Cts);  // MIT's short name
  EXPECT_EQ(EnctypeOfName("arcfour-hmac"), 0);  // never shared
  EXPECT_EQ(EnctypeOfName("des3-cbc-sha1"), 0);
  EXPECT_EQ(EnctypeOfName(""), 0);
  EXPECT_TRUE(IsCtsEnctype(kEnctypeAes128Cts) && IsCtsEnctype(kEnctypeAes256Cts));
  EXPECT_FALSE(IsCtsEnctype(kEnctypeAes256Mpc) || IsCtsEnctype(23));
  // RC4 (the NT hash), DES and DES3 are weak; AES and the MPC enctypes not.
  for (int32_t e : {1, 2, 3, 16, 23, 24}) EXPECT_TRUE(IsWeakEnctype(e)) << e;
  for (int32_t e : {17, 18, 19, 20, 25, 26, -29001, -29002, 0})
    EXPECT_FALSE(IsWeakEnctype(e)) << e;
  EXPECT_STREQ(EnctypeName(23), "arcfour-hmac");
  EXPECT_STREQ(EnctypeName(16), "des3-cbc-sha1");
}

TEST(KdbTest, SecretBytesAreEmptyAfterWipeAndMove) {
  SecretBytes a(16);
  std::memset(a.data(), 0x5a, a.size());
  SecretBytes b(std::move(a));
  EXPECT_EQ(b.size(), 16u);
  EXPECT_EQ(b.data()[15], 0x5a);
  SecretBytes c(8);
  c = std::move(b);  // c's own 8 bytes are wiped first
  EXPECT_EQ(c.size(), 16u);
  c.Wipe();
  EXPECT_EQ(c.size(), 0u);
}

TEST(KdbTest, ARealmWithoutAKdbIsRefusedByName) {
  const std::string dir = kmpc::testing::MakeTempDir("admin-kdb");
  ASSERT_FALSE(dir.empty());
  const std::string krb5 = dir + "/krb5.conf", kdc = dir + "/kdc.conf";
  std::ofstream(krb5) << "[libdefaults]\n  default_realm = NONE.TEST\n";
  std::ofstream(kdc) << "[realms]\n  NONE.TEST = {\n    database_name = " << dir
                     << "/no-such-db\n    key_stash_file = " << dir
                     << "/no-such-stash\n  }\n";
  setenv("KRB5_CONFIG", krb5.c_str(), 1);
  setenv("KRB5_KDC_PROFILE", kdc.c_str(), 1);
  auto db = Kdb::Open("NONE.TEST");
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("opening the KDB of realm NONE.TEST"),
            std::string::npos)
      << db.status();
  db = Kdb::Open("");  // the default realm of KRB5_CONFIG
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("NONE.TEST"), std::string::npos) << db.status();
}

}  // namespace
}  // namespace kmpc::admin
