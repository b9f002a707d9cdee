#include "kernels/cpu/ggml_numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/thread_pool.h"

// Bit-exactness with llama.cpp itself is checked end to end by arch/llama_gguf_parity_test.cc
// (every intermediate tensor of the real model, every greedy token). These tests pin what that
// cannot: the same bits on every ISA, and that each function still computes what its name says.

namespace deepinfer::kernels {
namespace {

using internal::FloatToHalf;
using tensor::DType;

struct Weights {
  std::vector<uint8_t> bytes;
  tensor::TensorView view;
};

// Random Q4_1 / Q8_0 rows: any byte is a valid quant; the fp16 scale (and Q4_1 min) are small.
Weights RandomWeights(DType t, int64_t rows, int64_t cols, std::mt19937* rng) {
  const size_t block = t == DType::kQ4_1 ? sizeof(tensor::BlockQ4_1) : sizeof(tensor::BlockQ8_0);
  const int64_t nb = rows * cols / 32;
  Weights w;
  w.bytes.resize(static_cast<size_t>(nb) * block);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(*rng));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = w.bytes.data() + b * block;
    const uint16_t d = FloatToHalf(0.02f * unit(*rng)), m = FloatToHalf(0.1f * unit(*rng));
    std::memcpy(p, &d, 2);
    if (t == DType::kQ4_1) std::memcpy(p + 2, &m, 2);
  }
  w.view.dtype = t;
  w.view.shape = {rows, cols};
  w.view.data = w.bytes.data();
  w.view.size_bytes = w.bytes.size();
  return w;
}

std::vector<float> RandomFloats(int64_t n, float scale, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(*rng);
  return v;
}

TEST(GgmlNumericsTest, MatMulGivesTheSameBitsOnEveryIsa) {
  std::mt19937 rng(7);
  util::ThreadPool pool(2);
  const int64_t rows = 40, cols = 576, tokens = 3;
  const std::vector<float> x = RandomFloats(tokens * cols, 1.0f, &rng);
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    const Weights w = RandomWeights(t, rows, cols, &rng);
    std::vector<float> want(tokens * rows), got(tokens * rows);
    SetIsaForTest(Isa::kScalar);
    MatMulGgml(w.view, x.data(), tokens, want.data(), pool);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      SetIsaForTest(isa);
      MatMulGgml(w.view, x.data(), tokens, got.data(), pool);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "dtype " << static_cast<int>(t) << " on " << IsaName(ActiveIsa());
    }
    SetIsaForTest(DetectIsa());
    // And it is a matmul: close to the fast path, which differs only in summation order.
    MatMul(w.view, x.data(), tokens, got.data(), pool);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(want[i], got[i], 1e-4f * (1 + std::fabs(got[i])));
  }
}

// The loops below MatMulGgml run in one copy per ISA, chosen from ActiveIsa() (isa_dispatch.h):
// the SIMD copies vectorize and inline std::fma, and every one gives the portable copy's bits.
// Sizes with and without the 16- and 64-float steps' tails.
TEST(GgmlNumericsTest, VectorLoopsGiveTheSameBitsOnEveryIsa) {
  std::mt19937 rng(13);
  const int64_t nb = 19, n = 300, ctx = 45, D = 64, stride = 64;
  const Weights w41 = RandomWeights(DType::kQ4_1, 1, nb * 32, &rng);
  const Weights w80 = RandomWeights(DType::kQ8_0, 1, nb * 32, &rng);
  const Weights x80 = RandomWeights(DType::kQ8_0, 1, nb * 32, &rng);
  std::vector<tensor::BlockQ8_1> x81(nb);
  QuantizeRowQ8_1Cpu(RandomFloats(nb * 32, 1.0f, &rng).data(), x81.data(), nb * 32);
  const std::vector<float> a = RandomFloats(n, 2.0f, &rng), b = RandomFloats(n, 1.0f, &rng);
  const std::vector<float> k = RandomFloats(ctx * D, 1.0f, &rng);
  const std::vector<float> vt = RandomFloats(D * stride, 1.0f, &rng);
  const std::vector<float> cos_t = RandomFloats(3 * D / 2, 1.0f, &rng);
  const std::vector<float> sin_t = RandomFloats(3 * D / 2, 1.0f, &rng);
  const std::vector<float> heads = RandomFloats(3 * 2 * D, 1.0f, &rng);  // 3 tokens, 2 heads
  // Every result of one ISA, concatenated.
  auto run = [&] {
    std::vector<float> out;
    out.push_back(DotQ4_1Q8_1Ggml(reinterpret_cast<const tensor::BlockQ4_1*>(w41.bytes.data()),
                                  x81.data(), nb));
    out.push_back(DotQ8_0Q8_0Ggml(reinterpret_cast<const tensor::BlockQ8_0*>(w80.bytes.data()),
                                  reinterpret_cast<const tensor::BlockQ8_0*>(x80.bytes.data()),
                                  nb));
    for (int64_t len : {1, 16, 63, 64, 100, 300}) {
      out.push_back(DotF32Ggml(a.data(), b.data(), len));
    }
    for (int64_t len : {16, 64, 288}) out.push_back(DotF32TinyBlasGgml(a.data(), b.data(), len));
    std::vector<float> swiglu(n);
    SwiGluGgml(a.data(), b.data(), n, swiglu.data());
    out.insert(out.end(), swiglu.begin(), swiglu.end());
    for (auto style : {tensor::RopeStyle::kAdjacentPairs, tensor::RopeStyle::kHalfSplit}) {
      std::vector<float> x = heads;
      ApplyRopeGgml(x.data(), 3, 2, D, D, style, cos_t.data(), sin_t.data());
      out.insert(out.end(), x.begin(), x.end());
    }
    for (bool batched : {false, true}) {
      std::vector<float> scratch(stride), row(D);
      AttendRowGgml(a.data(), k.data(), vt.data(), stride, ctx, D, 0.125f, batched, scratch.data(),
                    row.data());
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  };
  SetIsaForTest(Isa::kScalar);
  const std::vector<float> want = run();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    SetIsaForTest(isa);
    if (ActiveIsa() != isa) continue;
    const std::vector<float> got = run();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(&got[i], &want[i], sizeof(float)))
          << IsaName(isa) << " result " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  SetIsaForTest(DetectIsa());
}

