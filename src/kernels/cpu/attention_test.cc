#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/isa_test_util.h"
#include "kernels/cpu/matmul.h"
#include "tensor/dtype.h"

namespace deepinfer::kernels {
namespace {

struct Case {
  int block_size, num_kv_heads, head_dim, group, num_tokens, first_pos, parts;
};

// Runs `attend` under every ISA of the CPU and hands each result to `check`; the AVX2 copy must
// give the portable copy's bits (only GCC's AVX-512 copy fuses multiply-adds, isa_dispatch.h).
template <typename Attend, typename CheckFn>
void ForEveryIsa(Attend attend, CheckFn check) {
  std::vector<float> portable;
  for (Isa isa : CpuIsas()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTest(isa);
    const std::vector<float> got = attend();
    check(got);
    if (isa == Isa::kScalar) portable = got;
    if (isa == Isa::kAvx2 && !portable.empty()) {
      ASSERT_EQ(got.size(), portable.size());
      EXPECT_EQ(0, std::memcmp(got.data(), portable.data(), got.size() * sizeof(float)));
    }
  }
  SetIsaForTest(DetectIsa());
}

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

// Random q, k, v of a case, token-major ([tokens][heads][D]).
struct Inputs {
  std::vector<float> q, k, v;
};

Inputs MakeInputs(const Case& c) {
  const int D = c.head_dim, Hk = c.num_kv_heads, Hq = Hk * c.group;
  const int ctx = c.first_pos + c.num_tokens;
  std::mt19937 rng(ctx * 31 + D);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  Inputs in{std::vector<float>(static_cast<size_t>(c.num_tokens) * Hq * D),
            std::vector<float>(size_t(ctx) * Hk * D), std::vector<float>(size_t(ctx) * Hk * D)};
  for (float& x : in.q) x = dist(rng);
  for (float& x : in.k) x = dist(rng);
  for (float& x : in.v) x = dist(rng);
  return in;
}

// Stores k and v in a paged cache of `dtype` and attends every query through AttendRange split
// into c.parts parts, then FinishAttention.
std::vector<float> Attend(const Case& c, KvDtype dtype, const Inputs& in) {
  const GqaKvLayout layout{c.block_size, c.num_kv_heads, c.head_dim, dtype};
  const int D = c.head_dim, Hk = c.num_kv_heads, Hq = Hk * c.group;
  const int ctx = c.first_pos + c.num_tokens;
  const int blocks = (ctx + c.block_size - 1) / c.block_size;
  // Blocks in reverse order, with a spare block, and stale NaNs in unused slots (all-ones bytes
  // are NaN in every dtype): the kernel must follow the table and never read past the context.
  std::vector<uint8_t> cache(size_t(blocks + 1) * layout.block_bytes(), 0xff);
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = blocks - b;
  for (int p = 0; p < ctx; ++p) {
    StoreKv(layout, cache.data() + int64_t{table[p / c.block_size]} * layout.block_bytes(),
            p % c.block_size, &in.k[size_t(p) * Hk * D], &in.v[size_t(p) * Hk * D]);
  }
  std::vector<float> got(in.q.size(), -1.0f);
  const int rows = c.num_tokens * c.group;
  std::vector<float> scratch(AttentionScratchFloats(layout, rows));
  std::vector<float> o(size_t(c.parts) * rows * D), m(size_t(c.parts) * rows),
      l(size_t(c.parts) * rows);
  const int per_part = (blocks + c.parts - 1) / c.parts * c.block_size;
  for (int g = 0; g < Hk; ++g) {
    AttentionQuery query;
    query.q = in.q.data() + g * c.group * D;
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
  return got;
}

std::string Describe(const Case& c) {
  return testing::PrintToString(std::vector<int>{c.block_size, c.num_kv_heads, c.head_dim,
                                                 c.group, c.num_tokens, c.first_pos, c.parts});
}

void Check(const Case& c) {
  SCOPED_TRACE("B, Hk, D, group, tokens, first, parts = " + Describe(c));
  const Inputs in = MakeInputs(c);
  const std::vector<float> want = Reference(c, in.q, in.k, in.v);
  ForEveryIsa([&] { return Attend(c, KvDtype::kF32, in); },
              [&](const std::vector<float>& got) {
                double max_err = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                  max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
                }
                EXPECT_LT(max_err, 2e-5);
              });
}

// A 16-bit cache gives exactly the f32 cache's result on the rounded K and V (the kernel only
// widens them), and stays near the f32 reference on the unrounded ones.
void CheckSixteenBit(const Case& c, KvDtype dtype, double tolerance) {
  SCOPED_TRACE(std::string(KvDtypeName(dtype)) + " B, Hk, D, group, tokens, first, parts = " +
               Describe(c));
  const Inputs in = MakeInputs(c);
  Inputs rounded = in;
  for (auto* values : {&rounded.k, &rounded.v}) {
    for (float& x : *values) {
      x = dtype == KvDtype::kF16 ? internal::HalfToFloat(internal::FloatToHalf(x))
                                 : tensor::Bf16ToFp32(tensor::Fp32ToBf16(x));
    }
  }
  const std::vector<float> want = Reference(c, in.q, in.k, in.v);
  ForEveryIsa([&] { return Attend(c, dtype, in); },
              [&](const std::vector<float>& got) {
                const std::vector<float> exact = Attend(c, KvDtype::kF32, rounded);
                ASSERT_EQ(got.size(), exact.size());
                for (size_t i = 0; i < got.size(); ++i) {
                  ASSERT_EQ(got[i], exact[i]) << "output " << i;
                }
                double max_err = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                  max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
                }
                EXPECT_LT(max_err, tolerance);
              });
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

// Both widening paths (the fast 16-slot kernel and the generic one), prefill tiles and decode
// split into parts. Tolerances: inputs ~N(0, 1.5); f16 keeps 11 significant bits, bf16 8.
TEST(AttentionTest, SixteenBitCacheEqualsF32OnRoundedValues) {
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
    const double tol = dtype == KvDtype::kF16 ? 3e-3 : 3e-2;
    CheckSixteenBit({16, 3, 64, 3, 16, 37, 1}, dtype, tol);
    CheckSixteenBit({16, 2, 128, 4, 5, 100, 1}, dtype, tol);
    for (int parts : {1, 3}) CheckSixteenBit({16, 3, 64, 3, 1, 512, parts}, dtype, tol);
    CheckSixteenBit({4, 4, 8, 2, 6, 9, 1}, dtype, tol);
    CheckSixteenBit({8, 2, 24, 3, 9, 13, 2}, dtype, tol);
  }
}

TEST(AttentionTest, SixteenBitStoreRoundsToNearestEvenPerHead) {
  const GqaKvLayout layout{4, 2, 3, KvDtype::kF16};
  std::vector<uint16_t> block(layout.block_values(), 0);
  // 1 + 2^-11 is halfway between two halves: rounds to even (1.0); 65520 overflows to +inf.
  const float k[6] = {1.0f + 0x1p-11f, 2, 3, 4, 5, 65520.0f}, v[6] = {7, 8, 9, 10, 11, -0.5f};
  StoreKv(layout, block.data(), 2, k, v);
  // Head g: K [3][4] at g * 24, then V [4][3] at g * 24 + 12.
  EXPECT_EQ(block[0 * 4 + 2], 0x3c00);            // head 0, dim 0, slot 2: 1.0
  EXPECT_EQ(block[24 + 2 * 4 + 2], 0x7c00);       // head 1, dim 2: +inf
  EXPECT_EQ(block[12 + 2 * 3 + 1], 0x4800);       // head 0 V slot 2 dim 1: 8.0
  EXPECT_EQ(block[24 + 12 + 2 * 3 + 2], 0xb800);  // head 1 V slot 2 dim 2: -0.5
  EXPECT_STREQ(KvDtypeName(KvDtype::kBF16), "bf16");
  EXPECT_EQ(KvDtypeFromName("bfloat16"), KvDtype::kBF16);
  EXPECT_EQ(KvDtypeFromName("float16"), KvDtype::kF16);
  EXPECT_EQ(KvDtypeFromName("fp8"), std::nullopt);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF16), 2);
}

