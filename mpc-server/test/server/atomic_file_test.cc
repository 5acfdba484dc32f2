// util/atomic_file.cc: the whole text or the old file, never a part, and
// no temporary left behind.
#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kmpc::util {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kmpc-atomic-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWholeWithOwnerOnlyMode) {
  const std::string path = dir_ + "/state";
  ASSERT_TRUE(WriteFileAtomically(path, "first\n").ok());
  EXPECT_EQ(Read(path), "first\n");
  ASSERT_TRUE(WriteFileAtomically(path, "second, longer\n").ok());
  EXPECT_EQ(Read(path), "second, longer\n");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
}

TEST_F(AtomicFileTest, FailureLeavesTheOldFileAndNoTemporary) {
  const std::string path = dir_ + "/state";
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  // A directory where the temporary would go: its creation fails.
  ASSERT_EQ(mkdir((path + ".tmp").c_str(), 0700), 0);
  const absl::Status st = WriteFileAtomically(path, "new\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(std::string(st.message()).find(path), std::string::npos) << st;
  EXPECT_EQ(Read(path), "old\n");
  // A missing directory: refused, nothing created.
  EXPECT_FALSE(WriteFileAtomically(dir_ + "/no/such/state", "x").ok());
}

}  // namespace
}  // namespace kmpc::util
