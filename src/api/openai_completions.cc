// POST /v1/completions (the legacy text completions route).
//
// Source: OpenAI API reference, "Completions" (legacy); vLLM's OpenAI server for the streamed
//   chunk shape (object "text_completion" on every chunk).

#include <string>
#include <vector>

#include "api/handlers.h"
#include "api/openai_answer.h"
#include "http/errors.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

class CompletionRoute final : public Route {
 public:
  explicit CompletionRoute(const ServedModel& model) : Route(model, "cmpl-", "prompt") {}

  absl::Status Parse(std::string_view body, const ParseLimits& limits) override {
    DI_ASSIGN_OR_RETURN(request_, ParseCompletionRequest(body, limits));
    return absl::OkStatus();
  }
  const GenerationParams& params() const override { return request_.params; }
  absl::StatusOr<std::vector<std::vector<int32_t>>> Render() override {
    const tokenizer::Tokenizer& tokenizer = *model().tokenizer;
    std::vector<std::vector<int32_t>> prompts;
    for (const CompletionPrompt& prompt : request_.prompts) {
      prompts.push_back(prompt.is_tokens ? prompt.tokens
                                         : tokenizer.Encode(prompt.text, /*parse_special=*/true));
      if (request_.echo) {
        echo_.push_back(prompt.is_tokens ? tokenizer.Decode(prompt.tokens, true) : prompt.text);
      }
    }
    if (scoring()) prompt_tokens_ = prompts;
    return prompts;
  }
  void Stream(Generation& generation, http::ResponseWriter& writer) override;
  void Complete(Generation& generation, http::ResponseWriter& writer) override;

 private:
  util::Json Envelope() const {
    return OpenAiEnvelope(id(), "text_completion", created(), model().served_model_name);
  }
  std::string ChoiceChunk(const Generation& generation, util::Json choice) const {
    return OpenAiChoiceChunk(Envelope(), std::move(choice),
                             ChunkUsage(request_.params, generation));
  }
  // The prompt text to put in front of choice `index` (echo), or "".
  std::string Echo(int32_t index) const {
    return echo_.empty() ? std::string() : echo_[index / request_.params.n];
  }
  // Echo with logprobs: the prompt's tokens are scored too.
  bool scoring() const { return request_.params.prompt_logprobs >= 0; }
  // The prompt's logprobs for choice `index` (PromptLogprobsJson), advancing `offset`.
  util::Json PromptLogprobs(int32_t index, const std::vector<engine::TokenEvent>& entries,
                            int64_t* offset) const {
    return PromptLogprobsJson(*model().tokenizer, prompt_tokens_[index / request_.params.n],
                              entries, request_.params.sampling.num_top_logprobs, offset);
  }

  CompletionRequest request_;
  std::vector<std::string> echo_;  // per prompt, with echo: its text
  std::vector<std::vector<int32_t>> prompt_tokens_;  // per prompt, when scoring
};

void CompletionRoute::Stream(Generation& generation, http::ResponseWriter& writer) {
  const int32_t num_top = request_.params.sampling.num_top_logprobs;
  const bool logprobs = num_top >= 0;
  std::vector<int64_t> offsets(generation.num_choices(), 0);
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  std::string head;
  // When scoring, each echo waits for its prompt logprobs (the first delta brings them).
  for (int32_t i = 0; i < generation.num_choices() && !scoring(); ++i) {
    const std::string echo = Echo(i);
    if (echo.empty()) continue;
    head += ChoiceChunk(generation, util::Json{
        {"index", i}, {"text", echo}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  }
  if (!head.empty() && !writer.Write(head)) {
    generation.Cancel();
    return;
  }
  std::vector<bool> echoed(generation.num_choices(), !scoring());
  auto on_delta = [&](const ChoiceDelta& d) {
    std::string out;
    if (!echoed[d.index]) {
      echoed[d.index] = true;
      out += ChoiceChunk(generation,
                         util::Json{{"index", d.index},
                                    {"text", Echo(d.index)},
                                    {"logprobs", PromptLogprobs(d.index, d.prompt_logprobs,
                                                                &offsets[d.index])},
                                    {"finish_reason", nullptr}});
    }
    bool with_logprobs = logprobs && !d.tokens.empty();
    if (!d.text.empty() || with_logprobs) {
      util::Json choice = util::Json::object();
      choice["index"] = d.index;
      choice["text"] = d.text;
      choice["logprobs"] = with_logprobs ? CompletionLogprobsJson(*model().tokenizer, d.tokens,
                                                                  num_top, &offsets[d.index])
                                         : util::Json(nullptr);
      choice["finish_reason"] = nullptr;
      out += ChoiceChunk(generation, std::move(choice));
    }
    if (!d.finish_reason.empty()) {
      out += ChoiceChunk(generation, util::Json{{"index", d.index},
                                    {"text", ""},
                                    {"logprobs", nullptr},
                                    {"finish_reason", d.finish_reason}});
    }
    return out.empty() || writer.Write(out);
  };
  FinishOpenAiStream(
      generation, writer, on_delta,
      request_.params.include_usage ? std::optional<util::Json>(Envelope()) : std::nullopt);
}

void CompletionRoute::Complete(Generation& generation, http::ResponseWriter& writer) {
  const int32_t n = generation.num_choices();
  const int32_t num_top = request_.params.sampling.num_top_logprobs;
  std::vector<std::string> texts(n);
  std::vector<std::string> finish(n);
  std::vector<std::vector<engine::TokenEvent>> tokens(n);
  std::vector<std::vector<engine::TokenEvent>> prompt_logprobs(n);
  auto on_delta = [&](const ChoiceDelta& d) {
    if (d.has_prompt_logprobs) prompt_logprobs[d.index] = d.prompt_logprobs;
    texts[d.index] += d.text;
    if (num_top >= 0) {
      tokens[d.index].insert(tokens[d.index].end(), d.tokens.begin(), d.tokens.end());
    }
    if (!d.finish_reason.empty()) finish[d.index] = d.finish_reason;
    return true;
  };
  if (!DriveToCompletion(generation, writer, on_delta)) return;
  util::Json choices = util::Json::array();
  for (int32_t i = 0; i < n; ++i) {
    util::Json choice = util::Json::object();
    choice["index"] = i;
    choice["text"] = Echo(i) + texts[i];
    int64_t offset = 0;
    if (scoring()) {
      util::Json logprobs = PromptLogprobs(i, prompt_logprobs[i], &offset);
      AppendLogprobs(CompletionLogprobsJson(*model().tokenizer, tokens[i], num_top, &offset),
                     &logprobs);
      choice["logprobs"] = std::move(logprobs);
    } else {
      choice["logprobs"] =
          num_top >= 0 ? CompletionLogprobsJson(*model().tokenizer, tokens[i], num_top, &offset)
                       : util::Json(nullptr);
    }
    choice["finish_reason"] = finish[i];
    choices.push_back(std::move(choice));
  }
  util::Json body = Envelope();
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson(generation.usage());
  RespondJson(writer, 200, body);
}

}  // namespace

void HandleCompletions(const ServedModel& model, const http::Request& request,
                       http::ResponseWriter& writer) {
  CompletionRoute route(model);
  ServeRoute(route, request, writer);
}

}  // namespace deepinfer::api
