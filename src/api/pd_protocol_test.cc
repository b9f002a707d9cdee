#include "api/pd_protocol.h"

#include "gtest/gtest.h"
#include "http/errors.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

std::string CodeOf(const absl::Status& s) { return http::ApiErrorFromStatus(s).code; }

TEST(PdProtocolTest, RequestRoundTripsWithASaltOfAllSixtyFourBits) {
  PdPrefillRequest r;
  r.tokens = {0, 5, 99};
  r.cache_salt = 18446744073709551615ull;
  r.request_id = "chatcmpl-1";
  auto back = ParsePdPrefillRequest(PdPrefillRequestBody(r), 100);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, r.tokens);
  EXPECT_EQ(back->cache_salt, r.cache_salt);
  EXPECT_EQ(back->request_id, r.request_id);
  auto minimal = ParsePdPrefillRequest(R"({"prompt_token_ids":[7]})", 100);
  ASSERT_TRUE(minimal.ok());
  EXPECT_EQ(minimal->cache_salt, 0u);
}

TEST(PdProtocolTest, MalformedRequestsNameTheirField) {
  struct Case {
    const char* body;
    const char* code;
    const char* param;
  };
  for (const Case& c : {Case{"[", "invalid_json", ""}, Case{"[1]", "invalid_type", ""},
                        Case{"{}", "missing_field", "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[]})", "invalid_type", "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[1.5]})", "invalid_type", "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[100]})", "invalid_token", "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[-1]})", "invalid_token", "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[18446744073709551615]})", "invalid_token",
                             "prompt_token_ids"},
                        Case{R"({"prompt_token_ids":[1],"cache_salt":7})", "invalid_value",
                             "cache_salt"},
                        Case{R"({"prompt_token_ids":[1],"cache_salt":"-1"})", "invalid_value",
                             "cache_salt"},
                        Case{R"({"prompt_token_ids":[1],"cache_salt":"18446744073709551616"})",
                             "invalid_value", "cache_salt"}}) {
    auto r = ParsePdPrefillRequest(c.body, 100);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(CodeOf(r.status()), c.code) << c.body;
    EXPECT_EQ(http::ApiErrorFromStatus(r.status()).param, c.param) << c.body;
  }
}

TEST(PdProtocolTest, AnswersAreCheckedBeforeTheirNameReachesTheFileSystem) {
  PdPrefillAnswer a;
  a.checkpoint = "0123456789abcdef.dipc";
  a.num_tokens = 32;
  a.computed = true;
  a.prefill_seconds = 1.25;
  auto back = ParsePdPrefillAnswer(PdPrefillAnswerBody(a), 40);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->checkpoint, a.checkpoint);
  EXPECT_EQ(back->num_tokens, 32);
  EXPECT_TRUE(back->computed);
  EXPECT_DOUBLE_EQ(back->prefill_seconds, 1.25);
  EXPECT_TRUE(ParsePdPrefillAnswer(R"({"checkpoint":"","num_tokens":0})", 5).has_value());
  for (const char* bad : {
           R"({"checkpoint":"0123456789abcdef.dipc","num_tokens":41})",   // past the prompt
           R"({"checkpoint":"0123456789abcdef.dipc","num_tokens":-16})",
           R"({"checkpoint":"","num_tokens":16})",
           R"({"checkpoint":"../0123456789abcd.dipc","num_tokens":16})",
           R"({"checkpoint":"0123456789ABCDEF.dipc","num_tokens":16})",
           R"({"checkpoint":"0123456789abcdef.dipc/","num_tokens":16})",
           R"({"checkpoint":5,"num_tokens":16})", R"({"num_tokens":16})", "[]", "",
           "<html>"}) {
    EXPECT_FALSE(ParsePdPrefillAnswer(bad, 40).has_value()) << bad;
  }
}

}  // namespace
}  // namespace deepinfer::api