// The tiled AVX-512 kernels (matmul_avx512.cc) against the portable reference, over every tile
// shape: 4-row tiles and a 1-row tail, 1-3 and 7 tokens.
TEST(GgmlNumericsTest, TiledAvx512KernelsMatchThePortableOnes) {
  SetIsaForTest(Isa::kAvx512);
  if (ActiveIsa() != Isa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(9);
  util::ThreadPool pool(2);
  const int64_t rows = 42, cols = 1536;
  for (int64_t tokens : {1, 2, 3, 7}) {
    const std::vector<float> x = RandomFloats(tokens * cols, 1.0f, &rng);
    for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
      const Weights w = RandomWeights(t, rows, cols, &rng);
      std::vector<float> want(tokens * rows), got(tokens * rows), got2(tokens * rows);
      SetIsaForTest(Isa::kScalar);
      MatMulGgml(w.view, x.data(), tokens, want.data(), pool);
      SetIsaForTest(Isa::kAvx512);
      MatMulGgml(w.view, x.data(), tokens, got.data(), pool);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "dtype " << static_cast<int>(t) << ", " << tokens << " tokens";
      const tensor::TensorView* ws[2] = {&w.view, &w.view};
      float* ys[2] = {got.data(), got2.data()};
      MatMulGroupGgml(ws, ys, 2, x.data(), tokens, pool);
      EXPECT_EQ(0, std::memcmp(want.data(), got2.data(), want.size() * sizeof(float)));
    }
  }
  SetIsaForTest(DetectIsa());
}

// y from ggml's own from_float + vec_dot (tests/reference/make_dequant_golden.py, through
// llama-cpp-python's library): MatMulGgml reproduces it exactly on every ISA.
TEST(GgmlNumericsTest, MatMulEqualsGgmlsVecDotExactly) {
  const std::string path = std::string(DI_SOURCE_DIR) + "/tests/golden/dequant/ggml_matmul.json";
  auto text = util::ReadFile(path);
  if (!text.ok()) GTEST_SKIP() << "no ggml golden at " << path;
  const nlohmann::json golden = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(golden.is_object());
  auto from_hex = [](const std::string& h) {
    std::vector<uint8_t> out(h.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<uint8_t>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
    return out;
  };
  util::ThreadPool pool(2);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const auto t = static_cast<DType>(c["ggml_type"].get<int>());
    if (t != DType::kQ4_1 && t != DType::kQ8_0) continue;
    const int64_t rows = c["rows"], cols = c["cols"], n = c["tokens"];
    const std::vector<uint8_t> w = from_hex(c["weights_hex"]), xb = from_hex(c["x_f32_hex"]);
    std::vector<float> x(xb.size() / 4);
    std::memcpy(x.data(), xb.data(), xb.size());
    tensor::TensorView view;
    view.dtype = t;
    view.shape = {rows, cols};
    view.data = w.data();
    view.size_bytes = w.size();
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      SetIsaForTest(isa);
      std::vector<float> y(static_cast<size_t>(n * rows));
      MatMulGgml(view, x.data(), n, y.data(), pool);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y[i], static_cast<float>(c["y"][i].get<double>()))
            << IsaName(ActiveIsa()) << " " << i;
      }
    }
    ++checked;
  }
  SetIsaForTest(DetectIsa());
  EXPECT_EQ(checked, 2);
}

