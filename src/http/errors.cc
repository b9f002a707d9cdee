#include "http/errors.h"

#include <cstdlib>
#include <string>

#include "absl/strings/cord.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

constexpr absl::string_view kParamUrl = "deepinfer/api_param";
constexpr absl::string_view kPromptTokensUrl = "deepinfer/n_prompt_tokens";
constexpr absl::string_view kContextUrl = "deepinfer/n_ctx";

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::optional<int64_t> IntPayload(const absl::Status& status, absl::string_view url) {
  auto payload = status.GetPayload(url);
  if (!payload) return std::nullopt;
  std::string text(*payload);
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  return value;
}

struct HttpKind {
  int http_status;
  const char* type;
};

// OpenAI's error type for an HTTP status.
const char* TypeFor(int http_status, std::string_view code) {
  switch (http_status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return code == util::codes::kModelNotFound.name ? "invalid_request_error" : "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    default:
      return http_status < 500 ? "invalid_request_error" : "server_error";
  }
}

HttpKind KindOf(const absl::Status& status, const std::string& code) {
  // A registered code raised with its canonical status has its HTTP status in the registry (a
  // few differ from their canonical code's: 405, 413, 499, 502, kv_cache_too_small's 400).
  if (const util::ErrorCode* registered = util::FindErrorCode(code);
      registered != nullptr && registered->status_code == status.code()) {
    return {registered->http_status, TypeFor(registered->http_status, code)};
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return {400, "invalid_request_error"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "authentication_error"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error"};
    case absl::StatusCode::kNotFound:
      return {404, "not_found_error"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error"};
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
      return {503, "service_unavailable_error"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "timeout_error"};
    case absl::StatusCode::kUnimplemented:
      return {400, "invalid_request_error"};
    default:
      return {500, "server_error"};
  }
}

}  // namespace

ApiError ApiErrorFromStatus(const absl::Status& status) {
  ApiError error;
  if (status.ok()) {
    error.message = "internal error: OK status reported as an error";
    error.type = "server_error";
    error.code = util::codes::kInternal;
    return error;
  }
  error.code = ErrorCodeOf(status);
  HttpKind kind = KindOf(status, error.code);
  error.http_status = kind.http_status;
  error.type = kind.type;
  error.message = std::string(status.message());
  if (auto param = status.GetPayload(kParamUrl)) error.param = std::string(*param);
  error.n_prompt_tokens = IntPayload(status, kPromptTokensUrl);
  error.n_ctx = IntPayload(status, kContextUrl);
  return error;
}

std::string ErrorBody(const ApiError& error) {
  util::Json inner = util::Json::object();
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? util::Json(nullptr) : util::Json(error.param);
  inner["code"] = error.code;
  if (error.n_prompt_tokens) inner["n_prompt_tokens"] = *error.n_prompt_tokens;
  if (error.n_ctx) inner["n_ctx"] = *error.n_ctx;
  util::Json body = util::Json::object();
  body["error"] = std::move(inner);
  return util::DumpJson(body);
}

const char* AnthropicErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 405:
      return "invalid_request_error";
    case 413:
      return "request_too_large";  // Anthropic's error type, not a code
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

util::Json AnthropicErrorJson(const ApiError& error) {
  return util::Json{{"type", "error"},
                    {"error", util::Json{{"type", AnthropicErrorType(error.http_status)},
                                         {"message", error.message}}}};
}

bool IsAnthropicPath(std::string_view path) {
  return path == "/v1/messages" || path.rfind("/v1/messages/", 0) == 0;
}

std::string ErrorBodyForPath(const ApiError& error, std::string_view path) {
  return IsAnthropicPath(path) ? util::DumpJson(AnthropicErrorJson(error)) : ErrorBody(error);
}

absl::Status RequestError(std::string_view param, std::string_view code, std::string_view message) {
  return WithParam(InvalidArgumentError(code, message), param);
}

absl::Status WithParam(absl::Status status, std::string_view param) {
  if (!status.ok() && !param.empty()) status.SetPayload(kParamUrl, absl::Cord(Av(param)));
  return status;
}

absl::Status ContextLengthError(std::string_view param, int64_t prompt_tokens,
                                int64_t requested_output_tokens, int64_t max_model_len,
                                bool prompt_is_lower_bound) {
  const std::string_view prompt_name =
      param == "prompt" || param == "input" ? param : std::string_view("messages");
  const std::string_view at_least = prompt_is_lower_bound ? "at least " : "";
  std::string message = fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {}{} tokens ({}{} "
      "in the {}, {} in the completion). Please reduce the length of the {} or completion.",
      max_model_len, at_least, prompt_tokens + requested_output_tokens, at_least, prompt_tokens,
      prompt_name, requested_output_tokens, prompt_name);
  absl::Status status = RequestError(param, util::codes::kContextLengthExceeded, message);
  status.SetPayload(kPromptTokensUrl, absl::Cord(std::to_string(prompt_tokens)));
  status.SetPayload(kContextUrl, absl::Cord(std::to_string(max_model_len)));
  return status;
}

absl::Status ModelNotFoundError(std::string_view model, std::string_view served) {
  std::string message = fmt::format("The model `{}` does not exist.", model);
  if (!served.empty()) message += fmt::format(" This server serves `{}`.", served);
  return WithParam(NotFoundError(util::codes::kModelNotFound, message), "model");
}

absl::Status RouteNotFoundError(std::string_view path) {
  std::string message = fmt::format("No route for path `{}`.", path);
  static constexpr std::string_view kRoutes[] = {"/chat/completions", "/completions", "/responses",
                                                 "/messages", "/models", "/embeddings"};
  std::string_view rest = path;
  int prefixes = 0;  // how many "/v1" the path starts with: one is right
  for (; rest.substr(0, 3) == "/v1"; ++prefixes) rest.remove_prefix(3);
  for (std::string_view r : kRoutes) {
    if (prefixes != 1 && rest.substr(0, r.size()) == r) {
      message += fmt::format(" Did you mean `/v1{}`? (A client's base URL should end in /v1 "
                             "for the OpenAI SDK and without it for the Anthropic SDK.)",
                             rest);
      break;
    }
  }
  return NotFoundError(util::codes::kNotFound, message);
}

absl::Status MethodNotAllowedError(std::string_view method, std::string_view path) {
  return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kMethodNotAllowed,
                   fmt::format("Method {} is not allowed for `{}`.", method, path));
}

absl::Status RequestTooLargeError(int64_t limit_bytes) {
  return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kRequestTooLarge,
                   fmt::format("Request body is larger than the limit of {} bytes.", limit_bytes));
}

}  // namespace deepinfer::http
