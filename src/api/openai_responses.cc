// POST /v1/responses: the OpenAI Responses API over the same engine, prompt rendering, reasoning
// split and tool-call parsing as /v1/chat/completions. Stateless: nothing is stored, so the
// whole conversation comes in `input`.
//
// Source: OpenAI API reference, "Responses" (the response object, output items) and "Streaming
// responses" (response.created ... response.completed, each event with a sequence_number).

#include <string>
#include <utility>
#include <vector>

#include "api/chat_route.h"
#include "api/handlers.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/sse.h"
#include "protocol/responses_types.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

class ResponsesRoute final : public ChatPromptRoute {
 public:
  explicit ResponsesRoute(const ServedModel& model) : ChatPromptRoute(model, "resp_", "input") {}

  absl::Status Parse(std::string_view body, const ParseLimits& limits) override {
    DI_ASSIGN_OR_RETURN(request_, ParseResponsesRequest(body, limits));
    return absl::OkStatus();
  }
  const GenerationParams& params() const override { return request_.params; }
  const std::vector<ChatMessage>* chat_messages() const override { return &request_.messages; }
  absl::StatusOr<std::vector<std::vector<int32_t>>> Render() override {
    return RenderChat(request_.messages, ChatOptionsFor(request_), request_.tool_choice);
  }
  void Stream(Generation& generation, http::ResponseWriter& writer) override;
  void Complete(Generation& generation, http::ResponseWriter& writer) override;

  const ResponsesRequest& request() const { return request_; }

 private:
  ResponsesRequest request_;
};

