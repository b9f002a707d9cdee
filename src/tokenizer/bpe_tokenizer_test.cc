#include "tokenizer/bpe_tokenizer.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "util/mapped_file.h"
#include "nlohmann/json.hpp"
#include "tokenizer/test_util.h"
#include "tokenizer/unicode.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

using model::TokenizerData;
using model::TokenType;

struct GoldenDoc {
  std::string name;
  std::string text;
  std::vector<int32_t> ids;
  bool has_special = false;
  std::vector<int32_t> ids_special;
  bool valid_utf8 = true;
};

const std::vector<GoldenDoc>* Corpus() {
  static const std::vector<GoldenDoc>* docs = []() -> std::vector<GoldenDoc>* {
    auto raw =
        util::ReadGzipFile(testing::SourcePath("tests/golden/tokenizer/smollm2_corpus.json.gz"));
    if (!raw.ok()) return nullptr;
    auto json = nlohmann::json::parse(*raw);
    auto* out = new std::vector<GoldenDoc>();
    for (const auto& d : json["docs"]) {
      GoldenDoc doc;
      doc.name = d["name"].get<std::string>();
      if (d.contains("text")) {
        doc.text = d["text"].get<std::string>();
      } else {
        std::string decoded;
        absl::Base64Unescape(d["text_b64"].get<std::string>(), &decoded);
        doc.text = decoded;
        doc.valid_utf8 = false;
      }
      doc.ids = d["ids"].get<std::vector<int32_t>>();
      if (d.contains("ids_special")) {
        doc.has_special = true;
        doc.ids_special = d["ids_special"].get<std::vector<int32_t>>();
      }
      out->push_back(std::move(doc));
    }
    return out;
  }();
  return docs;
}

// Describes the first difference between two id lists.
std::string FirstDifference(const Tokenizer& tok, const std::vector<int32_t>& want,
                            const std::vector<int32_t>& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto show = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t j = i; j < ids.size() && j < i + 6; ++j) {
      s += std::to_string(ids[j]) + "'" + absl::CEscape(tok.TokenPiece(ids[j])) + "' ";
    }
    return s;
  };
  std::vector<int32_t> before(want.begin() + (i > 8 ? i - 8 : 0), want.begin() + i);
  return "at " + std::to_string(i) + " after \"" + absl::CEscape(tok.Decode(before)) + "\": want " +
         show(want) + "got " + show(got);
}

#define REQUIRE_SMOLLM2(tok)                          \
  const Tokenizer* tok = testing::SmolLm2Tokenizer(); \
  if (tok == nullptr) GTEST_SKIP() << "SmolLM2 model not found at " << testing::SmolLm2Path()

