#pragma once

#include <cstdint>

#include "tensor/tensor.h"
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
void RopeTables(const int32_t* positions, int64_t num_tokens, int rope_dim, float theta, float* cos,
                float* sin);

// Rotates the first rope_dim dims of every head of every token in place.
// Shapes: x [num_tokens, num_heads, head_dim] f32; cos, sin as produced by RopeTables.
void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int rope_dim,
               tensor::RopeStyle style, const float* cos, const float* sin);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
// Shapes: gate, up, out [n] f32 (out may alias gate).
// Index of the largest of x[0..n) (the lowest index on ties, like llama.cpp's greedy sampler and
// torch.argmax); 0 when n <= 0.
int32_t ArgMax(const float* x, int64_t n);

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
void EmbeddingLookup(const tensor::TensorView& table, const int32_t* ids, int64_t num_tokens,
                     float* out);

// Numerically stable in-place softmax over n values; returns the max logit.
float SoftmaxInPlace(float* x, int64_t n);

}  // namespace deepinfer::kernels
