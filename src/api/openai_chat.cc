// POST /v1/chat/completions.
//
// Source: OpenAI API reference, "Create chat completion" and "The chat completion chunk object".

#include <string>
#include <vector>

#include "api/errors.h"
#include "api/handlers.h"
#include "api/sse.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"
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
  tokenizer::ToolCallFormat tool_format = tokenizer::ToolCallFormat::kNone;
};

// Tool calls are parsed only when the request offers tools, does not turn them off with
// tool_choice "none", and the model's encoder has a tool-call syntax (DeepSeek).
tokenizer::ToolCallFormat ToolFormatFor(const Backend& backend, const ChatRequest& request) {
  if (request.tools.empty() || request.tool_choice == "none") {
    return tokenizer::ToolCallFormat::kNone;
  }
  return tokenizer::ToolCallFormatForTemplate(backend.chat_template->name());
}

// OpenAI's tool_calls[i] for a parsed call, with a fresh id.
Json ToolCallJson(const tokenizer::ParsedToolCall& call) {
  return Json{{"id", NewRequestId("call_")},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// A choice that called tools and stopped on its own finishes with "tool_calls" (as vLLM's).
std::string FinishReason(const std::string& finish, bool called_tools) {
  return called_tools && finish == "stop" ? "tool_calls" : finish;
}

// One reasoning splitter per choice when the encoder produces reasoning (DeepSeek); else none.
std::vector<tokenizer::ReasoningParser> MakeParsers(const ChatContext& ctx, int32_t n) {
  std::vector<tokenizer::ReasoningParser> parsers;
  if (ctx.prompt.parse_reasoning) {
    for (int32_t i = 0; i < n; ++i) parsers.emplace_back(ctx.prompt.starts_in_reasoning);
  }
  return parsers;
}

Json ChunkBase(const ChatContext& ctx) {
  Json chunk = Json::object();
  chunk["id"] = ctx.id;
  chunk["object"] = "chat.completion.chunk";
  chunk["created"] = ctx.created;
  chunk["model"] = ctx.backend.served_model_name;
  return chunk;
}

// One chunk holding one choice; "usage": null on every chunk when include_usage is set.
std::string ChoiceChunk(const ChatContext& ctx, Json choice) {
  Json chunk = ChunkBase(ctx);
  chunk["choices"] = Json::array({std::move(choice)});
  if (ctx.request.params.include_usage) chunk["usage"] = nullptr;
  return SseData(DumpJson(chunk));
}

void Stream(const ChatContext& ctx, Generation& generation, ResponseWriter& writer) {
  const int32_t num_top = ctx.request.params.sampling.num_top_logprobs;
  if (!writer.BeginStream("text/event-stream")) {
    generation.Cancel();
    return;
  }
  std::string head;
  for (int32_t i = 0; i < generation.num_choices(); ++i) {
    head += ChoiceChunk(ctx, Json{{"index", i},
                                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}});
  }
  if (!writer.WriteStream(head)) {
    generation.Cancel();
    return;
  }
  std::vector<tokenizer::ReasoningParser> parsers = MakeParsers(ctx, generation.num_choices());
  std::vector<tokenizer::ToolCallParser> tool_parsers;
  if (ctx.tool_format != tokenizer::ToolCallFormat::kNone) {
    for (int32_t i = 0; i < generation.num_choices(); ++i) {
      tool_parsers.emplace_back(ctx.tool_format);
    }
  }
  auto on_delta = [&](const ChoiceDelta& d) {
    std::string out;
    bool with_logprobs = ctx.request.logprobs && !d.tokens.empty();
    // DeepSeek's reasoning goes to `reasoning_content` (and vLLM's newer name `reasoning`).
    tokenizer::ReasoningParser::Delta split{"", d.text};
    if (!parsers.empty()) {
      split = parsers[d.index].Push(d.text);
      if (!d.finish_reason.empty()) {
        tokenizer::ReasoningParser::Delta rest = parsers[d.index].Finish();
        split.reasoning += rest.reasoning;
        split.content += rest.content;
      }
    }
    // Tool calls come out of the content; each goes whole in a chunk of its own.
    std::vector<tokenizer::ParsedToolCall> calls;
    if (!tool_parsers.empty()) {
      tokenizer::ToolCallParser& tp = tool_parsers[d.index];
      tokenizer::ToolCallParser::Delta t = tp.Push(split.content);
      if (!d.finish_reason.empty()) {
        tokenizer::ToolCallParser::Delta rest = tp.Finish();
        t.content += rest.content;
        for (auto& c : rest.calls) t.calls.push_back(std::move(c));
      }
      split.content = std::move(t.content);
      calls = std::move(t.calls);
    }
    if (!split.reasoning.empty() || !split.content.empty() || with_logprobs) {
      Json choice = Json::object();
      choice["index"] = d.index;
      Json delta = Json::object();
      if (!split.reasoning.empty()) {
        delta["reasoning_content"] = split.reasoning;
        delta["reasoning"] = split.reasoning;
      }
      if (!split.content.empty() || split.reasoning.empty()) delta["content"] = split.content;
      choice["delta"] = std::move(delta);
      choice["logprobs"] = with_logprobs
                               ? ChatLogprobsJson(*ctx.backend.tokenizer, d.tokens, num_top)
                               : Json(nullptr);
      choice["finish_reason"] = nullptr;
      out += ChoiceChunk(ctx, std::move(choice));
    }
    if (!calls.empty()) {
      const int first = tool_parsers[d.index].num_calls() - static_cast<int>(calls.size());
      for (size_t c = 0; c < calls.size(); ++c) {
        Json call = ToolCallJson(calls[c]);
        call["index"] = first + static_cast<int>(c);
        out += ChoiceChunk(ctx, Json{{"index", d.index},
                                     {"delta", {{"tool_calls", Json::array({std::move(call)})}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}});
      }
    }
    if (!d.finish_reason.empty()) {
      const bool called = !tool_parsers.empty() && tool_parsers[d.index].num_calls() > 0;
      out += ChoiceChunk(ctx, Json{{"index", d.index},
                                   {"delta", Json::object()},
                                   {"logprobs", nullptr},
                                   {"finish_reason", FinishReason(d.finish_reason, called)}});
    }
    return out.empty() || writer.WriteStream(out);
  };
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) return;
  std::string tail;
  if (end == DriveEnd::kError) {
    tail = SseErrorAndDone(ApiErrorFromStatus(error));
  } else {
    if (ctx.request.params.include_usage) {
      Json chunk = ChunkBase(ctx);
      chunk["choices"] = Json::array();
      chunk["usage"] = UsageJson(generation.usage());
      tail += SseData(DumpJson(chunk));
    }
    tail += SseDone();
  }
  if (writer.WriteStream(tail)) writer.EndStream();
}

void Complete(const ChatContext& ctx, Generation& generation, ResponseWriter& writer) {
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
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) {
    RespondError(writer, MakeError(absl::StatusCode::kCancelled, "client_closed_request",
                                   "The client closed the connection."));
    return;
  }
  if (end == DriveEnd::kError) {
    RespondError(writer, error);
    return;
  }
  std::vector<tokenizer::ReasoningParser> parsers = MakeParsers(ctx, n);
  Json choices = Json::array();
  for (int32_t i = 0; i < n; ++i) {
    Json choice = Json::object();
    choice["index"] = i;
    Json message = Json{{"role", "assistant"}, {"content", texts[i]}};
    if (!parsers.empty()) {
      tokenizer::ReasoningParser::Delta a = parsers[i].Push(texts[i]);
      tokenizer::ReasoningParser::Delta b = parsers[i].Finish();
      message["content"] = a.content + b.content;
      const std::string reasoning = a.reasoning + b.reasoning;
      message["reasoning_content"] = reasoning.empty() ? Json(nullptr) : Json(reasoning);
      message["reasoning"] = message["reasoning_content"];
    }
    bool called = false;
    if (ctx.tool_format != tokenizer::ToolCallFormat::kNone) {
      tokenizer::ToolCallResult r =
          tokenizer::ParseToolCalls(ctx.tool_format, message["content"].get<std::string>());
      called = !r.calls.empty();
      if (called) {
        message["content"] = r.content.empty() ? Json(nullptr) : Json(r.content);
        Json calls = Json::array();
        for (const auto& c : r.calls) calls.push_back(ToolCallJson(c));
        message["tool_calls"] = std::move(calls);
      }
    }
    choice["message"] = std::move(message);
    choice["logprobs"] = ctx.request.logprobs
                             ? ChatLogprobsJson(*ctx.backend.tokenizer, tokens[i],
                                                ctx.request.params.sampling.num_top_logprobs)
                             : Json(nullptr);
    choice["finish_reason"] = FinishReason(finish[i], called);
    choices.push_back(std::move(choice));
  }
  Json body = Json::object();
  body["id"] = ctx.id;
  body["object"] = "chat.completion";
  body["created"] = ctx.created;
  body["model"] = ctx.backend.served_model_name;
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson(generation.usage());
  RespondJson(writer, 200, body);
}

