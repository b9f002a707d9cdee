#include "kernels/cpu/index_score.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"
#include "kernels/cpu/matmul.h"
#include "tensor/tensor.h"

namespace deepinfer::kernels {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Keys strided as in a paged cache: key j at j * stride (other values between them).
struct Case {
  int heads, dim, tokens;
  int64_t count, stride;
};

struct Data {
  std::vector<float> q, w, keys, packed;
  float scale;
};

Data Make(const Case& c, std::mt19937& rng) {
  Data d;
  d.q = Random(int64_t{c.tokens} * c.heads * c.dim, rng);
  d.w = Random(int64_t{c.tokens} * c.heads, rng);
  d.keys = Random(c.count * c.stride, rng);
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const int64_t qf = IndexQueryFloats(c.heads, c.dim);
  d.packed.resize(static_cast<size_t>(c.tokens * qf));
  for (int i = 0; i < c.tokens; ++i) {
    PackIndexQuery(d.q.data() + int64_t{i} * c.heads * c.dim, d.w.data() + i * c.heads, d.scale,
                   c.heads, c.dim, d.packed.data() + i * qf);
  }
  return d;
}

// IndexScores of every token and key of the case, [tokens, count].
std::vector<float> Scores(const Case& c, const std::vector<float>& packed,
                          const std::vector<float>& keys) {
  std::vector<float> got(static_cast<size_t>(c.tokens * c.count));
  IndexScores(packed.data(), c.tokens, c.heads, c.dim, keys.data(), c.stride, c.count, got.data(),
              c.count);
  return got;
}

// Every score against sum_h w_h scale max(q_h . k_j, 0) in double, within
// tol * (sum_h |w_h scale q_h . k_j| + floor).
void ExpectNearTheFormula(const Case& c, const std::vector<float>& q, const std::vector<float>& w,
                          const std::vector<float>& keys, float scale,
                          const std::vector<float>& got, double tol, double floor) {
  for (int i = 0; i < c.tokens; ++i) {
    for (int64_t j = 0; j < c.count; ++j) {
      double want = 0, mag = 0;
      for (int h = 0; h < c.heads; ++h) {
        double dot = 0;
        for (int e = 0; e < c.dim; ++e) {
          dot += double{q[(int64_t{i} * c.heads + h) * c.dim + e]} * keys[j * c.stride + e];
        }
        const double wh = double{w[i * c.heads + h]} * scale;
        want += std::max(dot, 0.0) * wh;
        mag += std::abs(dot * wh);
      }
      EXPECT_NEAR(got[i * c.count + j], want, tol * (mag + floor)) << "token " << i << " key " << j;
    }
  }
}

TEST(IndexScoresTest, MatchesTheFormulaInDoubleOnEveryIsa) {
  std::mt19937 rng(7);
  for (const Case& c : {Case{32, 128, 1, 37, 640}, Case{16, 32, 3, 9, 48}, Case{5, 24, 2, 6, 24},
                        Case{64, 16, 4, 21, 16}}) {
    SCOPED_TRACE(testing::Message() << c.heads << " heads, dim " << c.dim);
    const Data d = Make(c, rng);
    for (Isa isa : CpuIsas()) {
      SCOPED_TRACE(IsaName(isa));
      SetIsaForTest(isa);
      ExpectNearTheFormula(c, d.q, d.w, d.keys, d.scale, Scores(c, d.packed, d.keys), 1e-5, 1.0);
    }
    SetIsaForTest(DetectIsa());
  }
}

// `whole` [tokens, count] against each token scored alone, in runs of 1, 2, 3, ... keys:
// run(i, j, n, out) scores token i's keys [j, j + n) into out.
template <typename Run>
void ExpectSplitsChangeNothing(const Case& c, const std::vector<float>& whole, Run run) {
  std::vector<float> split(whole.size(), -1.0f);
  for (int i = 0; i < c.tokens; ++i) {
    int64_t len = 1;
    for (int64_t j = 0; j < c.count; j += len++) {
      run(i, j, std::min(len, c.count - j), split.data() + i * c.count + j);
    }
  }
  EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)));
}

// What lets callers split the work over threads, cache blocks and batches: a score's bits do not
// depend on how many keys or tokens a call covers or where the key sits in the run.
TEST(IndexScoresTest, AScoreDoesNotDependOnHowTheKeysAndTokensAreSplit) {
  std::mt19937 rng(11);
  const Case c{32, 128, 5, 45, 160};
  const Data d = Make(c, rng);
  const int64_t qf = IndexQueryFloats(c.heads, c.dim);
  for (Isa isa : CpuIsas()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTest(isa);
    ExpectSplitsChangeNothing(
        c, Scores(c, d.packed, d.keys), [&](int i, int64_t j, int64_t n, float* out) {
          IndexScores(d.packed.data() + i * qf, 1, c.heads, c.dim, d.keys.data() + j * c.stride,
                      c.stride, n, out, c.count);
        });
  }
  SetIsaForTest(DetectIsa());
}

