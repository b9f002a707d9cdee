#pragma once

// DeepSeek-V4 checkpoints come in two layouts: the release's native tensor names ("embed.weight",
// "layers.3.attn.wq_a.weight", "layers.3.ffn.experts.7.w1.weight", ...) and the module names
// transformers uses ("model.embed_tokens.weight", "model.layers.3.self_attn.q_a_proj.weight",
// routed experts fused into "model.layers.3.mlp.experts.gate_up_proj" [E, 2I, H] and
// "down_proj" [E, H, I]). The forward pass reads the native names only.

#include "absl/status/status.h"
#include "model/model.h"

namespace deepinfer::model {

// Renames every tensor of `m` stored under a transformers name to its native name, and replaces
// each fused expert tensor by per-expert views ("layers.L.ffn.experts.E.w1/w3/w2.weight") into
// the same bytes (no copy). A checkpoint already in native names is left as it is; names neither
// layout knows are kept (the architecture's schema decides about them).
// Errors: InvalidArgument "shape_mismatch" (a fused expert tensor that is not 3-D, or whose
//   gate_up rows are odd); DataLoss "bad_header" (a tensor present under both names).
// Source: transformers 5.24 conversion_mapping.py, entry "deepseek_v4" (the inverse of its
//   renames and of its MergeModulelist + Concatenate expert fusion).
absl::Status NormalizeDeepseekV4Names(Model& m);

// DeepSeek-V4.1: transformers' module tree uses the release's names under "model." (and
// "lm_head.weight" at the top), so a checkpoint saved by transformers has "model.embed.weight",
// "model.layers.3.attn.wq_a.weight", ...: the prefix is dropped. Native checkpoints are unchanged.
// Errors: DataLoss "bad_header" (a tensor present with and without the prefix).
// Source: transformers deepseek_v41 (commit 0a2080b4), base_model_prefix "model".
absl::Status StripDeepseekV41ModelPrefix(Model& m);

}  // namespace deepinfer::model
