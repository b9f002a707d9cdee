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

// out[r * out_stride] = Dot(a + r * a_stride, b, n) for r in [0, rows): the same bits as the
// separate calls, several rows at a time (one Dot waits on its own chain of multiply-adds).
// Shapes: a [rows] rows of n f32 at a_stride; b [n]. Threads: any (no shared state).
void DotRows(const float* a, int64_t rows, int64_t a_stride, const float* b, int64_t n,
             float* out, int64_t out_stride);

// For r in [0, rows) and e in [0, n) in order: Axpy(w[r * w_stride + e], x[e], y + r * y_stride,
// dim), the same bits as those calls, with y's rows kept in registers across the x's (MQA-style
// attention's weighted sum of shared values). Shapes: w [rows] rows of n f32; x[n] -> [dim];
// y [rows] rows of dim f32 (distinct from x and w). Threads: any.
void WeightedSumRows(const float* w, int64_t w_stride, const float* const* x, int64_t n, float* y,
                     int64_t rows, int64_t y_stride, int64_t dim);

// Writes embedding rows for `ids` as f32, dequantizing from the table's dtype.
// Shapes: table [vocab, hidden] any supported dtype; ids [num_tokens]; out [num_tokens, hidden].
// REQUIRES: every id in [0, vocab) (callers validate token ids at the boundary).
void EmbeddingLookup(const tensor::TensorView& table, const int32_t* ids, int64_t num_tokens,
                     float* out);

// Numerically stable in-place softmax over n values; returns the max logit.
float SoftmaxInPlace(float* x, int64_t n);

}  // namespace deepinfer::kernels
