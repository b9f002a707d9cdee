#include "kernels/cpu/ggml_numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "util/status.h"

// The loops below run in one copy per ISA, chosen per call from ActiveIsa() (isa_dispatch.h):
// target("avx512f") for kAvx512, target("avx2,fma,f16c") for kAvx2 (what kAvx2 guarantees, the
// flags of ggml_numerics_avx2.cc), the baseline for kScalar. The copies only widen what the
// compiler may vectorize and let std::fma inline to one instruction; every operation is spelled
// out, and this file is built with -ffp-contract=off (GCC would otherwise fuse a * b + c in the
// FMA-capable copies), so each copy gives the same bits.
// (The target_clones these replace had "arch=haswell" for AVX2, which GCC 12 will not inline an
// always_inline body into, and whose resolver chose it only on CPUs that report themselves as
// Intel Haswell; other AVX2 CPUs ran the baseline clone.)
#define DI_GGML_DISPATCH(RET, NAME, PARAMS, ARGS) \
  DI_ISA_DISPATCH(internal::VectorLoopIsa(), "avx512f", "avx2,fma,f16c", RET, NAME, PARAMS, ARGS)

namespace deepinfer::kernels {

namespace internal {
// ggml_numerics_avx2.cc; y[t * y_stride + r] for rows [row_begin, row_end) of a Q4_1 / Q8_0
// weight against pre-quantized Q8_1 / Q8_0 activation rows.
void GgmlGemmQ4_1Avx2(const uint8_t* w, size_t w_row_bytes, const uint8_t* a, size_t a_row_bytes,
                      int64_t nb, int64_t num_tokens, float* y, int64_t y_stride, int64_t row_begin,
                      int64_t row_end);
void GgmlGemmQ8_0Avx2(const uint8_t* w, size_t w_row_bytes, const uint8_t* a, size_t a_row_bytes,
                      int64_t nb, int64_t num_tokens, float* y, int64_t y_stride, int64_t row_begin,
                      int64_t row_end);
}  // namespace internal

namespace {

using internal::HalfToFloat;
using tensor::BlockQ4_1;
using tensor::BlockQ8_0;
using tensor::BlockQ8_1;
using tensor::DType;

// hsum_float_8 (ggml-cpu/arch/x86/quants.c) and llamafile's hsum(__m256): high half plus low
// half, then lanes (0 + 2) + (1 + 3).
inline float Hsum8(const float* v) {
  const float r0 = v[4] + v[0], r1 = v[5] + v[1], r2 = v[6] + v[2], r3 = v[7] + v[3];
  return (r0 + r2) + (r1 + r3);
}

// GCC 12's _mm512_reduce_add_ps: high 256 bits plus low, then Hsum8 of that.
inline float Reduce16(const float* v) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = v[8 + i] + v[i];
  return Hsum8(t);
}

}  // namespace

void MatMulGroupGgml(const tensor::TensorView* const* ws, float* const* ys, int count,
                     const float* x, int64_t num_tokens, util::ThreadPool& pool) {
  bool all_exact_on_avx512 = ActiveIsa() == Isa::kAvx512;
  for (int i = 0; i < count; ++i) {
    all_exact_on_avx512 =
        all_exact_on_avx512 && (ws[i]->dtype == DType::kQ4_1 || ws[i]->dtype == DType::kQ8_0);
  }
  if (all_exact_on_avx512) {
    internal::MatMulGroupGgmlOrderAvx512(ws, ys, count, x, num_tokens, pool);
    return;
  }
  for (int i = 0; i < count; ++i) MatMulGgml(*ws[i], x, num_tokens, ys[i], pool);
}

namespace {

template <Isa>
DI_ALWAYS_INLINE float DotQ4_1Q8_1GgmlBody(const BlockQ4_1* w, const BlockQ8_1* x, int64_t nb) {
  float acc[8] = {0};
  float summs = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float d = HalfToFloat(w[b].d) * HalfToFloat(x[b].d);
    summs = std::fma(HalfToFloat(w[b].m), HalfToFloat(x[b].s), summs);
    // Lane j holds elements 4j..4j+3: low nibbles are elements 0-15, high nibbles 16-31.
    // Written as whole-array steps so that the SIMD copies vectorize them.
    int32_t prod[32];
    for (int e = 0; e < 16; ++e) {
      prod[e] = (w[b].qs[e] & 0x0f) * int32_t{x[b].qs[e]};
      prod[e + 16] = (w[b].qs[e] >> 4) * int32_t{x[b].qs[e + 16]};
    }
    for (int j = 0; j < 8; ++j) {
      const int32_t isum = (prod[4 * j] + prod[4 * j + 1]) + (prod[4 * j + 2] + prod[4 * j + 3]);
      acc[j] = std::fma(d, static_cast<float>(isum), acc[j]);
    }
  }
  return Hsum8(acc) + summs;
}

