// Constraints compiled for real vocabularies (SmolLM2's byte-level BPE, stories260K's llama2.c
// vocabulary, the DeepSeek-V3 and V4 tokenizers; each skips when its files are absent): text
// that matches a constraint is allowed token by token as our tokenizer splits it, then an
// end-of-generation token ends it; a wrong continuation is masked and refused; a random walk
// over allowed tokens never reaches a dead end; malformed constraints are invalid_constraint.

#include "constraint/grammar.h"

#include <random>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tokenizer/deepseek_test_util.h"
#include "tokenizer/test_util.h"
#include "util/status.h"

namespace deepinfer::constraint {
namespace {

namespace tt = tokenizer::testing;

bool Allowed(const std::vector<uint32_t>& mask, int32_t token) {
  return (mask[static_cast<size_t>(token) / 32] >> (token % 32)) & 1u;
}

struct Vocab {
  const char* name;
  const tokenizer::Tokenizer* (*get)();
};

class ConstraintTest : public ::testing::TestWithParam<Vocab> {
 protected:
  void SetUp() override {
    tok_ = GetParam().get();
    if (tok_ == nullptr) GTEST_SKIP() << GetParam().name << " tokenizer files are absent";
    // A head padded past the vocabulary, as models often have: the extra ids are never allowed.
    logits_ = tok_->vocab_size() + 7;
    compiler_ = GrammarCompiler::Create(*tok_, logits_);
    for (int32_t id = 0; id < tok_->vocab_size() && eog_ < 0; ++id) {
      if (tok_->IsEog(id)) eog_ = id;
    }
  }

  ConstraintMatcher Matcher(const ConstraintSpec& spec) {
    auto compiled = compiler_->Compile(spec);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return ConstraintMatcher(*compiled);
  }

  // Feeds `text` as our tokenizer splits it; every token must be allowed and accepted. Where
  // that split's pieces do not spell the text (llama2.c's encoder puts a space in front of a
  // text, SentencePiece's dummy prefix, which a model's output does not have there), the
  // longest allowed piece that continues the text is taken at each step instead.
  void Walk(ConstraintMatcher& m, const std::string& text) {
    std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
    std::vector<int32_t> ids;
    tok_->EncodeAppend(text, /*parse_special=*/false, &ids);
    std::string spelled;
    for (int32_t id : ids) spelled += tok_->TokenPiece(id);
    if (spelled == text) {
      for (int32_t id : ids) {
        ASSERT_GT(m.FillMask(mask.data()), 0);
        ASSERT_TRUE(Allowed(mask, id)) << "token " << id << " '" << tok_->TokenPiece(id)
                                       << "' of " << text;
        ASSERT_TRUE(m.Accept(id)) << id;
      }
      return;
    }
    for (size_t at = 0; at < text.size();) {
      ASSERT_GT(m.FillMask(mask.data()), 0);
      int32_t best = -1;
      size_t best_len = 0;
      for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
        const std::string piece = tok_->TokenPiece(id);
        if (!Allowed(mask, id) || piece.size() <= best_len || tok_->IsSpecial(id)) continue;
        if (text.compare(at, piece.size(), piece) == 0) {
          best = id;
          best_len = piece.size();
        }
      }
      ASSERT_GE(best, 0) << "no allowed token continues " << text.substr(at);
      ASSERT_TRUE(m.Accept(best));
      at += best_len;
    }
  }

