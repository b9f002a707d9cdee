#pragma once

// The f32 FMA peak of the widest vector unit the kernels use (AVX-512 when the active ISA is,
// else AVX2): 16 independent chains of register-only FMAs per thread (enough to cover a 4-cycle
// latency on two ports), counted as 2 flops per lane. The ceiling for every f32-accumulating
// prefill kernel on this machine, measured in the same run as what is compared with it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "util/thread_pool.h"

namespace deepinfer::bench {

typedef float FmaV16 __attribute__((vector_size(64)));
typedef float FmaV8 __attribute__((vector_size(32)));

template <typename V>
__attribute__((always_inline)) inline float FmaChains(int64_t iters, float seed) {
  V acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = V{} + seed * static_cast<float>(i);
  const V a = V{} + 0.999f, b = V{} + 1e-6f;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = acc[i] * a + b;
  }
  V sum = V{};
  for (int i = 0; i < 16; ++i) sum += acc[i];
  return sum[0];
}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
__attribute__((target("avx512f,fma"), noinline)) inline float FmaChains512(int64_t n, float s) {
  return FmaChains<FmaV16>(n, s);
}
__attribute__((target("avx2,fma"), noinline)) inline float FmaChains256(int64_t n, float s) {
  return FmaChains<FmaV8>(n, s);
}
#pragma GCC diagnostic pop

// GFLOP/s of all the pool's threads at once, the best of 5 runs of about 20 ms.
inline double FmaPeakGflops(util::ThreadPool& pool) {
  const bool wide = kernels::ActiveIsa() == kernels::Isa::kAvx512;
  const int64_t iters = 1 << 22;
  std::vector<float> sink(static_cast<size_t>(pool.num_threads()) * 16);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.RunOnAll([&](int t, int) {
      sink[static_cast<size_t>(t) * 16] =
          wide ? FmaChains512(iters, 1.0f + t) : FmaChains256(iters, 1.0f + t);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = 2.0 * 16 * (wide ? 16 : 8) * static_cast<double>(iters) * pool.num_threads();
    if (sink[0] != 0) best = std::max(best, flops / s / 1e9);  // sink read: keeps the chains
  }
  return best;
}

}  // namespace deepinfer::bench
