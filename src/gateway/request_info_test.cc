#include "gateway/request_info.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "http/errors.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

TEST(PresentedKeyTest, ReadsBearerThenXApiKey) {
  EXPECT_EQ(PresentedKey("Bearer abc", ""), "abc");
  EXPECT_EQ(PresentedKey("bearer   abc  ", ""), "abc");
  EXPECT_EQ(PresentedKey("", "xyz"), "xyz");
  EXPECT_EQ(PresentedKey("Basic abc", "xyz"), "");
  EXPECT_EQ(PresentedKey("Bearer", ""), "");
  EXPECT_EQ(PresentedKey("", ""), "");
}

TEST(InspectBodyTest, ReadsRoutingFields) {
  BodyInfo b = InspectBody(R"({"model":"m","stream":true,"max_tokens":7,"user":"u1",
    "metadata":{"user_id":"anthropic-user"},"messages":[{"role":"user","content":"hello"}]})");
  EXPECT_TRUE(b.json_object);
  EXPECT_EQ(b.model, "m");
  EXPECT_TRUE(b.stream);
  EXPECT_EQ(b.max_tokens, 7);
  EXPECT_EQ(b.user, "u1");
  EXPECT_EQ(b.metadata_user_id, "anthropic-user");
  EXPECT_EQ(b.prompt_text_bytes, 5 + 4);  // "hello" and the role "user"
  EXPECT_FALSE(b.conversation_digest.empty());
}

TEST(InspectBodyTest, TakesTheLargestOutputLimit) {
  EXPECT_EQ(InspectBody(R"({"max_tokens":5,"max_completion_tokens":9})").max_tokens, 9);
  EXPECT_EQ(InspectBody(R"({"max_output_tokens":11})").max_tokens, 11);
  EXPECT_FALSE(InspectBody(R"({"tools":[{"max_tokens":5}]})").max_tokens.has_value());
}

TEST(InspectBodyTest, NestedFieldsWithRoutingNamesAreIgnored) {
  BodyInfo b = InspectBody(R"({"tools":[{"user":"x","model":"y","stream":true}]})");
  EXPECT_TRUE(b.user.empty());
  EXPECT_TRUE(b.model.empty());
  EXPECT_FALSE(b.stream);
}

TEST(InspectBodyTest, ConversationDigestIsStableAcrossTurns) {
  BodyInfo t1 = InspectBody(R"({"messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":"tell me a story"}]})");
  BodyInfo t2 = InspectBody(R"({"messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":"tell me a story"},{"role":"assistant","content":"once"},
    {"role":"user","content":"go on"}]})");
  BodyInfo other = InspectBody(R"({"messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":"tell me a poem"}]})");
  EXPECT_EQ(t1.conversation_digest, t2.conversation_digest);
  EXPECT_NE(t1.conversation_digest, other.conversation_digest);
}

TEST(InspectBodyTest, RoleAfterContentStillFindsTheFirstUserMessage) {
  BodyInfo a = InspectBody(R"({"messages":[{"content":"q1","role":"user"}]})");
  BodyInfo b = InspectBody(
      R"({"messages":[{"content":"q1","role":"user"},{"content":"a1","role":"assistant"}]})");
  EXPECT_EQ(a.conversation_digest, b.conversation_digest);
}

TEST(InspectBodyTest, AnthropicSystemIsPartOfTheOpening) {
  BodyInfo a = InspectBody(R"({"system":"A","messages":[{"role":"user","content":"q"}]})");
  BodyInfo b = InspectBody(R"({"system":"B","messages":[{"role":"user","content":"q"}]})");
  BodyInfo c = InspectBody(
      R"({"system":[{"type":"text","text":"A"}],"messages":[{"role":"user","content":"q"}]})");
  EXPECT_NE(a.conversation_digest, b.conversation_digest);
  EXPECT_FALSE(c.conversation_digest.empty());
}

TEST(InspectBodyTest, ResponsesStringInputIsTheFirstUserMessage) {
  // Without it, every request with the same instructions would be one session on one backend.
  BodyInfo a = InspectBody(R"({"instructions":"be brief","input":"tell me a story"})");
  BodyInfo b = InspectBody(R"({"instructions":"be brief","input":"tell me a poem"})");
  BodyInfo c = InspectBody(R"({"input":"tell me a story","instructions":"be brief"})");
  // The same conversation sent back as items (stateless multi-turn) keeps its session.
  BodyInfo items = InspectBody(R"({"instructions":"be brief","input":[
    {"role":"user","content":"tell me a story"},{"role":"assistant","content":"once"},
    {"role":"user","content":"go on"}]})");
  BodyInfo typed = InspectBody(R"({"instructions":"be brief","input":[{"type":"message",
    "role":"user","content":[{"type":"input_text","text":"tell me a story"}]}]})");
  EXPECT_FALSE(a.conversation_digest.empty());
  EXPECT_NE(a.conversation_digest, b.conversation_digest);
  EXPECT_EQ(a.conversation_digest, c.conversation_digest);
  EXPECT_EQ(a.conversation_digest, items.conversation_digest);
  EXPECT_EQ(a.conversation_digest, typed.conversation_digest);
}

