#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/thread_pool.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

// Counts global allocations so a test can check that steady-state MatMul calls make none.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Kept out of line: inlined, GCC sees free() on a pointer from operator new at every delete and
// warns -Wmismatched-new-delete.
__attribute__((noinline)) void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace deepinfer::kernels {
namespace {

using internal::FloatToHalf;
using tensor::DType;

// Local names so the test does not need model/dtype.cc.
const char* TypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_1:
      return "Q4_1";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_K:
      return "Q4_K";
    case DType::kQ6_K:
      return "Q6_K";
    case DType::kF8E4M3:
      return "FP8";
    case DType::kFp4E2M1:
      return "FP4";
    default:
      return "other";
  }
}

// Random but valid weight bytes: any bit pattern is a valid quantized value (FP8 E4M3 but its
// two NaN codes), so only the fp16 scale fields are chosen (small, positive or negative, never
// inf/NaN). Block-scaled types take their scales from RandomScales.
std::vector<uint8_t> RandomWeights(DType t, int64_t rows, int64_t cols, std::mt19937* rng) {
  const int64_t nb = rows * cols / tensor::BlockSize(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(nb) * tensor::BlockBytes(t));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(*rng));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto scale = [&](float mag) { return FloatToHalf(mag * (0.5f + 0.5f * std::fabs(unit(*rng)))); };
  auto set16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = bytes.data() + b * tensor::BlockBytes(t);
    switch (t) {
      case DType::kF32: {
        const float v = unit(*rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kF16:
        set16(p, FloatToHalf(unit(*rng)));
        break;
      case DType::kBF16: {
        const float v = unit(*rng);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        set16(p, static_cast<uint16_t>(u >> 16));
        break;
      }
      case DType::kQ4_0:
      case DType::kQ8_0:
        set16(p, scale(unit(*rng) > 0 ? 0.01f : -0.01f));
        break;
      case DType::kQ4_1:
        set16(p, scale(0.01f));
        set16(p + 2, FloatToHalf(0.08f * unit(*rng)));
        break;
      case DType::kQ4_K:
        set16(p, scale(0.002f));
        set16(p + 2, scale(0.004f));
        break;
      case DType::kQ6_K:
        set16(p + 208, scale(0.0005f));
        break;
      case DType::kF8E4M3:
        if ((*p & 0x7f) == 0x7f) *p ^= 1;
        break;
      default:
        break;
    }
  }
  return bytes;
}

// The block shapes the released checkpoints use: FP8 DeepSeek-V4.1's 32 x 32 (V4's 128 x 128
// runs in BlockScaledMatMulTest), FP4 1 x 32.
int64_t ScaleBlockRows(DType t) { return t == DType::kF8E4M3 ? 32 : 1; }
constexpr int64_t kScaleBlockCols = 32;

// E8M0 scales of a block-scaled weight, 2^-7 to 2^4 (finite products); empty for other types.
std::vector<uint8_t> RandomScales(DType t, int64_t rows, int64_t cols, std::mt19937* rng) {
  if (!IsBlockScaled(t)) return {};
  const int64_t br = ScaleBlockRows(t), bc = kScaleBlockCols;
  std::vector<uint8_t> scales(static_cast<size_t>((rows + br - 1) / br * ((cols + bc - 1) / bc)));
  for (auto& b : scales) b = static_cast<uint8_t>(120 + (*rng)() % 12);
  return scales;
}

// Whether `isa`'s kernel for `t` rounds the activations to bf16 first (FP8 / FP4 on AMX tiles,
// Avx512UsesAmx, or on VDPBF16PS, Avx512UsesBf16Dot), and the activations rounded so, for the
// reference.
bool RoundsToBf16(const tensor::TensorView& w) {
  return IsBlockScaled(w.dtype) && MatMulKernelIsa(w) == Isa::kAvx512 &&
         (Avx512UsesAmx() || Avx512UsesBf16Dot());
}
std::vector<float> Bf16Rounded(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = internal::BitsToFloat(uint32_t{tensor::Fp32ToBf16(x[i])} << 16);
  return out;
}

// Reference y[t, o] in double from dequantized weights and activations that went through the
// same activation quantization as the kernels. Returns also sum |terms| per output for the
// tolerance.
void Reference(const tensor::TensorView& w, const std::vector<float>& x, int64_t num_tokens,
               std::vector<double>* y, std::vector<double>* mag) {
  const DType t = w.dtype;
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> wd(static_cast<size_t>(cols)), xd(static_cast<size_t>(cols));
  std::vector<double> extra(static_cast<size_t>(rows * num_tokens), 0.0);
  const size_t wrow = tensor::BlockBytes(t) * static_cast<size_t>(cols / tensor::BlockSize(t));
  std::vector<uint8_t> act;
  std::vector<std::vector<float>> xq(num_tokens);
  std::vector<std::vector<uint16_t>> sums(num_tokens);  // Q8_1 s fields
  for (int64_t i = 0; i < num_tokens; ++i) {
    const float* xi = x.data() + i * cols;
    xq[i].resize(cols);
    switch (t) {
      case DType::kQ4_0:
      case DType::kQ8_0: {
        std::vector<tensor::BlockQ8_0> b(cols / 32);
        QuantizeRowQ8_0Cpu(xi, b.data(), cols);
        DequantizeRow(DType::kQ8_0, b.data(), xq[i].data(), cols);
        break;
      }
      case DType::kQ4_1: {
        std::vector<tensor::BlockQ8_1> b(cols / 32);
        QuantizeRowQ8_1Cpu(xi, b.data(), cols);
        std::vector<tensor::BlockQ8_0> b0(cols / 32);
        for (size_t k = 0; k < b.size(); ++k) {
          b0[k].d = b[k].d;
          std::memcpy(b0[k].qs, b[k].qs, 32);
          sums[i].push_back(b[k].s);
        }
        DequantizeRow(DType::kQ8_0, b0.data(), xq[i].data(), cols);
        break;
      }
      case DType::kQ4_K:
      case DType::kQ6_K: {
        std::vector<tensor::BlockQ8_K> b(cols / 256);
        QuantizeRowQ8_K(xi, b.data(), cols);
        for (int64_t k = 0; k < cols; ++k) xq[i][k] = b[k / 256].d * b[k / 256].qs[k % 256];
        break;
      }
      default:
        std::memcpy(xq[i].data(), xi, cols * 4);
    }
  }
  y->assign(static_cast<size_t>(rows * num_tokens), 0.0);
  mag->assign(static_cast<size_t>(rows * num_tokens), 0.0);
  std::vector<uint8_t> row(wrow);
  for (int64_t o = 0; o < rows; ++o) {
    std::memcpy(row.data(), w.data + o * wrow, wrow);
    std::vector<float> mins;
    if (t == DType::kQ4_1) {
      // Dequantize d * q alone; the min times Q8_1's stored s is added per block below, as the
      // integer dot product does.
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint16_t m;
        std::memcpy(&m, row.data() + b * 20 + 2, 2);
        mins.push_back(internal::HalfToFloat(m));
        std::memset(row.data() + b * 20 + 2, 0, 2);
      }
    }
    if (IsBlockScaled(t)) {
      DequantizeScaledRow(w, o, wd.data());
    } else {
      DequantizeRow(t, row.data(), wd.data(), cols);
    }
    for (int64_t i = 0; i < num_tokens; ++i) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(wd[k]) * xq[i][k];
        s += p;
        m += std::fabs(p);
      }
      for (size_t b = 0; b < mins.size(); ++b) {
        const double p = static_cast<double>(mins[b]) * internal::HalfToFloat(sums[i][b]);
        s += p;
        m += std::fabs(p);
      }
      (*y)[i * rows + o] = s;
      (*mag)[i * rows + o] = m;
    }
  }
}

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

