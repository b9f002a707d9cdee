// Parity with llama.cpp through the whole engine (scheduler, executor, sampler), as
// `deepinfer generate --numerics ggml` runs it: on the real SmolLM2-135M-Instruct Q4_1 GGUF,
// every prompt of tests/golden/llama_cpp/smollm2_greedy.json must continue exactly as llama.cpp
// did (arch/llama_gguf_parity_test.cc checks the forward pass alone, and the logits).

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace deepinfer::engine {
namespace {

std::string DefaultModelPath() {
  const char* cache = std::getenv("DEEPINFER_CACHE");
  const char* home = std::getenv("HOME");
  std::string dir = cache ? cache : std::string(home ? home : "") + "/.cache/deepinfer";
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::vector<int32_t> Drain(RequestStream& stream) {
  std::vector<int32_t> out;
  StreamUpdate u;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!stream.Wait(u, std::chrono::milliseconds(100))) continue;
    for (const auto& t : u.tokens) out.push_back(t.token);
    if (u.finish != FinishReason::kNone) return out;
  }
  ADD_FAILURE() << "stream did not finish";
  return out;
}

// Loads the default SmolLM2 GGUF and llama.cpp's golden for it; skips without the model.
class EngineParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = DefaultModelPath();
    if (!std::ifstream(path)) {
      GTEST_SKIP() << "default model not found at " << path << " (make setup)";
    }
    std::ifstream in(std::string(DI_SOURCE_DIR) + "/tests/golden/llama_cpp/smollm2_greedy.json");
    ASSERT_TRUE(in) << "golden missing: run make reference";
    golden = nlohmann::json::parse(in);
    auto loaded = model::LoadModel(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    m = std::move(*loaded);
  }

  nlohmann::json golden;
  std::unique_ptr<model::Model> m;
};

TEST_F(EngineParityTest, GgmlNumericsGreedyOutputEqualsLlamaCpp) {
  // What generate sets: one sequence at a time, prompts in one batch as llama.cpp evaluates
  // them. No prefix caching: a hit would change how a prompt is batched.
  EngineOptions o;
  o.num_threads = 2;
  o.max_num_seqs = 1;
  o.prefill_budget = 512;
  o.kv_cache_tokens = 4096;
  o.enable_prefix_caching = false;
  o.numerics = arch::Numerics::kGgml;
  auto engine = Engine::Create(*m, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& c : golden["cases"]) {
    GenerateRequest r;
    r.prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    r.sampling.temperature = 0;
    r.max_tokens = static_cast<int32_t>(c["greedy_ids"].size());
    r.ignore_eos = true;
    auto s = (*engine)->Submit(std::move(r));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto& c = golden["cases"][i];
    EXPECT_EQ(Drain(*streams[i]), c["greedy_ids"].get<std::vector<int32_t>>())
        << "prompt \"" << c["text"].get<std::string>() << "\"";
  }
}

// Prompt logprobs (completions echo with logprobs) against llama.cpp: each golden prompt
// followed by llama.cpp's greedy tokens, scored as one prompt with max_tokens 0. At every
// generated position the scored token is llama.cpp's greedy one, the top entries are its top
// logits in order wherever llama.cpp is decisive, and logprob differences equal its logit
// differences within the golden's own f16-vs-f32 KV spread (a softmax keeps differences).
TEST_F(EngineParityTest, PromptLogprobsFollowLlamaCppTeacherForced) {
  EngineOptions o;
  o.num_threads = 2;
  o.prefill_budget = 64;  // several chunks per prompt
  o.kv_cache_tokens = 4096;
  o.numerics = arch::Numerics::kGgml;
  auto engine = Engine::Create(*m, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  constexpr int32_t kTop = 5;
  for (int repeat = 0; repeat < 2; ++repeat) {  // the second time the prefix cache holds it
    for (const auto& c : golden["cases"]) {
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
      GenerateRequest r;
      r.prompt = prompt;
      r.prompt.insert(r.prompt.end(), greedy.begin(), greedy.end() - 1);
      r.max_tokens = 0;
      r.prompt_logprobs = kTop;
      const size_t scored = r.prompt.size() - 1;
      auto s = (*engine)->Submit(std::move(r));
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<TokenEvent> entries;
      StreamUpdate u;
      int32_t completion_tokens = -1;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (std::chrono::steady_clock::now() < deadline) {
        if (!(*s)->Wait(u, std::chrono::milliseconds(100))) continue;
        EXPECT_TRUE(u.tokens.empty());
        if (!u.prompt_logprobs.empty()) entries = u.prompt_logprobs;
        if (u.finish != FinishReason::kNone) {
          EXPECT_EQ(u.finish, FinishReason::kLength);
          EXPECT_EQ(u.cached_tokens, 0);  // scoring computes the whole prompt
          completion_tokens = u.completion_tokens;
          break;
        }
      }
      EXPECT_EQ(completion_tokens, 0);
      ASSERT_EQ(entries.size(), scored);
      const double tie = c["f16_kv_max_abs_diff"].get<double>();
      // The prompt holds greedy[0 .. n-2]; entry p-1 scores the token at position p.
      for (size_t i = 0; i + 1 < greedy.size(); ++i) {
        const TokenEvent& e = entries[prompt.size() - 1 + i];
        const auto& top = c["top_logits"][i];
        EXPECT_EQ(e.token, greedy[i]);
        ASSERT_EQ(e.top_logprobs.size(), static_cast<size_t>(kTop));
        const double margin = top[0][1].get<double>() - top[1][1].get<double>();
        if (margin > tie) {
          EXPECT_EQ(e.top_logprobs[0].first, greedy[i]) << i;
          EXPECT_FLOAT_EQ(e.logprob, e.top_logprobs[0].second) << i;
        }
        for (const auto& [token, logprob] : e.top_logprobs) {
          for (const auto& g : top) {
            if (g[0].get<int32_t>() != token) continue;
            const double ours = logprob - e.top_logprobs[0].second;
            const double theirs = g[1].get<double>() - top[0][1].get<double>();
            EXPECT_NEAR(ours, theirs, tie) << "position " << i << " token " << token;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::engine
