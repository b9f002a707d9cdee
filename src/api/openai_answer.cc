#include "api/openai_answer.h"

#include <algorithm>
#include <cmath>

#include "api/route.h"
#include "http/errors.h"
#include "http/sse.h"

namespace deepinfer::api {
namespace {

// JSON has no -inf; vLLM reports impossible tokens with this value.
double FiniteLogprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0;
}

util::Json BytesJson(const std::string& piece) {
  util::Json bytes = util::Json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

util::Json UsageJson(const UsageCounts& usage) {
  util::Json u = util::Json::object();
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = util::Json{{"cached_tokens", usage.cached_tokens}};
  u["completion_tokens_details"] = util::Json{{"reasoning_tokens", usage.reasoning_tokens}};
  if (usage.draft_tokens > 0) {
    // Speculative decoding: acceptance rate = accepted / drafted, acceptance length = tokens per
    // verification step with drafts = 1 + accepted / steps.
    const double accepted = static_cast<double>(usage.accepted_tokens);
    u["speculative"] = util::Json{
        {"draft_tokens", usage.draft_tokens},
        {"accepted_tokens", usage.accepted_tokens},
        {"acceptance_rate", accepted / static_cast<double>(usage.draft_tokens)},
        {"acceptance_length",
         1.0 + accepted / static_cast<double>(std::max<int64_t>(1, usage.draft_steps))}};
  }
  return u;
}

util::Json ChatLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<engine::TokenEvent>& tokens, int32_t num_top) {
  util::Json content = util::Json::array();
  for (const engine::TokenEvent& t : tokens) {
    std::string piece = tokenizer.TokenPiece(t.token);
    util::Json entry = util::Json::object();
    entry["token"] = piece;
    entry["logprob"] = FiniteLogprob(t.logprob);
    entry["bytes"] = BytesJson(piece);
    util::Json top = util::Json::array();
    for (size_t i = 0; i < t.top_logprobs.size() && static_cast<int32_t>(i) < num_top; ++i) {
      std::string top_piece = tokenizer.TokenPiece(t.top_logprobs[i].first);
      top.push_back(util::Json{{"token", top_piece},
                               {"logprob", FiniteLogprob(t.top_logprobs[i].second)},
                               {"bytes", BytesJson(top_piece)}});
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return util::Json{{"content", std::move(content)}};
}

util::Json CompletionLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                                  const std::vector<engine::TokenEvent>& tokens, int32_t num_top,
                                  int64_t* text_offset) {
  util::Json out = util::Json::object();
  util::Json pieces = util::Json::array(), logprobs = util::Json::array(),
             tops = util::Json::array(), offsets = util::Json::array();
  for (const engine::TokenEvent& t : tokens) {
    std::string piece = tokenizer.TokenPiece(t.token);
    pieces.push_back(piece);
    logprobs.push_back(FiniteLogprob(t.logprob));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(piece.size());
    util::Json top = util::Json::object();
    for (size_t i = 0; i < t.top_logprobs.size() && static_cast<int32_t>(i) < num_top; ++i) {
      top[tokenizer.TokenPiece(t.top_logprobs[i].first)] = FiniteLogprob(t.top_logprobs[i].second);
    }
    // The chosen token is always among the top entries in the legacy format.
    if (num_top > 0 && !top.contains(piece)) top[piece] = FiniteLogprob(t.logprob);
    tops.push_back(std::move(top));
  }
  out["tokens"] = std::move(pieces);
  out["token_logprobs"] = std::move(logprobs);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

util::Json PromptLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                              const std::vector<int32_t>& prompt,
                              const std::vector<engine::TokenEvent>& entries, int32_t num_top,
                              int64_t* text_offset) {
  util::Json out = util::Json{{"tokens", util::Json::array()},
                              {"token_logprobs", util::Json::array()},
                              {"top_logprobs", util::Json::array()},
                              {"text_offset", util::Json::array()}};
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i > 0 && i - 1 < entries.size() && entries[i - 1].token == prompt[i]) {
      AppendLogprobs(CompletionLogprobsJson(tokenizer, {entries[i - 1]}, num_top, text_offset),
                     &out);
      continue;
    }
    const std::string piece = tokenizer.TokenPiece(prompt[i]);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(nullptr);
    out["top_logprobs"].push_back(nullptr);
    out["text_offset"].push_back(*text_offset);
    *text_offset += static_cast<int64_t>(piece.size());
  }
  return out;
}

void AppendLogprobs(const util::Json& more, util::Json* into) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const util::Json& v : more[key]) (*into)[key].push_back(v);
  }
}

util::Json OpenAiEnvelope(const std::string& id, const char* object, int64_t created,
                          const std::string& model) {
  util::Json body = util::Json::object();
  body["id"] = id;
  body["object"] = object;
  body["created"] = created;
  body["model"] = model;
  return body;
}

std::optional<util::Json> ChunkUsage(const GenerationParams& params, const Generation& generation) {
  if (!params.include_usage) return std::nullopt;
  if (!params.continuous_usage) return util::Json(nullptr);
  return UsageJson(generation.usage());
}

std::string OpenAiChoiceChunk(util::Json envelope, util::Json choice,
                              std::optional<util::Json> usage) {
  envelope["choices"] = util::Json::array({std::move(choice)});
  if (usage.has_value()) envelope["usage"] = *std::move(usage);
  return http::SseData(util::DumpJson(envelope));
}

void FinishOpenAiStream(Generation& generation, http::ResponseWriter& writer,
                        const std::function<bool(const ChoiceDelta&)>& on_delta,
                        std::optional<util::Json> usage_chunk) {
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) return;
  std::string tail;
  if (end == DriveEnd::kError) {
    tail = http::SseErrorAndDone(http::ApiErrorFromStatus(error));
  } else {
    if (usage_chunk) {
      (*usage_chunk)["choices"] = util::Json::array();
      (*usage_chunk)["usage"] = UsageJson(generation.usage());
      tail += http::SseData(util::DumpJson(*usage_chunk));
    }
    tail += http::SseDone();
  }
  if (writer.Write(tail)) writer.End();
}

}  // namespace deepinfer::api
