#include "protocol/openai_types.h"

#include <tuple>

#include "gtest/gtest.h"
#include "http/errors.h"
#include "protocol/anthropic_types.h"
#include "protocol/responses_types.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

ParseLimits Limits() { return ParseLimits{1000}; }

// Expects a 400 naming `param` and returns the stable code.
std::string RejectChat(const std::string& body, const std::string& param) {
  auto r = ParseChatRequest(body, Limits());
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  http::ApiError e = http::ApiErrorFromStatus(r.status());
  EXPECT_EQ(e.http_status, 400) << body;
  EXPECT_EQ(e.param, param) << body << " -> " << r.status();
  return e.code;
}

std::string RejectCompletion(const std::string& body, const std::string& param) {
  auto r = ParseCompletionRequest(body, Limits());
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  http::ApiError e = http::ApiErrorFromStatus(r.status());
  EXPECT_EQ(e.http_status, 400) << body;
  EXPECT_EQ(e.param, param) << body << " -> " << r.status();
  return e.code;
}

TEST(StructuredOutputParseTest, EveryFieldGivesItsConstraint) {
  using constraint::ConstraintKind;
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  struct Case {
    std::string fields;
    ConstraintKind kind;
    std::string text;
    std::string param;
  };
  const std::vector<Case> cases = {
      {R"("response_format":{"type":"json_object"})", ConstraintKind::kJsonObject, "",
       "response_format"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object"},"strict":true}})",
       ConstraintKind::kJsonSchema, R"({"type":"object"})", "response_format.json_schema.schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"p"}})",
       ConstraintKind::kJsonObject, "", "response_format"},
      {R"("structured_outputs":{"json":"{\"type\":\"array\"}"})", ConstraintKind::kJsonSchema,
       R"({"type":"array"})", "structured_outputs.json"},
      {R"("structured_outputs":{"regex":"[a-z]+"})", ConstraintKind::kRegex, "[a-z]+",
       "structured_outputs.regex"},
      {R"("structured_outputs":{"grammar":"root ::= \"a\""})", ConstraintKind::kGrammar,
       R"(root ::= "a")", "structured_outputs.grammar"},
      {R"("structured_outputs":{"json_object":true})", ConstraintKind::kJsonObject, "",
       "structured_outputs.json_object"},
      {R"("guided_json":{"type":"object"})", ConstraintKind::kJsonSchema, R"({"type":"object"})",
       "guided_json"},
      {R"("guided_regex":"\\d+")", ConstraintKind::kRegex, "\\d+", "guided_regex"},
      {R"("guided_grammar":"root ::= \"b\"")", ConstraintKind::kGrammar, R"(root ::= "b")",
       "guided_grammar"},
  };
  for (const Case& c : cases) {
    auto r = ParseChatRequest("{" + msgs + "," + c.fields + "}", Limits());
    ASSERT_TRUE(r.ok()) << c.fields << " " << r.status();
    ASSERT_TRUE(r->params.constraint.has_value()) << c.fields;
    EXPECT_EQ(r->params.constraint->kind, c.kind) << c.fields;
    EXPECT_EQ(r->params.constraint->text, c.text) << c.fields;
    EXPECT_EQ(r->params.constraint_param, c.param) << c.fields;
  }
  auto choice = ParseCompletionRequest(R"({"prompt":"x","guided_choice":["yes","no"]})", Limits());
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->params.constraint->kind, ConstraintKind::kChoice);
  EXPECT_EQ(choice->params.constraint->choices, (std::vector<std::string>{"yes", "no"}));
  auto text = ParseChatRequest("{" + msgs + R"(,"response_format":{"type":"text"}})", Limits());
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->params.constraint.has_value());
  auto responses = ParseResponsesRequest(
      R"({"input":"x","text":{"format":{"type":"json_schema","name":"p","schema":{"type":"object"}}}})",
      Limits());
  ASSERT_TRUE(responses.ok()) << responses.status();
  EXPECT_EQ(responses->params.constraint->kind, ConstraintKind::kJsonSchema);
  EXPECT_EQ(responses->params.constraint_param, "text.format");
}

