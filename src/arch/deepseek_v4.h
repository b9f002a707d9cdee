#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/moe.h"
#include "model/model.h"

namespace deepinfer::arch {

// DeepSeek-V4 forward pass: manifold-constrained hyper-connections (hc_mult residual streams
// mixed by Sinkhorn-normalized weights at every attention and FFN site, collapsed by the hc head),
// shared-KV multi-query attention with head_dim 512 (per-head weightless RMS norm on q, RoPE on
// the last rope_dim dims, an attention sink in the softmax denominator, the inverse rotation on
// the output, grouped low-rank output projection) over a sliding window plus a compressed branch
// per layer (CSA: overlapping windows of 2 x ratio tokens pooled by a per-channel softmax, the
// lightning indexer keeping the top-k entries; HCA: disjoint windows, every visible entry), and
// an all-MoE FFN (sqrt(softplus) scores, selection-only bias or hash routing by tid2eid, clamped
// SwiGLU, weights applied after w2 as transformers does, one shared expert). Reads the native
// tensor names ("layers.N.attn.wq_a.weight", ...; model/deepseek_v4_names.h maps transformers').
//
// KV cache (kv_layout): two caches, as V4.1's. The window cache holds per position and layer
//   what only the last window_tokens positions read: the window key/value (after kv_norm and
//   RoPE), and on compressed layers the compressor's projections a = wkv x, z = wgate x (coff x
//   head_dim each, coff = 2 for CSA) and on CSA the indexer compressor's (2 x index_head_dim
//   each); window_tokens = max(sliding_window, 2 x CSA ratio, HCA ratio). The main cache keeps
//   each compressed layer's entries with their index keys, spread over the group's slots
//   (dsv4::EntryCache): head_dim + index_head_dim floats per 4 tokens on CSA, head_dim per 128 on
//   HCA (per block_size tokens when the block is smaller), nothing on window-only layers.
//   Chunked prefill and prefix-cache hits at any block boundary stay exact: an entry is written
//   once its group closes, from window slots still held. The MTP modules' cache (ForwardMtp) has
//   no window cache: kv_floats_per_token() = head_dim floats per token (their window key/value).
// Visibility (transformers): a query at position p sees window positions p-W+1 .. p and
//   compressed entries j < (p + 1) / ratio; CSA keeps the index_topk best of those (all when
//   fewer), by sum_h w_h relu(q_h . k_j) / sqrt(index_head_dim); ties pick the lower index.
// Numerics: float32 activations; weights F32 / BF16, or as released (FP8 E4M3 with E8M0 block
//   scales, routed experts FP4 E2M1 with E8M0 1 x 32 scales), read in place by the kernels
//   (model/block_scales.h). The QAT fake quantization of DeepSeek's own inference code is not
//   applied (transformers 5.24 applies none).
// Threads / Lifetime: as CausalLm (not thread-safe; borrows the Model).
// Source: DeepSeek-AI 2026, "DeepSeek-V4" technical report; transformers 5.24
//   models/deepseek_v4/modeling_deepseek_v4.py (parity reference; where DeepSeek's inference code
//   differs, e.g. the routed weight before w2, transformers is followed).
// Errors of CreateDeepseekV4: NotFound "missing_tensor"; InvalidArgument "shape_mismatch",
//   "bad_config", "unexpected_tensor" (a tensor the schema has no place for); Unimplemented
//   "unsupported_dtype"; DataLoss "nan_in_weights"; InvalidArgument "bad_tensor" (a tid2eid entry
//   outside [0, n_routed_experts)).
// With `experts` (expert parallelism, arch/moe.h) only this rank's routed experts are read and
// run. Not owned; must outlive the model.
absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV4(const model::Model& model,
                                                           ExpertExchange* experts = nullptr);

}  // namespace deepinfer::arch
