#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "model/model.h"

namespace deepinfer::arch {

// Builds the Llama forward pass: RMSNorm, RoPE, grouped-query attention, SwiGLU FFN, tied or
// separate output projection. Weight names follow GGUF ("blk.N.attn_q.weight", ...).
//
// Validation: this is the one Llama tensor schema (the loaders only map the files): every tensor
//   the pass reads must exist with the shape the config implies ([out, in] matrices; norms
//   [hidden]), matrices F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K or Q6_K, norms F32, data 4-byte
//   aligned; token_embd has one row per token of both the tokenizer and the config. Values are
//   not read (no NaN check).
// Errors: NotFound "missing_tensor"; InvalidArgument "shape_mismatch", "vocab_mismatch",
//   "bad_metadata" (misaligned data), "bad_config" (inconsistent head or rope dimensions);
//   Unimplemented "unsupported_dtype". Messages name the tensor, after the model's file
//   (model.source.path) when it has one.
// Source: Touvron et al. 2023 (Llama 2); llama2.c run.c forward(); llama.cpp llm_build_llama.
absl::StatusOr<std::unique_ptr<CausalLm>> CreateLlama(const model::Model& model);

}  // namespace deepinfer::arch
