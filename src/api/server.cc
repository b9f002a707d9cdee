#include "api/server.h"

#include <chrono>
#include <exception>
#include <string_view>

#include "api/anthropic_count_tokens.h"
#include "api/handlers.h"
#include "api/openapi_spec.h"
#include "api/pd.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "spdlog/spdlog.h"
#include "util/log.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::api {
namespace {

enum class RouteId {
  kHealth,
  kModels,
  kModel,
  kMetrics,
  kChat,
  kCompletions,
  kTokenize,
  kDetokenize,
  kCountTokens,
  kMessages,
  kResponses,
  kPdPrefill,
  kOpenApi,
  kUnknown
};

struct RouteInfo {
  RouteId route;
  const char* method;  // the one method it answers (GET routes also answer HEAD)
};

// Every route, in the order Match() tries them. A path ending in "{id}" is a prefix followed by
// one path parameter (OpenAPI's spelling, so that Routes() and the document compare as is).
struct RouteEntry {
  RouteId route;
  const char* method;
  std::string_view path;
};
constexpr RouteEntry kRoutes[] = {
    {RouteId::kHealth, "GET", "/health"},
    {RouteId::kModels, "GET", "/v1/models"},
    {RouteId::kModel, "GET", "/v1/models/{id}"},
    {RouteId::kMetrics, "GET", "/metrics"},
    {RouteId::kOpenApi, "GET", "/openapi.json"},
    {RouteId::kChat, "POST", "/v1/chat/completions"},
    {RouteId::kCompletions, "POST", "/v1/completions"},
    {RouteId::kTokenize, "POST", "/tokenize"},
    {RouteId::kDetokenize, "POST", "/detokenize"},
    {RouteId::kCountTokens, "POST", "/v1/messages/count_tokens"},
    {RouteId::kMessages, "POST", "/v1/messages"},
    {RouteId::kResponses, "POST", "/v1/responses"},
    {RouteId::kPdPrefill, "POST", kPdPrefillPath},
};

RouteInfo Match(const std::string& path) {
  for (const RouteEntry& r : kRoutes) {
    const size_t param = r.path.find('{');
    const bool match = param == std::string_view::npos
                           ? path == r.path
                           : std::string_view(path).substr(0, param) == r.path.substr(0, param);
    if (match) return {r.route, r.method};
  }
  return {RouteId::kUnknown, ""};
}

util::Json ModelCard(const ServedModel& model) {
  return util::Json{{"id", model.served_model_name},       {"object", "model"},
                    {"created", model.created_unix},       {"owned_by", "deepinfer"},
                    {"root", model.served_model_name},     {"parent", nullptr},
                    {"max_model_len", model.max_model_len}};
}

// The model as Anthropic's Models API lists it (a client that sends `anthropic-version`).
// Source: Anthropic API reference, "List Models" and "Get a Model".
util::Json AnthropicModelCard(const ServedModel& model) {
  return util::Json{{"type", "model"},
                    {"id", model.served_model_name},
                    {"display_name", model.served_model_name},
                    {"created_at", util::UtcTimestamp(static_cast<double>(model.created_unix))}};
}

}  // namespace

std::vector<ApiServer::Route> ApiServer::Routes() {
  std::vector<Route> out;
  for (const RouteEntry& r : kRoutes) out.push_back({r.method, std::string(r.path)});
  return out;
}

std::string ApiServer::RouteLabel(const std::string& path) {
  RouteInfo info = Match(path);
  if (info.route == RouteId::kUnknown) return "other";
  if (info.route == RouteId::kModel) return "/v1/models/{id}";
  return path;
}

namespace {

std::string Printable(std::string_view s) { return util::PrintableForLog(s); }

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::string ApiServer::RequestLogLine(const http::Request& request, int status, double seconds,
                                      const http::RequestLog& log) {
  std::string line = fmt::format("{} {} {} {:.1f}ms", Printable(request.method),
                                 Printable(request.path), status, seconds * 1e3);
  if (!log.id.empty()) line += " id=" + log.id;
  if (!log.error.empty()) line += " error=" + Printable(log.error);
  // The answer's X-Request-Id (the client's own when usable); a request read without an id
  // (tests) shows what the client sent.
  const std::string_view rid =
      !log.request_id.empty() ? std::string_view(log.request_id) : request.Header("x-request-id");
  if (!rid.empty()) line += " x_request_id=" + Printable(rid);
  if (log.generated) {
    line += fmt::format(" stream={} prompt_tokens={} cached_tokens={} completion_tokens={} end={}",
                        log.stream, log.prompt_tokens, log.cached_tokens, log.completion_tokens,
                        log.end.empty() ? "none" : log.end);
    const std::chrono::steady_clock::time_point never;
    if (log.first_token != never && log.received != never) {
      line += fmt::format(" ttft_ms={:.1f}", Ms(log.first_token - log.received));
      if (log.completion_tokens > 1) {
        const auto done =
            log.received + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds));
        line += fmt::format(" tpot_ms={:.2f}", Ms(done - log.first_token) /
                                                   static_cast<double>(log.completion_tokens - 1));
      }
    }
  }
  return line;
}