TEST(GgmlNumericsTest, ExpIsCloseToExpAndSaturatesLikeGgml) {
  EXPECT_EQ(ExpGgml(0.0f), 1.0f);
  EXPECT_EQ(ExpGgml(-1000.0f), 0.0f);
  EXPECT_EQ(ExpGgml(1000.0f), INFINITY);
  EXPECT_EQ(ExpGgml(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(ExpGgml(NAN)));
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(ExpGgml(x), want, 4e-7 * want) << x;  // ~2 ulp of float
  }
  // Subnormal results round once (VSCALEFPS), like the true value to within one subnormal step.
  for (float x = -103.0f; x < -87.5f; x += 0.25f) {
    EXPECT_NEAR(ExpGgml(x), std::exp(static_cast<double>(x)), 2e-45) << x;
  }
}

TEST(GgmlNumericsTest, SwiGluIsSiluTimesUp) {
  std::mt19937 rng(3);
  const std::vector<float> g = RandomFloats(100, 4.0f, &rng), u = RandomFloats(100, 1.0f, &rng);
  std::vector<float> out(100);
  SwiGluGgml(g.data(), u.data(), 100, out.data());
  for (int i = 0; i < 100; ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want)));
  }
}

TEST(GgmlNumericsTest, RopeRotatesByPositionTimesFrequency) {
  const int dim = 8;
  const int32_t pos[2] = {0, 5};
  std::vector<float> c(2 * dim / 2), s(2 * dim / 2);
  RopeTablesGgml(pos, 2, dim, 10000.0f, c.data(), s.data());
  std::vector<float> x(2 * dim, 1.0f);
  ApplyRopeGgml(x.data(), 2, 1, dim, dim, tensor::RopeStyle::kAdjacentPairs, c.data(), s.data());
  for (int i = 0; i < dim / 2; ++i) {
    EXPECT_EQ(x[2 * i], 1.0f);  // position 0: identity
    const double a = 5.0 * std::pow(10000.0, -2.0 * i / dim);
    EXPECT_NEAR(x[dim + 2 * i], std::cos(a) - std::sin(a), 1e-5);
    EXPECT_NEAR(x[dim + 2 * i + 1], std::sin(a) + std::cos(a), 1e-5);
  }
}

TEST(GgmlNumericsTest, AttendRowIsSoftmaxWeightedValues) {
  std::mt19937 rng(11);
  const int D = 64, ctx = 37;
  const int64_t stride = 64;  // ctx rounded up to 64
  const std::vector<float> q = RandomFloats(D, 1.0f, &rng), k = RandomFloats(ctx * D, 1.0f, &rng);
  std::vector<float> vt = RandomFloats(D * stride, 1.0f, &rng);
  for (int d = 0; d < D; ++d)
    std::fill(vt.begin() + d * stride + ctx, vt.begin() + (d + 1) * stride, 0.0f);
  std::vector<double> p(ctx);
  double mx = -INFINITY, sum = 0;
  for (int j = 0; j < ctx; ++j) {
    double s = 0;
    for (int d = 0; d < D; ++d) s += double{q[d]} * k[j * D + d];
    p[j] = s * 0.125;
    mx = std::max(mx, p[j]);
  }
  for (double& v : p) sum += (v = std::exp(v - mx));
  std::vector<float> scratch(2 * stride), out(D);
  for (bool batched : {false, true}) {
    AttendRowGgml(q.data(), k.data(), vt.data(), stride, ctx, D, 0.125f, batched, scratch.data(),
                  out.data());
    for (int d = 0; d < D; ++d) {
      double want = 0;
      for (int j = 0; j < ctx; ++j) want += p[j] / sum * vt[d * stride + j];
      EXPECT_NEAR(out[d], want, 1e-5) << d << (batched ? " batched" : "");
    }
  }
}

TEST(GgmlNumericsTest, DotF32HandlesTails) {
  std::mt19937 rng(5);
  for (int n : {1, 16, 63, 64, 100, 256}) {
    const std::vector<float> a = RandomFloats(n, 1.0f, &rng), b = RandomFloats(n, 1.0f, &rng);
    double want = 0;
    for (int i = 0; i < n; ++i) want += double{a[i]} * b[i];
    EXPECT_NEAR(DotF32Ggml(a.data(), b.data(), n), want, 1e-5 * n) << n;
    if (n % 16 == 0) {
      EXPECT_NEAR(DotF32TinyBlasGgml(a.data(), b.data(), n), want, 1e-5 * n) << n;
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels
