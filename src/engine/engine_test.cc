// End-to-end engine tests on the real stories260K weights: greedy output equals the llama2.c
// reference whatever the batching, prefix caching, preemption or cancellation around it.

#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

const std::string kModelDir = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenEvent> events;  // the tokens with their logprobs
  std::vector<TokenEvent> prompt_logprobs;
  bool prompt_logprobs_before_tokens = true;
  StreamUpdate final;
};

Result Drain(RequestStream& stream) {
  Result r;
  StreamUpdate u;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!stream.Wait(u, std::chrono::milliseconds(100))) continue;
    if (!u.prompt_logprobs.empty()) {
      r.prompt_logprobs_before_tokens = r.tokens.empty();
      r.prompt_logprobs = u.prompt_logprobs;
    }
    for (const auto& t : u.tokens) {
      r.tokens.push_back(t.token);
      r.events.push_back(t);
    }
    if (u.finish != FinishReason::kNone) {
      r.final = u;
      return r;
    }
  }
  ADD_FAILURE() << "stream did not finish";
  return r;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(kModelDir + "/golden_greedy.json");
    if (!in) GTEST_SKIP() << "stories260K not found at " << kModelDir << " (../shared/models)";
    auto golden = nlohmann::json::parse(in);
    for (const auto& c : golden["cases"]) {
      auto seq = c["input_token_sequence"].get<std::vector<int32_t>>();
      seq.push_back(c["final_argmax_next"].get<int32_t>());
      // The prompt ends where the reference starts predicting: from there on every token is
      // the argmax of the position before it.
      const auto& top5 = c["per_position_top5_logits"];
      int prompt_len = static_cast<int>(seq.size()) - 1;
      while (prompt_len > 1 && top5[prompt_len - 2][0][0].get<int32_t>() == seq[prompt_len - 1]) {
        --prompt_len;
      }
      sequences_.push_back(seq);
      prompt_lens_.push_back(prompt_len);
    }
    auto m = model::LoadModel(kModelDir + "/stories260K.bin", kModelDir + "/tok512.bin");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }

  std::unique_ptr<Engine> MakeEngine(EngineOptions opt = {}) {
    opt.num_threads = 2;
    auto e = Engine::Create(*model_, opt);
    EXPECT_TRUE(e.ok()) << e.status();
    while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::move(*e);
  }

  int PromptLen(const std::vector<int32_t>& seq) {
    for (size_t i = 0; i < sequences_.size(); ++i) {
      if (sequences_[i] == seq) return prompt_lens_[i];
    }
    return 1;
  }

  GenerateRequest Greedy(const std::vector<int32_t>& seq) {
    GenerateRequest r;
    int n = PromptLen(seq);
    r.prompt.assign(seq.begin(), seq.begin() + n);
    r.sampling.temperature = 0;
    r.max_tokens = static_cast<int32_t>(seq.size()) - n;
    return r;
  }

  std::vector<int32_t> Expected(const std::vector<int32_t>& seq) {
    return std::vector<int32_t>(seq.begin() + PromptLen(seq), seq.end());
  }

  std::vector<std::vector<int32_t>> sequences_;
  std::vector<int> prompt_lens_;
  std::unique_ptr<model::Model> model_;
};

TEST_F(EngineTest, GreedyOutputEqualsTheReference) {
  auto engine = MakeEngine();
  auto stream = engine->Submit(Greedy(sequences_[0]));
  ASSERT_TRUE(stream.ok());
  Result r = Drain(**stream);
  EXPECT_EQ(r.tokens, Expected(sequences_[0]));
  EXPECT_EQ(r.final.finish, FinishReason::kLength);
  EXPECT_EQ(r.final.prompt_tokens, PromptLen(sequences_[0]));
  EXPECT_EQ(r.final.completion_tokens, static_cast<int32_t>(r.tokens.size()));
}

// min_tokens (vLLM) holds back the stop tokens: a request that would stop on its first token
// generates at least min_tokens, none of them a stop token, then may stop.
TEST_F(EngineTest, MinTokensHoldsBackStopTokensUntilReached) {
  auto engine = MakeEngine();
  const std::vector<int32_t> want = Expected(sequences_[0]);
  ASSERT_GE(want.size(), 4u);
  GenerateRequest r = Greedy(sequences_[0]);
  r.max_tokens = 12;
  r.stop_token_ids = {want[0]};  // greedy decoding's first token stops it at once
  auto stopped = engine->Submit(r);
  ASSERT_TRUE(stopped.ok());
  Result plain = Drain(**stopped);
  EXPECT_TRUE(plain.tokens.empty());
  EXPECT_EQ(plain.final.finish, FinishReason::kStop);
  r.min_tokens = 3;
  auto held = engine->Submit(r);
  ASSERT_TRUE(held.ok());
  Result got = Drain(**held);
  ASSERT_GE(got.tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(got.tokens[i], want[0]) << i;
  for (int32_t id : model_->tokenizer.eog_ids) {
    for (size_t i = 0; i < 3; ++i) EXPECT_NE(got.tokens[i], id) << i;
  }
}

TEST_F(EngineTest, ConcurrentRequestsMatchTheirSoloOutputs) {
  EngineOptions opt;
  opt.prefill_budget = 9;  // forces chunked prefill mixed with decodes
  auto engine = MakeEngine(opt);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int rep = 0; rep < 3; ++rep) {
    for (const auto& seq : sequences_) streams.push_back(*engine->Submit(Greedy(seq)));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(Drain(*streams[i]).tokens, Expected(sequences_[i % sequences_.size()])) << i;
  }
}

