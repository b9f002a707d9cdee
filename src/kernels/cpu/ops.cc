#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>


#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_ext.h"
#include "kernels/cpu/quant.h"

namespace deepinfer::kernels {

using internal::LoadV;
using internal::StoreV;

// The loops below run in one copy per ISA, chosen per call from ActiveIsa() (isa_dispatch.h):
// target("avx512f") for kAvx512, target("avx2") for kAvx2 and the baseline for kScalar, the
// strings of the target_clones they had. The avx512f copies of Dot and Axpy contract the
// multiply-adds into FMAs (AVX-512F has them, and GCC contracts by default); the others do not,
// so those two round differently under kAvx512 than under kAvx2 and kScalar.
namespace {

template <Isa>
DI_ALWAYS_INLINE float DotBody(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums so the loop vectorizes without -ffast-math reassociation.
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int k = 0; k < 16; ++k) s += acc[k];
  return s;
}

template <Isa>
DI_ALWAYS_INLINE void AxpyBody(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// DotBody for kDotGroup rows at once: each row's 16 partial sums, tail and final sum are
// DotBody's, in its order, so the results are its bits; the rows' chains of multiply-adds are
// independent and overlap, where one Dot call waits on its single chain. The 16 partial sums are
// a 16-float vector: one zmm register in the AVX-512 copy, where GCC contracts the multiply-add
// into an FMA as it does Dot's loop, and two or four registers in the others (multiply, then add:
// their targets have no FMA). OpsTest.DotRowsAndWeightedSumRowsGiveTheCallsBits checks the bits.
constexpr int kDotGroup = 4;
typedef float V16 __attribute__((vector_size(64)));

template <Isa isa>
DI_ALWAYS_INLINE void DotRowsBody(const float* a, int64_t rows, int64_t a_stride, const float* b,
                                  int64_t n, float* out, int64_t out_stride) {
  int64_t r = 0;
  for (; r + kDotGroup <= rows; r += kDotGroup) {
    const float* ar[kDotGroup];
    for (int h = 0; h < kDotGroup; ++h) ar[h] = a + (r + h) * a_stride;
    V16 acc[kDotGroup] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const V16 bi = LoadV<V16>(b + i);
      for (int h = 0; h < kDotGroup; ++h) acc[h] += LoadV<V16>(ar[h] + i) * bi;
    }
    for (int h = 0; h < kDotGroup; ++h) {
      float s = 0;
      for (int64_t j = i; j < n; ++j) s += ar[h][j] * b[j];
      for (int k = 0; k < 16; ++k) s += acc[h][k];
      out[(r + h) * out_stride] = s;
    }
  }
  for (; r < rows; ++r) out[r * out_stride] = DotBody<isa>(a + r * a_stride, b, n);
}

// AxpyBody over the vectors x[0..n) in order, for kDotGroup rows of y at once, a block of 16
// columns held in registers while every x passes: each element takes the same multiply-adds in
// the same order as n AxpyBody calls, without storing and reloading y between them.
template <Isa>
DI_ALWAYS_INLINE void WeightedSumRowsBody(const float* w, int64_t w_stride,
                                          const float* const* x, int64_t n, float* y,
                                          int64_t rows, int64_t y_stride, int64_t dim) {
  int64_t h = 0;
  for (; h + kDotGroup <= rows; h += kDotGroup) {
    float* yr[kDotGroup];
    const float* wr[kDotGroup];
    for (int g = 0; g < kDotGroup; ++g) {
      yr[g] = y + (h + g) * y_stride;
      wr[g] = w + (h + g) * w_stride;
    }
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      V16 acc[kDotGroup];
      for (int g = 0; g < kDotGroup; ++g) acc[g] = LoadV<V16>(yr[g] + i);
      for (int64_t e = 0; e < n; ++e) {
        const V16 xe = LoadV<V16>(x[e] + i);
        for (int g = 0; g < kDotGroup; ++g) acc[g] += wr[g][e] * xe;
      }
      for (int g = 0; g < kDotGroup; ++g) StoreV(yr[g] + i, acc[g]);
    }
    for (int g = 0; g < kDotGroup; ++g) {
      for (int64_t e = 0; e < n; ++e) {
        for (int64_t j = i; j < dim; ++j) yr[g][j] += wr[g][e] * x[e][j];
      }
    }
  }
  for (; h < rows; ++h) {
    for (int64_t e = 0; e < n; ++e) {
      const float wg = w[h * w_stride + e];
      for (int64_t j = 0; j < dim; ++j) y[h * y_stride + j] += wg * x[e][j];
    }
  }
}

