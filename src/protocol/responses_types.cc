#include "protocol/responses_types.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/log.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

std::optional<std::string> StringField(const util::Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// A message's content: a string, or input_text / output_text / text and input_image parts,
// into `message` (its role set).
absl::Status ContentText(const util::Json& content, const std::string& param,
                         ChatMessage* message) {
  std::string* out = &message->content;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              "'content' must be a string or an array of parts.");
  }
  int32_t num_parts = 0;
  for (size_t k = 0; k < content.size(); ++k) {
    const util::Json& part = content[k];
    const std::string p = fmt::format("{}[{}]", param, k);
    if (!part.is_object())
      return http::RequestError(p, util::codes::kInvalidType, "Content parts must be objects.");
    if (IsImagePart(part)) {
      DI_RETURN_IF_ERROR(AppendImagePart(part, p, &num_parts, message));
      continue;
    }
    const std::string type = StringField(part, "type").value_or("");
    if (type != "input_text" && type != "output_text" && type != "text") {
      return http::RequestError(p, util::codes::kUnsupportedValue,
                                fmt::format("Content part type '{}' is not supported; the served "
                                            "model reads text only.",
                                            type));
    }
    auto text = StringField(part, "text");
    if (!text)
      return http::RequestError(p, util::codes::kInvalidType, "A text part needs a string 'text'.");
    AppendTextPart(*text, &num_parts, out);
  }
  return absl::OkStatus();
}

