// Enforced tool choice in every DeepSeek tool-call format: the constraint accepts the calls the
// encoders write (and ParseToolCalls reads them back), refuses other tools, other argument types,
// missing required arguments and a second call where one is allowed; requests it cannot enforce
// are clear errors.

#include "protocol/tool_constraint.h"

#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tokenizer/test_util.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

const std::vector<std::string> kTools = {
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}})",
    R"({"type":"function","function":{"name":"get_time"}})"};

// One call as the encoders render it; `args` are (name, JSON value) pairs.
std::string CallText(ToolCallFormat format, const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& args) {
  const ToolCallSyntax& s = ToolCallSyntaxOf(format);
  if (s.dsml) {
    std::string out = fmt::format("{} name=\"{}\">\n", s.call_begin, name);
    for (const auto& [k, v] : args) {
      const bool is_string = v.front() == '"';
      out += fmt::format("{} name=\"{}\" string=\"{}\">{}{}\n", s.param_begin, k,
                         is_string ? "true" : "false",
                         is_string ? v.substr(1, v.size() - 2) : v, s.param_end);
    }
    return out + std::string(s.call_end);
  }
  std::string json = "{";
  for (size_t i = 0; i < args.size(); ++i) {
    json += fmt::format("{}\"{}\": {}", i > 0 ? ", " : "", args[i].first, args[i].second);
  }
  json += "}";
  if (format == ToolCallFormat::kDeepseekV3) {
    return fmt::format("{}function{}{}\n```json\n{}\n```{}", s.call_begin, kToolSep, name, json,
                       s.call_end);
  }
  return fmt::format("{}{}{}{}{}", s.call_begin, name, kToolSep, json, s.call_end);
}

std::string BlockText(ToolCallFormat format, const std::vector<std::string>& calls) {
  const ToolCallSyntax& s = ToolCallSyntaxOf(format);
  std::string out = s.dsml ? fmt::format("\n\n{}\n", s.calls_begin) : std::string(s.calls_begin);
  for (size_t i = 0; i < calls.size(); ++i) out += (s.dsml && i > 0 ? "\n" : "") + calls[i];
  return out + (s.dsml ? "\n" : "") + std::string(s.calls_end);
}

class ToolConstraintTest : public ::testing::TestWithParam<ToolCallFormat> {
 protected:
  void SetUp() override {
    tok_ = tokenizer::testing::SmolLm2Tokenizer();
    if (tok_ == nullptr) GTEST_SKIP() << "SmolLM2 tokenizer files are absent";
    compiler_ = constraint::GrammarCompiler::Create(*tok_, tok_->vocab_size());
  }

  constraint::ConstraintMatcher Matcher(const ToolChoice& choice) {
    auto spec = ToolChoiceConstraint(GetParam(), kTools, choice);
    EXPECT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(spec->has_value());
    auto compiled = compiler_->Compile(**spec);
    EXPECT_TRUE(compiled.ok()) << compiled.status() << "\n" << (*spec)->text;
    return constraint::ConstraintMatcher(*compiled);
  }

  const tokenizer::Tokenizer* tok_ = nullptr;
  std::unique_ptr<constraint::GrammarCompiler> compiler_;
};

TEST_P(ToolConstraintTest, RequiredAcceptsTheEncodersCallsAndTheParserReadsThemBack) {
  const ToolCallFormat f = GetParam();
  const std::string weather = CallText(f, "get_weather", {{"city", "\"Paris\""}, {"days", "3"}});
  const std::string time = CallText(f, "get_time", {});
  for (const std::vector<std::string>& calls :
       {std::vector<std::string>{weather}, {time}, {weather, time}}) {
    const std::string text = BlockText(f, calls);
    constraint::ConstraintMatcher m = Matcher({ToolChoice::Mode::kRequired});
    ASSERT_TRUE(m.AcceptText(text)) << text;
    EXPECT_TRUE(m.IsCompleted()) << text;
    const ToolCallResult parsed = ParseToolCalls(f, text);
    ASSERT_EQ(parsed.calls.size(), calls.size()) << text;
    EXPECT_EQ(parsed.calls[0].name, calls[0] == weather ? "get_weather" : "get_time");
    EXPECT_EQ(parsed.content, "");
  }
  const ToolCallResult parsed = ParseToolCalls(f, BlockText(f, {weather}));
  EXPECT_EQ(parsed.calls[0].arguments, R"({"city": "Paris", "days": 3})");
}

TEST_P(ToolConstraintTest, ArgumentsFollowTheToolsSchema) {
  const ToolCallFormat f = GetParam();
  const std::string good = BlockText(f, {CallText(f, "get_weather", {{"city", "\"Oslo\""}})});
  // The integer argument as a string, and the required city left out.
  for (const std::string& bad :
       {BlockText(f, {CallText(f, "get_weather", {{"city", "\"Oslo\""}, {"days", "\"two\""}})}),
        BlockText(f, {CallText(f, "get_weather", {{"days", "2"}})}),
        BlockText(f, {CallText(f, "get_weather", {{"city", "\"Oslo\""}, {"hour", "2"}})})}) {
    constraint::ConstraintMatcher m = Matcher({ToolChoice::Mode::kRequired});
    EXPECT_FALSE(m.AcceptText(bad)) << bad;
    EXPECT_TRUE(m.AcceptText(good)) << "a refused text changed the state";
  }
  // Prose instead of a call.
  constraint::ConstraintMatcher m = Matcher({ToolChoice::Mode::kRequired});
  EXPECT_FALSE(m.AcceptText("Sure, the weather in Oslo is"));
}

