#include "tokenizer/score_bpe_tokenizer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/test_util.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

using model::TokenizerData;
using model::TokenType;

#define REQUIRE_STORIES(tok)                              \
  const Tokenizer* tok = testing::Stories260kTokenizer(); \
  if (tok == nullptr) GTEST_SKIP() << "stories260K not found in " << testing::Stories260kDir()

nlohmann::json GoldenGreedy() {
  std::ifstream in(testing::Stories260kDir() + "/golden_greedy.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(ScoreBpeTokenizerTest, PromptEncodingsPrefixTheReferenceTokenSequences) {
  REQUIRE_STORIES(tok);
  const auto golden = GoldenGreedy();
  ASSERT_EQ(golden["cases"].size(), 4u);
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    const auto want = c["input_token_sequence"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok->Encode(prompt, false);  // model asks for BOS
    ASSERT_LE(got.size(), want.size()) << prompt;
    EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + got.size())) << prompt;
    // The prompt's tokens decode back to the prompt (BOS drops the dummy-prefix space).
    EXPECT_EQ(tok->Decode(got, /*skip_special=*/true), prompt);
  }
}

TEST(ScoreBpeTokenizerTest, KnownPromptsEncodeToReferenceIds) {
  REQUIRE_STORIES(tok);
  EXPECT_EQ(tok->Encode("", false), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->Encode("Once upon a time", false), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->Encode("Lily and Tom went to the", false),
            (std::vector<int32_t>{1, 317, 269, 274, 287, 263, 377, 267, 265}));
}

TEST(ScoreBpeTokenizerTest, DecodedSequencesMatchTheReferenceOutput) {
  REQUIRE_STORIES(tok);
  // run.c prints the piece of every token after the first, then a newline.
  const auto golden = GoldenGreedy();
  for (const auto& c : golden["cases"]) {
    std::vector<int32_t> ids = c["input_token_sequence"].get<std::vector<int32_t>>();
    ids.push_back(c["final_argmax_next"].get<int32_t>());
    EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true) + "\n", c["stdout_text"].get<std::string>());
  }
}

TEST(ScoreBpeTokenizerTest, ReportsLlama2cSpecialIds) {
  REQUIRE_STORIES(tok);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->IsEog(1));
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_EQ(tok->TokenPiece(3 + 'A'), "A");  // <0x41>
  EXPECT_EQ(tok->TokenId(" the"), 265);
}

TEST(ScoreBpeTokenizerTest, UnknownCodePointsFallBackToBytePlusThree) {
  REQUIRE_STORIES(tok);
  // U+1F600 has no piece in the 512-token vocabulary.
  const std::vector<int32_t> ids = tok->Encode("\xF0\x9F\x98\x80", false, false);
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(ids.end() - 4, ids.end()),
            (std::vector<int32_t>{0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3}));
  EXPECT_EQ(tok->Decode(ids), " \xF0\x9F\x98\x80");
}

// A small vocabulary: the bytes (ids 3..258) and scored pieces.
TokenizerData TinyVocab(const std::vector<std::pair<std::string, float>>& pieces) {
  TokenizerData d;
  d.kind = TokenizerData::Kind::kScoreBpe;
  d.tokens = {"<unk>", "\n<s>\n", "\n</s>\n"};
  d.scores = {0, 0, 0};
  d.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    d.tokens.push_back(buf);
    d.scores.push_back(0);
    d.token_types.push_back(TokenType::kByte);
  }
  for (const auto& [piece, score] : pieces) {
    d.tokens.push_back(piece);
    d.scores.push_back(score);
    d.token_types.push_back(TokenType::kNormal);
  }
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_bos = true;
  d.eog_ids = {1, 2};
  return d;
}

TEST(ScoreBpeTokenizerTest, MergesHighestScoreFirstAndLeftmostOnTies) {
  // 259 " ", 260 "a", 261 "b", 262 "ab" (-1), 263 "ba" (-1), 264 "aba" (-3), 265 "bab" (0).
  auto tok = ScoreBpeTokenizer::Create(TinyVocab(
      {{" ", -10}, {"a", -10}, {"b", -10}, {"ab", -1}, {"ba", -1}, {"aba", -3}, {"bab", 0}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "abab": "ab" and "ba" tie at -1; the leftmost "ab" wins, then "ab"+"ab" is not a piece.
  EXPECT_EQ((*tok)->Encode("abab", false, false), (std::vector<int32_t>{259, 262, 262}));
  // "b a b": the leftmost -1 pair "ba" merges first, then "ba" + "b" = "bab" (0).
  EXPECT_EQ((*tok)->Encode("bab", false, false), (std::vector<int32_t>{259, 265}));
}

TEST(ScoreBpeTokenizerTest, PiecesAtOrBelowMinusTenBillionNeverMerge) {
  auto tok = ScoreBpeTokenizer::Create(TinyVocab({{" ", 0}, {"a", 0}, {"aa", -1e10f}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("aa", false, false), (std::vector<int32_t>{259, 260, 260}));
}

TEST(ScoreBpeTokenizerTest, DropsTheLeadingSpaceOnlyAfterBos) {
  auto tok = ScoreBpeTokenizer::Create(TinyVocab({{" ", 0}, {"x", 0}, {" x", 1}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> ids = (*tok)->Encode("x x", false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 261, 261}));
  EXPECT_EQ((*tok)->Decode(ids, true), "x x");
  EXPECT_EQ((*tok)->Decode({261, 261}, true), " x x");
}

// Found by llama2c_fuzz: a vocabulary without the 256 byte pieces made the fallback emit
// b + 3 past its end, and those ids would have indexed the embedding table.
TEST(ScoreBpeTokenizerTest, ByteFallbackStaysInsideAVocabularyWithoutBytePieces) {
  TokenizerData d;
  d.kind = TokenizerData::Kind::kScoreBpe;
  d.tokens = {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a", "<0x7A>"};
  d.scores = {0, 0, 0, 0, 0, 0};
  d.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                   TokenType::kNormal,  TokenType::kNormal,  TokenType::kByte};
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  auto tok = ScoreBpeTokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "z" has its byte piece (id 5); "q" and the bytes of U+00E9 have none and become <unk>.
  EXPECT_EQ((*tok)->Encode("az", false, false), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ((*tok)->Encode("q\xC3\xA9", false, false), (std::vector<int32_t>{3, 0, 0, 0}));
  // Without an unknown token, such bytes are dropped.
  d.unk_id = -1;
  tok = ScoreBpeTokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("qa", false, false), (std::vector<int32_t>{3, 4}));
}

TEST(ScoreBpeTokenizerTest, CreateRejectsMissingScores) {
  TokenizerData d = TinyVocab({});
  d.scores.pop_back();
  auto tok = ScoreBpeTokenizer::Create(d);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(ErrorCodeOf(tok.status()), "bad_tokenizer");
}

}  // namespace
}  // namespace deepinfer::tokenizer