template <Isa>
DI_ALWAYS_INLINE void AddInPlaceBody(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <Isa>
DI_ALWAYS_INLINE void RmsNormBody(const float* x, const float* weight, int64_t num_rows,
                                  int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    float* orow = out + r * dim;
    // Squares rounded to float, summed in double: ggml-cpu's rms_norm (ops.cpp), which this
    // matches bit for bit, as the rest of the formula.
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i] * xr[i]);
    float scale = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) orow[i] = weight[i] * (xr[i] * scale);
  }
}

template <Isa>
DI_ALWAYS_INLINE int32_t ArgMaxBody(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

#define DI_OPS_DISPATCH(RET, NAME, PARAMS, ARGS) \
  DI_ISA_DISPATCH(internal::VectorLoopIsa(), "avx512f", "avx2", RET, NAME, PARAMS, ARGS)

DI_OPS_DISPATCH(float, Dot, (const float* a, const float* b, int64_t n), (a, b, n))
DI_OPS_DISPATCH(void, Axpy, (float a, const float* x, float* y, int64_t n), (a, x, y, n))
DI_OPS_DISPATCH(void, DotRows,
                (const float* a, int64_t rows, int64_t a_stride, const float* b, int64_t n,
                 float* out, int64_t out_stride),
                (a, rows, a_stride, b, n, out, out_stride))
DI_OPS_DISPATCH(void, WeightedSumRows,
                (const float* w, int64_t w_stride, const float* const* x, int64_t n, float* y,
                 int64_t rows, int64_t y_stride, int64_t dim),
                (w, w_stride, x, n, y, rows, y_stride, dim))
DI_OPS_DISPATCH(void, AddInPlace, (float* y, const float* x, int64_t n), (y, x, n))
DI_OPS_DISPATCH(void, RmsNorm,
                (const float* x, const float* weight, int64_t num_rows, int64_t dim, float eps,
                 float* out),
                (x, weight, num_rows, dim, eps, out))
DI_OPS_DISPATCH(int32_t, ArgMax, (const float* x, int64_t n), (x, n))

void RopeTables(const int32_t* positions, int64_t num_tokens, int rope_dim, float theta,
                float* cos_out, float* sin_out) {
  int half = rope_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(static_cast<double>(theta), -2.0 * i / rope_dim);
      double angle = static_cast<double>(positions[t]) * freq;
      cos_out[t * half + i] = static_cast<float>(std::cos(angle));
      sin_out[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int rope_dim,
               tensor::RopeStyle style, const float* cos_t, const float* sin_t) {
  int half = rope_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      if (style == tensor::RopeStyle::kAdjacentPairs) {
        for (int i = 0; i < half; ++i) {
          float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = a * s[i] + b * c[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = a * s[i] + b * c[i];
        }
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void EmbeddingLookup(const tensor::TensorView& table, const int32_t* ids, int64_t num_tokens,
                     float* out) {
  int64_t hidden = table.cols();
  for (int64_t t = 0; t < num_tokens; ++t) {
    DequantizeRow(table.dtype, table.row(ids[t]), out + t * hidden, hidden);
  }
}

float SoftmaxInPlace(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return mx;
}

}  // namespace deepinfer::kernels