  const tokenizer::Tokenizer* tok_ = nullptr;
  int32_t logits_ = 0;
  int32_t eog_ = -1;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_P(ConstraintTest, MatchingTextIsAllowedTokenByTokenThenEndOfGenerationEndsIt) {
  struct Case {
    ConstraintSpec spec;
    std::string text;
  };
  const std::vector<Case> cases = {
      {{ConstraintKind::kJsonSchema,
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
        R"("required":["name","age"]})"},
       R"({"name": "Ada Lovelace", "age": 36})"},
      {{ConstraintKind::kJsonObject, ""}, R"({"a": [1, 2.5, {"b": null}], "c": "x\ny"})"},
      {{ConstraintKind::kRegex, "[0-9]{3}-[a-z]+"}, "123-abc"},
      {{ConstraintKind::kChoice, "", {"yes", "no", "maybe \"so\""}}, "maybe \"so\""},
      {{ConstraintKind::kGrammar, R"g(root ::= "(" [a-z]+ ("," [a-z]+)* ")")g"}, "(hello,world)"},
      // A DSML tool call: markers, then the arguments as parameters checked against a schema.
      {{ConstraintKind::kStructuralTag,
        R"({"type":"structural_tag","format":{"type":"sequence","elements":[)"
        R"({"type":"const_string","value":"<｜DSML｜invoke name=\"get_weather\">"},)"
        R"({"type":"json_schema","style":"deepseek_xml","max_whitespace_cnt":1,"json_schema":)"
        R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},)"
        R"("required":["city"]}},{"type":"const_string","value":"</｜DSML｜invoke>"}]}})"},
       "<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" "
       "string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>"},
      // Thinking stays free until its end tag; the constraint applies after it.
      {{ConstraintKind::kRegex, "[0-9]+", {}, "</think>"},
       "Let me think: <b>x</b> is 4 </thin no.</think>42"},
      {{ConstraintKind::kJsonObject, "", {}, "</think>"}, "</think>{\"a\": 1}"},
  };
  ASSERT_GE(eog_, 0);
  for (const Case& c : cases) {
    SCOPED_TRACE(ConstraintKindName(c.spec.kind));
    ConstraintMatcher m = Matcher(c.spec);
    Walk(m, c.text);
    EXPECT_TRUE(m.IsCompleted());
    std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
    ASSERT_GT(m.FillMask(mask.data()), 0);
    EXPECT_TRUE(Allowed(mask, eog_));
    for (int32_t id = tok_->vocab_size(); id < logits_; ++id) EXPECT_FALSE(Allowed(mask, id));
    EXPECT_TRUE(m.Accept(eog_));
    EXPECT_TRUE(m.IsTerminated());
    EXPECT_EQ(m.FillMask(mask.data()), 0);
    EXPECT_FALSE(m.Accept(eog_));
  }
}

TEST_P(ConstraintTest, AWrongContinuationIsMaskedAndRefusedWithoutChangingTheState) {
  ConstraintMatcher m = Matcher(
      {ConstraintKind::kJsonSchema, R"({"type":"object","properties":{"n":{"type":"integer"}},)"
                                    R"("required":["n"]})"});
  Walk(m, R"({"n": )");
  std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
  m.FillMask(mask.data());
  int32_t brace = -1;
  for (int32_t id = 0; id < tok_->vocab_size() && brace < 0; ++id) {
    if (tok_->TokenPiece(id) == "}") brace = id;
  }
  ASSERT_GE(brace, 0);
  EXPECT_FALSE(Allowed(mask, brace));  // the required integer is missing
  EXPECT_FALSE(m.Accept(brace));
  EXPECT_FALSE(Allowed(mask, eog_));      // incomplete: the end is not allowed either
  Walk(m, "42}");                         // the refused token changed nothing
  EXPECT_TRUE(m.IsCompleted());
}

