// The window cache (arch::KvLayout) through the engine, on the tiny DeepSeek-V4.1 checkpoint with
// Engram and QAT (../shared/goldens/deepseek_v41/v41_full; weights written at test time): window
// blocks released behind each sequence, prefix-cache hits that restore the window in front of
// them or are shortened when it was evicted, and a batch of eight: every greedy token equals a
// run of the request alone with the prefix cache off. Skips when ../shared is absent.

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint.h"
#include "nlohmann/json.hpp"

namespace deepinfer::engine {
namespace {

using testing::Generate;

const std::string kCase = std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41/v41_full";

class EngineWindowCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kCase)) {
      GTEST_SKIP() << "../shared/goldens/deepseek_v41 is absent (a user's clone has none)";
    }
    auto dir = model::SyntheticCheckpoint(kCase, std::string(DI_TESTDATA_DIR) + "/deepseek_v41");
    ASSERT_TRUE(dir.ok()) << dir.status();
    auto m = model::LoadModel(*dir);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    std::ifstream in(kCase + "/golden.json");
    const auto golden = nlohmann::json::parse(in);
    model_->engram_token_classes = golden["engram"]["token_map"].get<std::vector<int32_t>>();
    prompt_ = golden["prompts"].back().get<std::vector<int32_t>>();  // 300 tokens
  }
  std::unique_ptr<Engine> Make(bool prefix_caching, int max_num_seqs = 8, int budget = 2048) {
    EngineOptions o;
    o.num_threads = 2;
    o.kv_cache_tokens = 8192;
    o.max_num_seqs = max_num_seqs;
    o.prefill_budget = budget;
    o.enable_prefix_caching = prefix_caching;
    auto e = Engine::Create(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return nullptr;
    while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::move(*e);
  }
  GenerateRequest Request(int prompt_len, int offset = 0) const {
    GenerateRequest r;
    r.prompt.assign(prompt_.begin() + offset, prompt_.begin() + offset + prompt_len);
    r.sampling.temperature = 0;
    r.max_tokens = 8;
    r.ignore_eos = true;
    return r;
  }
  std::unique_ptr<model::Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(EngineWindowCacheTest, HasAWindowCacheOfAFewBlocksPerSequence) {
  auto e = Make(true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kv_window_tokens(), 8);  // the case's sliding window
  EXPECT_GT(e->kv_window_cache_bytes(), 0);
  // Per token only the sources' entries with index keys (64 + 32 floats per entry: layers 2 and
  // 4 at ratio 2, layer 6 at ratio 1) and the token's class.
  EXPECT_EQ(e->kv_bytes_per_token(), (48 + 48 + 96 + 1) * 4);
}

TEST_F(EngineWindowCacheTest, PrefixHitsRestoreTheWindowAndChangeNothing) {
  auto plain = Make(false);
  auto cached = Make(true);
  ASSERT_TRUE(plain && cached);
  for (int len : {200, 300}) {
    const std::vector<int32_t> want = Generate(*plain, Request(len));
    StreamUpdate first, again;
    EXPECT_EQ(Generate(*cached, Request(len), &first), want) << len;
    EXPECT_EQ(Generate(*cached, Request(len), &again), want) << len;
    EXPECT_EQ(again.cached_tokens, (len - 1) / 16 * 16) << len;
  }
}

TEST_F(EngineWindowCacheTest, AnEvictedWindowShortensTheHitAndChangesNothing) {
  // One sequence at a time and 16-token steps: the window pool holds 2 x (1 x 3 + 1) blocks, so
  // other prompts evict the first one's window blocks while its main blocks stay cached.
  auto plain = Make(false, 1, 16);
  auto cached = Make(true, 1, 16);
  ASSERT_TRUE(plain && cached);
  const std::vector<int32_t> want = Generate(*plain, Request(300));
  EXPECT_EQ(Generate(*cached, Request(300)), want);
  for (int i = 0; i < 3; ++i) Generate(*cached, Request(64, 100 + 50 * i));
  StreamUpdate again;
  EXPECT_EQ(Generate(*cached, Request(300), &again), want);
  EXPECT_LT(again.cached_tokens, 288);
  EXPECT_EQ(again.cached_tokens % 16, 0);
}

TEST_F(EngineWindowCacheTest, EightConcurrentSequencesEqualEachAlone) {
  auto plain = Make(false);
  auto batched = Make(true);
  ASSERT_TRUE(plain && batched);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(Request(9 + 31 * i, i));
  std::vector<std::vector<int32_t>> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] { got[i] = Generate(*batched, requests[i]); });
  }
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i], Generate(*plain, requests[i])) << "request " << i;
  }
}

}  // namespace
}  // namespace deepinfer::engine
