#include "gateway/metrics.h"

#include <algorithm>

#include "fmt/format.h"
#include "util/prometheus_text.h"

namespace deepinfer::gateway {
namespace {

using CounterMap = std::map<std::string, uint64_t, std::less<>>;

void Bump(CounterMap& map, std::string_view key) {
  auto it = map.find(key);
  if (it == map.end()) it = map.emplace(std::string(key), 0).first;
  it->second++;
}

void LabelledCounter(std::string* out, std::string_view name, std::string_view label,
                     std::string_view help, const CounterMap& values) {
  util::AppendMetricHeader(out, name, "counter", help);
  for (const auto& [value, count] : values) {
    util::AppendSample(out, name, fmt::format("{}=\"{}\"", label, util::EscapeLabelValue(value)),
                       static_cast<double>(count));
  }
}

CounterMap ZeroSeries(std::initializer_list<const char*> names) {
  CounterMap out;
  for (const char* n : names) out[n] = 0;
  return out;
}

// Latency buckets from 100 us (gateway overhead) to 10 min (long generations).
std::vector<double> Bounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,    1,       2.5,    5,     10,     30,    60,   120,   300,  600};
}

}  // namespace

GatewayMetrics::GatewayMetrics()
    : rejections_(ZeroSeries({"queue_full", "queue_timeout", "no_healthy_backend",
                              "admission_closed", "context_length_exceeded", "unauthorized",
                              "key_concurrency_exceeded", "shared_state_unavailable"})),
      cancellations_(ZeroSeries({"queued", "waiting_headers", "streaming", "body"})),
      affinity_(ZeroSeries({"hit", "new", "rebind", "spill", "none"})),
      reloads_{{{"keys", "ok"}, 0},
               {{"keys", "rejected"}, 0},
               {{"admission", "ok"}, 0},
               {{"admission", "rejected"}, 0}},
      queue_wait_(Bounds()),
      overhead_(Bounds()),
      duration_(Bounds()) {}

void GatewayMetrics::RecordRequest(int status, std::string_view backend) {
  absl::MutexLock lock(&mu_);
  Bump(requests_[status], backend.empty() ? std::string_view("none") : backend);
}

void GatewayMetrics::RecordProxied(const ProxiedRequest& r) {
  absl::MutexLock lock(&mu_);
  Bump(requests_[r.status], r.backend.empty() ? std::string_view("none") : r.backend);
  if (!r.routing_recorded) RecordRoutedLocked(r);
  duration_.Observe(r.duration_seconds);
}

void GatewayMetrics::RecordRouted(const ProxiedRequest& r) {
  absl::MutexLock lock(&mu_);
  RecordRoutedLocked(r);
}

void GatewayMetrics::RecordRoutedLocked(const ProxiedRequest& r) {
  if (!r.key_id.empty()) Bump(key_requests_, r.key_id);
  if (!r.affinity.empty()) Bump(affinity_, r.affinity);
  if (r.queue_wait_seconds) queue_wait_.Observe(*r.queue_wait_seconds);
  if (r.overhead_seconds) overhead_.Observe(*r.overhead_seconds);
}

void GatewayMetrics::RecordRejection(std::string_view reason) {
  absl::MutexLock lock(&mu_);
  Bump(rejections_, reason);
}

void GatewayMetrics::RecordCancellation(std::string_view phase) {
  absl::MutexLock lock(&mu_);
  Bump(cancellations_, phase);
}

void GatewayMetrics::RecordRetry() {
  absl::MutexLock lock(&mu_);
  retries_++;
}

void GatewayMetrics::RecordBackendError(std::string_view backend, std::string_view kind) {
  absl::MutexLock lock(&mu_);
  backend_errors_[{std::string(backend), std::string(kind)}]++;
}

void GatewayMetrics::RecordReload(std::string_view file, bool ok) {
  absl::MutexLock lock(&mu_);
  reloads_[{std::string(file), ok ? "ok" : "rejected"}]++;
}

