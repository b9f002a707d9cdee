#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/model.h"

namespace deepinfer::model {

// Builds a Model from a parsed GGUF file: ModelConfig from the `llama.*` keys, TokenizerData from
// `tokenizer.*` (with end-of-generation ids computed as llama.cpp does), and every tensor as a
// view, after checking that each tensor the llama forward pass reads exists with the right shape
// and a supported type. `path` is used for the default model name only. LoadModel calls this
// and then hands the file's mapping to the Model.
//
// Errors: "unsupported_architecture" (general.architecture is not "llama"),
//   "unsupported_tokenizer" (tokenizer.ggml.model is not "gpt2"), "missing_metadata" /
//   "bad_metadata" (required key absent, wrong type or out of range, misaligned tensor data),
//   "missing_tensor", "shape_mismatch", "unsupported_dtype" (matrices: F32, F16, BF16, Q8_0,
//   Q4_0, Q4_1, Q4_K, Q6_K; 1-D norms: F32 only), "vocab_mismatch" (token_embd rows differ from
//   the token count or llama.vocab_size).
// Lifetime: the Model's tensor views point into `gguf`'s bytes; Model::files is left empty, so
//   the caller keeps those bytes alive as long as the Model.
// Source: llama.cpp src/llama-model.cpp (LLM_ARCH_LLAMA hparams and tensors),
//   src/llama-vocab.cpp (special tokens and EOG detection).
absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& gguf, const std::string& path);

}  // namespace deepinfer::model
