// Speculative decoding with the MTP module of tiny DeepSeek-V3 and V4 checkpoints (random weights
// from the recipes of tests/reference/make_deepseek_v{3,4}_golden.py, generated at test time):
// whatever the drafts, greedy output must equal plain greedy decoding, token for token.

#include <chrono>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

std::string CheckpointDir(const std::string& name, const std::string& family = "deepseek_v3") {
  auto dir = model::DeepseekTestCheckpoint(name, family);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

using testing::Generate;

// (golden family, case) of a checkpoint with one MTP module.
using Case = std::pair<const char*, const char*>;

class EngineSpeculativeTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto m = model::LoadModel(CheckpointDir(GetParam().second, GetParam().first));
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  std::unique_ptr<Engine> Make(int spec, int block_size = 16) {
    EngineOptions o;
    o.num_threads = 2;
    o.speculative_tokens = spec;
    o.block_size = block_size;
    o.kv_cache_tokens = 4096;
    auto e = Engine::Create(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::move(*e);
  }
  std::vector<GenerateRequest> Requests() {
    std::mt19937 rng(7);
    std::vector<GenerateRequest> rs;
    for (int len : {1, 5, 23, 40}) {
      GenerateRequest r;
      for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % model_->config.vocab));
      r.sampling.temperature = 0;
      r.max_tokens = 48;
      r.ignore_eos = true;
      rs.push_back(r);
    }
    return rs;
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(EngineSpeculativeTest, GreedyOutputIsIdenticalWithAndWithoutDrafts) {
  auto plain = Make(0);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : Requests()) want.push_back(Generate(*plain, r));
  for (int spec : {1, 3}) {
    auto engine = Make(spec, spec == 3 ? 4 : 16);  // small blocks: drafts cross block edges
    for (size_t i = 0; i < want.size(); ++i) {
      StreamUpdate fin;
      EXPECT_EQ(Generate(*engine, Requests()[i], &fin), want[i]) << "spec " << spec << " request " << i;
      EXPECT_GT(fin.num_draft_tokens, 0);
    }
    EngineStats st = engine->Stats();
    EXPECT_GT(st.spec_num_drafts, 0);
    EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
    // Per position: accepted as a prefix, so the counts never rise with the position, sum to
    // the accepted drafts, and stop at the block size.
    int64_t sum = 0;
    for (int32_t i = 0; i < kMaxSpeculativeTokens; ++i) {
      sum += st.spec_accepted_per_pos[i];
      if (i > 0) EXPECT_LE(st.spec_accepted_per_pos[i], st.spec_accepted_per_pos[i - 1]);
      if (i >= spec) EXPECT_EQ(st.spec_accepted_per_pos[i], 0);
    }
    EXPECT_EQ(sum, st.spec_num_accepted_tokens);
  }
}

TEST_P(EngineSpeculativeTest, ARequestThatOptsOutGetsNoDraftsAndTheSameTokens) {
  auto engine = Make(2);
  for (GenerateRequest r : Requests()) {
    const std::vector<int32_t> drafted = Generate(*engine, r);
    r.speculative = false;
    StreamUpdate fin;
    EXPECT_EQ(Generate(*engine, r, &fin), drafted);
    EXPECT_EQ(fin.num_draft_tokens, 0);
  }
}

TEST_P(EngineSpeculativeTest, ConcurrentMixedRequestsStayExact) {
  auto plain = Make(0);
  auto reqs = Requests();
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) want.push_back(Generate(*plain, r));
  auto engine = Make(2);
  // All at once, plus a sampled request that must not disturb the greedy ones.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(*engine->Submit(r));
  GenerateRequest sampled = reqs[2];
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 3;
  sampled.sampling.has_seed = true;
  auto s_stream = *engine->Submit(sampled);
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> got;
    StreamUpdate u;
    while (true) {
      if (!streams[i]->Wait(u, std::chrono::milliseconds(100))) continue;
      for (const auto& t : u.tokens) got.push_back(t.token);
      if (u.finish != FinishReason::kNone) break;
    }
    EXPECT_EQ(got, want[i]) << i;
  }
  StreamUpdate u;
  while (!s_stream->Wait(u, std::chrono::milliseconds(100)) || u.finish == FinishReason::kNone) {
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, EngineSpeculativeTest,
                         ::testing::Values(Case{"deepseek_v3", "v3_groups_yarn"},
                                           Case{"deepseek_v4", "v4_flash_tiny"},
                                           Case{"deepseek_v4", "v4_flash_tiny_fp8"}),
                         [](const auto& info) { return std::string(info.param.second); });

TEST(EngineSpeculativeModelTest, ModelWithoutMtpRejectsSpeculation) {
  auto m = model::LoadModel(CheckpointDir("v3_qlora"));
  ASSERT_TRUE(m.ok()) << m.status();
  EngineOptions o;
  o.speculative_tokens = 1;
  auto e = Engine::Create(**m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(ErrorCodeOf(e.status()), "speculative_unsupported");
}

}  // namespace
}  // namespace deepinfer::engine
