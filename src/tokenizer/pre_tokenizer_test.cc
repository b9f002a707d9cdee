#include "tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/unicode.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

std::vector<std::string> SplitWith(const std::string& pre, const std::string& text) {
  auto spec = PreTokenizerSpecForName(pre);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto splitter = RegexSplitter::Create(spec->regexes);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  std::vector<uint32_t> cps;
  DecodeUtf8Lenient(text, &cps);
  std::vector<uint32_t> lengths;
  (*splitter)->Split(cps.data(), cps.size(), &lengths);
  std::vector<std::string> words;
  size_t at = 0;
  for (uint32_t len : lengths) {
    std::string w;
    for (size_t i = at; i < at + len; ++i) AppendUtf8(cps[i], &w);
    words.push_back(w);
    at += len;
  }
  EXPECT_EQ(at, cps.size());
  return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2SplitsContractionsWordsAndSpaces) {
  EXPECT_EQ(SplitWith("gpt-2", "I'm here  now 'S 123!?"),
            (Words{"I", "'m", " here", " ", " now", " '", "S", " 123", "!?"}));
  EXPECT_EQ(SplitWith("gpt-2", "a   \n\tb  "), (Words{"a", "   \n", "\t", "b", "  "}));
}

TEST(PreTokenizerTest, SmolLmIsolatesEveryDigit) {
  EXPECT_EQ(SplitWith("smollm", "abc 2024x ٣4"),
            (Words{"abc", " ", "2", "0", "2", "4", "x", " ", "٣", "4"}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThreeAndKeepsNewlinesTogether) {
  EXPECT_EQ(SplitWith("llama-bpe", "1234567 it'S\n\n  x"),
            (Words{"123", "456", "7", " it", "'S", "\n\n", " ", " x"}));
}

TEST(PreTokenizerTest, DefaultAppliesFourRegexesInTurn) {
  EXPECT_EQ(SplitWith("default", "x=12345, y"), (Words{"x", "=", "123", "45", ",", " y"}));
}

TEST(PreTokenizerTest, DeepseekV3SplitsCjkRunsAndDigitTriples) {
  EXPECT_EQ(SplitWith("deepseek-v3", "你好世界12345 hello"),
            (Words{"你好世界", "123", "45", " hello"}));
}

TEST(PreTokenizerTest, DeepseekLlmDollarMatchesOnlyAtTheEndOfAPiece) {
  EXPECT_EQ(SplitWith("deepseek-llm", "ab  \ncd  "), (Words{"ab", "  ", "\n", "cd", "  "}));
}

TEST(PreTokenizerTest, NonAsciiWhitespaceCountsAsWhitespace) {
  // U+3000 and U+00A0 are whitespace; U+180E (a format character since Unicode 6.3) and
  // U+200B are not.
  EXPECT_EQ(SplitWith("gpt-2", "a\u3000\u3000b\u180e\u200bc\u00a0"),
            (Words{"a", "\u3000", "\u3000", "b", "\u180e\u200b", "c", "\u00a0"}));
}

TEST(PreTokenizerTest, ClassifiesUnicode15Letters) {
  // U+2EBF0 (CJK Extension I, Unicode 15.1) is a letter; PCRE2 10.42 predates it.
  EXPECT_EQ(SplitWith("gpt-2", " \U0002EBF0\U0002EBF1!"), (Words{" \U0002EBF0\U0002EBF1", "!"}));
}

TEST(PreTokenizerTest, HugeWhitespaceRunsDoNotExhaustTheMatcher) {
  const std::string text = std::string(2000000, ' ') + "x" + std::string(1000000, '\n');
  const Words words = SplitWith("llama-bpe", text);
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0].size(), 1999999u);
  EXPECT_EQ(words[1], " x");
  EXPECT_EQ(words[2].size(), 1000000u);
}

TEST(PreTokenizerTest, EmptyTextHasNoWords) { EXPECT_TRUE(SplitWith("smollm", "").empty()); }

TEST(PreTokenizerTest, RejectsUnknownNamesAndUnsupportedRegexes) {
  EXPECT_EQ(ErrorCodeOf(PreTokenizerSpecForName("no-such").status()), "unsupported_tokenizer");
  EXPECT_EQ(ErrorCodeOf(RegexSplitter::Create({R"(\p{Han}+)"}).status()), "unsupported_tokenizer");
  EXPECT_EQ(ErrorCodeOf(RegexSplitter::Create({R"(\p{L}+é)"}).status()), "bad_regex");
  EXPECT_EQ(ErrorCodeOf(RegexSplitter::Create({"(unclosed"}).status()), "bad_regex");
}

}  // namespace
}  // namespace deepinfer::tokenizer
