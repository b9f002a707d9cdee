#pragma once

// POST /v1/messages/count_tokens (Anthropic shape). It renders and tokenizes through
// protocol/chat_prompt.h's RenderChatPrompt with the encoder options of ChatOptionsFor, as the
// chat route charges prompt_tokens and as `deepinfer count-tokens` counts, so the counts cannot
// drift apart.
//
// An image counts its real span, n_h (n_w + 1) + 2 tokens of the model's plan (read and decoded,
// no model run); for a model without a vision tower each image is reserved at
// kDefaultImageTokens instead of being refused, so that budgets stay conservative.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/served_model.h"
#include "http/server.h"
#include "protocol/openai_types.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::api {

// Answers `status` as a complete Anthropic-shaped error response, with `extra` headers.
void RespondAnthropicError(http::ResponseWriter& writer, const absl::Status& status,
                           const http::Headers& extra = {});

// The prompt tokens a chat request with `messages` and `options` is charged for: the rendered
// text, and each image's span (its plan, from the decoded size; kDefaultImageTokens without a
// vision tower).
// Errors: those of RenderChatPrompt, CheckImagesAllowed (too many images) and ExpandChatImages
//   (an image that cannot be read or decoded).
absl::StatusOr<int64_t> CountChatTokens(const ServedModel& model,
                                        const std::vector<ChatMessage>& messages,
                                        const tokenizer::ChatOptions& options);

// POST /v1/messages/count_tokens: {"input_tokens": N} of CountChatTokens (tools, thinking and
// the generation prompt included).
// Errors use Anthropic's shape {"type": "error", "error": {"type", "message"}} with the HTTP
// status of errors.h.
void HandleAnthropicCountTokens(const ServedModel& model, const http::Request& request,
                                http::ResponseWriter& writer);

}  // namespace deepinfer::api
