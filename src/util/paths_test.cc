#include "util/paths.h"

#include <string>

#include "gtest/gtest.h"

namespace deepinfer::util {
namespace {

TEST(PathsTest, PlainRelativePathsAreSafe) {
  EXPECT_TRUE(IsSafeRelativePath("model.gguf"));
  EXPECT_TRUE(IsSafeRelativePath("sub/dir/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(IsSafeRelativePath("..hidden"));
}

TEST(PathsTest, PathsThatLeaveTheRootAreRefused) {
  for (const char* p :
       {"", "/etc/passwd", "..", "../x", "a/../b", "a/..", "./a", "a/.", "a//b", "a/"}) {
    EXPECT_FALSE(IsSafeRelativePath(p)) << p;
  }
}

TEST(PathsTest, AnEmbeddedNulIsRefused) {
  EXPECT_FALSE(IsSafeRelativePath(std::string("model.gguf\0/../../x", 19)));
}

TEST(PathsTest, JoinPathAddsOneSeparator) {
  EXPECT_EQ(JoinPath("/models", "a.gguf"), "/models/a.gguf");
  EXPECT_EQ(JoinPath("/models/", "a.gguf"), "/models/a.gguf");
  EXPECT_EQ(JoinPath("", "a.gguf"), "a.gguf");
}

}  // namespace
}  // namespace deepinfer::util
