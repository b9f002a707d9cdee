#pragma once

// The one place where errors become HTTP: every user-visible failure of `serve` and the gateway
// (and every status the engine or tokenizer returns) goes through ApiErrorFromStatus, and its
// body takes OpenAI's or Anthropic's shape (ErrorBody, AnthropicErrorJson, ErrorBodyForPath).
// Source: OpenAI API reference, "Error codes"; Anthropic API reference, "Errors".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "util/json.h"

namespace deepinfer::http {

// An error as the client sees it: HTTP status plus the OpenAI-shaped body
// {"error": {"message", "type", "param", "code"}} (and llama.cpp's "n_prompt_tokens", "n_ctx"
// for context overflows).
struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // "invalid_request_error", "server_error", ...
  std::string param;  // empty: null
  std::string code;   // stable machine-readable code, e.g. "context_length_exceeded"
  std::optional<int64_t> n_prompt_tokens;
  std::optional<int64_t> n_ctx;
};

// Maps a non-OK status (its canonical code and the stable code from util::ErrorCodeOf) to the
// HTTP status and body fields. 400 invalid_request_error, 401, 403, 404 (model_not_found,
// not_found), 405 method_not_allowed, 413 request_too_large, 429, 503, 504, else 500.
ApiError ApiErrorFromStatus(const absl::Status& status);

// {"error": {...}} as compact JSON.
std::string ErrorBody(const ApiError& error);

// Anthropic's error type for an HTTP status ("invalid_request_error", "not_found_error",
// "overloaded_error", ...; "api_error" for the rest).
// Source: Anthropic API reference, "Errors".
const char* AnthropicErrorType(int http_status);
// {"type": "error", "error": {"type", "message"}}.
util::Json AnthropicErrorJson(const ApiError& error);
// True for the Anthropic routes (/v1/messages and below), whose clients read Anthropic's error
// shape.
bool IsAnthropicPath(std::string_view path);

// The body of an error answer on `path`: Anthropic's shape on the Anthropic routes, OpenAI's
// (ErrorBody) everywhere else.
std::string ErrorBodyForPath(const ApiError& error, std::string_view path);

// InvalidArgument with `code` and the request field `param` it concerns (carried as a payload so
// that it survives DI_RETURN_IF_ERROR).
absl::Status RequestError(std::string_view param, std::string_view code, std::string_view message);

// Attaches `param` to an existing status (no-op for OK).
absl::Status WithParam(absl::Status status, std::string_view param);

// InvalidArgument "context_length_exceeded" carrying the token counts. `param` names the field
// to shorten ("prompt", "messages", "input", "max_tokens", ...); the message calls the prompt
// "prompt" or "input" after such a param, else "messages". `prompt_is_lower_bound`: the
// prompt was not tokenized and `prompt_tokens` is only a lower bound (the gateway's estimate),
// which the message says.
// Units: tokens.
absl::Status ContextLengthError(std::string_view param, int64_t prompt_tokens,
                                int64_t requested_output_tokens, int64_t max_model_len,
                                bool prompt_is_lower_bound = false);

// Shorthands for the non-400 errors of the HTTP layer.
// `served`, when not empty, is named in the message (what the client should send instead).
absl::Status ModelNotFoundError(std::string_view model, std::string_view served = {});
// A path under neither API's prefix that one would route gets a hint ("/chat/completions" ->
// "did you mean /v1/chat/completions?": a client base URL without /v1, or with it twice).
absl::Status RouteNotFoundError(std::string_view path);
absl::Status MethodNotAllowedError(std::string_view method, std::string_view path);
absl::Status RequestTooLargeError(int64_t limit_bytes);

}  // namespace deepinfer::http
