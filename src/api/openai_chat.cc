// POST /v1/chat/completions.
//
// Source: OpenAI API reference, "Create chat completion" and "The chat completion chunk object".

#include <string>
#include <vector>

#include "api/chat_route.h"
#include "api/handlers.h"
#include "api/openai_answer.h"
#include "http/errors.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

// OpenAI's tool_calls[i] for a parsed call, with a fresh id.
util::Json ToolCallJson(const ParsedToolCall& call) {
  return util::Json{{"id", NewRequestId("call_")},
                    {"type", "function"},
                    {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// A choice that called tools and stopped on its own finishes with "tool_calls" (as vLLM's).
std::string FinishReason(const std::string& finish, bool called_tools) {
  return called_tools && finish == "stop" ? "tool_calls" : finish;
}

class ChatRoute final : public ChatPromptRoute {
 public:
  explicit ChatRoute(const ServedModel& model) : ChatPromptRoute(model, "chatcmpl-", "messages") {}

  absl::Status Parse(std::string_view body, const ParseLimits& limits) override {
    DI_ASSIGN_OR_RETURN(request_, ParseChatRequest(body, limits));
    return absl::OkStatus();
  }
  const GenerationParams& params() const override { return request_.params; }
  const std::vector<ChatMessage>* chat_messages() const override { return &request_.messages; }
  absl::StatusOr<std::vector<std::vector<int32_t>>> Render() override {
    return RenderChat(request_.messages, ChatOptionsFor(request_), request_.tool_choice);
  }
  void Stream(Generation& generation, http::ResponseWriter& writer) override;
  void Complete(Generation& generation, http::ResponseWriter& writer) override;

 private:
  std::vector<AnswerSplitter> MakeSplitters(int32_t n) const {
    return std::vector<AnswerSplitter>(n, AnswerSplitter(prompt(), tool_format()));
  }
  util::Json ChunkBase() const {
    return OpenAiEnvelope(id(), "chat.completion.chunk", created(), model().served_model_name);
  }
  std::string ChoiceChunk(const Generation& generation, util::Json choice) const {
    return OpenAiChoiceChunk(ChunkBase(), std::move(choice),
                             ChunkUsage(request_.params, generation));
  }

  ChatRequest request_;
};

void ChatRoute::Stream(Generation& generation, http::ResponseWriter& writer) {
  const int32_t num_top = request_.params.sampling.num_top_logprobs;
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  std::string head;
  for (int32_t i = 0; i < generation.num_choices(); ++i) {
    head += ChoiceChunk(generation, util::Json{{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}});
  }
  if (!writer.Write(head)) {
    generation.Cancel();
    return;
  }
  std::vector<AnswerSplitter> splitters = MakeSplitters(generation.num_choices());
  auto on_delta = [&](const ChoiceDelta& d) {
    std::string out;
    bool with_logprobs = request_.logprobs && !d.tokens.empty();
    // DeepSeek's reasoning goes to `reasoning_content` (and vLLM's newer name `reasoning`); tool
    // calls come out of the content, each whole in a chunk of its own.
    AnswerSplitter::Delta split = splitters[d.index].Push(d.text, !d.finish_reason.empty());
    std::vector<ParsedToolCall>& calls = split.calls;
    if (!split.reasoning.empty() || !split.content.empty() || with_logprobs) {
      util::Json choice = util::Json::object();
      choice["index"] = d.index;
      util::Json delta = util::Json::object();
      if (!split.reasoning.empty()) {
        delta["reasoning_content"] = split.reasoning;
        delta["reasoning"] = split.reasoning;
      }
      if (!split.content.empty() || split.reasoning.empty()) delta["content"] = split.content;
      choice["delta"] = std::move(delta);
      choice["logprobs"] = with_logprobs ? ChatLogprobsJson(*model().tokenizer, d.tokens, num_top)
                                         : util::Json(nullptr);
      choice["finish_reason"] = nullptr;
      out += ChoiceChunk(generation, std::move(choice));
    }
    if (!calls.empty()) {
      const int first = splitters[d.index].num_calls() - static_cast<int>(calls.size());
      for (size_t c = 0; c < calls.size(); ++c) {
        util::Json call = ToolCallJson(calls[c]);
        call["index"] = first + static_cast<int>(c);
        out += ChoiceChunk(
            generation, util::Json{{"index", d.index},
                       {"delta", {{"tool_calls", util::Json::array({std::move(call)})}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}});
      }
    }
    if (!d.finish_reason.empty()) {
      const bool called = splitters[d.index].num_calls() > 0;
      out += ChoiceChunk(generation, util::Json{{"index", d.index},
                                    {"delta", util::Json::object()},
                                    {"logprobs", nullptr},
                                    {"finish_reason", FinishReason(d.finish_reason, called)}});
    }
    return out.empty() || writer.Write(out);
  };
  FinishOpenAiStream(
      generation, writer, on_delta,
      request_.params.include_usage ? std::optional<util::Json>(ChunkBase()) : std::nullopt);
}

void ChatRoute::Complete(Generation& generation, http::ResponseWriter& writer) {
  const int32_t n = generation.num_choices();
  std::vector<std::string> texts(n);
  std::vector<std::string> finish(n);
  std::vector<std::vector<engine::TokenEvent>> tokens(n);
  auto on_delta = [&](const ChoiceDelta& d) {
    texts[d.index] += d.text;
    if (request_.logprobs)
      tokens[d.index].insert(tokens[d.index].end(), d.tokens.begin(), d.tokens.end());
    if (!d.finish_reason.empty()) finish[d.index] = d.finish_reason;
    return true;
  };
  if (!DriveToCompletion(generation, writer, on_delta)) return;
  std::vector<AnswerSplitter> splitters = MakeSplitters(n);
  util::Json choices = util::Json::array();
  for (int32_t i = 0; i < n; ++i) {
    util::Json choice = util::Json::object();
    choice["index"] = i;
    AnswerSplitter::Delta a = splitters[i].Push(texts[i], /*last=*/true);
    util::Json message = util::Json{{"role", "assistant"}, {"content", a.content}};
    if (prompt().parse_reasoning) {
      message["reasoning_content"] =
          a.reasoning.empty() ? util::Json(nullptr) : util::Json(a.reasoning);
      message["reasoning"] = message["reasoning_content"];
    }
    const bool called = !a.calls.empty();
    if (called) {
      message["content"] = a.content.empty() ? util::Json(nullptr) : util::Json(a.content);
      util::Json calls = util::Json::array();
      for (const auto& c : a.calls) calls.push_back(ToolCallJson(c));
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
    choice["logprobs"] = request_.logprobs
                             ? ChatLogprobsJson(*model().tokenizer, tokens[i],
                                                request_.params.sampling.num_top_logprobs)
                             : util::Json(nullptr);
    choice["finish_reason"] = FinishReason(finish[i], called);
    choices.push_back(std::move(choice));
  }
  util::Json body = OpenAiEnvelope(id(), "chat.completion", created(), model().served_model_name);
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson(generation.usage());
  RespondJson(writer, 200, body);
}

}  // namespace

void HandleChatCompletions(const ServedModel& model, const http::Request& request,
                           http::ResponseWriter& writer) {
  ChatRoute route(model);
  ServeRoute(route, request, writer);
}

}  // namespace deepinfer::api
