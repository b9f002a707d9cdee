#include "protocol/reasoning_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
};

// Feeds `pieces` one by one and collects both channels.
Split Feed(bool starts_in_reasoning, const std::vector<std::string>& pieces) {
  ReasoningParser parser(starts_in_reasoning);
  Split out;
  for (const std::string& p : pieces) {
    const auto d = parser.Push(p);
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  const auto d = parser.Finish();
  out.reasoning += d.reasoning;
  out.content += d.content;
  return out;
}

// Every way of cutting `text` into two deltas, and one byte at a time, must agree with `want`.
void ExpectAllSplits(bool starts_in_reasoning, const std::string& text, const Split& want) {
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Split got = Feed(starts_in_reasoning, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(got.reasoning, want.reasoning) << "cut at " << cut << " of \"" << text << "\"";
    EXPECT_EQ(got.content, want.content) << "cut at " << cut << " of \"" << text << "\"";
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const Split got = Feed(starts_in_reasoning, bytes);
  EXPECT_EQ(got.reasoning, want.reasoning) << "bytewise \"" << text << "\"";
  EXPECT_EQ(got.content, want.content) << "bytewise \"" << text << "\"";
}

TEST(ReasoningParserTest, OutputOfAThinkingPromptStartsInReasoning) {
  ExpectAllSplits(true, "Let me think: 2+2=4.</think>The answer is 4.",
                  {"Let me think: 2+2=4.", "The answer is 4."});
}

TEST(ReasoningParserTest, ModelThatOpensTheBlockItselfIsSplitToo) {
  ExpectAllSplits(false, "<think>\nhmm\n</think>\n\nDone.", {"\nhmm\n", "\n\nDone."});
  // A repeated start tag right after a thinking prompt is dropped.
  ExpectAllSplits(true, "<think>x</think>y", {"x", "y"});
}

TEST(ReasoningParserTest, WithoutTagsEverythingIsContent) {
  ExpectAllSplits(false, "Plain answer with </think> and <think> inside.",
                  {"", "Plain answer with </think> and <think> inside."});
  ExpectAllSplits(false, " <think>not at the start", {"", " <think>not at the start"});
}

TEST(ReasoningParserTest, OnlyTheFirstEndTagCounts) {
  ExpectAllSplits(true, "r</think>c</think><think>d", {"r", "c</think><think>d"});
}

TEST(ReasoningParserTest, TagLookalikesStayText) {
  ExpectAllSplits(true, "a </thinking> b <</think>c", {"a </thinking> b <", "c"});
  ExpectAllSplits(false, "<thinking>x", {"", "<thinking>x"});
  ExpectAllSplits(false, "<thi", {"", "<thi"});
}

TEST(ReasoningParserTest, UnterminatedReasoningStaysReasoning) {
  ExpectAllSplits(true, "still thinking </thi", {"still thinking </thi", ""});
  ExpectAllSplits(true, "", {"", ""});
}

TEST(ReasoningParserTest, HoldsBackOnlyAPossibleTag) {
  ReasoningParser parser(/*starts_in_reasoning=*/true);
  EXPECT_TRUE(parser.in_reasoning());
  auto d = parser.Push("abc</th");
  EXPECT_EQ(d.reasoning, "abc");  // "</th" may be the end tag
  EXPECT_EQ(d.content, "");
  d = parser.Push("ink>");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_FALSE(parser.in_reasoning());
  d = parser.Push("answer");
  EXPECT_EQ(d.content, "answer");

  ReasoningParser fresh(/*starts_in_reasoning=*/false);
  EXPECT_FALSE(fresh.in_reasoning());
  d = fresh.Push("<th");
  EXPECT_EQ(d.content, "");  // may still become <think>
  d = fresh.Push("is");
  EXPECT_EQ(d.content, "<this");
}

TEST(ReasoningParserTest, CustomTags) {
  ReasoningParser parser(false, "[R]", "[/R]");
  auto d = parser.Push("[R]why[/");
  EXPECT_EQ(d.reasoning, "why");
  d = parser.Push("R]so");
  EXPECT_EQ(d.content, "so");
}

TEST(ReasoningParserTest, KnowsWhenThePromptOpenedTheBlock) {
  EXPECT_TRUE(PromptOpensReasoning("<｜User｜>Hi<｜Assistant｜><think>"));
  EXPECT_TRUE(PromptOpensReasoning("...</function_results>\n\n<think>"));
  EXPECT_TRUE(PromptOpensReasoning("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<｜User｜>Hi<｜Assistant｜></think>"));
  EXPECT_FALSE(PromptOpensReasoning("<｜User｜>Hi<｜Assistant｜>"));
  EXPECT_FALSE(PromptOpensReasoning(""));
}

}  // namespace
}  // namespace deepinfer::api