TEST(BpeTokenizerTest, MatchesLlamaCppOnEveryCorpusDocument) {
  REQUIRE_SMOLLM2(tok);
  const auto* corpus = Corpus();
  ASSERT_NE(corpus, nullptr) << "missing tests/golden/tokenizer/smollm2_corpus.json.gz";
  size_t bytes = 0, ids = 0, failures = 0;
  for (const GoldenDoc& doc : *corpus) {
    bytes += doc.text.size();
    const std::vector<int32_t> got = tok->Encode(doc.text, /*parse_special=*/false, false);
    ids += got.size();
    if (got != doc.ids) {
      ++failures;
      ADD_FAILURE() << doc.name << ": " << FirstDifference(*tok, doc.ids, got);
    }
    if (doc.has_special) {
      const std::vector<int32_t> got_special = tok->Encode(doc.text, /*parse_special=*/true, false);
      if (got_special != doc.ids_special) {
        ++failures;
        ADD_FAILURE() << doc.name
                      << " (special): " << FirstDifference(*tok, doc.ids_special, got_special);
      }
    }
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_GE(bytes, 1000000u);
  std::printf("%zu documents, %zu bytes, %zu ids\n", corpus->size(), bytes, ids);
}

TEST(BpeTokenizerTest, DecodeOfEncodeGivesBackValidUtf8Text) {
  REQUIRE_SMOLLM2(tok);
  const auto* corpus = Corpus();
  ASSERT_NE(corpus, nullptr);
  // SmolLM2 has no token for 21 bytes (0x04, 0x06, ..., 0xF1, 0xF2, 0xF5..0xFF); llama.cpp drops
  // them, so they cannot come back.
  bool missing[256] = {};
  int num_missing = 0;
  for (int b = 0; b < 256; ++b) {
    missing[b] = tok->TokenId(ByteLevelMap::Get().byte_to_utf8[b]) < 0;
    num_missing += missing[b];
  }
  EXPECT_EQ(num_missing, 21);
  for (const GoldenDoc& doc : *corpus) {
    if (!doc.valid_utf8) continue;
    std::string want;
    for (char c : doc.text) {
      if (!missing[static_cast<unsigned char>(c)]) want.push_back(c);
    }
    EXPECT_EQ(tok->Decode(tok->Encode(doc.text, false, false)), want) << doc.name;
    EXPECT_EQ(tok->Decode(tok->Encode(doc.text, true, false)), want) << doc.name;
  }
  EXPECT_EQ(tok->Decode(tok->Encode("caf\xC3\xA9 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", false, false)),
            "caf\xC3\xA9 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD");
}

TEST(BpeTokenizerTest, InvalidUtf8IsEncodedAsReplacementCharacters) {
  REQUIRE_SMOLLM2(tok);
  EXPECT_EQ(tok->Decode(tok->Encode("a\xff"
                                    "b\xc3",
                                    false, false)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(BpeTokenizerTest, ControlTokensAreMatchedOnlyWithParseSpecial) {
  REQUIRE_SMOLLM2(tok);
  EXPECT_EQ(tok->Encode("<|im_start|>", true, false), std::vector<int32_t>{1});
  const std::vector<int32_t> plain = tok->Encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok->Decode(plain), "<|im_start|>");
  EXPECT_EQ(tok->Encode("<|im_end|>x<|im_end|>", true, false).front(), 2);
}

TEST(BpeTokenizerTest, ReportsSmolLm2SpecialIds) {
  REQUIRE_SMOLLM2(tok);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->IsEog(2));  // <|im_end|>
  EXPECT_TRUE(tok->IsEog(0));  // <|endoftext|>
  EXPECT_FALSE(tok->IsEog(1));
  EXPECT_TRUE(tok->IsSpecial(1));
  EXPECT_FALSE(tok->IsSpecial(100));
  EXPECT_EQ(tok->TokenId("<|im_end|>"), 2);
  EXPECT_EQ(tok->TokenId("<no such token>"), -1);
  EXPECT_EQ(tok->TokenPiece(2), "<|im_end|>");
  EXPECT_EQ(tok->TokenPiece(-5), "");
  EXPECT_EQ(tok->Decode({1, 28120, 2}, /*skip_special=*/true), tok->TokenPiece(28120));
  EXPECT_EQ(tok->Encode("hi", false, /*add_bos=*/true).front(), 1);
}

TEST(BpeTokenizerTest, EncodesTheMegabyteCorpusInUnderASecond) {
  REQUIRE_SMOLLM2(tok);
  const auto* corpus = Corpus();
  ASSERT_NE(corpus, nullptr);
  std::string all;
  for (const GoldenDoc& doc : *corpus) all += doc.text;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->Encode(all, false, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu bytes into %zu ids in %.3f s (%.1f MB/s)\n", all.size(), ids.size(),
              seconds, all.size() / seconds / 1e6);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(seconds, 1.0);
#endif
}

TEST(BpeTokenizerTest, ConcurrentEncodesMatchSerialOnes) {
  REQUIRE_SMOLLM2(tok);
  const auto* corpus = Corpus();
  ASSERT_NE(corpus, nullptr);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < corpus->size(); i += 2) {
        const GoldenDoc& doc = (*corpus)[i];
        if (tok->Encode(doc.text, false, false) != doc.ids) ++mismatches[t];
        if (tok->Decode(doc.ids).size() == 0 && !doc.text.empty()) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// A vocabulary of the 256 byte characters plus `merges` (their results become tokens too).
TokenizerData ByteVocab(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
  TokenizerData d;
  d.kind = TokenizerData::Kind::kByteLevelBpe;
  d.pre = pre;
  const ByteLevelMap& map = ByteLevelMap::Get();
  for (int b = 0; b < 256; ++b) d.tokens.push_back(map.byte_to_utf8[b]);
  for (const std::string& m : merges) {
    d.merges.push_back(m);
    const size_t space = m.find(' ', 1);
    const std::string merged = m.substr(0, space) + m.substr(space + 1);
    bool present = false;
    for (const auto& t : d.tokens) present |= t == merged;
    if (!present) d.tokens.push_back(merged);
  }
  d.token_types.assign(d.tokens.size(), TokenType::kNormal);
  return d;
}

std::vector<std::string> Pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.TokenPiece(id));
  return out;
}

TEST(BpeTokenizerTest, MergesLowestRankFirstAndLeftmostOnTies) {
  // "a a" ranks first; "aa a" applies only to pairs that exist after it.
  auto tok = BpeTokenizer::Create(ByteVocab({"a a", "b c", "aa a"}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(Pieces(**tok, (*tok)->Encode("aaa", false, false)), (std::vector<std::string>{"aaa"}));
  // Both "a a" pairs merge before any "aa a".
  EXPECT_EQ(Pieces(**tok, (*tok)->Encode("aaaa", false, false)),
            (std::vector<std::string>{"aa", "aa"}));
  EXPECT_EQ(Pieces(**tok, (*tok)->Encode("aaaaa", false, false)),
            (std::vector<std::string>{"aa", "aaa"}));
  EXPECT_EQ(Pieces(**tok, (*tok)->Encode("abc", false, false)),
            (std::vector<std::string>{"a", "bc"}));
}

TEST(BpeTokenizerTest, SpaceIsByteLevelEncodedInMerges) {
  auto tok = BpeTokenizer::Create(ByteVocab({"Ġ h", "Ġh i"}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> ids = (*tok)->Encode("hi hi", false, false);
  EXPECT_EQ(Pieces(**tok, ids), (std::vector<std::string>{"h", "i", " hi"}));
}

TEST(BpeTokenizerTest, MissingMergeResultFallsBackToSingleByteTokens) {
  TokenizerData d = ByteVocab({"x y"});
  d.tokens.pop_back();  // drop "xy": the merge result is not an entry
  d.token_types.pop_back();
  auto tok = BpeTokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(Pieces(**tok, (*tok)->Encode("xy", false, false)),
            (std::vector<std::string>{"x", "y"}));
}

TEST(BpeTokenizerTest, IgnoreMergesEmitsWholeWordEntries) {
  TokenizerData d = ByteVocab({"a b"});
  d.tokens.push_back("abc");
  d.token_types.push_back(TokenType::kNormal);
  auto with = BpeTokenizer::Create(d, PreTokenizerSpec{{R"(\p{L}+)"}, true});
  auto without = BpeTokenizer::Create(d, PreTokenizerSpec{{R"(\p{L}+)"}, false});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(Pieces(**with, (*with)->Encode("abc", false, false)),
            (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Pieces(**without, (*without)->Encode("abc", false, false)),
            (std::vector<std::string>{"ab", "c"}));
}

TEST(BpeTokenizerTest, UserDefinedTokensAreMatchedEvenWithoutParseSpecial) {
  TokenizerData d = ByteVocab({});
  d.tokens.push_back("<ctl>");
  d.token_types.push_back(TokenType::kControl);
  d.tokens.push_back("<usr>");
  d.token_types.push_back(TokenType::kUserDefined);
  auto tok = BpeTokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t ctl = 256, usr = 257;
  const std::vector<int32_t> plain = (*tok)->Encode("<ctl><usr>", false, false);
  EXPECT_EQ(plain.back(), usr);
  EXPECT_EQ(plain.size(), 6u);  // "<ctl>" as five byte tokens, then <usr>
  const std::vector<int32_t> special = (*tok)->Encode("<ctl><usr>", true, false);
  EXPECT_EQ(special, (std::vector<int32_t>{ctl, usr}));
}

TEST(BpeTokenizerTest, LongerSpecialTokensWinOverShorterOnes) {
  TokenizerData d = ByteVocab({});
  for (const char* t : {"<a>", "<a><b>", "<b>"}) {
    d.tokens.push_back(t);
    d.token_types.push_back(TokenType::kControl);
  }
  auto tok = BpeTokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("<a><a><b><b>", true, false), (std::vector<int32_t>{256, 257, 258}));
}

TEST(BpeTokenizerTest, CreateRejectsAnUnknownPreTokenizer) {
  auto tok = BpeTokenizer::Create(ByteVocab({}, "no-such-pre"));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(ErrorCodeOf(tok.status()), "unsupported_tokenizer");
}

TEST(BpeTokenizerTest, CreateRejectsAMergeWithoutASpace) {
  TokenizerData d = ByteVocab({});
  d.merges.push_back("ab");
  auto tok = BpeTokenizer::Create(d);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(ErrorCodeOf(tok.status()), "bad_tokenizer");
}

}  // namespace
}  // namespace deepinfer::tokenizer
