#pragma once

// Token counting of whole requests, shared by `POST /v1/messages/count_tokens` (Anthropic shape)
// and `deepinfer count-tokens`: both render and tokenize through RenderChatPrompt with the
// encoder options of ChatOptionsFor, as the chat route charges prompt_tokens, so the counts
// cannot drift apart.
//
// Images are not read by any model served today; each one is reserved at a fixed number of
// tokens (kDefaultImageTokens) instead of being refused, so that budgets stay conservative.

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/errors.h"
#include "api/http_server.h"
#include "api/json.h"
#include "api/openai_types.h"
#include "api/serving.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::api {

inline constexpr int32_t kDefaultImageTokens = 1024;

// Parses an OpenAI chat request for counting: image parts ("image_url", "input_image", "image")
// are taken out of the contents and counted in *num_images; the rest goes through
// ParseChatRequest unchanged.
// Errors: those of ParseChatRequest.
absl::StatusOr<ChatRequest> ParseChatRequestForCount(std::string_view body,
                                                     const ParseLimits& limits,
                                                     int32_t* num_images);

// Converts the `system` and `messages` of an Anthropic Messages request into chat messages:
// text blocks are joined, tool_use blocks become assistant tool_calls, tool_result blocks become
// "tool" messages (before the text of their user turn), thinking blocks are dropped, image blocks
// are counted in *num_images.
// Errors: InvalidArgument "missing_field", "invalid_type", "invalid_value", "unsupported_value"
//   (documents and other block types no model here reads), each with its `param`.
// Source: Anthropic API reference, Messages and "Count message tokens".
absl::StatusOr<std::vector<ChatMessage>> AnthropicToChatMessages(const Json& body,
                                                                 int32_t* num_images);

// An Anthropic Messages request as the chat encoder sees it.
struct AnthropicChat {
  std::vector<ChatMessage> messages;
  // tools[i] {name, description, input_schema} as OpenAI function tools; thinking on for
  // {"thinking": {"type": "enabled" | "adaptive" | "between_tools"}}; reasoning effort from
  // output_config.effort.
  tokenizer::ChatOptions options;
  int32_t num_images = 0;
};

// Errors: those of AnthropicToChatMessages; "unsupported_value" for server tools (a tool with a
//   type other than "custom"), which no encoder here renders.
absl::StatusOr<AnthropicChat> ParseAnthropicChat(const Json& body);

// Anthropic's error type for an HTTP status ("invalid_request_error", "not_found_error",
// "overloaded_error", ...; "api_error" for the rest).
// Source: Anthropic API reference, "Errors".
const char* AnthropicErrorType(int http_status);
// {"type": "error", "error": {"type", "message"}}.
Json AnthropicErrorJson(const ApiError& error);
// Answers `status` as a complete Anthropic-shaped error response.
void RespondAnthropicError(ResponseWriter& writer, const absl::Status& status);

// POST /v1/messages/count_tokens: {"input_tokens": N}; text tokens as the chat route counts
// them (tools, thinking and the generation prompt included), plus kDefaultImageTokens per image.
// Errors use Anthropic's shape {"type": "error", "error": {"type", "message"}} with the HTTP
// status of errors.h.
void HandleAnthropicCountTokens(const Backend& backend, const HttpRequest& request,
                                ResponseWriter& writer);

}  // namespace deepinfer::api
