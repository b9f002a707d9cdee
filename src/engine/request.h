#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/sampler.h"

namespace deepinfer::constraint {
class CompiledConstraint;
}  // namespace deepinfer::constraint

namespace deepinfer::engine {

// The most draft tokens one step verifies per sequence (--speculative-tokens).
inline constexpr int32_t kMaxSpeculativeTokens = 8;

// Why a sequence stopped. kNone while it is still running.
enum class FinishReason {
  kNone,
  kStop,       // an end-of-generation token or a stop token id was produced
  kLength,     // max_tokens or the context window was reached
  kCancelled,  // the client cancelled (disconnect, stop string found by the API layer)
  kError,      // the engine could not run it; see StreamUpdate::error
};

// One image of a prompt (DeepSeek-V4.1 image input, docs/image.md): its span occupies prompt
// positions [position, position + span tokens), each holding the model's image_token_id, with
// span tokens = n_llm_h (n_llm_w + 1) + 2 for the LLM grid of the ViT grid (arch::LlmGridOf).
// The engine encodes pixel_values with the model's vision tower (once per content_hash while the
// encoder cache holds it) and the span rows replace those positions' embeddings. content_hash
// keys the prefix cache: a block holding span positions chains the hashes of its images, so two
// different images never share cached blocks and the same image in a later turn hits.
// Shapes: pixel_values [n_vit_h n_vit_w, 3, patch, patch] f32 (bf16-valued, image/deepseek_vision.h).
struct ImageInput {
  int32_t position = 0;
  int32_t n_vit_h = 0, n_vit_w = 0;
  std::vector<float> pixel_values;
  uint64_t content_hash = 0;  // of the image file's bytes (XXH3-64)
};

// A request as the engine sees it: token ids (and decoded images) only, no text or JSON.
//
// Units: max_tokens counts generated tokens; the caller guarantees
//   prompt.size() + max_tokens <= the engine's max_model_len (Engine::Submit rejects otherwise).
struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 16;
  // The model's end-of-generation tokens and stop_token_ids cannot be sampled before this many
  // tokens were generated (vLLM's min_tokens), unless a constraint's grammar is complete (its
  // end is an end). The request takes no speculative drafts until then.
  int32_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's end-of-generation ids
  bool ignore_eos = false;              // benchmarks: keep generating past end-of-generation
  // Speculative drafts for this request when the engine makes them (the body's
  // "speculative": false turns them off; greedy output is the same either way, sampled output
  // has the same distribution).
  bool speculative = true;
  uint64_t cache_salt = 0;              // isolates prefix-cache entries (0: shared)
  std::string request_id;               // for logs only
  std::string x_request_id;             // the answer's X-Request-Id, for telemetry and logs
  // Data-parallel rank that must serve it (X-data-parallel-rank); -1: the engine chooses.
  int32_t dp_rank = -1;
  // Prefill/decode disaggregation (docs/engine.md "Prefill/decode disaggregation").
  // The prefill side: compute the prompt's KV cache and save its checkpoint (whatever its
  // length, even if a file for it exists in memory only), sample nothing, and finish with
  // kLength and no tokens. The prompt should be whole blocks (the engine saves its full ones).
  bool prefill_only = false;
  // The decode side: the file in the checkpoint folder ("<16 hex digits>.dipc", as the prefill
  // side named it) said to hold the KV of the prompt's first checkpoint_tokens tokens. Submit
  // reads and verifies it against this prompt (revision, layout, fingerprint, payload) and
  // restores it instead of looking for a checkpoint itself; one that fails is counted, logged
  // and the prefix recomputed. Empty: none.
  std::string checkpoint_file;
  int32_t checkpoint_tokens = 0;
  // Structured output (constraint/grammar.h): each sampled token is drawn from those the
  // constraint allows, and the output ends (kStop) when it is complete and an end-of-generation
  // token is drawn. Compiled for this engine's model by the caller. Turns off ignore_eos and
  // speculative drafts for the request. Null: free.
  std::shared_ptr<const constraint::CompiledConstraint> constraint;
  // Thinking budget (Anthropic's thinking.budget_tokens): the output starts inside a reasoning
  // block (the prompt opened it) that `reasoning_end_token` closes. Once reasoning_budget tokens
  // were generated without that token, the next token is forced to it, so the answer leaves
  // its reasoning at the budget. Turns off speculative drafts for the request. -1: no budget.
  int32_t reasoning_budget = -1;
  int32_t reasoning_end_token = -1;
  // Prompt logprobs (completions `echo` with `logprobs`, vLLM's prompt_logprobs): with N >= 0
  // each prompt token after the first gets its log-probability under the model's raw
  // distribution at the position before it, plus the N most likely tokens there, delivered in
  // one StreamUpdate::prompt_logprobs before the first generated token. Every prompt position
  // is computed (no prefix-cache hit or checkpoint restore for the request) and speculative
  // drafts are off. With max_tokens 0 the request ends (kLength) once they are computed. -1: off.
  int32_t prompt_logprobs = -1;
  // The prompt's images, in prompt order, spans not overlapping (ImageInput). Shared so that a
  // request's copies (DP routing, retries) do not copy pixels.
  std::vector<std::shared_ptr<const ImageInput>> images;
};

