// POST /v1/chat/completions.
//
// Source: OpenAI API reference, "Create chat completion" and "The chat completion chunk object".

#include <string>
#include <vector>

#include "api/handlers.h"
#include "api/reasoning_parser.h"
#include "api/tool_call_parser.h"
#include "http/errors.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

struct ChatContext {
  const Backend& backend;
  const ChatRequest& request;
  std::string id;
  int64_t created = 0;
  ChatPrompt prompt;
  // How to read tool calls out of the answer; kNone when they stay text.
  ToolCallFormat tool_format = ToolCallFormat::kNone;
};

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

std::vector<AnswerSplitter> MakeSplitters(const ChatContext& ctx, int32_t n) {
  return std::vector<AnswerSplitter>(n, AnswerSplitter(ctx.prompt, ctx.tool_format));
}

util::Json ChunkBase(const ChatContext& ctx) {
  return OpenAiEnvelope(ctx.id, "chat.completion.chunk", ctx.created,
                        ctx.backend.served_model_name);
}

std::string ChoiceChunk(const ChatContext& ctx, util::Json choice) {
  return OpenAiChoiceChunk(ChunkBase(ctx), std::move(choice), ctx.request.params.include_usage);
}

void Stream(const ChatContext& ctx, Generation& generation, http::ResponseWriter& writer) {
  const int32_t num_top = ctx.request.params.sampling.num_top_logprobs;
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  std::string head;
  for (int32_t i = 0; i < generation.num_choices(); ++i) {
    head += ChoiceChunk(ctx, util::Json{{"index", i},
                                        {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}});
  }
  if (!writer.Write(head)) {
    generation.Cancel();
    return;
  }
  std::vector<AnswerSplitter> splitters = MakeSplitters(ctx, generation.num_choices());
  auto on_delta = [&](const ChoiceDelta& d) {
    std::string out;
    bool with_logprobs = ctx.request.logprobs && !d.tokens.empty();
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
      choice["logprobs"] = with_logprobs
                               ? ChatLogprobsJson(*ctx.backend.tokenizer, d.tokens, num_top)
                               : util::Json(nullptr);
      choice["finish_reason"] = nullptr;
      out += ChoiceChunk(ctx, std::move(choice));
    }
    if (!calls.empty()) {
      const int first = splitters[d.index].num_calls() - static_cast<int>(calls.size());
      for (size_t c = 0; c < calls.size(); ++c) {
        util::Json call = ToolCallJson(calls[c]);
        call["index"] = first + static_cast<int>(c);
        out += ChoiceChunk(
            ctx, util::Json{{"index", d.index},
                            {"delta", {{"tool_calls", util::Json::array({std::move(call)})}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}});
      }
    }
    if (!d.finish_reason.empty()) {
      const bool called = splitters[d.index].num_calls() > 0;
      out += ChoiceChunk(ctx, util::Json{{"index", d.index},
                                         {"delta", util::Json::object()},
                                         {"logprobs", nullptr},
                                         {"finish_reason", FinishReason(d.finish_reason, called)}});
    }
    return out.empty() || writer.Write(out);
  };
  FinishOpenAiStream(
      generation, writer, on_delta,
      ctx.request.params.include_usage ? std::optional<util::Json>(ChunkBase(ctx)) : std::nullopt);
}

void Complete(const ChatContext& ctx, Generation& generation, http::ResponseWriter& writer) {
  const int32_t n = generation.num_choices();
  std::vector<std::string> texts(n);
  std::vector<std::string> finish(n);
  std::vector<std::vector<engine::TokenEvent>> tokens(n);
  auto on_delta = [&](const ChoiceDelta& d) {
    texts[d.index] += d.text;
    if (ctx.request.logprobs)
      tokens[d.index].insert(tokens[d.index].end(), d.tokens.begin(), d.tokens.end());
    if (!d.finish_reason.empty()) finish[d.index] = d.finish_reason;
    return true;
  };
  if (!DriveToCompletion(generation, writer, on_delta, RespondError)) return;
  std::vector<AnswerSplitter> splitters = MakeSplitters(ctx, n);
  util::Json choices = util::Json::array();
  for (int32_t i = 0; i < n; ++i) {
    util::Json choice = util::Json::object();
    choice["index"] = i;
    AnswerSplitter::Delta a = splitters[i].Push(texts[i], /*last=*/true);
    util::Json message = util::Json{{"role", "assistant"}, {"content", a.content}};
    if (ctx.prompt.parse_reasoning) {
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
    choice["logprobs"] = ctx.request.logprobs
                             ? ChatLogprobsJson(*ctx.backend.tokenizer, tokens[i],
                                                ctx.request.params.sampling.num_top_logprobs)
                             : util::Json(nullptr);
    choice["finish_reason"] = FinishReason(finish[i], called);
    choices.push_back(std::move(choice));
  }
  util::Json body =
      OpenAiEnvelope(ctx.id, "chat.completion", ctx.created, ctx.backend.served_model_name);
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson(generation.usage());
  RespondJson(writer, 200, body);
}

absl::Status Run(const Backend& backend, const http::Request& http_request,
                 http::ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(
      ChatRequest request,
      ParseChatRequest(http_request.body, ParseLimits{backend.tokenizer->vocab_size()}));
  DI_RETURN_IF_ERROR(CheckModel(backend, request.params.model));
  DI_ASSIGN_OR_RETURN(ChatPrompt chat,
                      RenderChatPrompt(backend, request.messages, ChatOptionsFor(request)));
  const std::vector<int32_t>& prompt = chat.tokens;
  if (prompt.empty()) return http::RequestError("messages", "empty_prompt", "The prompt is empty.");
  DI_ASSIGN_OR_RETURN(int32_t max_tokens, ResolveMaxTokens(backend, prompt.size(),
                                                           request.params.max_tokens, "messages"));
  ChatContext ctx{backend, request, NewRequestId("chatcmpl-"), UnixNow(), chat};
  ctx.tool_format = ToolFormatFor(backend, !request.tools.empty(), request.tool_choice == "none");
  std::vector<ChoiceSpec> specs;
  for (int32_t i = 0; i < request.params.n; ++i) {
    ChoiceSpec spec;
    spec.request = MakeEngineRequest(request.params, prompt, max_tokens, i, ctx.id);
    spec.prompt_index = 0;
    spec.stops = request.params.stop;
    specs.push_back(std::move(spec));
  }
  return AnswerGeneration(
      backend, std::move(specs), ctx.id, request.params.stream, writer,
      [&](Generation& g) { Stream(ctx, g, writer); },
      [&](Generation& g) { Complete(ctx, g, writer); });
}

}  // namespace

void HandleChatCompletions(const Backend& backend, const http::Request& request,
                           http::ResponseWriter& writer) {
  absl::Status status = Run(backend, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

}  // namespace deepinfer::api
