// Benchmarks of the CPU matmul kernels on SmolLM2 shapes, the vision tower's BF16 shapes and
// DeepSeek-V4.1-sized layers in the released formats (FP8 E4M3 with 32 x 32 E8M0 scales, FP4 E2M1
// with 1 x 32).
//
//   ninja -C build-kernels matmul_bench && build-kernels/src/kernels/cpu/matmul_bench
//   DEEPINFER_ISA=avx2 build-kernels/src/kernels/cpu/matmul_bench --benchmark_filter=Decode
//
// Decode (1 token) is memory bound: the "cold" variants cycle through enough copies of the
// weight to overflow the last-level cache, as a real decode step does (the whole model streams
// once per token), and report weight GB/s; BM_MemoryRead gives the machine's read bandwidth for
// comparison. Prefill (512 tokens) is compute bound and reports GFLOP/s (2 * out * in * tokens).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include <unistd.h>

#include "fma_peak.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/index_score.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "util/thread_pool.h"

namespace deepinfer::kernels {
namespace {

using tensor::DType;

// Bytes the cold variants cycle through: twice the last-level cache (hosts here have had 32 to
// 480 MiB of L3), at least 256 MiB, so every call reads its weights from DRAM.
size_t ColdBytes() {
  static const size_t bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::max<size_t>(size_t{256} << 20, l3 > 0 ? 2 * static_cast<size_t>(l3) : 0);
  }();
  return bytes;
}

struct Weights {
  std::vector<uint8_t> bytes;  // `copies` back-to-back copies of one [out, in] weight
  std::vector<uint8_t> scales;  // block-scaled types: `copies` copies of its E8M0 scales
  int copies = 1;
  size_t one_bytes = 0;
  size_t one_scale_bytes = 0;
  int32_t scale_block_rows = 0, scale_block_cols = 0;
};

Weights MakeWeights(DType t, int64_t out, int64_t in, bool cold) {
  Weights w;
  w.one_bytes = tensor::BlockBytes(t) * static_cast<size_t>(out * in / tensor::BlockSize(t));
  if (IsBlockScaled(t)) {  // the released checkpoints' blocks: FP8 32 x 32 (V4.1), FP4 1 x 32
    w.scale_block_rows = t == DType::kF8E4M3 ? 32 : 1;
    w.scale_block_cols = 32;
    w.one_scale_bytes = static_cast<size_t>((out + w.scale_block_rows - 1) / w.scale_block_rows *
                                            (in / w.scale_block_cols));
  }
  w.copies = cold ? static_cast<int>(ColdBytes() / (w.one_bytes + w.one_scale_bytes) + 1) : 1;
  w.bytes.resize(w.one_bytes * w.copies);
  std::mt19937 rng(1);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
  if (t == DType::kF8E4M3) {  // no NaN codes
    for (auto& b : w.bytes) b = (b & 0x7f) == 0x7f ? b ^ 1 : b;
  }
  w.scales.resize(w.one_scale_bytes * w.copies);
  for (auto& b : w.scales) b = static_cast<uint8_t>(120 + rng() % 8);  // 2^-7 .. 1
  // Keep fp16 scales finite: overwrite them with 0.01 in every block.
  const size_t bb = tensor::BlockBytes(t);
  const uint16_t d = internal::FloatToHalf(0.01f);
  for (size_t off = 0; off + bb <= w.bytes.size() && IsQuantized(t); off += bb) {
    if (t == DType::kQ6_K) {
      std::memcpy(&w.bytes[off + 208], &d, 2);
    } else {
      std::memcpy(&w.bytes[off], &d, 2);
      if (t == DType::kQ4_1 || t == DType::kQ4_K) std::memcpy(&w.bytes[off + 2], &d, 2);
    }
  }
  if (t == DType::kF32) {
    auto* f = reinterpret_cast<float*>(w.bytes.data());
    for (size_t i = 0; i < w.bytes.size() / 4; ++i) f[i] = 0.01f * static_cast<float>(i % 7);
  }
  if (t == DType::kBF16) {  // random bits would be NaNs and denormals (microcode assists)
    auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
    for (size_t i = 0; i < w.bytes.size() / 2; ++i) {
      const float f = 0.01f * static_cast<float>(static_cast<int>(i % 13) - 6);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      h[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
  return w;
}

void RunMatMul(benchmark::State& state, DType t, int64_t out, int64_t in, int64_t tokens,
               bool cold, bool panels = false) {
  const int threads = static_cast<int>(state.range(0));
  util::ThreadPool pool(threads);
  Weights w = MakeWeights(t, out, in, cold);
  std::vector<float> x(static_cast<size_t>(tokens * in)), y(static_cast<size_t>(tokens * out));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tensor::TensorView view;
  view.dtype = t;
  view.shape = {out, in};
  view.size_bytes = w.one_bytes;
  view.scale_block_rows = w.scale_block_rows;
  view.scale_block_cols = w.scale_block_cols;
  int copy = 0;
  for (auto _ : state) {
    view.data = w.bytes.data() + static_cast<size_t>(copy) * w.one_bytes;
    if (!w.scales.empty()) view.scale = w.scales.data() + static_cast<size_t>(copy) * w.one_scale_bytes;
    copy = (copy + 1) % w.copies;
    if (panels) {
      MatMulPanels(view, x.data(), tokens, y.data(), pool);
    } else {
      MatMul(view, x.data(), tokens, y.data(), pool);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(IsaName(ActiveIsa()));
  if (tokens == 1) {  // the bytes a decode step reads: weights and their scales
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                            static_cast<int64_t>(w.one_bytes + w.one_scale_bytes));
  } else {
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * static_cast<double>(out * in * tokens) * static_cast<double>(state.iterations()),
        benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  }
}

void BM_Q4_1_1536x576_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kQ4_1, 1536, 576, 1, true); }
void BM_Q4_1_1536x576_DecodeHot(benchmark::State& s) { RunMatMul(s, DType::kQ4_1, 1536, 576, 1, false); }
void BM_Q4_1_576x1536_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kQ4_1, 576, 1536, 1, true); }
void BM_Q8_0_49152x576_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kQ8_0, 49152, 576, 1, true); }
void BM_Q4_1_1536x576_Prefill512(benchmark::State& s) { RunMatMul(s, DType::kQ4_1, 1536, 576, 512, false); }
void BM_Q4_1_576x1536_Prefill512(benchmark::State& s) { RunMatMul(s, DType::kQ4_1, 576, 1536, 512, false); }
void BM_Q8_0_49152x576_Prefill512(benchmark::State& s) { RunMatMul(s, DType::kQ8_0, 49152, 576, 512, false); }

