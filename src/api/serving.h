#pragma once

// What the route handlers share: the loaded model (Backend), the context-window rule, ids,
// usage and logprobs JSON, and the loop that drives a Generation while watching the client.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/generation.h"
#include "api/metrics.h"
#include "api/openai_types.h"
#include "api/reasoning_parser.h"
#include "api/tool_call_parser.h"
#include "engine/engine.h"
#include "http/server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace deepinfer::api {

// Everything a request needs once the model is loaded.
// Lifetime: borrows engine, tokenizer and template; all outlive the HTTP server's handlers.
struct Backend {
  engine::Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;
  std::string served_model_name;
  int32_t max_model_len = 0;      // the context window, in tokens
  int32_t max_output_tokens = 0;  // per choice, already capped by max_model_len
  int64_t created_unix = 0;       // for the "created" field of /v1/models
  HttpMetrics* metrics = nullptr;
};

// The output budget of one choice.
//
// Errors: InvalidArgument "context_length_exceeded" (with n_prompt_tokens and n_ctx) when the
//   prompt leaves no room for one token (param `prompt_param`) or prompt + requested max_tokens
//   exceed the window (param "max_tokens").
// Units: tokens. Without `requested`: min(max_output_tokens, window - prompt); with it:
//   min(requested, max_output_tokens).
absl::StatusOr<int32_t> ResolveMaxTokens(const Backend& backend, int64_t prompt_tokens,
                                         std::optional<int32_t> requested,
                                         std::string_view prompt_param);

// 404 model_not_found unless `model` is empty or the served name.
absl::Status CheckModel(const Backend& backend, const std::string& model);

// Renders the chat template and tokenizes the result.
// A rendered chat prompt and how to read the model's answer.
struct ChatPrompt {
  std::vector<int32_t> tokens;
  // The encoder can produce reasoning (DeepSeek): split <think>...</think> out of the answer.
  bool parse_reasoning = false;
  // The prompt itself opened the reasoning block, so the answer starts inside it.
  bool starts_in_reasoning = false;
};

// The encoder options a chat request renders with: its tool definitions, thinking mode,
// reasoning effort ("none" means the default effort), add_generation_prompt and
// continue_final_message. Chat, /tokenize and count-tokens share it.
tokenizer::ChatOptions ChatOptionsFor(const ChatExtras& extras);

// Renders `messages` (with tool definitions, thinking mode and a continued final message:
// tokenizer::RenderChat) through the model's encoder and tokenizes the result, exactly as
// generation sees it.
// Errors: InvalidArgument "bad_chat_request" from the encoder (e.g. a malformed tool call).
absl::StatusOr<ChatPrompt> RenderChatPrompt(const Backend& backend,
                                            const std::vector<ChatMessage>& messages,
                                            const tokenizer::ChatOptions& options);

std::vector<int32_t> ChatPromptTokens(const Backend& backend,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt);

// Fills the engine request fields every route sets the same way. Choice `i` of a seeded
// request uses seed + i.
engine::GenerateRequest MakeEngineRequest(const GenerationParams& params,
                                          std::vector<int32_t> prompt, int32_t max_tokens,
                                          int32_t choice_index, const std::string& request_id);

// "<prefix><24 random alphanumerics>", e.g. "chatcmpl-...".
std::string NewRequestId(std::string_view prefix);
int64_t UnixNow();

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}}; cached_tokens is always a number.
util::Json UsageJson(const UsageCounts& usage);

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
util::Json ChatLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<engine::TokenEvent>& tokens, int32_t num_top);

// Legacy completions logprobs; `text_offset` is the running offset of each token's text in the
// choice's text and is advanced.
util::Json CompletionLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                                  const std::vector<engine::TokenEvent>& tokens, int32_t num_top,
                                  int64_t* text_offset);

void RespondJson(http::ResponseWriter& writer, int status, const util::Json& body);
void RespondError(http::ResponseWriter& writer, const absl::Status& status);

