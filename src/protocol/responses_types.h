#pragma once

// Parsing of OpenAI Responses API requests (POST /v1/responses) into the chat pipeline's types:
// no engine or sockets here, so the request fuzz target covers it.
// Source: OpenAI API reference, "Responses" (create a model response, input items, streaming
// events).

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/openai_types.h"
#include "util/json.h"

namespace deepinfer::api {

// A POST /v1/responses request. This server keeps no state between requests, so the whole
// conversation comes in `input` (previous_response_id is refused).
struct ResponsesRequest : ChatExtras {
  // model, max_output_tokens (as max_tokens), temperature, top_p, stream and the vLLM sampling
  // extensions; n is 1.
  GenerationParams params;
  // `instructions` as a system message, then the input items: messages (string or input_text
  // parts), function_call items as assistant tool calls (consecutive calls form one turn),
  // function_call_output items as tool messages; reasoning items are dropped.
  std::vector<ChatMessage> messages;
  // tool_choice (ChatExtras): with parallel_tool_calls false, only the first function call of
  // the answer is kept.
  // Request fields the response object repeats: instructions, max_output_tokens, temperature,
  // top_p, tools, tool_choice, parallel_tool_calls, metadata, reasoning, text, user.
  util::Json echo = util::Json::object();
};

// Errors: InvalidArgument with a `param`: "invalid_json", "invalid_type", "invalid_value",
//   "missing_field" (input), "unsupported_value" for every field that asks for what this
//   server does not do (previous_response_id, conversation, background: true, store: true,
//   prompt, include, max_tool_calls, top_logprobs, truncation: "auto", service tiers other than
//   auto/default, prompt_cache_retention "24h", n other than 1, text.verbosity other than
//   medium, files, built-in tools such as web_search, text formats other than plain text);
//   and those of AppendImagePart (input_image parts are kept as ImageRefs; a file_id is
//   "unsupported_value") and ParseGenerationParams.
// Cost: O(body size). Never throws, whatever the bytes.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                       const ParseLimits& limits);

}  // namespace deepinfer::api