// `scales`: RandomScales' for a block-scaled type (borrowed like `bytes`), else empty.
tensor::TensorView View(DType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                        const std::vector<uint8_t>& scales = {}) {
  tensor::TensorView v;
  v.name.assign(1, 'w');  // not = "w": GCC 12 -Wrestrict false positive
  v.dtype = t;
  v.shape = {rows, cols};
  v.data = bytes.data();
  v.size_bytes = bytes.size();
  if (!scales.empty()) {
    v.scale = scales.data();
    v.scale_block_rows = static_cast<int32_t>(ScaleBlockRows(t));
    v.scale_block_cols = static_cast<int32_t>(kScaleBlockCols);
  }
  return v;
}

class MatMulTest : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { SetIsaForTest(DetectIsa()); }
};

TEST_P(MatMulTest, MatchesFloatReferenceForEveryIsaTokenCountAndThreadCount) {
  const DType t = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(t));
  std::vector<int64_t> col_options = {512};
  if (tensor::BlockSize(t) <= 32) col_options.push_back(96);  // odd number of 32-blocks
  // FP8 rows of any length: a last block of 4 columns, past the kernels' 16-column steps.
  if (t == DType::kF8E4M3) col_options.push_back(100);
  const int64_t rows = 37;
  util::ThreadPool pool1(1), pool2(2), pool3(3);
  util::ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  for (int64_t cols : col_options) {
    const std::vector<uint8_t> w = RandomWeights(t, rows, cols, &rng);
    const std::vector<uint8_t> scales = RandomScales(t, rows, cols, &rng);
    const tensor::TensorView view = View(t, w, rows, cols, scales);
    for (int64_t n : {1, 2, 3, 5, 17, 64}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : x) v = normal(rng);
      std::vector<double> ref, mag;
      Reference(view, x, n, &ref, &mag);
      std::vector<float> by_isa[kNumIsas];
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
        SetIsaForTest(isa);
        if (ActiveIsa() != isa) continue;  // not available on this CPU
        if (RoundsToBf16(view)) Reference(view, Bf16Rounded(x), n, &ref, &mag);
        for (util::ThreadPool* pool : pools) {
          std::vector<float> y(static_cast<size_t>(n * rows), -1.0f);
          MatMul(view, x.data(), n, y.data(), *pool);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref[i], 2e-6 * mag[i] + 1e-30)
                << TypeName(t) << " isa=" << IsaName(isa) << " cols=" << cols << " tokens=" << n
                << " threads=" << pool->num_threads() << " index=" << i;
          }
          if (pool == &pool1) {
            by_isa[static_cast<int>(isa)] = y;
          } else {
            // Thread count must not change the result: every output is computed by one thread.
            ASSERT_EQ(y, by_isa[static_cast<int>(isa)]) << IsaName(isa);
          }
        }
      }
    }
  }
}

// MatMulPanels against double on the exactly widened weights, for every ISA this CPU has, across
// the panel (2 vector widths of rows), micro-kernel (6 tokens) and k-panel (256) edges; a token's
// outputs equal, bit for bit, those it gets alone, and the thread count changes nothing.
TEST(MatMulPanelsTest, MatchesReferenceAndIsBatchAndThreadInvariantForEveryIsa) {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  util::ThreadPool pool1(1), pool3(3);
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    ASSERT_TRUE(MatMulPanelsSupports(t));
    for (const int64_t rows : {1, 17, 32, 33, 70}) {
      for (const int64_t cols : {1, 37, 300, 600}) {
        const size_t es = t == DType::kF32 ? 4 : 2;
        std::vector<uint8_t> w(static_cast<size_t>(rows * cols) * es);
        std::vector<double> wd(static_cast<size_t>(rows * cols));
        for (size_t i = 0; i < wd.size(); ++i) {
          const float f = 0.1f * normal(rng);
          if (t == DType::kF32) {
            std::memcpy(&w[4 * i], &f, 4);
            wd[i] = f;
          } else {
            const uint16_t h = t == DType::kF16 ? internal::FloatToHalf(f) : tensor::Fp32ToBf16(f);
            std::memcpy(&w[2 * i], &h, 2);
            wd[i] = t == DType::kF16 ? internal::HalfToFloat(h)
                                     : internal::BitsToFloat(uint32_t{h} << 16);
          }
        }
        const tensor::TensorView view = View(t, w, rows, cols);
        const int64_t n = 13;
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (auto& v : x) v = normal(rng);
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
          SetIsaForTest(isa);
          if (ActiveIsa() != isa) continue;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN), y3(y.size(), NAN);
          MatMulPanels(view, x.data(), n, y.data(), pool1);
          MatMulPanels(view, x.data(), n, y3.data(), pool3);
          ASSERT_EQ(y, y3) << IsaName(isa);
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t o = 0; o < rows; ++o) {
              double ref = 0, mag = 0;
              for (int64_t k = 0; k < cols; ++k) {
                ref += wd[o * cols + k] * x[i * cols + k];
                mag += std::fabs(wd[o * cols + k] * x[i * cols + k]);
              }
              ASSERT_NEAR(y[i * rows + o], ref, 1e-6 * mag + 1e-30)
                  << TypeName(t) << " " << IsaName(isa) << " rows " << rows << " cols " << cols;
            }
          }
          for (const int64_t i : {int64_t{0}, int64_t{6}, n - 1}) {
            std::vector<float> alone(static_cast<size_t>(rows));
            MatMulPanels(view, x.data() + i * cols, 1, alone.data(), pool1);
            ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + i * rows, rows * sizeof(float)))
                << TypeName(t) << " " << IsaName(isa) << " token " << i;
          }
        }
        SetIsaForTest(DetectIsa());
      }
    }
  }
}