util::Json UsageObject(const UsageCounts& u) {
  return util::Json{{"input_tokens", u.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                    {"output_tokens", u.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
                    {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// The response object; `status` is "in_progress", "completed", "incomplete" or "failed".
util::Json ResponseObject(const ResponsesRoute& route, const std::string& status, util::Json output,
                          const UsageCounts* usage, const http::ApiError* error = nullptr) {
  const util::Json& echo = route.request().echo;
  auto get = [&](const char* key, util::Json fallback) {
    auto it = echo.find(key);
    return it == echo.end() ? fallback : *it;
  };
  util::Json r = {
      {"id", route.id()},
      {"object", "response"},
      {"created_at", route.created()},
      {"status", status},
      {"model", route.model().served_model_name},
      {"output", std::move(output)},
      {"error", error ? util::Json{{"code", error->code}, {"message", error->message}}
                      : util::Json(nullptr)},
      {"incomplete_details",
       status == "incomplete" ? util::Json{{"reason", "max_output_tokens"}} : util::Json(nullptr)},
      {"instructions", get("instructions", nullptr)},
      {"max_output_tokens", get("max_output_tokens", nullptr)},
      {"temperature", get("temperature", nullptr)},
      {"top_p", get("top_p", nullptr)},
      {"tools", get("tools", util::Json::array())},
      {"tool_choice", get("tool_choice", "auto")},
      {"parallel_tool_calls", get("parallel_tool_calls", true)},
      {"metadata", get("metadata", util::Json::object())},
      {"reasoning", get("reasoning", nullptr)},
      {"text", get("text", util::Json{{"format", {{"type", "text"}}}})},
      {"user", get("user", nullptr)},
      {"store", false},
      {"usage", usage ? UsageObject(*usage) : util::Json(nullptr)}};
  return r;
}

util::Json ReasoningItem(const std::string& id, const std::string& text, const char* status) {
  return util::Json{{"type", "reasoning"},
                    {"id", id},
                    {"summary", util::Json::array()},
                    {"content", util::Json::array({{{"type", "reasoning_text"}, {"text", text}}})},
                    {"status", status}};
}

util::Json OutputTextPart(const std::string& text) {
  return util::Json{{"type", "output_text"}, {"text", text}, {"annotations", util::Json::array()}};
}

util::Json MessageItem(const std::string& id, util::Json content, const char* status) {
  return util::Json{{"type", "message"},
                    {"id", id},
                    {"status", status},
                    {"role", "assistant"},
                    {"content", std::move(content)}};
}

util::Json FunctionCallItem(const std::string& id, const ParsedToolCall& call,
                            const std::string& arguments, const char* status) {
  return util::Json{{"type", "function_call"},          {"id", id},
                    {"call_id", NewRequestId("call_")}, {"name", call.name},
                    {"arguments", arguments},           {"status", status}};
}

// The events of a streamed response, each with its sequence number; output items open and close
// as the kind of output changes (reasoning, message text, function calls).
class EventStream {
 public:
  explicit EventStream(const ResponsesRoute& route) : route_(route) {}

  void Start() {
    util::Json r = ResponseObject(route_, "in_progress", util::Json::array(), nullptr);
    Emit("response.created", {{"response", r}});
    Emit("response.in_progress", {{"response", r}});
  }
  void Reasoning(const std::string& text) {
    if (text.empty()) return;
    if (open_ != "reasoning") {
      Close();
      open_ = "reasoning";
      item_id_ = NewRequestId("rs_");
      Emit("response.output_item.added",
           {{"output_index", index_}, {"item", ReasoningItem(item_id_, "", "in_progress")}});
    }
    text_ += text;
    Emit("response.reasoning_text.delta",
         {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"delta", text}});
  }
  void Text(const std::string& text) {
    if (text.empty()) return;
    if (open_ != "message") {
      Close();
      open_ = "message";
      item_id_ = NewRequestId("msg_");
      Emit("response.output_item.added",
           {{"output_index", index_},
            {"item", MessageItem(item_id_, util::Json::array(), "in_progress")}});
      Emit("response.content_part.added", {{"item_id", item_id_},
                                           {"output_index", index_},
                                           {"content_index", 0},
                                           {"part", OutputTextPart("")}});
    }
    text_ += text;
    Emit("response.output_text.delta", {{"item_id", item_id_},
                                        {"output_index", index_},
                                        {"content_index", 0},
                                        {"delta", text},
                                        {"logprobs", util::Json::array()}});
  }
  void FunctionCall(const ParsedToolCall& call) {
    Close();
    const std::string id = NewRequestId("fc_");
    util::Json item = FunctionCallItem(id, call, "", "in_progress");
    Emit("response.output_item.added", {{"output_index", index_}, {"item", item}});
    Emit("response.function_call_arguments.delta",
         {{"item_id", id}, {"output_index", index_}, {"delta", call.arguments}});
    Emit("response.function_call_arguments.done",
         {{"item_id", id}, {"output_index", index_}, {"arguments", call.arguments}});
    item["arguments"] = call.arguments;
    item["status"] = "completed";
    Emit("response.output_item.done", {{"output_index", index_}, {"item", item}});
    output_.push_back(std::move(item));
    ++index_;
  }
  // Closes the open item, if any, with `item_status` ("completed"; "incomplete" for the last
  // item of a cut-off answer).
  void Close(const char* item_status = "completed") {
    if (open_ == "reasoning") {
      Emit(
          "response.reasoning_text.done",
          {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"text", text_}});
      util::Json item = ReasoningItem(item_id_, text_, item_status);
      Emit("response.output_item.done", {{"output_index", index_}, {"item", item}});
      output_.push_back(std::move(item));
    } else if (open_ == "message") {
      Emit("response.output_text.done", {{"item_id", item_id_},
                                         {"output_index", index_},
                                         {"content_index", 0},
                                         {"text", text_},
                                         {"logprobs", util::Json::array()}});
      Emit("response.content_part.done", {{"item_id", item_id_},
                                          {"output_index", index_},
                                          {"content_index", 0},
                                          {"part", OutputTextPart(text_)}});
      util::Json item =
          MessageItem(item_id_, util::Json::array({OutputTextPart(text_)}), item_status);
      Emit("response.output_item.done", {{"output_index", index_}, {"item", item}});
      output_.push_back(std::move(item));
    } else {
      return;
    }
    open_.clear();
    text_.clear();
    ++index_;
  }
  void Finish(const std::string& status, const UsageCounts& usage) {
    Close(status == "incomplete" ? "incomplete" : "completed");
    Emit(status == "incomplete" ? "response.incomplete" : "response.completed",
         {{"response", ResponseObject(route_, status, output_, &usage)}});
  }
  void Fail(const http::ApiError& error) {
    Close();
    Emit("response.failed",
         {{"response", ResponseObject(route_, "failed", output_, nullptr, &error)}});
  }
  std::string Take() { return std::exchange(out_, {}); }

 private:
  void Emit(const char* type, util::Json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    out_ += fmt::format("event: {}\n{}", type, http::SseData(util::DumpJson(data)));
  }

  const ResponsesRoute& route_;
  int64_t sequence_ = 0;
  int index_ = 0;     // output index of the open (or next) item
  std::string open_;  // "reasoning", "message" or "" (none open)
  std::string item_id_;
  std::string text_;  // the open item's text so far
  util::Json output_ = util::Json::array();
  std::string out_;
};

void StreamResponse(const ResponsesRoute& route, Generation& generation,
                    http::ResponseWriter& writer) {
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  EventStream events(route);
  events.Start();
  if (!writer.Write(events.Take())) {
    generation.Cancel();
    return;
  }
  AnswerSplitter splitter(route.prompt(), route.tool_format());
  std::string finish;
  int num_calls = 0;
  auto on_delta = [&](const ChoiceDelta& d) {
    AnswerSplitter::Delta a = splitter.Push(d.text, !d.finish_reason.empty());
    events.Reasoning(a.reasoning);
    events.Text(a.content);
    for (const auto& call : a.calls) {
      if (route.request().tool_choice.parallel || num_calls++ == 0) events.FunctionCall(call);
    }
    if (!d.finish_reason.empty()) finish = d.finish_reason;
    std::string out = events.Take();
    return out.empty() || writer.Write(out);
  };
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) return;
  if (end == DriveEnd::kError) {
    events.Fail(http::ApiErrorFromStatus(error));
  } else {
    events.Finish(finish == "length" ? "incomplete" : "completed", generation.usage());
  }
  if (writer.Write(events.Take())) writer.End();
}

void CompleteResponse(const ResponsesRoute& route, Generation& generation,
                      http::ResponseWriter& writer) {
  std::string text, finish;
  auto on_delta = [&](const ChoiceDelta& d) {
    text += d.text;
    if (!d.finish_reason.empty()) finish = d.finish_reason;
    return true;
  };
  if (!route.DriveToCompletion(generation, writer, on_delta)) return;
  AnswerSplitter splitter(route.prompt(), route.tool_format());
  AnswerSplitter::Delta a = splitter.Push(text, /*last=*/true);
  util::Json output = util::Json::array();
  if (!a.reasoning.empty()) {
    output.push_back(ReasoningItem(NewRequestId("rs_"), a.reasoning, "completed"));
  }
  if (!a.content.empty()) {
    output.push_back(MessageItem(NewRequestId("msg_"),
                                 util::Json::array({OutputTextPart(a.content)}), "completed"));
  }
  for (const auto& call : a.calls) {
    output.push_back(FunctionCallItem(NewRequestId("fc_"), call, call.arguments, "completed"));
    if (!route.request().tool_choice.parallel) break;  // the first call only
  }
  const bool cut = finish == "length";
  // A cut-off answer's last text item is incomplete too (function calls are always whole).
  if (cut && !output.empty() && output.back()["type"] != "function_call") {
    output.back()["status"] = "incomplete";
  }
  const UsageCounts usage = generation.usage();
  RespondJson(writer, 200,
              ResponseObject(route, cut ? "incomplete" : "completed", std::move(output), &usage));
}

void ResponsesRoute::Stream(Generation& generation, http::ResponseWriter& writer) {
  StreamResponse(*this, generation, writer);
}

void ResponsesRoute::Complete(Generation& generation, http::ResponseWriter& writer) {
  CompleteResponse(*this, generation, writer);
}

}  // namespace

void HandleResponses(const ServedModel& model, const http::Request& request,
                     http::ResponseWriter& writer) {
  ResponsesRoute route(model);
  ServeRoute(route, request, writer);
}

}  // namespace deepinfer::api
