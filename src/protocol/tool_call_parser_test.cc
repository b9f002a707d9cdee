#include "protocol/tool_call_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/deepseek_chat.h"
#include "tokenizer/deepseek_test_util.h"
#include "tokenizer/detokenizer.h"

namespace deepinfer::api {
namespace {

// The encoders render the tool calls that the parser reads back.
using tokenizer::ChatMessage;
using tokenizer::ChatOptions;
using tokenizer::ChatTemplate;
using tokenizer::CreateDeepseekChatTemplate;
using tokenizer::IncrementalDetokenizer;
using tokenizer::Tokenizer;

struct Want {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

std::string Describe(const std::vector<ParsedToolCall>& calls) {
  std::string out;
  for (const ParsedToolCall& c : calls) out += "[" + c.name + " " + c.arguments + "]";
  return out;
}

// Feeds `pieces` one by one and collects everything.
Want Feed(ToolCallFormat format, const std::vector<std::string>& pieces) {
  ToolCallParser parser(format);
  Want out;
  auto take = [&](ToolCallParser::Delta d) {
    out.content += d.content;
    for (ParsedToolCall& c : d.calls) out.calls.push_back(std::move(c));
  };
  for (const std::string& p : pieces) take(parser.Push(p));
  take(parser.Finish());
  EXPECT_EQ(parser.num_calls(), static_cast<int>(out.calls.size()));
  return out;
}

void ExpectSame(const Want& got, const Want& want, const std::string& how) {
  EXPECT_EQ(got.content, want.content) << how;
  EXPECT_EQ(Describe(got.calls), Describe(want.calls)) << how;
}

// The one-shot helper, every cut into two deltas, every cut into three around the middle, and
// one byte at a time must all give `want`.
void ExpectAllSplits(ToolCallFormat format, const std::string& text, const Want& want) {
  const ToolCallResult one = ParseToolCalls(format, text);
  ExpectSame({one.content, one.calls}, want, "one-shot of \"" + text + "\"");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ExpectSame(Feed(format, {text.substr(0, cut), text.substr(cut)}), want,
               "cut at " + std::to_string(cut) + " of \"" + text + "\"");
    if (::testing::Test::HasFailure()) return;
  }
  const size_t mid = text.size() / 2;
  for (size_t cut = 0; cut <= text.size(); cut += 7) {
    const size_t a = std::min(cut, mid), b = std::max(cut, mid);
    ExpectSame(Feed(format, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}), want,
               "cuts at " + std::to_string(a) + "," + std::to_string(b));
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  ExpectSame(Feed(format, bytes), want, "bytewise \"" + text + "\"");
}

// What the model writes for an assistant turn: the encoder's rendering of it, between the
// header ("</think>", or "<｜Assistant｜>" for V3) and "<｜end▁of▁sentence｜>".
std::string ModelOutput(const ChatTemplate& tmpl, const ChatMessage& assistant) {
  ChatOptions options;
  options.tools = {
      R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})"};
  auto text = tmpl.Render({{"user", "Weather?"}, assistant}, options);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return "";
  const size_t eos = text->find("<｜end▁of▁sentence｜>");
  EXPECT_NE(eos, std::string::npos) << *text;
  const std::string_view header = tmpl.name() == "deepseek-v3" ? "<｜Assistant｜>" : "</think>";
  const size_t start = text->rfind(header, eos);
  EXPECT_NE(start, std::string::npos) << *text;
  return text->substr(start + header.size(), eos - start - header.size());
}

// Arguments written as json.dumps writes them, so the DSML round trip is exact.
const char* const kArgs1 =
    R"({"city": "Paris", "days": 3, "units": {"temp": "C"}, "tags": ["a", "b"], "ok": true, )"
    R"("ratio": 0.5, "none": null})";
const char* const kArgs2 = R"({"city": "東京", "note": "naïve ☃ \"quoted\"\nline"})";

ChatMessage TwoCalls(std::string content, bool has_content) {
  ChatMessage m{"assistant", std::move(content)};
  m.has_content = has_content;
  m.tool_calls.push_back({"call_1", "function", "get_weather", kArgs1});
  m.tool_calls.push_back({"call_2", "function", "get_weather_ü", kArgs2});
  return m;
}

