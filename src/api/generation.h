#pragma once

// The output side shared by every text route: submits one engine request per choice and turns
// each stream of token ids into text deltas (incremental detokenizer with UTF-8 holdback, then
// the stop-string matcher with prefix holdback), finish reasons and usage counts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::api {

class HttpMetrics;

// What one Poll produced for one choice.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;                        // new text, never part of a stop string
  std::vector<engine::TokenEvent> tokens;  // tokens consumed in this delta (for logprobs)
  std::string finish_reason;               // "stop" or "length", once, when the choice ends
  std::string stop_string;                 // with "stop": the stop string that ended it, if one did
  // Prompt logprobs (GenerationParams::prompt_logprobs), once, before any token: entry i is
  // prompt token i + 1's.
  std::vector<engine::TokenEvent> prompt_logprobs;
  bool has_prompt_logprobs = false;
};

// Units: tokens. Prompt and cached counts are summed over distinct prompts (choices sharing a
// prompt count it once); completion tokens over choices.
struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Completion tokens inside the reasoning block the prompt opened (its end tag excluded).
  int64_t reasoning_tokens = 0;
  int64_t draft_tokens = 0;     // speculative decoding: drafted, and accepted by the model
  int64_t accepted_tokens = 0;
  int64_t draft_steps = 0;      // verification steps that carried drafts
};

// One engine request plus what the API layer needs to turn its tokens into text.
struct ChoiceSpec {
  engine::GenerateRequest request;
  int32_t prompt_index = 0;        // which prompt it belongs to (usage counts it once)
  std::vector<std::string> stops;  // stop strings
  // The token that closes the reasoning block the prompt opened (Route::ReasoningEndToken):
  // tokens before it count as reasoning tokens. -1: the answer starts outside reasoning.
  int32_t reasoning_end_token = -1;
};

// The live choices of one HTTP request.
//
// Threads: one connection thread.
// Lifetime: borrows the engine, the tokenizer and `metrics`; the destructor cancels every engine
//   request still running.
class Generation {
 public:
  // Submits every choice. If one is refused, those already submitted are cancelled.
  // Errors: those of Engine::Submit ("context_length_exceeded", "invalid_token", "empty_prompt",
  //   "kv_cache_too_small", "shutting_down").
  static absl::StatusOr<std::unique_ptr<Generation>> Start(engine::Engine& engine,
                                                           const tokenizer::Tokenizer& tokenizer,
                                                           std::vector<ChoiceSpec> choices,
                                                           HttpMetrics* metrics);
  ~Generation();

  // Waits up to `timeout` for news from any choice and appends one delta per choice that
  // produced text, tokens or its finish.
  // Errors: the engine's error for a choice that failed (kError), Unavailable "cancelled" for a
  //   choice the engine cancelled on its own (shutdown).
  absl::Status Poll(std::chrono::milliseconds timeout, std::vector<ChoiceDelta>* out);

  // True once every choice has reported its finish and its usage is known (the engine finished
  // it, or gave no answer within a short grace period after a stop-string cancel).
  bool done() const;
  // True once every choice has reported its finish (usage may still be pending).
  bool all_finished() const;

  // Cancels every engine request (client gone). Poll must not be called afterwards.
  void Cancel();

  UsageCounts usage() const;
  int32_t num_choices() const { return static_cast<int32_t>(choices_.size()); }

 private:
  struct Choice;
  Generation(const tokenizer::Tokenizer& tokenizer, HttpMetrics* metrics);
  absl::Status Consume(Choice& choice, const engine::StreamUpdate& update,
                       std::vector<ChoiceDelta>* out);

  const tokenizer::Tokenizer& tokenizer_;
  HttpMetrics* metrics_;
  std::vector<std::unique_ptr<Choice>> choices_;
};

}  // namespace deepinfer::api