TEST(StructuredOutputParseTest, MalformedOrConflictingFieldsAre400s) {
  const std::string m = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(RejectChat(m + R"("response_format":"json"})", "response_format"), "invalid_type");
  EXPECT_EQ(RejectChat(m + R"("response_format":{"type":"xml"}})", "response_format.type"),
            "unsupported_value");
  EXPECT_EQ(RejectChat(m + R"("response_format":{"type":"json_schema"}})",
                       "response_format.json_schema"),
            "missing_field");
  EXPECT_EQ(RejectChat(m + R"("guided_choice":[]})", "guided_choice"), "invalid_type");
  EXPECT_EQ(RejectChat(m + R"("guided_choice":["a",1]})", "guided_choice"), "invalid_type");
  EXPECT_EQ(RejectChat(m + R"("guided_regex":""})", "guided_regex"), "invalid_type");
  EXPECT_EQ(RejectChat(m + R"("structured_outputs":{"xml":"x"}})", "structured_outputs.xml"),
            "unsupported_value");
  EXPECT_EQ(RejectChat(m + R"("response_format":{"type":"json_object"},"guided_regex":"a"})",
                       "guided_regex"),
            "invalid_value");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","guided_json":7})", "guided_json"), "invalid_type");
}

TEST(ParseChatRequestTest, ReadsAMinimalRequestWithDefaults) {
  auto r =
      ParseChatRequest(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.model, "m");
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].role, "user");
  EXPECT_EQ(r->messages[0].content, "hi");
  EXPECT_EQ(r->params.n, 1);
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_FALSE(r->params.stream);
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);
  EXPECT_EQ(r->params.sampling.num_top_logprobs, -1);
}

TEST(ParseChatRequestTest, ReadsEverySupportedField) {
  auto r = ParseChatRequest(R"({
    "model": "m", "n": 2, "max_tokens": 10, "max_completion_tokens": 20, "stop": ["a", "bb"],
    "temperature": 0, "top_p": 0.5, "top_k": 40, "min_p": 0.1, "seed": 7,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logprobs": true, "top_logprobs": 3, "logit_bias": {"5": -100, "9": 2.5}, "user": "u",
    "ignore_eos": true, "stop_token_ids": [1, 2], "stream": true, "min_tokens": 4,
    "stream_options": {"include_usage": true}, "unknown_field": {"x": 1},
    "messages": [{"role": "system", "content": "s"},
                 {"role": "user", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]},
                 {"role": "assistant", "content": null, "tool_calls": []}]})",
                            Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerationParams& p = r->params;
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_EQ(p.min_tokens, 4);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_TRUE(p.sampling.has_seed);
  EXPECT_EQ(p.sampling.seed, 7u);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(p.sampling.num_top_logprobs, 3);
  ASSERT_EQ(p.sampling.logit_bias.size(), 2u);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].content, "a\nb");  // parts joined with a newline, as vLLM does
  EXPECT_FALSE(r->messages[2].has_content);
  EXPECT_EQ(r->messages[2].tool_calls_json, "[]");
}

TEST(ParseChatRequestTest, IncludeUsageNeedsStream) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
      Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->params.include_usage);
}

TEST(ParseChatRequestTest, LogprobsWithoutTopLogprobsMeansZero) {
  auto r =
      ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})", Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.sampling.num_top_logprobs, 0);
}

TEST(ParseChatRequestTest, NullMeansAbsent) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"temperature":null,"stop":null,"n":null})",
      Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);
}

TEST(ParseChatRequestTest, RejectsInvalidJson) {
  EXPECT_EQ(RejectChat("{", ""), "invalid_json");
  EXPECT_EQ(RejectChat("", ""), "invalid_json");
  EXPECT_EQ(RejectChat("{\"messages\": []} trailing", ""), "invalid_json");
  EXPECT_EQ(RejectChat("[1]", ""), "invalid_type");
  EXPECT_EQ(RejectChat("\"\xff\"", ""), "invalid_json");
}

TEST(ParseChatRequestTest, RejectsDeepNesting) {
  std::string deep(100000, '[');
  EXPECT_EQ(RejectChat(deep, ""), "invalid_json");
}

TEST(ParseChatRequestTest, RejectsBadMessages) {
  EXPECT_EQ(RejectChat("{}", "messages"), "missing_field");
  EXPECT_EQ(RejectChat(R"({"messages":"hi"})", "messages"), "invalid_type");
  EXPECT_EQ(RejectChat(R"({"messages":[]})", "messages"), "invalid_value");
  EXPECT_EQ(RejectChat(R"({"messages":[1]})", "messages[0]"), "invalid_type");
  EXPECT_EQ(RejectChat(R"({"messages":[{"content":"x"}]})", "messages[0].role"), "missing_field");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"),
            "invalid_value");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"),
            "invalid_type");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user"}]})", "messages[0].content"),
            "missing_field");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
                       "messages[0].content[0]"),
            "unsupported_value");
}

