#pragma once

// Prometheus text exposition (format 0.0.4) of the gateway: deepinfer_gateway_* series (no
// colons, so `promtool check metrics` passes). Label values are backend URLs, key ids and small
// fixed sets (codes, reasons, phases), never keys or session ids.
//
// Source: Prometheus "Exposition formats" (text format 0.0.4) and "Metric and label naming".

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "util/histogram.h"

namespace deepinfer::gateway {

// What the gateway knows at scrape time (gauges).
struct BackendGauges {
  std::string url;
  int inflight = 0;  // this instance's slots
  int max_active = 0;
  bool healthy = false;
  bool admitted = false;
  int64_t bindings = 0;
};

struct GatewayGauges {
  std::vector<BackendGauges> backends;
  int queue_depth = 0;
  int max_waiting = 0;
  uint64_t slots_acquired = 0;
  uint64_t slots_released = 0;
  bool admission_open = false;
  int open_connections = 0;
  int64_t keys = 0;
};

// What one request to a /v1 route adds to the metrics: its routing part (RecordRouted) once the
// backend has it, the rest (RecordProxied) when it ends. Empty views and unset optionals are the
// parts the request never reached.
struct ProxiedRequest {
  int status = 0;            // the HTTP status answered (499: the client left)
  std::string_view backend;  // the backend that served it; "" for none
  std::string_view key_id;   // "" when the key was not accepted
  // hit (bound backend), new (first binding), rebind (bound backend left), spill (bound backend
  // full past the patience window), none (no session id); "" when nothing was sent.
  std::string_view affinity;
  std::optional<double> queue_wait_seconds;  // set once the request asked for a slot
  std::optional<double> overhead_seconds;    // gateway time before the backend, waits excluded
  double duration_seconds = 0;               // arrival -> answer sent
  // The routing part (key, affinity, queue wait, overhead) was recorded already (RecordRouted),
  // so that it is visible before the answer reaches the client.
  bool routing_recorded = false;
};

// Counters and histograms of the request path.
// Threads: all methods are thread-safe.
class GatewayMetrics {
 public:
  GatewayMetrics();

  // One answered request: its HTTP status and the backend that served it ("" for none).
  void RecordRequest(int status, std::string_view backend);
  // One request to a /v1 route as it ends, under one lock: status, backend and duration, and
  // the routing part unless r.routing_recorded.
  void RecordProxied(const ProxiedRequest& r);
  // The routing part of `r` (key, affinity, queue wait, overhead), once its request is with the
  // backend: off the path to it, yet visible before the answer.
  void RecordRouted(const ProxiedRequest& r);
  // reason: queue_full, queue_timeout, no_healthy_backend, admission_closed,
  // context_length_exceeded, unauthorized, key_concurrency_exceeded, shared_state_unavailable.
  void RecordRejection(std::string_view reason);
  // phase: queued, waiting_headers, streaming, body.
  void RecordCancellation(std::string_view phase);
  void RecordRetry();
  void RecordBackendError(std::string_view backend, std::string_view kind);
  // file: keys or admission; ok false when the file was rejected.
  void RecordReload(std::string_view file, bool ok);

  // Appends every series.
  void Format(const GatewayGauges& gauges, std::string* out) const;

 private:
  // Transparent comparators: a counter that exists is found by string_view, without building
  // a std::string on every request.
  using CounterMap = std::map<std::string, uint64_t, std::less<>>;

  void RecordRoutedLocked(const ProxiedRequest& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int, CounterMap> requests_ ABSL_GUARDED_BY(mu_);  // code -> backend -> count
  CounterMap rejections_ ABSL_GUARDED_BY(mu_);
  CounterMap cancellations_ ABSL_GUARDED_BY(mu_);
  CounterMap affinity_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, uint64_t> backend_errors_ ABSL_GUARDED_BY(mu_);
  CounterMap key_requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, uint64_t> reloads_ ABSL_GUARDED_BY(mu_);
  uint64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  util::Histogram queue_wait_ ABSL_GUARDED_BY(mu_);
  util::Histogram overhead_ ABSL_GUARDED_BY(mu_);
  util::Histogram duration_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deepinfer::gateway
