#include "api/route.h"

#include <chrono>
#include <optional>
#include <utility>

#include "api/image_inputs.h"
#include "api/metrics.h"
#include "api/pd.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(20);

// The X-data-parallel-rank header (vLLM's): -1 when absent.
// Errors: InvalidArgument "invalid_dp_rank" for anything but a decimal integer >= 0; a rank the
//   server does not have is refused by the engine.
absl::StatusOr<int32_t> PinnedRank(const http::Request& request) {
  const std::string* header = request.FindHeader("x-data-parallel-rank");
  if (header == nullptr) return -1;
  const std::string_view v = *header;
  int64_t rank = 0;
  bool digits = !v.empty() && v.size() <= 9;
  for (char c : v) {
    digits = digits && c >= '0' && c <= '9';
    rank = rank * 10 + (c - '0');
  }
  if (!digits) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kInvalidDpRank,
                     "X-data-parallel-rank must be a rank number such as 0.");
  }
  return static_cast<int32_t>(rank);
}

// Steps 1-6 of ServeRoute (route.h); a failure is answered by the caller.
absl::Status RunRoute(Route& route, const http::Request& request, http::ResponseWriter& writer) {
  const ServedModel& model = route.model();
  DI_ASSIGN_OR_RETURN(const int32_t dp_rank, PinnedRank(request));
  const bool pd_decode = model.pd != nullptr && model.pd->role == PdRole::kDecode;
  if (absl::Status parsed = route.Parse(request.body, ParseLimitsFor(model));
      !parsed.ok()) {
    // The decode side of a P/D pair restores text prefixes only; say so rather than "not yet".
    if (pd_decode && ErrorCodeOf(parsed) == util::codes::kUnsupportedContent) {
      const http::ApiError e = http::ApiErrorFromStatus(parsed);
      return http::RequestError(e.param, util::codes::kUnsupportedOnPd,
                                "This server is the decode side of a prefill/decode pair, which "
                                "serves text prompts only: " + e.message);
    }
    return parsed;
  }
  const GenerationParams& params = route.params();
  DI_RETURN_IF_ERROR(CheckModel(model, params.model));
  if (const std::vector<ChatMessage>* messages = route.chat_messages(); messages != nullptr) {
    DI_RETURN_IF_ERROR(CheckImagesAllowed(*messages, model.vision, model.media, pd_decode));
  }
  DI_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts, route.Render());
  const std::vector<std::shared_ptr<const engine::ImageInput>>& images = route.images();
  // Structured output and enforced tool choice: compiled here, on the connection's thread
  // (cached by constraint), so that a bad schema is a 400 before anything runs.
  std::shared_ptr<const constraint::CompiledConstraint> compiled;
  if (const std::optional<Route::OutputConstraint> c = route.Constraint(); c.has_value()) {
    if (pd_decode) {
      return http::RequestError(c->param, util::codes::kUnsupportedOnPd,
                                "This server is the decode side of a prefill/decode pair, which "
                                "serves unconstrained text only.");
    }
    if (model.grammar == nullptr) {
      return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kUnsupportedValue,
                       "Structured outputs are not available on this server.");
    }
    absl::StatusOr<std::shared_ptr<const constraint::CompiledConstraint>> built =
        model.grammar->Compile(c->spec);
    if (!built.ok()) return http::WithParam(built.status(), c->param);
    compiled = *std::move(built);
  }
  const int32_t reasoning_end = route.ReasoningEndToken();
  std::vector<ChoiceSpec> specs;
  specs.reserve(prompts.size() * static_cast<size_t>(params.n));
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) {
      return http::RequestError(route.prompt_param(), util::codes::kEmptyPrompt,
                                "The prompt is empty.");
    }
    DI_ASSIGN_OR_RETURN(
        int32_t max_tokens,
        ResolveMaxTokens(model, prompts[p].size(), params.max_tokens, route.prompt_param()));
    for (int32_t i = 0; i < params.n; ++i) {
      ChoiceSpec spec;
      const int32_t index = static_cast<int32_t>(p) * params.n + i;
      spec.request = MakeEngineRequest(params, prompts[p], max_tokens, index, route.id());
      spec.request.dp_rank = dp_rank;
      spec.request.x_request_id = writer.log().request_id;
      spec.request.prompt_logprobs = params.prompt_logprobs;
      spec.request.constraint = compiled;
      spec.request.images = images;
      spec.prompt_index = static_cast<int32_t>(p);
      spec.stops = params.stop;
      spec.reasoning_end_token = reasoning_end;
      if (reasoning_end >= 0 && params.reasoning_budget >= 0) {
        spec.request.reasoning_budget = params.reasoning_budget;
        spec.request.reasoning_end_token = reasoning_end;
      }
      specs.push_back(std::move(spec));
    }
  }
  std::optional<PdPrefillCost> pd_cost;
  if (pd_decode) {
    DI_ASSIGN_OR_RETURN(pd_cost, PrefillOnPeer(model, specs, route.id(), [&writer] {
                          return writer.PeerClosed() || writer.stopping();
                        }));
  }
  const auto submitted = std::chrono::steady_clock::now();
  DI_ASSIGN_OR_RETURN(auto generation, Generation::Start(*model.engine, *model.tokenizer,
                                                         std::move(specs), model.metrics));
  if (pd_cost.has_value() && pd_cost->calls > 0 && model.metrics != nullptr) {
    // Start read and verified the checkpoints (Engine::Submit).
    const double read_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
    model.metrics->RecordPdTransfer(pd_cost->call_s - pd_cost->prefill_s + read_s,
                                    pd_cost->prefill_s, pd_cost->checkpoint_tokens);
  }
  writer.log().id = route.id();
  writer.log().stream = params.stream;
  if (params.stream) {
    route.Stream(*generation, writer);
  } else {
    route.Complete(*generation, writer);
  }
  if (pd_cost.has_value() && model.metrics != nullptr && generation->done()) {
    const UsageCounts u = generation->usage();
    model.metrics->RecordPdSuffix(u.prompt_tokens - u.cached_tokens);
  }
  return absl::OkStatus();
}

}  // namespace

