#include "api/metrics.h"

#include "gtest/gtest.h"
#include "util/prometheus_text.h"

namespace deepinfer::api {
namespace {

util::Histogram SmallHistogram() {
  util::Histogram h;
  h.bounds = {0.1, 1.0};
  h.counts = {2, 1, 1};
  h.sum = 3.5;
  h.count = 4;
  return h;
}

TEST(MetricsTest, EngineMetricsUseVllmNamesWithModelLabel) {
  engine::EngineStats s;
  s.num_running = 3;
  s.num_waiting = 2;
  s.kv_cache_usage = 0.25;
  s.prompt_tokens = 100;
  s.prefix_cache_queries = 64;
  s.prefix_cache_hits = 32;
  s.num_requests_finished[1] = 5;
  s.num_requests_finished[3] = 2;
  s.ttft = SmallHistogram();
  std::string out;
  FormatEngineMetrics({s}, "m\"x", 1, &out);
  EXPECT_NE(out.find("# TYPE vllm:num_requests_running gauge\n"
                     "vllm:num_requests_running{model_name=\"m\\\"x\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("vllm:kv_cache_usage_perc{model_name=\"m\\\"x\"} 0.25\n"), std::string::npos);
  EXPECT_NE(out.find("vllm:gpu_cache_usage_perc{"), std::string::npos);
  EXPECT_NE(out.find("# TYPE vllm:prompt_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("vllm:prefix_cache_hits_total{model_name=\"m\\\"x\"} 32\n"),
            std::string::npos);
  // One stop-string finish moves from abort to stop.
  EXPECT_NE(out.find("finished_reason=\"stop\"} 6\n"), std::string::npos);
  EXPECT_NE(out.find("finished_reason=\"abort\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndEndWithInf) {
  engine::EngineStats s;
  s.ttft = SmallHistogram();
  std::string out;
  FormatEngineMetrics({s}, "m", 0, &out);
  EXPECT_NE(out.find("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2\n"
                     "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"1\"} 3\n"
                     "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"
                     "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 3.5\n"
                     "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 4\n"),
            std::string::npos);
  // An empty histogram still has its +Inf bucket, sum and count.
  EXPECT_NE(out.find("vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 0\n"),
            std::string::npos);
}

TEST(MetricsTest, DataParallelRanksGetOneSampleEachUnderOneHeader) {
  engine::EngineStats a, b;
  a.num_running = 3;
  b.num_running = 4;
  a.num_requests_finished[3] = 1;
  b.num_requests_finished[3] = 2;
  std::string out;
  FormatEngineMetrics({a, b}, "m", 2, &out);
  EXPECT_NE(out.find("# TYPE vllm:num_requests_running gauge\n"
                     "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3\n"
                     "vllm:num_requests_running{model_name=\"m\",engine=\"1\"} 4\n"),
            std::string::npos)
      << out;
  size_t headers = 0;
  for (size_t at = 0; (at = out.find("# TYPE vllm:num_requests_running ", at)) != std::string::npos;
       ++at) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u);
  // Two stop-string finishes: rank 0's one cancellation, then one of rank 1's two.
  EXPECT_NE(out.find("engine=\"0\",finished_reason=\"stop\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("engine=\"0\",finished_reason=\"abort\"} 0\n"), std::string::npos);
  EXPECT_NE(out.find("engine=\"1\",finished_reason=\"stop\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("engine=\"1\",finished_reason=\"abort\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, HttpCountersByRouteMethodAndStatus) {
  HttpMetrics m;
  m.Record("/v1/chat/completions", "POST", 200, 0.5);
  m.Record("/v1/chat/completions", "POST", 200, 0.2);
  m.Record("other", "GET", 404, 0.001);
  std::string out;
  m.Format(/*open_connections=*/1, &out);
  EXPECT_NE(out.find("deepinfer_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\","
                     "status=\"200\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("status=\"404\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_http_request_duration_seconds_count{route=\"other\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_http_open_connections 1\n"), std::string::npos);
}

TEST(MetricsTest, PrefixCheckpointSeriesWithEveryRejectReason) {
  engine::CheckpointStore::Counters c;
  c.saved = 2;
  c.restored = 1;
  c.restored_tokens = 1024;
  c.restore_seconds = 0.25;
  c.rejected[static_cast<int>(engine::CheckpointReject::kCorrupt)] = 3;
  std::string out;
  FormatCheckpointMetrics(c, /*bytes=*/4096, &out);
  EXPECT_NE(out.find("deepinfer_prefix_checkpoint_saved_total 2\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_prefix_checkpoint_restored_tokens_total 1024\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_prefix_checkpoint_restore_seconds_total 0.25\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_prefix_checkpoint_rejected_total{reason=\"corrupt\"} 3\n"),
            std::string::npos);
  for (const char* reason : {"truncated", "bad_format", "wrong_revision", "wrong_layout",
                             "wrong_fingerprint"}) {
    EXPECT_NE(out.find(std::string("{reason=\"") + reason + "\"} 0\n"), std::string::npos)
        << reason;
  }
  EXPECT_NE(out.find("deepinfer_prefix_checkpoint_bytes 4096\n"), std::string::npos);
  EXPECT_NE(out.find("# TYPE deepinfer_prefix_checkpoint_bytes gauge\n"), std::string::npos);
}

TEST(MetricsTest, PdSeriesOfTheDecodeSide) {
  HttpMetrics m;
  m.RecordPdTransfer(/*transfer_s=*/0.02, /*prefill_s=*/1.5, /*checkpoint_tokens=*/2048);
  m.RecordPdTransfer(0.03, 0.5, 16);
  m.RecordPdSuffix(5);
  m.RecordPdSuffix(300);
  m.RecordPdFailure();
  std::string out;
  m.FormatPd(&out);
  EXPECT_NE(out.find("# TYPE deepinfer_pd_transfer_seconds histogram\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_transfer_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_transfer_seconds_bucket{le=\"0.025\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_prefill_seconds_sum 2\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_suffix_tokens_bucket{le=\"16\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_suffix_tokens_bucket{le=\"1024\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_suffix_tokens_sum 305\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_checkpoint_tokens_total 2064\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_pd_prefill_failures_total 1\n"), std::string::npos);
  // The HTTP series leave them out: serve adds them on a decode side only.
  std::string http;
  m.Format(0, &http);
  EXPECT_EQ(http.find("deepinfer_pd_"), std::string::npos);
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(util::EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace deepinfer::api
