#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "tensor/tensor.h"
#include "util/status.h"

namespace deepinfer::kernels {
namespace {

using internal::FloatToHalf;
using internal::HalfToFloat;
using tensor::DType;
using tensor::kQK_K;

// Every product below is rounded on its own (no fused multiply-add) because the reference
// (numpy in the gguf package) rounds each operation; this file is built without FMA
// instructions, so GCC cannot contract them, and the explicit temporaries keep the order of
// operations that of ggml.

void DequantizeQ4_0(const tensor::BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = HalfToFloat(b[i].d);
    for (int j = 0; j < 16; ++j) {
      const int x0 = (b[i].qs[j] & 0x0f) - 8;
      const int x1 = (b[i].qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + 16] = static_cast<float>(x1) * d;
    }
  }
}

void DequantizeQ4_1(const tensor::BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = HalfToFloat(b[i].d);
    const float m = HalfToFloat(b[i].m);
    for (int j = 0; j < 16; ++j) {
      const float p0 = static_cast<float>(b[i].qs[j] & 0x0f) * d;
      const float p1 = static_cast<float>(b[i].qs[j] >> 4) * d;
      y[j] = p0 + m;
      y[j + 16] = p1 + m;
    }
  }
}

void DequantizeQ8_0(const tensor::BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = HalfToFloat(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void DequantizeQ4_K(const tensor::BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = HalfToFloat(b[i].d);
    const float dmin = HalfToFloat(b[i].dmin);
    uint8_t sc[8], m[8];
    internal::UnpackQ4KScales(b[i].scales, sc, m);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 4; ++j, q += 32) {
      const float d1 = d * static_cast<float>(sc[2 * j]), m1 = dmin * static_cast<float>(m[2 * j]);
      const float d2 = d * static_cast<float>(sc[2 * j + 1]);
      const float m2 = dmin * static_cast<float>(m[2 * j + 1]);
      for (int l = 0; l < 32; ++l) {
        const float p = d1 * static_cast<float>(q[l] & 0x0f);
        *y++ = p - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const float p = d2 * static_cast<float>(q[l] >> 4);
        *y++ = p - m2;
      }
    }
  }
}

void DequantizeQ6_K(const tensor::BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = HalfToFloat(b[i].d);
    float ds[16];
    for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(b[i].scales[s]);
    for (int e = 0; e < kQK_K; ++e) {
      // Element e of 128-element half h: low 4 bits from ql, high 2 bits from qh.
      const int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int lo = quarter & 1 ? ql[l + 32] : ql[l];
      const int low4 = quarter < 2 ? (lo & 0x0f) : (lo >> 4);
      const int high2 = (qh[l] >> (2 * quarter)) & 3;
      const int q = (low4 | (high2 << 4)) - 32;
      y[e] = ds[e / 16] * static_cast<float>(q);
    }
    y += kQK_K;
  }
}

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick (valid for |f| < 2^22).
inline int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

float AbsMax32(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

}  // namespace

bool HasCpuKernel(DType t) {
  return tensor::BlockSize(t) > 0 && !IsBlockScaled(t) && t != DType::kQ8_1 &&
         t != DType::kQ8_K && t != DType::kI64 && t != DType::kE8M0 && t != DType::kI8;
}

bool IsBlockScaled(DType t) { return t == DType::kF8E4M3 || t == DType::kFp4E2M1; }

bool HasCpuMatMul(const tensor::TensorView& w) {
  if (HasCpuKernel(w.dtype)) return true;
  return IsBlockScaled(w.dtype) && w.scale != nullptr && w.scale_block_rows > 0 &&
         w.scale_block_cols > 0;
}

void DequantizeScaledRow(const tensor::TensorView& w, int64_t r, float* dst) {
  DI_CHECK(HasCpuMatMul(w) && IsBlockScaled(w.dtype));
  static const auto* fp8 = [] {
    auto* t = new float[256];
    for (int b = 0; b < 256; ++b) t[b] = tensor::Fp8E4M3ToFp32(static_cast<uint8_t>(b));
    return t;
  }();
  const int64_t cols = w.cols(), bc = w.scale_block_cols;
  const int64_t scale_cols = (cols + bc - 1) / bc;
  const uint8_t* scale = w.scale + (r / w.scale_block_rows) * scale_cols;
  const uint8_t* row = w.row(r);
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += bc, ++b) {
    const float s = std::ldexp(1.0f, static_cast<int>(scale[b]) - 127);
    const int64_t c1 = std::min(cols, c0 + bc);
    if (w.dtype == DType::kF8E4M3) {
      for (int64_t c = c0; c < c1; ++c) dst[c] = fp8[row[c]] * s;
    } else {
      for (int64_t c = c0; c < c1; ++c) {
        const uint8_t code = (c & 1) ? row[c >> 1] >> 4 : row[c >> 1] & 0x0f;
        dst[c] = tensor::Fp4E2M1ToFp32(code) * s;
      }
    }
  }
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  DI_CHECK(HasCpuKernel(t));
  const int64_t bs = tensor::BlockSize(t);
  DI_CHECK(n % bs == 0);
  const int64_t nb = n / bs;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i)
        dst[i] = internal::BitsToFloat(static_cast<uint32_t>(h[i]) << 16);
      return;
    }
    case DType::kQ4_0:
      return DequantizeQ4_0(static_cast<const tensor::BlockQ4_0*>(src), dst, nb);
    case DType::kQ4_1:
      return DequantizeQ4_1(static_cast<const tensor::BlockQ4_1*>(src), dst, nb);
    case DType::kQ8_0:
      return DequantizeQ8_0(static_cast<const tensor::BlockQ8_0*>(src), dst, nb);
    case DType::kQ4_K:
      return DequantizeQ4_K(static_cast<const tensor::BlockQ4_K*>(src), dst, nb);
    case DType::kQ6_K:
      return DequantizeQ6_K(static_cast<const tensor::BlockQ6_K*>(src), dst, nb);
    default:
      DI_CHECK(false && "DequantizeRow: unsupported dtype");
  }
}

void QuantizeRowQ8_0(const float* x, tensor::BlockQ8_0* y, int64_t n) {
  DI_CHECK(n % 32 == 0);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const float d = AbsMax32(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void QuantizeRowQ8_1(const float* x, tensor::BlockQ8_1* y, int64_t n) {
  DI_CHECK(n % 32 == 0);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const float d = AbsMax32(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(std::round(x[j] * id));
      y[i].qs[j] = static_cast<int8_t>(v);
      sum += v;
    }
    y[i].s = FloatToHalf(static_cast<float>(sum) * d);
  }
}

void QuantizeRowQ8_0Cpu(const float* x, tensor::BlockQ8_0* y, int64_t n) {
  DI_CHECK(n % 32 == 0);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const float amax = AbsMax32(x);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = FloatToHalf(amax / 127.0f);
    for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

void QuantizeRowQ8_1Cpu(const float* x, tensor::BlockQ8_1* y, int64_t n) {
  DI_CHECK(n % 32 == 0);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const float amax = AbsMax32(x);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = FloatToHalf(d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(std::nearbyint(x[j] * id));
      y[i].qs[j] = static_cast<int8_t>(v);
      sum += v;
    }
    y[i].s = FloatToHalf(d * static_cast<float>(sum));
  }
}

void QuantizeRowQ8_K(const float* x, tensor::BlockQ8_K* y, int64_t n) {
  DI_CHECK(n % kQK_K == 0);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    // -127 / max (not 127 / amax): ggml maps the extreme value to -127 so that IQ kernels' AVX
    // code works; we follow it bit for bit.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestInt(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace deepinfer::kernels
