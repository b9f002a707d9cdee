#include "gateway/metrics.h"

#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "util/prometheus_text.h"

namespace deepinfer::gateway {
namespace {

GatewayGauges Gauges() {
  GatewayGauges g;
  g.backends.push_back({"http://127.0.0.1:1", 2, 32, true, true, 5});
  g.backends.push_back({"http://127.0.0.1:2", 1, 32, false, true, 0});
  g.queue_depth = 3;
  g.max_waiting = 32;
  g.slots_acquired = 10;
  g.slots_released = 7;
  g.admission_open = true;
  return g;
}

TEST(GatewayMetricsTest, FormatsCountersGaugesAndHistograms) {
  GatewayMetrics m;
  m.RecordProxied({.status = 200,
                   .backend = "http://127.0.0.1:1",
                   .key_id = "alice",
                   .affinity = "hit",
                   .queue_wait_seconds = 0.003,
                   .overhead_seconds = 0.00002,
                   .duration_seconds = 0.01});
  m.RecordRequest(200, "http://127.0.0.1:1");
  m.RecordRequest(429, "");
  // Rejected in the queue: no backend, no affinity, no overhead.
  ProxiedRequest rejected;
  rejected.status = 429;
  rejected.key_id = "bob";
  rejected.queue_wait_seconds = 7;
  m.RecordProxied(rejected);
  m.RecordRejection("queue_full");
  m.RecordCancellation("streaming");
  std::string out;
  m.Format(Gauges(), &out);
  EXPECT_NE(
      out.find("deepinfer_gateway_requests_total{code=\"200\",backend=\"http://127.0.0.1:1\"} 2\n"),
      std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_requests_total{code=\"429\",backend=\"none\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_rejections_total{reason=\"queue_full\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_rejections_total{reason=\"queue_timeout\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_cancellations_total{phase=\"streaming\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_backend_inflight{backend=\"http://127.0.0.1:1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_inflight 3\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_queue_depth 3\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_queue_wait_seconds_bucket{le=\"0.005\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_queue_wait_seconds_bucket{le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_queue_wait_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_slots_acquired_total 10\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_key_requests_total{key_id=\"alice\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_key_requests_total{key_id=\"bob\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_affinity_total{result=\"hit\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_affinity_total{result=\"new\"} 0\n"), std::string::npos);
  // Only the request that reached a backend has an overhead sample; both have a duration.
  EXPECT_NE(out.find("_overhead_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(out.find("_duration_seconds_count 2\n"), std::string::npos);
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    std::string line = out.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(name.find(':'), std::string::npos) << name;
    EXPECT_EQ(name.rfind("deepinfer_gateway_", 0), 0u) << name;
  }
}

TEST(GatewayMetricsTest, RoutingRecordedEarlyCountsOnce) {
  GatewayMetrics m;
  ProxiedRequest r;
  r.key_id = "carol";
  r.affinity = "new";
  r.queue_wait_seconds = 0;
  r.overhead_seconds = 0.00003;
  m.RecordRouted(r);
  std::string early;
  m.Format(Gauges(), &early);
  // Visible before the request ends; the request itself is not counted yet.
  EXPECT_NE(early.find("deepinfer_gateway_key_requests_total{key_id=\"carol\"} 1\n"),
            std::string::npos);
  EXPECT_NE(early.find("_request_duration_seconds_count 0\n"), std::string::npos);
  r.routing_recorded = true;
  r.status = 200;
  r.backend = "http://127.0.0.1:1";
  r.duration_seconds = 0.002;
  m.RecordProxied(r);
  std::string out;
  m.Format(Gauges(), &out);
  EXPECT_NE(out.find("deepinfer_gateway_key_requests_total{key_id=\"carol\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("deepinfer_gateway_affinity_total{result=\"new\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("_overhead_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(out.find("_request_duration_seconds_count 1\n"), std::string::npos);
}

TEST(GatewayMetricsTest, EscapesLabelValues) {
  EXPECT_EQ(util::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(GatewayMetricsTest, PassesPromtoolWhenInstalled) {
  if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  GatewayMetrics m;
  m.RecordRequest(200, "http://127.0.0.1:1");
  m.RecordBackendError("http://127.0.0.1:2", "connect");
  m.RecordReload("keys", true);
  m.RecordProxied({.status = 200,
                   .backend = "http://127.0.0.1:1",
                   .key_id = "alice",
                   .affinity = "new",
                   .queue_wait_seconds = 0,
                   .overhead_seconds = 0.0002,
                   .duration_seconds = 1.5});
  std::string out;
  m.Format(Gauges(), &out);
  std::string path = ::testing::TempDir() + "/gw-metrics-" + std::to_string(::getpid()) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fwrite(out.data(), 1, out.size(), f);
  std::fclose(f);
  std::string command = "/usr/bin/promtool check metrics < " + path + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) report.append(buf, n);
  int rc = ::pclose(p);
  ::unlink(path.c_str());
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << report;
}

}  // namespace
}  // namespace deepinfer::gateway