// Speculative drafts: the engine accepts a sequence's drafts to mask the rows after them, then
// rolls back those the verification rejected. After a rollback the masks are those of the
// state before the rolled-back tokens, termination included.
TEST_P(ConstraintTest, RollbackRestoresTheMasksOfEarlierStatesAndUndoesTermination) {
  ConstraintMatcher m = Matcher({ConstraintKind::kRegex, "[0-9]{1,3}"});
  std::vector<uint32_t> start(static_cast<size_t>(m.MaskWords()));
  std::vector<uint32_t> mask(start.size());
  m.FillMask(start.data());
  std::vector<int32_t> digits;
  for (int32_t id = 0; id < tok_->vocab_size() && digits.size() < 3; ++id) {
    const std::string piece = tok_->TokenPiece(id);
    if (piece.size() == 1 && piece[0] >= '0' && piece[0] <= '9' && Allowed(start, id)) {
      digits.push_back(id);
    }
  }
  ASSERT_EQ(digits.size(), 3u);
  for (int32_t d : digits) ASSERT_TRUE(m.Accept(d));
  EXPECT_TRUE(m.IsCompleted());
  m.FillMask(mask.data());
  EXPECT_FALSE(Allowed(mask, digits[0]));  // three digits: only the end may follow
  ASSERT_TRUE(m.Accept(eog_));
  ASSERT_TRUE(m.IsTerminated());
  m.Rollback(3);  // back to one digit: live again, more digits allowed
  EXPECT_FALSE(m.IsTerminated());
  ASSERT_GT(m.FillMask(mask.data()), 0);
  EXPECT_TRUE(Allowed(mask, digits[1]));
  EXPECT_TRUE(Allowed(mask, eog_));
  m.Rollback(1);  // back to the start
  m.FillMask(mask.data());
  EXPECT_EQ(mask, start);
  m.Rollback(0);  // nothing to undo
  m.FillMask(mask.data());
  EXPECT_EQ(mask, start);
}

// A checkpoint's config can name an end token its tokenizer files do not (no
// tokenizer_config.json): the engine stops on it, so a completed grammar must allow it too.
TEST_P(ConstraintTest, TheEnginesEndTokensEndACompletedGrammar) {
  int32_t extra = -1;  // a control token that is not an end of generation
  for (int32_t id = 0; id < tok_->vocab_size() && extra < 0; ++id) {
    if (tok_->IsSpecial(id) && !tok_->IsEog(id)) extra = id;
  }
  if (extra < 0) GTEST_SKIP() << "every control token of this vocabulary ends generation";
  auto compiler = GrammarCompiler::Create(*tok_, logits_, {extra, -5, logits_ + 9});
  auto compiled = compiler->Compile({ConstraintKind::kChoice, "", {"ok"}});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ConstraintMatcher m(*compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
  m.FillMask(mask.data());
  EXPECT_FALSE(Allowed(mask, extra));  // not before the grammar is complete
  EXPECT_FALSE(m.Accept(extra));
  Walk(m, "ok");
  ASSERT_GT(m.FillMask(mask.data()), 0);
  EXPECT_TRUE(Allowed(mask, extra));
  EXPECT_TRUE(Allowed(mask, eog_));
  EXPECT_TRUE(m.Accept(extra));
  EXPECT_TRUE(m.IsTerminated());
}

TEST_P(ConstraintTest, ControlTokensNeverMatchGrammarText) {
  ConstraintMatcher m = Matcher({ConstraintKind::kJsonObject, ""});
  std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
  m.FillMask(mask.data());
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->IsSpecial(id)) {
      EXPECT_FALSE(Allowed(mask, id)) << id;
      // Refused without a word from xgrammar (a speculative draft can be one).
      testing::internal::CaptureStderr();
      EXPECT_FALSE(m.Accept(id)) << id;
      EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << id;
    }
  }
}

TEST_P(ConstraintTest, ARandomWalkOverAllowedTokensNeverReachesADeadEnd) {
  std::mt19937 rng(5);
  for (const ConstraintSpec& spec :
       {ConstraintSpec{ConstraintKind::kJsonSchema,
                       R"({"type":"object","properties":{"tags":{"type":"array","items":)"
                       R"({"type":"string","maxLength":4},"maxItems":3},"ok":{"type":"boolean"}},)"
                       R"("required":["tags","ok"],"additionalProperties":false})"},
        ConstraintSpec{ConstraintKind::kRegex, "(ab|cd){1,4}[0-9]?"},
        ConstraintSpec{ConstraintKind::kChoice, "", {"red", "green", "blue"}}}) {
    SCOPED_TRACE(ConstraintKindName(spec.kind));
    ConstraintMatcher m = Matcher(spec);
    std::vector<uint32_t> mask(static_cast<size_t>(m.MaskWords()));
    for (int step = 0; step < 200 && !m.IsTerminated(); ++step) {
      const int32_t allowed = m.FillMask(mask.data());
      ASSERT_GT(allowed, 0) << "dead end at step " << step;
      // Pick the k-th allowed token; past 40 steps prefer ending, so that the walk finishes.
      int32_t pick = -1;
      if (step > 40 && Allowed(mask, eog_)) {
        pick = eog_;
      } else {
        int32_t k = static_cast<int32_t>(rng() % static_cast<uint32_t>(allowed));
        for (int32_t id = 0; id < logits_ && pick < 0; ++id) {
          if (Allowed(mask, id) && k-- == 0) pick = id;
        }
      }
      ASSERT_GE(pick, 0);
      ASSERT_LT(pick, tok_->vocab_size());
      ASSERT_TRUE(m.Accept(pick));
    }
  }
}

