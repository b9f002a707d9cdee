#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/safetensors.h"

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
//   n_routed_experts not divisible by n_group, ...).
// Source: transformers DeepseekV3Config / DeepseekV2Config; deepseek-ai/DeepSeek-V3 config.json.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text,
                                          const std::string& label = "config.json");

// Loads a Hugging Face DeepSeek-V2/V3 checkpoint folder: config.json plus model.safetensors, or
// the shards listed in model.safetensors.index.json. `path` may be the folder, its config.json
// or one of its .safetensors files. Tensors keep their HF names.
//
// FP8 choice: F8_E4M3 weights with `<name>_scale_inv` block scales (quantization_config
//   weight_block_size, default 128x128) are dequantized at load to BF16 kept in Model::owned
//   (bf16(fp8 * scale_inv), bit-identical to DeepSeek's fp8_cast_bf16), and the scale tensors
//   are dropped. The matmul kernels have BF16 paths but no FP8 one, so this trades memory
//   (2 bytes per weight instead of ~1) for using the existing kernels unchanged.
// Validation: the loader checks the files (headers, shards, FP8 scales); which tensors exist and
//   their shapes are the architecture's to check (arch::CreateCausalLm, against its schema), so
//   that knowledge lives in one place. Records model->source (kHuggingFace, the folder).
// Errors: NotFound "file_not_found" (no config.json); InvalidArgument "bad_config";
//   Unimplemented "unsupported_config" / "unsupported_dtype"; NotFound "missing_shard" (no
//   model.safetensors, or a shard named by the index is absent); DataLoss "bad_header" /
//   "truncated_file" (a shard), "bad_header" also for a malformed index or a tensor present in
//   two shards; DataLoss "nan_in_weights" (an FP8 weight or scale). Messages are one line and
//   name the file or tensor.
// Cost: maps the shards (no copy of BF16/F32 data); FP8 weights cost 2 bytes/weight of RAM.
absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(const std::string& path);

// LoadHfModel without the files: assembles a checkpoint from config.json's text and its shards,
// already parsed (SafetensorsFile::Open or ::Parse). The model takes the shards' mappings; the
// views of a shard from Parse point into the caller's bytes, which must then outlive the model.
// `label` names config.json in errors and becomes config.name.
// Errors: LoadHfModel's, less "file_not_found" and "missing_shard".
// Cost: as LoadHfModel (FP8 dequantization runs on one thread per core).
absl::StatusOr<std::unique_ptr<Model>> HfModelFromParts(
    const std::string& config_json, std::vector<std::unique_ptr<SafetensorsFile>> shards,
    const std::string& label = "config.json");

// True when `path` names something LoadHfModel handles (a directory, a file named config.json,
// or a .safetensors file).
bool IsHfCheckpointPath(const std::string& path);

}  // namespace deepinfer::model
