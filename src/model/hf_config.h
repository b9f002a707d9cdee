#pragma once

// A Hugging Face config.json: the model's hyperparameters, its FP8 quantization and its special
// token ids. The checkpoint around it (shards, tensors) is model/hf_checkpoint.h's.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/fp8.h"
#include "model/model.h"

namespace deepinfer::model {

// Parses a Hugging Face config.json of model_type "deepseek_v3" or "deepseek_v2" into a
// ModelConfig with `deepseek` set (architecture = the model_type).
//
// Accepts both the original `rope_scaling` {"type": "yarn", ...} and transformers 5's
// `rope_parameters` {"rope_type": "yarn", "rope_theta", ...}; `q_lora_rank: null` selects the
// direct q_proj. Training-only keys (aux_loss_alpha, seq_aux, ep_size, ...) are ignored.
// Errors: InvalidArgument "bad_config" (not JSON, a required key missing, wrong type or out of
//   range: every size and count lies in [1, 2^24], some may be 0); Unimplemented
//   "unsupported_config" (other model_type, scoring_func other than sigmoid/softmax, unknown
//   topk_method or rope scaling type, hidden_act other than silu, attention_bias / mlp_bias true,
//   n_routed_experts not divisible by n_group, ...). Messages start with `label`.
// Source: transformers DeepseekV3Config / DeepseekV2Config; deepseek-ai/DeepSeek-V3 config.json.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text,
                                          const std::string& label = "config.json");

// Everything a checkpoint loader takes from config.json.
struct HfCheckpointConfig {
  ModelConfig config;  // as ParseHfConfig
  // quantization_config.weight_block_size (default 128x128, also without quantization_config:
  // the FP8 tensors themselves say whether there is anything to dequantize).
  Fp8Blocks fp8;
  // bos_token_id / eos_token_id when integers; the tokenizer itself (tokenizer.json) is the
  // tokenizer layer's to read.
  std::optional<int32_t> bos_id, eos_id;
};

// ParseHfConfig plus quantization_config and the special ids.
// Errors: ParseHfConfig's; "bad_config" also for a quantization_config that is not an object or
//   a weight_block_size that is not two positive integers; "unsupported_config" for a
//   quant_method / fmt other than fp8 / e4m3.
// Source: DeepSeek-V3 config.json quantization_config {"quant_method": "fp8", "fmt": "e4m3",
//   "weight_block_size": [128, 128], "activation_scheme": "dynamic"}.
absl::StatusOr<HfCheckpointConfig> ParseHfCheckpointConfig(const std::string& json_text,
                                                           const std::string& label);

}  // namespace deepinfer::model