TEST(InspectBodyTest, TextBlocksAndPlainContentHashAlike) {
  BodyInfo plain = InspectBody(R"({"messages":[{"role":"user","content":"hi"}]})");
  BodyInfo blocks =
      InspectBody(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})");
  BodyInfo other = InspectBody(R"({"messages":[{"role":"user","content":"hello"}]})");
  EXPECT_EQ(plain.conversation_digest, blocks.conversation_digest);
  EXPECT_NE(plain.conversation_digest, other.conversation_digest);
}

TEST(InspectBodyTest, ImageDataIsNotCountedAsText) {
  BodyInfo b = InspectBody(R"({"messages":[{"role":"user","content":[
    {"type":"text","text":"abc"},
    {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAAAAAA"}}]}]})");
  // "user", "text", "abc", "image_url" (the type's value) — never the URL.
  EXPECT_EQ(b.prompt_text_bytes, 4 + 4 + 3 + 9);
}

// Image payloads of every API (OpenAI image_url, Responses input_image, Anthropic base64 and
// url sources, inside tool_result too) never count as prompt text for the pre-check.
TEST(InspectBodyTest, ImagePartsOfEveryApiAreNotText) {
  const std::string blob(4000, 'A');
  BodyInfo responses = InspectBody(R"({"input":[{"role":"user","content":[)"
                                   R"({"type":"input_image","image_url":"data:image/png;base64,)" +
                                   blob + R"(","detail":"low"}]}]})");
  EXPECT_TRUE(responses.json_object);
  EXPECT_LT(responses.prompt_text_bytes, 100);
  BodyInfo anthropic = InspectBody(
      R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":)"
      R"({"type":"base64","media_type":"image/png","data":")" + blob + R"("}},)"
      R"({"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":)"
      R"({"type":"url","url":"http://x/)" + blob + R"("}}]}]}]})");
  EXPECT_TRUE(anthropic.json_object);
  EXPECT_EQ(anthropic.max_tokens, 8);
  EXPECT_LT(anthropic.prompt_text_bytes, 200);
}

TEST(InspectBodyTest, TokenIdPromptsCountOneTokenPerId) {
  EXPECT_EQ(InspectBody(R"({"prompt":[1,2,3,4]})").prompt_token_ids, 4);
  EXPECT_EQ(InspectBody(R"({"prompt":[[1,2],[3]]})").prompt_token_ids, 3);
  EXPECT_EQ(InspectBody(R"({"prompt":"abcdef"})").prompt_text_bytes, 6);
}

TEST(InspectBodyTest, NonJsonAndTruncatedBodiesAreNotObjects) {
  EXPECT_FALSE(InspectBody("").json_object);
  EXPECT_FALSE(InspectBody("[1,2]").json_object);
  EXPECT_FALSE(InspectBody("{\"max_tokens\":").json_object);
  BodyInfo partial = InspectBody("{\"user\":\"u\",\"messages\":[");
  EXPECT_FALSE(partial.json_object);
  EXPECT_EQ(partial.user, "");  // nothing is read from an invalid body
  EXPECT_FALSE(InspectBody("{\"a\":\"\xff\"}").json_object);
  std::string deep(100000, '[');
  EXPECT_FALSE(InspectBody("{\"a\":" + deep).json_object);
}

