#include "protocol/warmup_file.h"

#include <string>

#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

TEST(WarmupFileTest, JsonLinesGoToTheirRoutesAndKeepTheirLines) {
  auto r = ParseWarmupFile(
      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}\n"
      "\n"
      "  \r\n"
      "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream\":true}");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].path, "/v1/chat/completions");
  EXPECT_EQ((*r)[0].line, 1);
  EXPECT_EQ((*r)[1].path, "/v1/completions");
  EXPECT_EQ((*r)[1].line, 4);
  EXPECT_EQ((*r)[1].body, "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream\":true}");
}

TEST(WarmupFileTest, OnePrettyPrintedBodyIsOneRequest) {
  auto r = ParseWarmupFile("\n{\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}\n  ]\n}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].path, "/v1/chat/completions");
  EXPECT_EQ((*r)[0].line, 2);
}

TEST(WarmupFileTest, MalformedFilesNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"{\"prompt\":\"a\"}\n{\"prompt\":", "line 2: not JSON"},
           Case{"[1,2]", "line 1: a request body must be a JSON object"},
           Case{"{\"prompt\":\"a\"}\n{\"model\":\"x\"}", "line 2: a body needs \"messages\""},
           Case{"{\"prompt\":\"a\",\"messages\":[]}", "not both"},
           Case{"", "no request body"},
           Case{"\n \n", "no request body"},
       }) {
    auto r = ParseWarmupFile(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(ErrorCodeOf(r.status()), "bad_warmup");
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace deepinfer::api