// Image parts are parsed into ImageRefs on every API, in order with the text: the OpenAI chat
// part (detail accepted and ignored), the Responses input_image and the Anthropic image block
// (base64 -> data: URI, url; in a message or a tool_result). Each leaves one placeholder.
TEST(ImageContentTest, EveryApiKeepsImagesInOrderWithTheirPlaceholders) {
  const std::string ph(kImagePlaceholder);
  {
    auto r = ParseChatRequest(
        R"({"messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}},)"
        R"({"type":"text","text":"and"},{"type":"image_url","image_url":"http://x/y.png"}]}]})",
        Limits());
    ASSERT_TRUE(r.ok()) << r.status();
    const ChatMessage& m = r->messages[0];
    EXPECT_EQ(m.content, "What is it?\n" + ph + "\nand\n" + ph);
    ASSERT_EQ(m.images.size(), 2u);
    EXPECT_EQ(m.images[0].url, "data:image/png;base64,AAAA");
    EXPECT_EQ(m.images[0].param, "messages[0].content[1]");
    EXPECT_EQ(m.images[1].url, "http://x/y.png");
    EXPECT_EQ(CountImages(r->messages), 2);
  }
  {
    auto r = ParseResponsesRequest(
        R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:,x",)"
        R"("detail":"auto"},{"type":"input_text","text":"hi"}]}]})",
        Limits());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(CountImages(r->messages), 1);
    EXPECT_EQ(r->messages.back().content, ph + "\nhi");
  }
  const std::string image =
      R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}})";
  auto r = ParseAnthropicMessagesRequest(
      R"({"max_tokens":8,"messages":[{"role":"user","content":[)" + image +
          R"(,{"type":"image","source":{"type":"url","url":"http://a/b.png"}}]},)"
          R"({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},)"
          R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[)"
          R"({"type":"text","text":"ok"},)" +
          image + "]}]}]}",
      Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.num_images, 3);
  ASSERT_EQ(CountImages(r->chat.messages), 3);
  EXPECT_EQ(r->chat.messages[0].images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(r->chat.messages[0].images[1].url, "http://a/b.png");
  EXPECT_EQ(r->chat.messages[2].role, "tool");
  EXPECT_EQ(r->chat.messages[2].content, "ok\n" + ph);
  EXPECT_EQ(r->chat.messages[2].images[0].param, "messages[2].content[0].content[1]");
  EXPECT_TRUE(IsImagePart(util::Json::parse(image)));
  EXPECT_FALSE(IsImagePart(util::Json::parse(R"({"type":"text","text":"image"})")));
}

// Malformed image parts are clear 400s naming the field.
TEST(ImageContentTest, MalformedImagePartsAreRefused) {
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                       "messages[0].content[0].image_url"),
            "missing_field");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user","content":[{"type":"image_url",)"
                       R"("image_url":{"url":5}}]}]})",
                       "messages[0].content[0].image_url.url"),
            "invalid_type");
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"assistant","content":[{"type":"image_url",)"
                       R"("image_url":{"url":"data:,"}}]}]})",
                       "messages[0].content[0]"),
            "invalid_value");
  auto responses = ParseResponsesRequest(
      R"({"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]})",
      Limits());
  ASSERT_FALSE(responses.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(responses.status()).code, "unsupported_value");
  EXPECT_EQ(http::ApiErrorFromStatus(responses.status()).param, "input[0].content[0].file_id");
  auto anthropic = ParseAnthropicMessagesRequest(
      R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":"image",)"
      R"("source":{"type":"file","file_id":"f"}}]}]})",
      Limits());
  ASSERT_FALSE(anthropic.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(anthropic.status()).code, "unsupported_value");
}

TEST(ParseAnthropicMessagesRequestTest, EmptyMessagesAreInvalid) {
  // Found by trying the server as a new user: [] used to be answered from the system prompt.
  for (const char* body : {R"({"max_tokens":8,"messages":[]})",
                           R"({"max_tokens":8,"system":"be brief","stream":true,"messages":[]})"}) {
    auto r = ParseAnthropicMessagesRequest(body, Limits());
    ASSERT_FALSE(r.ok()) << body;
    http::ApiError e = http::ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.code, "invalid_value") << body;
    EXPECT_EQ(e.param, "messages") << body;
  }
}