bool ApiServer::IsLoggedRequest(const http::Request& request, int status,
                                const http::RequestLog& log) {
  // Probes are frequent and, while the model loads, failing by design: logging them would bury
  // the requests. A probe failing for any other reason is logged.
  bool probe = request.method == "GET" && (request.path == "/health" || request.path == "/metrics");
  return !(probe && (status < 400 || log.error == util::codes::kModelLoading ||
                     log.error == util::codes::kWarmingUp));
}

void ApiServer::Observe(const http::Request& request, int status, double seconds,
                        const http::RequestLog& log) {
  const std::string& m = request.method;
  bool known_method = m == "GET" || m == "POST" || m == "HEAD" || m == "PUT" || m == "DELETE" ||
                      m == "OPTIONS" || m == "PATCH";
  metrics_.Record(RouteLabel(request.path), known_method ? m : "other", status, seconds);
  if (!log_requests_ || !IsLoggedRequest(request, status, log)) return;
  spdlog::info("request {}", RequestLogLine(request, status, seconds, log));
}

void ApiServer::Handle(const http::Request& request, http::ResponseWriter& writer) {
  try {
    Dispatch(request, writer);
  } catch (const std::exception& e) {
    // Project code does not throw; this is the last line for a library that did.
    if (!writer.started()) {
      RespondError(writer, InternalError(util::codes::kInternalError, "Internal server error."));
    }
  }
}

namespace {

// Routes answered without an API key: /health for load balancers and the gateway's probes,
// the P/D route (it checks its own key), /metrics when opened.
bool IsOpenRoute(RouteId route, bool open_metrics) {
  return route == RouteId::kHealth || route == RouteId::kPdPrefill ||
         (route == RouteId::kMetrics && open_metrics);
}

}  // namespace

// /health: 200 with the data-parallel ranks' states; 503 while loading, warming up, or after an
// expert-parallel rank was lost (the job is ending).
void ApiServer::RespondHealth(const ServedModel* model, bool ready,
                              http::ResponseWriter& writer) const {
  absl::Status health = ready ? model->engine->health() : absl::OkStatus();
  if (!health.ok()) {
    RespondError(writer, health);  // an expert-parallel rank lost: the job is ending
  } else if (ready && warming_up_.load(std::memory_order_acquire)) {
    RespondError(writer, UnavailableError(util::codes::kWarmingUp,
                                          "The server is running its warm-up requests."));
  } else if (ready) {
    util::Json body{{"status", "ok"}};
    const int32_t n = model->engine->num_ranks();
    if (n > 1) {
      // Data-parallel ranks: each one's state, for operators and the gateway's probes.
      util::Json ranks = util::Json::array();
      for (int32_t r = 0; r < n; ++r) {
        const engine::EngineStats st = model->engine->RankStats(r);
        ranks.push_back({{"rank", r},
                         {"ready", model->engine->rank_ready(r)},
                         {"running", st.num_running},
                         {"waiting", st.num_waiting},
                         {"kv_cache_usage", st.kv_cache_usage}});
      }
      body["ranks"] = std::move(ranks);
    }
    RespondJson(writer, 200, body);
  } else {
    RespondError(writer, UnavailableError(util::codes::kModelLoading, "The model is loading."));
  }
}

