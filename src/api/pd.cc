#include "api/pd.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "api/metrics.h"
#include "api/pd_protocol.h"
#include "engine/prefix_checkpoint.h"
#include "fmt/format.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/url.h"
#include "spdlog/spdlog.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

using Clock = std::chrono::steady_clock;
namespace codes = util::codes;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Whether `request` carries "Authorization: Bearer <key>". Compares SHA-256 digests with
// CRYPTO_memcmp, so the time taken tells nothing about the key.
bool KeyMatches(const std::string& key, const http::Request& request) {
  const std::string* header = request.FindHeader("authorization");
  std::string_view presented = header != nullptr ? std::string_view(*header) : std::string_view();
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = presented.starts_with(kBearer);
  if (bearer) presented.remove_prefix(kBearer.size());
  const std::string a = engine::Sha256Hex(presented);
  const std::string b = engine::Sha256Hex(key);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0 && bearer && !key.empty();
}

absl::Status RunPdPrefill(const ServedModel& model, const http::Request& request,
                          http::ResponseWriter& writer) {
  if (model.pd == nullptr || model.pd->role != PdRole::kPrefill || model.checkpoints == nullptr) {
    return http::RouteNotFoundError(request.path);
  }
  if (!KeyMatches(model.pd->api_key, request)) {
    return MakeError(absl::StatusCode::kUnauthenticated, codes::kPdUnauthorized,
                     "Internal P/D calls need the prefill side's DEEPINFER_PD_API_KEY as "
                     "\"Authorization: Bearer <key>\".");
  }
  DI_ASSIGN_OR_RETURN(PdPrefillRequest r,
                      ParsePdPrefillRequest(request.body, model.tokenizer->vocab_size()));
  writer.log().id = r.request_id;
  double prefill_s = 0;
  const engine::CheckpointRef ref = model.engine->CheckpointFor(r.tokens, r.cache_salt);
  const std::optional<uint64_t> name = engine::ParseCheckpointFileName(ref.file);
  bool computed = false;
  if (name.has_value()) {
    r.tokens.resize(static_cast<size_t>(ref.num_tokens));  // its full blocks
    if (!model.checkpoints->Exists(*name)) {
      engine::GenerateRequest g;
      g.prompt = r.tokens;
      g.max_tokens = 1;
      g.prefill_only = true;
      g.cache_salt = r.cache_salt;
      g.request_id = r.request_id;
      const Clock::time_point start = Clock::now();
      DI_ASSIGN_OR_RETURN(auto stream, model.engine->Submit(std::move(g)));
      engine::StreamUpdate update;
      while (true) {
        if (writer.PeerClosed() || writer.stopping()) {
          stream->Cancel();
          return MakeError(absl::StatusCode::kCancelled, codes::kClientClosedRequest,
                           "The decode side closed the connection.");
        }
        if (stream->Wait(update, std::chrono::milliseconds(20)) &&
            update.finish != engine::FinishReason::kNone) {
          break;
        }
      }
      if (update.finish == engine::FinishReason::kError) {
        if (update.error_code == codes::kKvCacheExhausted) {
          return UnavailableError(codes::kKvCacheExhausted, update.error);
        }
        return InternalError(codes::kEngineError, update.error);
      }
      if (update.finish == engine::FinishReason::kCancelled) {
        return UnavailableError(codes::kShuttingDown, "The prefill side is stopping.");
      }
      prefill_s = Seconds(Clock::now() - start);
      // The engine queued the checkpoint for its writer: wait for it to reach the folder.
      model.checkpoints->Flush();
      computed = true;
      if (!model.checkpoints->Exists(*name)) {
        return UnavailableError(codes::kPdCheckpointNotWritten,
                                fmt::format("The prefill side computed {} tokens but could not "
                                            "write their checkpoint; see its log.",
                                            ref.num_tokens));
      }
    }
  }
  PdPrefillAnswer answer;
  answer.checkpoint = name.has_value() ? ref.file : std::string();
  answer.num_tokens = name.has_value() ? ref.num_tokens : 0;
  answer.computed = computed;
  answer.prefill_seconds = prefill_s;
  writer.log().prompt_tokens = answer.num_tokens;
  writer.Respond(200, {{"Content-Type", "application/json"}}, PdPrefillAnswerBody(answer));
  return absl::OkStatus();
}