// Tool calls are read out of an answer only when the request offers tools, does not turn them
// off (`tools_off`: OpenAI tool_choice "none", Anthropic {"type": "none"}), and the model's
// encoder has a tool-call syntax (DeepSeek); else kNone and calls stay text.
ToolCallFormat ToolFormatFor(const Backend& backend, bool has_tools, bool tools_off);

// Splits one choice's answer, as it streams, into reasoning (DeepSeek <think>...</think>),
// content and tool calls: the reasoning parser runs first, the tool-call parser on what it
// leaves as content. Feeding the whole answer at once gives the same result as any split.
// Threads: one per choice, not thread-safe.
class AnswerSplitter {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;  // may hold text from before and after `calls`
    std::vector<ParsedToolCall> calls;
  };
  AnswerSplitter(const ChatPrompt& prompt, ToolCallFormat tool_format);
  // `last`: the choice finished; text held back (a partial tag) is released.
  Delta Push(std::string_view text, bool last);
  // Tool calls completed so far.
  int num_calls() const { return tools_ ? tools_->num_calls() : 0; }

 private:
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

// How a generation loop ended.
enum class DriveEnd { kDone, kClientGone, kError };

// Polls `generation` until every choice finished and its usage is known, handing each delta to
// `on_delta` (which returns false when it could not write to the client). Cancels the engine
// requests when the client disconnects or a write fails; the disconnect is noticed within about
// one poll interval (20 ms) whether the request is queued, prefilling or decoding.
// `error` receives the failure with kError (also Unavailable "shutting_down" when the server
// stops).
DriveEnd DriveGeneration(Generation& generation, http::ResponseWriter& writer,
                         const std::function<bool(const ChoiceDelta&)>& on_delta,
                         absl::Status* error);

// The envelope of an OpenAI answer or chunk: {"id", "object", "created", "model"}.
util::Json OpenAiEnvelope(const std::string& id, const char* object, int64_t created,
                          const std::string& model);

// One SSE chunk of `envelope` holding one choice; "usage": null when include_usage is set (the
// usage then comes in a chunk of its own at the end).
std::string OpenAiChoiceChunk(util::Json envelope, util::Json choice, bool include_usage);

// The rest of an OpenAI SSE answer after its first chunks: DriveGeneration with `on_delta`,
// then (unless the client left) the usage chunk when `usage_chunk` is given (the envelope fields
// id / object / created / model; "choices": [] and "usage" are added) and `data: [DONE]`, or
// the in-band error frame and `data: [DONE]`; then the end of the body.
void FinishOpenAiStream(Generation& generation, http::ResponseWriter& writer,
                        const std::function<bool(const ChoiceDelta&)>& on_delta,
                        std::optional<util::Json> usage_chunk);

// For answers sent whole: DriveGeneration, and when it did not finish, the error answer through
// `respond_error` (Cancelled "client_closed_request" for a gone client). Returns true when every
// choice finished and the caller should send the answer.
bool DriveToCompletion(Generation& generation, http::ResponseWriter& writer,
                       const std::function<bool(const ChoiceDelta&)>& on_delta,
                       void (*respond_error)(http::ResponseWriter&, const absl::Status&));

// Submits the choices of one request (Generation::Start), records its response id and
// streaming mode in the request log, and answers through `stream_answer` or `whole_answer`.
// Errors: those of Generation::Start (nothing was sent then).
absl::Status AnswerGeneration(const Backend& backend, std::vector<ChoiceSpec> specs,
                              const std::string& id, bool stream, http::ResponseWriter& writer,
                              const std::function<void(Generation&)>& stream_answer,
                              const std::function<void(Generation&)>& whole_answer);

// The one choice of a route without `n` (Anthropic messages, Responses).
std::vector<ChoiceSpec> SingleChoice(const GenerationParams& params,
                                     const std::vector<int32_t>& prompt, int32_t max_tokens,
                                     const std::string& id);

}  // namespace deepinfer::api
