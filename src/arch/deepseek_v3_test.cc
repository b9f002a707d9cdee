// Parity of the DeepSeek-V3/V2 forward pass with transformers on tiny random checkpoints whose
// recipes and goldens come from tests/reference/make_deepseek_v3_golden.py (BF16 and FP8 weights
// generated at test time, transformers' float32 logits as gzipped JSON), plus self-consistency:
// absorbed decode vs expanded prefill, chunked vs one-shot prefill, batched vs single sequences,
// and the MTP module.

#include "arch/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "arch/deepseek_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using Mode = DeepseekV3Lm::AttentionMode;

std::string CheckpointDir(const std::string& name) {
  auto dir = model::DeepseekTestCheckpoint(name);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

// Tensors that do not match the config, or hold NaN, are refused when the architecture is built
// from the loaded files (arch/ validates against its schema; model/ only maps them).
void ExpectCreateError(const std::string& dir, const std::string& code) {
  auto m = model::LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  auto lm = CreateCausalLm(**m);
  ASSERT_FALSE(lm.ok());
  EXPECT_EQ(ErrorCodeOf(lm.status()), code) << lm.status();
  EXPECT_EQ(OneLineError(lm.status()).find('\n'), std::string::npos);
}

TEST(DeepseekSchemaTest, ShapeMismatchAgainstConfigIsReported) {
  model::CheckpointCopy c("v3_qlora");
  c.EditConfig("kv_lora_rank", 24);
  ExpectCreateError(c.dir(), "shape_mismatch");
  model::CheckpointCopy d("v3_qlora");
  d.EditConfig("n_routed_experts", 16);
  ExpectCreateError(d.dir(), "shape_mismatch");
}

TEST(DeepseekSchemaTest, NanInNormWeightIsReported) {
  model::CheckpointCopy c("v3_qlora");
  const size_t off = c.TensorOffset("model.safetensors", "model.layers.1.input_layernorm.weight");
  const uint16_t nan_bf16 = 0x7fc0;
  c.Patch("model.safetensors", off + 2 * 5, &nan_bf16, 2);
  ExpectCreateError(c.dir(), "nan_in_weights");
}

TEST(DeepseekSchemaTest, MissingTensorIsReported) {
  model::CheckpointCopy e("v3_qlora");
  e.EditConfig("num_hidden_layers", 3);
  ExpectCreateError(e.dir(), "missing_tensor");
}

struct Golden : testing::GoldenFiles {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<DeepseekV3Lm> lm;
};

Golden Load(const std::string& name) {
  Golden g;
  if (g.Load(model::DeepseekGoldenDir(name)) &&
      testing::LoadAndCreate(model::DeepseekTestCheckpoint(name), &CreateDeepseekV3, g.model,
                             g.lm)) {
    g.vocab = g.model->config.vocab;
  }
  return g;
}

using testing::MaxAbsDiff;
using testing::RunTokens;

class DeepseekParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekParityTest, LogitsMatchTransformersAtEveryPosition) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  const double worst = testing::ExpectTop1AtEveryPosition(*g.lm, g, GetParam(), pool);
  // f32 math on identical bf16 weights: only summation order differs.
  EXPECT_LT(worst, 1e-4) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepseekParityTest,
                         ::testing::Values("v3_qlora", "v3_qlora_fp8", "v3_direct_q",
                                           "v3_groups_yarn", "v3_groups_yarn_fp8", "v2_lite"),
                         [](const auto& info) { return std::string(info.param); });

class DeepseekConsistencyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekConsistencyTest, AbsorbedDecodeEqualsExpandedPrefill) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[3];  // 300 tokens
  const int64_t n = static_cast<int64_t>(prompt.size());
  g.lm->set_attention_mode(Mode::kExpanded);
  std::vector<float> expanded = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  g.lm->set_attention_mode(Mode::kAbsorbed);
  std::vector<float> decode = RunTokens(*g.lm, prompt, 1, pool);
  std::vector<float> absorbed_prefill = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  g.lm->set_attention_mode(Mode::kAuto);
  std::vector<float> chunked = RunTokens(*g.lm, prompt, 37, pool);
  const double d1 = MaxAbsDiff(decode.data(), expanded.data(), n * g.vocab);
  const double d2 = MaxAbsDiff(absorbed_prefill.data(), expanded.data(), n * g.vocab);
  const double d3 = MaxAbsDiff(chunked.data(), expanded.data(), n * g.vocab);
  std::printf(
      "%s: absorbed decode vs expanded prefill %.3g, absorbed prefill %.3g, "
      "chunked (37) %.3g\n",
      GetParam(), d1, d2, d3);
  EXPECT_LT(d1, 1e-4);
  EXPECT_LT(d2, 1e-4);
  EXPECT_LT(d3, 1e-4);
}

TEST_P(DeepseekConsistencyTest, BatchedSequencesEqualSingleSequences) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  testing::ExpectBatchedEqualsSingle(*g.lm, g.Prompts(), GetParam(), 1e-4, pool);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepseekConsistencyTest,
                         ::testing::Values("v3_qlora", "v3_direct_q", "v3_groups_yarn", "v2_lite"),
                         [](const auto& info) { return std::string(info.param); });

class DeepseekMtpTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekMtpTest, MtpLogitsMatchReference) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  ASSERT_EQ(g.lm->num_mtp_layers(), 1);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[g.json["mtp_prompt_index"].get<int>()];
  const int n = static_cast<int>(prompt.size());
  const std::vector<float> hidden = testing::FinalStates(*g.lm, prompt, pool);
  const float* ref = g.Ref("mtp_logits", n - 1);
  ASSERT_NE(ref, nullptr);
  // Prefill form: x_{i+1} with h_i for i = 0 .. n-2 in one call; draft form: one token at a time
  // (absorbed attention over the MTP cache).
  const std::vector<float> got = testing::MtpLogits(*g.lm, prompt, hidden.data(), false, pool);
  const std::vector<float> steps = testing::MtpLogits(*g.lm, prompt, hidden.data(), true, pool);
  const double d = MaxAbsDiff(got.data(), ref, int64_t{n - 1} * g.vocab);
  const double d_step = MaxAbsDiff(steps.data(), ref, int64_t{n - 1} * g.vocab);
  std::printf("%s: MTP max |logit diff| %.3g (prefill), %.3g (token by token)\n", GetParam(), d,
              d_step);
  EXPECT_LT(d, 1e-3);
  EXPECT_LT(d_step, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepseekMtpTest,
                         ::testing::Values("v3_groups_yarn", "v3_groups_yarn_fp8"),
                         [](const auto& info) { return std::string(info.param); });

TEST(DeepseekV3Test, CreateCausalLmDispatchesOnArchitecture) {
  auto m = model::LoadModel(CheckpointDir("v2_lite"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config.architecture, "deepseek_v2");
  auto lm = CreateCausalLm(**m);
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_EQ((*lm)->kv_floats_per_token(), 32 + 8);
}

}  // namespace
}  // namespace deepinfer::arch