TEST_P(MatMulTest, MatMulRowsWritesOnlyItsRows) {
  const DType t = GetParam();
  std::mt19937 rng(99);
  const int64_t rows = 45, cols = 256;
  const std::vector<uint8_t> w = RandomWeights(t, rows, cols, &rng);
  const std::vector<uint8_t> scales = RandomScales(t, rows, cols, &rng);
  const tensor::TensorView view = View(t, w, rows, cols, scales);
  const int64_t n = 6;
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  util::ThreadPool pool(1);
  std::vector<float> full(static_cast<size_t>(n * rows));
  MatMul(view, x.data(), n, full.data(), pool);
  std::vector<float> part(static_cast<size_t>(n * rows), 7.0f);
  MatMulRows(view, x.data(), n, part.data(), 5, 30);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < rows; ++o) {
      const float want = (o >= 5 && o < 30) ? full[i * rows + o] : 7.0f;
      ASSERT_EQ(part[i * rows + o], want) << "token " << i << " row " << o;
    }
  }
}

TEST_P(MatMulTest, SteadyStateCallsDoNotAllocate) {
  const DType t = GetParam();
  std::mt19937 rng(7);
  const int64_t rows = 64, cols = 512, n = 9;
  const std::vector<uint8_t> w = RandomWeights(t, rows, cols, &rng);
  const std::vector<uint8_t> scales = RandomScales(t, rows, cols, &rng);
  const tensor::TensorView view = View(t, w, rows, cols, scales);
  std::vector<float> x(static_cast<size_t>(n * cols), 0.25f), y(static_cast<size_t>(n * rows));
  // One thread: this checks the kernels' own allocations. (With workers, util::ThreadPool's
  // ParallelFor currently wraps a large capture in a std::function, which allocates per call.)
  util::ThreadPool pool(1);
  for (int64_t tokens : {n, int64_t{1}}) {
    MatMul(view, x.data(), tokens, y.data(), pool);  // grows the scratch
    const int64_t before = g_allocations.load();
    MatMul(view, x.data(), tokens, y.data(), pool);
    MatMulRows(view, x.data(), tokens, y.data(), 0, rows);
    EXPECT_EQ(g_allocations.load() - before, 0) << "tokens " << tokens;
  }
}

// A batch of matmuls with their own weights (types mixed), inputs and token counts, some sharing
// an input, one empty: every job's outputs equal MatMul's alone, bit for bit, on every ISA and
// thread count, and a steady-state batch does not allocate.
TEST(MatMulBatchTest, EachJobGivesMatMulsBitsWhateverElseIsInTheBatch) {
  std::mt19937 rng(5);
  const int64_t cols = 256;
  struct Weight {
    DType type;
    int64_t rows;
    std::vector<uint8_t> bytes, scales;
    tensor::TensorView view;
  };
  std::vector<Weight> weights;
  for (auto [t, rows] : {std::pair{DType::kFp4E2M1, 40},
                         {DType::kF8E4M3, 16},
                         {DType::kQ4_0, 33},
                         {DType::kF32, 7},
                         {DType::kFp4E2M1, 64},
                         {DType::kQ8_0, 48}})
    weights.push_back(
        {t, rows, RandomWeights(t, rows, cols, &rng), RandomScales(t, rows, cols, &rng)});
  for (Weight& w : weights) w.view = View(w.type, w.bytes, w.rows, cols, w.scales);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x1(3 * cols), x2(9 * cols);
  for (auto& v : x1) v = normal(rng);
  for (auto& v : x2) v = normal(rng);
  // (weight, input, tokens): jobs 0-2 share x1 at 3 tokens (the two FP4 weights its bf16 rows),
  // job 4 has no tokens, job 6 takes x1 again after other inputs.
  const std::tuple<int, const float*, int64_t> spec[] = {
      {0, x1.data(), 3}, {4, x1.data(), 3},        {2, x1.data(), 3}, {1, x2.data(), 9},
      {3, x2.data(), 0}, {5, x2.data() + cols, 8}, {0, x1.data(), 3}, {0, x2.data(), 1}};
  const int count = static_cast<int>(std::size(spec));
  util::ThreadPool pool1(1), pool2(2), pool3(3);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    SetIsaForTest(isa);
    if (ActiveIsa() != isa) continue;
    for (util::ThreadPool* pool : {&pool1, &pool2, &pool3}) {
      std::vector<std::vector<float>> want(count), got(count);
      std::vector<MatMulJob> jobs;
      for (int i = 0; i < count; ++i) {
        const auto [wi, x, n] = spec[i];
        const tensor::TensorView& v = weights[wi].view;
        want[i].assign(static_cast<size_t>(std::max<int64_t>(n, 1) * v.rows()), -3.0f);
        got[i] = want[i];
        MatMul(v, x, n, want[i].data(), *pool);
        jobs.push_back({&v, x, n, got[i].data()});
      }
      MatMulBatch(jobs.data(), count, *pool);
      for (int i = 0; i < count; ++i)
        ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " threads " << pool->num_threads() << " job "
                                   << i << " " << TypeName(weights[std::get<0>(spec[i])].type);
      if (pool == &pool1) {
        const int64_t before = g_allocations.load();
        MatMulBatch(jobs.data(), count, *pool);
        EXPECT_EQ(g_allocations.load() - before, 0) << IsaName(isa);
      }
    }
  }
  SetIsaForTest(DetectIsa());
}

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return TypeName(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatMulTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K,
                                           DType::kF8E4M3, DType::kFp4E2M1),
                         DTypeParamName);

// The SIMD paths repack quantized activations into their own records; the values in them must
// be exactly what the scalar CPU-backend quantizers produce (ties included).
TEST(ActivationQuantizeTest, EveryIsaProducesTheCpuBackendQ8Values) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t k = 320;  // 10 blocks
  std::vector<float> x(k);
  for (auto& v : x) v = normal(rng);
  x[0] = 127.0f;  // scale 1: the x.5 values below are exact ties
  for (int j = 1; j < 32; ++j) x[j] = static_cast<float>(j) - 15.5f;
  std::vector<tensor::BlockQ8_1> want(k / 32);
  QuantizeRowQ8_1Cpu(x.data(), want.data(), k);
  for (int isa = 1; isa < kNumIsas; ++isa) {
    SetIsaForTest(static_cast<Isa>(isa));
    if (static_cast<int>(ActiveIsa()) != isa) continue;
    const internal::TypeKernels& q41 = internal::KernelsForIsa(isa).q4_1;
    std::vector<uint8_t> got(q41.act_row_bytes(k));
    q41.quantize(x.data(), got.data(), k);
    for (int64_t b = 0; b < k / 32; ++b) {
      // AVX2: 40-byte record per block; AVX-512: 192-byte record per pair of blocks; NEON:
      // 160-byte record per group of 4 (qs[4][32] | d[4] | s[4]).
      const uint8_t* qs = isa == 1   ? got.data() + 40 * b
                          : isa == 2 ? got.data() + 192 * (b / 2) + 32 * (b % 2)
                                     : got.data() + 160 * (b / 4) + 32 * (b % 4);
      const uint8_t* dp = isa == 1   ? got.data() + 40 * b + 32
                          : isa == 2 ? got.data() + 192 * (b / 2) + 64 + 32 * (b % 2)
                                     : got.data() + 160 * (b / 4) + 128 + 4 * (b % 4);
      const uint8_t* sp = isa == 1   ? got.data() + 40 * b + 36
                          : isa == 2 ? got.data() + 192 * (b / 2) + 128 + 32 * (b % 2)
                                     : got.data() + 160 * (b / 4) + 144 + 4 * (b % 4);
      float d, s;
      std::memcpy(&d, dp, 4);
      std::memcpy(&s, sp, 4);
      EXPECT_EQ(std::memcmp(qs, want[b].qs, 32), 0)
          << IsaName(static_cast<Isa>(isa)) << " block " << b;
      EXPECT_EQ(d, internal::HalfToFloat(want[b].d)) << b;
      EXPECT_EQ(s, internal::HalfToFloat(want[b].s)) << b;
    }
  }
  SetIsaForTest(DetectIsa());
}

// y from llama.cpp's CPU backend itself (tests/reference/make_dequant_golden.py runs ggml's
// from_float + vec_dot through ctypes). Only the order of float additions across blocks differs
// (MatMulGgml, ggml_numerics_test.cc, has ggml's order too).
TEST(MatMulGgmlParityTest, EveryIsaTracksLlamaCppCpuBackend) {
  const std::string path = std::string(DI_SOURCE_DIR) + "/tests/golden/dequant/ggml_matmul.json";
  auto text = util::ReadFile(path);
  if (!text.ok()) GTEST_SKIP() << "no ggml golden at " << path << " (needs llama-cpp-python)";
  const nlohmann::json golden = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(golden.is_object());
  util::ThreadPool pool(2);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const auto t = static_cast<DType>(c["ggml_type"].get<int>());
    const int64_t rows = c["rows"], cols = c["cols"], n = c["tokens"];
    const std::vector<uint8_t> w = FromHex(c["weights_hex"]);
    const std::vector<uint8_t> xb = FromHex(c["x_f32_hex"]);
    std::vector<float> x(xb.size() / 4);
    std::memcpy(x.data(), xb.data(), xb.size());
    const tensor::TensorView view = View(t, w, rows, cols);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
      SetIsaForTest(isa);
      if (ActiveIsa() != isa) continue;
      std::vector<float> y(static_cast<size_t>(n * rows));
      MatMul(view, x.data(), n, y.data(), pool);
      double worst = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double want = c["y"][i].get<double>(), mag = c["mag"][i].get<double>();
        worst = std::max(worst, std::fabs(y[i] - want) / mag);
        ASSERT_NEAR(y[i], want, 1e-6 * mag) << TypeName(t) << " " << IsaName(isa) << " " << i;
      }
      std::printf("  %s %s: max |y - ggml| / sum|w x| = %.2e\n", TypeName(t), IsaName(isa), worst);
    }
    ++checked;
  }
  SetIsaForTest(DetectIsa());
  EXPECT_EQ(checked, 5);
}

// Every type a loader can hand MatMul (tensor/dtype.h's table, as the architectures' schemas admit
// matrices: HasCpuKernel or block-scaled) has a kernel of `isa`'s own, not the portable one, for
// the released checkpoints' scale blocks. Returns how many types it checked.
int ExpectNoTypeFallsBackToScalar(Isa isa) {
  const internal::KernelTable& scalar = internal::KernelsForIsa(0);
  const internal::KernelTable& own = internal::KernelsForIsa(static_cast<int>(isa));
  const uint8_t scale_byte = 127;
  int checked = 0;
  for (const tensor::DTypeInfo& info : tensor::AllDTypes()) {
    const DType t = info.type;
    if (!HasCpuKernel(t) && !IsBlockScaled(t)) continue;
    EXPECT_NE(internal::KernelsForType(own, t).gemm, internal::KernelsForType(scalar, t).gemm)
        << info.name;
    tensor::TensorView w;
    w.dtype = t;
    w.shape = {64, 256};
    if (IsBlockScaled(t)) {  // the released checkpoints' blocks
      w.scale = &scale_byte;
      w.scale_block_rows = t == DType::kF8E4M3 ? 128 : 1;
      w.scale_block_cols = t == DType::kF8E4M3 ? 128 : 32;
      EXPECT_EQ(MatMulKernelIsa(w), isa) << info.name;
      if (t == DType::kF8E4M3) {  // blocks narrower than a vector step take the portable kernel
        w.scale_block_cols = 8;
        EXPECT_EQ(MatMulKernelIsa(w), Isa::kScalar);
      }
      w.scale_block_rows = w.scale_block_cols = 32;  // V4.1's FP8 blocks
    }
    EXPECT_EQ(MatMulKernelIsa(w), isa) << info.name;
    ++checked;
  }
  return checked;
}

