#include "tokenizer/deepseek_chat.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/deepseek_test_util.h"
#include "tokenizer/python_json.h"
#include "tokenizer/test_util.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::ordered_json;  // tool definitions keep their key order

Json ChatGolden(const std::string& version) {
  auto text =
      util::ReadFile(testing::SourcePath("tests/golden/deepseek/chat_" + version + ".json"));
  EXPECT_TRUE(text.ok()) << text.status();
  return Json::parse(text.ok() ? *text : "{}");
}

std::vector<ChatMessage> Messages(const Json& j) {
  std::vector<ChatMessage> out;
  for (const Json& m : j) {
    ChatMessage msg;
    msg.role = m["role"];
    if (m["content"].is_null()) {
      msg.has_content = false;
    } else {
      msg.content = m["content"];
    }
    if (m.contains("reasoning_content")) msg.reasoning_content = m["reasoning_content"];
    if (m.contains("tool_call_id")) msg.tool_call_id = m["tool_call_id"];
    if (m.contains("tool_calls")) {
      for (const Json& c : m["tool_calls"]) {
        msg.tool_calls.push_back(
            {c["id"], c["type"], c["function"]["name"], c["function"]["arguments"]});
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ChatOptions Options(const Json& c) {
  ChatOptions options;
  options.add_generation_prompt = c["add_generation_prompt"];
  options.thinking = c["thinking"];
  options.reasoning_effort = c["reasoning_effort"];
  for (const Json& tool : c["tools"]) options.tools.push_back(tool.dump());
  return options;
}

// Renders every golden case with the encoder `name`; compares ids too when `tok` is given.
void ExpectGolden(const std::string& version, const std::string& name, const Tokenizer* tok) {
  const Json golden = ChatGolden(version);
  auto tmpl = CreateChatTemplateByName(name);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ((*tmpl)->name(), name);
  ASSERT_GE(golden["cases"].size(), 40u);
  size_t rendered = 0;
  size_t ids = 0;
  for (const Json& c : golden["cases"]) {
    const std::string case_name = c["name"];
    auto text = (*tmpl)->Render(Messages(c["messages"]), Options(c));
    if (c.contains("error")) {
      if (version == "v3.2") {  // V4's reference rejects in its request conversion only
        EXPECT_FALSE(text.ok()) << case_name << " should fail: " << c["error"];
      }
      continue;
    }
    ASSERT_TRUE(text.ok()) << case_name << ": " << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>()) << case_name;
    if (*text == c["text"].get<std::string>()) ++rendered;
    if (tok != nullptr && c.contains("ids")) {
      EXPECT_EQ(tok->Encode(*text, /*parse_special=*/true, /*add_bos=*/false),
                c["ids"].get<std::vector<int32_t>>())
          << case_name;
      ++ids;
    }
  }
  std::printf("%s: %zu of %zu cases render identically; %zu id lists compared\n", name.c_str(),
              rendered, golden["cases"].size(), ids);
}

TEST(DeepseekChatTest, V3MatchesTheJinjaTemplate) {
  ExpectGolden("v3", "deepseek-v3", testing::DeepseekV3Tokenizer());
}

TEST(DeepseekChatTest, V31MatchesTheJinjaTemplate) {
  ExpectGolden("v3.1", "deepseek-v3.1", nullptr);
}

TEST(DeepseekChatTest, V32MatchesEncodingDsv32) { ExpectGolden("v3.2", "deepseek-v3.2", nullptr); }

TEST(DeepseekChatTest, V4MatchesDeepseekRecipe) {
  ExpectGolden("v4", "deepseek-v4", testing::DeepseekV4Tokenizer());
}

TEST(DeepseekChatTest, V41MatchesDeepseekRecipe) { ExpectGolden("v4.1", "deepseek-v4.1", nullptr); }

TEST(DeepseekChatTest, ReproducesTheKnownV3ExampleIds) {
  // From ../shared/models/README.md.
  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  auto tmpl = CreateChatTemplate(testing::DeepseekV3Spec()->data, "deepseek_v3");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ((*tmpl)->name(), "deepseek-v3");
  const std::vector<ChatMessage> messages = {
      {"system", "You are a helpful assistant."},
      {"user", "Hello! What is 2+2?"},
      {"assistant", "2+2 equals 4."},
      {"user", "Thanks. And 3*3?"},
  };
  const std::string text = (*tmpl)->Render(messages, /*add_generation_prompt=*/true);
  const std::vector<int32_t> want = {0,     3476, 477,  260,  11502, 22896, 16, 128803, 19923,
                                     3,     1999, 344,  223,  20,    13,    20, 33,     128804,
                                     20,    13,   20,   9615, 223,   22,    16, 1,      128803,
                                     17003, 16,   1890, 223,  21,    12,    21, 33,     128804};
  // The template writes BOS itself, so no second one.
  EXPECT_TRUE((*tmpl)->writes_bos());
  EXPECT_EQ(tok->Encode(text, /*parse_special=*/true, /*add_bos=*/false), want);
}

TEST(DeepseekChatTest, PicksEncodersByTemplateArchitectureAndName) {
  model::TokenizerData data;
  data.chat_template = ChatGolden("v3.1")["template"].get<std::string>();
  auto v31 = CreateChatTemplate(data, "deepseek_v3");
  ASSERT_TRUE(v31.ok()) << v31.status();
  EXPECT_EQ((*v31)->name(), "deepseek-v3.1");
  data.chat_template = ChatGolden("v3")["template"].get<std::string>() + "\n";
  EXPECT_EQ((*CreateChatTemplate(data))->name(), "deepseek-v3");

  model::TokenizerData none;
  for (const auto& [arch, name] :
       {std::pair{"deepseek_v32", "deepseek-v3.2"}, std::pair{"deepseek_v4", "deepseek-v4"},
        std::pair{"deepseek_v41", "deepseek-v4.1"}}) {
    auto t = CreateChatTemplate(none, arch);
    ASSERT_TRUE(t.ok()) << arch;
    EXPECT_EQ((*t)->name(), name);
  }
  for (std::string_view name :
       {"deepseek-v3", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"}) {
    auto t = CreateChatTemplateByName(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ((*t)->name(), name);
  }
  EXPECT_EQ(ErrorCodeOf(CreateChatTemplateByName("deepseek-v9").status()), "unknown_chat_template");
}

TEST(DeepseekChatTest, ThinkingGenerationPromptsOpenOrCloseTheThinkBlock) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  ChatOptions chat;
  ChatOptions thinking;
  thinking.thinking = true;
  const std::string bos = "<｜begin▁of▁sentence｜>";
  auto v31 = CreateDeepseekChatTemplate("deepseek-v3.1");
  EXPECT_EQ(*v31->Render(messages, chat), bos + "<｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_EQ(*v31->Render(messages, thinking), bos + "<｜User｜>Hi<｜Assistant｜><think>");
  auto v4 = CreateDeepseekChatTemplate("deepseek-v4");
  EXPECT_EQ(*v4->Render(messages, chat), bos + "<｜User｜>Hi<｜Assistant｜></think>");
  auto v41 = CreateDeepseekChatTemplate("deepseek-v4.1");
  EXPECT_EQ(*v41->Render(messages, thinking),
            bos +
                "<｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
                "thorough the reasoning)\n\n<｜User｜>Hi<｜Assistant｜><think>");
  thinking.reasoning_effort = "30";  // V4.1 takes an integer budget
  EXPECT_NE(v41->Render(messages, thinking)->find("Reasoning Effort: 30 (range"),
            std::string::npos);
  thinking.reasoning_effort = "extreme";
  EXPECT_EQ(ErrorCodeOf(v41->Render(messages, thinking).status()), "bad_chat_request");
}

TEST(DeepseekChatTest, MalformedToolsAreRequestErrors) {
  ChatOptions options;
  options.tools = {"not json"};
  for (std::string_view name : {"deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"}) {
    auto t = CreateDeepseekChatTemplate(name);
    EXPECT_EQ(ErrorCodeOf(t->Render({{"user", "x"}}, options).status()), "bad_chat_request")
        << name;
    // The two-argument Render cannot report errors; it has no tools to fail on.
    EXPECT_FALSE(t->Render({{"user", "x"}}, true).empty()) << name;
  }
}

TEST(PythonJsonTest, WritesWhatJsonDumpsWrites) {
  auto v =
      ParseOrderedJson(R"({"b": 1, "a": [1.5, 1e16, 1e-5, 0.0001, -0.0, 100, 1E5, true, null],)"
                       R"( "s": "é\u2028\u0001\"\\\n\t", "e": {}, "l": []})");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(DumpPythonJson(*v),
            "{\"b\": 1, \"a\": [1.5, 1e+16, 1e-05, 0.0001, -0.0, 100, 100000.0, true, null], "
            "\"s\": \"é\u2028\\u0001\\\"\\\\\\n\\t\", \"e\": {}, \"l\": []}");
  EXPECT_EQ(DumpPythonJson((*v)["a"], JsonFloatStyle::kDeepseekV4),
            "[1.5, 1e+16, 0.00001, 0.0001, -0.0, 100, 100000.0, true, null]");
  std::string out;
  AppendPythonFloat(1.25e-8, JsonFloatStyle::kDeepseekV4, &out);
  EXPECT_EQ(out, "1.25e-8");
  EXPECT_FALSE(ParseOrderedJson("{").ok());
}

}  // namespace
}  // namespace deepinfer::tokenizer
