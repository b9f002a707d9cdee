// Parity of the DeepSeek-V4.1 forward pass with the reference modeling code (transformers'
// deepseek_v41 at commit 0a2080b4) on the tiny random checkpoints of
// ../shared/goldens/deepseek_v41 (weights written at test time from their recipes), and
// self-consistency: chunked prefill (1, 2, 7, 128), prefix-cache hits and batching give the
// logits of one full prefill. Skips with a message when ../shared is absent (a user's clone).

#include "arch/deepseek_v41.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "arch/deepseek_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using testing::ArgMax;
using testing::MaxAbsDiff;
using testing::RunTokens;

std::string GoldenDir(const std::string& name) {
  return std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41/" + name;
}

struct Golden : testing::GoldenFiles {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<CausalLm> lm;
};

// Loads a case, or skips the test when ../shared is not there.
#define LOAD_OR_SKIP(g, name)                                                                \
  if (!std::filesystem::exists(GoldenDir(name))) {                                           \
    GTEST_SKIP() << "../shared/goldens/deepseek_v41 is absent (a user's clone has none)";    \
  }                                                                                          \
  Golden g = Load(name);                                                                     \
  ASSERT_TRUE(g.lm)

Golden Load(const std::string& name) {
  Golden g;
  if (!g.Load(GoldenDir(name))) return g;
  auto dir = model::SyntheticCheckpoint(GoldenDir(name),
                                        std::string(DI_TESTDATA_DIR) + "/deepseek_v41");
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (!dir.ok()) return g;
  auto m = model::LoadModel(*dir);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return g;
  g.model = std::move(*m);
  auto lm = CreateCausalLm(*g.model);
  EXPECT_TRUE(lm.ok()) << lm.status();
  if (lm.ok()) g.lm = std::move(*lm);
  return g;
}

TEST(DeepseekV41ParityTest, NoQatCaseMatchesTheReferenceTightly) {
  LOAD_OR_SKIP(g, "v41_noengram_noqat");
  EXPECT_EQ(g.model->config.architecture, "deepseek_v41");
  util::ThreadPool pool(2);
  double worst = 0;
  for (const auto& prompt : g.Prompts()) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    const float* ref = g.Ref("logits_" + std::to_string(n), n);
    ASSERT_NE(ref, nullptr);
    const std::vector<float> got = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
    const double diff = MaxAbsDiff(got.data(), ref, n * g.vocab);
    int agree = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int want = ArgMax(ref + t * g.vocab, g.vocab);
      const int have = ArgMax(got.data() + t * g.vocab, g.vocab);
      agree += want == have;
      EXPECT_EQ(want, have) << "prompt " << n << " position " << t;
    }
    std::printf("parity v41_noengram_noqat %3lld tokens: max |logit diff| %.3g, top-1 %d/%lld\n",
                static_cast<long long>(n), diff, agree, static_cast<long long>(n));
    worst = std::max(worst, diff);
  }
  EXPECT_LT(worst, 1e-4);  // the README's bound for the case without fake quantization
}

TEST(DeepseekV41ConsistencyTest, ChunksPrefixHitsAndBatchingChangeNothing) {
  LOAD_OR_SKIP(g, "v41_noengram_noqat");
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts().back();  // 300 tokens
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::vector<float> full = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  for (int chunk : {1, 2, 7, 128}) {
    const std::vector<float> got = RunTokens(*g.lm, prompt, chunk, pool);
    EXPECT_EQ(MaxAbsDiff(got.data(), full.data(), n * g.vocab), 0.0) << "chunk " << chunk;
  }
  const auto [dc, da, db] = testing::BatchedVsSingle(*g.lm, g.Prompts(), pool);
  EXPECT_EQ(dc, 0.0);
  EXPECT_EQ(da, 0.0);
  EXPECT_EQ(db, 0.0);
}

}  // namespace
}  // namespace deepinfer::arch