TEST(AttentionTest, StoreKvTransposesKAndKeepsVTokenMajor) {
  const GqaKvLayout layout{4, 2, 3};
  std::vector<float> block(layout.block_values(), 0.0f);
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
  auto attend = [&] {
    std::vector<float> scratch(MlaScratchFloats()), o(size_t(parts) * rank * 16), m(parts * 16),
        l(parts * 16), got(size_t(rank) * 16);
    const int per_part = (ctx + parts - 1) / parts;
    for (int p = 0; p < parts; ++p) {
      MlaAttendRange(kv, q_t.data(), p * per_part, std::min(ctx, (p + 1) * per_part),
                     scratch.data(), {o.data() + size_t(p) * rank * 16, m.data() + p * 16,
                                      l.data() + p * 16});
    }
    MlaFinish(rank, {o.data(), m.data(), l.data()}, parts, got.data());
    return got;
  };
  std::vector<double> want(size_t(rank) * 16);
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
      want[d * 16 + h] = acc / sum;
    }
  }
  ForEveryIsa(attend, [&](const std::vector<float>& got) {
    double max_err = 0;
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < rank; ++d) {
        max_err = std::max(max_err, std::fabs(want[d * 16 + h] - got[d * 16 + h]));
      }
    }
    EXPECT_LT(max_err, 2e-5);
  });
}

