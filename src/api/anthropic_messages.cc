// POST /v1/messages: the Anthropic Messages API over the same engine, prompt rendering, stop
// strings, reasoning split and tool-call parsing as /v1/chat/completions.
//
// Source: Anthropic API reference, "Messages", "Streaming Messages" (event order message_start,
// content_block_start / _delta / _stop per block, message_delta, message_stop) and "Errors".

#include <string>
#include <vector>

#include "api/anthropic_count_tokens.h"
#include "api/chat_route.h"
#include "api/handlers.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/sse.h"
#include "protocol/anthropic_types.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

class MessagesRoute final : public ChatPromptRoute {
 public:
  explicit MessagesRoute(const ServedModel& model) : ChatPromptRoute(model, "msg_", "messages") {}

  absl::Status Parse(std::string_view body, const ParseLimits& limits) override {
    DI_ASSIGN_OR_RETURN(request_, ParseAnthropicMessagesRequest(body, limits));
    return absl::OkStatus();
  }
  const GenerationParams& params() const override { return request_.params; }
  const std::vector<ChatMessage>* chat_messages() const override { return &request_.chat.messages; }
  absl::StatusOr<std::vector<std::vector<int32_t>>> Render() override {
    return RenderChat(request_.chat.messages, request_.chat.options, request_.tool_choice);
  }
  void Stream(Generation& generation, http::ResponseWriter& writer) override;
  void Complete(Generation& generation, http::ResponseWriter& writer) override;
  void AnswerError(http::ResponseWriter& writer, const absl::Status& status) const override {
    RespondAnthropicError(writer, status);
  }
  const AnthropicMessagesRequest& request() const { return request_; }

 private:
  AnthropicMessagesRequest request_;
};

// Anthropic counts input tokens read from the prompt cache apart from the rest:
// input_tokens + cache_read_input_tokens is the whole prompt.
util::Json AnthropicUsage(const UsageCounts& u) {
  return util::Json{{"input_tokens", u.prompt_tokens - u.cached_tokens},
                    {"output_tokens", u.completion_tokens},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", u.cached_tokens}};
}

// How one answer ended, in Anthropic's words.
struct Ending {
  std::string finish;       // "stop" or "length" (Generation's)
  std::string stop_string;  // the stop sequence that ended it, if one did
  bool called_tools = false;

  std::string StopReason() const {
    if (finish == "length") return "max_tokens";
    if (called_tools) return "tool_use";
    return stop_string.empty() ? "end_turn" : "stop_sequence";
  }
  util::Json StopSequence() const {
    return stop_string.empty() ? util::Json(nullptr) : util::Json(stop_string);
  }
};

// A tool_use block's input must be an object; arguments the model wrote that are not a JSON
// object are passed on whole as {"_arguments": "<text>"} rather than dropped.
util::Json ToolInput(const ParsedToolCall& call) {
  util::Json input = util::Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded() || !input.is_object()) return util::Json{{"_arguments", call.arguments}};
  return input;
}

util::Json ToolUseBlock(const ParsedToolCall& call) {
  return util::Json{{"type", "tool_use"},
                    {"id", NewRequestId("toolu_")},
                    {"name", call.name},
                    {"input", ToolInput(call)}};
}

std::string Event(std::string_view name, const util::Json& data) {
  return fmt::format("event: {}\n{}", name, http::SseData(util::DumpJson(data)));
}

// The content blocks of a streamed answer: opens a block when the kind of output changes and
// closes the previous one, so that thinking, text and tool_use blocks follow each other with
// consecutive indexes.
class BlockStream {
 public:
  void Thinking(const std::string& text) {
    if (text.empty()) return;
    if (open_ != "thinking")
      Open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    Delta({{"type", "thinking_delta"}, {"thinking", text}});
  }
  void Text(const std::string& text) {
    if (text.empty()) return;
    if (open_ != "text") Open("text", {{"type", "text"}, {"text", ""}});
    Delta({{"type", "text_delta"}, {"text", text}});
  }
  // A whole tool call: its block opens with an empty input, the arguments follow as one
  // input_json_delta, and the block closes.
  void ToolUse(const ParsedToolCall& call) {
    util::Json block = ToolUseBlock(call);
    const std::string arguments = util::DumpJson(block["input"]);
    block["input"] = util::Json::object();
    Open("tool_use", std::move(block));
    Delta({{"type", "input_json_delta"}, {"partial_json", arguments}});
    Close();
  }
  void Close() {
    if (open_.empty()) return;
    out_ += Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_.clear();
  }
  // The events produced since the last call.
  std::string Take() { return std::exchange(out_, {}); }