absl::Status ParseInput(const util::Json& input, std::vector<ChatMessage>* out) {
  if (input.is_string()) {
    ChatMessage m;
    m.role = "user";
    m.content = input.get<std::string>();
    out->push_back(std::move(m));
    return absl::OkStatus();
  }
  if (!input.is_array()) {
    return http::RequestError("input", util::codes::kInvalidType,
                              "'input' must be a string or an array of items.");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const util::Json& item = input[i];
    const std::string param = fmt::format("input[{}]", i);
    if (!item.is_object())
      return http::RequestError(param, util::codes::kInvalidType, "Input items are objects.");
    const std::string type = StringField(item, "type").value_or("message");
    if (type == "message") {
      auto role = StringField(item, "role");
      if (!role ||
          (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")) {
        return http::RequestError(param + ".role", util::codes::kInvalidValue,
                                  "'role' must be user, assistant, system or developer.");
      }
      auto content = item.find("content");
      if (content == item.end()) {
        return http::RequestError(param + ".content", util::codes::kMissingField,
                                  "'content' is required.");
      }
      ChatMessage m;
      m.role = *role == "developer" ? "system" : *role;
      DI_RETURN_IF_ERROR(ContentText(*content, param + ".content", &m));
      out->push_back(std::move(m));
    } else if (type == "function_call") {
      auto call_id = StringField(item, "call_id");
      auto name = StringField(item, "name");
      auto arguments = StringField(item, "arguments");
      if (!call_id || !name || !arguments) {
        return http::RequestError(param, util::codes::kMissingField,
                                  "A function_call item needs string call_id, name and arguments.");
      }
      util::Json call = {{"id", *call_id},
                         {"type", "function"},
                         {"function", {{"name", *name}, {"arguments", *arguments}}}};
      // Calls that follow each other are one assistant turn.
      if (out->empty() || out->back().role != "assistant" || out->back().has_content) {
        ChatMessage m;
        m.role = "assistant";
        m.has_content = false;
        m.tool_calls_json = "[]";
        out->push_back(std::move(m));
      }
      util::Json calls = util::Json::parse(
          out->back().tool_calls_json.empty() ? "[]" : out->back().tool_calls_json);
      calls.push_back(std::move(call));
      out->back().tool_calls_json = util::DumpJson(calls);
    } else if (type == "function_call_output") {
      auto call_id = StringField(item, "call_id");
      auto output = item.find("output");
      if (!call_id || output == item.end()) {
        return http::RequestError(param, util::codes::kMissingField,
                                  "A function_call_output item needs call_id and output.");
      }
      ChatMessage m;
      m.role = "tool";
      m.tool_call_id = *call_id;
      DI_RETURN_IF_ERROR(ContentText(*output, param + ".output", &m));
      out->push_back(std::move(m));
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the model again
    } else {
      return http::RequestError(param + ".type", util::codes::kUnsupportedValue,
                                fmt::format("Input item type '{}' is not supported.", type));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const util::Json& json, ResponsesRequest* r) {
  auto tools = json.find("tools");
  if (tools == json.end() || tools->is_null()) return absl::OkStatus();
  if (!tools->is_array())
    return http::RequestError("tools", util::codes::kInvalidType, "'tools' must be an array.");
  for (size_t i = 0; i < tools->size(); ++i) {
    const util::Json& t = (*tools)[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!t.is_object())
      return http::RequestError(param, util::codes::kInvalidType, "Tools must be objects.");
    const std::string type = StringField(t, "type").value_or("");
    if (type != "function") {
      return http::RequestError(param + ".type", util::codes::kUnsupportedValue,
                                fmt::format("Tool type '{}' is not supported; only function tools "
                                            "are.",
                                            type));
    }
    auto name = StringField(t, "name");
    if (!name)
      return http::RequestError(param + ".name", util::codes::kMissingField,
                                "A tool needs a 'name'.");
    util::Json function = {{"name", *name}};
    if (t.contains("description")) function["description"] = t["description"];
    function["parameters"] = t.contains("parameters") && !t["parameters"].is_null()
                                 ? t["parameters"]
                                 : util::Json::object();
    r->tools.push_back(
        util::DumpJson(util::Json{{"type", "function"}, {"function", std::move(function)}}));
  }
  r->echo["tools"] = *tools;
  return absl::OkStatus();
}

// Fields of OpenAI's Responses request that this server does not implement, each refused with
// "unsupported_value" when it asks for something (null and the default values pass), rather
// than answered as if it had been honoured. `accepts` is true for a value that asks for
// nothing.
struct UnsupportedField {
  const char* name;
  bool (*accepts)(const util::Json& value);
  const char* message;
};

bool IsFalse(const util::Json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsOne(const util::Json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }
bool IsZero(const util::Json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }
bool IsDisabled(const util::Json& v) { return v.is_string() && v.get<std::string>() == "disabled"; }
bool IsDefaultTier(const util::Json& v) {
  return v.is_string() && (v.get<std::string>() == "auto" || v.get<std::string>() == "default");
}
bool IsInMemory(const util::Json& v) {
  return v.is_string() &&
         (v.get<std::string>() == "in_memory" || v.get<std::string>() == "in-memory");
}
bool Never(const util::Json&) { return false; }

constexpr UnsupportedField kUnsupportedFields[] = {
    {"previous_response_id", Never,
     "This server keeps no responses; send the whole conversation in 'input'."},
    {"conversation", Never,
     "This server keeps no conversations; send the whole conversation in 'input'."},
    {"background", IsFalse,
     "Background responses are not supported: this server keeps no responses to poll; send "
     "the request without 'background' (and with 'stream' to get output as it is made)."},
    {"store", IsFalse,
     "This server keeps no responses ('store' must be false or absent): nothing could be "
     "retrieved later."},
    {"prompt", Never, "Stored prompt templates are not supported; send the text in 'input'."},
    {"max_tool_calls", Never, "'max_tool_calls' is not supported."},
    {"top_logprobs", IsZero, "Log probabilities are not supported on this route."},
    {"truncation", IsDisabled,
     "Only 'truncation': 'disabled' is supported: a conversation over the context window is "
     "refused, not cut."},
    {"service_tier", IsDefaultTier, "Only the 'auto' / 'default' service tier exists here."},
    {"prompt_cache_retention", IsInMemory, "Only 'in_memory' prefix caching exists here."},
    {"n", IsOne, "The Responses API makes one response per request."},
};

// `include` asks for extra output data. "reasoning.encrypted_content" needs no stored state: it
// asks for reasoning that a stateless client can send back, and this server sends its reasoning
// in the clear (reasoning items' `content`) and reads none back (earlier reasoning is not shown
// to the model again), so it is accepted and answered without encrypted content. The other
// values name outputs no request here can have (hosted tools, images, logprobs on this route).
constexpr const char* kAcceptedIncludes[] = {"reasoning.encrypted_content"};

absl::Status CheckInclude(const util::Json& json) {
  auto it = json.find("include");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return http::RequestError("include", util::codes::kInvalidType,
                              "'include' must be an array of strings.");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const util::Json& value = (*it)[i];
    const std::string param = fmt::format("include[{}]", i);
    if (!value.is_string()) {
      return http::RequestError(param, util::codes::kInvalidType,
                                "'include' must be an array of strings.");
    }
    const std::string& name = value.get_ref<const std::string&>();
    if (std::find(std::begin(kAcceptedIncludes), std::end(kAcceptedIncludes), name) ==
        std::end(kAcceptedIncludes)) {
      return http::RequestError(
          param, util::codes::kUnsupportedValue,
          fmt::format("'include' value '{}' is not supported; only "
                      "'reasoning.encrypted_content' is (answered without encrypted content).",
                      util::PrintableForLog(name)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckUnsupportedFields(const util::Json& json) {
  DI_RETURN_IF_ERROR(CheckInclude(json));
  for (const UnsupportedField& field : kUnsupportedFields) {
    auto it = json.find(field.name);
    if (it == json.end() || it->is_null() || field.accepts(*it)) continue;
    return http::RequestError(field.name, util::codes::kUnsupportedValue, field.message);
  }
  if (auto it = json.find("text"); it != json.end() && it->is_object()) {
    if (auto v = it->find("verbosity"); v != it->end() && !v->is_null() && *v != "medium") {
      return http::RequestError("text.verbosity", util::codes::kUnsupportedValue,
                                "Only the default verbosity ('medium') is supported.");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                       const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, util::ParseJson(body));
  if (!json.is_object()) {
    return http::RequestError("", util::codes::kInvalidType,
                              "The request body must be a JSON object.");
  }
  ResponsesRequest r;
  DI_RETURN_IF_ERROR(CheckUnsupportedFields(json));
  DI_RETURN_IF_ERROR(ParseGenerationParams(json, limits, &r.params));
  r.params.n = 1;
  r.params.include_usage = false;
  if (auto it = json.find("max_output_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return http::RequestError("max_output_tokens", util::codes::kInvalidValue,
                                "'max_output_tokens' must be a positive integer.");
    }
    r.params.max_tokens = static_cast<int32_t>(it->get<int64_t>());
    r.echo["max_output_tokens"] = *it;
  }
  if (auto it = json.find("instructions"); it != json.end() && !it->is_null()) {
    if (!it->is_string()) {
      return http::RequestError("instructions", util::codes::kInvalidType,
                                "'instructions' must be a string.");
    }
    ChatMessage m;
    m.role = "system";
    m.content = it->get<std::string>();
    r.messages.push_back(std::move(m));
    r.echo["instructions"] = *it;
  }
  auto input = json.find("input");
  if (input == json.end() || input->is_null()) {
    return http::RequestError("input", util::codes::kMissingField,
                              "'input' is a required property.");
  }
  DI_RETURN_IF_ERROR(ParseInput(*input, &r.messages));
  DI_RETURN_IF_ERROR(ParseTools(json, &r));
  DI_ASSIGN_OR_RETURN(r.tool_choice, ParseOpenAiToolChoice(json));
  if (auto it = json.find("tool_choice"); it != json.end() && !it->is_null()) {
    r.echo["tool_choice"] = *it;
  }
  if (auto it = json.find("reasoning"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) {
      return http::RequestError("reasoning", util::codes::kInvalidType,
                                "'reasoning' must be an object.");
    }
    if (auto effort = StringField(*it, "effort")) {
      r.reasoning_effort = *effort;
      r.thinking = *effort != "none";
    }
    r.echo["reasoning"] = *it;
  }
  if (auto it = json.find("text"); it != json.end() && it->is_object()) {
    if (auto format = it->find("format"); format != it->end() && !format->is_null()) {
      if (!format->is_object()) {
        return http::RequestError("text.format", util::codes::kInvalidType,
                                  "'text.format' must be an object.");
      }
      auto type_it = format->find("type");
      if (type_it != format->end() && !type_it->is_null() && !type_it->is_string()) {
        return http::RequestError("text.format.type", util::codes::kInvalidType,
                                  "'text.format.type' must be a string.");
      }
      const std::string type = StringField(*format, "type").value_or("text");
      using constraint::ConstraintKind;
      std::optional<constraint::ConstraintSpec> spec;
      if (type == "json_object") {
        spec = constraint::ConstraintSpec{ConstraintKind::kJsonObject, ""};
      } else if (type == "json_schema") {
        auto schema = format->find("schema");
        if (schema == format->end() || !schema->is_object()) {
          return http::RequestError("text.format.schema", util::codes::kMissingField,
                                    "text.format type json_schema needs a 'schema' object.");
        }
        spec = constraint::ConstraintSpec{ConstraintKind::kJsonSchema, util::DumpJson(*schema)};
      } else if (type != "text") {
        return http::RequestError("text.format.type", util::codes::kUnsupportedValue,
                                  fmt::format("text.format type '{}' is not supported; use text, "
                                              "json_object or json_schema.",
                                              type));
      }
      if (spec.has_value()) {
        if (r.params.constraint.has_value()) {
          return http::RequestError("text.format", util::codes::kInvalidValue,
                                    "'text.format' and '" + r.params.constraint_param +
                                        "' both constrain the output; send one.");
        }
        r.params.constraint = std::move(spec);
        r.params.constraint_param = "text.format";
      }
    }
    r.echo["text"] = *it;
  }
  for (const char* key : {"temperature", "top_p", "metadata", "parallel_tool_calls", "user",
                          "safety_identifier", "prompt_cache_key"}) {
    if (auto it = json.find(key); it != json.end()) r.echo[key] = *it;
  }
  return r;
}

}  // namespace deepinfer::api
