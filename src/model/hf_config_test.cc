#include "model/hf_config.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "util/status.h"

namespace deepinfer::model {
namespace {

// The DeepSeek-V3 (671B) config.json, less its auto_map and quantization_config.
constexpr char kDeepseekV3Config[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280})";

TEST(HfConfigTest, ParsesDeepseekV3Config) {
  auto c = ParseHfConfig(kDeepseekV3Config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "deepseek_v3");
  EXPECT_EQ(c->num_layers, 61);
  EXPECT_EQ(c->hidden, 7168);
  EXPECT_EQ(c->head_dim, 192);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->vocab, 129280);
  ASSERT_TRUE(c->deepseek.has_value());
  const DeepseekConfig& d = *c->deepseek;
  EXPECT_EQ(d.q_lora_rank, 1536);
  EXPECT_EQ(d.kv_lora_rank, 512);
  EXPECT_EQ(d.n_routed_experts, 256);
  EXPECT_EQ(d.num_experts_per_tok, 8);
  EXPECT_EQ(d.n_group, 8);
  EXPECT_EQ(d.topk_group, 4);
  EXPECT_FLOAT_EQ(d.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(d.norm_topk_prob);
  EXPECT_EQ(d.scoring_func, "sigmoid");
  EXPECT_EQ(d.num_nextn_predict_layers, 1);
  EXPECT_FALSE(d.IsMoeLayer(2));
  EXPECT_TRUE(d.IsMoeLayer(3));
  ASSERT_TRUE(d.yarn.has_value());
  EXPECT_FLOAT_EQ(d.yarn->factor, 40.0f);
  EXPECT_EQ(d.yarn->original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(d.yarn->mscale_all_dim, 1.0f);
}

std::string WithKey(const std::string& json, const std::string& key, const nlohmann::json& v) {
  auto j = nlohmann::json::parse(json);
  if (v.is_discarded()) {
    j.erase(key);
  } else {
    j[key] = v;
  }
  return j.dump();
}

TEST(HfConfigTest, NullQLoraRankSelectsDirectQProjection) {
  auto c = ParseHfConfig(WithKey(kDeepseekV3Config, "q_lora_rank", nullptr));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->deepseek->q_lora_rank, 0);
}

TEST(HfConfigTest, ReadsTransformers5RopeParameters) {
  auto j = nlohmann::json::parse(kDeepseekV3Config);
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", 50000.0},
                          {"factor", 8.0},
                          {"original_max_position_embeddings", 4096}};
  auto c = ParseHfConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_theta, 50000.0f);
  ASSERT_TRUE(c->deepseek->yarn.has_value());
  EXPECT_FLOAT_EQ(c->deepseek->yarn->factor, 8.0f);
  EXPECT_FLOAT_EQ(c->deepseek->yarn->mscale, 0.0f);  // absent
}

TEST(HfConfigTest, RejectsUnsupportedValuesWithStableCodes) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "hash"},
      {"model_type", "llama"},
      {"hidden_act", "gelu"},
      {"attention_bias", true},
      {"n_group", 7},
      {"rope_scaling", {{"type", "longrope"}, {"factor", 2.0}}},
  };
  for (const auto& [key, value] : cases) {
    auto c = ParseHfConfig(WithKey(kDeepseekV3Config, key, value));
    EXPECT_EQ(ErrorCodeOf(c.status()), "unsupported_config") << key << " = " << value;
  }
}

TEST(HfConfigTest, RejectsMalformedConfigAsBadConfig) {
  EXPECT_EQ(ErrorCodeOf(ParseHfConfig("{").status()), "bad_config");
  EXPECT_EQ(ErrorCodeOf(ParseHfConfig("[]").status()), "bad_config");
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"hidden_size", nlohmann::json::value_t::discarded},
      {"hidden_size", "7168"},
      {"kv_lora_rank", -1},
      {"q_lora_rank", nlohmann::json::value_t::discarded},
      {"rms_norm_eps", -1.0},
      {"qk_rope_head_dim", 63},
  };
  for (const auto& [key, value] : cases) {
    nlohmann::json v =
        value.is_discarded() ? nlohmann::json(nlohmann::json::value_t::discarded) : value;
    auto c = ParseHfConfig(WithKey(kDeepseekV3Config, key, v));
    EXPECT_EQ(ErrorCodeOf(c.status()), "bad_config") << key;
  }
}

// Found by safetensors_fuzz: qk_nope_head_dim 2^31-1 overflowed the int sum head_dim =
// qk_nope + qk_rope (undefined behavior; the shape checks add more such sums).
TEST(HfConfigTest, RejectsSizesWhoseSumsWouldOverflow) {
  for (const char* key : {"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank",
                          "num_attention_heads", "num_hidden_layers", "hidden_size"}) {
    auto c = ParseHfConfig(WithKey(kDeepseekV3Config, key, 2147483646));
    EXPECT_EQ(ErrorCodeOf(c.status()), "bad_config") << key;
  }
  auto c = ParseHfConfig(WithKey(kDeepseekV3Config, "qk_nope_head_dim", 1 << 24));
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(HfConfigTest, ReadsFp8BlocksAndSpecialIds) {
  auto j = nlohmann::json::parse(kDeepseekV3Config);
  auto plain = ParseHfCheckpointConfig(j.dump(), "config.json");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->fp8.rows, 128);  // the default, with no quantization_config
  EXPECT_EQ(plain->fp8.cols, 128);
  EXPECT_EQ(plain->bos_id, 0);
  EXPECT_EQ(plain->eos_id, 1);
  EXPECT_EQ(plain->config.num_layers, 61);
  j["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {64, 32}}};
  auto fp8 = ParseHfCheckpointConfig(j.dump(), "config.json");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ(fp8->fp8.rows, 64);
  EXPECT_EQ(fp8->fp8.cols, 32);
}

TEST(HfConfigTest, RejectsOtherQuantizationWithStableCodes) {
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"quant_method", "awq"}}, "unsupported_config"},
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}}, "unsupported_config"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128, 0}}}, "bad_config"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128}}}, "bad_config"},
      {"fp8", "bad_config"},
  };
  for (const auto& [quant, code] : cases) {
    auto c = ParseHfCheckpointConfig(WithKey(kDeepseekV3Config, "quantization_config", quant),
                                     "config.json");
    EXPECT_EQ(ErrorCodeOf(c.status()), code) << quant;
  }
}

}  // namespace
}  // namespace deepinfer::model