TEST(AttentionTest, MlaAbsorbedMatchesReference) {
  CheckMla(288, 256, 16, 1, 1, 16);
  CheckMla(288, 256, 16, 300, 1, 16);
  CheckMla(288, 256, 16, 300, 4, 16);
  CheckMla(40, 32, 16, 37, 2, 4);   // the tiny test checkpoints: 4 heads, rank 32, rope 8
  CheckMla(41, 35, 8, 9, 3, 11);    // odd sizes: rank not a multiple of 8
  CheckMla(288, 256, 16, 2000, 80, 16);  // more than 64 parts
}

// Dense attention against plain softmax attention in double, for every ISA this CPU has: token
// counts around the 32-key padding and the 128-key block, head sizes that are one, two and an
// odd number of 16-float vectors or none of them, row counts below, at and past a tile.
TEST(DenseAttentionTest, MatchesReferenceForEveryIsaTokenCountHeadSizeAndRowCount) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (const int n : {1, 5, 31, 32, 33, 127, 128, 129, 300}) {
    for (const int D : {16, 24, 64, 80}) {
      const int64_t stride = 3 * D + 5;  // q, k, v of a token side by side, as in a fused qkv row
      std::vector<float> qkv(static_cast<size_t>(n * stride));
      for (float& x : qkv) x = normal(rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<float> want(static_cast<size_t>(n) * D);
      for (int i = 0; i < n; ++i) {
        std::vector<double> w(n);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(qkv[i * stride + d]) * qkv[j * stride + D + d];
          mx = std::max(mx, w[j] = dot * scale);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j < n; ++j) o += w[j] * qkv[j * stride + 2 * D + d];
          want[i * D + d] = static_cast<float>(o / sum);
        }
      }
      std::vector<float> packed(DensePackedFloats(n, D), -7.0f);
      PackDenseKv(qkv.data() + D, qkv.data() + 2 * D, stride, n, D, packed.data());
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        SetIsaForTest(isa);
        if (ActiveIsa() != isa) continue;
        for (const int rows : {1, 3, 8, 13, 64}) {
          std::vector<float> scratch(DenseAttendScratchFloats(rows, D), NAN);
          std::vector<float> got(static_cast<size_t>(n) * D, NAN);
          for (int r0 = 0; r0 < n; r0 += rows) {
            const int r = std::min(rows, n - r0);
            DenseAttend(qkv.data() + r0 * stride, stride, r, packed.data(), n, D, scale,
                        scratch.data(), got.data() + r0 * D, D);
          }
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i])))
                << IsaName(isa) << " n " << n << " D " << D << " rows " << rows << " at " << i;
          }
        }
      }
      SetIsaForTest(DetectIsa());
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels
