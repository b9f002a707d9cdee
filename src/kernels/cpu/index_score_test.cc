#include "kernels/cpu/index_score.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"
#include "kernels/cpu/matmul.h"

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

TEST(IndexScoresTest, MatchesTheFormulaInDoubleOnEveryIsa) {
  std::mt19937 rng(7);
  for (const Case& c : {Case{32, 128, 1, 37, 640}, Case{16, 32, 3, 9, 48}, Case{5, 24, 2, 6, 24},
                        Case{64, 16, 4, 21, 16}}) {
    SCOPED_TRACE(testing::Message() << c.heads << " heads, dim " << c.dim);
    const Data d = Make(c, rng);
    for (Isa isa : CpuIsas()) {
      SCOPED_TRACE(IsaName(isa));
      SetIsaForTest(isa);
      std::vector<float> got(static_cast<size_t>(c.tokens * c.count));
      IndexScores(d.packed.data(), c.tokens, c.heads, c.dim, d.keys.data(), c.stride, c.count,
                  got.data(), c.count);
      for (int i = 0; i < c.tokens; ++i) {
        for (int64_t j = 0; j < c.count; ++j) {
          double want = 0, mag = 0;
          for (int h = 0; h < c.heads; ++h) {
            double dot = 0;
            for (int e = 0; e < c.dim; ++e) {
              dot += double{d.q[(int64_t{i} * c.heads + h) * c.dim + e]} * d.keys[j * c.stride + e];
            }
            const double wh = double{d.w[i * c.heads + h]} * d.scale;
            want += std::max(dot, 0.0) * wh;
            mag += std::abs(dot * wh);
          }
          EXPECT_NEAR(got[i * c.count + j], want, 1e-5 * (mag + 1))
              << "token " << i << " key " << j;
        }
      }
    }
    SetIsaForTest(DetectIsa());
  }
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
    std::vector<float> whole(static_cast<size_t>(c.tokens * c.count));
    IndexScores(d.packed.data(), c.tokens, c.heads, c.dim, d.keys.data(), c.stride, c.count,
                whole.data(), c.count);
    // One token at a time, in runs of 1, 2, 3, ... keys.
    std::vector<float> split(whole.size(), -1.0f);
    for (int i = 0; i < c.tokens; ++i) {
      int64_t run = 1;
      for (int64_t j = 0; j < c.count; j += run++) {
        const int64_t n = std::min(run, c.count - j);
        IndexScores(d.packed.data() + i * qf, 1, c.heads, c.dim, d.keys.data() + j * c.stride,
                    c.stride, n, split.data() + i * c.count + j, c.count);
      }
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)));
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

}  // namespace
}  // namespace deepinfer::kernels
