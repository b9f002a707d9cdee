#include "protocol/anthropic_types.h"

#include <algorithm>
#include <limits>
#include <string>

#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {

namespace {

// A tool_result's content: a string or an array of text and image blocks, into the tool
// message `result`.
absl::Status ToolResultContent(const util::Json& content, const std::string& param,
                               ChatMessage* result, int32_t* num_images) {
  std::string* text = &result->content;
  if (content.is_null()) return absl::OkStatus();
  if (content.is_string()) {
    *text = content.get<std::string>();
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              "tool_result content must be a string or blocks.");
  }
  int32_t num_parts = 0;
  for (size_t k = 0; k < content.size(); ++k) {
    const util::Json& block = content[k];
    std::string p = fmt::format("{}[{}]", param, k);
    if (IsImagePart(block)) {
      ++*num_images;
      DI_RETURN_IF_ERROR(AppendImagePart(block, p, &num_parts, result));
      continue;
    }
    if (!block.is_object() || !block.contains("type") || block["type"] != "text" ||
        !block.contains("text") || !block["text"].is_string()) {
      return http::RequestError(p, util::codes::kUnsupportedValue,
                                "tool_result blocks must be text or images.");
    }
    AppendTextPart(block["text"].get_ref<const std::string&>(), &num_parts, text);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AnthropicChat> ParseAnthropicChat(const util::Json& body) {
  AnthropicChat chat;
  DI_ASSIGN_OR_RETURN(chat.messages, AnthropicToChatMessages(body, &chat.num_images));
  // A final assistant turn is a prefill: the answer continues its text rather than starting a
  // new turn. One that calls tools is a finished turn and stays closed.
  if (!chat.messages.empty() && chat.messages.back().role == "assistant" &&
      chat.messages.back().tool_calls_json.empty()) {
    chat.options.continue_final_message = true;
    chat.options.add_generation_prompt = false;
  }
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      return http::RequestError("tools", util::codes::kInvalidType, "'tools' must be an array.");
    for (size_t i = 0; i < tools->size(); ++i) {
      const util::Json& t = (*tools)[i];
      std::string param = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
        return http::RequestError(param, util::codes::kInvalidType,
                                  "Tools must be objects with a string 'name'.");
      }
      if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom") {
        return http::RequestError(param, util::codes::kUnsupportedValue,
                                  "Server tools are not supported; only custom tools with an "
                                  "input_schema are.");
      }
      util::Json function = util::Json{{"name", t["name"]}};
      if (t.contains("description")) function["description"] = t["description"];
      function["parameters"] =
          t.contains("input_schema") ? t["input_schema"] : util::Json::object();
      chat.options.tools.push_back(
          util::DumpJson(util::Json{{"type", "function"}, {"function", std::move(function)}}));
    }
  }
  // Thinking on for "enabled", "adaptive" and "between_tools" (a DeepSeek model cannot decide on
  // its own whether to think, so adaptive thinking thinks); off for "disabled" or no field.
  if (auto thinking = body.find("thinking"); thinking != body.end() && !thinking->is_null()) {
    if (!thinking->is_object()) {
      return http::RequestError("thinking", util::codes::kInvalidType,
                                "'thinking' must be an object.");
    }
    const std::string type = util::StringMember(*thinking, "type").value_or("");
    if (type != "enabled" && type != "adaptive" && type != "between_tools" &&
        type != "disabled") {
      return http::RequestError("thinking.type", util::codes::kInvalidValue,
                                "'thinking.type' must be enabled, adaptive or disabled.");
    }
    chat.options.thinking = type != "disabled";
  }
  // output_config.effort ("low" ... "max") is DeepSeek V4's reasoning effort.
  if (auto config = body.find("output_config"); config != body.end() && config->is_object()) {
    if (auto effort = config->find("effort"); effort != config->end() && effort->is_string()) {
      chat.options.reasoning_effort = effort->get<std::string>();
    }
  }
  return chat;
}