TEST(SessionTest, HeaderThenUserThenMetadataThenConversation) {
  BodyInfo b = InspectBody(R"({"user":"u","metadata":{"user_id":"m"},
    "messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(ExtractSession("k", "s-1", b).source, "header");
  EXPECT_EQ(ExtractSession("k", " ", b).source, "user");
  b.user.clear();
  EXPECT_EQ(ExtractSession("k", "", b).source, "metadata.user_id");
  b.metadata_user_id.clear();
  EXPECT_EQ(ExtractSession("k", "", b).source, "conversation");
  b.conversation_digest.clear();
  SessionId none = ExtractSession("k", "", b);
  EXPECT_TRUE(none.key.empty());
  EXPECT_TRUE(none.source.empty());
}

TEST(SessionTest, KeysAreHashedPerTenant) {
  BodyInfo empty;
  SessionId a = ExtractSession("tenant-a", "s-1", empty);
  SessionId b = ExtractSession("tenant-b", "s-1", empty);
  EXPECT_EQ(a.key.size(), 32u);
  EXPECT_NE(a.key, b.key);
  EXPECT_EQ(a.key, ExtractSession("tenant-a", "s-1", empty).key);
  EXPECT_EQ(a.key.find("s-1"), std::string::npos);
}

// Whatever InspectBody (simdjson) accepts, nlohmann's SAX parser accepts and reads the same way;
// what it rejects leaves every field empty.
void ExpectSameAsNlohmann(const std::string& body) {
  BodyInfo fast = InspectBody(body);
  SCOPED_TRACE(body);
  if (!fast.json_object) {
    EXPECT_FALSE(fast.max_tokens.has_value());
    EXPECT_TRUE(fast.user.empty() && fast.model.empty() && fast.metadata_user_id.empty());
    EXPECT_EQ(fast.prompt_text_bytes, 0);
    EXPECT_EQ(fast.prompt_token_ids, 0);
    EXPECT_TRUE(fast.conversation_digest.empty());
    return;
  }
  BodyInfo ref = InspectBodyWithNlohmann(body);
  EXPECT_TRUE(ref.json_object);
  EXPECT_EQ(fast.max_tokens, ref.max_tokens);
  EXPECT_EQ(fast.stream, ref.stream);
  EXPECT_EQ(fast.model, ref.model);
  EXPECT_EQ(fast.user, ref.user);
  EXPECT_EQ(fast.metadata_user_id, ref.metadata_user_id);
  EXPECT_EQ(fast.prompt_text_bytes, ref.prompt_text_bytes);
  EXPECT_EQ(fast.prompt_token_ids, ref.prompt_token_ids);
  EXPECT_EQ(fast.conversation_digest, ref.conversation_digest);
}

TEST(InspectBodyTest, AgreesWithNlohmannOnEveryPrefixAndMutation) {
  const std::vector<std::string> corpus = {
      R"({"model":"m","stream":true,"max_tokens":7,"user":"u1","metadata":{"user_id":"a"},)"
      R"("messages":[{"role":"system","content":"be \"brief\"\n\t\\ \/ \b\f\r"},)"
      R"({"role":"user","content":[{"type":"text","text":"h\u00e9llo \ud83d\ude00 \u0000"},)"
      R"({"type":"image_url","image_url":{"url":"data:x"}}]}]})",
      R"( {"prompt":[[1,2],[3,-4]],"max_tokens":18446744073709551615,"temperature":1.5e-3,)"
      R"("max_completion_tokens":-9223372036854775808,"x":[null,false,true,0,-0,1E5,2.0]} )",
      R"({"max_tokens":18446744073709551616,"max_output_tokens":-9223372036854775809,"n":01})",
      "{\"system\":[{\"type\":\"text\",\"text\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}],"
      "\"messages\":[{\"content\":\"q\",\"role\":\"user\"}],\"metadata\":{\"user_id\":\"\\u00ff\"}"
      "}",
      R"({"input":[{"role":"user","content":"a"}],"instructions":"i","a":{"b":{"c":[[[]]]}}})",
      R"({"messages":[{"role":"user","content":"\ud800"}]})",
      R"({"messages":[{"role":"user","content":"\udc00x"}],"user":"u"})",
      R"({"a":[1,],"b":2})",
      R"({"a":tru})",
      "{\"a\":\"\x01\"}",
      "{\"a\":\"\xc0\x80\",\"b\":\"\xed\xa0\x80\",\"c\":\"\xf4\x90\x80\x80\"}",
      R"({"a":1}{"b":2})",
  };
  const char kReplacements[] = {'"', '\\', '{', '}', '[', ']', ',',  ':',    '0',
                                '-', 'e',  '.', ' ', 'u', 'x', '\0', '\x80', '\xff'};
  for (const std::string& body : corpus) {
    for (size_t n = 0; n <= body.size(); ++n) ExpectSameAsNlohmann(body.substr(0, n));
    for (size_t i = 0; i < body.size(); ++i) {
      for (char c : kReplacements) {
        std::string mutated = body;
        mutated[i] = c;
        ExpectSameAsNlohmann(mutated);
      }
    }
  }
  std::string deep = "{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}";
  ExpectSameAsNlohmann(deep);
}

TEST(PreCheckTest, RejectsMaxTokensAboveTheLimit) {
  PreCheckLimits limits{1000, 32};
  absl::Status s = PreCheck(InspectBody(R"({"max_tokens":1001,"messages":[]})"), limits);
  EXPECT_EQ(ErrorCodeOf(s), "context_length_exceeded");
  http::ApiError e = http::ApiErrorFromStatus(s);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.n_ctx, 1000);
  EXPECT_TRUE(PreCheck(InspectBody(R"({"max_tokens":1000})"), limits).ok());
}