// A 16-bit KV cache (f32 weights here, so only the cache's rounding differs): the greedy
// reference continuation is unchanged, and batching with chunked prefills still gives each
// request exactly its solo output.
TEST_F(EngineTest, SixteenBitKvCacheKeepsTheReferenceGreedyOutputWhenBatched) {
  for (kernels::KvDtype dtype : {kernels::KvDtype::kF16, kernels::KvDtype::kBF16}) {
    SCOPED_TRACE(kernels::KvDtypeName(dtype));
    EngineOptions opt;
    opt.kv_cache_dtype = dtype;
    auto solo_engine = MakeEngine(opt);
    std::vector<std::vector<int32_t>> solo;
    for (const auto& seq : sequences_) {
      solo.push_back(Drain(**solo_engine->Submit(Greedy(seq))).tokens);
      EXPECT_EQ(solo.back(), Expected(seq));
    }
    opt.prefill_budget = 9;
    auto engine = MakeEngine(opt);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int rep = 0; rep < 2; ++rep) {
      for (const auto& seq : sequences_) streams.push_back(*engine->Submit(Greedy(seq)));
    }
    for (size_t i = 0; i < streams.size(); ++i)
      EXPECT_EQ(Drain(*streams[i]).tokens, solo[i % solo.size()]) << i;
  }
}

TEST_F(EngineTest, SixteenBitKvCacheWithGgmlNumericsIsRefusedAtStart) {
  EngineOptions opt;
  opt.numerics = arch::Numerics::kGgml;
  opt.kv_cache_dtype = kernels::KvDtype::kF16;
  auto e = Engine::Create(*model_, opt);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(ErrorCodeOf(e.status()), "unsupported_kv_cache_dtype");
  EXPECT_NE(e.status().message().find("--kv-cache-dtype f16"), std::string::npos)
      << e.status();
}

TEST_F(EngineTest, RepeatedPrefixReportsCachedTokens) {
  auto engine = MakeEngine();
  GenerateRequest r = Greedy(sequences_[0]);
  r.prompt.assign(sequences_[0].begin(), sequences_[0].begin() + 40);
  r.max_tokens = 4;
  Result first = Drain(**engine->Submit(r));
  EXPECT_EQ(first.final.cached_tokens, 0);
  Result second = Drain(**engine->Submit(r));
  EXPECT_EQ(second.final.cached_tokens, 32);  // two full 16-token blocks; the last is recomputed
  EXPECT_EQ(second.tokens, first.tokens);
  EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.prefix_cache_hits, 32);
}

TEST_F(EngineTest, TinyKvCachePreemptsWithoutChangingOutput) {
  EngineOptions opt;
  opt.kv_cache_tokens = 272;  // 17 blocks: the 257-token case alone nearly fills it
  opt.block_size = 16;
  auto engine = MakeEngine(opt);
  // Two copies of the 257-token case need 34 blocks together, so someone must be preempted.
  std::vector<std::vector<int32_t>> work = sequences_;
  work.push_back(sequences_[1]);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& seq : work) streams.push_back(*engine->Submit(Greedy(seq)));
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(Drain(*streams[i]).tokens, Expected(work[i])) << i;
  }
  // Stats are published after each step, so the last step's counters may land a moment later.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (engine->Stats().num_preemptions == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(engine->Stats().num_preemptions, 0);
}

TEST_F(EngineTest, CancelFreesTheSequenceAndTheNextRequestSucceeds) {
  auto engine = MakeEngine();
  GenerateRequest r = Greedy(sequences_[0]);
  r.max_tokens = 400;
  r.ignore_eos = true;
  auto stream = *engine->Submit(r);
  StreamUpdate u;
  while (!stream->Wait(u, std::chrono::milliseconds(100)) || u.tokens.empty()) {
  }
  stream->Cancel();
  Result rest = Drain(*stream);
  EXPECT_EQ(rest.final.finish, FinishReason::kCancelled);
  Result next = Drain(**engine->Submit(Greedy(sequences_[1])));
  EXPECT_EQ(next.tokens, Expected(sequences_[1]));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (engine->Stats().num_running > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine->Stats().num_running, 0);
}

TEST_F(EngineTest, RejectsRequestsOverTheContextWindow) {
  EngineOptions opt;
  opt.max_model_len = 64;
  auto engine = MakeEngine(opt);
  GenerateRequest r = Greedy(sequences_[0]);
  r.max_tokens = 64;
  auto s = engine->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ErrorCodeOf(s.status()), "context_length_exceeded");
  r.prompt = {1, 9999};
  r.max_tokens = 1;
  EXPECT_EQ(ErrorCodeOf(engine->Submit(r).status()), "invalid_token");
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto engine = MakeEngine();
  GenerateRequest r = Greedy(sequences_[0]);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 77;
  r.sampling.has_seed = true;
  r.max_tokens = 30;
  r.ignore_eos = true;
  auto a = Drain(**engine->Submit(r));
  auto b = Drain(**engine->Submit(r));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 30u);
}

