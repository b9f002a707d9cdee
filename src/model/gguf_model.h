#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/model.h"

namespace deepinfer::model {

// Builds a Model from a parsed GGUF file: ModelConfig from the `llama.*` keys, TokenizerData from
// `tokenizer.*` (with end-of-generation ids computed as llama.cpp does), and every tensor as a
// view. Which tensors exist, their shapes and types are the architecture's to check
// (arch::CreateCausalLm, against the Llama schema in arch/llama.cc), so that knowledge lives in
// one place. `path` is used for the default model name only. LoadModel calls this and then hands
// the file's mapping to the Model.
//
// Errors: "unsupported_architecture" (general.architecture is not "llama"),
//   "unsupported_tokenizer" (tokenizer.ggml.model is not "gpt2"), "missing_metadata" /
//   "bad_metadata" (required key absent, wrong type or out of range).
// Lifetime: the Model's tensor views point into `gguf`'s bytes; Model::files is left empty, so
//   the caller keeps those bytes alive as long as the Model.
// Source: llama.cpp src/llama-model.cpp (LLM_ARCH_LLAMA hparams), src/llama-vocab.cpp (special
//   tokens and EOG detection).
absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& gguf, const std::string& path);

}  // namespace deepinfer::model