// Found by trying real clients: "You are an expert" + "Answer briefly." became one word.
TEST(TextPartsTest, AreJoinedWithANewlineOnEveryApi) {
  auto chat = ParseChatRequest(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "You are an expert"}, {"type": "text", "text": "Answer briefly."},
      {"type": "text", "text": ""}]}]})",
                               Limits());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->messages[0].content, "You are an expert\nAnswer briefly.\n");
  auto messages = ParseAnthropicMessagesRequest(R"({"max_tokens": 8,
      "system": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
          {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r1"},
                                                                 {"type": "text", "text": "r2"}]},
          {"type": "text", "text": "b"}]}]})",
                                                Limits());
  ASSERT_TRUE(messages.ok()) << messages.status();
  const std::vector<ChatMessage>& m = messages->chat.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].content, "s1\ns2");
  EXPECT_EQ(m[1].role, "tool");
  EXPECT_EQ(m[1].content, "r1\nr2");
  EXPECT_EQ(m[2].content, "a\nb");
  auto responses = ParseResponsesRequest(R"({"input": [{"role": "user", "content": [
      {"type": "input_text", "text": "x"}, {"type": "input_text", "text": "y"}]}]})",
                                         Limits());
  ASSERT_TRUE(responses.ok()) << responses.status();
  EXPECT_EQ(responses->messages.back().content, "x\ny");
  // One part stays as it is.
  auto one = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "z"}]}]})", Limits());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->messages[0].content, "z");
}

TEST(AnthropicStructuredOutputTest, OutputConfigFormatAndOutputFormatBecomeAJsonSchema) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  for (const std::string& field :
       {R"("output_config": {"format": {"type": "json_schema", "schema": )" + schema + "}}",
        R"("output_format": {"type": "json_schema", "schema": )" + schema + "}"}) {
    auto r = ParseAnthropicMessagesRequest(
        R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], )" + field + "}",
        Limits());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->params.constraint.has_value()) << field;
    EXPECT_EQ(r->params.constraint->kind, constraint::ConstraintKind::kJsonSchema);
    EXPECT_EQ(util::Json::parse(r->params.constraint->text), util::Json::parse(schema));
  }
  // Effort and format together.
  auto both = ParseAnthropicMessagesRequest(R"({"max_tokens": 8, "messages": [{"role": "user",
      "content": "hi"}], "output_config": {"effort": "high", "format": {"type": "json_schema",
      "schema": {"type": "object"}}}})",
                                            Limits());
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->chat.options.reasoning_effort, "high");
  EXPECT_TRUE(both->params.constraint.has_value());
  for (const auto& [field, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("output_format": "json")", "output_format"},
           {R"("output_format": {"type": "text"})", "output_format.type"},
           {R"("output_format": {"type": "json_schema"})", "output_format.schema"},
           {R"("output_config": {"format": {"type": "json_schema", "schema": 5}})",
            "output_config.format.schema"},
           {R"("output_config": {"format": []})", "output_config.format"}}) {
    auto r = ParseAnthropicMessagesRequest(
        R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], )" + field + "}",
        Limits());
    ASSERT_FALSE(r.ok()) << field;
    http::ApiError e = http::ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400) << field;
    EXPECT_EQ(e.code, "invalid_constraint") << field;
    EXPECT_EQ(e.param, param) << field;
  }
  auto twice = ParseAnthropicMessagesRequest(R"({"max_tokens": 8, "messages": [{"role": "user",
      "content": "hi"}], "output_format": {"type": "json_schema", "schema": {}},
      "output_config": {"format": {"type": "json_schema", "schema": {}}}})",
                                             Limits());
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(twice.status()).code, "invalid_value");
}

TEST(AnthropicThinkingTest, BudgetTokensIsReadAndCheckedAndUnknownTypesRefused) {
  auto r = ParseAnthropicMessagesRequest(R"({"max_tokens": 64, "messages": [{"role": "user",
      "content": "hi"}], "thinking": {"type": "enabled", "budget_tokens": 20}})",
                                         Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->chat.options.thinking);
  EXPECT_EQ(r->params.reasoning_budget, 20);
  auto off = ParseAnthropicMessagesRequest(R"({"max_tokens": 64, "messages": [{"role": "user",
      "content": "hi"}], "thinking": {"type": "disabled"}})",
                                           Limits());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->chat.options.thinking);
  EXPECT_EQ(off->params.reasoning_budget, -1);
  for (const auto& [thinking, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "enabled", "budget_tokens": -1})", "thinking.budget_tokens"},
           {R"({"type": "enabled", "budget_tokens": "10"})", "thinking.budget_tokens"},
           {R"({"type": "sometimes"})", "thinking.type"},
           {R"("enabled")", "thinking"}}) {
    auto bad = ParseAnthropicMessagesRequest(
        R"({"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "thinking": )" +
            thinking + "}",
        Limits());
    ASSERT_FALSE(bad.ok()) << thinking;
    EXPECT_EQ(http::ApiErrorFromStatus(bad.status()).param, param) << thinking;
  }
}