Route::Route(const ServedModel& model, std::string_view id_prefix, std::string_view prompt_param)
    : model_(model),
      id_(NewRequestId(id_prefix)),
      created_(UnixNow()),
      prompt_param_(prompt_param) {}

const std::vector<std::shared_ptr<const engine::ImageInput>>& Route::images() const {
  static const std::vector<std::shared_ptr<const engine::ImageInput>> kNone;
  return kNone;
}

std::optional<Route::OutputConstraint> Route::Constraint() const {
  if (!params().constraint.has_value()) return std::nullopt;
  return OutputConstraint{*params().constraint, params().constraint_param};
}

void Route::AnswerError(http::ResponseWriter& writer, const absl::Status& status) const {
  RespondError(writer, status);
}

bool Route::DriveToCompletion(Generation& generation, http::ResponseWriter& writer,
                              const std::function<bool(const ChoiceDelta&)>& on_delta) const {
  absl::Status error;
  switch (DriveGeneration(generation, writer, on_delta, &error)) {
    case DriveEnd::kDone:
      return true;
    case DriveEnd::kClientGone:
      AnswerError(writer, MakeError(absl::StatusCode::kCancelled, util::codes::kClientClosedRequest,
                                    "The client closed the connection."));
      return false;
    case DriveEnd::kError:
      AnswerError(writer, error);
      return false;
  }
  return false;
}

void ServeRoute(Route& route, const http::Request& request, http::ResponseWriter& writer) {
  absl::Status status = RunRoute(route, request, writer);
  if (!status.ok() && !writer.started()) route.AnswerError(writer, status);
}

engine::GenerateRequest MakeEngineRequest(const GenerationParams& params,
                                          std::vector<int32_t> prompt, int32_t max_tokens,
                                          int32_t choice_index, const std::string& request_id) {
  engine::GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling = params.sampling;
  if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(choice_index);
  r.max_tokens = max_tokens;
  r.min_tokens = std::min(params.min_tokens, max_tokens);
  r.stop_token_ids = params.stop_token_ids;
  r.ignore_eos = params.ignore_eos;
  r.speculative = params.speculative;
  r.request_id = request_id;
  return r;
}

namespace {

// Fills the request log with how a generation ended, on every way out of DriveGeneration.
class GenerationLogger {
 public:
  GenerationLogger(Generation& generation, http::RequestLog& log)
      : generation_(generation), log_(log) {
    log_.generated = true;
  }
  ~GenerationLogger() {
    UsageCounts u = generation_.usage();
    log_.prompt_tokens = u.prompt_tokens;
    log_.cached_tokens = u.cached_tokens;
    log_.completion_tokens = u.completion_tokens;
  }
  void Saw(const ChoiceDelta& d) {
    if (!d.tokens.empty() && log_.first_token == std::chrono::steady_clock::time_point()) {
      log_.first_token = std::chrono::steady_clock::now();
    }
    if (!d.finish_reason.empty() && log_.end != "length") log_.end = d.finish_reason;
  }
  DriveEnd End(DriveEnd end) {
    if (end == DriveEnd::kClientGone) log_.end = "client_gone";
    if (end == DriveEnd::kError) log_.end = "error";
    return end;
  }

 private:
  Generation& generation_;
  http::RequestLog& log_;
};

}  // namespace

DriveEnd DriveGeneration(Generation& generation, http::ResponseWriter& writer,
                         const std::function<bool(const ChoiceDelta&)>& on_delta,
                         absl::Status* error) {
  GenerationLogger logger(generation, writer.log());
  std::vector<ChoiceDelta> deltas;
  while (!generation.done()) {
    // A stopping server ends generations too (their answer is a 503 shutting_down), so that a
    // long one does not hold up the shutdown.
    if (writer.PeerClosed() || writer.stopping()) {
      generation.Cancel();
      if (writer.stopping()) {
        *error = UnavailableError(util::codes::kShuttingDown, "The server is shutting down.");
        return logger.End(DriveEnd::kError);
      }
      return logger.End(DriveEnd::kClientGone);
    }
    deltas.clear();
    absl::Status status = generation.Poll(kPollInterval, &deltas);
    if (!status.ok()) {
      generation.Cancel();
      *error = status;
      return logger.End(DriveEnd::kError);
    }
    for (const ChoiceDelta& d : deltas) {
      logger.Saw(d);
      if (!on_delta(d)) {
        generation.Cancel();
        return logger.End(DriveEnd::kClientGone);
      }
    }
  }
  return logger.End(DriveEnd::kDone);
}

}  // namespace deepinfer::api
