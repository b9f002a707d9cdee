#include "tools/count_tokens.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "protocol/anthropic_types.h"

namespace deepinfer::tools {
namespace {

api::ChatMessage Msg(const std::string& role, const std::string& content = "x",
                     const std::string& tool_calls = "", const std::string& call_id = "") {
  api::ChatMessage m;
  m.role = role;
  m.content = content;
  m.tool_calls_json = tool_calls;
  m.tool_call_id = call_id;
  return m;
}

std::string Calls(std::initializer_list<const char*> ids) {
  std::string out = "[";
  for (const char* id : ids) {
    if (out.size() > 1) out += ",";
    out += std::string("{\"id\":\"") + id +
           "\",\"type\":\"function\",\"function\":{\"name\":\"f\","
           "\"arguments\":\"{}\"}}";
  }
  return out + "]";
}

TEST(TokenBudgetTest, SeedProfileNeedsCompactionFrom999424Tokens) {
  TokenBudget budget;
  EXPECT_EQ(budget.limit(), 999424);
  BudgetFlags operator_profile;
  operator_profile.profile = BudgetProfile::kOperator;
  EXPECT_EQ(ResolveBudget(operator_profile, 8192, 100).limit(), 999424);
}

// The default verdict is the server's: it refuses prompt + max_tokens > window, and a prompt
// that fills the window without max_tokens (api::ResolveMaxTokens).
TEST(TokenBudgetTest, TheModelProfileJudgesAsTheServerDoes) {
  BudgetFlags flags;
  TokenBudget b = ResolveBudget(flags, 8192, std::nullopt);
  EXPECT_EQ(b.window, 8192);
  EXPECT_EQ(b.limit(), 8192);  // 8,191 prompt tokens fit, 8,192 do not
  b = ResolveBudget(flags, 8192, 100);
  EXPECT_EQ(b.limit(), 8093);  // 8,092 + 100 = 8,192 fits
  flags.window = 4096;         // --window caps the model's window, never raises it
  EXPECT_EQ(ResolveBudget(flags, 8192, std::nullopt).window, 4096);
  flags.window = 1 << 20;
  EXPECT_EQ(ResolveBudget(flags, 8192, std::nullopt).window, 8192);
  flags.headroom_tokens = 92;
  flags.output_tokens = 0;
  EXPECT_EQ(ResolveBudget(flags, 8192, 100).limit(), 8101);
}

TEST(PlanCompactionTest, TakesTheFirstHalfOfTheHistoryAfterTheSystemPrompt) {
  std::vector<api::ChatMessage> m = {Msg("system"),    Msg("user"), Msg("assistant"), Msg("user"),
                                     Msg("assistant"), Msg("user"), Msg("assistant"), Msg("user")};
  CompactionPlan plan = PlanCompaction(m);
  ASSERT_TRUE(plan.possible) << plan.reason;
  EXPECT_EQ(plan.begin, 1);
  EXPECT_EQ(plan.end, 4);  // 7 history messages: the first 3
  EXPECT_EQ(plan.num_messages, 3);
}

TEST(PlanCompactionTest, MovesTheEndSoNoToolCallIsSplitFromItsResults) {
  // Half of 8 history messages ends between the call (3) and its second result (5).
  std::vector<api::ChatMessage> m = {Msg("system"),
                                     Msg("user"),
                                     Msg("assistant"),
                                     Msg("assistant", "", Calls({"a", "b"})),
                                     Msg("tool", "r", "", "a"),
                                     Msg("tool", "r", "", "b"),
                                     Msg("assistant"),
                                     Msg("user"),
                                     Msg("user")};
  CompactionPlan plan = PlanCompaction(m);
  ASSERT_TRUE(plan.possible) << plan.reason;
  EXPECT_EQ(plan.begin, 1);
  EXPECT_EQ(plan.end, 6);  // after the call's last result, not between its results
  EXPECT_NE(plan.reason.find("moved"), std::string::npos);
}

TEST(PlanCompactionTest, ResultsWithoutIdsBelongToTheLatestCall) {
  std::vector<api::ChatMessage> m = {Msg("user"),      Msg("assistant", "", "[{}]"),
                                     Msg("tool"),      Msg("tool"),
                                     Msg("assistant"), Msg("user")};
  CompactionPlan plan = PlanCompaction(m);
  ASSERT_TRUE(plan.possible);
  EXPECT_EQ(plan.begin, 0);
  EXPECT_TRUE(plan.end == 1 || plan.end == 4) << plan.end;
}

TEST(PlanCompactionTest, SaysSoWhenNoSafeRangeExists) {
  std::vector<api::ChatMessage> m = {Msg("system"), Msg("assistant", "", Calls({"c"})),
                                     Msg("tool", "r", "", "c"), Msg("tool", "r", "", "c")};
  CompactionPlan plan = PlanCompaction(m);
  EXPECT_FALSE(plan.possible);
  EXPECT_NE(plan.reason.find("no safe range"), std::string::npos) << plan.reason;
  EXPECT_FALSE(PlanCompaction({Msg("system"), Msg("user")}).possible);
}

TEST(AnthropicToChatMessagesTest, ToolUseAndResultsBecomeCallsAndToolMessages) {
  auto body = util::ParseJson(R"({"system": [{"type": "text", "text": "Be terse."}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "Sun"}]},
        {"type": "text", "text": "Tomorrow?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]}
    ]})");
  ASSERT_TRUE(body.ok());
  int32_t num_images = 0;
  auto messages = api::AnthropicToChatMessages(*body, &num_images);
  ASSERT_TRUE(messages.ok()) << messages.status();
  std::vector<std::string> roles;
  for (const api::ChatMessage& m : *messages) roles.push_back(m.role);
  EXPECT_EQ(roles,
            (std::vector<std::string>{"system", "user", "assistant", "tool", "user", "tool"}));
  EXPECT_EQ((*messages)[0].content, "Be terse.");
  EXPECT_EQ((*messages)[2].content, "Checking.");  // thinking dropped
  EXPECT_NE((*messages)[2].tool_calls_json.find("\"id\":\"t1\""), std::string::npos);
  EXPECT_NE((*messages)[2].tool_calls_json.find("{\\\"city\\\":\\\"Paris\\\"}"), std::string::npos)
      << (*messages)[2].tool_calls_json;
  EXPECT_EQ((*messages)[3].tool_call_id, "t1");
  EXPECT_EQ((*messages)[3].content, "Sun");
  // The image keeps its place after the text, as its placeholder.
  EXPECT_EQ((*messages)[4].content, "Tomorrow?\n" + std::string(api::kImagePlaceholder));
  ASSERT_EQ((*messages)[4].images.size(), 1u);
  EXPECT_EQ((*messages)[4].images[0].url, "data:image/png;base64,");
  EXPECT_EQ(num_images, 1);
}

TEST(AnthropicToChatMessagesTest, RejectsWhatItCannotCount) {
  for (const char* text :
       {R"({"messages": [{"role": "system", "content": "x"}]})", R"({"messages": "x"})",
        R"({"system": 3, "messages": []})",
        R"({"messages": [{"role": "user", "content": [{"type": "document"}]}]})",
        R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use"}]}]})"}) {
    auto body = util::ParseJson(text);
    ASSERT_TRUE(body.ok()) << text;
    int32_t num_images = 0;
    EXPECT_FALSE(api::AnthropicToChatMessages(*body, &num_images).ok()) << text;
  }
}

class CounterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K/stories260K.bin";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "stories260K not found at " << path;
    auto counter = RequestCounter::Create(path, "");
    ASSERT_TRUE(counter.ok()) << counter.status();
    counter_ = std::move(*counter);
  }
  std::unique_ptr<RequestCounter> counter_;
};