TEST(ParseCompletionRequestTest, SuffixAndBestOfAreRefusedUnlessTheyAskForNothing) {
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","suffix":"end"})", "suffix"), "unsupported_value");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","suffix":3})", "suffix"), "invalid_type");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","best_of":3,"n":2})", "best_of"),
            "unsupported_value");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","best_of":1,"n":2})", "best_of"), "invalid_value");
  for (const char* fine : {R"({"prompt":"x","suffix":""})", R"({"prompt":"x","suffix":null})",
                           R"({"prompt":"x","best_of":2,"n":2})", R"({"prompt":"x","best_of":1})"}) {
    EXPECT_TRUE(ParseCompletionRequest(fine, Limits()).ok()) << fine;
  }
}

TEST(StreamUsageTest, ContinuousStatsAndForcedUsageTurnUsageOnForStreamsOnly) {
  auto continuous = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "stream": true, "stream_options": {"continuous_usage_stats": true}})",
                                     Limits());
  ASSERT_TRUE(continuous.ok());
  EXPECT_TRUE(continuous->params.include_usage);
  EXPECT_TRUE(continuous->params.continuous_usage);
  ParseLimits forced = Limits();
  forced.force_include_usage = true;
  auto streamed = ParseCompletionRequest(R"({"prompt": "x", "stream": true})", forced);
  ASSERT_TRUE(streamed.ok());
  EXPECT_TRUE(streamed->params.include_usage);
  EXPECT_FALSE(streamed->params.continuous_usage);
  auto whole = ParseCompletionRequest(R"({"prompt": "x"})", forced);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->params.include_usage);
  EXPECT_EQ(RejectChat(R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
      "stream_options": {"continuous_usage_stats": 1}})",
                       "stream_options.continuous_usage_stats"),
            "invalid_type");
}

TEST(ResponsesRequestTest, IncludeTakesEncryptedReasoningAndRefusesOtherValuesByName) {
  auto r = ParseResponsesRequest(
      R"({"input": "hi", "store": false, "include": ["reasoning.encrypted_content"]})", {});
  ASSERT_TRUE(r.ok()) << r.status();
  for (const auto& [include, param, code] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"(["reasoning.encrypted_content", "file_search_call.results"])", "include[1]",
            "unsupported_value"},
           {R"(["message.output_text.logprobs"])", "include[0]", "unsupported_value"},
           {R"([5])", "include[0]", "invalid_type"},
           {R"("reasoning.encrypted_content")", "include", "invalid_type"}}) {
    auto bad = ParseResponsesRequest(R"({"input": "hi", "include": )" + include + "}", {});
    ASSERT_FALSE(bad.ok()) << include;
    http::ApiError e = http::ApiErrorFromStatus(bad.status());
    EXPECT_EQ(e.param, param) << include;
    EXPECT_EQ(e.code, code) << include;
    if (code == "unsupported_value") {
      const std::string named =
          util::Json::parse(include)[param == "include[1]" ? 1 : 0].get<std::string>();
      EXPECT_NE(e.message.find(named), std::string::npos) << e.message;
    }
  }
}