void GatewayMetrics::Format(const GatewayGauges& g, std::string* out) const {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kRequests = "deepinfer_gateway_requests_total";
  util::AppendMetricHeader(out, kRequests, "counter",
                           "Answered requests by HTTP status and serving backend.");
  for (const auto& [code, backends] : requests_) {
    for (const auto& [backend, count] : backends) {
      util::AppendSample(
          out, kRequests,
          fmt::format("code=\"{}\",backend=\"{}\"", code, util::EscapeLabelValue(backend)),
          static_cast<double>(count));
    }
  }
  LabelledCounter(out, "deepinfer_gateway_rejections_total", "reason",
                  "Requests the gateway answered itself with an error, by reason.", rejections_);
  LabelledCounter(out, "deepinfer_gateway_cancellations_total", "phase",
                  "Requests whose client left, by the phase it left in.", cancellations_);
  LabelledCounter(out, "deepinfer_gateway_affinity_total", "result",
                  "Session routing decisions by result.", affinity_);
  LabelledCounter(out, "deepinfer_gateway_key_requests_total", "key_id",
                  "Authenticated requests by API key id.", key_requests_);
  util::AppendMetricHeader(out, "deepinfer_gateway_retries_total", "counter",
                           "Requests retried on another backend after a failed connect.");
  util::AppendSample(out, "deepinfer_gateway_retries_total", "", static_cast<double>(retries_));
  util::AppendMetricHeader(out, "deepinfer_gateway_backend_errors_total", "counter",
                           "Backend failures seen while proxying, by backend and kind.");
  for (const auto& [key, count] : backend_errors_) {
    util::AppendSample(out, "deepinfer_gateway_backend_errors_total",
                       fmt::format("backend=\"{}\",kind=\"{}\"", util::EscapeLabelValue(key.first),
                                   util::EscapeLabelValue(key.second)),
                       static_cast<double>(count));
  }
  util::AppendMetricHeader(out, "deepinfer_gateway_reloads_total", "counter",
                           "Reloads of the key store and admission file, by file and result.");
  for (const auto& [key, count] : reloads_) {
    util::AppendSample(out, "deepinfer_gateway_reloads_total",
                       fmt::format("file=\"{}\",result=\"{}\"", key.first, key.second),
                       static_cast<double>(count));
  }
  util::AppendMetricHeader(out, "deepinfer_gateway_queue_wait_seconds", "histogram",
                           "Time requests spent in the wait queue (all outcomes).");
  util::AppendHistogram(out, "deepinfer_gateway_queue_wait_seconds", "", queue_wait_);
  util::AppendMetricHeader(
      out, "deepinfer_gateway_overhead_seconds", "histogram",
      "Time spent in the gateway before the backend got the request, queue wait excluded.");
  util::AppendHistogram(out, "deepinfer_gateway_overhead_seconds", "", overhead_);
  util::AppendMetricHeader(out, "deepinfer_gateway_request_duration_seconds", "histogram",
                           "Time from a complete request to the end of its answer.");
  util::AppendHistogram(out, "deepinfer_gateway_request_duration_seconds", "", duration_);

  struct GaugeSpec {
    const char* name;
    const char* help;
    double (*value)(const BackendGauges&);
  };
  const GaugeSpec specs[] = {
      {"deepinfer_gateway_backend_inflight", "Requests in flight on each backend (this instance).",
       [](const BackendGauges& b) { return static_cast<double>(b.inflight); }},
      {"deepinfer_gateway_backend_max_active", "Cap of requests in flight per backend.",
       [](const BackendGauges& b) { return static_cast<double>(b.max_active); }},
      {"deepinfer_gateway_backend_healthy", "1 when the backend passes its health checks.",
       [](const BackendGauges& b) { return b.healthy ? 1.0 : 0.0; }},
      {"deepinfer_gateway_backend_admitted", "1 when the admission file admits the backend.",
       [](const BackendGauges& b) { return b.admitted ? 1.0 : 0.0; }},
      {"deepinfer_gateway_backend_bindings", "Sessions bound to each backend.",
       [](const BackendGauges& b) { return static_cast<double>(b.bindings); }},
  };
  int inflight = 0;
  for (const BackendGauges& b : g.backends) inflight += b.inflight;
  for (const GaugeSpec& spec : specs) {
    util::AppendMetricHeader(out, spec.name, "gauge", spec.help);
    for (const BackendGauges& b : g.backends) {
      util::AppendSample(out, spec.name,
                         fmt::format("backend=\"{}\"", util::EscapeLabelValue(b.url)),
                         spec.value(b));
    }
  }
  auto gauge = [&](const char* name, const char* help, double value) {
    util::AppendMetricHeader(out, name, "gauge", help);
    util::AppendSample(out, name, "", value);
  };
  gauge("deepinfer_gateway_inflight", "Requests holding a backend slot (this instance).", inflight);
  gauge("deepinfer_gateway_queue_depth", "Requests waiting in the queue.", g.queue_depth);
  gauge("deepinfer_gateway_queue_capacity", "Most requests the queue holds.", g.max_waiting);
  gauge("deepinfer_gateway_admission_open", "1 when the admission file admits any backend.",
        g.admission_open ? 1 : 0);
  gauge("deepinfer_gateway_open_connections", "Open client connections.", g.open_connections);
  gauge("deepinfer_gateway_keys", "API keys in the loaded key store.", static_cast<double>(g.keys));
  util::AppendMetricHeader(out, "deepinfer_gateway_slots_acquired_total", "counter",
                           "Backend slots taken; equals slots released when nothing is in flight.");
  util::AppendSample(out, "deepinfer_gateway_slots_acquired_total", "",
                     static_cast<double>(g.slots_acquired));
  util::AppendMetricHeader(out, "deepinfer_gateway_slots_released_total", "counter",
                           "Backend slots given back.");
  util::AppendSample(out, "deepinfer_gateway_slots_released_total", "",
                     static_cast<double>(g.slots_released));
}

}  // namespace deepinfer::gateway