TEST_P(ConstraintTest, LengthBoundedStringsKeepTheirBoundAndRefuseControlCharacters) {
  // xgrammar's own bounded-string rule lets raw control characters through (grammar.cc).
  const std::string schema =
      R"({"type":"object","properties":{"zone":{"type":"string","minLength":2,"maxLength":6}},)"
      R"("required":["zone"],"additionalProperties":false})";
  const std::string tag = R"({"type":"structural_tag","format":{"type":"json_schema",)"
                          R"("json_schema":)" + schema + "}}";
  for (const ConstraintSpec& spec : {ConstraintSpec{ConstraintKind::kJsonSchema, schema},
                                     ConstraintSpec{ConstraintKind::kStructuralTag, tag}}) {
    SCOPED_TRACE(ConstraintKindName(spec.kind));
    for (const std::string bad : {"{\"zone\": \"a\x01\"}", "{\"zone\": \"a\tb\"}",
                                  "{\"zone\": \"abcdefg\"}", "{\"zone\": \"a\"}"}) {
      ConstraintMatcher m = Matcher(spec);
      EXPECT_FALSE(m.AcceptText(bad) && m.IsCompleted()) << bad;
    }
    ConstraintMatcher m = Matcher(spec);
    EXPECT_TRUE(m.AcceptText("{\"zone\": \"Pé\u20acris\"}"));
    EXPECT_TRUE(m.IsCompleted());
  }
}

