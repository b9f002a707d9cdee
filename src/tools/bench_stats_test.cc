#include "tools/bench_stats.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace deepinfer::tools {
namespace {

TEST(PercentileTest, MatchesNumpyLinearInterpolation) {
  // Expected values from numpy.percentile(a, p) with the default method.
  std::vector<double> a = {3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0};
  std::sort(a.begin(), a.end());
  EXPECT_DOUBLE_EQ(Percentile(a, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(a, 25), 2.05);
  EXPECT_DOUBLE_EQ(Percentile(a, 50), 3.0);
  EXPECT_NEAR(Percentile(a, 90), 6.6, 1e-12);
  EXPECT_NEAR(Percentile(a, 99), 8.76, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(a, 100), 9.0);
}

TEST(PercentileTest, HandlesEmptyAndSingleValues) {
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({7.0}, 99), 7.0);
}

TEST(SummarizeTest, ReportsPopulationStdAndScales) {
  Distribution d = Summarize({3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0}, {50, 99}, 1000.0);
  EXPECT_EQ(d.count, 7);
  EXPECT_NEAR(d.mean, 3728.5714285714286, 1e-9);
  EXPECT_NEAR(d.std, 2498.407656153521, 1e-9);  // numpy.std, ddof = 0
  EXPECT_DOUBLE_EQ(d.min, 1000.0);
  EXPECT_DOUBLE_EQ(d.max, 9000.0);
  ASSERT_EQ(d.percentiles.size(), 2u);
  EXPECT_DOUBLE_EQ(d.percentiles[0], 3000.0);
  EXPECT_NEAR(d.percentiles[1], 8760.0, 1e-9);
}

TEST(SummarizeTest, EmptyInputGivesZerosForEveryPercentile) {
  Distribution d = Summarize({}, {50, 90, 99});
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.percentiles, std::vector<double>({0, 0, 0}));
}

RequestRecord Ok(double start, double ttft, double e2el, int64_t in, int64_t out,
                 std::vector<double> itl) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2el_s = e2el;
  r.prompt_tokens = in;
  r.output_tokens = out;
  r.itl_s = std::move(itl);
  r.usage_reported = true;
  return r;
}

TEST(RunMetricsTest, FollowsVllmDefinitions) {
  std::vector<RequestRecord> records;
  // 5 output tokens: TPOT = (1.0 - 0.2) / 4 = 0.2 s.
  records.push_back(Ok(0.0, 0.2, 1.0, 100, 5, {0.2, 0.2, 0.2, 0.2}));
  // 3 output tokens: TPOT = (0.9 - 0.1) / 2 = 0.4 s.
  records.push_back(Ok(0.5, 0.1, 0.9, 50, 3, {0.4, 0.4}));
  // One output token: counted in TTFT and E2EL, excluded from TPOT.
  records.push_back(Ok(1.0, 0.3, 0.3, 10, 1, {}));
  RequestRecord failed;
  failed.error = "HTTP 500: boom";
  records.push_back(failed);

  RunMetrics m = ComputeRunMetrics(records, 2.0, {50});
  EXPECT_EQ(m.num_requests, 4);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input_tokens, 160);
  EXPECT_EQ(m.total_output_tokens, 9);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 84.5);
  EXPECT_DOUBLE_EQ(m.mean_concurrency, (1.0 + 0.9 + 0.3) / 2.0);
  EXPECT_EQ(m.ttft_ms.count, 3);
  EXPECT_NEAR(m.ttft_ms.percentiles[0], 200.0, 1e-9);
  EXPECT_EQ(m.tpot_ms.count, 2);
  EXPECT_NEAR(m.tpot_ms.mean, 300.0, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 6);  // pooled over requests
  EXPECT_NEAR(m.itl_ms.max, 400.0, 1e-9);
  EXPECT_EQ(m.e2el_ms.count, 3);
  EXPECT_TRUE(m.usage_reported);
  EXPECT_EQ(m.total_cached_tokens, -1);
}

TEST(RunMetricsTest, PeakThroughputCountsTokensPerSecond) {
  // Chunks at 0.1, 0.3, 0.5 (second 0) and 1.2 (second 1), two tokens each.
  std::vector<RequestRecord> records = {Ok(0.0, 0.1, 1.2, 1, 8, {0.2, 0.2, 0.7})};
  RunMetrics m = ComputeRunMetrics(records, 1.5, {50});
  EXPECT_DOUBLE_EQ(m.peak_output_throughput, 6.0);
}

TEST(RunMetricsTest, SumsCachedTokensAndNotesChunkCounts) {
  RequestRecord a = Ok(0, 0.1, 0.2, 10, 2, {0.1});
  a.cached_tokens = 16;
  RequestRecord b = Ok(0, 0.1, 0.2, 10, 2, {0.1});
  b.usage_reported = false;
  RunMetrics m = ComputeRunMetrics({a, b}, 1.0, {50});
  EXPECT_EQ(m.total_cached_tokens, 16);
  EXPECT_FALSE(m.usage_reported);
}

TEST(RunMetricsTest, AllFailedGivesZeroThroughput) {
  RequestRecord failed;
  failed.error = "connect_failed";
  RunMetrics m = ComputeRunMetrics({failed, failed}, 1.0, {50, 99});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.output_throughput, 0);
  EXPECT_EQ(m.ttft_ms.count, 0);
  EXPECT_FALSE(m.usage_reported);
}

}  // namespace
}  // namespace deepinfer::tools