// One prefill call of the decode side; fills *file, *tokens and *prefill_s from the answer.
absl::Status CallPrefill(const PdConfig& pd, const std::vector<int32_t>& prompt, uint64_t salt,
                         const std::string& request_id, std::string* file, int32_t* tokens,
                         double* prefill_s) {
  auto unavailable = [&](const std::string& why) {
    return UnavailableError(
        codes::kPdPrefillUnavailable,
        fmt::format("The prefill side ({}) could not prefill the prompt: {}", pd.prefill_url, why));
  };
  absl::StatusOr<http::Url> url = http::ParseUrl(pd.prefill_url);
  if (!url.ok()) return unavailable(OneLineError(url.status()));
  PdPrefillRequest body;
  body.tokens = prompt;
  body.cache_salt = salt;
  body.request_id = request_id;
  http::ClientRequest r;
  r.method = "POST";
  r.target = url->path() + std::string(kPdPrefillPath);
  r.body = PdPrefillRequestBody(body);
  r.headers.push_back({"Content-Type", "application/json"});
  r.headers.push_back({"Authorization", "Bearer " + pd.api_key});
  http::FetchOptions fetch;
  fetch.connect_timeout_ms = pd.connect_timeout_ms;
  // The prefill side says nothing until the prefill is done: bound the whole call only.
  fetch.idle_timeout_ms = pd.prefill_timeout_ms;
  fetch.total_timeout_ms = pd.prefill_timeout_ms;
  fetch.max_body_bytes = 64 * 1024;
  absl::StatusOr<http::ClientResponse> answer = http::Fetch(*url, r, fetch);
  if (!answer.ok()) return unavailable(OneLineError(answer.status()));
  if (answer->status != 200) {
    std::string code = "?";
    const util::Json j = util::ParseJsonOrDiscarded(answer->body);
    if (const util::Json* e = j.is_object() ? util::Member(j, "error") : nullptr;
        e != nullptr && e->is_object()) {
      if (auto c = util::StringMember(*e, "code")) code = c->substr(0, 64);
    }
    if (answer->status == 401) {
      return unavailable("it refused the P/D key (set the same DEEPINFER_PD_API_KEY on both "
                         "sides)");
    }
    return unavailable(fmt::format("HTTP {} {}", answer->status, code));
  }
  std::optional<PdPrefillAnswer> a = ParsePdPrefillAnswer(answer->body, prompt.size());
  if (!a.has_value()) return unavailable("its answer is malformed");
  *file = a->checkpoint;
  *tokens = a->num_tokens;
  *prefill_s = a->prefill_seconds;
  return absl::OkStatus();
}

}  // namespace

std::optional<PdRole> ParsePdRole(std::string_view name) {
  if (name == "combined") return PdRole::kCombined;
  if (name == "prefill") return PdRole::kPrefill;
  if (name == "decode") return PdRole::kDecode;
  return std::nullopt;
}

const char* PdRoleName(PdRole role) {
  switch (role) {
    case PdRole::kPrefill:
      return "prefill";
    case PdRole::kDecode:
      return "decode";
    default:
      return "combined";
  }
}

void HandlePdPrefill(const ServedModel& model, const http::Request& request,
                     http::ResponseWriter& writer) {
  absl::Status status = RunPdPrefill(model, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

absl::StatusOr<PdPrefillCost> PrefillOnPeer(const ServedModel& model,
                                            std::vector<ChoiceSpec>& specs,
                                            const std::string& request_id) {
  const Clock::time_point start = Clock::now();
  PdPrefillCost cost;
  for (size_t i = 0; i < specs.size(); ++i) {
    // Choices of one prompt share its checkpoint: one call per prompt.
    if (i > 0 && specs[i].prompt_index == specs[i - 1].prompt_index) {
      specs[i].request.checkpoint_file = specs[i - 1].request.checkpoint_file;
      specs[i].request.checkpoint_tokens = specs[i - 1].request.checkpoint_tokens;
      continue;
    }
    engine::GenerateRequest& g = specs[i].request;
    double prefill_s = 0;
    absl::Status st = CallPrefill(*model.pd, g.prompt, g.cache_salt, request_id,
                                  &g.checkpoint_file, &g.checkpoint_tokens, &prefill_s);
    if (!st.ok()) {
      spdlog::warn("request {}: {}", request_id, OneLineError(st));
      if (model.metrics != nullptr) model.metrics->RecordPdFailure();
      return st;
    }
    cost.prefill_s += prefill_s;
    cost.checkpoint_tokens += g.checkpoint_tokens;
  }
  cost.call_s = Seconds(Clock::now() - start);
  return cost;
}

}  // namespace deepinfer::api
