#pragma once

// Routes of `deepinfer serve`: the OpenAI-compatible API, vLLM's utility routes, /health and
// /metrics. Sits between HttpServer (bytes) and the handlers (requests).

#include <atomic>
#include <string>

#include "api/http_server.h"
#include "api/metrics.h"
#include "api/serving.h"

namespace deepinfer::api {

// Threads: Handle and Observe run on connection threads; SetBackend on the controlling thread.
// Lifetime: the Backend passed to SetBackend must outlive every handler call.
class ApiServer {
 public:
  ApiServer() = default;

  // Makes the model routes live. Until then /health answers 503 and model routes 503
  // "model_loading".
  void SetBackend(const Backend* backend) { backend_.store(backend, std::memory_order_release); }

  // Answers one request. Never throws; an unexpected exception becomes a 500.
  void Handle(const HttpRequest& request, ResponseWriter& writer);
  // Records the answer in the HTTP metrics.
  void Observe(const HttpRequest& request, int status, double seconds);

  HttpMetrics& metrics() { return metrics_; }

  // The metrics label of `path`: the route itself, or "other" for unknown paths.
  static std::string RouteLabel(const std::string& path);

 private:
  void Dispatch(const HttpRequest& request, ResponseWriter& writer);

  std::atomic<const Backend*> backend_{nullptr};
  HttpMetrics metrics_;
};

}  // namespace deepinfer::api
