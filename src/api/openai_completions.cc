// POST /v1/completions (the legacy text completions route).
//
// Source: OpenAI API reference, "Completions" (legacy); vLLM's OpenAI server for the streamed
//   chunk shape (object "text_completion" on every chunk).

#include <string>
#include <vector>

#include "api/handlers.h"
#include "http/errors.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

struct CompletionContext {
  const Backend& backend;
  const CompletionRequest& request;
  std::string id;
  int64_t created = 0;
  std::vector<std::string> echo;  // per choice: the prompt text to put in front (echo)
};

util::Json Envelope(const CompletionContext& ctx) {
  return OpenAiEnvelope(ctx.id, "text_completion", ctx.created, ctx.backend.served_model_name);
}

std::string ChoiceChunk(const CompletionContext& ctx, util::Json choice) {
  return OpenAiChoiceChunk(Envelope(ctx), std::move(choice), ctx.request.params.include_usage);
}

void Stream(const CompletionContext& ctx, Generation& generation, http::ResponseWriter& writer) {
  const int32_t num_top = ctx.request.params.sampling.num_top_logprobs;
  const bool logprobs = num_top >= 0;
  std::vector<int64_t> offsets(generation.num_choices(), 0);
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  std::string head;
  for (int32_t i = 0; i < generation.num_choices(); ++i) {
    if (ctx.echo.empty() || ctx.echo[i].empty()) continue;
    head += ChoiceChunk(ctx, util::Json{{"index", i},
                                        {"text", ctx.echo[i]},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}});
  }
  if (!head.empty() && !writer.Write(head)) {
    generation.Cancel();
    return;
  }
  auto on_delta = [&](const ChoiceDelta& d) {
    std::string out;
    bool with_logprobs = logprobs && !d.tokens.empty();
    if (!d.text.empty() || with_logprobs) {
      util::Json choice = util::Json::object();
      choice["index"] = d.index;
      choice["text"] = d.text;
      choice["logprobs"] = with_logprobs ? CompletionLogprobsJson(*ctx.backend.tokenizer, d.tokens,
                                                                  num_top, &offsets[d.index])
                                         : util::Json(nullptr);
      choice["finish_reason"] = nullptr;
      out += ChoiceChunk(ctx, std::move(choice));
    }
    if (!d.finish_reason.empty()) {
      out += ChoiceChunk(ctx, util::Json{{"index", d.index},
                                         {"text", ""},
                                         {"logprobs", nullptr},
                                         {"finish_reason", d.finish_reason}});
    }
    return out.empty() || writer.Write(out);
  };
  FinishOpenAiStream(
      generation, writer, on_delta,
      ctx.request.params.include_usage ? std::optional<util::Json>(Envelope(ctx)) : std::nullopt);
}

void Complete(const CompletionContext& ctx, Generation& generation, http::ResponseWriter& writer) {
  const int32_t n = generation.num_choices();
  const int32_t num_top = ctx.request.params.sampling.num_top_logprobs;
  std::vector<std::string> texts(n);
  std::vector<std::string> finish(n);
  std::vector<std::vector<engine::TokenEvent>> tokens(n);
  auto on_delta = [&](const ChoiceDelta& d) {
    texts[d.index] += d.text;
    if (num_top >= 0) {
      tokens[d.index].insert(tokens[d.index].end(), d.tokens.begin(), d.tokens.end());
    }
    if (!d.finish_reason.empty()) finish[d.index] = d.finish_reason;
    return true;
  };
  if (!DriveToCompletion(generation, writer, on_delta, RespondError)) return;
  util::Json choices = util::Json::array();
  for (int32_t i = 0; i < n; ++i) {
    util::Json choice = util::Json::object();
    choice["index"] = i;
    choice["text"] = (ctx.echo.empty() ? std::string() : ctx.echo[i]) + texts[i];
    int64_t offset = 0;
    choice["logprobs"] =
        num_top >= 0 ? CompletionLogprobsJson(*ctx.backend.tokenizer, tokens[i], num_top, &offset)
                     : util::Json(nullptr);
    choice["finish_reason"] = finish[i];
    choices.push_back(std::move(choice));
  }
  util::Json body = Envelope(ctx);
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson(generation.usage());
  RespondJson(writer, 200, body);
}

absl::Status Run(const Backend& backend, const http::Request& http_request,
                 http::ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(
      CompletionRequest request,
      ParseCompletionRequest(http_request.body, ParseLimits{backend.tokenizer->vocab_size()}));
  DI_RETURN_IF_ERROR(CheckModel(backend, request.params.model));
  CompletionContext ctx{backend, request, NewRequestId("cmpl-"), UnixNow(), {}};
  std::vector<ChoiceSpec> specs;
  const int32_t n = request.params.n;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const CompletionPrompt& prompt = request.prompts[p];
    std::vector<int32_t> ids = prompt.is_tokens
                                   ? prompt.tokens
                                   : backend.tokenizer->Encode(prompt.text, /*parse_special=*/true);
    if (ids.empty()) return http::RequestError("prompt", "empty_prompt", "The prompt is empty.");
    DI_ASSIGN_OR_RETURN(int32_t max_tokens,
                        ResolveMaxTokens(backend, ids.size(), request.params.max_tokens, "prompt"));
    std::string echo;
    if (request.echo) {
      echo = prompt.is_tokens ? backend.tokenizer->Decode(prompt.tokens, true) : prompt.text;
    }
    for (int32_t i = 0; i < n; ++i) {
      ChoiceSpec spec;
      int32_t index = static_cast<int32_t>(p) * n + i;
      spec.request = MakeEngineRequest(request.params, ids, max_tokens, index, ctx.id);
      spec.prompt_index = static_cast<int32_t>(p);
      spec.stops = request.params.stop;
      specs.push_back(std::move(spec));
      if (request.echo) ctx.echo.push_back(echo);
    }
  }
  return AnswerGeneration(
      backend, std::move(specs), ctx.id, request.params.stream, writer,
      [&](Generation& g) { Stream(ctx, g, writer); },
      [&](Generation& g) { Complete(ctx, g, writer); });
}

}  // namespace

void HandleCompletions(const Backend& backend, const http::Request& request,
                       http::ResponseWriter& writer) {
  absl::Status status = Run(backend, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

}  // namespace deepinfer::api
