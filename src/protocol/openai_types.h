#pragma once

// Request bodies of the OpenAI-compatible routes, parsed and validated into plain structs before
// anything touches the tokenizer or the engine.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"
#include "protocol/image_parts.h"
#include "util/json.h"
#include "util/sampling_params.h"

namespace deepinfer::api {

inline constexpr int32_t kMaxChoices = 16;      // n
inline constexpr int32_t kMaxStopStrings = 16;  // OpenAI allows 4; we accept more
inline constexpr int32_t kMaxStopStringBytes = 1024;
inline constexpr int32_t kMaxChatTopLogprobs = 20;       // chat top_logprobs
inline constexpr int32_t kMaxCompletionLogprobs = 5;     // completions logprobs
inline constexpr int32_t kMaxPrompts = 64;               // completions prompt arrays
inline constexpr int32_t kMaxSequencesPerRequest = 128;  // prompts x n
// Tokens reserved per image where an image's real span cannot be known (a model without a
// vision tower, an image count-tokens cannot read); the operator profile's bound.
inline constexpr int32_t kDefaultImageTokens = 1024;

// Settings shared by chat and completions.
//
// Units: max_tokens counts generated tokens per choice.
struct GenerationParams {
  std::string model;  // empty when the request did not name one
  int32_t n = 1;
  std::optional<int32_t> max_tokens;  // max_completion_tokens wins over max_tokens
  // vLLM's min_tokens: end-of-generation and stop_token_ids tokens are held back until this
  // many tokens were generated (engine::GenerateRequest::min_tokens). <= max_tokens.
  int32_t min_tokens = 0;
  std::vector<std::string> stop;      // non-empty strings
  std::vector<int32_t> stop_token_ids;
  util::SamplingParams sampling;  // num_top_logprobs: -1 when logprobs are off
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (or serve's force-include)
  // stream_options.continuous_usage_stats (vLLM): every chunk carries the usage so far.
  bool continuous_usage = false;
  bool ignore_eos = false;     // vLLM extension
  bool speculative = true;     // "speculative": false turns speculative drafts off for it
  // Structured output: response_format (json_object, json_schema), vLLM's structured_outputs
  // (json, regex, choice, grammar, json_object) or its older guided_json / guided_regex /
  // guided_choice / guided_grammar; at most one. Compiled by the route (constraint/grammar.h).
  std::optional<constraint::ConstraintSpec> constraint;
  std::string constraint_param;  // the request field it came from, for errors
  // Thinking budget in tokens (Anthropic thinking.budget_tokens): the reasoning block the
  // prompt opened is closed once it holds this many tokens. -1: none.
  int32_t reasoning_budget = -1;
  // Completions echo with logprobs: the prompt's logprobs with this many top entries
  // (engine::GenerateRequest::prompt_logprobs). -1: none.
  int32_t prompt_logprobs = -1;
};

// One chat message with its content flattened to text.
struct ChatMessage {
  std::string role;         // system, developer, user, assistant, tool
  std::string content;      // text parts joined; each image is kImagePlaceholder in its place
  std::vector<ImageRef> images;  // in content order (user and tool messages only)
  bool has_content = true;  // false for a null/absent content (assistant with tool calls)
  std::string name;
  std::string tool_call_id;
  std::string tool_calls_json;  // assistant tool_calls as compact JSON; empty when none
};

// A request's tool_choice, as the OpenAI chat, Responses and Anthropic APIs spell it, with its
// parallel-call setting.
struct ToolChoice {
  enum class Mode {
    kAuto,      // the model decides (also when tool_choice is absent)
    kNone,      // tool calls are not read out of the answer (the tools are still rendered)
    kRequired,  // OpenAI "required", Anthropic {"type": "any"}: the answer is tool calls
    kNamed,     // a named function / {"type": "tool"}: the answer is one call of `name`
  };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed
  // OpenAI parallel_tool_calls, Anthropic !disable_parallel_tool_use: false allows one call.
  bool parallel = true;
};

// What shapes a chat prompt besides its messages.
struct ChatExtras {
  std::vector<std::string> tools;  // each tools[i] object as compact JSON
  // Thinking mode: chat_template_kwargs.thinking / enable_thinking (vLLM, SGLang), or a
  // reasoning_effort (OpenAI) other than "none".
  bool thinking = false;
  std::string reasoning_effort;
  // vLLM's add_generation_prompt (default true) and continue_final_message (default false): the
  // latter continues the final message instead of starting a new turn (an assistant prefill),
  // and cannot be combined with the former.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // "required" and a named tool are enforced by constraining the answer to the encoder's
  // tool-call syntax (protocol/tool_constraint.h).
  ToolChoice tool_choice;
};

struct ChatRequest : ChatExtras {
  GenerationParams params;
  std::vector<ChatMessage> messages;
  bool logprobs = false;
};

// One prompt of /v1/completions: text, or token ids given by the client.
struct CompletionPrompt {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  GenerationParams params;
  std::vector<CompletionPrompt> prompts;
  bool echo = false;
};

// POST /tokenize (vLLM shape): either `prompt` or `messages`.
struct TokenizeRequest {
  std::string model;
  bool has_messages = false;
  std::string prompt;
  std::vector<ChatMessage> messages;
  // With messages: tools, thinking, add_generation_prompt and continue_final_message, rendered
  // as the chat route does.
  ChatExtras extras;
  std::optional<bool> add_special_tokens;  // default: true for prompt, false for messages
  bool return_token_strs = false;
};

// POST /detokenize (vLLM shape).
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// What the parsers check against the loaded model. 0 disables a check.
struct ParseLimits {
  int32_t vocab_size = 0;  // token ids (prompt, logit_bias, stop_token_ids) must be below it
  // serve --enable-force-include-usage (vLLM's flag): every stream carries usage, as if it had
  // asked with stream_options.include_usage.
  bool force_include_usage = false;
};

// Sets the request's one output constraint; `param` names the request field it came from.
// Errors: InvalidArgument "invalid_value" when another field already constrains the output.
absl::Status SetOutputConstraint(constraint::ConstraintSpec spec, std::string param,
                                 GenerationParams* params);

// Appends text part number `*num_parts` of one message to `joined` and counts it: parts are
// joined with "\n", as vLLM joins them, so that two parts never glue into one word.
// Source: vLLM entrypoints/chat_utils.py (_parse_chat_message_content_parts).
void AppendTextPart(std::string_view text, int32_t* num_parts, std::string* joined);

// True for an image content part or block ("image_url", "input_image", "image").
bool IsImagePart(const util::Json& part);

// InvalidArgument "unsupported_content" for an image at `param` (a content part or block): the
// served model has no vision tower. The server refuses them with it, before any stream byte.
absl::Status ImageUnsupportedError(std::string_view param);

// Adds image part `part` (at `param`) to `message`: its placeholder joins the content like a
// text part (AppendTextPart) and its ImageRef goes to message->images.
// Errors: those of ParseImagePart; InvalidArgument "invalid_value" for a role other than user
//   or tool (no API puts images in system or assistant turns).
absl::Status AppendImagePart(const util::Json& part, std::string_view param, int32_t* num_parts,
                             ChatMessage* message);

// The images of `messages`, in prompt order.
int32_t CountImages(const std::vector<ChatMessage>& messages);

// tool_choice and parallel_tool_calls of an OpenAI chat or Responses body: "none", "auto",
// "required", or a named function ({"type": "function", "function": {"name": ...}} in chat
// completions, {"type": "function", "name": ...} in Responses).
// Errors: InvalidArgument "invalid_type", "invalid_value" (another string), "unsupported_value"
//   (an object of another type: hosted tools, allowed_tools), "missing_field" (no name).
absl::StatusOr<ToolChoice> ParseOpenAiToolChoice(const util::Json& body);

// Parses and validates a request body. Unknown fields are ignored; `null` counts as absent.
// Errors: InvalidArgument with a `param` payload (see errors.h): "invalid_json",
//   "invalid_type", "invalid_value", "missing_field", "unsupported_value",
//   and those of AppendImagePart for an image part (kept as an ImageRef; nothing is fetched).
// Cost: O(body size). Never throws, whatever the bytes.
absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const ParseLimits& limits);

// The generation fields every route shares, read from a parsed JSON object: model, n,
// max_tokens / max_completion_tokens, stop, stop_token_ids, temperature, top_p, top_k, min_p,
// repetition / presence / frequency penalties, seed, logit_bias, stream, stream_options,
// ignore_eos, user. Absent fields keep their defaults; other fields are ignored.
// Errors: InvalidArgument "invalid_type" / "invalid_value" / "invalid_token" with the `param`.
absl::Status ParseGenerationParams(const util::Json& json, const ParseLimits& limits,
                                   GenerationParams* params);
// ParseChatRequest, with the number of its image parts in *num_images.
// Errors: those of ParseChatRequest.
absl::StatusOr<ChatRequest> ParseChatRequestForCount(std::string_view body,
                                                     const ParseLimits& limits,
                                                     int32_t* num_images);

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                         const ParseLimits& limits);
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body,
                                                     const ParseLimits& limits);
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                         const ParseLimits& limits);

}  // namespace deepinfer::api
