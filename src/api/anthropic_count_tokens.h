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
#include "api/anthropic_types.h"
#include "api/openai_types.h"
#include "api/served_model.h"
#include "http/errors.h"
#include "http/server.h"
#include "tokenizer/chat_template.h"
#include "util/json.h"

namespace deepinfer::api {

inline constexpr int32_t kDefaultImageTokens = 1024;

// Parses an OpenAI chat request for counting: image parts ("image_url", "input_image", "image")
// are taken out of the contents and counted in *num_images; the rest goes through
// ParseChatRequest unchanged.
// Errors: those of ParseChatRequest.
absl::StatusOr<ChatRequest> ParseChatRequestForCount(std::string_view body,
                                                     const ParseLimits& limits,
                                                     int32_t* num_images);

// Answers `status` as a complete Anthropic-shaped error response, with `extra` headers.
void RespondAnthropicError(http::ResponseWriter& writer, const absl::Status& status,
                           const http::Headers& extra = {});

// POST /v1/messages/count_tokens: {"input_tokens": N}; text tokens as the chat route counts
// them (tools, thinking and the generation prompt included), plus kDefaultImageTokens per image.
// Errors use Anthropic's shape {"type": "error", "error": {"type", "message"}} with the HTTP
// status of errors.h.
void HandleAnthropicCountTokens(const ServedModel& model, const http::Request& request,
                                http::ResponseWriter& writer);

}  // namespace deepinfer::api