// Issue 37: an AVX2-only host (AMD Zen 2/3) ran DeepSeek's released FP8 / FP4 weights on the
// portable kernels, 0.02x of AVX-512's decode, because the AVX2 table had no entry for them. Every
// type a loader can hand MatMul (tensor/dtype.h's table, as the architectures' schemas admit
// matrices) must have a kernel of AVX2's own.
TEST(IsaTest, NoWeightTypeFallsBackToScalarOnAvx2) {
  SetIsaForTest(Isa::kAvx2);
  if (ActiveIsa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 + FMA + F16C here";
  // F32, F16, BF16, F8_E4M3, FP4_E2M1, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K (Q8_1 and Q8_K are
  // activation formats).
  EXPECT_EQ(ExpectNoTypeFallsBackToScalar(Isa::kAvx2), 10);
  SetIsaForTest(DetectIsa());
}

#if defined(__x86_64__)  // the AVX2 tables exist only in x86 builds
// The AVX-VNNI copies of the block kernels (matmul_avx2_vnni.cc) must give the plain AVX2 ones'
// bits: VPDPBUSD sums the same integers VPMADDUBSW + VPMADDWD do as long as no int16 pair
// saturates, which these formats cannot reach. Extremes included: Q8_0 codes of -128 and +127
// against activations quantized to +-127, Q4 nibbles of 15.
TEST(IsaTest, AvxVnniBlockKernelsGiveThePlainAvx2Bits) {
  SetIsaForTest(Isa::kAvx2);
  if (ActiveIsa() != Isa::kAvx2 || !Avx2UsesVnni()) {
    SetIsaForTest(DetectIsa());
    GTEST_SKIP() << "no AVX-VNNI here";
  }
  internal::KernelTable plain, vnni;
  internal::FillAvx2Kernels(&plain);
  vnni = plain;
  internal::FillAvx2VnniKernels(&vnni);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 37, k = 256;
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
    std::vector<uint8_t> w = RandomWeights(t, rows, k, &rng);
    const size_t row_bytes = static_cast<size_t>(k / 32) * tensor::BlockBytes(t);
    // Row 0 at the extremes: every Q8_0 code -128 or +127, every nibble 15.
    for (int64_t b = 0; b < k / 32; ++b) {
      uint8_t* blk = w.data() + b * tensor::BlockBytes(t);
      const size_t qs = t == DType::kQ8_0 ? 2 : (t == DType::kQ4_1 ? 4 : 2);
      for (size_t j = qs; j < tensor::BlockBytes(t); ++j)
        blk[j] = t == DType::kQ8_0 ? (j % 2 ? 0x80 : 0x7f) : 0xff;
    }
    const internal::TypeKernels& pk = internal::KernelsForType(plain, t);
    const internal::TypeKernels& vk = internal::KernelsForType(vnni, t);
    ASSERT_NE(pk.gemm, vk.gemm) << TypeName(t);
    for (int64_t tokens : {1, 3, 4, 9}) {
      std::vector<float> x(tokens * k);
      for (auto& v : x) v = normal(rng);
      for (int64_t j = 0; j < k; j += 2) x[j] = j % 4 ? 100.0f : -100.0f;  // codes of +-127
      const size_t a_bytes = pk.act_row_bytes(k);
      ASSERT_EQ(a_bytes, vk.act_row_bytes(k));
      std::vector<uint8_t> a(tokens * a_bytes), a2(tokens * a_bytes);
      for (int64_t i = 0; i < tokens; ++i) {
        pk.quantize(x.data() + i * k, a.data() + i * a_bytes, k);
        vk.quantize(x.data() + i * k, a2.data() + i * a_bytes, k);
      }
      ASSERT_EQ(a, a2) << TypeName(t);
      std::vector<float> y_plain(tokens * rows), y_vnni(tokens * rows);
      internal::GemmArgs g{w.data(), row_bytes, a.data(), a_bytes, k, tokens,
                           y_plain.data(), rows, 0, rows};
      pk.gemm(g);
      g.y = y_vnni.data();
      vk.gemm(g);
      for (int64_t i = 0; i < tokens * rows; ++i)
        ASSERT_EQ(internal::FloatToBits(y_plain[i]), internal::FloatToBits(y_vnni[i]))
            << TypeName(t) << " tokens " << tokens << " index " << i;
    }
  }
  SetIsaForTest(DetectIsa());
}
#endif

