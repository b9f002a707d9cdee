// Feeds arbitrary bytes to the request parsers and validators of the HTTP API (chat,
// completions, tokenize, detokenize, Anthropic messages, Responses; the --warmup-file parser;
// the internal P/D prefill call and its answer)
// and to the error and SSE encoders their results reach. They must never crash, whatever the bytes.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/pd_protocol.h"
#include "http/errors.h"
#include "http/sse.h"
#include "protocol/anthropic_types.h"
#include "protocol/openai_types.h"
#include "protocol/responses_types.h"
#include "protocol/warmup_file.h"

namespace {

template <typename T>
void Check(const absl::StatusOr<T>& result) {
  if (result.ok()) return;
  deepinfer::http::ApiError error = deepinfer::http::ApiErrorFromStatus(result.status());
  std::string frame = deepinfer::http::SseErrorAndDone(error);
  if (frame.empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  // A vocabulary of SmolLM2's size, so token-id checks run on both sides of the bound.
  const deepinfer::api::ParseLimits limits{49152};
  auto warmup = deepinfer::api::ParseWarmupFile(body);
  Check(warmup);
  if (warmup.ok()) {
    if (warmup->empty()) __builtin_trap();
    for (const auto& w : *warmup) {
      if (w.path != "/v1/chat/completions" && w.path != "/v1/completions") __builtin_trap();
      if (w.line < 1 || w.body.empty()) __builtin_trap();
    }
  }
  auto chat = deepinfer::api::ParseChatRequest(body, limits);
  Check(chat);
  if (chat.ok()) {
    // Parsed values must satisfy the documented ranges.
    const auto& p = chat->params;
    if (p.n < 1 || p.n > deepinfer::api::kMaxChoices) __builtin_trap();
    if (p.sampling.temperature < 0 || p.sampling.temperature > 2) __builtin_trap();
    if (p.max_tokens && *p.max_tokens < 1) __builtin_trap();
    if (chat->messages.empty()) __builtin_trap();
  }
  // The internal P/D call: the prefill side parses the request, the decode side the answer.
  auto pd = deepinfer::api::ParsePdPrefillRequest(body, limits.vocab_size);
  Check(pd);
  if (pd.ok()) {
    if (pd->tokens.empty()) __builtin_trap();
    for (int32_t id : pd->tokens) {
      if (id < 0 || id >= limits.vocab_size) __builtin_trap();
    }
    auto again = deepinfer::api::ParsePdPrefillRequest(
        deepinfer::api::PdPrefillRequestBody(*pd), limits.vocab_size);
    if (!again.ok() || again->tokens != pd->tokens || again->cache_salt != pd->cache_salt) {
      __builtin_trap();
    }
  }
  if (auto answer = deepinfer::api::ParsePdPrefillAnswer(body, 4096)) {
    if (answer->num_tokens < 0 || answer->num_tokens > 4096) __builtin_trap();
    if (answer->checkpoint.empty() && answer->num_tokens != 0) __builtin_trap();
    if (answer->checkpoint.find('/') != std::string::npos) __builtin_trap();
  }
  auto completion = deepinfer::api::ParseCompletionRequest(body, limits);
  Check(completion);
  if (completion.ok()) {
    for (const auto& prompt : completion->prompts) {
      for (int32_t id : prompt.tokens) {
        if (id < 0 || id >= limits.vocab_size) __builtin_trap();
      }
    }
  }
  auto messages = deepinfer::api::ParseAnthropicMessagesRequest(body, limits);
  Check(messages);
  if (messages.ok()) {
    const auto& p = messages->params;
    if (p.n != 1 || !p.max_tokens || *p.max_tokens < 1) __builtin_trap();
    if (p.stop.size() > static_cast<size_t>(deepinfer::api::kMaxStopStrings)) __builtin_trap();
    (void)deepinfer::http::AnthropicErrorJson(deepinfer::http::ApiError{});
  }
  auto responses = deepinfer::api::ParseResponsesRequest(body, limits);
  Check(responses);
  if (responses.ok()) {
    if (responses->params.n != 1) __builtin_trap();
    if (responses->params.max_tokens && *responses->params.max_tokens < 1) __builtin_trap();
    (void)deepinfer::util::DumpJson(responses->echo);
  }
  Check(deepinfer::api::ParseTokenizeRequest(body, limits));
  Check(deepinfer::api::ParseDetokenizeRequest(body, limits));
  (void)deepinfer::http::SseData(body);
  return 0;
}