TEST_P(ConstraintTest, MalformedConstraintsAreInvalidWithTheEnginesReason) {
  for (const ConstraintSpec& spec : {ConstraintSpec{ConstraintKind::kJsonSchema, "{"},
                                     ConstraintSpec{ConstraintKind::kJsonSchema, R"({"type":7})"},
                                     ConstraintSpec{ConstraintKind::kRegex, "(unclosed"},
                                     ConstraintSpec{ConstraintKind::kGrammar, "root ::= "},
                                     ConstraintSpec{ConstraintKind::kGrammar, "start ::= \"a\""},
                                     ConstraintSpec{ConstraintKind::kChoice, "", {}},
                                     ConstraintSpec{ConstraintKind::kChoice, "", {"a", ""}},
                                     ConstraintSpec{ConstraintKind::kStructuralTag, "[]"},
                                     ConstraintSpec{ConstraintKind::kStructuralTag,
                                                    R"({"type":"structural_tag","format":)"
                                                    R"({"type":"no_such_format"}})"}}) {
    auto c = compiler_->Compile(spec);
    ASSERT_FALSE(c.ok()) << ConstraintKindName(spec.kind) << " " << spec.text;
    EXPECT_TRUE(absl::IsInvalidArgument(c.status()));
    EXPECT_EQ(ErrorCodeOf(c.status()), "invalid_constraint");
    const std::string message(c.status().message());
    EXPECT_NE(message.find(ConstraintKindName(spec.kind)), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_EQ(message.find(".cc:"), std::string::npos) << message;  // no source paths
  }
}

// What a client could send to exhaust the server (found by trying it): answered with a 400,
// quickly, instead of a stack overflow or minutes of compiling.
TEST_P(ConstraintTest, HostileConstraintsAreRefusedBeforeTheyCompile) {
  std::string chain = R"({"$defs":{)";
  for (int i = 0; i < 600; ++i) {
    chain += fmt::format(R"("d{}":{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/d{}"}}}}}},)",
                         i, i + 1);
  }
  chain += R"("d600":{"type":"string"}},"$ref":"#/$defs/d0"})";
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) big_enum += fmt::format("{}\"v{}\"", i > 0 ? "," : "", i);
  big_enum += "]}";
  std::vector<std::string> many(5000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = "c" + std::to_string(i);
  std::string nested;
  for (int i = 0; i < 100; ++i) nested += R"({"type":"array","items":)";
  nested += R"({"type":"string"})" + std::string(100, '}');
  struct Case {
    ConstraintSpec spec;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{
           {{ConstraintKind::kJsonSchema, chain}, "deeper"},
           {{ConstraintKind::kJsonSchema, nested}, "nesting"},
           {{ConstraintKind::kJsonSchema, big_enum}, "too large"},
           {{ConstraintKind::kChoice, "", many}, "choices"},
           {{ConstraintKind::kRegex, std::string(300 << 10, 'a')}, "KiB"},
           {{ConstraintKind::kGrammar, "root ::= root"}, "no output"},
           // Keywords xgrammar would ignore, so the output could break them.
           {{ConstraintKind::kJsonSchema, R"({"type":"array","uniqueItems":true})"},
            "uniqueItems"},
           {{ConstraintKind::kJsonSchema, R"({"properties":{"a":{"not":{"type":"string"}}}})"},
            "'not'"},
           {{ConstraintKind::kJsonSchema, R"({"$ref":"http://example.com/s.json"})"}, "local"},
           {{ConstraintKind::kJsonSchema, R"({"$ref":"#/$defs/missing"})"}, "points to nothing"},
           {{ConstraintKind::kJsonSchema, R"({"type":"string","pattern":"^(?!admin).*$"})"},
            "pattern"}}) {
    auto compiled = compiler_->Compile(c.spec);
    ASSERT_FALSE(compiled.ok()) << c.reason;
    EXPECT_EQ(ErrorCodeOf(compiled.status()), "invalid_constraint");
    EXPECT_NE(compiled.status().message().find(c.reason), std::string_view::npos)
        << compiled.status().message();
  }
  // A recursive schema is fine: the recursion becomes a grammar rule.
  EXPECT_TRUE(compiler_->Compile({ConstraintKind::kJsonSchema,
                                  R"({"$defs":{"n":{"type":"object","properties":{"kids":)"
                                  R"({"type":"array","items":{"$ref":"#/$defs/n"}}}}},)"
                                  R"("$ref":"#/$defs/n"})"})
                  .ok());
}

TEST_P(ConstraintTest, ObjectsHaveOnlyTheirSchemasPropertiesAndNeverARepeatedKey) {
  const std::string named = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  ConstraintMatcher m = Matcher({ConstraintKind::kJsonSchema, named});
  EXPECT_FALSE(m.AcceptText(R"({"a": 1, "b")"));
  const std::string open =
      R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})";
  ConstraintMatcher again = Matcher({ConstraintKind::kJsonSchema, open});
  EXPECT_FALSE(again.AcceptText(R"({"a": 1, "a": 2})"));
  EXPECT_TRUE(again.AcceptText(R"({"a": 1, "b": [true]})"));
  ConstraintMatcher any = Matcher({ConstraintKind::kJsonSchema, R"({"type":"object"})"});
  EXPECT_TRUE(any.AcceptText(R"({"x": {"y": null}})"));
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, ConstraintTest,
    ::testing::Values(Vocab{"smollm2", &tt::SmolLm2Tokenizer},
                      Vocab{"stories260k", &tt::Stories260kTokenizer},
                      Vocab{"deepseek_v3", &tt::DeepseekV3Tokenizer},
                      Vocab{"deepseek_v4", &tt::DeepseekV4Tokenizer}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace deepinfer::constraint
