#include "tools/bench_runner.h"

#include "gtest/gtest.h"
#include "tools/bench.h"
#include "tools/bench_report.h"
#include "util/json.h"

namespace deepinfer::tools {
namespace {

std::string Chunk(const std::string& text, const char* finish = nullptr) {
  util::Json c = util::Json{{"id", "cmpl-1"}, {"object", "text_completion"}};
  util::Json choice = util::Json{{"index", 0}, {"text", text}};
  choice["finish_reason"] = finish ? util::Json(finish) : util::Json(nullptr);
  c["choices"] = util::Json::array({choice});
  return util::DumpJson(c);
}

TEST(ReduceStreamTest, MeasuresTtftItlAndUsage) {
  std::string usage = R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,)"
                      R"("prompt_tokens_details":{"cached_tokens":8}}})";
  std::vector<StreamEvent> events = {{Chunk("Hello"), 0.10},
                                     {Chunk(""), 0.12},
                                     {Chunk(" big"), 0.15},
                                     {Chunk(" world", "length"), 0.25},
                                     {usage, 0.26}};
  RequestRecord r;
  r.e2el_s = 0.3;
  ReduceStream(events, /*saw_done=*/true, Endpoint::kCompletions, &r);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.10);
  ASSERT_EQ(r.itl_s.size(), 2u);  // empty chunks are not output
  EXPECT_NEAR(r.itl_s[0], 0.05, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.10, 1e-12);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.prompt_tokens, 12);
  EXPECT_EQ(r.cached_tokens, 8);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.text, "Hello big world");
}

TEST(ReduceStreamTest, CountsChunksWhenTheServerSendsNoUsage) {
  std::vector<StreamEvent> events = {{Chunk("a"), 0.1}, {Chunk("b"), 0.2}, {Chunk("c"), 0.3}};
  RequestRecord r;
  ReduceStream(events, true, Endpoint::kCompletions, &r);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_FALSE(r.usage_reported);
}

TEST(ReduceStreamTest, ReadsChatDeltas) {
  std::vector<StreamEvent> events = {
      {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})", 0.05},
      {R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})", 0.2},
      {R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", 0.3}};
  RequestRecord r;
  ReduceStream(events, true, Endpoint::kChat, &r);
  ASSERT_TRUE(r.ok);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.2);  // the role-only chunk is not the first token
  EXPECT_EQ(r.output_tokens, 1);
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST(ReduceStreamTest, StreamWithoutDoneFails) {
  RequestRecord r;
  ReduceStream({{Chunk("a"), 0.1}}, /*saw_done=*/false, Endpoint::kCompletions, &r);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("[DONE]"), std::string::npos);
}

TEST(ReduceStreamTest, ErrorEventFailsTheRequest) {
  RequestRecord r;
  ReduceStream({{Chunk("a"), 0.1}, {R"({"error":{"message":"engine stopped"}})", 0.2}}, true,
               Endpoint::kCompletions, &r);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("engine stopped"), std::string::npos);
}

TEST(ReduceStreamTest, NonJsonChunkFailsTheRequest) {
  RequestRecord r;
  ReduceStream({{"not json", 0.1}}, true, Endpoint::kCompletions, &r);
  EXPECT_FALSE(r.ok);
}

TEST(RequestBodyTest, AsksForUsageAndExactOutputLength) {
  ClientConfig config;
  config.model = "m";
  RequestSpec spec;
  spec.prompt = "hello";
  spec.max_tokens = 128;
  spec.ignore_eos = true;
  util::Json body = util::ParseJsonOrDiscarded(RequestBody(config, spec));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["max_tokens"], 128);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["min_tokens"], 128);
  EXPECT_EQ(body["temperature"], 0.0);
}

TEST(RequestBodyTest, ChatSendsMessages) {
  ClientConfig config;
  config.endpoint = Endpoint::kChat;
  RequestSpec spec;
  spec.messages = {{"user", "hi"}, {"assistant", "hello"}, {"user", "again"}};
  spec.stream = false;
  util::Json body = util::ParseJsonOrDiscarded(RequestBody(config, spec));
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("stream"));
  EXPECT_FALSE(body.contains("ignore_eos"));
  ASSERT_EQ(body["messages"].size(), 3u);
  EXPECT_EQ(body["messages"][1]["role"], "assistant");
}

TEST(BenchFlagsTest, ParsesLists) {
  auto c = ParsePositiveIntList("1,4,8,16");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, std::vector<int>({1, 4, 8, 16}));
  EXPECT_FALSE(ParsePositiveIntList("").ok());
  EXPECT_FALSE(ParsePositiveIntList("1,,2").ok());
  EXPECT_FALSE(ParsePositiveIntList("0").ok());
  EXPECT_FALSE(ParsePositiveIntList("4x").ok());
  auto d = ParseDoubleList("0.1,0.5");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, std::vector<double>({0.1, 0.5}));
  EXPECT_FALSE(ParseDoubleList("a").ok());
}

TEST(BenchFlagsTest, ValidationRejectsOutOfRangeValues) {
  BenchOptions o;
  EXPECT_TRUE(ValidateBenchOptions(o).ok());
  BenchOptions bad = o;
  bad.dataset = "sharegpt";
  EXPECT_FALSE(ValidateBenchOptions(bad).ok());
  bad = o;
  bad.percentiles = {50, 101};
  EXPECT_FALSE(ValidateBenchOptions(bad).ok());
  bad = o;
  bad.request_rate = 0;
  EXPECT_FALSE(ValidateBenchOptions(bad).ok());
  bad = o;
  bad.dataset = "shared-prefix";
  EXPECT_FALSE(ValidateBenchOptions(bad).ok());  // needs --prefix-len
  bad.prefix_len = 2000;
  EXPECT_TRUE(ValidateBenchOptions(bad).ok());
  bad = o;
  bad.needle_depths = {0.1, 0.2, 0.3, 0.4, 0.5};
  EXPECT_FALSE(ValidateBenchOptions(bad).ok());
}

TEST(BenchReportTest, MetricsJsonNamesPercentiles) {
  RunMetrics m;
  m.ttft_ms.percentiles = {1, 2, 3};
  util::Json j = MetricsJson(m, {50, 90, 99.9});
  EXPECT_EQ(j["ttft_ms"]["p50"], 1.0);
  EXPECT_EQ(j["ttft_ms"]["p99.9"], 3.0);
  EXPECT_TRUE(j["total_cached_tokens"].is_null());
}

TEST(BenchReportTest, RandomTableHasOneRowPerLevel) {
  RandomRun a{1, 0, {}};
  a.metrics.ttft_ms.percentiles = {1, 2, 3};
  a.metrics.tpot_ms.percentiles = {1, 2, 3};
  a.metrics.itl_ms.percentiles = {1, 2, 3};
  a.metrics.e2el_ms.percentiles = {1, 2, 3};
  RandomRun b = a;
  b.concurrency = 16;
  std::string t = RandomTable({a, b}, {50, 90, 99});
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 4);
  EXPECT_NE(t.find("TTFT p99 ms"), std::string::npos);
  EXPECT_NE(t.find("| 16 "), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::tools
