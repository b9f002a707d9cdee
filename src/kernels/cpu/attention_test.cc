#include "kernels/cpu/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::kernels {
namespace {

struct Case {
  int block_size, num_kv_heads, head_dim, group, num_tokens, first_pos, parts;
};

// Plain softmax attention in double over K/V kept token-major, for comparison.
std::vector<float> Reference(const Case& c, const std::vector<float>& q,
                             const std::vector<float>& k, const std::vector<float>& v) {
  const int D = c.head_dim, Hq = c.num_kv_heads * c.group;
  std::vector<float> out(static_cast<size_t>(c.num_tokens) * Hq * D);
  for (int i = 0; i < c.num_tokens; ++i) {
    const int n = c.first_pos + i + 1;
    for (int h = 0; h < Hq; ++h) {
      const int g = h / c.group;
      std::vector<double> w(n);
      double mx = -1e300;
      for (int j = 0; j < n; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) {
          dot += double(q[(i * Hq + h) * D + d]) * k[(j * c.num_kv_heads + g) * D + d];
        }
        w[j] = dot / std::sqrt(double(D));
        mx = std::max(mx, w[j]);
      }
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int j = 0; j < n; ++j) acc += w[j] * v[(j * c.num_kv_heads + g) * D + d];
        out[(i * Hq + h) * D + d] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

void Check(const Case& c) {
  SCOPED_TRACE(testing::Message() << "B=" << c.block_size << " Hk=" << c.num_kv_heads
                                  << " D=" << c.head_dim << " group=" << c.group
                                  << " tokens=" << c.num_tokens << " first=" << c.first_pos
                                  << " parts=" << c.parts);
  const GqaKvLayout layout{c.block_size, c.num_kv_heads, c.head_dim};
  const int D = c.head_dim, Hk = c.num_kv_heads, Hq = Hk * c.group;
  const int ctx = c.first_pos + c.num_tokens;
  const int blocks = (ctx + c.block_size - 1) / c.block_size;
  std::mt19937 rng(ctx * 31 + D);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> q(static_cast<size_t>(c.num_tokens) * Hq * D), k(size_t(ctx) * Hk * D),
      v(size_t(ctx) * Hk * D);
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  // Blocks in reverse order, with a spare block, and stale NaNs in unused slots: the kernel must
  // follow the table and never read past the context.
  std::vector<float> cache(size_t(blocks + 1) * layout.block_floats(), NAN);
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = blocks - b;
  for (int p = 0; p < ctx; ++p) {
    StoreKv(layout, cache.data() + int64_t{table[p / c.block_size]} * layout.block_floats(),
            p % c.block_size, &k[size_t(p) * Hk * D], &v[size_t(p) * Hk * D]);
  }
  const std::vector<float> want = Reference(c, q, k, v);
  std::vector<float> got(want.size(), -1.0f);
  const int rows = c.num_tokens * c.group;
  std::vector<float> scratch(AttentionScratchFloats(layout, rows));
  std::vector<float> o(size_t(c.parts) * rows * D), m(size_t(c.parts) * rows),
      l(size_t(c.parts) * rows);
  const int per_part = (blocks + c.parts - 1) / c.parts * c.block_size;
  for (int g = 0; g < Hk; ++g) {
    AttentionQuery query;
    query.q = q.data() + g * c.group * D;
    query.token_stride = int64_t{Hq} * D;
    query.num_tokens = c.num_tokens;
    query.first_pos = c.first_pos;
    query.group = c.group;
    query.kv_head = g;
    query.scale = 1.0f / std::sqrt(float(D));
    for (int p = 0; p < c.parts; ++p) {
      const int begin = std::min(ctx, p * per_part), end = std::min(ctx, (p + 1) * per_part);
      AttentionPartial part{o.data() + size_t(p) * rows * D, m.data() + size_t(p) * rows,
                            l.data() + size_t(p) * rows};
      AttendRange(layout, cache.data(), table.data(), query, begin, end, scratch.data(), part);
    }
    FinishAttention(query, D, {o.data(), m.data(), l.data()}, c.parts, rows,
                    got.data() + g * c.group * D);
  }
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
  EXPECT_LT(max_err, 2e-5);
}

TEST(AttentionTest, FastPathMatchesReferenceForPrefillTiles) {
  Check({16, 3, 64, 3, 16, 0, 1});
  Check({16, 3, 64, 3, 16, 37, 1});
  Check({16, 2, 128, 4, 5, 100, 1});
  Check({16, 1, 32, 1, 7, 3, 1});
}

TEST(AttentionTest, FastPathMatchesReferenceForDecodeSplitIntoParts) {
  for (int ctx : {1, 15, 16, 17, 200, 513}) {
    for (int parts : {1, 2, 3, 5}) Check({16, 3, 64, 3, 1, ctx - 1, parts});
  }
  Check({16, 3, 64, 3, 1, 3999, 100});  // more than 64 parts (84 of 3 blocks)
}

TEST(AttentionTest, GenericPathMatchesReference) {
  Check({4, 4, 8, 2, 6, 9, 1});    // stories260K-like heads
  Check({4, 4, 8, 2, 1, 30, 3});
  Check({8, 2, 24, 3, 9, 13, 2});  // head_dim not a multiple of 16
  Check({32, 1, 64, 2, 3, 50, 2});  // block size other than 16
}

TEST(AttentionTest, StoreKvTransposesKAndKeepsVTokenMajor) {
  const GqaKvLayout layout{4, 2, 3};
  std::vector<float> block(layout.block_floats(), 0.0f);
  const float k[6] = {1, 2, 3, 4, 5, 6}, v[6] = {7, 8, 9, 10, 11, 12};
  StoreKv(layout, block.data(), 2, k, v);
  EXPECT_EQ(block[0 * 12 + 1 * 4 + 2], 2);   // head 0, dim 1, slot 2
  EXPECT_EQ(block[1 * 12 + 2 * 4 + 2], 6);   // head 1, dim 2, slot 2
  EXPECT_EQ(block[24 + 2 * 6 + 4], 11);      // V slot 2, head 1, dim 1
}

// MLA absorbed form: 16 heads as lanes over latent rows, split into parts and merged, against
// plain softmax attention in double.
void CheckMla(int lat, int rank, int block_size, int ctx, int parts, int heads) {
  SCOPED_TRACE(testing::Message() << "lat=" << lat << " rank=" << rank << " B=" << block_size
                                  << " ctx=" << ctx << " parts=" << parts << " heads=" << heads);
  const int blocks = (ctx + block_size - 1) / block_size;
  std::mt19937 rng(ctx * 7 + lat);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> cache(size_t(blocks + 1) * block_size * lat, NAN);
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = blocks - b;
  std::vector<float> rows(size_t(ctx) * lat);
  for (float& x : rows) x = dist(rng);
  for (int p = 0; p < ctx; ++p) {
    std::copy(&rows[size_t(p) * lat], &rows[size_t(p + 1) * lat],
              &cache[(size_t(table[p / block_size]) * block_size + p % block_size) * lat]);
  }
  std::vector<float> q_t(size_t(lat) * kMlaHeadsPerChunk, 0.0f);
  for (int d = 0; d < lat; ++d) {
    for (int h = 0; h < heads; ++h) q_t[d * kMlaHeadsPerChunk + h] = dist(rng) * 0.3f;
  }
  const MlaKv kv{cache.data(), table.data(), block_size, lat, rank};
  std::vector<float> scratch(MlaScratchFloats()), o(size_t(parts) * rank * 16), m(parts * 16),
      l(parts * 16), got(size_t(rank) * 16);
  const int per_part = (ctx + parts - 1) / parts;
  for (int p = 0; p < parts; ++p) {
    MlaAttendRange(kv, q_t.data(), p * per_part, std::min(ctx, (p + 1) * per_part),
                   scratch.data(), {o.data() + size_t(p) * rank * 16, m.data() + p * 16,
                                    l.data() + p * 16});
  }
  MlaFinish(rank, {o.data(), m.data(), l.data()}, parts, got.data());
  double max_err = 0;
  for (int h = 0; h < heads; ++h) {
    std::vector<double> w(ctx);
    double mx = -1e300, sum = 0;
    for (int j = 0; j < ctx; ++j) {
      double dot = 0;
      for (int d = 0; d < lat; ++d) dot += double(q_t[d * 16 + h]) * rows[size_t(j) * lat + d];
      w[j] = dot;
      mx = std::max(mx, dot);
    }
    for (double& x : w) sum += (x = std::exp(x - mx));
    for (int d = 0; d < rank; ++d) {
      double acc = 0;
      for (int j = 0; j < ctx; ++j) acc += w[j] * rows[size_t(j) * lat + d];
      max_err = std::max(max_err, std::fabs(acc / sum - got[d * 16 + h]));
    }
  }
  EXPECT_LT(max_err, 2e-5);
}

TEST(AttentionTest, MlaAbsorbedMatchesReference) {
  CheckMla(288, 256, 16, 1, 1, 16);
  CheckMla(288, 256, 16, 300, 1, 16);
  CheckMla(288, 256, 16, 300, 4, 16);
  CheckMla(40, 32, 16, 37, 2, 4);   // the tiny test checkpoints: 4 heads, rank 32, rope 8
  CheckMla(41, 35, 8, 9, 3, 11);    // odd sizes: rank not a multiple of 8
  CheckMla(288, 256, 16, 2000, 80, 16);  // more than 64 parts
}

}  // namespace
}  // namespace deepinfer::kernels
