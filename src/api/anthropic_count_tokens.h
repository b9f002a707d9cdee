#pragma once

// POST /v1/messages/count_tokens (Anthropic shape). It renders and tokenizes through
// protocol/chat_prompt.h's RenderChatPrompt with the encoder options of ChatOptionsFor, as the
// chat route charges prompt_tokens and as `deepinfer count-tokens` counts, so the counts cannot
// drift apart.
//
// Images are not read by any model served today; each one is reserved at a fixed number of
// tokens (kDefaultImageTokens) instead of being refused, so that budgets stay conservative.

#include "absl/status/status.h"
#include "api/served_model.h"
#include "http/server.h"

namespace deepinfer::api {

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