TEST(IndexScoresTest, PackPadsHeadsWithZeros) {
  const int heads = 3, dim = 2;
  const std::vector<float> q = {1, 2, 3, 4, 5, 6}, w = {1, 2, 3};
  std::vector<float> packed(static_cast<size_t>(IndexQueryFloats(heads, dim)), -1.0f);
  ASSERT_EQ(packed.size(), static_cast<size_t>(kIndexHeadPad * (dim + 1)));
  PackIndexQuery(q.data(), w.data(), 0.5f, heads, dim, packed.data());
  const int hp = kIndexHeadPad;
  EXPECT_EQ(packed[0], 1);
  EXPECT_EQ(packed[1], 3);
  EXPECT_EQ(packed[2], 5);
  EXPECT_EQ(packed[hp], 2);
  EXPECT_EQ(packed[hp + 2], 6);
  EXPECT_EQ(packed[2 * hp + 1], 1.0f);
  for (int h = heads; h < hp; ++h) {
    EXPECT_EQ(packed[h], 0.0f);
    EXPECT_EQ(packed[2 * hp + h], 0.0f);
  }
}

// ---- FP4 keys and queries (IndexScoresFp4) ----

// Values as FakeQuantFp4 leaves them: per block of 32, an E2M1 value times 2^e, e drawn from
// [-spread, spread] (the spread between blocks decides whether float sums stay exact).
std::vector<float> RandomFp4(int64_t n, int spread, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, 15), exp(-spread, spread);
  std::vector<float> v(static_cast<size_t>(n));
  int e = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) e = exp(rng);
    const int c = code(rng);
    v[i] = std::ldexp(tensor::Fp4E2M1ToFp32(static_cast<uint8_t>(c)), e);
  }
  return v;
}

struct Fp4Data {
  std::vector<float> q, w, keys, packed, packed_fp4;
  std::vector<uint8_t> keys_fp4;
  float scale;
};

// Keys at `stride` floats in keys, and packed at 4 * stride bytes in keys_fp4 (as in the cache:
// a packed key in place of its floats).
Fp4Data MakeFp4(const Case& c, int spread, std::mt19937& rng) {
  Fp4Data d;
  d.q = RandomFp4(int64_t{c.tokens} * c.heads * c.dim, spread, rng);
  d.w = Random(int64_t{c.tokens} * c.heads, rng);
  d.keys = Random(c.count * c.stride, rng);  // other values between the keys
  for (int64_t j = 0; j < c.count; ++j) {
    const std::vector<float> key = RandomFp4(c.dim, spread, rng);
    std::copy(key.begin(), key.end(), d.keys.begin() + j * c.stride);
  }
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const int64_t qf = IndexQueryFloats(c.heads, c.dim), qf4 = IndexQueryFp4Floats(c.heads, c.dim);
  d.packed.resize(static_cast<size_t>(c.tokens * qf));
  d.packed_fp4.resize(static_cast<size_t>(c.tokens * qf4));
  for (int i = 0; i < c.tokens; ++i) {
    const float* q = d.q.data() + int64_t{i} * c.heads * c.dim;
    PackIndexQuery(q, d.w.data() + i * c.heads, d.scale, c.heads, c.dim, d.packed.data() + i * qf);
    PackIndexQueryFp4(q, d.w.data() + i * c.heads, d.scale, c.heads, c.dim,
                      d.packed_fp4.data() + i * qf4);
  }
  d.keys_fp4.resize(d.keys.size() * sizeof(float));
  for (int64_t j = 0; j < c.count; ++j) {
    PackFp4IndexKey(d.keys.data() + j * c.stride, c.dim,
                    d.keys_fp4.data() + j * c.stride * int64_t{sizeof(float)});
  }
  return d;
}

std::vector<float> ScoresFp4(const Case& c, const Fp4Data& d) {
  std::vector<float> got(static_cast<size_t>(c.tokens * c.count));
  IndexScoresFp4(d.packed_fp4.data(), c.tokens, c.heads, c.dim, d.keys_fp4.data(),
                 c.stride * int64_t{sizeof(float)}, c.count, got.data(), c.count);
  return got;
}

