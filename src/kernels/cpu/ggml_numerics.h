#pragma once

// Kernels that reproduce, bit for bit, the float arithmetic of llama.cpp's CPU backend (ggml-cpu
// as built by llama-cpp-python 0.3.36 with GCC 12, -march=native on an AVX-512 machine, flash
// attention off). They back the opt-in Numerics::kGgml mode of arch/llama.cc, whose greedy
// decoding is then token-identical to llama.cpp's.
//
// Why a separate path: a small quantized model re-quantizes its activations to int8 before every
// matmul, so a last-bit difference anywhere eventually flips an int8 rounding and moves logits by
// up to ~1. Matching ggml therefore needs the same order of every float operation, including
// where GCC fused a multiply and an add (-ffp-contract=fast in ggml's build). Where that costs
// nothing the default path uses these kernels too (RoPE, SwiGLU; RMSNorm already matches). The
// matmul order costs speed (one 8-lane chain per output instead of 16 lanes over block pairs),
// and ggml's attention is not batch invariant (it sums V in one order for a one-token batch and
// another for longer ones), so those are opt-in only.
//
// Everything here is portable C++ with explicit std::fma where ggml's code or compiler fused
// (built with -ffp-contract=off so nothing else fuses), so it gives the same bits under
// DEEPINFER_ISA=scalar|avx2|avx512; the quantized matmul has AVX2 and AVX-512 versions of the
// same arithmetic for speed. Threads: every function is a pure function of its arguments except
// the matmuls, which use the pool as documented.

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "util/thread_pool.h"