TEST(ToolChoiceTest, EveryApiSpellingIsRead) {
  using Mode = ToolChoice::Mode;
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  struct Case {
    std::string fields;
    Mode mode;
    std::string name;
    bool parallel;
  };
  for (const Case& c : std::vector<Case>{
           {"", Mode::kAuto, "", true},
           {R"("tool_choice":"auto")", Mode::kAuto, "", true},
           {R"("tool_choice":"none")", Mode::kNone, "", true},
           {R"("tool_choice":"required","parallel_tool_calls":false)", Mode::kRequired, "", false},
           {R"("tool_choice":{"type":"function","function":{"name":"f"}})", Mode::kNamed, "f", true},
           {R"("tool_choice":{"type":"function","name":"g"})", Mode::kNamed, "g", true}}) {
    auto chat = ParseChatRequest("{" + msgs + (c.fields.empty() ? "" : ",") + c.fields + "}",
                                 Limits());
    ASSERT_TRUE(chat.ok()) << c.fields << chat.status();
    EXPECT_EQ(chat->tool_choice.mode, c.mode) << c.fields;
    EXPECT_EQ(chat->tool_choice.name, c.name) << c.fields;
    EXPECT_EQ(chat->tool_choice.parallel, c.parallel) << c.fields;
    auto resp = ParseResponsesRequest(
        R"({"input":"hi")" + std::string(c.fields.empty() ? "" : ",") + c.fields + "}", Limits());
    ASSERT_TRUE(resp.ok()) << c.fields << resp.status();
    EXPECT_EQ(resp->tool_choice.mode, c.mode) << c.fields;
    EXPECT_EQ(resp->tool_choice.name, c.name) << c.fields;
  }
  const std::string anthropic = R"({"max_tokens":8,"messages":[{"role":"user","content":"hi"}],)";
  for (const Case& c : std::vector<Case>{
           {R"("tool_choice":{"type":"any"})", Mode::kRequired, "", true},
           {R"("tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true})",
            Mode::kNamed, "f", false},
           {R"("tool_choice":{"type":"none"})", Mode::kNone, "", true}}) {
    auto r = ParseAnthropicMessagesRequest(anthropic + c.fields + "}", Limits());
    ASSERT_TRUE(r.ok()) << c.fields << r.status();
    EXPECT_EQ(r->tool_choice.mode, c.mode) << c.fields;
    EXPECT_EQ(r->tool_choice.name, c.name) << c.fields;
    EXPECT_EQ(r->tool_choice.parallel, c.parallel) << c.fields;
  }
  // Malformed choices name the field.
  struct Bad {
    std::string body;
    std::string code;
    std::string param;
  };
  for (const Bad& b : std::vector<Bad>{
           {"{" + msgs + R"(,"tool_choice":"sometimes"})", "invalid_value", "tool_choice"},
           {"{" + msgs + R"(,"tool_choice":{"type":"function"}})", "missing_field",
            "tool_choice.function.name"},
           {"{" + msgs + R"(,"tool_choice":{"type":"web_search"}})", "unsupported_value",
            "tool_choice.type"},
           {"{" + msgs + R"(,"tool_choice":{"type":"function","function":"f"}})", "invalid_type",
            "tool_choice.function"},
           {"{" + msgs + R"(,"parallel_tool_calls":"no"})", "invalid_type",
            "parallel_tool_calls"}}) {
    auto r = ParseChatRequest(b.body, Limits());
    ASSERT_FALSE(r.ok()) << b.body;
    http::ApiError e = http::ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.code, b.code) << b.body;
    EXPECT_EQ(e.param, b.param) << b.body;
  }
  auto no_name = ParseAnthropicMessagesRequest(anthropic + R"("tool_choice":{"type":"tool"}})",
                                               Limits());
  ASSERT_FALSE(no_name.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(no_name.status()).param, "tool_choice.name");
}

TEST(StructuredOutputFieldsTest, WrongTypesAreInvalidTypeNotInternalErrors) {
  // Found by a new user's trial: a non-string type was a 500.
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  for (const auto& [fields, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("response_format":{"type":5})", "response_format.type"},
           {R"("response_format":{"type":"json_schema","json_schema":{"name":5,"schema":{}}})",
            "response_format.json_schema.name"},
           {R"("response_format":{"type":"json_schema","json_schema":{"strict":"yes"}})",
            "response_format.json_schema.strict"}}) {
    auto r = ParseChatRequest("{" + msgs + "," + fields + "}", Limits());
    ASSERT_FALSE(r.ok()) << fields;
    http::ApiError e = http::ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.code, "invalid_type") << fields;
    EXPECT_EQ(e.param, param) << fields;
  }
  auto resp = ParseResponsesRequest(R"({"input":"hi","text":{"format":{"type":5}}})", Limits());
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(resp.status()).code, "invalid_type");
  auto anth = ParseAnthropicMessagesRequest(
      R"({"max_tokens":8,"messages":[{"role":"user","content":[{"type":5}]}]})", Limits());
  ASSERT_FALSE(anth.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(anth.status()).http_status, 400);
  auto ws = ParseChatRequest(
      "{" + msgs + R"(,"structured_outputs":{"json":{},"disable_any_whitespace":true}})", Limits());
  ASSERT_TRUE(ws.ok()) << ws.status();
}

