#include "arch/deepseek_v4_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/block_scales.h"
#include "model/fp8.h"
#include "model/tensor_values.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch::dsv4 {

void UnweightedRmsNorm(const float* x, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xs = x + r * dim;
    float acc = 0;
    for (int64_t i = 0; i < dim; ++i) acc += xs[i] * xs[i];
    const float rs = 1.0f / std::sqrt(acc / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = xs[i] * rs;
  }
}

void RopeAt(const std::vector<float>& inv_freq, float mscale, int32_t position, float* cos,
            float* sin) {
  const float p = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = inv_freq[i] * p;
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * mscale;
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * mscale;
  }
}

void RopeInterleaved(float* x, const float* c, const float* s, int half, bool inverse) {
  const float sign = inverse ? -1.0f : 1.0f;
  for (int i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c[i] - b * (sign * s[i]);
    x[2 * i + 1] = b * c[i] + a * (sign * s[i]);
  }
}

void HcCoefficients(const float* m, const float* base, const float* scale, int hc, float hc_eps,
                    int sinkhorn_iters, float* pre, float* post, float* comb) {
  for (int j = 0; j < hc; ++j) {
    pre[j] = 1.0f / (1.0f + std::exp(-(m[j] * scale[0] + base[j]))) + hc_eps;
    post[j] = 2.0f / (1.0f + std::exp(-(m[hc + j] * scale[1] + base[hc + j])));
  }
  for (int j = 0; j < hc; ++j) {
    float* row = comb + j * hc;
    for (int k = 0; k < hc; ++k) row[k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
    kernels::SoftmaxInPlace(row, hc);
    for (int k = 0; k < hc; ++k) row[k] += hc_eps;
  }
  auto col_norm = [&] {
    for (int k = 0; k < hc; ++k) {
      float sum = 0;
      for (int j = 0; j < hc; ++j) sum += comb[j * hc + k];
      for (int j = 0; j < hc; ++j) comb[j * hc + k] /= sum + hc_eps;
    }
  };
  col_norm();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      float sum = 0;
      for (int k = 0; k < hc; ++k) sum += comb[j * hc + k];
      for (int k = 0; k < hc; ++k) comb[j * hc + k] /= sum + hc_eps;
    }
    col_norm();
  }
}

void HcCollapse(const float* streams, const float* pre, int hc, int64_t H, float* out) {
  for (int64_t i = 0; i < H; ++i) {
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += pre[j] * streams[j * H + i];
    out[i] = acc;
  }
}

void HcExpand(const float* streams, const float* y, const float* post, const float* comb, int hc,
              int64_t H, float* out) {
  for (int k = 0; k < hc; ++k) {
    float* d = out + k * H;
    for (int64_t i = 0; i < H; ++i) {
      float acc = post[k] * y[i];
      for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * streams[j * H + i];
      d[i] = acc;
    }
  }
}

void AttendSharedKv(const float* q, int64_t heads, const float* const* keys, int64_t n,
                    int64_t dim, float scale, const float* sinks, float* scratch, float* out) {
  // Entry-major: each shared key/value is read once for all heads while it is hot.
  for (int64_t e = 0; e < n; ++e) {
    kernels::DotRows(q, heads, dim, keys[e], dim, scratch + e, n);
    for (int64_t h = 0; h < heads; ++h) scratch[h * n + e] *= scale;
  }
  std::fill(out, out + heads * dim, 0.0f);
  for (int64_t h = 0; h < heads; ++h) {
    float* sc = scratch + h * n;
    float mx = sinks[h];
    for (int64_t e = 0; e < n; ++e) mx = std::max(mx, sc[e]);
    float den = std::exp(sinks[h] - mx);
    for (int64_t e = 0; e < n; ++e) {
      sc[e] = std::exp(sc[e] - mx);
      den += sc[e];
    }
    for (int64_t e = 0; e < n; ++e) sc[e] /= den;
  }
  kernels::WeightedSumRows(scratch, n, keys, n, out, heads, dim, dim);
}

float SqrtSoftplus(float x) {
  const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
  return std::sqrt(sp);
}