namespace deepinfer::kernels {

// y = x W^T with ggml-cpu's numerics, for Q4_1 and Q8_0 weights (other dtypes fall back to
// MatMul, which is not bit-exact with ggml).
//
// The activations are quantized as ggml-cpu's x86 quantize_row_q8_1 / q8_0 (QuantizeRowQ8_1Cpu /
// QuantizeRowQ8_0Cpu). Per output, as ggml_vec_dot_q4_1_q8_1 / ggml_vec_dot_q8_0_q8_0 in
// ggml-cpu/arch/x86/quants.c: 8 float lanes, lane j of block b adds fma(d_w * d_x,
// float(sum of the 4 int products 4j..4j+3), lane); the lanes are summed as hsum_float_8. Q4_1
// adds the min term separately as a scalar chain summs = fma(m_w, s_x, summs) and returns
// hsum + summs. (llamafile's tinyBLAS_Q0_AVX, used by ggml for Q8_0 batches, has the same order.)
// Shapes: w [out, in]; x [num_tokens, in] f32; y [num_tokens, out] f32; in % 32 == 0.
// Threads: output rows split over the pool; call from the pool's owner. Results do not depend on
//   the thread count.
// Cost: on AVX-512, tiled kernels like MatMul's (prefill ~23% and decode ~8% slower than
//   MatMul, which sums in 16 lanes over block pairs); elsewhere an AVX2 (or portable) kernel one
//   row and token at a time.
void MatMulGgml(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                util::ThreadPool& pool);

// ys[i] = x ws[i]^T with MatMulGgml's numerics, for `count` (<= 8) weights sharing the input
// (on AVX-512 one parallel region with one activation quantization, like MatMulGroup).
// Shapes, Threads: as MatMulGroup (matmul.h).
void MatMulGroupGgml(const tensor::TensorView* const* ws, float* const* ys, int count,
                     const float* x, int64_t num_tokens, util::ThreadPool& pool);

// One dot product of a Q4_1 / Q8_0 weight row with a Q8_1 / Q8_0 activation row of `nb` blocks,
// as above (portable reference of the AVX2 kernel).
float DotQ4_1Q8_1Ggml(const tensor::BlockQ4_1* w, const tensor::BlockQ8_1* x, int64_t nb);
float DotQ8_0Q8_0Ggml(const tensor::BlockQ8_0* w, const tensor::BlockQ8_0* x, int64_t nb);

// exp(x) as ggml-cpu's AVX-512 ggml_v_expf (ggml-cpu/vec.h): a degree-5 polynomial after range
// reduction by ln 2, scaled with VSCALEFPS; |n| > 192 saturates to 0 or +inf. About 1.5 ulp from
// the true exp, and not the same bits as std::exp.
float ExpGgml(float x);

// out[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + ExpGgml(0 - g)), as ggml_vec_swiglu_f32
// with ggml_v_silu. out may alias gate or up. Shapes: [n] f32.
// Cost: vectorized (16 lanes with AVX-512); cheaper than SiluMul's std::exp, so llama uses it in
//   both numerics modes.
void SwiGluGgml(const float* gate, const float* up, int64_t n, float* out);

// Rotary-embedding tables as ggml-cpu's rope (ggml_rope_cache_init, no YaRN, freq_scale 1):
// theta starts at the position (as float) and is multiplied by powf(theta_base, -2 / rope_dim)
// after each pair; cos/sin are cosf/sinf of it (ggml's build calls sincosf, which gives the same
// values).
// Shapes: positions [num_tokens]; cos_out, sin_out [num_tokens, rope_dim / 2] f32.
void RopeTablesGgml(const int32_t* positions, int64_t num_tokens, int rope_dim, float theta_base,
                    float* cos_out, float* sin_out);

// Rotates each head's first rope_dim dims in place as ggml-cpu's rotate_pairs:
// x0' = fma(x0, cos, -(x1 * sin)), x1' = fma(x0, sin, x1 * cos) (the contraction GCC chose in
// ggml's build). kAdjacentPairs rotates (2i, 2i+1) (GGML_ROPE_TYPE_NORM); kHalfSplit rotates
// (i, i + rope_dim/2) (NEOX).
// Shapes: x [num_tokens, num_heads, head_dim] f32; tables from RopeTablesGgml.
// Cost: as ApplyRope (ops.h); llama uses it in both numerics modes.
void ApplyRopeGgml(float* x, int64_t num_tokens, int num_heads, int head_dim, int rope_dim,
                   tensor::RopeStyle style, const float* cos_t, const float* sin_t);

// dot(x, y) over n floats as ggml_vec_dot_f32 with AVX-512 (ggml-cpu/vec.cpp): four 16-lane
// accumulators over steps of 64, fma; folded (0+2, 1+3, 0+1), then _mm512_reduce_add_ps (GCC's
// order); the n % 64 tail is added as a scalar fma chain after that (ggml's `sumf += x*y` as
// GCC contracts it; head_dim 64 and 64-padded rows never have a tail, so that part is untested
// against ggml).
float DotF32Ggml(const float* x, const float* y, int64_t n);

// dot(x, y) as llamafile's tinyBLAS<16, __m512> (ggml-cpu/llamafile/sgemm.cpp): one 16-lane fma
// accumulator over steps of 16, then _mm512_reduce_add_ps. REQUIRES: n % 16 == 0.
float DotF32TinyBlasGgml(const float* x, const float* y, int64_t n);

// Attention of one query row over one KV head as ggml's non-flash path (llama-graph.cpp
// build_attn_mha: kq = K q, soft_max_ext with scale and causal mask, kqv = V^T p):
//   s[j] = DotF32Ggml(q, k_j) * scale; p = ggml_vec_soft_max_f32 (ExpGgml(s - max), summed per
//   16 lanes with _mm512_reduce_add_ps into a double) times float(1 / sum);
//   out[d] = dot(p, v^T_d) with DotF32TinyBlasGgml when the step has >= 2 tokens (`batched`,
//   ggml then runs llamafile's sgemm) and DotF32Ggml for one token (sgemm declines n < 2).
// Masked positions (later tokens of the step, ggml's padding of the cache to 256 cells) get
// p = 0 and add zeros, so only the padding to the kernels' step matters: vt rows hold
// vt_stride >= RoundUp(ctx, 64) floats, finite past ctx (ggml's masked cells hold finite values
// too).
// Shapes: q [head_dim]; k [ctx, head_dim] row-major; vt [head_dim, vt_stride]; out [head_dim];
//   scratch >= RoundUp(ctx, 64) floats.
void AttendRowGgml(const float* q, const float* k, const float* vt, int64_t vt_stride, int ctx,
                   int head_dim, float scale, bool batched, float* scratch, float* out);

}  // namespace deepinfer::kernels
