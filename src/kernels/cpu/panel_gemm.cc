// MatMulPanels: float weights widened into f32 panels, then register-tiled outer products.
//
// Source: Goto & van de Geijn 2008, "Anatomy of High-Performance Matrix Multiplication" (packed
// panels, a micro-kernel of MR x NR accumulators kept in registers); Van Zee & van de Geijn 2015,
// "BLIS" (the loop order around the micro-kernel).

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/half.h"
#include "kernels/cpu/vector_ext.h"
#include "kernels/cpu/matmul.h"

// The vector types are GCC vector extensions, compiled once per ISA below (target attributes),
// so one binary runs everywhere; the helpers take them by value but are always inlined.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace deepinfer::kernels {
namespace {

#define DI_INLINE inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

// k per panel: a panel of 2 vectors x kKc floats stays in L1 while every token of a token block
// streams past it.
constexpr int kKc = 256;
// Tokens per token block: their kKc-wide slice of x (1.5 MiB) stays in L2 across the panels.
constexpr int64_t kTokenBlock = 1536;
// Tokens per micro-kernel call: 6 tokens x 2 vectors = 12 accumulators, plus the two panel
// vectors and a broadcast: within the 16 registers of AVX2 and SSE as well as AVX-512's 32.
constexpr int kNr = 6;

using internal::LoadV;
using internal::StoreV;

// Widens rows [o0, o0 + rows) x columns [k0, k0 + kc) of w into panel[k][o - o0] (mr floats per
// k; rows past `rows` are zero).
DI_INLINE void WidenPanel(const tensor::TensorView& w, int64_t o0, int rows, int64_t k0, int kc,
                          int mr, float* panel) {
  const int64_t K = w.shape[1];
  for (int r = 0; r < mr; ++r) {
    float* dst = panel + r;
    if (r >= rows) {
      for (int k = 0; k < kc; ++k) dst[int64_t{k} * mr] = 0.0f;
      continue;
    }
    const int64_t row = (o0 + r) * K + k0;
    switch (w.dtype) {
      case tensor::DType::kBF16: {
        const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data) + row;
        for (int k = 0; k < kc; ++k) dst[int64_t{k} * mr] = internal::BitsToFloat(uint32_t{src[k]} << 16);
        break;
      }
      case tensor::DType::kF16: {
        const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data) + row;
        for (int k = 0; k < kc; ++k) dst[int64_t{k} * mr] = internal::HalfToFloat(src[k]);
        break;
      }
      default: {  // kF32
        const float* src = reinterpret_cast<const float*>(w.data) + row;
        for (int k = 0; k < kc; ++k) dst[int64_t{k} * mr] = src[k];
        break;
      }
    }
  }
}

// y[t][o0 .. o0 + rows) (+)= sum over k of x[t][k0 + k] * panel[k][.] for NR tokens from t0.
template <typename V, int NR>
DI_INLINE void MicroKernel(const float* panel, int kc, const float* x, int64_t K, int64_t k0,
                           int64_t t0, float* y, int64_t O, int64_t o0, int rows, bool first) {
  constexpr int L = sizeof(V) / sizeof(float);
  V acc[NR][2];
  float tmp[2 * L];
  for (int i = 0; i < NR; ++i) {
    float* yt = y + (t0 + i) * O + o0;
    if (first) {
      acc[i][0] = acc[i][1] = V{};
    } else if (rows == 2 * L) {
      acc[i][0] = LoadV<V>(yt);
      acc[i][1] = LoadV<V>(yt + L);
    } else {
      std::memcpy(tmp, yt, sizeof(float) * rows);
      acc[i][0] = LoadV<V>(tmp);
      acc[i][1] = LoadV<V>(tmp + L);
    }
  }
  const float* xt = x + t0 * K + k0;
  for (int k = 0; k < kc; ++k) {
    const V w0 = LoadV<V>(panel + k * 2 * L), w1 = LoadV<V>(panel + k * 2 * L + L);
    for (int i = 0; i < NR; ++i) {
      const float xv = xt[i * K + k];
      acc[i][0] += xv * w0;
      acc[i][1] += xv * w1;
    }
  }
  for (int i = 0; i < NR; ++i) {
    float* yt = y + (t0 + i) * O + o0;
    if (rows == 2 * L) {
      StoreV(yt, acc[i][0]);
      StoreV(yt + L, acc[i][1]);
    } else {
      StoreV(tmp, acc[i][0]);
      StoreV(tmp + L, acc[i][1]);
      std::memcpy(yt, tmp, sizeof(float) * rows);
    }
  }
}