TEST(IsaTest, KernelsByTypeNamesEachTypeOnceWithEveryIsaItRunsOn) {
  SetIsaForTest(Isa::kAvx2);
  if (ActiveIsa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 + FMA + F16C here";
  const uint8_t scale_byte = 127;
  auto view = [&](DType t, int32_t block_rows, int32_t block_cols) {
    tensor::TensorView w;
    w.dtype = t;
    w.shape = {64, 256};
    if (block_cols > 0) {
      w.scale = &scale_byte;
      w.scale_block_rows = block_rows;
      w.scale_block_cols = block_cols;
    }
    return w;
  };
  const tensor::TensorView fp4 = view(DType::kFp4E2M1, 1, 32), fp8 = view(DType::kF8E4M3, 32, 32),
                           fp8_narrow = view(DType::kF8E4M3, 4, 8), bf16 = view(DType::kBF16, 0, 0),
                           bf16_too = view(DType::kBF16, 0, 0);
  EXPECT_EQ(MatMulKernelsByType({&fp4, &fp8, &bf16, &fp8_narrow, &bf16_too}),
            "BF16 avx2, F8_E4M3 avx2+scalar, FP4_E2M1 avx2");
  EXPECT_EQ(MatMulKernelsByType({}), "");
  SetIsaForTest(DetectIsa());
}

// A float product rounded once, as a float multiply rounds it (the double product of two floats
// is exact), in a form no compiler fuses with the addition that follows (that one is in float).
float RoundedProduct(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }

// Issue 37: the small loops of ops.h, attention.h and ggml_numerics.h were GCC target_clones,
// picked from CPUID when the binary loaded, so under DEEPINFER_ISA=avx2 or scalar an AVX-512 host
// still ran their AVX-512 clones. They run ActiveIsa()'s copy now (isa_dispatch.h). Dot and Axpy
// tell the copies apart: GCC fuses their multiply-adds in the AVX-512 copy only (AVX-512F has the
// FMA; the AVX2 copy's target, like the baseline, has none), so there they equal a reference with
// std::fma and elsewhere one that rounds every product. The other loops are exact and must give
// the same bits in every copy.
TEST(IsaTest, VectorLoopsRunTheActiveIsasCopy) {
  constexpr int n = 256;  // whole 16-float steps and 64-byte aligned: no AVX-512 peel or tail
  alignas(64) float a[n], b[n], y[n], got[n], plain_axpy[n], fused_axpy[n], weight[n];
  float alpha = 0, plain_dot = 0, fused_dot = 0;
  std::mt19937 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Inputs whose dot differs between the two roundings (most do; the sum of the lanes can hide a
  // difference in them).
  for (int attempt = 0; attempt < 10 && plain_dot == fused_dot; ++attempt) {
    for (int i = 0; i < n; ++i) a[i] = normal(rng), b[i] = normal(rng), y[i] = normal(rng);
    alpha = 0.3f + normal(rng);
    // Dot keeps 16 partial sums (element i in lane i % 16) and adds them in lane order.
    float plain_lanes[16] = {}, fused_lanes[16] = {};
    for (int i = 0; i < n; ++i) {
      plain_lanes[i % 16] += RoundedProduct(a[i], b[i]);
      fused_lanes[i % 16] = std::fma(a[i], b[i], fused_lanes[i % 16]);
    }
    plain_dot = fused_dot = 0;
    for (int k = 0; k < 16; ++k) plain_dot += plain_lanes[k], fused_dot += fused_lanes[k];
  }
  ASSERT_NE(plain_dot, fused_dot) << "no inputs told the copies apart";
  for (int i = 0; i < n; ++i) {
    plain_axpy[i] = y[i] + RoundedProduct(alpha, a[i]);
    fused_axpy[i] = std::fma(alpha, a[i], y[i]);
    weight[i] = 1.0f + 0.1f * normal(rng);
  }
  ASSERT_NE(0, std::memcmp(plain_axpy, fused_axpy, sizeof(plain_axpy)));
  // RmsNorm's formula (ops.cc) with each product rounded alone; exact in every copy.
  std::vector<float> rms(n);
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += RoundedProduct(a[i], a[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + 1e-6f);
  for (int i = 0; i < n; ++i) rms[i] = RoundedProduct(weight[i], RoundedProduct(a[i], scale));
  const int32_t argmax = static_cast<int32_t>(std::max_element(b, b + n) - b);

  int ran = 0;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    SetIsaForTest(isa);
    if (ActiveIsa() != isa) continue;  // the CPU lacks it
    ++ran;
    const Isa copy = internal::VectorLoopIsa();
    EXPECT_EQ(copy, DI_ISA_COPIES ? isa : Isa::kScalar) << IsaName(isa);
#if defined(__x86_64__)  // elsewhere the portable copy itself may be built with FMA contraction
    const bool fused = copy == Isa::kAvx512;
    const float dot = Dot(a, b, n);
    EXPECT_EQ(0, std::memcmp(&dot, fused ? &fused_dot : &plain_dot, sizeof(dot)))
        << IsaName(isa) << ": " << dot << " vs fused " << fused_dot << ", plain " << plain_dot;
    std::memcpy(got, y, sizeof(got));
    Axpy(alpha, a, got, n);
    EXPECT_EQ(0, std::memcmp(got, fused ? fused_axpy : plain_axpy, sizeof(got))) << IsaName(isa);
    RmsNorm(a, weight, 1, n, 1e-6f, got);
    EXPECT_EQ(0, std::memcmp(got, rms.data(), sizeof(got))) << IsaName(isa);
#endif
    std::memcpy(got, y, sizeof(got));
    AddInPlace(got, a, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], y[i] + a[i]) << IsaName(isa) << " at " << i;
    EXPECT_EQ(ArgMax(b, n), argmax) << IsaName(isa);
  }
  EXPECT_GE(ran, 1);
  SetIsaForTest(DetectIsa());
}

TEST(IsaTest, EnvironmentOverrideIsHonouredAndClampedToHardware) {
  SetIsaForTest(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  SetIsaForTest(Isa::kAvx512);
  const Isa isa = ActiveIsa();
  EXPECT_TRUE(isa == Isa::kAvx512 || isa == Isa::kAvx2 || isa == Isa::kScalar);
  SetIsaForTest(DetectIsa());
  EXPECT_STREQ(IsaName(Isa::kAvx2), "avx2");
}

// The Arm level: detected from AT_HWCAP on aarch64, lowered to the portable one elsewhere. On an
// Arm CPU every type a loader can hand MatMul has a NEON kernel of its own (as on AVX2 above).
TEST(IsaTest, NeonIsTheArmLevelAndNoWeightTypeFallsBackToScalarThere) {
  SetIsaForTest(Isa::kNeon);
#if defined(__aarch64__)
  EXPECT_EQ(ActiveIsa(), Isa::kNeon);
  EXPECT_EQ(HardwareIsa(), Isa::kNeon);
  EXPECT_EQ(ExpectNoTypeFallsBackToScalar(Isa::kNeon), 10);
  tensor::TensorView q4;
  q4.dtype = DType::kQ4_0;
  q4.shape = {64, 256};
  EXPECT_EQ(MatMulKernelsByType({&q4}), "Q4_0 neon");
#else
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  EXPECT_NE(HardwareIsa(), Isa::kNeon);
  tensor::TensorView w;
  w.dtype = DType::kQ4_0;
  w.shape = {64, 256};
  EXPECT_EQ(MatMulKernelIsa(w), Isa::kScalar);
  EXPECT_EQ(MatMulKernelsByType({&w}), "Q4_0 scalar");
#endif
  SetIsaForTest(DetectIsa());
  EXPECT_STREQ(IsaName(Isa::kNeon), "neon");
  EXPECT_EQ(LowerIsa(Isa::kNeon), Isa::kScalar);
  EXPECT_EQ(LowerIsa(Isa::kAvx512), Isa::kAvx2);
}

#if defined(__aarch64__)
// The NEON integer copies this CPU can run (matmul_internal.h's NeonIntDot), lowest first.
std::vector<internal::NeonIntDot> NeonIntCopies() {
  std::vector<internal::NeonIntDot> copies = {internal::NeonIntDot::kBaseline};
  const bool dot = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  const bool i8mm = dot && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
  if (dot) copies.push_back(internal::NeonIntDot::kDotProd);
  if (i8mm) copies.push_back(internal::NeonIntDot::kI8mm);
  if (dot && (getauxval(AT_HWCAP) & HWCAP_SVE) != 0 && internal::SveVectorBytes() == 32) {
    copies.push_back(internal::NeonIntDot::kSve);
    if (i8mm) copies.push_back(internal::NeonIntDot::kSveI8mm);
  }
  return copies;
}

const char* NeonIntCopyName(internal::NeonIntDot c) {
  switch (c) {
    case internal::NeonIntDot::kBaseline:
      return "baseline";
    case internal::NeonIntDot::kDotProd:
      return "dotprod";
    case internal::NeonIntDot::kI8mm:
      return "i8mm";
    case internal::NeonIntDot::kSve:
      return "sve";
    case internal::NeonIntDot::kSveI8mm:
      return "sve+i8mm";
  }
  return "?";
}

bool IsSveCopy(internal::NeonIntDot c) {
  return c == internal::NeonIntDot::kSve || c == internal::NeonIntDot::kSveI8mm;
}

// The SVE vector length in bits, 0 without SVE.
int SveBits() {
  return (getauxval(AT_HWCAP) & HWCAP_SVE) != 0 ? 8 * internal::SveVectorBytes() : 0;
}

// MatMul's NEON table holds the best copy the CPU reports (qemu-aarch64's default CPU "max" has
// i8mm and 512-bit SVE, so the i8mm copy; with sve-default-vector-length=32, 256-bit SVE, the
// sve+i8mm one; -cpu neoverse-n1 dotprod only, -cpu cortex-a53 neither), and NeonUsesDotProd /
// NeonUsesI8mm / NeonUsesSve say which; the line printed tells a run under qemu which copy it
// exercised. The SVE copies take their K-quant kernels from the dotprod / i8mm copy, every other
// pair of copies has different kernels for every integer type.
TEST(IsaTest, NeonIntegerKernelsAreTheBestCopyTheCpuReports) {
  using internal::NeonIntDot;
  const std::vector<NeonIntDot> copies = NeonIntCopies();
  const NeonIntDot best = copies.back();
  EXPECT_EQ(NeonUsesDotProd(), best != NeonIntDot::kBaseline);
  EXPECT_EQ(NeonUsesI8mm(), best == NeonIntDot::kI8mm || best == NeonIntDot::kSveI8mm);
  EXPECT_EQ(NeonUsesSve(), IsSveCopy(best));
  if (SveBits() != 256) {
    EXPECT_FALSE(NeonUsesSve()) << SveBits();
  }
  // The copy whose K-quant kernels `c` uses.
  const auto k_quants_of = [](NeonIntDot c) {
    return c == NeonIntDot::kSve       ? NeonIntDot::kDotProd
           : c == NeonIntDot::kSveI8mm ? NeonIntDot::kI8mm
                                       : c;
  };
  const internal::KernelTable& used = internal::KernelsForIsa(static_cast<int>(Isa::kNeon));
  for (const NeonIntDot c : copies) {
    internal::KernelTable t;
    internal::FillNeonKernels(&t, c);
    for (const DType type :
         {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
      const bool k_quant = tensor::BlockSize(type) == 256;
      const bool same = k_quant ? k_quants_of(c) == k_quants_of(best) : c == best;
      EXPECT_EQ(internal::KernelsForType(used, type).gemm == internal::KernelsForType(t, type).gemm,
                same)
          << NeonIntCopyName(c) << " " << TypeName(type);
    }
  }
  std::printf("[ INFO     ] NEON integer kernels: MatMul uses the %s copy (SVE: %d bits)\n",
              NeonIntCopyName(best), SveBits());
}

// Weights of the largest magnitudes the integer sums see: every quant at its extreme (Q4_0 -8,
// Q4_1 15, Q8_0 -128, Q4_K 15 with 6-bit scales and mins of 63, Q6_K -32 with scales of -128),
// in even rows; the odd rows keep RandomWeights' values. The fp16 scales stay as they are.
void MakeEvenRowsExtreme(DType t, int64_t rows, int64_t cols, std::vector<uint8_t>* w) {
  const int64_t row_bytes = static_cast<int64_t>(w->size()) / rows;
  const size_t bb = tensor::BlockBytes(t);
  for (int64_t r = 0; r < rows; r += 2) {
    for (int64_t b = 0; b < cols / tensor::BlockSize(t); ++b) {
      uint8_t* p = w->data() + r * row_bytes + b * static_cast<int64_t>(bb);
      switch (t) {
        case DType::kQ4_0:
          std::memset(p + 2, 0x00, 16);
          break;
        case DType::kQ4_1:
          std::memset(p + 4, 0xff, 16);
          break;
        case DType::kQ8_0:
          std::memset(p + 2, 0x80, 32);
          break;
        case DType::kQ4_K:
          std::memset(p + 4, 0xff, bb - 4);  // scales and nibbles
          break;
        case DType::kQ6_K:
          std::memset(p, 0x00, 192);       // ql, qh: q = -32
          std::memset(p + 192, 0x80, 16);  // scales -128
          break;
        default:
          FAIL() << TypeName(t);
      }
    }
  }
}

// The NEON integer kernels have five copies, VMULL + VPADAL (baseline armv8-a), SDOT (dotprod),
// SDOT + SMMLA (i8mm, 2 x 2 tiles from 2 tokens on), and those two with 256-bit SVE SDOT tiles
// for Q4_0 / Q4_1 / Q8_0 (sve, sve+i8mm); all fold the same exact integer block sums into the
// same float lanes, so they give the same bits: for decode and prefill tiles (1 to 9 tokens, odd
// counts leaving a single token beside the pairs, and 67, past one chunk of 64), odd row counts
// (the single last row), a last group of fewer than 4 blocks, on random and on extreme weights
// and activations (all +-127 after quantizing, or all zero). Compares every copy the CPU has with
// the baseline one (a kernel already compared under another copy's name is not run again);
// skips where that is the baseline alone (qemu's default CPU has the first three,
// sve-default-vector-length=32 all five).
TEST(IsaTest, NeonIntegerCopiesGiveTheSameBits) {
  const std::vector<internal::NeonIntDot> copies = NeonIntCopies();
  if (copies.size() == 1) GTEST_SKIP() << "no dotprod here";
  std::vector<internal::KernelTable> tables(copies.size());
  for (size_t c = 0; c < copies.size(); ++c) internal::FillNeonKernels(&tables[c], copies[c]);
  // Whether copy c's kernel for t is a lower copy's (the SVE copies' K-quant kernels).
  const auto repeated = [&](size_t c, DType t) {
    for (size_t l = 0; l < c; ++l)
      if (internal::KernelsForType(tables[l], t).gemm ==
          internal::KernelsForType(tables[c], t).gemm)
        return true;
    return false;
  };
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int64_t rows, blocks;
  };
  for (const DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const internal::TypeKernels& kb = internal::KernelsForType(tables[0], t);
    for (size_t c = 1; c < copies.size(); ++c)
      ASSERT_NE(kb.gemm, internal::KernelsForType(tables[c], t).gemm) << NeonIntCopyName(copies[c]);
    const bool k_quant = tensor::BlockSize(t) == 256;
    // The SVE copies' Q4_0 / Q4_1 / Q8_0 kernels are their own.
    for (size_t c = 1; c < copies.size(); ++c) {
      if (IsSveCopy(copies[c]) && !k_quant) {
        ASSERT_FALSE(repeated(c, t)) << NeonIntCopyName(copies[c]);
      }
    }
    // 32-element types: 7 blocks (a last group of 3), 1, 4 (one whole group), 9; K-quants: 2, 1, 3.
    const std::vector<Shape> shapes = k_quant ? std::vector<Shape>{{13, 2}, {2, 1}, {5, 3}}
                                              : std::vector<Shape>{{13, 7}, {2, 1}, {6, 4}, {3, 9}};
    for (const Shape& shape : shapes) {
      const int64_t rows = shape.rows, cols = shape.blocks * tensor::BlockSize(t);
      for (const bool extreme : {false, true}) {
        std::vector<uint8_t> w = RandomWeights(t, rows, cols, &rng);
        if (extreme) MakeEvenRowsExtreme(t, rows, cols, &w);
        for (const int64_t n : {1, 2, 3, 4, 5, 6, 7, 9, 67}) {
          if (k_quant && n > 9 && shape.rows < 13) continue;  // keeps qemu's time down
          std::vector<float> x(static_cast<size_t>(n * cols));
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t j = 0; j < cols; ++j) {
              float& v = x[static_cast<size_t>(i * cols + j)];
              if (!extreme) {
                v = normal(rng);
              } else {  // token by token: all +100, alternating +-100, all 0
                v = i % 3 == 0 ? 100.0f : i % 3 == 1 ? ((j & 1) ? -100.0f : 100.0f) : 0.0f;
              }
            }
          }
          const size_t act_bytes = kb.act_row_bytes(cols);
          std::vector<uint8_t> act(act_bytes * static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i)
            kb.quantize(x.data() + i * cols, act.data() + i * act_bytes, cols);
          internal::GemmArgs g{};
          g.w = w.data();
          g.w_row_bytes = w.size() / rows;
          g.a = act.data();
          g.a_row_bytes = act_bytes;
          g.k = cols;
          g.num_tokens = n;
          g.y_stride = rows;
          g.row_begin = 0;
          g.row_end = rows;
          std::vector<float> yb(static_cast<size_t>(n * rows), NAN);
          g.y = yb.data();
          kb.gemm(g);
          for (size_t c = 1; c < copies.size(); ++c) {
            if (repeated(c, t)) continue;
            std::vector<float> yc(yb.size(), NAN);
            g.y = yc.data();
            internal::KernelsForType(tables[c], t).gemm(g);
            EXPECT_EQ(0, std::memcmp(yb.data(), yc.data(), yb.size() * sizeof(float)))
                << TypeName(t) << " " << NeonIntCopyName(copies[c]) << " rows " << rows << " cols "
                << cols << " tokens " << n << (extreme ? " extreme" : " random");
          }
          // Row ranges that start on an odd row (a thread's share) give the same outputs.
          if (rows >= 3) {
            for (size_t c = 0; c < copies.size(); ++c) {
              if (repeated(c, t)) continue;
              std::vector<float> yc(yb.size(), NAN);
              g.y = yc.data();
              g.row_begin = 1;
              internal::KernelsForType(tables[c], t).gemm(g);
              g.row_begin = 0;
              for (int64_t i = 0; i < n; ++i)
                for (int64_t r = 1; r < rows; ++r)
                  ASSERT_EQ(yb[i * rows + r], yc[i * rows + r])
                      << TypeName(t) << " " << NeonIntCopyName(copies[c]) << " token " << i
                      << " row " << r;
            }
          }
        }
      }
    }
  }
  std::printf("[ INFO     ] NEON integer copies compared:");
  for (const internal::NeonIntDot c : copies) std::printf(" %s", NeonIntCopyName(c));
  std::printf("\n");
}
#endif

}  // namespace
}  // namespace deepinfer::kernels