void SelectExperts(const float* score, const float* bias, int E, int K, std::vector<int>& order,
                   int32_t* idx) {
  order.resize(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) order[e] = e;
  auto choice = [&](int e) { return score[e] + bias[e]; };
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
    const float ca = choice(a), cb = choice(b);
    return ca > cb || (ca == cb && a < b);
  });
  for (int k = 0; k < K; ++k) idx[k] = order[k];
}

void HcReplicate(const float* h, int64_t T, int64_t hc, int64_t H, float* streams) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hc; ++j) {
      std::memcpy(streams + (t * hc + j) * H, h + t * H, H * sizeof(float));
    }
  }
}

using util::Grow;

void GroupedOutput(const tensor::TensorView* wo_a_groups, const tensor::TensorView& wo_b,
                   int64_t groups, int64_t olr, const float* attn, int64_t T, int64_t w,
                   Scratch& scratch, float* out, util::ThreadPool& pool) {
  const int64_t gin = w / groups;
  // Groups per batch: all of them for a decode step; for a long prefill chunk one at a time, so
  // the copies of the groups' inputs stay one group's size.
  constexpr int64_t kBatchTokens = 64;
  const int64_t per_batch = std::clamp<int64_t>(kBatchTokens / std::max<int64_t>(T, 1), 1, groups);
  Grow(scratch.a, per_batch * T * gin);
  Grow(scratch.b, per_batch * T * olr);
  Grow(scratch.c, T * groups * olr);
  for (int64_t g0 = 0; g0 < groups; g0 += per_batch) {
    const int64_t g1 = std::min(groups, g0 + per_batch);
    scratch.jobs.clear();
    for (int64_t g = g0; g < g1; ++g) {
      float* in = scratch.a.data() + (g - g0) * T * gin;
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(in + t * gin, attn + t * w + g * gin, gin * sizeof(float));
      scratch.jobs.push_back({&wo_a_groups[g], in, T, scratch.b.data() + (g - g0) * T * olr});
    }
    kernels::MatMulBatch(scratch.jobs.data(), static_cast<int>(g1 - g0), pool);
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(scratch.c.data() + t * groups * olr + g * olr,
                    scratch.b.data() + ((g - g0) * T + t) * olr, olr * sizeof(float));
      }
    }
  }
  kernels::MatMul(wo_b, scratch.c.data(), T, out, pool);
}

void FakeQuantFp8(float* x, int64_t n, int64_t block, float amax_floor) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = amax_floor;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = tensor::PowerOfTwoCeilExponent(amax * (1.0f / 448.0f));
    // Products with normal powers of two (e is within [-126, 121] here): each rounds once, as
    // ldexp does, so the bits are ldexp's, without its libm call per element (3% of a V4
    // prefill profile).
    const float down = std::ldexp(1.0f, -e), up = std::ldexp(1.0f, e);
    for (int64_t i = b0; i < b1; ++i)
      x[i] = tensor::Fp8E4M3ToFp32(tensor::Fp32ToFp8E4M3(x[i] * down)) * up;
  }
}

void FakeQuantFp4(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = 6.0f * std::ldexp(1.0f, -126);
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = tensor::PowerOfTwoCeilExponent(amax * (1.0f / 6.0f));
    const float down = std::ldexp(1.0f, -e), up = std::ldexp(1.0f, e);  // as in FakeQuantFp8
    for (int64_t i = b0; i < b1; ++i) {
      const float v = std::clamp(x[i] * down, -6.0f, 6.0f);
      x[i] = tensor::Fp4E2M1ToFp32(tensor::Fp32ToFp4E2M1(v)) * up;
    }
  }
}

void FakeQuantFp4E4M3Scale(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 + block <= n; b0 += block) {
    float amax = 6.0f * std::ldexp(1.0f, -9);
    for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = tensor::Fp8E4M3ToFp32(tensor::Fp32ToFp8E4M3(amax / 6.0f));
    for (int64_t i = b0; i < b0 + block; ++i) {
      const float v = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = tensor::Fp4E2M1ToFp32(tensor::Fp32ToFp4E2M1(v)) * s;
    }
  }
}

void Hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace deepinfer::arch::dsv4