// One generated token.
struct TokenEvent {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // empty unless requested
};

// Where one request's time went, measured on the engine thread.
//
// Units: seconds. prefill_s runs from the step that first scheduled the request to its first
//   token (0 when none came); decode_s from the first token to the last one, so it spans
//   completion_tokens - 1 decode steps.
struct RequestTimings {
  double queue_s = 0;  // arrival to first scheduled
  double prefill_s = 0;
  double decode_s = 0;
};

// What a client takes from its stream in one read: zero or more new tokens and, at the end, the
// finish reason with the usage counts.
struct StreamUpdate {
  std::vector<TokenEvent> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;       // set with kError
  std::string error_code;  // stable code with kError ("kv_cache_exhausted", ...)
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  int32_t completion_tokens = 0;
  int32_t num_draft_tokens = 0;     // speculative tokens drafted for this request
  int32_t num_accepted_tokens = 0;  // of which the model accepted
  int32_t num_draft_steps = 0;      // verification steps that carried drafts
  RequestTimings timings;           // set with the finish
  // GenerateRequest::prompt_logprobs: entry i is prompt token i + 1's (prompt size - 1
  // entries), in the update before the first token's; empty in every other update.
  std::vector<TokenEvent> prompt_logprobs;
};

// The channel between the engine thread (producer) and one client (consumer).
//
// The engine never blocks on it: when `capacity` tokens are waiting unread, Full() turns true and
// the scheduler pauses that sequence until the client catches up. Cancel() may be called from any
// thread; the engine frees the sequence at its next step boundary.
// Threads: all methods are thread-safe.
class RequestStream {
 public:
  explicit RequestStream(size_t capacity = 256) : capacity_(capacity) {}

  // Engine side. Never blocks.
  void PushToken(TokenEvent event);
  // Hands the request's prompt logprobs to the client (once, before its first token).
  void PushPromptLogprobs(std::vector<TokenEvent> entries);
  void Finish(FinishReason reason, int32_t prompt_tokens, int32_t cached_tokens,
              int32_t completion_tokens, std::string error = {}, std::string error_code = {});
  bool Full() const;
  // Speculative-decoding counts reported with the finish (call before Finish).
  void SetSpeculativeCounts(int32_t drafted, int32_t accepted, int32_t steps);
  // Timings reported with the finish (call before Finish).
  void SetTimings(const RequestTimings& timings);

  // Client side: waits up to `timeout` for news and moves everything pending into `out`
  // (replacing its contents). Returns true when `out` holds tokens or the finish.
  bool Wait(StreamUpdate& out, std::chrono::milliseconds timeout);
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  bool finished() const;

 private:
  // Something for Wait to hand out: tokens, or the finish not yet delivered.
  bool HasNewsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !pending_.empty() || has_prompt_logprobs_ || (done_ && !delivered_done_);
  }

  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // a token was pushed or the stream finished
  std::deque<TokenEvent> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<TokenEvent> prompt_logprobs_ ABSL_GUARDED_BY(mu_);
  bool has_prompt_logprobs_ ABSL_GUARDED_BY(mu_) = false;  // pushed, not yet handed out
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool delivered_done_ ABSL_GUARDED_BY(mu_) = false;
  StreamUpdate final_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

}  // namespace deepinfer::engine