// Anthropic's thinking.budget_tokens: the engine forces the reasoning block's end token once the
// budget is spent, and nothing else changes; a budget the output never reaches changes nothing.
// Prompt logprobs score a prompt as decoding would have: the greedy continuation, scored as part
// of a longer prompt, gets the logprobs (and top entries) it was generated with, in chunks or
// whole, alone or batched, with the prefix cache holding the prompt or not; they come before the
// first token, and max_tokens 0 generates nothing.
TEST_F(EngineTest, PromptLogprobsEqualTheLogprobsDecodingReported) {
  for (int32_t budget : {9, 2048}) {
    EngineOptions opt;
    opt.prefill_budget = budget;
    auto engine = MakeEngine(opt);
    const std::vector<int32_t>& seq = sequences_[0];
    const int32_t n = PromptLen(seq);
    GenerateRequest decode = Greedy(seq);
    decode.sampling.num_top_logprobs = 3;
    const Result decoded = Drain(**engine->Submit(decode));
    ASSERT_EQ(decoded.tokens, Expected(seq));
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second time the cache holds the prompt
      GenerateRequest score;
      score.prompt = seq;
      score.prompt.pop_back();
      score.max_tokens = repeat == 0 ? 0 : 2;
      score.sampling.temperature = 0;
      score.prompt_logprobs = 3;
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < 3; ++i) streams.push_back(*engine->Submit(score));  // batched
      for (auto& stream : streams) {
        const Result scored = Drain(*stream);
        EXPECT_TRUE(scored.prompt_logprobs_before_tokens);
        EXPECT_EQ(scored.tokens.size(), static_cast<size_t>(score.max_tokens));
        EXPECT_EQ(scored.final.cached_tokens, 0);
        ASSERT_EQ(scored.prompt_logprobs.size(), score.prompt.size() - 1);
        for (size_t i = 0; i + 1 < score.prompt.size(); ++i) {
          EXPECT_EQ(scored.prompt_logprobs[i].token, score.prompt[i + 1]);
          EXPECT_EQ(scored.prompt_logprobs[i].top_logprobs.size(), 3u);
          EXPECT_LE(scored.prompt_logprobs[i].logprob, 0.0f);
        }
        for (size_t k = 0; k + 1 < decoded.events.size(); ++k) {
          const TokenEvent& want = decoded.events[k];
          const TokenEvent& got = scored.prompt_logprobs[static_cast<size_t>(n) - 1 + k];
          EXPECT_EQ(got.token, want.token) << k;
          EXPECT_NEAR(got.logprob, want.logprob, 1e-3) << k;
          ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
          for (size_t j = 0; j < want.top_logprobs.size(); ++j) {
            EXPECT_EQ(got.top_logprobs[j].first, want.top_logprobs[j].first) << k << " " << j;
            EXPECT_NEAR(got.top_logprobs[j].second, want.top_logprobs[j].second, 1e-3);
          }
        }
      }
    }
  }
  GenerateRequest zero = Greedy(sequences_[0]);
  zero.max_tokens = 0;  // without prompt logprobs it asks for nothing
  auto engine = MakeEngine();
  EXPECT_FALSE(engine->Submit(zero).ok());
}

TEST_F(EngineTest, ReasoningBudgetForcesTheEndTokenAtTheBudget) {
  auto engine = MakeEngine();
  const std::vector<int32_t> reference = Expected(sequences_[0]);
  ASSERT_GE(reference.size(), 6u);
  // An end token the reference does not produce in its first tokens, so forcing is visible.
  int32_t end = 0;
  while (std::find(reference.begin(), reference.end(), end) != reference.end()) ++end;
  for (int32_t budget : {0, 1, 4}) {
    GenerateRequest r = Greedy(sequences_[0]);
    r.reasoning_budget = budget;
    r.reasoning_end_token = end;
    r.speculative = true;  // a budget turns drafts off by itself
    Result got = Drain(**engine->Submit(r));
    ASSERT_GT(got.tokens.size(), static_cast<size_t>(budget)) << budget;
    EXPECT_EQ(std::vector<int32_t>(got.tokens.begin(), got.tokens.begin() + budget),
              std::vector<int32_t>(reference.begin(), reference.begin() + budget))
        << budget;
    EXPECT_EQ(got.tokens[static_cast<size_t>(budget)], end) << budget;
    // Once closed, the budget is spent: no second forced token.
    EXPECT_EQ(std::count(got.tokens.begin(), got.tokens.end(), end), 1) << budget;
  }
  GenerateRequest unbound = Greedy(sequences_[0]);
  unbound.reasoning_budget = static_cast<int32_t>(reference.size()) + 5;
  unbound.reasoning_end_token = end;
  EXPECT_EQ(Drain(**engine->Submit(unbound)).tokens, reference);
}

}  // namespace
}  // namespace deepinfer::engine