absl::StatusOr<std::vector<ChatMessage>> AnthropicToChatMessages(const util::Json& body,
                                                                 int32_t* num_images) {
  *num_images = 0;
  std::vector<ChatMessage> out;
  if (auto system = body.find("system"); system != body.end() && !system->is_null()) {
    ChatMessage m;
    m.role = "system";
    if (system->is_string()) {
      m.content = system->get<std::string>();
    } else if (system->is_array()) {
      int32_t num_parts = 0;
      for (size_t i = 0; i < system->size(); ++i) {
        const util::Json& block = (*system)[i];
        if (!block.is_object() || !block.contains("text") || !block["text"].is_string()) {
          return http::RequestError(fmt::format("system[{}]", i), util::codes::kInvalidType,
                                    "System blocks must be text blocks.");
        }
        AppendTextPart(block["text"].get_ref<const std::string&>(), &num_parts, &m.content);
      }
    } else {
      return http::RequestError("system", util::codes::kInvalidType,
                                "'system' must be a string or text blocks.");
    }
    out.push_back(std::move(m));
  }
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) {
    return http::RequestError("messages", util::codes::kMissingField,
                              "'messages' is a required property.");
  }
  if (!messages->is_array()) {
    return http::RequestError("messages", util::codes::kInvalidType,
                              "'messages' must be an array.");
  }
  if (messages->empty()) {  // as Anthropic's API and our chat route: nothing to answer
    return http::RequestError("messages", util::codes::kInvalidValue,
                              "'messages' must contain at least one message.");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const util::Json& msg = (*messages)[i];
    std::string prefix = fmt::format("messages[{}]", i);
    if (!msg.is_object())
      return http::RequestError(prefix, util::codes::kInvalidType, "Messages must be objects.");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string() || (*role != "user" && *role != "assistant")) {
      return http::RequestError(prefix + ".role", util::codes::kInvalidValue,
                                "'role' must be \"user\" or \"assistant\".");
    }
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      return http::RequestError(prefix + ".content", util::codes::kMissingField,
                                "'content' is required.");
    }
    ChatMessage turn;
    turn.role = role->get<std::string>();
    if (content->is_string()) {
      turn.content = content->get<std::string>();
      out.push_back(std::move(turn));
      continue;
    }
    if (!content->is_array()) {
      return http::RequestError(prefix + ".content", util::codes::kInvalidType,
                                "'content' must be a string or an array of blocks.");
    }
    util::Json calls = util::Json::array();
    int32_t num_parts = 0;
    for (size_t k = 0; k < content->size(); ++k) {
      const util::Json& block = (*content)[k];
      std::string param = fmt::format("{}.content[{}]", prefix, k);
      if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
        return http::RequestError(param, util::codes::kMissingField,
                                  "Content blocks need a string 'type'.");
      }
      std::string type = block["type"].get<std::string>();
      if (type == "text") {
        if (!block.contains("text") || !block["text"].is_string()) {
          return http::RequestError(param, util::codes::kInvalidType,
                                    "A text block needs a string 'text'.");
        }
        AppendTextPart(block["text"].get_ref<const std::string&>(), &num_parts, &turn.content);
      } else if (type == "image") {
        ++*num_images;
        DI_RETURN_IF_ERROR(AppendImagePart(block, param, &num_parts, &turn));
      } else if (type == "thinking" || type == "redacted_thinking") {
        // Earlier reasoning is not part of the prompt.
      } else if (type == "tool_use") {
        if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
            !block["name"].is_string()) {
          return http::RequestError(param, util::codes::kMissingField,
                                    "tool_use needs a string id and name.");
        }
        util::Json input = block.contains("input") ? block["input"] : util::Json::object();
        calls.push_back(util::Json{{"id", block["id"]},
                                   {"type", "function"},
                                   {"function", util::Json{{"name", block["name"]},
                                                           {"arguments", util::DumpJson(input)}}}});
      } else if (type == "tool_result") {
        if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
          return http::RequestError(param, util::codes::kMissingField,
                                    "tool_result needs a string tool_use_id.");
        }
        ChatMessage result;
        result.role = "tool";
        result.tool_call_id = block["tool_use_id"].get<std::string>();
        if (block.contains("content")) {
          DI_RETURN_IF_ERROR(
              ToolResultContent(block["content"], param + ".content", &result, num_images));
        }
        out.push_back(std::move(result));
      } else {
        return http::RequestError(param, util::codes::kUnsupportedValue,
                                  fmt::format("Content block type '{}' is not supported.", type));
      }
    }
    if (!calls.empty()) {
      turn.tool_calls_json = util::DumpJson(calls);
      turn.has_content = !turn.content.empty();
    }
    // A user turn made only of tool results adds no user message of its own.
    if (turn.role == "assistant" || !turn.content.empty() || !calls.empty() || content->empty() ||
        std::none_of(content->begin(), content->end(), [](const util::Json& b) {
          return util::StringMember(b, "type") == "tool_result";
        })) {
      out.push_back(std::move(turn));
    }
  }
  return out;
}

namespace {

// Anthropic's tool_choice: {"type": "auto" | "any" | "tool" | "none", "name" (tool),
// "disable_parallel_tool_use"}.
absl::StatusOr<ToolChoice> ParseToolChoice(const util::Json& body) {
  ToolChoice choice;
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return choice;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
    return http::RequestError("tool_choice", util::codes::kInvalidType,
                              "'tool_choice' must be an object with a string 'type'.");
  }
  const std::string type = (*it)["type"].get<std::string>();
  if (type == "none") {
    choice.mode = ToolChoice::Mode::kNone;
  } else if (type == "any") {
    choice.mode = ToolChoice::Mode::kRequired;
  } else if (type == "tool") {
    auto name = it->find("name");
    if (name == it->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return http::RequestError("tool_choice.name", util::codes::kMissingField,
                                "A tool_choice of type 'tool' needs the tool's 'name'.");
    }
    choice.mode = ToolChoice::Mode::kNamed;
    choice.name = name->get<std::string>();
  } else if (type != "auto") {
    return http::RequestError("tool_choice.type", util::codes::kInvalidValue,
                              "'tool_choice.type' must be auto, any, tool or none.");
  }
  if (auto p = it->find("disable_parallel_tool_use"); p != it->end() && !p->is_null()) {
    if (!p->is_boolean()) {
      return http::RequestError("tool_choice.disable_parallel_tool_use",
                                util::codes::kInvalidType,
                                "'disable_parallel_tool_use' must be a boolean.");
    }
    choice.parallel = !p->get<bool>();
  }
  return choice;
}