 private:
  void Open(const char* kind, util::Json block) {
    Close();
    ++index_;
    open_ = kind;
    out_ += Event("content_block_start",
                  {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  void Delta(util::Json delta) {
    out_ += Event("content_block_delta",
                  {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }

  int index_ = -1;
  std::string open_;  // kind of the open block, "" when none
  std::string out_;
};

void StreamMessage(const MessagesRoute& route, Generation& generation,
                   http::ResponseWriter& writer) {
  if (!http::BeginEventStream(writer)) {
    generation.Cancel();
    return;
  }
  util::Json message =
      util::Json{{"id", route.id()},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", route.model().served_model_name},
                 {"content", util::Json::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 // Cached tokens are known once the engine scheduled the prompt; the final
                 // counts come with message_delta.
                 {"usage", AnthropicUsage({static_cast<int64_t>(route.prompt().tokens.size())})}};
  if (!writer.Write(Event("message_start", {{"type", "message_start"}, {"message", message}}) +
                    Event("ping", {{"type", "ping"}}))) {
    generation.Cancel();
    return;
  }
  AnswerSplitter splitter(route.prompt(), route.tool_format());
  BlockStream blocks;
  Ending ending;
  auto on_delta = [&](const ChoiceDelta& d) {
    const bool last = !d.finish_reason.empty();
    AnswerSplitter::Delta a = splitter.Push(d.text, last);
    blocks.Thinking(a.reasoning);
    blocks.Text(a.content);
    for (const auto& call : a.calls) blocks.ToolUse(call);
    if (last) {
      ending = {d.finish_reason, d.stop_string, splitter.num_calls() > 0};
      blocks.Close();
    }
    std::string out = blocks.Take();
    return out.empty() || writer.Write(out);
  };
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) return;
  std::string tail;
  if (end == DriveEnd::kError) {
    tail = Event("error", http::AnthropicErrorJson(http::ApiErrorFromStatus(error)));
  } else {
    tail =
        Event("message_delta",
              {{"type", "message_delta"},
               {"delta",
                {{"stop_reason", ending.StopReason()}, {"stop_sequence", ending.StopSequence()}}},
               {"usage", AnthropicUsage(generation.usage())}}) +
        Event("message_stop", {{"type", "message_stop"}});
  }
  if (writer.Write(tail)) writer.End();
}

void CompleteMessage(const MessagesRoute& route, Generation& generation,
                     http::ResponseWriter& writer) {
  std::string text;
  Ending ending;
  auto on_delta = [&](const ChoiceDelta& d) {
    text += d.text;
    if (!d.finish_reason.empty()) ending = {d.finish_reason, d.stop_string, false};
    return true;
  };
  if (!route.DriveToCompletion(generation, writer, on_delta)) return;
  AnswerSplitter splitter(route.prompt(), route.tool_format());
  AnswerSplitter::Delta a = splitter.Push(text, /*last=*/true);
  ending.called_tools = !a.calls.empty();
  util::Json content = util::Json::array();
  if (!a.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
  }
  if (!a.content.empty()) content.push_back({{"type", "text"}, {"text", a.content}});
  for (const auto& call : a.calls) content.push_back(ToolUseBlock(call));
  RespondJson(writer, 200,
              util::Json{{"id", route.id()},
                         {"type", "message"},
                         {"role", "assistant"},
                         {"model", route.model().served_model_name},
                         {"content", std::move(content)},
                         {"stop_reason", ending.StopReason()},
                         {"stop_sequence", ending.StopSequence()},
                         {"usage", AnthropicUsage(generation.usage())}});
}

void MessagesRoute::Stream(Generation& generation, http::ResponseWriter& writer) {
  StreamMessage(*this, generation, writer);
}

void MessagesRoute::Complete(Generation& generation, http::ResponseWriter& writer) {
  CompleteMessage(*this, generation, writer);
}

}  // namespace

void HandleAnthropicMessages(const ServedModel& model, const http::Request& request,
                             http::ResponseWriter& writer) {
  MessagesRoute route(model);
  ServeRoute(route, request, writer);
}

}  // namespace deepinfer::api
