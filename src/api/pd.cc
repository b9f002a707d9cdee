#include "api/pd.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/mutex.h"
#include "api/metrics.h"
#include "api/pd_protocol.h"
#include "engine/engine.h"
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

// Why a prefill call ended early: the server stopping, or the decode side hanging up.
absl::Status GoneError(http::ResponseWriter& writer) {
  if (writer.stopping()) {
    return UnavailableError(codes::kShuttingDown, "The prefill side is stopping.");
  }
  return MakeError(absl::StatusCode::kCancelled, codes::kClientClosedRequest,
                   "The decode side closed the connection.");
}

// Prefill calls in progress at once on the prefill side: each holds one checkpoint in the
// store's writer queue (queue capacity kPdPrefillSlots, serve.cc), so a burst of calls waits
// here instead of dropping checkpoints.
class PrefillSlots {
 public:
  // Waits for a slot; false when `gone` turns true first.
  bool Acquire(const std::function<bool()>& gone) {
    absl::MutexLock lock(&mu_);
    auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_ < kPdPrefillSlots; };
    while (!mu_.AwaitWithTimeout(absl::Condition(&free), absl::Milliseconds(20))) {
      if (gone()) return false;
    }
    ++busy_;
    return true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --busy_;
  }

 private:
  absl::Mutex mu_;
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
};

PrefillSlots& Slots() {
  static PrefillSlots* slots = new PrefillSlots();
  return *slots;
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
    const std::function<bool()> gone = [&writer] {
      return writer.PeerClosed() || writer.stopping();
    };
    if (!model.checkpoints->Exists(*name)) {
      if (!Slots().Acquire(gone)) return GoneError(writer);
      absl::Cleanup release = [] { Slots().Release(); };
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
        if (gone()) {
          stream->Cancel();
          return GoneError(writer);
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
      model.checkpoints->WaitWritten(*name);
      computed = true;
      if (!model.checkpoints->Exists(*name)) {
        return UnavailableError(codes::kPdCheckpointNotWritten,
                                fmt::format("The prefill side computed {} tokens but could not "
                                            "write their checkpoint (the folder is read-only or "
                                            "full, or --checkpoint-max-bytes is smaller than "
                                            "one checkpoint); its prefix checkpoint metrics "
                                            "count which.",
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
                         const std::string& request_id, const std::function<bool()>& cancelled,
                         std::string* file, int32_t* tokens, double* prefill_s) {
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
  fetch.cancel = cancelled;  // closing the call cancels the prefill there
  absl::StatusOr<http::ClientResponse> answer = http::Fetch(*url, r, fetch);
  if (!answer.ok()) {
    if (absl::IsCancelled(answer.status())) return answer.status();
    return unavailable(OneLineError(answer.status()));
  }
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
                                            const std::string& request_id,
                                            const std::function<bool()>& cancelled) {
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
    // The full blocks before the prompt's last token: that token is always computed here (its
    // logits are the first sample), so a block it ends would be computed twice. A prompt
    // without such a block needs no prefill side at all.
    std::vector<int32_t> head(g.prompt.begin(), g.prompt.end() - 1);
    const engine::CheckpointRef ref = model.engine->CheckpointFor(head, g.cache_salt);
    if (ref.num_tokens == 0) continue;
    head.resize(static_cast<size_t>(ref.num_tokens));
    double prefill_s = 0;
    absl::Status st = CallPrefill(*model.pd, head, g.cache_salt, request_id, cancelled,
                                  &g.checkpoint_file, &g.checkpoint_tokens, &prefill_s);
    if (!st.ok()) {
      if (absl::IsCancelled(st)) return st;  // the client left: nothing to count
      spdlog::warn("request {}: {}", request_id, OneLineError(st));
      if (model.metrics != nullptr) model.metrics->RecordPdFailure();
      return st;
    }
    ++cost.calls;
    cost.prefill_s += prefill_s;
    cost.checkpoint_tokens += g.checkpoint_tokens;
  }
  cost.call_s = Seconds(Clock::now() - start);
  return cost;
}

}  // namespace deepinfer::api
