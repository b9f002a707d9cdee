#pragma once

// Parsing of Anthropic Messages requests into the chat pipeline's types: no engine or sockets
// here, so the request fuzz target covers it. (Anthropic's error shape is in http/errors.h.)
// Source: Anthropic API reference, "Messages" and "Count message tokens".

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "http/errors.h"
#include "protocol/openai_types.h"
#include "tokenizer/chat_template.h"
#include "util/json.h"

namespace deepinfer::api {

// Converts the `system` and `messages` of an Anthropic Messages request into chat messages:
// text blocks are joined with "\n" (AppendTextPart), tool_use blocks become assistant tool_calls, tool_result blocks become
// "tool" messages (before the text of their user turn), thinking blocks are dropped, image blocks
// become ImageRefs of their message (AppendImagePart) and are counted in *num_images.
// Errors: InvalidArgument "missing_field", "invalid_type", "invalid_value" (an empty `messages`
//   too), "unsupported_value" (documents and other block types no model here reads), each with
//   its `param`.
// Source: Anthropic API reference, Messages and "Count message tokens".
absl::StatusOr<std::vector<ChatMessage>> AnthropicToChatMessages(const util::Json& body,
                                                                 int32_t* num_images);

// An Anthropic Messages request as the chat encoder sees it.
struct AnthropicChat {
  std::vector<ChatMessage> messages;
  // tools[i] {name, description, input_schema} as OpenAI function tools; thinking on for
  // {"thinking": {"type": "enabled" | "adaptive" | "between_tools"}}; reasoning effort from
  // output_config.effort; continue_final_message for a final assistant message without
  // tool_use (a prefill, continued by the answer).
  tokenizer::ChatOptions options;
  int32_t num_images = 0;
};

// Errors: those of AnthropicToChatMessages; "unsupported_value" for server tools (a tool with a
//   type other than "custom"), which no encoder here renders.
absl::StatusOr<AnthropicChat> ParseAnthropicChat(const util::Json& body);

// A POST /v1/messages request.
struct AnthropicMessagesRequest {
  // model, max_tokens (required), stream, temperature / top_p / top_k and the other sampling
  // fields the chat route reads; `stop` holds stop_sequences; n is 1; `constraint` holds the
  // JSON schema of output_config.format or output_format (structured outputs).
  GenerationParams params;
  AnthropicChat chat;
  // tool_choice: auto, any (kRequired), tool (kNamed), none (tool calls stay text);
  // disable_parallel_tool_use as `parallel` false.
  ToolChoice tool_choice;
};

// Errors: InvalidArgument with a `param`: "invalid_json", "invalid_type", "invalid_value",
//   "missing_field" (max_tokens, messages), "unsupported_value" (server tools),
//   "invalid_constraint" (an output_config.format / output_format that is not
//   {"type": "json_schema", "schema": {...}}),
//   and those of ParseGenerationParams and ParseAnthropicChat (image blocks, in a message or a
//   tool_result, are kept as ImageRefs; nothing is fetched).
// Cost: O(body size). Never throws, whatever the bytes.
absl::StatusOr<AnthropicMessagesRequest> ParseAnthropicMessagesRequest(std::string_view body,
                                                                       const ParseLimits& limits);

}  // namespace deepinfer::api
