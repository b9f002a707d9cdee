#pragma once

// `deepinfer count-tokens`: the exact input-token count of a chat request, with the server's own
// tokenizer and chat encoder (tokenizer::LoadServable, as `deepinfer serve` loads them) and the
// chat route's rendering (api::RenderChatPrompt with api::ChatOptionsFor: tool definitions and
// thinking mode included), and a budget verdict against the context window. Never an estimate:
// a request that cannot be counted is an error.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/openai_types.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::tools {

// The budget of one request. The defaults are the operator documents' profile: compaction is
// needed from window - output - headroom = 999,424 input tokens.
// Units: tokens.
struct TokenBudget {
  int64_t window = 1048576;
  int64_t output_tokens = 32768;    // reserved for the answer
  int64_t headroom_tokens = 16384;  // kept free for what the client adds next
  int64_t image_tokens = 1024;      // reserved per image
  // The server's own rule, prompt + max_tokens <= window: the answer may take the window's last
  // token. The operator profile keeps that token free.
  bool answer_fills_window = false;

  // Input tokens from which compaction is needed.
  int64_t limit() const {
    return window - output_tokens - headroom_tokens + (answer_fills_window ? 1 : 0);
  }
};

// Which budget a verdict is judged against.
enum class BudgetProfile {
  // What the server accepts: the model's window, the request's max_tokens (1 without one: the
  // server needs room for one token), no headroom.
  kModel,
  // The operator documents' 1,048,576 / 32,768 / 16,384 budget (TokenBudget's defaults).
  kOperator,
};

// The command line's budget: a value left unset is the profile's.
struct BudgetFlags {
  BudgetProfile profile = BudgetProfile::kModel;
  std::optional<int64_t> window;  // kModel: caps the model's window
  std::optional<int64_t> output_tokens;
  std::optional<int64_t> headroom_tokens;
  int64_t image_tokens = 1024;
};

// The budget `flags` ask for, for a model whose window is `model_window` and a request whose
// max_tokens (max_completion_tokens; Anthropic's max_tokens) is `request_max_tokens`.
TokenBudget ResolveBudget(const BudgetFlags& flags, int64_t model_window,
                          std::optional<int64_t> request_max_tokens);

enum class RequestFormat { kAuto, kOpenAi, kAnthropic };

struct TokenCount {
  std::string format;  // "openai" or "anthropic"
  int64_t text_tokens = 0;
  int32_t num_images = 0;
  // The images' tokens: on a model with a vision tower, each image whose bytes are here (a data:
  // URI, a file:// path) counts its real span, as serve counts it; every other image counts the
  // budget's reservation (image_tokens).
  int64_t image_tokens = 0;
  int32_t num_planned_images = 0;  // images counted at their real span
  int64_t input_tokens = 0;        // text + image_tokens
  std::optional<int64_t> max_tokens;  // the request's output budget, when it sets one
  TokenBudget budget;                 // resolved from the flags, the model and the request
  bool needs_compaction = false;
  std::vector<api::ChatMessage> messages;  // as the chat route sees them
  tokenizer::ChatOptions options;          // tools, thinking, as the chat route renders them
};

// The span of history to summarise: messages [begin, end) of TokenCount::messages.
struct CompactionPlan {
  bool possible = false;
  int32_t begin = 0;
  int32_t end = 0;
  int32_t num_messages = 0;
  std::string reason;              // why no safe range exists, or how it was moved
  int64_t input_tokens_after = 0;  // the request's count with the range removed (no summary)
};

// Chooses the first half of the history (the messages after the leading system messages, the
// last message excluded), then moves its end to the nearest boundary that splits no tool call
// from its results (matched by id; a result without a known id belongs to the nearest earlier
// assistant turn with tool calls). Ties move the end earlier.
CompactionPlan PlanCompaction(const std::vector<api::ChatMessage>& messages);

// Counts requests for one model.
//
// Threads: Count is const and may run concurrently.
// Lifetime: owns the model's tokenizer and template (the weights are only mapped, never read).
class RequestCounter {
 public:
  // `tokenizer_path` and `chat_template` mean what serve's --tokenizer and --chat-template do.
  // Errors: those of tokenizer::LoadServable.
  static absl::StatusOr<std::unique_ptr<RequestCounter>> Create(
      const std::string& model_path, const std::string& tokenizer_path,
      const std::string& chat_template = "");
  ~RequestCounter();

  // Counts a request body (OpenAI chat or Anthropic messages; kAuto tells them apart by a
  // top-level "system" or Anthropic-only content block types) and judges it against the budget
  // that `flags` resolve to (ResolveBudget).
  // Errors: InvalidArgument with the parsers' codes, or the encoder's "bad_chat_request" (the
  //   request cannot be counted); InvalidArgument "bad_flags" when the budget leaves no room.
  absl::StatusOr<TokenCount> Count(std::string_view body, RequestFormat format,
                                   const BudgetFlags& flags) const;

  // The text tokens of `messages` rendered with `options`, as the chat route counts them.
  // Errors: the encoder's.
  absl::StatusOr<int64_t> CountMessages(const std::vector<api::ChatMessage>& messages,
                                        const tokenizer::ChatOptions& options) const;

  // Fills input_tokens_after of a possible plan.
  // Errors: the encoder's (the shortened conversation cannot be rendered).
  absl::Status CountPlan(const TokenCount& count, CompactionPlan* plan) const;

  int32_t model_window() const;
  const std::string& template_name() const;

 private:
  struct Impl;
  explicit RequestCounter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

std::string FormatTokenCount(const TokenCount& count, const CompactionPlan* plan);
std::string TokenCountJson(const TokenCount& count, const CompactionPlan* plan,
                           int32_t model_window);

}  // namespace deepinfer::tools
