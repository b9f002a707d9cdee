#pragma once

// A Hugging Face checkpoint folder: config.json (model/hf_config.h) plus the safetensors shards
// (model/safetensors.h) it names, assembled into a Model.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace deepinfer::model {

// Loads a Hugging Face DeepSeek-V2/V3 checkpoint folder: config.json plus model.safetensors, or
// the shards listed in model.safetensors.index.json. `path` may be the folder, its config.json
// or one of its .safetensors files. Tensors keep their HF names; the special ids come from
// config.json (eog_ids = {eos_id}).
//
// FP8: F8_E4M3 weights are dequantized to BF16 at load (DequantizeFp8Weights, model/fp8.h) and
//   their `*_scale_inv` tensors dropped. Tensors whose data is not aligned to their element size
//   are copied into Model::owned (the kernels read them in place).
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
// `unread` (model.h): FP8 tensors it names stay FP8 (never converted nor checked).
absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(const std::string& path,
                                                   const UnreadTensors& unread = nullptr);

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
