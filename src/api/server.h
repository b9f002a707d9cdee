#pragma once

// Routes of `deepinfer serve`: the OpenAI-compatible API, vLLM's utility routes, /health and
// /metrics. Sits between http::Server (bytes) and the handlers (requests).

#include <atomic>
#include <string>
#include <vector>

#include "api/metrics.h"
#include "api/served_model.h"
#include "http/api_keys.h"
#include "http/server.h"

namespace deepinfer::api {

// Threads: Handle and Observe run on connection threads; SetServedModel and SetHttpServer on the
//   controlling thread.
// Lifetime: the ServedModel passed to SetServedModel and the Server passed to SetHttpServer must
//   outlive every handler call.
class ApiServer {
 public:
  ApiServer() = default;

  // Makes the model routes live. Until then /health answers 503 and model routes 503
  // "model_loading".
  void SetServedModel(const ServedModel* model) { model_.store(model, std::memory_order_release); }
  // While true (set before SetServedModel, cleared once the --warmup-file requests are done),
  // /health answers 503 "warming_up"; the model routes answer, so the warm-up requests run.
  void set_warming_up(bool on) { warming_up_.store(on, std::memory_order_release); }
  // The server these routes answer on: /metrics reports its open connections
  // (deepinfer_http_open_connections; 0 until set).
  void SetHttpServer(const http::Server* server) {
    http_server_.store(server, std::memory_order_release);
  }

  // Answers one request. Never throws; an unexpected exception becomes a 500.
  void Handle(const http::Request& request, http::ResponseWriter& writer);
  // Records the answer in the HTTP metrics and, when on, writes its request log line.
  void Observe(const http::Request& request, int status, double seconds,
               const http::RequestLog& log = {});

  // serve --api-key: every request but GET /health (and GET /metrics when `open_metrics`) and
  // the P/D route (which has its own key) must present one of `keys` as "Authorization: Bearer"
  // or "x-api-key", else 401 in its API's error shape ("missing_api_key", "invalid_api_key").
  // Empty: no check. Call before the server starts.
  void SetApiKeys(http::ApiKeySet keys, bool open_metrics) {
    api_keys_ = std::move(keys);
    open_metrics_ = open_metrics;
  }

  // One line per answered request (never the prompt or the answer); off by default. Probes and
  // scrapes are left out, see IsLoggedRequest.
  void set_log_requests(bool on) { log_requests_ = on; }

  // False for GET /health and GET /metrics when they succeed or answer 503 model_loading or
  // warming_up (load balancers poll them; failing while the model loads and warms up is by
  // design); true for everything else.
  static bool IsLoggedRequest(const http::Request& request, int status,
                              const http::RequestLog& log);

  // The request log line of one answer (without timestamp and level), e.g.
  // `POST /v1/chat/completions 200 812.4ms id=chatcmpl-… stream=false prompt_tokens=34
  // cached_tokens=32 completion_tokens=11 end=stop ttft_ms=35.2 tpot_ms=7.1`, plus
  // `x_request_id=…` (the answer's X-Request-Id: the client's own, else the one the server made;
  // the header the client sent when the log has none). Client-sent text is cut to 128 bytes and
  // anything but printable ASCII becomes '?', so a line cannot be forged or split.
  static std::string RequestLogLine(const http::Request& request, int status, double seconds,
                                    const http::RequestLog& log);

  HttpMetrics& metrics() { return metrics_; }

  // The metrics label of `path`: the route itself, or "other" for unknown paths.
  static std::string RouteLabel(const std::string& path);

  // One route: its method and its path as OpenAPI writes it ("/v1/models/{id}"). GET routes
  // also answer HEAD.
  struct Route {
    std::string method;
    std::string path;
  };
  // Every route Handle answers, from the table it dispatches on: openapi_test checks the
  // document served at GET /openapi.json (api/openapi_spec.h) against it.
  static std::vector<Route> Routes();

 private:
  void Dispatch(const http::Request& request, http::ResponseWriter& writer);
  void RespondHealth(const ServedModel* model, bool ready, http::ResponseWriter& writer) const;

  std::atomic<const ServedModel*> model_{nullptr};
  std::atomic<const http::Server*> http_server_{nullptr};
  std::atomic<bool> warming_up_{false};
  bool log_requests_ = false;
  http::ApiKeySet api_keys_;  // written before the server starts, read-only afterwards
  bool open_metrics_ = false;
  HttpMetrics metrics_;
};

}  // namespace deepinfer::api