TEST_P(ToolConstraintTest, ANamedToolAllowsExactlyOneCallOfIt) {
  const ToolCallFormat f = GetParam();
  const std::string time = CallText(f, "get_time", {});
  const std::string weather = CallText(f, "get_weather", {{"city", "\"Rome\""}});
  constraint::ConstraintMatcher m = Matcher({ToolChoice::Mode::kNamed, "get_time"});
  EXPECT_FALSE(m.AcceptText(BlockText(f, {weather})));
  EXPECT_FALSE(m.AcceptText(BlockText(f, {time, time})));
  EXPECT_TRUE(m.AcceptText(BlockText(f, {time})));
  EXPECT_TRUE(m.IsCompleted());
  // required without parallel calls: one call too.
  constraint::ConstraintMatcher one = Matcher({ToolChoice::Mode::kRequired, "", false});
  EXPECT_FALSE(one.AcceptText(BlockText(f, {weather, time})));
  EXPECT_TRUE(one.AcceptText(BlockText(f, {weather})));
}

TEST_P(ToolConstraintTest, WhatCannotBeEnforcedIsAClearError) {
  const ToolCallFormat f = GetParam();
  auto none = ToolChoiceConstraint(f, kTools, {ToolChoice::Mode::kAuto});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(ToolChoiceConstraint(f, kTools, {ToolChoice::Mode::kNone})->has_value());
  auto no_tools = ToolChoiceConstraint(f, {}, {ToolChoice::Mode::kRequired});
  EXPECT_EQ(ErrorCodeOf(no_tools.status()), "invalid_value");
  auto unknown = ToolChoiceConstraint(f, kTools, {ToolChoice::Mode::kNamed, "get_mood"});
  EXPECT_EQ(ErrorCodeOf(unknown.status()), "invalid_value");
  EXPECT_NE(unknown.status().message().find("get_mood"), std::string_view::npos);
  auto no_syntax = ToolChoiceConstraint(ToolCallFormat::kNone, kTools, {ToolChoice::Mode::kRequired});
  EXPECT_EQ(ErrorCodeOf(no_syntax.status()), "unsupported_value");
  auto malformed = ToolChoiceConstraint(f, {R"({"type":"function"})"}, {ToolChoice::Mode::kRequired});
  EXPECT_EQ(ErrorCodeOf(malformed.status()), "invalid_value");
  // Names the markers cannot carry, a name used twice (found by an adversarial trial: the
  // answer came back as content, or as a call of another tool).
  for (const std::string& name : {std::string(""), std::string("get\"w"), std::string("a\nb"),
                                  std::string("a<｜tool▁sep｜>b"), std::string("x<b>")}) {
    auto r = ToolChoiceConstraint(
        f, {R"({"type":"function","function":{"name":)" + util::DumpJson(name) + "}}"},
        {ToolChoice::Mode::kRequired});
    EXPECT_EQ(ErrorCodeOf(r.status()), "invalid_value") << name;
  }
  auto twice = ToolChoiceConstraint(f, {kTools[1], kTools[1]}, {ToolChoice::Mode::kRequired});
  EXPECT_EQ(ErrorCodeOf(twice.status()), "invalid_value");
  // DSML passes named arguments: a non-object schema, or a property name with a quote.
  for (const char* params : {R"({"type":"string"})", R"({"type":"object","properties":{"k\"y":{}}})"}) {
    auto r = ToolChoiceConstraint(
        f, {std::string(R"({"type":"function","function":{"name":"f","parameters":)") + params + "}}"},
        {ToolChoice::Mode::kRequired});
    if (ToolCallSyntaxOf(f).dsml) {
      EXPECT_EQ(ErrorCodeOf(r.status()), "invalid_value") << params;
    } else {
      EXPECT_TRUE(r.ok()) << params << r.status();  // JSON arguments carry any value and key
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ToolConstraintTest,
                         ::testing::Values(ToolCallFormat::kDeepseekV3, ToolCallFormat::kDeepseekV31,
                                           ToolCallFormat::kDsmlV32, ToolCallFormat::kDsmlV4,
                                           ToolCallFormat::kDsmlV41),
                         [](const auto& info) {
                           switch (info.param) {
                             case ToolCallFormat::kDeepseekV3:
                               return std::string("v3");
                             case ToolCallFormat::kDeepseekV31:
                               return std::string("v31");
                             case ToolCallFormat::kDsmlV32:
                               return std::string("dsml_v32");
                             case ToolCallFormat::kDsmlV4:
                               return std::string("dsml_v4");
                             default:
                               return std::string("dsml_v41");
                           }
                         });

}  // namespace
}  // namespace deepinfer::api
