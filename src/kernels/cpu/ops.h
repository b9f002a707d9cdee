#pragma once

#include <cstdint>

#include "model/model.h"
#include "util/thread_pool.h"

namespace deepinfer::kernels {

// Root-mean-square normalization of each row: out = x / sqrt(mean(x^2) + eps) * weight.
// Shapes: x, out [num_rows, dim] f32 (may alias); weight [dim] f32.
// Source: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"; llama2.c rmsnorm.
void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t dim, float eps,
             float* out);

// Rotary position embedding tables for a batch of positions.
// Shapes: positions [num_tokens]; cos, sin [num_tokens, rope_dim / 2] f32.
// Units: positions in tokens. freq_i = theta^(-2i / rope_dim), angle = position * freq_i,
//   computed in double and rounded once.
// Source: Su et al. 2021, "RoFormer".
void RopeTables(const int32_t* positions, int64_t num_tokens, int rope_dim, float theta,
                float* cos, float* sin);

// Rotates the first rope_dim dims of every head of every token in place.
// Shapes: x [num_tokens, num_heads, head_dim] f32; cos, sin as produced by RopeTables.
void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int rope_dim,
               model::RopeStyle style, const float* cos, const float* sin);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
// Shapes: gate, up, out [n] f32 (out may alias gate).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// y += x elementwise. Shapes: x, y [n].
void AddInPlace(float* y, const float* x, int64_t n);

// Dot product of two f32 vectors of length n.
float Dot(const float* a, const float* b, int64_t n);

// y += a * x. Shapes: x, y [n].
void Axpy(float a, const float* x, float* y, int64_t n);

// Writes embedding rows for `ids` as f32, dequantizing from the table's dtype.
// Shapes: table [vocab, hidden] any supported dtype; ids [num_tokens]; out [num_tokens, hidden].
// REQUIRES: every id in [0, vocab) (callers validate token ids at the boundary).
void EmbeddingLookup(const model::TensorView& table, const int32_t* ids, int64_t num_tokens,
                     float* out);

// Causal attention for a tile of consecutive query tokens of one sequence and the `group` query
// heads that share one KV head, over a paged KV cache. Every K and V row is read once for the
// whole tile (tokens x group heads), which turns prefill attention from memory-bound into
// compute-bound; a decode step is a tile of one token.
//
// Query token i sits at position first_pos + i and attends positions [0, first_pos + i].
// Shapes: query (token i, head g) is q[i * token_stride + g * head_dim .. + head_dim) f32, and its
//   output goes to out at the same offsets; scores is scratch of
//   num_tokens * group * (first_pos + num_tokens) f32. Position j's K row is at
//   layer + (block_table[j / block_size] * block_size + j % block_size) * floats_per_token
//   + k_offset, its V row likewise at + v_offset.
// Source: Vaswani et al. 2017 (scaled dot-product attention); Ainslie et al. 2023 (GQA).
void AttendTile(const float* q, int64_t token_stride, int num_tokens, int32_t first_pos, int group,
                int head_dim, float scale, const float* layer, const int32_t* block_table,
                int block_size, int64_t floats_per_token, int64_t k_offset, int64_t v_offset,
                float* scores, float* out);

// Numerically stable in-place softmax over n values; returns the max logit.
float SoftmaxInPlace(float* x, int64_t n);

}  // namespace deepinfer::kernels