void ApiServer::Dispatch(const http::Request& request, http::ResponseWriter& writer) {
  // Errors answered here take the shape of the API the path belongs to; /v1/models is shared,
  // and answers a client that sends `anthropic-version` (every Anthropic SDK does) in
  // Anthropic's shape.
  const bool anthropic_client = !request.Header("anthropic-version").empty();
  auto fail = [&](const absl::Status& status, const http::Headers& extra = {}) {
    if (http::IsAnthropicPath(request.path) ||
        (anthropic_client && request.path.rfind("/v1/models", 0) == 0)) {
      RespondAnthropicError(writer, status, extra);
    } else {
      RespondError(writer, status, extra);
    }
  };
  RouteInfo info = Match(request.path);
  if (!api_keys_.empty() && !IsOpenRoute(info.route, open_metrics_)) {
    // Checked before the route is looked up, so that a client without a key learns nothing
    // of which paths exist.
    const std::string_view key =
        http::PresentedKey(request.Header("authorization"), request.Header("x-api-key"));
    if (!api_keys_.Contains(key)) {
      fail(key.empty() ? MakeError(absl::StatusCode::kUnauthenticated,
                                   util::codes::kMissingApiKey,
                                   http::IsAnthropicPath(request.path)
                                       ? "Missing API key: send it as 'x-api-key: <key>' (or "
                                         "'Authorization: Bearer <key>')."
                                       : "Missing API key: send it as 'Authorization: Bearer "
                                         "<key>'.")
                       : MakeError(absl::StatusCode::kUnauthenticated,
                                   util::codes::kInvalidApiKey, "Incorrect API key provided."));
      return;
    }
  }
  if (info.route == RouteId::kUnknown) {
    fail(http::RouteNotFoundError(request.path));
    return;
  }
  bool method_ok = request.method == info.method ||
                   (request.method == "HEAD" && std::string(info.method) == "GET");
  if (!method_ok) {
    // RFC 9110 15.5.6: a 405 lists the methods the resource takes.
    const std::string allow = std::string(info.method) == "GET" ? "GET, HEAD" : info.method;
    fail(http::MethodNotAllowedError(request.method, request.path), {{"Allow", allow}});
    return;
  }
  const ServedModel* model = model_.load(std::memory_order_acquire);
  bool ready = model != nullptr && model->engine->ready();
  if (info.route == RouteId::kOpenApi) {
    // Needs no model, so clients and tools can read it while the model loads.
    writer.Respond(200, {{"Content-Type", "application/json"}}, OpenApiSpec());
    return;
  }
  if (info.route == RouteId::kMetrics) {
    std::string out;
    if (model != nullptr) {
      std::vector<engine::EngineStats> ranks;
      for (int32_t r = 0; r < model->engine->num_ranks(); ++r) {
        ranks.push_back(model->engine->RankStats(r));
      }
      FormatEngineMetrics(ranks, model->served_model_name,
                          metrics_.stop_string_finishes(), &out);
      if (model->checkpoints != nullptr) {
        FormatCheckpointMetrics(model->checkpoints->counters(), model->checkpoints->bytes(), &out);
      }
      if (model->pd != nullptr && model->pd->role == PdRole::kDecode) metrics_.FormatPd(&out);
    }
    const http::Server* server = http_server_.load(std::memory_order_acquire);
    metrics_.Format(server != nullptr ? server->num_connections() : 0, &out);
    writer.Respond(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}}, out);
    return;
  }
  if (info.route == RouteId::kHealth) {
    RespondHealth(model, ready, writer);
    return;
  }
  if (!ready) {
    fail(UnavailableError(util::codes::kModelLoading, "The model is loading; retry later."));
    return;
  }
  switch (info.route) {
    case RouteId::kModels:
      if (anthropic_client) {
        RespondJson(writer, 200,
                    util::Json{{"data", util::Json::array({AnthropicModelCard(*model)})},
                               {"has_more", false},
                               {"first_id", model->served_model_name},
                               {"last_id", model->served_model_name}});
      } else {
        RespondJson(writer, 200, util::Json{{"object", "list"},
                                            {"data", util::Json::array({ModelCard(*model)})}});
      }
      return;
    case RouteId::kModel: {
      std::string id = request.path.substr(std::string("/v1/models/").size());
      if (id != model->served_model_name) {
        fail(http::ModelNotFoundError(id));
      } else {
        RespondJson(writer, 200, anthropic_client ? AnthropicModelCard(*model) : ModelCard(*model));
      }
      return;
    }
    case RouteId::kChat:
      HandleChatCompletions(*model, request, writer);
      return;
    case RouteId::kCompletions:
      HandleCompletions(*model, request, writer);
      return;
    case RouteId::kTokenize:
      HandleTokenize(*model, request, writer);
      return;
    case RouteId::kDetokenize:
      HandleDetokenize(*model, request, writer);
      return;
    case RouteId::kCountTokens:
      HandleAnthropicCountTokens(*model, request, writer);
      return;
    case RouteId::kPdPrefill:
      HandlePdPrefill(*model, request, writer);
      return;
    case RouteId::kMessages:
      HandleAnthropicMessages(*model, request, writer);
      return;
    case RouteId::kResponses:
      HandleResponses(*model, request, writer);
      return;
    default:
      RespondError(writer, http::RouteNotFoundError(request.path));
  }
}

}  // namespace deepinfer::api
