#include "api/serve.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

TEST(ServeTest, DefaultServedNameIsTheFileNameWithoutItsExtension) {
  EXPECT_EQ(DefaultServedName("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(DefaultServedName("/ckpt/DeepSeek-V3"), "DeepSeek-V3");
  EXPECT_EQ(DefaultServedName(".hidden"), ".hidden");
  EXPECT_EQ(DefaultServedName("dir/"), "model");
  EXPECT_EQ(DefaultServedName(""), "model");
}

TEST(ServeTest, StatsLineGivesRatesOverTheIntervalAndTheStateNow) {
  engine::EngineStats a, b;
  a.prefill_tokens = 100;
  a.generation_tokens = 10;
  a.prefix_cache_queries = 50;
  a.prefix_cache_hits = 0;
  b = a;
  b.prefill_tokens = 300;    // 200 computed in 2 s
  b.generation_tokens = 50;  // 40 in 2 s
  b.prefix_cache_queries = 150;
  b.prefix_cache_hits = 25;  // 25 of 100
  b.num_running = 3;
  b.num_waiting = 1;
  b.kv_cache_usage = 0.5;
  EXPECT_EQ(EngineStatsLine(a, b, 2.0),
            "stats running=3 waiting=1 kv_cache=50.0% prompt_tok_s=100.0 generation_tok_s=20.0 "
            "prefix_cache_hit=25.0% preemptions=0");
  b.spec_num_draft_tokens = 10;
  b.spec_num_accepted_tokens = 7;
  b.spec_num_drafts = 4;  // 7 accepted in 4 verification steps: 2.75 tokens per step
  const std::string line = EngineStatsLine(a, b, 2.0);
  EXPECT_EQ(line.substr(line.find(" spec_")),
            " spec_acceptance=70.0% spec_acceptance_length=2.75");
}

TEST(ServeTest, StatsLineIsEmptyWhenIdle) {
  engine::EngineStats a;
  EXPECT_EQ(EngineStatsLine(a, a, 10.0), "");
  engine::EngineStats b;
  b.num_waiting = 1;
  EXPECT_NE(EngineStatsLine(a, b, 10.0), "");
  EXPECT_EQ(EngineStatsLine(a, b, 0.0), "");
}

TEST(ServeTest, DefaultModelPathSaysHowToFetchAMissingModel) {
  const char* old = std::getenv("DEEPINFER_CACHE");
  const std::string saved = old ? old : "";
  ::setenv("DEEPINFER_CACHE", "/nonexistent-deepinfer-cache", 1);
  absl::StatusOr<std::string> path = DefaultModelPath();
  if (old) {
    ::setenv("DEEPINFER_CACHE", saved.c_str(), 1);
  } else {
    ::unsetenv("DEEPINFER_CACHE");
  }
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(path.status().message().find("fetch_model.sh"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::api