namespace deepinfer::kernels {
namespace {

// DeepSeek-V4's released formats: FP8 E4M3 with E8M0 block scales and FP4 E2M1 (packed two per
// byte) with 1x32 scales, read in place. Every ISA matches a double-precision reference on the
// exactly dequantized weights, and a token's outputs do not depend on how many tokens share the
// call (batch invariance).
struct ScaledCase {
  tensor::DType type;
  int64_t rows, cols, block_rows, block_cols;
  // When nonzero, the scale byte of row 5's second block: one outside the bf16 kernels' integer
  // decode (FP4 [2, 252], AMX's FP8 [10, 246]) sends those rows down their float route.
  uint8_t odd_scale = 0;
};

class BlockScaledMatMulTest : public ::testing::TestWithParam<ScaledCase> {
 protected:
  void TearDown() override { SetIsaForTest(DetectIsa()); }
};

TEST_P(BlockScaledMatMulTest, MatchesReferenceAndIsBatchInvariantOnEveryIsa) {
  const ScaledCase c = GetParam();
  std::mt19937 rng(99);
  const bool fp4 = c.type == DType::kFp4E2M1;
  std::vector<uint8_t> w(static_cast<size_t>(fp4 ? c.rows * c.cols / 2 : c.rows * c.cols));
  for (auto& b : w) {
    b = static_cast<uint8_t>(rng() & 0xff);
    if (!fp4 && (b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
  }
  const int64_t sr = (c.rows + c.block_rows - 1) / c.block_rows;
  const int64_t sc = (c.cols + c.block_cols - 1) / c.block_cols;
  std::vector<uint8_t> scales(static_cast<size_t>(sr * sc));
  for (auto& s : scales) s = static_cast<uint8_t>(112 + rng() % 24);
  if (c.odd_scale != 0) scales[static_cast<size_t>(5 / c.block_rows * sc + 1)] = c.odd_scale;
  tensor::TensorView view;
  view.name = "w";
  view.dtype = c.type;
  view.shape = {c.rows, c.cols};
  view.data = w.data();
  view.size_bytes = w.size();
  view.scale = scales.data();
  view.scale_block_rows = static_cast<int32_t>(c.block_rows);
  view.scale_block_cols = static_cast<int32_t>(c.block_cols);
  ASSERT_TRUE(HasCpuMatMul(view));
  std::vector<float> dense(static_cast<size_t>(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r) DequantizeScaledRow(view, r, dense.data() + r * c.cols);
  // Past AMX's 16-token groups and 128-token chunks (matmul_amx.cc).
  const int64_t n = 133;
  std::vector<float> x(static_cast<size_t>(n * c.cols));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const std::vector<float> x_bf16 = Bf16Rounded(x);
  util::ThreadPool pool(2);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    SetIsaForTest(isa);
    if (ActiveIsa() != isa) continue;
    const std::vector<float>& xr = RoundsToBf16(view) ? x_bf16 : x;
    std::vector<float> y(static_cast<size_t>(n * c.rows));
    MatMul(view, x.data(), n, y.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> one(static_cast<size_t>(c.rows));
      MatMul(view, x.data() + t * c.cols, 1, one.data(), pool);
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < c.cols; ++k) {
          ref += double{dense[r * c.cols + k]} * xr[t * c.cols + k];
          mag += std::fabs(double{dense[r * c.cols + k]} * xr[t * c.cols + k]);
        }
        ASSERT_NEAR(y[t * c.rows + r], ref, 2e-6 * mag + 1e-30)
            << IsaName(isa) << " token " << t << " row " << r;
        ASSERT_EQ(one[r], y[t * c.rows + r]) << IsaName(isa) << " token " << t << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, BlockScaledMatMulTest,
    ::testing::Values(ScaledCase{DType::kF8E4M3, 37, 320, 128, 128},  // partial blocks
                      ScaledCase{DType::kF8E4M3, 40, 96, 32, 32},     // V4.1's 32x32
                      ScaledCase{DType::kF8E4M3, 9, 40, 4, 8},        // not SIMD-friendly
                      ScaledCase{DType::kF8E4M3, 12, 80, 16, 16},     // 16-wide blocks, tail
                      ScaledCase{DType::kFp4E2M1, 37, 256, 1, 32},
                      ScaledCase{DType::kFp4E2M1, 37, 256, 1, 32, 1},  // float route
                      ScaledCase{DType::kF8E4M3, 40, 96, 32, 32, 9},   // float route
                      // Past AMX's 64-row blocks, a 6-row tail, a 4-column k tail.
                      ScaledCase{DType::kF8E4M3, 70, 100, 32, 32},
                      ScaledCase{DType::kF8E4M3, 8, 100, 32, 32},
                      ScaledCase{DType::kF8E4M3, 70, 96, 32, 32},
                      ScaledCase{DType::kFp4E2M1, 70, 80, 1, 32},
                      // Long rows (the panel path's 4-row panels no longer fit in L1).
                      ScaledCase{DType::kF8E4M3, 13, 1300, 128, 128},
                      ScaledCase{DType::kFp4E2M1, 11, 1088, 1, 32}),
    [](const auto& info) {
      const ScaledCase& c = info.param;
      return std::string(c.type == DType::kFp4E2M1 ? "Fp4" : "Fp8") + "_" +
             std::to_string(c.block_rows) + "x" + std::to_string(c.block_cols) + "_" +
             std::to_string(c.rows) + "x" + std::to_string(c.cols) +
             (c.odd_scale != 0 ? "_scale" + std::to_string(c.odd_scale) : "");
    });

}  // namespace
}  // namespace deepinfer::kernels
