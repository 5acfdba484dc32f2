// kmpc-admin's clusters (admin/cluster.h) against in-process Admin servers
// over mTLS (fake_admin.h, deploy/gen-certs.sh's certificates): the
// enctype conversion, a configuration refused before any connection, and
// a key dealt to two clusters all or nothing (a cluster that fails has the
// key taken off the ones that stored it, and the message names both).
// Also the refresh's key-id lineage (admin/refresh.h), which needs no
// server.
#include "admin/cluster.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "admin/kdb.h"
#include "contract.h"
#include "fake_admin.h"
#include "test_util.h"  // mpc-server/test/server: MakeTestCerts, FreeLoopbackPort

namespace kmpc::admin {
namespace {

using kmpc::testing::FakeAdmin;
using kmpc::testing::FreeLoopbackPort;
using kmpc::testing::PutBehaviour;

const std::array<uint8_t, 16> kKey = {1, 2, 3, 4, 5, 6, 7, 8,
                                      9, 10, 11, 12, 13, 14, 15, 16};

std::string KeyId(char fill) { return std::string(contract::kKeyIdSize, fill); }

TEST(CipherOfEnctypeTest, OnlyTheAesEnctypesHaveACipher) {
  EXPECT_EQ(CipherOfEnctype(kEnctypeAes128Mpc), engine::Cipher::kAes128);
  EXPECT_EQ(CipherOfEnctype(kEnctypeAes256Mpc), engine::Cipher::kAes256);
  // MIT's own AES enctypes: the servers' aes*-cts ciphers (their usage
  // material is dealt with the key).
  EXPECT_EQ(CipherOfEnctype(kEnctypeAes128Cts), engine::Cipher::kAes128Cts);
  EXPECT_EQ(CipherOfEnctype(kEnctypeAes256Cts), engine::Cipher::kAes256Cts);
  // RC4 (an NT hash: a password equivalent), DES3, DES: never held.
  for (int32_t e : {0, 23, 24, 16, 3, 1})
    EXPECT_FALSE(CipherOfEnctype(e).has_value()) << e;
}

class ClustersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(kmpc::testing::MakeTestCerts("admin-cluster"));
    ASSERT_FALSE(dir_->empty()) << "deploy/gen-certs.sh failed";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Certs() { return *dir_ + "/certs"; }

  // Cluster c's three servers (parties 0, 1, 2) on fresh ports.
  std::array<std::string, 3> StartCluster(int c) {
    std::array<std::string, 3> addr;
    for (int i = 0; i < 3; ++i) {
      const int port = FreeLoopbackPort();
      servers_[c][i] = std::make_unique<FakeAdmin>(Certs(), i, port);
      addr[i] = absl::StrCat("127.0.0.1:", port);
    }
    return addr;
  }

  Config TwoClusters() {
    Config cfg;
    cfg.servers = StartCluster(0);
    cfg.ca = Certs() + "/ca.pem";
    cfg.cert = Certs() + "/admin.pem";
    cfg.key = Certs() + "/admin.key";
    client::ClusterConfig two;  // no PEM files of its own: cluster 1's
    two.servers = StartCluster(1);
    cfg.more.push_back(two);
    return cfg;
  }

  std::array<std::array<std::unique_ptr<FakeAdmin>, 3>, 2> servers_;
  static std::string* dir_;
};
std::string* ClustersTest::dir_ = nullptr;

TEST_F(ClustersTest, AnIncompleteConfigIsRefusedBeforeAnyConnection) {
  Config cfg;
  cfg.servers = {"127.0.0.1:1", "", "127.0.0.1:3"};
  cfg.ca = Certs() + "/ca.pem";
  cfg.cert = Certs() + "/admin.pem";
  cfg.key = Certs() + "/admin.key";
  auto c = Clusters::Connect(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("no MPC servers configured"), std::string::npos)
      << c.status();
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectCluster(cfg).status()));
  // A second cluster whose key file is missing: named as cluster 2's.
  cfg = TwoClusters();
  cfg.more[0].ca = cfg.ca;
  cfg.more[0].cert = cfg.cert;
  cfg.more[0].key = Certs() + "/missing.key";
  c = Clusters::Connect(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_EQ(c.status().message().find("cluster 2: "), 0u) << c.status();
  EXPECT_NE(c.status().message().find("missing.key"), std::string::npos) << c.status();
}