TEST(ToolCallParserTest, FormatFollowsTheTemplateName) {
  EXPECT_EQ(ToolCallFormatForTemplate("deepseek-v3"), ToolCallFormat::kDeepseekV3);
  EXPECT_EQ(ToolCallFormatForTemplate("deepseek-v3.1"), ToolCallFormat::kDeepseekV31);
  EXPECT_EQ(ToolCallFormatForTemplate("deepseek-v3.2"), ToolCallFormat::kDsmlV32);
  EXPECT_EQ(ToolCallFormatForTemplate("deepseek-v4"), ToolCallFormat::kDsmlV4);
  EXPECT_EQ(ToolCallFormatForTemplate("deepseek-v4.1"), ToolCallFormat::kDsmlV41);
  EXPECT_EQ(ToolCallFormatForTemplate("chatml"), ToolCallFormat::kNone);
  EXPECT_EQ(ToolCallFormatForTemplate("plain"), ToolCallFormat::kNone);
}

TEST(ToolCallParserTest, RoundTripsEveryEncoder) {
  const Want want_calls{"", {{"get_weather", kArgs1}, {"get_weather_ü", kArgs2}}};
  struct Case {
    const char* name;
    bool has_content;  // V3 renders tool calls only for a null content
  };
  for (const Case& c :
       {Case{"deepseek-v3", false}, Case{"deepseek-v3.1", true}, Case{"deepseek-v3.2", true},
        Case{"deepseek-v4", true}, Case{"deepseek-v4.1", true}}) {
    SCOPED_TRACE(c.name);
    auto tmpl = CreateDeepseekChatTemplate(c.name);
    ASSERT_NE(tmpl, nullptr);
    const ToolCallFormat format = ToolCallFormatForTemplate(c.name);
    Want want = want_calls;
    if (c.has_content) want.content = "Let me check — 天気.";
    const std::string text =
        ModelOutput(*tmpl, TwoCalls(c.has_content ? want.content : "", c.has_content));
    ASSERT_FALSE(text.empty());
    ExpectAllSplits(format, text, want);
  }
}

TEST(ToolCallParserTest, V3HandWritten) {
  const std::string text =
      "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  ExpectAllSplits(ToolCallFormat::kDeepseekV3, text,
                  {"Sure.", {{"get_weather", R"({"city": "Paris"})"}}});
}

TEST(ToolCallParserTest, V31HandWrittenWithTextAfterTheBlock) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\":\"x\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>noargs<｜tool▁sep｜><｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜> done";
  ExpectAllSplits(ToolCallFormat::kDeepseekV31, text,
                  {" done", {{"search", R"({"q":"x"})"}, {"noargs", "{}"}}});
}

TEST(ToolCallParserTest, DsmlParametersBecomeAnArgumentsObject) {
  const std::string text =
      "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"s\" string=\"true\">42</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">42</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"o\" string=\"false\">{\"a\":[1,2.5]}</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"bad\" string=\"false\">not json</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"ml\" string=\"true\">line1\nline2 <b></｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n</｜DSML｜invoke>\n"
      "</｜DSML｜function_calls>";
  ExpectAllSplits(ToolCallFormat::kDsmlV32, text,
                  {"Checking.",
                   {{"f", R"({"s": "42", "n": 42, "o": {"a": [1, 2.5]}, "bad": "not json", )"
                          R"("ml": "line1\nline2 <b>"})"},
                    {"g", "{}"}}});
}

TEST(ToolCallParserTest, V41TagsHaveALeadingSpace) {
  const std::string text =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">[1, 2]</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ExpectAllSplits(ToolCallFormat::kDsmlV41, text, {"", {{"f", R"({"x": [1, 2]})"}}});
  // V3.2 spelling is text to V4.1, and the other way round.
  ExpectAllSplits(ToolCallFormat::kDsmlV32, text, {text, {}});
}

TEST(ToolCallParserTest, TextWithoutCallsIsContentUntouched) {
  for (ToolCallFormat f :
       {ToolCallFormat::kNone, ToolCallFormat::kDeepseekV3, ToolCallFormat::kDeepseekV31,
        ToolCallFormat::kDsmlV32, ToolCallFormat::kDsmlV4, ToolCallFormat::kDsmlV41}) {
    ExpectAllSplits(f, "Plain < text <｜ with ｜> brackets\n\n and trailing space \n ",
                    {"Plain < text <｜ with ｜> brackets\n\n and trailing space \n ", {}});
    ExpectAllSplits(f, "", {"", {}});
  }
}

