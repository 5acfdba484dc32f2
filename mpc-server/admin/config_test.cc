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

}  // namespace
}  // namespace kmpc::admin