template <Isa>
DI_ALWAYS_INLINE float DotQ8_0Q8_0GgmlBody(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float acc[8] = {0};
  for (int64_t b = 0; b < nb; ++b) {
    const float d = HalfToFloat(w[b].d) * HalfToFloat(x[b].d);
    int32_t prod[32];
    for (int e = 0; e < 32; ++e) prod[e] = int32_t{w[b].qs[e]} * x[b].qs[e];
    for (int j = 0; j < 8; ++j) {
      const int32_t isum = (prod[4 * j] + prod[4 * j + 1]) + (prod[4 * j + 2] + prod[4 * j + 3]);
      acc[j] = std::fma(d, static_cast<float>(isum), acc[j]);
    }
  }
  return Hsum8(acc);
}

}  // namespace

DI_GGML_DISPATCH(float, DotQ4_1Q8_1Ggml, (const BlockQ4_1* w, const BlockQ8_1* x, int64_t nb),
                 (w, x, nb))
DI_GGML_DISPATCH(float, DotQ8_0Q8_0Ggml, (const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb),
                 (w, x, nb))

void MatMulGgml(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                util::ThreadPool& pool) {
  if (num_tokens <= 0) return;
  if (w.dtype != DType::kQ4_1 && w.dtype != DType::kQ8_0) {
    MatMul(w, x, num_tokens, y, pool);  // no ggml-exact kernel
    return;
  }
  if (ActiveIsa() == Isa::kAvx512) {
    // Tiled AVX-512 kernels with the same order (matmul_avx512.cc), faster than the ones below.
    internal::MatMulGgmlOrderAvx512(w, x, num_tokens, y, pool);
    return;
  }
  const int64_t in = w.cols(), out = w.rows();
  DI_CHECK(in % 32 == 0);
  const int64_t nb = in / 32;
  const bool q41 = w.dtype == DType::kQ4_1;
  const size_t w_row_bytes =
      static_cast<size_t>(nb) * (q41 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0));
  const size_t a_row_bytes =
      static_cast<size_t>(nb) * (q41 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0));
  DI_CHECK(w_row_bytes * static_cast<size_t>(out) <= w.size_bytes);
  thread_local std::vector<uint8_t> act;
  if (act.size() < a_row_bytes * num_tokens) act.resize(a_row_bytes * num_tokens);
  for (int64_t t = 0; t < num_tokens; ++t) {
    uint8_t* a = act.data() + t * a_row_bytes;
    if (q41) {
      QuantizeRowQ8_1Cpu(x + t * in, reinterpret_cast<BlockQ8_1*>(a), in);
    } else {
      QuantizeRowQ8_0Cpu(x + t * in, reinterpret_cast<BlockQ8_0*>(a), in);
    }
  }
  const uint8_t* wd = w.data;
  const uint8_t* ad = act.data();
#if defined(DI_KERNELS_X86)
  const bool simd = ActiveIsa() != Isa::kScalar;  // AVX2 (AVX-512 returned above)
#endif
  pool.ParallelFor(
      out,
      [&](int64_t begin, int64_t end, int) {
#if defined(DI_KERNELS_X86)
        if (simd) {
          (q41 ? internal::GgmlGemmQ4_1Avx2 : internal::GgmlGemmQ8_0Avx2)(
              wd, w_row_bytes, ad, a_row_bytes, nb, num_tokens, y, out, begin, end);
          return;
        }
#endif
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* wr = wd + r * w_row_bytes;
          for (int64_t t = 0; t < num_tokens; ++t) {
            const uint8_t* at = ad + t * a_row_bytes;
            y[t * out + r] = q41 ? DotQ4_1Q8_1Ggml(reinterpret_cast<const BlockQ4_1*>(wr),
                                                   reinterpret_cast<const BlockQ8_1*>(at), nb)
                                 : DotQ8_0Q8_0Ggml(reinterpret_cast<const BlockQ8_0*>(wr),
                                                   reinterpret_cast<const BlockQ8_0*>(at), nb);
          }
        }
      },
      16);
}

namespace {

// 2^k as a float, for k in [-126, 127].
inline float Pow2(int k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

// Inlined into the callers' copies so that std::fma becomes one instruction there; written
// without calls or branches so the loops around it vectorize.
__attribute__((always_inline)) inline float ExpGgmlInline(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;  // round(x / ln 2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  // VSCALEFPS: j * 2^n with one rounding. j is in (0.5, 2), so j * 2^n2 with |n2| <= 66 is
  // exact and the multiplication by 2^n1 (a normal power of two) is the only rounding, also
  // into subnormals or to infinity. (A NaN n takes the clamp's 192 and stays NaN through j.)
  float nc = n < 192.0f ? n : 192.0f;
  nc = nc > -192.0f ? nc : -192.0f;
  float n1 = nc < 127.0f ? nc : 127.0f;
  n1 = n1 > -126.0f ? n1 : -126.0f;
  const float scaled = (j * Pow2(static_cast<int>(nc - n1))) * Pow2(static_cast<int>(n1));
  // |n| > 192: ggml returns 0 below and +inf above instead.
  const float saturated = n <= 0.0f ? 0.0f : INFINITY;
  return std::fabs(n) > 192.0f ? saturated : scaled;
}

template <Isa>
DI_ALWAYS_INLINE void SwiGluGgmlBody(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float silu = g / (1.0f + ExpGgmlInline(0.0f - g));
    out[i] = silu * up[i];
  }
}

}  // namespace