TEST_F(ClustersTest, OneClusterReadsAsBefore) {
  Config cfg = TwoClusters();
  cfg.more.clear();
  auto c = Clusters::Connect(cfg);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->size(), 1u);
  EXPECT_EQ((*c)->Prefix(0), "");
  EXPECT_TRUE((*c)->CheckReachable().ok());
}

TEST_F(ClustersTest, AKeyGoesToEveryClusterUnderOneId) {
  auto c = Clusters::Connect(TwoClusters());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->size(), 2u);
  EXPECT_EQ((*c)->Prefix(1), "cluster 2: ");
  ASSERT_TRUE((*c)->PutKey(engine::Cipher::kAes128, kKey, {KeyId('a'), 3, "u@R"}).ok());
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(servers_[k][i]->Has(KeyId('a'))) << k << i;
      EXPECT_EQ(servers_[k][i]->PartyOf(KeyId('a')), i);
      EXPECT_EQ(servers_[k][i]->last_label(), "u@R");
      EXPECT_EQ(servers_[k][i]->last_kvno(), 3u);
    }
  ASSERT_TRUE((*c)->DeleteKey(KeyId('a')).ok());
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(servers_[k][i]->Has(KeyId('a')));
}

TEST_F(ClustersTest, AFailingClusterTakesTheKeyOffTheOthers) {
  auto c = Clusters::Connect(TwoClusters());
  ASSERT_TRUE(c.ok()) << c.status();
  servers_[1][2]->set_put(PutBehaviour::kFail);
  absl::Status st = (*c)->PutKey(engine::Cipher::kAes128, kKey, {KeyId('b'), 1, "v@R"});
  EXPECT_TRUE(absl::IsInternal(st)) << st;
  EXPECT_EQ(st.message().find("cluster 2: "), 0u) << st;
  EXPECT_NE(st.message().find("removed again from cluster 1"), std::string::npos) << st;
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(servers_[k][i]->Has(KeyId('b'))) << k << i;
  // Cluster 1 stored it and gave it back; no key byte is in the message.
  EXPECT_EQ(servers_[0][0]->deletes(), 1);
  const std::string raw(reinterpret_cast<const char*>(kKey.data()), kKey.size());
  EXPECT_EQ(st.message().find(raw), std::string::npos);
}

TEST_F(ClustersTest, ADownClusterIsNamedByCheckReachableAndDeleteKey) {
  auto c = Clusters::Connect(TwoClusters());
  ASSERT_TRUE(c.ok()) << c.status();
  servers_[1][1].reset();
  absl::Status st = (*c)->CheckReachable();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_EQ(st.message().find("cluster 2: server 1 ("), 0u) << st;
  // DeleteKey tries every cluster and reports the first failure.
  st = (*c)->DeleteKey(KeyId('c'));
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_EQ(st.message().find("cluster 2: "), 0u) << st;
  EXPECT_GE(servers_[0][0]->deletes(), 1);
}

// A server that comes up while kmpc-admin connects (its first connection
// attempt refused) is reached: the command does not fail it as
// unreachable (kmpc-admin status right after a restart, on a loaded host).
TEST_F(ClustersTest, AServerThatComesUpWhileConnectingIsReached) {
  Config cfg = TwoClusters();
  cfg.more.clear();
  const std::string addr1 = cfg.servers[1];
  const int port1 = std::stoi(addr1.substr(addr1.rfind(':') + 1));
  servers_[0][1].reset();
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    servers_[0][1] = std::make_unique<FakeAdmin>(Certs(), 1, port1);
  });
  auto c = Clusters::Connect(cfg);
  const absl::Status st = c.ok() ? (*c)->CheckReachable() : c.status();
  later.join();
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace kmpc::admin
