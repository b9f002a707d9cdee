#pragma once

// The model a `deepinfer serve` process serves, the checks every route makes against it (model
// name, context window), and the plain JSON answers every route sends.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/image_inputs.h"
#include "constraint/grammar.h"
#include "engine/engine.h"
#include "http/server.h"
#include "protocol/openai_types.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace deepinfer::api {

class HttpMetrics;
struct PdConfig;

// Everything a request needs once the model is loaded: the engine that runs it, its tokenizer and
// chat encoder, and the limits and name it is served under.
// Lifetime: borrows engine, tokenizer, template and metrics; all outlive the HTTP server's
//   handlers. `engine` is null where only counting is done (`deepinfer count-tokens`).
struct ServedModel {
  engine::Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;
  std::string served_model_name;
  int32_t max_model_len = 0;      // the context window, in tokens
  int32_t max_output_tokens = 0;  // per choice, already capped by max_model_len
  int64_t created_unix = 0;       // for the "created" field of /v1/models
  bool force_include_usage = false;  // --enable-force-include-usage (ParseLimits)
  HttpMetrics* metrics = nullptr;
  engine::CheckpointStore* checkpoints = nullptr;  // null: no --prefix-checkpoint-dir
  const PdConfig* pd = nullptr;  // prefill/decode disaggregation (api/pd.h); null: combined
  // Compiles structured-output constraints for this model's vocabulary; null where no
  // generation runs.
  constraint::GrammarCompiler* grammar = nullptr;
  // The model's vision tower config (image_token_id, preprocessing knobs); null for a model that
  // reads text only. Borrowed from the loaded model.
  const model::DeepseekV41VisionConfig* vision = nullptr;
  MediaOptions media;  // where image bytes may come from, and the caps (serve's flags)
};

// What the request parsers check against `model` (ParseLimits).
ParseLimits ParseLimitsFor(const ServedModel& model);

// The output budget of one choice.
//
// Errors: InvalidArgument "context_length_exceeded" (with n_prompt_tokens and n_ctx) when the
//   prompt leaves no room for one token (param `prompt_param`) or prompt + requested max_tokens
//   exceed the window (param "max_tokens").
// Units: tokens. Without `requested`: min(max_output_tokens, window - prompt); with it:
//   min(requested, max_output_tokens).
absl::StatusOr<int32_t> ResolveMaxTokens(const ServedModel& model, int64_t prompt_tokens,
                                         std::optional<int32_t> requested,
                                         std::string_view prompt_param);

// NotFound "model_not_found" (404) unless `name` is empty or the served name.
absl::Status CheckModel(const ServedModel& model, const std::string& name);

// "<prefix><24 random alphanumerics>", e.g. "chatcmpl-...".
// Threads: any (a generator per thread).
std::string NewRequestId(std::string_view prefix);
// Seconds since the Unix epoch.
int64_t UnixNow();

// A complete JSON answer with `status`.
void RespondJson(http::ResponseWriter& writer, int status, const util::Json& body);
// A complete OpenAI-shaped error answer: the status's code and HTTP status (http/errors.h); the
// code also goes to the request log. `extra` headers go with it (e.g. Allow on a 405).
void RespondError(http::ResponseWriter& writer, const absl::Status& status,
                  const http::Headers& extra = {});

}  // namespace deepinfer::api