absl::Status Run(const Backend& backend, const HttpRequest& http, ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(ChatRequest request,
                      ParseChatRequest(http.body, ParseLimits{backend.tokenizer->vocab_size()}));
  DI_RETURN_IF_ERROR(CheckModel(backend, request.params.model));
  DI_ASSIGN_OR_RETURN(ChatPrompt chat,
                      RenderChatPrompt(backend, request.messages, ChatOptionsFor(request)));
  const std::vector<int32_t>& prompt = chat.tokens;
  if (prompt.empty()) return RequestError("messages", "empty_prompt", "The prompt is empty.");
  DI_ASSIGN_OR_RETURN(int32_t max_tokens, ResolveMaxTokens(backend, prompt.size(),
                                                           request.params.max_tokens, "messages"));
  ChatContext ctx{backend, request, NewRequestId("chatcmpl-"), UnixNow(), chat};
  ctx.tool_format = ToolFormatFor(backend, request);
  std::vector<ChoiceSpec> specs;
  for (int32_t i = 0; i < request.params.n; ++i) {
    ChoiceSpec spec;
    spec.request = MakeEngineRequest(request.params, prompt, max_tokens, i, ctx.id);
    spec.prompt_index = 0;
    spec.stops = request.params.stop;
    specs.push_back(std::move(spec));
  }
  DI_ASSIGN_OR_RETURN(auto generation, Generation::Start(*backend.engine, *backend.tokenizer,
                                                         std::move(specs), backend.metrics));
  if (request.params.stream) {
    Stream(ctx, *generation, writer);
  } else {
    Complete(ctx, *generation, writer);
  }
  return absl::OkStatus();
}

}  // namespace

void HandleChatCompletions(const Backend& backend, const HttpRequest& request,
                           ResponseWriter& writer) {
  absl::Status status = Run(backend, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

}  // namespace deepinfer::api