TEST(ToolCallParserTest, UnparseableCallsStayContent) {
  // A call without a separator, next to a good one: the bad one is content, raw.
  const std::string bad = "<｜tool▁call▁begin｜>no separator here<｜tool▁call▁end｜>";
  const std::string good = "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>";
  ExpectAllSplits(ToolCallFormat::kDeepseekV31,
                  "A<｜tool▁calls▁begin｜>" + bad + good + "<｜tool▁calls▁end｜>B",
                  {"A" + bad + "B", {{"f", "{}"}}});
  // A block without a single valid call is kept whole.
  const std::string only_bad = "<｜tool▁calls▁begin｜>" + bad + "junk<｜tool▁calls▁end｜>";
  ExpectAllSplits(ToolCallFormat::kDeepseekV31, "A" + only_bad + "B", {"A" + only_bad + "B", {}});
  // V3 without the json fence.
  const std::string v3 =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  ExpectAllSplits(ToolCallFormat::kDeepseekV3, v3, {v3, {}});
  // DSML: a missing name, a bad string attribute, an unclosed parameter; the whitespace before
  // the block comes back with it.
  for (const std::string& invoke :
       {std::string("<｜DSML｜invoke>\n</｜DSML｜invoke>"),
        std::string("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                    "string=\"maybe\">1</｜DSML｜parameter>\n</｜DSML｜invoke>"),
        std::string("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                    "string=\"true\">1\n</｜DSML｜invoke>")}) {
    const std::string block = "\n\n<｜DSML｜tool_calls>\n" + invoke + "\n</｜DSML｜tool_calls>";
    ExpectAllSplits(ToolCallFormat::kDsmlV4, "Hi" + block, {"Hi" + block, {}});
  }
}

TEST(ToolCallParserTest, UnfinishedBlockAtFinishIsContent) {
  // Cut by max_tokens in the middle of the second call: the first call stands.
  const std::string first = "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":1}<｜tool▁call▁end｜>";
  const std::string second = "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{\"b\":";
  ExpectAllSplits(ToolCallFormat::kDeepseekV31, "x<｜tool▁calls▁begin｜>" + first + second,
                  {"x" + second, {{"f", R"({"a":1})"}}});
  // Cut before any call finished: all of it is content.
  const std::string cut = "x<｜tool▁calls▁begin｜>" + second;
  ExpectAllSplits(ToolCallFormat::kDeepseekV31, cut, {cut, {}});
  // Cut inside the block marker itself.
  ExpectAllSplits(ToolCallFormat::kDsmlV32, "ok\n\n<｜DSML｜func", {"ok\n\n<｜DSML｜func", {}});
  // The block closes while a call is still open: the open call is content.
  const std::string open = "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{";
  ExpectAllSplits(ToolCallFormat::kDeepseekV31,
                  "<｜tool▁calls▁begin｜>" + first + open + "<｜tool▁calls▁end｜>tail",
                  {open + "tail", {{"f", R"({"a":1})"}}});
}

TEST(ToolCallParserTest, SeveralBlocksAreEachRead) {
  const std::string block =
      "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n"
      "</｜DSML｜function_calls>";
  ExpectAllSplits(ToolCallFormat::kDsmlV32, "a" + block + "b" + block,
                  {"ab", {{"f", "{}"}, {"f", "{}"}}});
}

TEST(ToolCallParserTest, CallsArriveWhenTheirEndMarkerDoes) {
  ToolCallParser parser(ToolCallFormat::kDeepseekV31);
  ToolCallParser::Delta d = parser.Push("Hi <｜tool▁calls▁beg");
  EXPECT_EQ(d.content, "Hi ");
  d = parser.Push("in｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  d = parser.Push("<｜tool▁call▁end｜><｜tool▁call▁begin｜>g");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  d = parser.Push("<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "g");
  d = parser.Finish();
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(parser.num_calls(), 2);
}

TEST(ToolCallParserTest, V31AnswerDetokenizedTokenByTokenWithTheRealTokenizer) {
  const Tokenizer* tok = tokenizer::testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "DeepSeek-V3 tokenizer files absent";
  auto tmpl = CreateDeepseekChatTemplate("deepseek-v3.1");
  const std::string text = ModelOutput(*tmpl, TwoCalls("Sure — 好的.", true));
  // The tool-call markers are single, non-special tokens: they survive skip_special.
  EXPECT_EQ(tok->Encode("<｜tool▁calls▁begin｜>", true, false), std::vector<int32_t>{128806});
  const std::vector<int32_t> ids = tok->Encode(text, /*parse_special=*/true, /*add_bos=*/false);
  IncrementalDetokenizer detok(*tok, /*skip_special=*/true);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(detok.Push(id));
  pieces.push_back(detok.Finish());
  ExpectSame(Feed(ToolCallFormat::kDeepseekV31, pieces),
             {"Sure — 好的.", {{"get_weather", kArgs1}, {"get_weather_ü", kArgs2}}}, "tokens");
}

}  // namespace
}  // namespace deepinfer::api
