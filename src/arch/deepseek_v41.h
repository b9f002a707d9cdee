#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/moe.h"
#include "model/model.h"

namespace deepinfer::arch {

// DeepSeek-V4.1 forward pass (text model): lagged mHC (a site's mixes come from its own input
// streams, but it collapses with the previous site's `pre`; layer 0 starts from stream 0; the
// final collapse uses the last FFN site's `pre`, no hc head), shared-KV attention over a sliding
// window plus CSA2 — compressed KV produced only by the KV-source layers (ratio 2: per-channel
// softmax pooling of token pairs; ratio 1: one entry per token) and read by the layers after
// them, entries selected by the index-source layers (queries of their own against the source's
// index keys k_norm(wk(latent)); the candidate source's block mask constrains later index
// sources) and reused by the layers between them — and MoE with sqrt-softplus scores over
// gate_temp, the routed weight applied before w2, one shared expert. The quantization-aware
// numerics of the reference (window KV FP8 per 32, compressed KV FP4 per 16 with E4M3 scales,
// index queries and keys FP4 per 32; each skipped when the dimension is not a multiple of its
// block) are part of the model and on by default (Numerics::kDeepseekQat; kFast turns them
// off). Weights F32 / BF16 or the released FP8 (32 x 32 E8M0 blocks) / FP4 experts.
//
// KV cache (kv_layout): two caches. The window cache holds per token and layer the window
//   key/value and, in a ratio-2 KV source, the token's compressor projections a, z (still needed
//   by its group's last token); only the last max(sliding_window, ratio) positions are read, so
//   the engine keeps a few window blocks per sequence however long it grows. The main cache
//   keeps what every later position may read: each KV source's compressed entries with their
//   index keys (head_dim + index_head_dim floats per entry, spread over the group's ratio slots,
//   so ratio 2 costs half per token), and, with Engram, one float per token (its class) in an
//   extra layer num_layers. Real V4.1-Flash: 4 sources -> 2.5 x 640 f32 + 1 = 6.4 KB per token
//   (1,048,576 tokens in 6.7 GB), against 40 x 512 f32 = 80 KiB for full attention's keys alone.
//   Chunking, prefix hits and batching leave every logit unchanged.
// Engram (engram_layer_ids): before the layer's attention site, each position's n-gram row ids
//   (engram_hash.h, over model.engram_token_classes, which the caller fills from the tokenizer:
//   tokenizer::AttachEngramTokenClasses) gather rows of the layer's table (F32/BF16, or FP8 with
//   E8M0 per 32), wkv turns them into a key per stream and one value, and each stream adds
//   sigmoid(signed sqrt(normalized dot(stream, q*k*key))) * value. Each token's class is kept in
//   its layer-0 slot for later positions' look-back. Without the classes: unsupported_config.
// DSpark (num_nextn_predict_layers stages mtp.0.., when the checkpoint holds them; research
//   notes 5.5 and docs/deepseek.md for the choices the notes leave open): after EnableDspark(),
//   Forward keeps the stream means at the input of each dspark_target_layer_ids layer, and
//   writes every computed position's main_x = main_norm(main_proj(concat taps)) into each
//   stage's window (fp8(RoPE(kv_norm(wkv(main_x)))), extra window layers after the main ones).
//   DsparkPropose runs the block [y, noise x (block - 1)] at the positions after the window
//   through the stages (window-only attention over the window and the whole block: non-causal
//   inside it; their own MoE), lm_head(norm(x)) plus the Markov head's term for the previous
//   guess, greedy, and a confidence sigmoid(proj . [x, markov_embed[previous]]) per row.
// Images (a config with vision_config; its tensors vision.*, aligner.*, image_* required, and
//   vision tensors without vision_config refused, both bad_config): vision_tower() is the
//   checkpoint's VisionTower (arch/vision_tower.h). Forward reads ForwardBatch::token_types /
//   span_rows: the embedding of each span position (type >= 0) is overwritten by the next span
//   row before the streams start; the MoE of the main layers selects experts at span positions
//   (delimiters included) with gate.bias_vl instead of gate.bias (weights still from the
//   unbiased scores; DSpark stages never); Engram treats span positions as DEAD (class -1 in
//   the cache, so later positions' look-back stops there, and gate 0). Otherwise span positions
//   are ordinary causal positions, so chunks may cut through a span (each chunk passes its slice
//   of the types and rows). Source: DeepSeek-V4.1-Flash inference/model.py and engram.py as
//   ../shared/goldens/deepseek_v41_vision ran them (README "Text model with images").
// Threads / Lifetime: as CausalLm.
// Source: transformers models/deepseek_v41/modeling_deepseek_v41.py at commit 0a2080b4 (the
//   reference of ../shared/goldens/deepseek_v41); research notes section 5.
// Errors: as CreateDeepseekV4 (arch/deepseek_v4.h); InvalidArgument "bad_config" for vision
//   tensors without vision_config or the reverse; the vision tower's (VisionTower::Load).
// With `experts` (expert parallelism, arch/moe.h) only this rank's routed experts are read and
// run. Not owned; must outlive the model.
absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV41(const model::Model& model,
                                                            ExpertExchange* experts = nullptr);

}  // namespace deepinfer::arch
