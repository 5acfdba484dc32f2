#include "admin/config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kmpc::admin {
namespace {

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/kmpc-admin-config-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, ReadsEverySetting) {
  std::string p = WriteTemp(
      "# comment\n"
      "servers = 127.0.0.1:1, 127.0.0.1:2 ,127.0.0.1:3\n"
      "ca = /c/ca.pem   # trailing comment\n"
      "cert=/c/admin.pem\nkey = /c/admin.key\nrealm = R.TEST\ntimeout_ms = 250\n\n");
  auto s = ReadConfigFile(p);
  ASSERT_TRUE(s.ok()) << s.status();
  Config cfg;
  ASSERT_TRUE(ApplySettings(*s, &cfg).ok());
  EXPECT_EQ(cfg.servers[0], "127.0.0.1:1");
  EXPECT_EQ(cfg.servers[1], "127.0.0.1:2");
  EXPECT_EQ(cfg.servers[2], "127.0.0.1:3");
  EXPECT_EQ(cfg.ca, "/c/ca.pem");
  EXPECT_EQ(cfg.cert, "/c/admin.pem");
  EXPECT_EQ(cfg.key, "/c/admin.key");
  EXPECT_EQ(cfg.realm, "R.TEST");
  EXPECT_EQ(cfg.timeout_ms, 250);
  EXPECT_TRUE(CheckClusterConfig(cfg).ok());
  std::remove(p.c_str());
}

TEST(ConfigTest, RejectsMalformedFiles) {
  for (const char* text : {"servers\n", "colour = blue\n", "ca = a\nca = b\n"}) {
    std::string p = WriteTemp(text);
    auto s = ReadConfigFile(p);
    EXPECT_FALSE(s.ok()) << text;
    // path:line: what
    EXPECT_EQ(s.status().message().find(p + ":"), 0u) << s.status().message();
    std::remove(p.c_str());
  }
  EXPECT_EQ(ReadConfigFile("/nonexistent/kmpc-admin.conf").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ConfigTest, RejectsBadValues) {
  Config cfg;
  EXPECT_FALSE(ApplySettings({{"servers", "a:1,b:2"}}, &cfg).ok());
  EXPECT_FALSE(ApplySettings({{"servers", "a:1,b:2,c:3,d:4"}}, &cfg).ok());
  EXPECT_FALSE(ApplySettings({{"timeout_ms", "0"}}, &cfg).ok());
  EXPECT_FALSE(ApplySettings({{"timeout_ms", "ten"}}, &cfg).ok());
  EXPECT_FALSE(CheckClusterConfig(Config()).ok());
  Config half;
  ASSERT_TRUE(ApplySettings({{"servers", "a:1,b:2,c:3"}}, &half).ok());
  EXPECT_FALSE(CheckClusterConfig(half).ok());  // no ca/cert/key
}

// A second (and fourth) cluster: numbered names; a cluster without
// servers is an error, one named out of range an unknown setting.
TEST(ConfigTest, ReadsMoreClusters) {
  Config cfg;
  ASSERT_TRUE(ApplySettings({{"servers", "a:1,a:2,a:3"}, {"ca", "/c/ca.pem"},
                             {"cert", "/c/a.pem"}, {"key", "/c/a.key"},
                             {"servers2", "b:1,b:2,b:3"}, {"ca2", "/d/ca.pem"},
                             {"cert2", "/d/a.pem"}, {"key2", "/d/a.key"}},
                            &cfg)
                  .ok());
  ASSERT_EQ(cfg.more.size(), 1u);
  EXPECT_EQ(cfg.servers[0], "a:1");
  EXPECT_EQ(cfg.more[0].servers[2], "b:3");
  EXPECT_EQ(cfg.more[0].ca, "/d/ca.pem");
  EXPECT_EQ(cfg.more[0].key, "/d/a.key");
  EXPECT_TRUE(CheckClusterConfig(cfg).ok());

  Config gap = cfg;
  ASSERT_TRUE(ApplySettings({{"servers4", "d:1,d:2,d:3"}}, &gap).ok());
  ASSERT_EQ(gap.more.size(), 3u);
  EXPECT_FALSE(CheckClusterConfig(gap).ok());  // no servers3
  EXPECT_FALSE(ApplySettings({{"servers2", "b:1,b:2"}}, &cfg).ok());
  std::string good = WriteTemp("servers4 = d:1,d:2,d:3\nkey3 = /k\n");
  EXPECT_TRUE(ReadConfigFile(good).ok());
  std::string bad = WriteTemp("servers5 = e:1,e:2,e:3\n");
  EXPECT_FALSE(ReadConfigFile(bad).ok());
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace kmpc::admin
