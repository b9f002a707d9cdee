// DeepSeek-V4.1's vision tower at release shapes (ViT width 1024, 16 heads of 64, SwiGLU 2816,
// patch 14, text width 4096) on random BF16 weights, against the f32 FMA peak measured in the
// same run (bench/fma_peak.h): the ViT's GFLOP/s and its fraction of that peak.
//
//   ninja -C build vision_tower_bench && build/src/arch/vision_tower_bench
//   DEEPINFER_ISA=avx2 build/src/arch/vision_tower_bench --benchmark_filter=1024
//
// BM_VisionTower/<patches per side>/<layers>: one image of side x side patches through `layers`
// ViT blocks (the release has 32), then the aligner and span rows. FLOPs counted: the linear
// layers (2 n (4 D^2 + 3 D I) per layer, plus the patch embedding and aligner) and attention
// (4 n^2 D per layer); norms, RoPE and GELU are not counted.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "arch/vision_test_model.h"
#include "arch/vision_tower.h"
#include "fma_peak.h"
#include "kernels/cpu/matmul.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {
namespace {

constexpr int64_t kD = 1024, kHeads = 16, kI = 2816, kTextDim = 4096;

void BM_VisionTower(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0)), layers = static_cast<int>(state.range(1));
  auto m = testing::InMemoryVisionModel(layers, kD, kHeads, kI, kTextDim);
  auto tower = CreateVisionTower(*m);
  if (!tower.ok()) {
    state.SkipWithError(std::string(tower.status().message()).c_str());
    return;
  }
  std::vector<float> pixels(int64_t{side} * side * 588);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 255) / 127 - 1;
  const VisionImage image{pixels.data(), side, side};
  const LlmGrid g = (*tower)->GridOf(image);
  std::vector<float> out(g.span_rows() * kTextDim);
  util::ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  (*tower)->EmbedImages({&image, 1}, out.data(), pool);  // warm-up: scratch sized
  for (auto _ : state) {
    (*tower)->EmbedImages({&image, 1}, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double n = static_cast<double>(image.num_patches()), D = kD;
  const double cells = static_cast<double>(g.num_cells());
  const double flops = layers * (2 * n * (4 * D * D + 3 * D * kI) + 4 * n * n * D) +
                       2 * n * 588 * D + 2 * cells * (9 * D * kTextDim + kTextDim * kTextDim);
  const double peak = bench::FmaPeakGflops(pool);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["fma_peak_GFLOP/s"] = peak;
  state.counters["patches"] = n;
  state.SetLabel(std::string(kernels::IsaName(kernels::ActiveIsa())) + ", " +
                 std::to_string(pool.num_threads()) + " threads");
}
// 1,024 patches through all 32 layers (the measurement); the largest image the release
// plans (93 x 93) through one layer, where attention is most of the work.
BENCHMARK(BM_VisionTower)->Args({32, 32})->Args({93, 1})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace deepinfer::arch

BENCHMARK_MAIN();
