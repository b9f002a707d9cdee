#pragma once

// Building blocks of the DeepSeek-V4 and V4.1 forward passes (arch/deepseek_v4.cc,
// arch/deepseek_v41.cc): manifold-constrained hyper-connections, interleaved RoPE on a trailing
// rotary slice, shared-KV attention with a sink, the QAT fake quantizers, the router score.
// Float32 throughout; plain functions on caller-owned memory.
// Source: transformers models/deepseek_v4 (5.24) and deepseek_v41 (commit 0a2080b4).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/matmul.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch::dsv4 {

// x / sqrt(mean(x^2) + eps) per row, no weight. Shapes: x, out [rows, dim] (may alias).
void UnweightedRmsNorm(const float* x, int64_t rows, int64_t dim, float eps, float* out);

// cos/sin of `position` for a rotary table (angle = inv_freq[i] * position in float32, as
// transformers computes inv_freq @ position_ids), each times `mscale`.
// Shapes: cos, sin [inv_freq.size()].
void RopeAt(const std::vector<float>& inv_freq, float mscale, int32_t position, float* cos,
            float* sin);

// Interleaved RoPE on x[0, 2 half): pairs (2i, 2i+1) rotate by angle i; `inverse` uses -sin (the
// conjugate rotation that removes the query's rotation from an attention output).
void RopeInterleaved(float* x, const float* cos, const float* sin, int half, bool inverse);

// The mHC coefficients of one site for one token, from its mix row m [(2 + hc) hc] (the site's fn
// applied to the unweighted-RMS-normed flattened streams): pre_j = sigmoid(m_j s0 + b_j) + eps,
// post_j = 2 sigmoid(m_{hc+j} s1 + b_{hc+j}), comb = softmax over k of (m s2 + b) + eps, divided
// by its column sums (+ eps), then sinkhorn_iters - 1 times by row then column sums.
// Shapes: pre, post [hc]; comb [hc][hc] row-major ([j][k]).
void HcCoefficients(const float* m, const float* base, const float* scale, int hc, float hc_eps,
                    int sinkhorn_iters, float* pre, float* post, float* comb);
// sum_j pre_j X_j. Shapes: streams [hc, H]; out [H].
void HcCollapse(const float* streams, const float* pre, int hc, int64_t H, float* out);
// X'_k = post_k y + sum_j comb[j][k] X_j. Shapes: streams, out [hc, H] (distinct); y [H].
void HcExpand(const float* streams, const float* y, const float* post, const float* comb, int hc,
              int64_t H, float* out);

// Attention of `heads` query heads over n shared keys/values (K = V, one pointer each): per head,
// softmax over q . k * scale with exp(sink - max) added to the denominator only, then the
// weighted sum of the values.
// Shapes: q, out [heads, dim]; keys[n] -> [dim]; sinks [heads]; scratch [heads * n].
void AttendSharedKv(const float* q, int64_t heads, const float* const* keys, int64_t n,
                    int64_t dim, float scale, const float* sinks, float* scratch, float* out);

// sqrt(softplus(x)) with torch's softplus (beta 1, threshold 20).
float SqrtSoftplus(float x);

// The K experts of the largest score + bias (the bias for selection only), ties to the lower
// index, in descending order. Shapes: score, bias [E]; order: scratch resized to E; idx [K].
void SelectExperts(const float* score, const float* bias, int E, int K, std::vector<int>& order,
                   int32_t* idx);

// Every one of the hc residual streams starts as the token's embedding.
// Shapes: h [T, H]; streams [T, hc, H].
void HcReplicate(const float* h, int64_t T, int64_t hc, int64_t H, float* streams);

// Reusable buffers of the functions below (grown on demand, never shrunk).
struct Scratch {
  util::AlignedVector<float> a, b, c;
  std::vector<kernels::MatMulJob> jobs;
};

// The grouped low-rank output projection: group g's heads (columns [g w / G, (g + 1) w / G) of
// attn) through wo_a_groups[g] (rows [g olr, (g + 1) olr) of wo_a, AttentionLayer::wo_a_groups),
// then wo_b over the concatenation. A decode step's G group matmuls run in one parallel region
// (a long prefill chunk's one group at a time, so the scratch stays one group's size).
// Shapes: attn [T, w]; wo_a_groups [G] of [olr, w / G]; wo_b [H, G olr]; out [T, H].
void GroupedOutput(const tensor::TensorView* wo_a_groups, const tensor::TensorView& wo_b,
                   int64_t groups, int64_t olr, const float* attn, int64_t T, int64_t w,
                   Scratch& scratch, float* out, util::ThreadPool& pool);

// --- Quantization-aware numerics (fake quantization: quantize, then dequantize in place). ---
// FP8 E4M3 per `block` values (a shorter last block is its own block), scale 2^ceil(log2(
// max(amax, amax_floor) / 448)).
void FakeQuantFp8(float* x, int64_t n, int64_t block, float amax_floor);
// FP4 E2M1 per `block` values with a power-of-two scale 2^ceil(log2(max(amax, 6 2^-126) / 6)).
void FakeQuantFp4(float* x, int64_t n, int64_t block);
// FP4 E2M1 per `block` values with an E4M3 scale e4m3(max(amax, 6 2^-9) / 6) (V4.1's compressed
// KV). REQUIRES: n % block == 0.
void FakeQuantFp4E4M3Scale(float* x, int64_t n, int64_t block);
// Orthonormal Walsh-Hadamard transform in place. REQUIRES: n a power of two.
void Hadamard(float* x, int64_t n);

}  // namespace deepinfer::arch::dsv4
