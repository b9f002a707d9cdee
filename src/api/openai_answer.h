#pragma once

// The pieces of OpenAI's answer shapes that chat completions and completions share: usage,
// logprobs, the envelope, one-choice SSE chunks and the end of a stream.
//
// Source: OpenAI API reference, "The chat completion object", "The chat completion chunk object",
//   "Completions" (legacy); vLLM's OpenAI server for -9999.0 in place of -inf logprobs.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "api/generation.h"
#include "engine/engine.h"
#include "http/server.h"
#include "protocol/openai_types.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace deepinfer::api {

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}, "completion_tokens_details":
//  {"reasoning_tokens"}}; both details are always there. With
// speculative decoding also "speculative": {draft_tokens, accepted_tokens, acceptance_rate,
// acceptance_length}.
util::Json UsageJson(const UsageCounts& usage);

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
util::Json ChatLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<engine::TokenEvent>& tokens, int32_t num_top);

// Legacy completions logprobs; `text_offset` is the running offset of each token's text in the
// choice's text and is advanced.
util::Json CompletionLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                                  const std::vector<engine::TokenEvent>& tokens, int32_t num_top,
                                  int64_t* text_offset);

// The prompt's part of legacy completions logprobs (echo with logprobs, as vLLM answers it):
// one entry per prompt token, the first with null logprob and top_logprobs (nothing predicts
// it), entry i + 1 from `entries[i]` (engine prompt logprobs; missing ones are null too).
// `text_offset` is advanced as in CompletionLogprobsJson.
util::Json PromptLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                              const std::vector<int32_t>& prompt,
                              const std::vector<engine::TokenEvent>& entries, int32_t num_top,
                              int64_t* text_offset);

// Appends the arrays of legacy logprobs object `more` to those of `into`.
void AppendLogprobs(const util::Json& more, util::Json* into);

// The envelope of an OpenAI answer or chunk: {"id", "object", "created", "model"}.
util::Json OpenAiEnvelope(const std::string& id, const char* object, int64_t created,
                          const std::string& model);

// The "usage" member of a stream chunk for `params`: none without include_usage; null with it
// (the usage then comes in a chunk of its own at the end); with continuous_usage_stats the
// usage so far (UsageJson of `generation`), as vLLM sends it.
std::optional<util::Json> ChunkUsage(const GenerationParams& params, const Generation& generation);

// One SSE chunk of `envelope` holding one choice, with `usage` (ChunkUsage) when given.
std::string OpenAiChoiceChunk(util::Json envelope, util::Json choice,
                              std::optional<util::Json> usage);

// The rest of an OpenAI SSE answer after its first chunks: DriveGeneration with `on_delta`,
// then (unless the client left) the usage chunk when `usage_chunk` is given (the envelope fields
// id / object / created / model; "choices": [] and "usage" are added) and `data: [DONE]`, or
// the in-band error frame and `data: [DONE]`; then the end of the body.
void FinishOpenAiStream(Generation& generation, http::ResponseWriter& writer,
                        const std::function<bool(const ChoiceDelta&)>& on_delta,
                        std::optional<util::Json> usage_chunk);

}  // namespace deepinfer::api