TEST_F(CounterTest, OpenAiAndAnthropicShapesOfOneConversationCountAlike) {
  BudgetFlags budget;
  auto openai = counter_->Count(
      R"({"messages":[{"role":"system","content":"Be brief."},
                      {"role":"user","content":[{"type":"text","text":"Once upon "},
                                                {"type":"image_url","image_url":{"url":"x"}},
                                                {"type":"text","text":"a time"}]}]})",
      RequestFormat::kAuto, budget);
  ASSERT_TRUE(openai.ok()) << openai.status();
  EXPECT_EQ(openai->format, "openai");
  auto anthropic = counter_->Count(
      R"({"system":"Be brief.","messages":[{"role":"user","content":[
          {"type":"text","text":"Once upon "},
          {"type":"image","source":{"type":"base64","media_type":"image/png","data":""}},
          {"type":"text","text":"a time"}]}]})",
      RequestFormat::kAuto, budget);
  ASSERT_TRUE(anthropic.ok()) << anthropic.status();
  EXPECT_EQ(anthropic->format, "anthropic");
  EXPECT_GT(openai->text_tokens, 0);
  EXPECT_EQ(openai->text_tokens, anthropic->text_tokens);
  EXPECT_EQ(openai->num_images, 1);
  EXPECT_EQ(openai->input_tokens, openai->text_tokens + 1024);
  EXPECT_EQ(openai->input_tokens, anthropic->input_tokens);
}

TEST_F(CounterTest, VerdictFlipsExactlyAtTheLimit) {
  const char* body = R"({"messages":[{"role":"user","content":"Once upon a time there was"}]})";
  auto count = counter_->Count(body, RequestFormat::kOpenAi, BudgetFlags{});
  ASSERT_TRUE(count.ok());
  BudgetFlags budget;
  budget.profile = BudgetProfile::kOperator;
  budget.output_tokens = 10;
  budget.headroom_tokens = 5;
  budget.window = count->input_tokens + 15;  // limit == input: compaction needed
  EXPECT_TRUE(counter_->Count(body, RequestFormat::kOpenAi, budget)->needs_compaction);
  budget.window = *budget.window + 1;
  EXPECT_FALSE(counter_->Count(body, RequestFormat::kOpenAi, budget)->needs_compaction);
}

TEST_F(CounterTest, RequestsThatCannotBeCountedAreErrorsNotEstimates) {
  for (const char* body : {"not json", "{}", R"({"messages":[{"role":"wizard","content":"x"}]})",
                           R"({"system":"x","messages":[{"role":"user","content":[
                               {"type":"document","source":{}}]}]})"}) {
    EXPECT_FALSE(counter_->Count(body, RequestFormat::kAuto, BudgetFlags{}).ok()) << body;
  }
}

TEST_F(CounterTest, PlanReportsTheCountWithoutTheRange) {
  const char* body = R"({"messages":[{"role":"user","content":"one two three"},
      {"role":"assistant","content":"four five"},{"role":"user","content":"six"},
      {"role":"assistant","content":"seven"},{"role":"user","content":"eight"}]})";
  auto count = counter_->Count(body, RequestFormat::kOpenAi, BudgetFlags{});
  ASSERT_TRUE(count.ok());
  CompactionPlan plan = PlanCompaction(count->messages);
  ASSERT_TRUE(plan.possible);
  ASSERT_TRUE(counter_->CountPlan(*count, &plan).ok());
  EXPECT_GT(plan.input_tokens_after, 0);
  EXPECT_LT(plan.input_tokens_after, count->input_tokens);
}

}  // namespace
}  // namespace deepinfer::tools