template <typename V, int NR>
DI_INLINE void TokenTail(const float* panel, int kc, const float* x, int64_t K, int64_t k0,
                         int64_t t0, int n, float* y, int64_t O, int64_t o0, int rows, bool first) {
  if constexpr (NR > 0) {
    if (n == NR) return MicroKernel<V, NR>(panel, kc, x, K, k0, t0, y, O, o0, rows, first);
    TokenTail<V, NR - 1>(panel, kc, x, K, k0, t0, n, y, O, o0, rows, first);
  }
}

// Output panels [p_begin, p_end) of 2L rows each, for every token.
template <typename V>
DI_INLINE void PanelRange(const tensor::TensorView& w, const float* x, int64_t T, float* y,
                          int64_t p_begin, int64_t p_end) {
  constexpr int L = sizeof(V) / sizeof(float), MR = 2 * L;
  const int64_t O = w.shape[0], K = w.shape[1];
  alignas(64) float panel[kKc * MR];
  for (int64_t tb = 0; tb < T; tb += kTokenBlock) {
    const int64_t te = std::min(T, tb + kTokenBlock);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int kc = static_cast<int>(std::min<int64_t>(kKc, K - k0));
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int64_t o0 = p * MR;
        const int rows = static_cast<int>(std::min<int64_t>(MR, O - o0));
        WidenPanel(w, o0, rows, k0, kc, MR, panel);
        int64_t t = tb;
        for (; t + kNr <= te; t += kNr) {
          MicroKernel<V, kNr>(panel, kc, x, K, k0, t, y, O, o0, rows, k0 == 0);
        }
        if (t < te) {
          TokenTail<V, kNr - 1>(panel, kc, x, K, k0, t, static_cast<int>(te - t), y, O, o0, rows,
                                k0 == 0);
        }
      }
    }
  }
}

using PanelRangeFn = void (*)(const tensor::TensorView&, const float*, int64_t, float*, int64_t,
                              int64_t);

#if defined(DI_KERNELS_X86)
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma,f16c"))) void PanelRangeAvx512(
    const tensor::TensorView& w, const float* x, int64_t T, float* y, int64_t pb, int64_t pe) {
  PanelRange<v16>(w, x, T, y, pb, pe);
}
__attribute__((target("avx2,fma,f16c"))) void PanelRangeAvx2(const tensor::TensorView& w,
                                                             const float* x, int64_t T, float* y,
                                                             int64_t pb, int64_t pe) {
  PanelRange<v8>(w, x, T, y, pb, pe);
}
#endif
void PanelRangePortable(const tensor::TensorView& w, const float* x, int64_t T, float* y,
                        int64_t pb, int64_t pe) {
  PanelRange<v4>(w, x, T, y, pb, pe);
}

}  // namespace

bool MatMulPanelsSupports(tensor::DType dtype) {
  return dtype == tensor::DType::kF32 || dtype == tensor::DType::kF16 ||
         dtype == tensor::DType::kBF16;
}

void MatMulPanels(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                  util::ThreadPool& pool) {
  PanelRangeFn fn = PanelRangePortable;
  int lanes = 4;
#if defined(DI_KERNELS_X86)
  if (ActiveIsa() == Isa::kAvx512) fn = PanelRangeAvx512, lanes = 16;
  if (ActiveIsa() == Isa::kAvx2) fn = PanelRangeAvx2, lanes = 8;
#endif
  const int64_t panels = (w.shape[0] + 2 * lanes - 1) / (2 * lanes);
  pool.ParallelFor(panels, [&](int64_t begin, int64_t end, int) {
    fn(w, x, num_tokens, y, begin, end);
  });
}

}  // namespace deepinfer::kernels