float ExpGgml(float x) { return ExpGgmlInline(x); }

DI_GGML_DISPATCH(void, SwiGluGgml, (const float* gate, const float* up, int64_t n, float* out),
                 (gate, up, n, out))

void RopeTablesGgml(const int32_t* positions, int64_t num_tokens, int rope_dim, float theta_base,
                    float* cos_out, float* sin_out) {
  const int half = rope_dim / 2;
  const float theta_scale = std::pow(theta_base, -2.0f / static_cast<float>(rope_dim));
  for (int64_t t = 0; t < num_tokens; ++t) {
    float theta = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      cos_out[t * half + i] = std::cos(theta);
      sin_out[t * half + i] = std::sin(theta);
      theta *= theta_scale;
    }
  }
}

namespace {

template <Isa>
DI_ALWAYS_INLINE void ApplyRopeGgmlBody(float* x, int64_t num_tokens, int num_heads, int head_dim,
                                        int rope_dim, tensor::RopeStyle style, const float* cos_t,
                                        const float* sin_t) {
  const int half = rope_dim / 2;
  const bool adjacent = style == tensor::RopeStyle::kAdjacentPairs;
  const int stride = adjacent ? 1 : half;  // distance between the two elements of a pair
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        float* p = adjacent ? v + 2 * i : v + i;
        const float x0 = p[0], x1 = p[stride];
        p[0] = std::fma(x0, c[i], -(x1 * s[i]));
        p[stride] = std::fma(x0, s[i], x1 * c[i]);
      }
    }
  }
}

template <Isa>
DI_ALWAYS_INLINE float DotF32GgmlBody(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 16; ++l) {
        acc[c][l] = std::fma(x[i + 16 * c + l], y[i + 16 * c + l], acc[c][l]);
      }
    }
  }
  float folded[16];
  for (int l = 0; l < 16; ++l) folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  float sum = Reduce16(folded);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

template <Isa>
DI_ALWAYS_INLINE float DotF32TinyBlasGgmlBody(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  }
  return Reduce16(acc);
}

}  // namespace

DI_GGML_DISPATCH(float, DotF32Ggml, (const float* x, const float* y, int64_t n), (x, y, n))
DI_GGML_DISPATCH(float, DotF32TinyBlasGgml, (const float* x, const float* y, int64_t n), (x, y, n))

namespace {

// Calls the dots' copies of its own ISA: not their dispatchers (a switch per key and output), nor
// their bodies inlined here (GCC compiles those about 1.7x slower in this loop).
template <Isa kIsa>
DI_ALWAYS_INLINE void AttendRowGgmlBody(const float* q, const float* k, const float* vt,
                                        int64_t vt_stride, int ctx, int head_dim, float scale,
                                        bool batched, float* scratch, float* out) {
  const int64_t n16 = (int64_t{ctx} + 15) / 16 * 16;
  const int64_t n64 = (int64_t{ctx} + 63) / 64 * 64;
  float* p = scratch;  // [n64]
  float mx = -INFINITY;
  for (int j = 0; j < ctx; ++j) {
    p[j] = DotF32GgmlCopy<kIsa>(q, k + int64_t{j} * head_dim, head_dim) * scale;
    mx = std::max(mx, p[j]);
  }
  // ggml_vec_soft_max_f32: 16 at a time, each group summed as _mm512_reduce_add_ps into a double;
  // masked cells are exp(-inf) = 0.
  for (int64_t j = ctx; j < n64; ++j) p[j] = 0.0f;
  double sum = 0.0;
  for (int64_t j0 = 0; j0 < n16; j0 += 16) {
    for (int64_t j = j0; j < std::min<int64_t>(j0 + 16, ctx); ++j) p[j] = ExpGgmlInline(p[j] - mx);
    sum += static_cast<double>(Reduce16(p + j0));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < ctx; ++j) p[j] *= inv;
  for (int d = 0; d < head_dim; ++d) {
    const float* vd = vt + int64_t{d} * vt_stride;
    out[d] = batched ? DotF32TinyBlasGgmlCopy<kIsa>(vd, p, n16) : DotF32GgmlCopy<kIsa>(vd, p, n64);
  }
}

}  // namespace

DI_GGML_DISPATCH(void, ApplyRopeGgml,
                 (float* x, int64_t num_tokens, int num_heads, int head_dim, int rope_dim,
                  tensor::RopeStyle style, const float* cos_t, const float* sin_t),
                 (x, num_tokens, num_heads, head_dim, rope_dim, style, cos_t, sin_t))
DI_GGML_DISPATCH(void, AttendRowGgml,
                 (const float* q, const float* k, const float* vt, int64_t vt_stride, int ctx,
                  int head_dim, float scale, bool batched, float* scratch, float* out),
                 (q, k, vt, vt_stride, ctx, head_dim, scale, batched, scratch, out))

}  // namespace deepinfer::kernels
