#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "model/model.h"

namespace deepinfer::arch {

// Builds the Llama forward pass: RMSNorm, RoPE, grouped-query attention, SwiGLU FFN, tied or
// separate output projection. Weight names follow GGUF ("blk.N.attn_q.weight", ...).
//
// Errors: NotFound "missing_tensor", InvalidArgument "shape_mismatch" / "bad_config".
// Source: Touvron et al. 2023 (Llama 2); llama2.c run.c forward(); llama.cpp llm_build_llama.
absl::StatusOr<std::unique_ptr<CausalLm>> CreateLlama(const model::Model& model);

}  // namespace deepinfer::arch
