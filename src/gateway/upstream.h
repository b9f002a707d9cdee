#pragma once

// The backend side of the gateway: one HTTP/1.1 connection per proxied request (an
// http::ClientConnection, kept alive and reused through UpstreamPool), the answer relayed to the
// client as it arrives, and the connection closed the moment the client is gone, so that the
// backend cancels the generation.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gateway/backends.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/server.h"

namespace deepinfer::gateway {

struct UpstreamOptions {
  int connect_timeout_ms = 2000;
  int header_timeout_ms = 600000;  // request sent -> response headers (prefill, TTFT)
  int idle_timeout_ms = 300000;    // longest gap between body bytes
  int write_timeout_ms = 60000;    // sending the request to the backend
  int slice_ms = 20;               // how often a waiting read looks at the client
};

// Idle keep-alive connections to backends, reused by later requests (most recently used first).
// A connection is only pooled after a complete answer; one that is still in use is never in the
// pool, so closing it remains the cancel signal for its request.
// Threads: thread-safe. Lifetime: closes what it holds when destroyed.
class UpstreamPool {
 public:
  // Units: max_idle_ms — connections idle longer are closed rather than reused (well below a
  // backend's own keep-alive timeout, 75 s for `deepinfer serve`).
  UpstreamPool(size_t max_idle_per_backend, int max_idle_ms)
      : max_idle_per_backend_(max_idle_per_backend), max_idle_ms_(max_idle_ms) {}
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // An idle connection to `backend_url` that the backend has not closed, or -1.
  int Take(const std::string& backend_url);
  void Put(const std::string& backend_url, int fd);
  // Closes every idle connection to `backend_url` (it failed or left).
  void Drop(const std::string& backend_url);

 private:
  struct Idle {
    int fd;
    std::chrono::steady_clock::time_point since;
  };
  const size_t max_idle_per_backend_;
  const int max_idle_ms_;
  absl::Mutex mu_;
  std::map<std::string, std::vector<Idle>> idle_ ABSL_GUARDED_BY(mu_);
};

// Where a proxied request ended.
enum class ProxyEnd {
  kDone,            // the whole answer reached the client
  kConnectFailed,   // no connection: nothing was sent anywhere, safe to retry elsewhere
  kClientGone,      // the client left; the backend connection was closed at once
  kBackendFailed,   // the backend failed (reset, early close, malformed answer)
  kBackendTimeout,  // header or idle timeout
};

// Phases for cancellation metrics: "waiting_headers", "streaming" (SSE body) or "body".
struct ProxyResult {
  ProxyEnd end = ProxyEnd::kDone;
  std::string phase;  // where it ended (for kClientGone / failures)
  int status = 0;     // status sent to the client, 0 when nothing was sent
  bool client_started = false;
  std::string error;           // for logs
  double connect_seconds = 0;  // connect + request written. Units: seconds.
};

// Forwards `request` (method, target, end-to-end headers, body byte-exact) to `backend` and
// relays status, end-to-end headers plus `extra_headers`, and the
// body to `writer`. With a `pool`, the backend connection is kept alive and reused. SSE bodies are
// relayed whole event by whole event as they arrive (a partial event is held until it completes),
// so that a backend dying mid-stream leaves the client one clean in-band error event followed by
// `data: [DONE]`. Nothing reaches the client before the backend's headers, so a kConnectFailed
// result can be retried on another backend. The client's key (Authorization, x-api-key) is never
// forwarded, and its x-request-id is replaced by `request_id`.
// `on_sent` runs once the whole request is with the backend and before the first wait
// for its answer, so that bookkeeping the request does not need in order to be routed (binding
// writes) overlaps the backend's work instead of adding to the client's latency. It does not run
// when nothing was sent (kConnectFailed, or a send that failed).
// Threads: runs on the caller's (connection) thread; so does `on_sent`.
ProxyResult ProxyRequest(
    const BackendAddress& backend, const http::Request& request, std::string_view request_id,
    const http::Headers& extra_headers, http::ResponseWriter& writer,
    const UpstreamOptions& options, UpstreamPool* pool = nullptr,
    absl::FunctionRef<void()> on_sent = [] {});

// GET `path` from `backend` (health probes, /v1/models) within `timeout_ms` overall
// (http::Fetch on a connection of its own).
// Errors: Unavailable "connect_failed" (refused: the backend is down), DeadlineExceeded
//   "connect_timeout" / "backend_timeout", Unavailable "backend_error" (reset, bad answer, a body
//   over `max_body_bytes`).
absl::StatusOr<http::ClientResponse> HttpGet(const BackendAddress& backend, const std::string& path,
                                             int timeout_ms, int64_t max_body_bytes = 8 << 20);

// The client-visible form of a gateway error: http::ApiErrorFromStatus, except that a backend
// that failed or refused ("backend_error", "backend_unavailable") is 502 Bad Gateway.
http::ApiError GatewayError(const absl::Status& status);

}  // namespace deepinfer::gateway
