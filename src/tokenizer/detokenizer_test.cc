#include "tokenizer/detokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/piece_tokenizer_testing.h"
#include "tokenizer/test_util.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {
namespace {

using FakeTokenizer = testing::PieceTokenizer;

// ids: 0 "<s>" (a control token), 1 "a", 2..4 the bytes of "€", 5 "\xF0\x9F", 6 "\x98\x80", 7 "\xFF", 8 "x",
// 9 "\xC3", 10 "\xA9b".
FakeTokenizer Fake() {
  return FakeTokenizer({"<s>", "a", "\xE2", "\x82", "\xAC", "\xF0\x9F", "\x98\x80", "\xFF", "x",
                        "\xC3",
                        "\xA9"
                        "b"},
                       /*special=*/0, /*eog=*/-1);
}

std::vector<std::string> Stream(IncrementalDetokenizer& d, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(d.Push(id));
  out.push_back(d.Finish());
  return out;
}

using Chunks = std::vector<std::string>;

TEST(IncrementalDetokenizerTest, HoldsACharacterSplitAcrossThreeTokens) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(Stream(d, {1, 2, 3, 4, 1}), (Chunks{"a", "", "", "\xE2\x82\xAC", "a", ""}));
}

TEST(IncrementalDetokenizerTest, HoldsAnEmojiSplitInTwo) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(Stream(d, {5, 6}), (Chunks{"", "\xF0\x9F\x98\x80", ""}));
}

TEST(IncrementalDetokenizerTest, CompletesACharacterFollowedByMoreText) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(Stream(d, {9, 10}), (Chunks{"",
                                        "\xC3\xA9"
                                        "b",
                                        ""}));
}

TEST(IncrementalDetokenizerTest, ReplacesHopelessBytesAtOnce) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer d(tok);
  // 0xFF can never start a character; "\xE2\x82" followed by "x" is one ill-formed subpart.
  EXPECT_EQ(Stream(d, {7, 2, 3, 8}), (Chunks{"\xEF\xBF\xBD", "", "",
                                             "\xEF\xBF\xBD"
                                             "x",
                                             ""}));
}

TEST(IncrementalDetokenizerTest, FlushesAnUnfinishedCharacterAsOneReplacementAtFinish) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.Push(1), "a");
  EXPECT_EQ(d.Push(5), "");
  EXPECT_EQ(d.held_bytes(), 2u);
  EXPECT_EQ(d.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.held_bytes(), 0u);
}

TEST(IncrementalDetokenizerTest, SkipsSpecialTokensUnlessAskedNotTo) {
  FakeTokenizer tok = Fake();
  IncrementalDetokenizer skip(tok);
  EXPECT_EQ(skip.Push(0), "");
  IncrementalDetokenizer keep(tok, /*skip_special=*/false);
  EXPECT_EQ(keep.Push(0), "<s>");
}

TEST(IncrementalDetokenizerTest, StreamsSmolLm2TextExactly) {
  const Tokenizer* tok = testing::SmolLm2Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "SmolLM2 model not found";
  const std::string text =
      "Héllo 世界! 👨‍👩‍👧‍👦 👍🏽 naïve café — ok\n\tमराठी עברית "
      "🇯🇵 "
      "𮯰";
  IncrementalDetokenizer d(*tok);
  std::string all;
  for (int32_t id : tok->Encode(text, false, false)) {
    const std::string chunk = d.Push(id);
    // Every chunk is complete UTF-8 on its own.
    for (std::string_view rest = chunk; !rest.empty();) {
      const Utf8Step step = NextUtf8(rest);
      ASSERT_EQ(step.kind, Utf8Step::kValid) << "chunk \"" << chunk << "\"";
      rest.remove_prefix(step.length);
    }
    all += chunk;
  }
  all += d.Finish();
  EXPECT_EQ(all, text);
}

TEST(IncrementalDetokenizerTest, DropsTheLeadingSpaceAfterBosForLlama2c) {
  const Tokenizer* tok = testing::Stories260kTokenizer();
  if (tok == nullptr) GTEST_SKIP() << "stories260K not found";
  IncrementalDetokenizer d(*tok);
  std::string all;
  for (int32_t id : tok->Encode("Once upon a time", false)) all += d.Push(id);
  all += d.Finish();
  EXPECT_EQ(all, "Once upon a time");
}

}  // namespace
}  // namespace deepinfer::tokenizer
