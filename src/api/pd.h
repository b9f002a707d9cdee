#pragma once

// Prefill/decode disaggregation through prefix checkpoints (docs/engine.md "Prefill/decode
// disaggregation"). Two `deepinfer serve` processes share a trusted folder:
//   - the prefill side (--pd-role prefill) answers POST /internal/pd/prefill: it computes the KV
//     cache of the prompt's full blocks, samples nothing, writes the prefix checkpoint
//     (engine/prefix_checkpoint.h) into the folder and answers its file name;
//   - the decode side (--pd-role decode) is what clients talk to: for each prompt it asks its
//     prefill side (--pd-prefill-url), then its engine reads the named file, verifies it against
//     its own prompt (model revision, layout, token fingerprint, payload hash), restores the
//     blocks, computes the suffix and decodes.
// Internal calls carry DEEPINFER_PD_API_KEY as a bearer token; it is never logged or put in a URL.
// Source: the KV-connector split of vLLM and SGLang (../shared/research/engine-anchors.md 2.7);
// the transport (a shared folder, an HTTP call naming the file) is deepinfer's own.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "api/generation.h"
#include "api/served_model.h"
#include "http/server.h"

namespace deepinfer::api {

enum class PdRole { kCombined, kPrefill, kDecode };

// "combined", "prefill", "decode"; nullopt for anything else.
std::optional<PdRole> ParsePdRole(std::string_view name);
const char* PdRoleName(PdRole role);

// The environment variable holding the key of internal P/D calls.
inline constexpr const char* kPdApiKeyEnv = "DEEPINFER_PD_API_KEY";
// The prefill side's internal route.
inline constexpr std::string_view kPdPrefillPath = "/internal/pd/prefill";
// Prefill calls the prefill side runs at once (more wait); its checkpoint writer queue holds as
// many, so none is dropped for want of room.
inline constexpr int kPdPrefillSlots = 16;

struct PdConfig {
  PdRole role = PdRole::kCombined;
  std::string prefill_url;  // decode side: "http://host:port" of its prefill side
  std::string api_key;      // both sides: the value of DEEPINFER_PD_API_KEY; never logged
  // Decode side: how long one prefill call may take in all (a long prompt on a slow machine),
  // and how long its connect may take. Units: milliseconds.
  int prefill_timeout_ms = 60 * 60 * 1000;
  int connect_timeout_ms = 5000;
};

// Prefill side, POST /internal/pd/prefill. Body: {"prompt_token_ids": [int, ...],
// "cache_salt": "<decimal u64>" (optional), "request_id": "..." (optional, for logs)}.
// Answers 200 {"checkpoint": "<16 hex>.dipc" or "" when the prompt has no full block,
// "num_tokens": tokens it holds, "computed": whether this call prefilled (false: the file was
// there), "prefill_seconds"}. Errors: 404 not_found on a server of another role; 401
// pd_unauthorized without the key; 400 for a malformed body or token ids (invalid_json,
// invalid_type, invalid_token, context_length_exceeded, ...); 503 pd_checkpoint_not_written
// when the file could not be written; the engine's errors otherwise.
// Threads: a connection thread; it waits for the engine and cancels when the caller hangs up.
void HandlePdPrefill(const ServedModel& model, const http::Request& request,
                     http::ResponseWriter& writer);

// What a request's prefill calls cost. Units: seconds, tokens.
struct PdPrefillCost {
  int32_t calls = 0;     // prompts sent (those with a full block before their last token)
  double call_s = 0;     // the calls, end to end
  double prefill_s = 0;  // of which the prefill side computed (its "prefill_seconds")
  int64_t checkpoint_tokens = 0;  // prompt tokens the checkpoints cover
};

// Decode side, before the engine requests are submitted: asks the prefill side to prefill each
// distinct prompt of `specs` (its full blocks before the last token; none: no call) and points
// each choice's request at the checkpoint file it answered (GenerateRequest::checkpoint_file).
// `cancelled` (the client left) is polled while waiting and ends the call, which cancels the
// prefill on the prefill side.
// Errors: Cancelled "client_closed_request" when `cancelled` turned true; Unavailable "pd_prefill_unavailable" (unreachable, timed out, refused the key, or
//   answered an error or a malformed body; the message says which), also counted in
//   model.metrics.
// Threads: a connection thread. Blocks for the prefill.
absl::StatusOr<PdPrefillCost> PrefillOnPeer(const ServedModel& model,
                                            std::vector<ChoiceSpec>& specs,
                                            const std::string& request_id,
                                            const std::function<bool()>& cancelled);

}  // namespace deepinfer::api