TEST(ParseChatRequestTest, RejectsOutOfRangeValues) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  auto body = [&](const std::string& field) { return "{" + m + "," + field + "}"; };
  EXPECT_EQ(RejectChat(body(R"("temperature":-0.1)"), "temperature"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("temperature":2.5)"), "temperature"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("temperature":"hot")"), "temperature"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("top_p":0)"), "top_p"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("top_p":1.5)"), "top_p"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("n":0)"), "n"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("n":17)"), "n"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("n":1.5)"), "n"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("max_tokens":0)"), "max_tokens"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("max_completion_tokens":-3)"), "max_completion_tokens"),
            "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("max_tokens":1e300)"), "max_tokens"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("min_tokens":-1)"), "min_tokens"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("min_tokens":5,"max_tokens":4)"), "min_tokens"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("min_tokens":"2")"), "min_tokens"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("top_logprobs":21,"logprobs":true)"), "top_logprobs"),
            "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("top_logprobs":2)"), "top_logprobs"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("logprobs":3)"), "logprobs"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n",)"
                            R"("o","p","q"])"),
                       "stop"),
            "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("stop":[1])"), "stop"), "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("logit_bias":{"abc":1})"), "logit_bias"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("logit_bias":{"5":101})"), "logit_bias"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("logit_bias":{"5000":1})"), "logit_bias"), "invalid_token");
  EXPECT_EQ(RejectChat(body(R"("stop_token_ids":[-1])"), "stop_token_ids"), "invalid_token");
  EXPECT_EQ(RejectChat(body(R"("presence_penalty":3)"), "presence_penalty"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("min_p":2)"), "min_p"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("top_k":-2)"), "top_k"), "invalid_value");
  EXPECT_EQ(RejectChat(body(R"("stream":"yes")"), "stream"), "invalid_type");
  EXPECT_EQ(
      RejectChat(body(R"("stream_options":{"include_usage":1})"), "stream_options.include_usage"),
      "invalid_type");
  EXPECT_EQ(RejectChat(body(R"("model":5)"), "model"), "invalid_type");
}

TEST(ParseCompletionRequestTest, AcceptsEveryPromptShape) {
  auto one = ParseCompletionRequest(R"({"prompt":"hi"})", Limits());
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->prompts.size(), 1u);
  EXPECT_EQ(one->prompts[0].text, "hi");
  auto many = ParseCompletionRequest(R"({"prompt":["a","b"]})", Limits());
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->prompts.size(), 2u);
  auto ids = ParseCompletionRequest(R"({"prompt":[1,2,3]})", Limits());
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_TRUE(ids->prompts[0].is_tokens);
  EXPECT_EQ(ids->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto nested = ParseCompletionRequest(R"({"prompt":[[1],[2,3]]})", Limits());
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->prompts.size(), 2u);
}

TEST(ParseCompletionRequestTest, ReadsLogprobsAndEcho) {
  auto r = ParseCompletionRequest(R"({"prompt":"x","logprobs":2})", Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.sampling.num_top_logprobs, 2);
  auto e = ParseCompletionRequest(R"({"prompt":"x","echo":true})", Limits());
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->echo);
}

TEST(ParseCompletionRequestTest, RejectsBadPromptsAndLogprobs) {
  EXPECT_EQ(RejectCompletion("{}", "prompt"), "missing_field");
  EXPECT_EQ(RejectCompletion(R"({"prompt":5})", "prompt"), "invalid_type");
  EXPECT_EQ(RejectCompletion(R"({"prompt":[]})", "prompt"), "invalid_value");
  EXPECT_EQ(RejectCompletion(R"({"prompt":[1,"a"]})", "prompt"), "invalid_type");
  EXPECT_EQ(RejectCompletion(R"({"prompt":[1000]})", "prompt"), "invalid_token");
  EXPECT_EQ(RejectCompletion(R"({"prompt":[{"a":1}]})", "prompt"), "invalid_type");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","logprobs":6})", "logprobs"), "invalid_value");
  EXPECT_EQ(RejectCompletion(R"({"prompt":"x","logprobs":true})", "logprobs"), "invalid_type");
  EXPECT_EQ(RejectCompletion(R"({"prompt":["a","b","c","d","e","f","g","h","i"],"n":16})", "n"),
            "invalid_value");
}

