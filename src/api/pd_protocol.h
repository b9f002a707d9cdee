#pragma once

// The bodies of the internal P/D call (api/pd.h): what the decode side sends to
// POST /internal/pd/prefill and what the prefill side answers. Both sides parse outside input
// here (tests/fuzz/request_fuzz.cc feeds them arbitrary bytes). Of the engine it reads only the
// checkpoint file name check (engine/engine.h), which is inline.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::api {

// {"prompt_token_ids": [int, ...], "cache_salt": "<decimal u64>", "request_id": "..."}.
struct PdPrefillRequest {
  std::vector<int32_t> tokens;  // non-empty, each in [0, vocab)
  uint64_t cache_salt = 0;      // optional in the body (0)
  std::string request_id;       // optional, cut to 64 bytes, other than [A-Za-z0-9-_.:] as '?'
};

// {"checkpoint": "<16 hex>.dipc" or "", "num_tokens": int, "computed": bool,
//  "prefill_seconds": number}.
struct PdPrefillAnswer {
  std::string checkpoint;   // a checkpoint file name, or "" (the prompt has no full block)
  int32_t num_tokens = 0;   // prompt tokens it covers; 0 with no checkpoint
  bool computed = false;    // false: the file was there already
  double prefill_seconds = 0;
};

// Errors: InvalidArgument "invalid_json", "invalid_type" (not an object, prompt_token_ids not a
//   non-empty array of integers), "missing_field" (prompt_token_ids), "invalid_token" (an id
//   outside [0, vocab)), "invalid_value" (cache_salt not a decimal string of a u64); `param`
//   names the field.
absl::StatusOr<PdPrefillRequest> ParsePdPrefillRequest(std::string_view body, int32_t vocab);
std::string PdPrefillRequestBody(const PdPrefillRequest& request);

// nullopt unless `body` is an answer as above whose checkpoint name is well formed (or empty
// with num_tokens 0) and whose num_tokens is within [0, prompt_tokens].
std::optional<PdPrefillAnswer> ParsePdPrefillAnswer(std::string_view body, size_t prompt_tokens);
std::string PdPrefillAnswerBody(const PdPrefillAnswer& answer);

}  // namespace deepinfer::api