// Anthropic structured outputs: output_config.format, or the older top-level output_format,
// both {"type": "json_schema", "schema": {...}}. Anything else there is a malformed constraint.
// Source: Anthropic API reference, Messages ("output_config", "output_format").
absl::Status ParseOutputFormat(const util::Json& body, GenerationParams* params) {
  auto one = [&](const util::Json& format, const std::string& param) -> absl::Status {
    if (format.is_null()) return absl::OkStatus();
    auto bad = [&](const std::string& where, std::string_view message) {
      return http::RequestError(where, util::codes::kInvalidConstraint, message);
    };
    if (!format.is_object()) return bad(param, "The output format must be an object.");
    auto type = format.find("type");
    if (type == format.end() || !type->is_string() || *type != "json_schema") {
      return bad(param + ".type", "The output format's 'type' must be \"json_schema\".");
    }
    auto schema = format.find("schema");
    if (schema == format.end() || !schema->is_object()) {
      return bad(param + ".schema", "A json_schema output format needs a 'schema' object.");
    }
    return SetOutputConstraint({constraint::ConstraintKind::kJsonSchema, util::DumpJson(*schema)},
                               param + ".schema", params);
  };
  if (auto config = body.find("output_config"); config != body.end() && !config->is_null()) {
    if (!config->is_object()) {
      return http::RequestError("output_config", util::codes::kInvalidType,
                                "'output_config' must be an object.");
    }
    if (auto format = config->find("format"); format != config->end()) {
      DI_RETURN_IF_ERROR(one(*format, "output_config.format"));
    }
  }
  if (auto format = body.find("output_format"); format != body.end()) {
    DI_RETURN_IF_ERROR(one(*format, "output_format"));
  }
  return absl::OkStatus();
}

// thinking.budget_tokens: the most tokens the reasoning may take before the engine closes it
// (GenerationParams::reasoning_budget). Anthropic asks for at least 1,024 and less than
// max_tokens; any count from 0 is taken here (small models think briefly), and one of
// max_tokens or more never binds.
absl::Status ParseThinkingBudget(const util::Json& body, GenerationParams* params) {
  auto thinking = body.find("thinking");
  if (thinking == body.end() || !thinking->is_object()) return absl::OkStatus();
  auto budget = thinking->find("budget_tokens");
  if (budget == thinking->end() || budget->is_null()) return absl::OkStatus();
  if (!budget->is_number_integer() || budget->get<int64_t>() < 0 ||
      budget->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return http::RequestError("thinking.budget_tokens", util::codes::kInvalidValue,
                              "'thinking.budget_tokens' must be a non-negative integer.");
  }
  if (util::StringMember(*thinking, "type").value_or("") != "disabled") {
    params->reasoning_budget = static_cast<int32_t>(budget->get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ParseStopSequences(const util::Json& body, GenerationParams* params) {
  auto it = body.find("stop_sequences");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || it->size() > static_cast<size_t>(kMaxStopStrings)) {
    return http::RequestError(
        "stop_sequences", util::codes::kInvalidType,
        fmt::format("'stop_sequences' must be an array of at most {} strings.", kMaxStopStrings));
  }
  for (const util::Json& s : *it) {
    if (!s.is_string() ||
        s.get_ref<const std::string&>().size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return http::RequestError(
          "stop_sequences", util::codes::kInvalidValue,
          fmt::format("'stop_sequences' must hold strings of at most {} bytes.",
                      kMaxStopStringBytes));
    }
    if (!s.get_ref<const std::string&>().empty()) params->stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AnthropicMessagesRequest> ParseAnthropicMessagesRequest(std::string_view body,
                                                                       const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, util::ParseJson(body));
  if (!json.is_object()) {
    return http::RequestError("", util::codes::kInvalidType,
                              "The request body must be a JSON object.");
  }
  AnthropicMessagesRequest r;
  DI_RETURN_IF_ERROR(ParseGenerationParams(json, limits, &r.params));
  r.params.n = 1;
  r.params.stop.clear();  // OpenAI's `stop` is not part of this API
  r.params.include_usage = false;
  if (!r.params.max_tokens) {
    return http::RequestError("max_tokens", util::codes::kMissingField,
                              "max_tokens: Field required.");
  }
  DI_RETURN_IF_ERROR(ParseStopSequences(json, &r.params));
  DI_RETURN_IF_ERROR(ParseOutputFormat(json, &r.params));
  DI_RETURN_IF_ERROR(ParseThinkingBudget(json, &r.params));
  DI_ASSIGN_OR_RETURN(r.tool_choice, ParseToolChoice(json));
  DI_ASSIGN_OR_RETURN(r.chat, ParseAnthropicChat(json));
  return r;
}

}  // namespace deepinfer::api
