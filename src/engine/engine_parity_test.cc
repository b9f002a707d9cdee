// Parity with llama.cpp through the whole engine (scheduler, executor, sampler), as
// `deepinfer generate --numerics ggml` runs it: on the real SmolLM2-135M-Instruct Q4_1 GGUF,
// every prompt of tests/golden/llama_cpp/smollm2_greedy.json must continue exactly as llama.cpp
// did (arch/llama_gguf_parity_test.cc checks the forward pass alone, and the logits).

#include <chrono>
#include <cstdlib>
#include <fstream>
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

TEST(EngineParityTest, GgmlNumericsGreedyOutputEqualsLlamaCpp) {
  const std::string path = DefaultModelPath();
  if (!std::ifstream(path)) {
    GTEST_SKIP() << "default model not found at " << path << " (make setup)";
  }
  std::ifstream in(std::string(DI_SOURCE_DIR) + "/tests/golden/llama_cpp/smollm2_greedy.json");
  ASSERT_TRUE(in) << "golden missing: run make reference";
  const nlohmann::json golden = nlohmann::json::parse(in);
  auto m = model::LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  // What generate sets: one sequence at a time, prompts in one batch as llama.cpp evaluates
  // them. No prefix caching: a hit would change how a prompt is batched.
  EngineOptions o;
  o.num_threads = 2;
  o.max_num_seqs = 1;
  o.prefill_budget = 512;
  o.kv_cache_tokens = 4096;
  o.enable_prefix_caching = false;
  o.numerics = arch::Numerics::kGgml;
  auto engine = Engine::Create(**m, o);
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

}  // namespace
}  // namespace deepinfer::engine