TEST(ParseTokenizeRequestTest, ReadsPromptOrMessages) {
  auto p = ParseTokenizeRequest(R"({"model":"m","prompt":"hello"})", Limits());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_messages);
  EXPECT_EQ(p->prompt, "hello");
  auto m = ParseTokenizeRequest(
      R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false})", Limits());
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->has_messages);
  EXPECT_FALSE(m->extras.add_generation_prompt);
  EXPECT_FALSE(ParseTokenizeRequest("{}", Limits()).ok());
}

TEST(ChatRequestTest, ContinueFinalMessageNeedsTheGenerationPromptOff) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"The"}],)"
      R"("continue_final_message":true,"add_generation_prompt":false})",
      Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_FALSE(r->add_generation_prompt);
  // vLLM refuses both at once; the default add_generation_prompt is true.
  EXPECT_EQ(RejectChat(R"({"messages":[{"role":"user","content":"x"}],)"
                       R"("continue_final_message":true})",
                       "continue_final_message"),
            "invalid_value");
}

TEST(ParseDetokenizeRequestTest, ReadsTokens) {
  auto r = ParseDetokenizeRequest(R"({"tokens":[1,2]})", Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":[1,1000]})", Limits()).ok());
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":"1"})", Limits()).ok());
}

TEST(ResponsesRequestTest, InputItemsBecomeChatMessages) {
  auto r = ParseResponsesRequest(R"({
    "model": "m", "instructions": "Be terse.", "max_output_tokens": 64, "temperature": 0.5,
    "reasoning": {"effort": "high"}, "tool_choice": "none",
    "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}],
    "input": [
      {"role": "developer", "content": "Rules."},
      {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{\"x\":1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    ]})",
                                 ParseLimits{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 6u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be terse.");
  EXPECT_EQ(r->messages[1].role, "system");
  EXPECT_EQ(r->messages[2].content, "a\nb");
  EXPECT_EQ(r->messages[3].role, "assistant");
  EXPECT_FALSE(r->messages[3].has_content);
  util::Json calls = util::Json::parse(r->messages[3].tool_calls_json);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1]["id"], "c2");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(r->messages[4].role, "tool");
  EXPECT_EQ(r->messages[4].tool_call_id, "c1");
  EXPECT_EQ(r->messages[5].content, "ok");
  EXPECT_EQ(r->params.max_tokens, 64);
  EXPECT_EQ(r->tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(r->reasoning_effort, "high");
  ASSERT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(util::Json::parse(r->tools[0])["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r->echo["instructions"], "Be terse.");
}

TEST(ResponsesRequestTest, FieldsThatAskForWhatIsNotDoneAreRefusedByName) {
  const std::string input = R"("input": "hi")";
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"previous_response_id", R"("resp_1")"},
           {"conversation", R"("conv_1")"},
           {"conversation", R"({"id": "conv_1"})"},
           {"background", "true"},
           {"store", "true"},
           {"prompt", R"({"id": "pmpt_1"})"},
           {"max_tool_calls", "3"},
           {"top_logprobs", "2"},
           {"truncation", R"("auto")"},
           {"service_tier", R"("flex")"},
           {"prompt_cache_retention", R"("24h")"},
           {"n", "2"}}) {
    auto r = ParseResponsesRequest("{" + input + ", \"" + field + "\": " + value + "}", {});
    ASSERT_FALSE(r.ok()) << field << " " << value;
    http::ApiError e = http::ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400) << field;
    EXPECT_EQ(e.code, "unsupported_value") << field;
    EXPECT_EQ(e.param, field) << value;
  }
  auto verbose = ParseResponsesRequest(R"({"input": "hi", "text": {"verbosity": "low"}})", {});
  ASSERT_FALSE(verbose.ok());
  EXPECT_EQ(http::ApiErrorFromStatus(verbose.status()).param, "text.verbosity");
  // Values that ask for nothing pass: the defaults, null, an empty include.
  auto fine = ParseResponsesRequest(R"({"input": "hi", "background": false, "store": false,
      "conversation": null, "include": [], "truncation": "disabled", "service_tier": "auto",
      "prompt_cache_key": "k", "prompt_cache_retention": "in_memory", "top_logprobs": 0,
      "text": {"verbosity": "medium"}, "parallel_tool_calls": false, "safety_identifier": "u"})",
                                    {});
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_FALSE(fine->tool_choice.parallel);
}

}  // namespace
}  // namespace deepinfer::api