// Where the float kernel's multiply-add chains are exact (block scales within a few powers of
// two, as normed keys and queries have them), the integer kernel gives its bits on every ISA.
TEST(IndexScoresFp4Test, EqualsTheFloatKernelBitForBitWhereItsSumsAreExact) {
  std::mt19937 rng(5);
  for (const Case& c : {Case{32, 128, 1, 37, 640}, Case{64, 128, 3, 21, 128}, Case{5, 32, 2, 9, 40},
                        Case{16, 64, 17, 6, 64}}) {
    SCOPED_TRACE(testing::Message() << c.heads << " heads, dim " << c.dim);
    const Fp4Data d = MakeFp4(c, /*spread=*/2, rng);
    for (Isa isa : CpuIsas()) {
      SCOPED_TRACE(IsaName(isa));
      SetIsaForTest(isa);
      const std::vector<float> want = Scores(c, d.packed, d.keys), got = ScoresFp4(c, d);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
    }
    SetIsaForTest(DetectIsa());
  }
}

// Block scales 2^40 apart: the float chains round, the integer sums do not; each head's dot
// product is then exact up to the final block additions.
TEST(IndexScoresFp4Test, MatchesTheFormulaInDoubleAcrossWideBlockScales) {
  std::mt19937 rng(9);
  const Case c{32, 128, 2, 19, 136};
  const Fp4Data d = MakeFp4(c, /*spread=*/20, rng);
  for (Isa isa : CpuIsas()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTest(isa);
    ExpectNearTheFormula(c, d.q, d.w, d.keys, d.scale, ScoresFp4(c, d), 1e-6, 0.0);
  }
  SetIsaForTest(DetectIsa());
}

TEST(IndexScoresFp4Test, AScoreDoesNotDependOnHowTheKeysAndTokensAreSplit) {
  std::mt19937 rng(13);
  const Case c{32, 128, 5, 45, 160};
  const Fp4Data d = MakeFp4(c, 3, rng);
  const int64_t qf = IndexQueryFp4Floats(c.heads, c.dim), ks = c.stride * int64_t{sizeof(float)};
  for (Isa isa : CpuIsas()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTest(isa);
    ExpectSplitsChangeNothing(c, ScoresFp4(c, d), [&](int i, int64_t j, int64_t n, float* out) {
      IndexScoresFp4(d.packed_fp4.data() + i * qf, 1, c.heads, c.dim, d.keys_fp4.data() + j * ks,
                     ks, n, out, c.count);
    });
  }
  SetIsaForTest(DetectIsa());
}

TEST(IndexScoresFp4Test, PackedKeyHoldsCodesScalesAndCorrections) {
  std::vector<float> key(64, 0.0f);
  key[0] = 6.0f * 0.25f;   // block 0: scale 2^-2, amax 1.5 -> E = ilogb(1.5) - 3 = -3
  key[1] = -0.5f * 0.25f;  // code -1 at 2^-3
  key[40] = 3.0f;          // block 1: amax 3 -> E = -2, code 12
  std::vector<uint8_t> out(static_cast<size_t>(IndexKeyFp4Bytes(64)));
  ASSERT_EQ(out.size(), 64u + 16u);
  // In place over the floats, as the cache does it.
  std::vector<float> inplace = key;
  PackFp4IndexKey(key.data(), 64, out.data());
  PackFp4IndexKey(inplace.data(), 64, reinterpret_cast<uint8_t*>(inplace.data()));
  EXPECT_EQ(0, std::memcmp(out.data(), inplace.data(), out.size()));
  EXPECT_EQ(static_cast<int8_t>(out[0]), 12);
  EXPECT_EQ(static_cast<int8_t>(out[1]), -1);
  EXPECT_EQ(static_cast<int8_t>(out[40]), 12);
  float s[2];
  int32_t corr[2];
  std::memcpy(s, out.data() + 64, sizeof(s));
  std::memcpy(corr, out.data() + 72, sizeof(corr));
  EXPECT_EQ(s[0], 0.125f);
  EXPECT_EQ(s[1], 0.25f);
  EXPECT_EQ(corr[0], -16 * 11);
  EXPECT_EQ(corr[1], -16 * 12);
  // A broken model's NaN or infinity packs as code 0 beside its block's other values.
  key[2] = std::nanf("");
  key[3] = -INFINITY;
  PackFp4IndexKey(key.data(), 64, out.data());
  EXPECT_EQ(static_cast<int8_t>(out[0]), 12);
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], 0);
}

}  // namespace
}  // namespace deepinfer::kernels