BENCHMARK(BM_Q4_1_1536x576_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q4_1_1536x576_DecodeHot)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q4_1_576x1536_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q8_0_49152x576_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q4_1_1536x576_Prefill512)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q4_1_576x1536_Prefill512)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Q8_0_49152x576_Prefill512)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// DeepSeek-V4.1-sized layers in the released formats: a 4096 x 4096 attention projection in FP8
// (32 x 32 scales) and an expert's 2048 x 4096 gate/up and 4096 x 2048 down in FP4 (1 x 32).
void BM_Fp8_4096x4096_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kF8E4M3, 4096, 4096, 1, true); }
void BM_Fp4_2048x4096_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kFp4E2M1, 2048, 4096, 1, true); }
void BM_Fp4_4096x2048_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kFp4E2M1, 4096, 2048, 1, true); }
void BM_Fp8_4096x4096_DecodeHot(benchmark::State& s) { RunMatMul(s, DType::kF8E4M3, 4096, 4096, 1, false); }
void BM_Fp4_2048x4096_DecodeHot(benchmark::State& s) { RunMatMul(s, DType::kFp4E2M1, 2048, 4096, 1, false); }
// The BF16 output head of the V4.1-shaped checkpoint (vocabulary 129,280, hidden 2048): the
// largest matrix a decode step reads.
void BM_Bf16_Head129280x2048_DecodeCold(benchmark::State& s) { RunMatMul(s, DType::kBF16, 129280, 2048, 1, true); }
void BM_Fp8_4096x4096_Prefill512(benchmark::State& s) { RunMatMul(s, DType::kF8E4M3, 4096, 4096, 512, false); }
void BM_Fp4_2048x4096_Prefill512(benchmark::State& s) { RunMatMul(s, DType::kFp4E2M1, 2048, 4096, 512, false); }
BENCHMARK(BM_Fp8_4096x4096_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Fp4_2048x4096_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Fp4_4096x2048_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Fp8_4096x4096_DecodeHot)->Arg(1)->UseRealTime();
BENCHMARK(BM_Fp4_2048x4096_DecodeHot)->Arg(1)->UseRealTime();
BENCHMARK(BM_Bf16_Head129280x2048_DecodeCold)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Fp8_4096x4096_Prefill512)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fp4_2048x4096_Prefill512)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The BF16 matmuls of one release-sized ViT layer (DeepSeek-V4.1's vision tower: width 1024,
// SwiGLU 2816) on a 1,024-patch image, next to BM_FmaPeak: the tower's matmul efficiency.
void BM_Bf16_Vit_Qkv3072x1024_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 3072, 1024, 1024, false); }
void BM_Bf16_Vit_W1_5632x1024_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 5632, 1024, 1024, false); }
void BM_Bf16_Vit_W2_1024x2816_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 1024, 2816, 1024, false); }
BENCHMARK(BM_Bf16_Vit_Qkv3072x1024_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16_Vit_W1_5632x1024_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16_Vit_W2_1024x2816_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
// The same shapes through MatMulPanels, which the vision tower uses.
void BM_Bf16Panels_Vit_Qkv3072x1024_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 3072, 1024, 1024, false, true); }
void BM_Bf16Panels_Vit_W1_5632x1024_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 5632, 1024, 1024, false, true); }
void BM_Bf16Panels_Vit_W2_1024x2816_Prefill1024(benchmark::State& s) { RunMatMul(s, DType::kBF16, 1024, 2816, 1024, false, true); }
BENCHMARK(BM_Bf16Panels_Vit_Qkv3072x1024_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16Panels_Vit_W1_5632x1024_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16Panels_Vit_W2_1024x2816_Prefill1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// One head of the vision tower's attention (head_dim 64, every patch attends every patch) over
// n patches, single-threaded: GFLOP/s counts 4 * n^2 * head_dim (Q·K and P·V).
void BM_DenseAttentionHead64(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), D = 64, rows = 64;
  std::vector<float> qkv(static_cast<size_t>(n) * 3 * D);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  for (auto& v : qkv) v = normal(rng);
  std::vector<float> packed(DensePackedFloats(n, D)), out(static_cast<size_t>(n) * D);
  std::vector<float> scratch(DenseAttendScratchFloats(rows, D));
  for (auto _ : state) {
    PackDenseKv(qkv.data() + D, qkv.data() + 2 * D, 3 * D, n, D, packed.data());
    for (int r0 = 0; r0 < n; r0 += rows) {
      DenseAttend(qkv.data() + int64_t{r0} * 3 * D, 3 * D, std::min(rows, n - r0), packed.data(), n,
                  D, 0.125f, scratch.data(), out.data() + int64_t{r0} * D, D);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(IsaName(ActiveIsa()));
  state.counters["GFLOP/s"] = benchmark::Counter(
      4.0 * n * n * D * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DenseAttentionHead64)->Arg(1024)->Arg(8649)->UseRealTime()->Unit(benchmark::kMillisecond);

// The decode attention of the paged cache (kernels::AttendRange, what Llama-style models run
// every step): one token, 4 query heads sharing one KV head of head_dim 64 (GQA), over arg
// positions of an f32 cache in 16-position blocks, single-threaded. GB/s counts the K and V bytes
// read; which ISA's copy runs follows DEEPINFER_ISA.
void BM_PagedAttendDecodeGqa4Head64(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), D = 64, group = 4;
  GqaKvLayout layout;
  layout.block_size = 16;
  layout.num_kv_heads = 1;
  layout.head_dim = D;
  const int blocks = (n + layout.block_size - 1) / layout.block_size;
  std::vector<float> cache(static_cast<size_t>(blocks * layout.block_values()));
  std::vector<float> q(static_cast<size_t>(group) * D);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto& v : cache) v = normal(rng);
  for (auto& v : q) v = normal(rng);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[b] = blocks - 1 - b;  // not in address order
  AttentionQuery query;
  query.q = q.data();
  query.token_stride = int64_t{group} * D;
  query.first_pos = n - 1;
  query.group = group;
  query.scale = 0.125f;
  std::vector<float> scratch(AttentionScratchFloats(layout, query.rows()));
  std::vector<float> o(static_cast<size_t>(group) * D), m(group), l(group);
  const AttentionPartial out{o.data(), m.data(), l.data()};
  for (auto _ : state) {
    AttendRange(layout, cache.data(), table.data(), query, 0, n, scratch.data(), out);
    benchmark::DoNotOptimize(o.data());
  }
  state.SetLabel(IsaName(ActiveIsa()));
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * n * D * sizeof(float) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PagedAttendDecodeGqa4Head64)->Arg(1024)->Arg(8192)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The lightning indexer's scores over a DeepSeek-V4.1-shaped cache (32 heads of 128, one
// ratio-1 index source: 640-float entries, the index key after the 512-float compressed entry, in
// blocks of 16 slots not in address order), for arg 0 keys and arg 1 tokens (1: a decode step,
// 16: one prefill tile), single-threaded. Arg 2 picks the path: 1 scores in place
// (kernels::IndexScores, what LightningIndexer::Score runs without QAT numerics), 2 the same over
// FP4 keys and queries packed in place (kernels::IndexScoresFp4, what it runs under DeepSeek's QAT
// numerics), 0 the earlier path kept here as the reference: gather the keys into a dense matrix,
// MatMul, then sum the heads per entry. GB/s counts the float key bytes a step needs (each key
// once), for every path alike, so that it compares their speeds.
void BM_IndexScoreV41(benchmark::State& state) {
  const int64_t V = state.range(0);
  const int n = static_cast<int>(state.range(1));
  const int path = static_cast<int>(state.range(2));
  const bool in_place = path != 0, fp4 = path == 2;
  const int ih = 32, ihd = 128, bs = 16;
  const int64_t slot = 640, off = 512, blocks = (V + bs - 1) / bs;
  std::vector<float> cache(static_cast<size_t>(blocks * bs * slot));
  std::vector<float> q(static_cast<size_t>(n) * ih * ihd), w(static_cast<size_t>(n) * ih);
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  for (auto& v : cache) v = normal(rng);
  for (auto& v : q) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
  auto key = [&](int64_t j) { return cache.data() + (table[j / bs] * bs + j % bs) * slot + off; };
  if (fp4) {
    // FP4 E2M1 values with a power-of-two scale per 32 (as FakeQuantFp4 leaves them), the keys
    // packed in place.
    std::uniform_int_distribution<int> code(0, 15), exp(-2, 2);
    auto fp4_values = [&](float* x, int64_t count) {
      int e = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (i % 32 == 0) e = exp(rng);
        const int c = code(rng);
        x[i] = std::ldexp(tensor::Fp4E2M1ToFp32(static_cast<uint8_t>(c)), e);
      }
    };
    fp4_values(q.data(), static_cast<int64_t>(q.size()));
    for (int64_t j = 0; j < V; ++j) {
      float* k = key(j);
      fp4_values(k, ihd);
      PackFp4IndexKey(k, ihd, reinterpret_cast<uint8_t*>(k));
    }
  }
  auto key_fp4 = [&](int64_t j) { return reinterpret_cast<const uint8_t*>(key(j)); };
  const float qscale = 1.0f / std::sqrt(static_cast<float>(ihd));
  util::ThreadPool pool(1);
  std::vector<float> score(static_cast<size_t>(n) * V);
  // The in-place path's packed queries; the reference's dense keys and per-head scores.
  const int64_t qf = fp4 ? IndexQueryFp4Floats(ih, ihd) : IndexQueryFloats(ih, ihd);
  std::vector<float> packed(static_cast<size_t>(n * qf));
  std::vector<float> dense, heads;
  if (!in_place) {
    dense.resize(static_cast<size_t>(V * ihd));
    heads.resize(static_cast<size_t>(n) * ih * V);
  }
  for (auto _ : state) {
    if (fp4) {
      for (int i = 0; i < n; ++i) {
        PackIndexQueryFp4(q.data() + int64_t{i} * ih * ihd, w.data() + i * ih, qscale, ih, ihd,
                          packed.data() + i * qf);
      }
      for (int64_t j = 0; j < V; j += bs) {
        const bool last = j + bs >= V;
        IndexScoresFp4(packed.data(), n, ih, ihd, key_fp4(j), slot * 4,
                       std::min<int64_t>(bs, V - j), score.data() + j, V,
                       last ? nullptr : key_fp4(j + bs),
                       last ? 0 : std::min<int64_t>(bs, V - j - bs));
      }
    } else if (in_place) {
      for (int i = 0; i < n; ++i) {
        PackIndexQuery(q.data() + int64_t{i} * ih * ihd, w.data() + i * ih, qscale, ih, ihd,
                       packed.data() + i * qf);
      }
      for (int64_t j = 0; j < V; j += bs) {
        const bool last = j + bs >= V;
        IndexScores(packed.data(), n, ih, ihd, key(j), slot, std::min<int64_t>(bs, V - j),
                    score.data() + j, V, last ? nullptr : key(j + bs),
                    last ? 0 : std::min<int64_t>(bs, V - j - bs));
      }
    } else {
      for (int64_t j = 0; j < V; ++j) std::memcpy(dense.data() + j * ihd, key(j), ihd * 4);
      tensor::TensorView keys;
      keys.dtype = DType::kF32;
      keys.shape = {V, ihd};
      keys.data = reinterpret_cast<const uint8_t*>(dense.data());
      keys.size_bytes = dense.size() * sizeof(float);
      MatMul(keys, q.data(), int64_t{n} * ih, heads.data(), pool);
      for (int i = 0; i < n; ++i) {
        float* s = score.data() + i * V;
        std::fill(s, s + V, 0.0f);
        for (int h = 0; h < ih; ++h) {
          const float* row = heads.data() + (int64_t{i} * ih + h) * V;
          const float wh = w[i * ih + h];
          for (int64_t j = 0; j < V; ++j) s[j] += std::max(row[j], 0.0f) * qscale * wh;
        }
      }
    }
    benchmark::DoNotOptimize(score.data());
  }
  state.SetLabel(std::string(fp4        ? "in place, FP4 packed "
                             : in_place ? "in place "
                                        : "gather+matmul ") +
                 IsaName(ActiveIsa()));
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(V) * ihd * sizeof(float) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_IndexScoreV41)
    ->ArgsProduct({{4096, 65536}, {1, 16}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  util::ThreadPool pool(threads);
  for (auto _ : state) state.SetIterationTime(0);  // the measurement is FmaPeakGflops' own
  state.SetLabel(ActiveIsa() == Isa::kAvx512 ? "avx512" : "avx2");
  state.counters["GFLOP/s"] = bench::FmaPeakGflops(pool);
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseManualTime()->Iterations(1);

// Plain streaming read of ColdBytes() on 1 or 2 threads: the bandwidth ceiling for decode.
void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  util::ThreadPool pool(threads);
  std::vector<uint64_t> buf(ColdBytes() / 8, 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);
  for (auto _ : state) {
    pool.RunOnAll([&](int t, int nt) {
      const size_t n = buf.size(), b = n * t / nt, e = n * (t + 1) / nt;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      sums[static_cast<size_t>(t) * 8] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(ColdBytes()));
}
BENCHMARK(BM_MemoryRead)->Arg(1)->Arg(2)->UseRealTime();

// Every matmul of one SmolLM2-135M forward pass (30 layers x q, k, v, o, gate, up, down, plus the
// tied Q8_0 output projection) on the real weights, for `tokens` tokens. Tensor offsets come
// from the dequantization golden, so no GGUF reader is needed here.
void RunSmolLm2(benchmark::State& state, int64_t tokens) {
  const char* cache = std::getenv("DEEPINFER_CACHE");
  const std::string root = cache != nullptr ? cache : std::string(std::getenv("HOME")) + "/.cache/deepinfer";
  auto file = util::MappedFile::Open(root + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  auto golden = util::ReadFile(std::string(DI_SOURCE_DIR) + "/tests/golden/dequant/smollm2_q4_1.json");
  if (!file.ok() || !golden.ok()) {
    state.SkipWithError("SmolLM2 model or golden not found");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(*golden, nullptr, false);
  std::vector<tensor::TensorView> views;
  int64_t max_in = 0, max_out = 0;
  size_t bytes = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    if (t["shape"].size() != 2) continue;
    tensor::TensorView v;
    v.name = name;
    v.dtype = static_cast<DType>(t["ggml_type"].get<int>());
    v.shape = {t["shape"][0].get<int64_t>(), t["shape"][1].get<int64_t>()};
    v.data = (*file)->data() + t["offset"].get<size_t>();
    v.size_bytes = t["n_bytes"].get<size_t>();
    max_out = std::max(max_out, v.shape[0]);
    max_in = std::max(max_in, v.shape[1]);
    bytes += v.size_bytes;
    views.push_back(std::move(v));
  }
  util::ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> x(static_cast<size_t>(tokens * max_in), 0.5f);
  std::vector<float> y(static_cast<size_t>(tokens * max_out));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  for (auto _ : state) {
    for (const auto& v : views) MatMul(v, x.data(), tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(IsaName(ActiveIsa())) + ", " + std::to_string(views.size()) + " matmuls");
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens * state.iterations()),
                                               benchmark::Counter::kIsRate);
  if (tokens == 1) {
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  }
}
void BM_SmolLm2Decode(benchmark::State& s) { RunSmolLm2(s, 1); }
void BM_SmolLm2Prefill512(benchmark::State& s) { RunSmolLm2(s, 512); }
BENCHMARK(BM_SmolLm2Decode)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SmolLm2Prefill512)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deepinfer::kernels

BENCHMARK_MAIN();
