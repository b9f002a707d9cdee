#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"

namespace deepinfer::kernels {
namespace {

TEST(OpsTest, RmsNormMatchesDefinition) {
  std::vector<float> x = {1, -2, 3, 4}, w = {1, 0.5, 2, 1}, out(4);
  RmsNorm(x.data(), w.data(), 1, 4, 1e-5f, out.data());
  float rms = std::sqrt((1 + 4 + 9 + 16) / 4.0f + 1e-5f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], w[i] * x[i] / rms, 1e-6);
}

TEST(OpsTest, RopeAdjacentPairsRotatesByPositionTimesFrequency) {
  int32_t pos = 3;
  std::vector<float> c(2), s(2);
  RopeTables(&pos, 1, 4, 10000.0f, c.data(), s.data());
  std::vector<float> v = {1, 0, 1, 0};
  ApplyRope(v.data(), 1, 1, 4, 4, tensor::RopeStyle::kAdjacentPairs, c.data(), s.data());
  EXPECT_NEAR(v[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(v[1], std::sin(3.0), 1e-6);
  double f1 = std::pow(10000.0, -2.0 / 4);
  EXPECT_NEAR(v[2], std::cos(3 * f1), 1e-6);
  EXPECT_NEAR(v[3], std::sin(3 * f1), 1e-6);
}

TEST(OpsTest, RopeHalfSplitPairsFirstAndSecondHalves) {
  int32_t pos = 2;
  std::vector<float> c(2), s(2);
  RopeTables(&pos, 1, 4, 10000.0f, c.data(), s.data());
  std::vector<float> v = {1, 1, 0, 0};
  ApplyRope(v.data(), 1, 1, 4, 4, tensor::RopeStyle::kHalfSplit, c.data(), s.data());
  EXPECT_NEAR(v[0], c[0], 1e-6);
  EXPECT_NEAR(v[2], s[0], 1e-6);
  EXPECT_NEAR(v[1], c[1], 1e-6);
  EXPECT_NEAR(v[3], s[1], 1e-6);
}

TEST(OpsTest, SoftmaxSumsToOneAndIsStableForLargeLogits) {
  std::vector<float> x = {1000, 1001, 999};
  SoftmaxInPlace(x.data(), 3);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0, 1e-6);
  EXPECT_GT(x[1], x[0]);
}

TEST(OpsTest, DotAndAxpyHandleTails) {
  std::vector<float> a(37), b(37), y(37, 1.0f);
  double ref = 0;
  for (int i = 0; i < 37; ++i) {
    a[i] = i * 0.5f;
    b[i] = 1.0f - i * 0.01f;
    ref += double(a[i]) * b[i];
  }
  EXPECT_NEAR(Dot(a.data(), b.data(), 37), ref, 1e-3);
  Axpy(2.0f, a.data(), y.data(), 37);
  EXPECT_FLOAT_EQ(y[36], 1.0f + 36.0f);
}

// DotRows and WeightedSumRows promise the bits of the Dot / Axpy calls they replace, under every
// ISA copy (each contracts multiply-adds as its Dot and Axpy do): row counts below, at and past
// the group of 4, lengths with and without a tail past the 16-float blocks.
TEST(OpsTest, DotRowsAndWeightedSumRowsGiveTheCallsBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Isa isa : CpuIsas()) {
    SetIsaForTest(isa);
    for (int64_t rows : {1, 3, 4, 5, 8, 9}) {
      for (int64_t dim : {3, 16, 37, 512}) {
        const int64_t n = 11;  // vectors (keys)
        std::vector<float> q(rows * dim), keys(n * dim), w(rows * n);
        for (float& v : q) v = nd(rng);
        for (float& v : keys) v = nd(rng);
        for (float& v : w) v = nd(rng);
        std::vector<const float*> kp(n);
        for (int64_t e = 0; e < n; ++e) kp[e] = keys.data() + e * dim;
        std::vector<float> got(rows * n), want(rows * n);
        for (int64_t e = 0; e < n; ++e) {
          DotRows(q.data(), rows, dim, kp[e], dim, got.data() + e, n);
          for (int64_t r = 0; r < rows; ++r) want[r * n + e] = Dot(q.data() + r * dim, kp[e], dim);
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
            << "DotRows isa " << static_cast<int>(isa) << " rows " << rows << " dim " << dim;
        std::vector<float> y(rows * dim, 0.25f), y_want(rows * dim, 0.25f);
        WeightedSumRows(w.data(), n, kp.data(), n, y.data(), rows, dim, dim);
        for (int64_t e = 0; e < n; ++e) {
          for (int64_t r = 0; r < rows; ++r) Axpy(w[r * n + e], kp[e], y_want.data() + r * dim, dim);
        }
        EXPECT_EQ(std::memcmp(y.data(), y_want.data(), y.size() * 4), 0)
            << "WeightedSumRows isa " << static_cast<int>(isa) << " rows " << rows << " dim " << dim;
      }
    }
  }
  SetIsaForTest(DetectIsa());
}

TEST(OpsTest, SiluMulMatchesDefinition) {
  std::vector<float> g = {-2, 0, 3}, u = {1, 2, 3}, out(3);
  SiluMul(g.data(), u.data(), 3, out.data());
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

}  // namespace
}  // namespace deepinfer::kernels
