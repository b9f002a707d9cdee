#pragma once

// What the gateway reads from a request before routing it: the presented API key, the few body
// fields that routing and the context pre-check need (read by one streaming pass, no document
// tree), and the session id. Bodies are forwarded unchanged; nothing here rewrites them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "http/api_keys.h"

namespace deepinfer::gateway {

using http::PresentedKey;  // http/api_keys.h

// Fields of an OpenAI / Anthropic request body.
struct BodyInfo {
  bool json_object = false;  // the body is one JSON object (parsed to its end)
  // The largest of max_tokens, max_completion_tokens and max_output_tokens. Units: tokens.
  std::optional<int64_t> max_tokens;
  // The field max_tokens came from ("max_tokens", "max_completion_tokens" or
  // "max_output_tokens"), for the `param` of an error; "" without one. Static storage.
  std::string_view max_tokens_field;
  // That field's value is beyond int64 or a float that is no integer (max_tokens then holds
  // INT64_MAX): `serve` reads it as no integer at all.
  bool max_tokens_not_an_integer = false;
  // The first top-level prompt field with text or token ids ("messages", "prompt" or "input"),
  // for the `param` of an error; "" without one. Static storage.
  std::string_view prompt_field;
  bool stream = false;
  std::string model;
  std::string user;              // top-level "user" (OpenAI)
  std::string metadata_user_id;  // "metadata": {"user_id"} (Anthropic)
  // Bytes of text in messages / prompt / input / system / instructions, leaving out URLs and
  // inline data (images, files). Units: bytes.
  int64_t prompt_text_bytes = 0;
  // Integers in a token-id "prompt" (each is one token). Units: tokens.
  int64_t prompt_token_ids = 0;
  // XXH3-128 (hex) of the conversation's opening: system text plus the messages up to and
  // including the first "user" message. Later turns of one conversation repeat that opening, so
  // they share this digest. "" when the body has no messages.
  std::string conversation_digest;
};

// Parses `body` with simdjson (strict RFC 8259, UTF-8 validated) and reads the routing fields.
// A body that is not one valid JSON object yields an empty BodyInfo with json_object false (the
// backend answers it with its own 400).
// Cost: O(body size), a few GB/s; memory O(body size) per thread, reused.
BodyInfo InspectBody(std::string_view body);

// The same through nlohmann::json's SAX parser: the reference that tests and the fuzz target
// compare InspectBody with (every body simdjson accepts, nlohmann accepts with the same fields).
// Several times slower; not on the request path.
BodyInfo InspectBodyWithNlohmann(std::string_view body);

struct SessionId {
  std::string key;     // 32 hex digits: SHA-256 of (key id, source, value); "" when none
  std::string source;  // "header", "user", "metadata.user_id", "conversation" or ""
};

// The session of a request: the session header's value, else the body's `user`, else Anthropic
// `metadata.user_id`, else the conversation digest. Hashed together with the API key id, so
// two tenants that pick the same session name do not share a binding, and raw user ids never
// reach the bindings file or Redis.
SessionId ExtractSession(std::string_view key_id, std::string_view header_value,
                         const BodyInfo& body);

struct PreCheckLimits {
  int64_t model_context_limit = 1 << 20;  // Units: tokens
  // Bytes of text no token exceeds: the prompt holds at least text_bytes / this many tokens.
  int64_t max_bytes_per_token = 32;
};

// A cheap lower bound of the prompt's tokens. Units: tokens.
int64_t PromptTokensLowerBound(const BodyInfo& body, const PreCheckLimits& limits);

// Rejects requests that cannot fit before they are queued: max_tokens alone, or the prompt's
// lower bound plus max_tokens, above the limit. A max_tokens that `serve` refuses as a number
// (beyond int64, or beyond int32) gets serve's own answer instead.
// Errors: InvalidArgument "invalid_type" ("'max_tokens' must be an integer.", beyond int64) or
//   "invalid_value" ("'max_tokens' is too large.", beyond int32; for max_output_tokens "must be
//   a positive integer"), as serve words them; "context_length_exceeded" with the field the
//   client sent as param
//   (max_tokens / max_completion_tokens / max_output_tokens, or messages / prompt / input),
//   carrying n_prompt_tokens (the lower bound, which the message calls "at least") and n_ctx
//   for http::ApiErrorFromStatus.
absl::Status PreCheck(const BodyInfo& body, const PreCheckLimits& limits);

}  // namespace deepinfer::gateway