TEST(PreCheckTest, NamesTheFieldTheClientSent) {
  PreCheckLimits limits{1000, 32};
  for (std::string field : {"max_completion_tokens", "max_output_tokens"}) {
    absl::Status s = PreCheck(InspectBody(R"({")" + field + R"(":5000,"max_tokens":3})"), limits);
    EXPECT_EQ(http::ApiErrorFromStatus(s).param, field);
  }
  std::string text(40000, 'a');  // at least 1,250 tokens
  absl::Status s = PreCheck(InspectBody(R"({"input":")" + text + "\"}"), limits);
  http::ApiError e = http::ApiErrorFromStatus(s);
  EXPECT_EQ(e.param, "input");
  // The gateway never tokenizes: its count is a lower bound, and the message says so.
  EXPECT_NE(e.message.find("at least 1250 in the input"), std::string::npos) << e.message;
  s = PreCheck(InspectBody(R"({"prompt":")" + text + "\"}"), limits);
  EXPECT_EQ(http::ApiErrorFromStatus(s).param, "prompt");
}

TEST(PreCheckTest, RejectsPromptsWhoseLowerBoundCannotFit) {
  PreCheckLimits limits{100, 4};
  std::string text(360, 'a');  // at least 90 tokens
  std::string body = R"({"max_tokens":20,"messages":[{"role":"user","content":")" + text + "\"}]}";
  absl::Status s = PreCheck(InspectBody(body), limits);
  EXPECT_EQ(ErrorCodeOf(s), "context_length_exceeded");
  EXPECT_EQ(http::ApiErrorFromStatus(s).param, "messages");
  std::string fits = R"({"max_tokens":5,"messages":[{"role":"user","content":")" + text + "\"}]}";
  EXPECT_TRUE(PreCheck(InspectBody(fits), limits).ok());
  EXPECT_EQ(ErrorCodeOf(PreCheck(InspectBody(R"({"prompt":[1,2,3],"max_tokens":98})"), limits)),
            "context_length_exceeded");
}

// The backend refuses these as numbers (api::ParseGenerationParams); the gateway answers as it
// would, not with a context verdict about 9223372036854775807 tokens.
TEST(PreCheckTest, AMaxTokensNoBackendCouldReadGetsTheBackendsAnswer) {
  PreCheckLimits limits{1000, 32};
  struct Case {
    const char* body;
    const char* code;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"max_tokens":10000000000000000000,"messages":[]})", "invalid_type", "max_tokens",
       "'max_tokens' must be an integer."},
      {R"({"max_completion_tokens":10000000000000000000,"messages":[]})", "invalid_type",
       "max_completion_tokens", "'max_completion_tokens' must be an integer."},
      {R"({"max_tokens":4294967296,"messages":[]})", "invalid_value", "max_tokens",
       "'max_tokens' is too large."},
      // A non-integral float within range (found by gateway_fuzz: the harness expected only a
      // context verdict; corpus regress_float_max_tokens.txt).
      {R"({"max_tokens":4000.15,"messages":[]})", "invalid_type", "max_tokens",
       "'max_tokens' must be an integer."},
      {R"({"max_tokens":1e300,"messages":[]})", "invalid_type", "max_tokens",
       "'max_tokens' must be an integer."},
      {R"({"max_tokens":5000000000.0,"messages":[]})", "invalid_value", "max_tokens",
       "'max_tokens' is too large."},
      {R"({"max_output_tokens":10000000000000000000,"input":"x"})", "invalid_value",
       "max_output_tokens", "'max_output_tokens' must be a positive integer."},
  };
  for (const Case& c : cases) {
    http::ApiError e = http::ApiErrorFromStatus(PreCheck(InspectBody(c.body), limits));
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.message, c.message) << c.body;
  }
  // An integer beyond uint64 is no JSON simdjson reads: the body goes to the backend, which
  // answers for itself.
  EXPECT_TRUE(
      PreCheck(InspectBody(R"({"max_tokens":99999999999999999999999,"messages":[]})"), limits)
          .ok());
  // Within int32, a count above the window is still the context verdict.
  EXPECT_EQ(ErrorCodeOf(PreCheck(InspectBody(R"({"max_tokens":2147483647})"), limits)),
            "context_length_exceeded");
}

TEST(PreCheckTest, UnparsableBodiesPassToTheBackend) {
  EXPECT_TRUE(PreCheck(InspectBody("not json"), PreCheckLimits{1, 1}).ok());
}

}  // namespace
}  // namespace deepinfer::gateway
