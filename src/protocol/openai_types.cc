#include "protocol/openai_types.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

// Field access over one JSON object. `null` and absent read the same; a present value of the
// wrong type is an "invalid_type" error naming the field.
class Fields {
 public:
  explicit Fields(const util::Json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  const util::Json* Find(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string Param(const char* key) const { return prefix_ + key; }

  absl::Status TypeError(const char* key, const char* expected) const {
    return http::RequestError(Param(key), util::codes::kInvalidType,
                              fmt::format("'{}' must be {}.", Param(key), expected));
  }
  absl::Status ValueError(const char* key, std::string_view what) const {
    return http::RequestError(Param(key), util::codes::kInvalidValue,
                              fmt::format("'{}' {}.", Param(key), what));
  }

  absl::Status GetBool(const char* key, bool* out) const {
    const util::Json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_boolean()) return TypeError(key, "a boolean");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status GetString(const char* key, std::string* out) const {
    const util::Json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_string()) return TypeError(key, "a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  // Any finite number (integers included).
  absl::Status GetNumber(const char* key, std::optional<double>* out) const {
    const util::Json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_number()) return TypeError(key, "a number");
    double d = v->get<double>();
    if (!std::isfinite(d)) return ValueError(key, "must be finite");
    *out = d;
    return absl::OkStatus();
  }

  // An integer; a float with an integral value is accepted (1.0).
  absl::Status GetInt(const char* key, std::optional<int64_t>* out) const {
    const util::Json* v = Find(key);
    if (!v) return absl::OkStatus();
    auto value = AsInt(*v);
    if (!value) return TypeError(key, "an integer");
    *out = *value;
    return absl::OkStatus();
  }

  static std::optional<int64_t> AsInt(const util::Json& v) {
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return std::nullopt;
      return static_cast<int64_t>(d);
    }
    return std::nullopt;
  }

 private:
  const util::Json& object_;
  std::string prefix_;
};

absl::StatusOr<util::Json> ParseObject(std::string_view body) {
  DI_ASSIGN_OR_RETURN(util::Json json, util::ParseJson(body));
  if (!json.is_object()) {
    return http::RequestError("", util::codes::kInvalidType,
                              "The request body must be a JSON object.");
  }
  return json;
}

absl::Status CheckTokenId(int64_t id, const ParseLimits& limits, const std::string& param) {
  if (id < 0 || (limits.vocab_size > 0 && id >= limits.vocab_size) ||
      id > std::numeric_limits<int32_t>::max()) {
    return http::RequestError(
        param, util::codes::kInvalidToken,
        fmt::format("Token id {} is outside the vocabulary (size {}).", id, limits.vocab_size));
  }
  return absl::OkStatus();
}

// A JSON array of token ids.
absl::Status ParseTokenArray(const util::Json& v, const ParseLimits& limits,
                             const std::string& param, std::vector<int32_t>* out) {
  if (!v.is_array()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              fmt::format("'{}' must be an array.", param));
  }
  out->clear();
  out->reserve(v.size());
  for (const util::Json& item : v) {
    auto id = Fields::AsInt(item);
    if (!id) {
      return http::RequestError(param, util::codes::kInvalidType,
                                fmt::format("'{}' must contain only integer token ids.", param));
    }
    DI_RETURN_IF_ERROR(CheckTokenId(*id, limits, param));
    out->push_back(static_cast<int32_t>(*id));
  }
  return absl::OkStatus();
}

// Fields of GenerationParams common to both routes, except logprobs (their shapes differ).
// A JSON schema given as an object, or as a string holding one (vLLM takes both).
absl::StatusOr<std::string> SchemaText(const util::Json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return util::DumpJson(v);
  if (v.is_string()) return v.get<std::string>();
  return http::RequestError(param, util::codes::kInvalidType,
                            fmt::format("'{}' must be a JSON schema (an object).", param));
}

absl::StatusOr<std::string> ConstraintString(const util::Json& v, const std::string& param) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              fmt::format("'{}' must be a non-empty string.", param));
  }
  return v.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> ConstraintChoices(const util::Json& v,
                                                           const std::string& param) {
  std::vector<std::string> out;
  if (v.is_array()) {
    for (const util::Json& c : v) {
      if (!c.is_string()) break;
      out.push_back(c.get<std::string>());
    }
  }
  if (out.empty() || out.size() != v.size()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              fmt::format("'{}' must be a non-empty array of strings.", param));
  }
  return out;
}

// Member `key` of object `o` as a string; `fallback` when absent or null.
// Errors: InvalidArgument "invalid_type" naming `param` for any other type.
absl::StatusOr<std::string> OptionalString(const util::Json& o, const char* key,
                                           std::string_view param, std::string fallback) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              fmt::format("'{}' must be a string.", param));
  }
  return it->get<std::string>();
}

// The structured-output fields of a chat or completion request (GenerationParams::constraint).
absl::Status ParseConstraint(const util::Json& json, GenerationParams* p) {
  using constraint::ConstraintKind;
  using constraint::ConstraintSpec;
  auto set = [&](ConstraintSpec spec, std::string param) -> absl::Status {
    return SetOutputConstraint(std::move(spec), std::move(param), p);
  };
  if (auto it = json.find("response_format"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) {
      return http::RequestError("response_format", util::codes::kInvalidType,
                                "'response_format' must be an object.");
    }
    DI_ASSIGN_OR_RETURN(const std::string type,
                        OptionalString(*it, "type", "response_format.type", ""));
    if (type == "json_object") {
      DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonObject, ""}, "response_format"));
    } else if (type == "json_schema") {
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object()) {
        return http::RequestError("response_format.json_schema", util::codes::kMissingField,
                                  "response_format type json_schema needs a 'json_schema' object.");
      }
      // Read for their types only: name labels the schema, and strict schemas are enforced like
      // any other (the constraint is always exact).
      DI_RETURN_IF_ERROR(
          OptionalString(*js, "name", "response_format.json_schema.name", "").status());
      if (auto strict = js->find("strict");
          strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
        return http::RequestError("response_format.json_schema.strict", util::codes::kInvalidType,
                                  "'response_format.json_schema.strict' must be a boolean.");
      }
      auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null()) {
        DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonObject, ""}, "response_format"));
      } else {
        DI_ASSIGN_OR_RETURN(std::string text,
                            SchemaText(*schema, "response_format.json_schema.schema"));
        DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonSchema, std::move(text)},
                               "response_format.json_schema.schema"));
      }
    } else if (type != "text") {
      return http::RequestError("response_format.type", util::codes::kUnsupportedValue,
                                fmt::format("response_format type '{}' is not supported; use "
                                            "text, json_object or json_schema.",
                                            type));
    }
  }
  // vLLM's structured_outputs object, then its older top-level guided_* fields.
  if (auto it = json.find("structured_outputs"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) {
      return http::RequestError("structured_outputs", util::codes::kInvalidType,
                                "'structured_outputs' must be an object.");
    }
    for (const auto& [key, v] : it->items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json") {
        DI_ASSIGN_OR_RETURN(std::string text, SchemaText(v, param));
        DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonSchema, std::move(text)}, param));
      } else if (key == "regex") {
        DI_ASSIGN_OR_RETURN(std::string text, ConstraintString(v, param));
        DI_RETURN_IF_ERROR(set({ConstraintKind::kRegex, std::move(text)}, param));
      } else if (key == "grammar") {
        DI_ASSIGN_OR_RETURN(std::string text, ConstraintString(v, param));
        DI_RETURN_IF_ERROR(set({ConstraintKind::kGrammar, std::move(text)}, param));
      } else if (key == "choice") {
        DI_ASSIGN_OR_RETURN(std::vector<std::string> choices, ConstraintChoices(v, param));
        DI_RETURN_IF_ERROR(set({ConstraintKind::kChoice, "", std::move(choices)}, param));
      } else if (key == "json_object") {
        if (!v.is_boolean()) {
          return http::RequestError(param, util::codes::kInvalidType,
                                    fmt::format("'{}' must be a boolean.", param));
        }
        if (v.get<bool>()) DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonObject, ""}, param));
      } else if (key == "disable_any_whitespace" || key == "whitespace_pattern") {
        // vLLM's whitespace options: JSON here is always compact, so they change nothing.
      } else {
        return http::RequestError(param, util::codes::kUnsupportedValue,
                                  fmt::format("'{}' is not supported; use json, regex, choice, "
                                              "grammar or json_object.",
                                              param));
      }
    }
  }
  if (auto it = json.find("guided_json"); it != json.end() && !it->is_null()) {
    DI_ASSIGN_OR_RETURN(std::string text, SchemaText(*it, "guided_json"));
    DI_RETURN_IF_ERROR(set({ConstraintKind::kJsonSchema, std::move(text)}, "guided_json"));
  }
  if (auto it = json.find("guided_regex"); it != json.end() && !it->is_null()) {
    DI_ASSIGN_OR_RETURN(std::string text, ConstraintString(*it, "guided_regex"));
    DI_RETURN_IF_ERROR(set({ConstraintKind::kRegex, std::move(text)}, "guided_regex"));
  }
  if (auto it = json.find("guided_grammar"); it != json.end() && !it->is_null()) {
    DI_ASSIGN_OR_RETURN(std::string text, ConstraintString(*it, "guided_grammar"));
    DI_RETURN_IF_ERROR(set({ConstraintKind::kGrammar, std::move(text)}, "guided_grammar"));
  }
  if (auto it = json.find("guided_choice"); it != json.end() && !it->is_null()) {
    DI_ASSIGN_OR_RETURN(std::vector<std::string> choices, ConstraintChoices(*it, "guided_choice"));
    DI_RETURN_IF_ERROR(set({ConstraintKind::kChoice, "", std::move(choices)}, "guided_choice"));
  }
  return absl::OkStatus();
}

// max_tokens / max_completion_tokens (the second wins) and min_tokens (at most max_tokens).
absl::Status ParseTokenLimits(const Fields& f, int64_t min_max_tokens, GenerationParams* p) {
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    std::optional<int64_t> max_tokens;
    DI_RETURN_IF_ERROR(f.GetInt(key, &max_tokens));
    if (!max_tokens) continue;
    if (*max_tokens < min_max_tokens) {
      return f.ValueError(key, "must be at least 1 (0 only with echo and logprobs: prompt "
                               "scoring)");
    }
    if (*max_tokens > std::numeric_limits<int32_t>::max()) {
      return f.ValueError(key, "is too large");
    }
    p->max_tokens = static_cast<int32_t>(*max_tokens);  // the second key wins
  }
  std::optional<int64_t> min_tokens;
  DI_RETURN_IF_ERROR(f.GetInt("min_tokens", &min_tokens));
  if (min_tokens) {
    if (*min_tokens < 0 || *min_tokens > std::numeric_limits<int32_t>::max()) {
      return f.ValueError("min_tokens", "must be a non-negative integer");
    }
    if (p->max_tokens && *min_tokens > *p->max_tokens) {
      return f.ValueError("min_tokens", "must be at most max_tokens");
    }
    p->min_tokens = static_cast<int32_t>(*min_tokens);
  }
  return absl::OkStatus();
}

// `min_max_tokens` is 0 for a completion that only scores its prompt (echo with logprobs).
absl::Status ParseCommon(const util::Json& json, const ParseLimits& limits, GenerationParams* p,
                         int64_t min_max_tokens = 1) {
  Fields f(json);
  DI_RETURN_IF_ERROR(ParseConstraint(json, p));
  DI_RETURN_IF_ERROR(f.GetString("model", &p->model));

  std::optional<int64_t> n;
  DI_RETURN_IF_ERROR(f.GetInt("n", &n));
  if (n) {
    if (*n < 1 || *n > kMaxChoices) {
      return f.ValueError("n", fmt::format("must be between 1 and {}", kMaxChoices));
    }
    p->n = static_cast<int32_t>(*n);
  }

  DI_RETURN_IF_ERROR(ParseTokenLimits(f, min_max_tokens, p));

  if (const util::Json* stop = f.Find("stop")) {
    if (stop->is_string()) {
      if (!stop->get_ref<const std::string&>().empty()) p->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > static_cast<size_t>(kMaxStopStrings)) {
        return f.ValueError("stop", fmt::format("may hold at most {} strings", kMaxStopStrings));
      }
      for (const util::Json& s : *stop) {
        if (!s.is_string()) return f.TypeError("stop", "a string or an array of strings");
        if (!s.get_ref<const std::string&>().empty()) p->stop.push_back(s.get<std::string>());
      }
    } else {
      return f.TypeError("stop", "a string or an array of strings");
    }
    for (const std::string& s : p->stop) {
      if (s.size() > static_cast<size_t>(kMaxStopStringBytes)) {
        return f.ValueError("stop",
                            fmt::format("strings must be at most {} bytes", kMaxStopStringBytes));
      }
    }
  }

  if (const util::Json* ids = f.Find("stop_token_ids")) {
    DI_RETURN_IF_ERROR(ParseTokenArray(*ids, limits, "stop_token_ids", &p->stop_token_ids));
  }

  util::SamplingParams& s = p->sampling;
  std::optional<double> d;
  DI_RETURN_IF_ERROR(f.GetNumber("temperature", &d));
  if (d) {
    if (*d < 0 || *d > 2) return f.ValueError("temperature", "must be between 0 and 2");
    s.temperature = static_cast<float>(*d);
  }
  d.reset();
  DI_RETURN_IF_ERROR(f.GetNumber("top_p", &d));
  if (d) {
    // Compared as the float the sampler uses: 5e-324 > 0 as a double but is 0 as a float.
    if (static_cast<float>(*d) <= 0 || *d > 1) return f.ValueError("top_p", "must be in (0, 1]");
    s.top_p = static_cast<float>(*d);
  }
  std::optional<int64_t> top_k;
  DI_RETURN_IF_ERROR(f.GetInt("top_k", &top_k));
  if (top_k) {
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) {
      return f.ValueError("top_k", "must be -1 (off), 0 (off) or a positive integer");
    }
    s.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);
  }
  d.reset();
  DI_RETURN_IF_ERROR(f.GetNumber("min_p", &d));
  if (d) {
    if (*d < 0 || *d > 1) return f.ValueError("min_p", "must be between 0 and 1");
    s.min_p = static_cast<float>(*d);
  }
  d.reset();
  DI_RETURN_IF_ERROR(f.GetNumber("repetition_penalty", &d));
  if (d) {
    if (static_cast<float>(*d) <= 0 || *d > 10) {
      return f.ValueError("repetition_penalty", "must be in (0, 10]");
    }
    s.repetition_penalty = static_cast<float>(*d);
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    d.reset();
    DI_RETURN_IF_ERROR(f.GetNumber(key, &d));
    if (!d) continue;
    if (*d < -2 || *d > 2) return f.ValueError(key, "must be between -2 and 2");
    (key[0] == 'p' ? s.presence_penalty : s.frequency_penalty) = static_cast<float>(*d);
  }
  if (const util::Json* seed = f.Find("seed")) {
    auto value = Fields::AsInt(*seed);
    if (value) {
      s.seed = static_cast<uint64_t>(*value);
    } else if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else {
      return f.TypeError("seed", "an integer");
    }
    s.has_seed = true;
  }
  if (const util::Json* bias = f.Find("logit_bias")) {
    if (!bias->is_object()) return f.TypeError("logit_bias", "an object");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      long long id = key.empty() ? -1 : std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0') {
        return f.ValueError("logit_bias", "keys must be token ids written as strings");
      }
      DI_RETURN_IF_ERROR(CheckTokenId(id, limits, "logit_bias"));
      if (!it.value().is_number()) return f.TypeError("logit_bias", "an object of numbers");
      double b = it.value().get<double>();
      if (!(b >= -100 && b <= 100))
        return f.ValueError("logit_bias", "values must be in [-100, 100]");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }

  DI_RETURN_IF_ERROR(f.GetBool("stream", &p->stream));
  if (const util::Json* options = f.Find("stream_options")) {
    if (!options->is_object()) return f.TypeError("stream_options", "an object");
    Fields stream_options(*options, "stream_options.");
    DI_RETURN_IF_ERROR(stream_options.GetBool("include_usage", &p->include_usage));
    DI_RETURN_IF_ERROR(stream_options.GetBool("continuous_usage_stats", &p->continuous_usage));
  }
  // Usage in every chunk implies the usage at the end too.
  p->include_usage = p->stream && (p->include_usage || p->continuous_usage ||
                                   limits.force_include_usage);
  p->continuous_usage = p->include_usage && p->continuous_usage;
  DI_RETURN_IF_ERROR(f.GetBool("ignore_eos", &p->ignore_eos));
  DI_RETURN_IF_ERROR(f.GetBool("speculative", &p->speculative));
  std::string user;
  DI_RETURN_IF_ERROR(f.GetString("user", &user));  // accepted, unused
  return absl::OkStatus();
}

bool KnownRole(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "tool";
}

absl::Status ParseMessages(const util::Json& json, std::vector<ChatMessage>* out) {
  auto it = json.find("messages");
  if (it == json.end() || it->is_null()) {
    return http::RequestError("messages", util::codes::kMissingField,
                              "'messages' is a required property.");
  }
  if (!it->is_array())
    return http::RequestError("messages", util::codes::kInvalidType,
                              "'messages' must be an array.");
  if (it->empty()) {
    return http::RequestError("messages", util::codes::kInvalidValue,
                              "'messages' must contain at least one message.");
  }
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const util::Json& m = (*it)[i];
    std::string prefix = fmt::format("messages[{}].", i);
    if (!m.is_object()) {
      return http::RequestError(fmt::format("messages[{}]", i), util::codes::kInvalidType,
                                "Each message must be an object.");
    }
    Fields f(m, prefix);
    ChatMessage msg;
    if (!f.Find("role"))
      return http::RequestError(f.Param("role"), util::codes::kMissingField, "'role' is required.");
    DI_RETURN_IF_ERROR(f.GetString("role", &msg.role));
    if (!KnownRole(msg.role)) {
      return f.ValueError("role", fmt::format("'{}' is not one of system, developer, user, "
                                              "assistant, tool",
                                              msg.role));
    }
    const util::Json* content = f.Find("content");
    if (!content) {
      msg.has_content = false;
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      int32_t num_parts = 0;
      for (size_t j = 0; j < content->size(); ++j) {
        const util::Json& part = (*content)[j];
        std::string param = fmt::format("{}content[{}]", prefix, j);
        if (!part.is_object()) {
          return http::RequestError(param, util::codes::kInvalidType,
                                    "Content parts must be objects.");
        }
        auto type = part.find("type");
        if (type == part.end() || !type->is_string()) {
          return http::RequestError(param, util::codes::kMissingField,
                                    "Content parts need a string 'type'.");
        }
        if (IsImagePart(part)) {
          DI_RETURN_IF_ERROR(AppendImagePart(part, param, &num_parts, &msg));
          continue;
        }
        if (*type != "text" && *type != "input_text") {
          return http::RequestError(param, util::codes::kUnsupportedValue,
                                    fmt::format("Content part type '{}' is not supported; only "
                                                "'text' is.",
                                                type->get<std::string>()));
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return http::RequestError(param, util::codes::kInvalidType,
                                    "A text part needs a string 'text'.");
        }
        AppendTextPart(text->get_ref<const std::string&>(), &num_parts, &msg.content);
      }
    } else {
      return f.TypeError("content", "a string or an array of content parts");
    }
    if (!msg.has_content && msg.role != "assistant") {
      return http::RequestError(f.Param("content"), util::codes::kMissingField,
                                fmt::format("'content' is required for role '{}'.", msg.role));
    }
    DI_RETURN_IF_ERROR(f.GetString("name", &msg.name));
    DI_RETURN_IF_ERROR(f.GetString("tool_call_id", &msg.tool_call_id));
    if (const util::Json* calls = f.Find("tool_calls")) {
      if (!calls->is_array()) return f.TypeError("tool_calls", "an array");
      msg.tool_calls_json = util::DumpJson(*calls);
    }
    out->push_back(std::move(msg));
  }
  return absl::OkStatus();
}

// tools, chat_template_kwargs.thinking / enable_thinking and reasoning_effort.
absl::Status ParseChatExtras(const util::Json& json, ChatExtras* out) {
  Fields f(json);
  if (const util::Json* tools = f.Find("tools")) {
    if (!tools->is_array()) return f.TypeError("tools", "an array");
    for (const util::Json& t : *tools) {
      if (!t.is_object()) return f.TypeError("tools", "an array of objects");
      out->tools.push_back(util::DumpJson(t));
    }
  }
  if (const util::Json* kwargs = f.Find("chat_template_kwargs")) {
    if (!kwargs->is_object()) return f.TypeError("chat_template_kwargs", "an object");
    Fields k(*kwargs);
    DI_RETURN_IF_ERROR(k.GetBool("thinking", &out->thinking));
    bool enable = false;
    DI_RETURN_IF_ERROR(k.GetBool("enable_thinking", &enable));
    out->thinking = out->thinking || enable;
  }
  DI_RETURN_IF_ERROR(f.GetString("reasoning_effort", &out->reasoning_effort));
  if (!out->reasoning_effort.empty() && out->reasoning_effort != "none") out->thinking = true;
  DI_RETURN_IF_ERROR(f.GetBool("add_generation_prompt", &out->add_generation_prompt));
  DI_RETURN_IF_ERROR(f.GetBool("continue_final_message", &out->continue_final_message));
  if (out->continue_final_message && out->add_generation_prompt) {
    // vLLM's answer to the same request; clients send add_generation_prompt: false with it.
    return f.ValueError("continue_final_message",
                        "cannot be true together with 'add_generation_prompt' (set "
                        "'add_generation_prompt' to false)");
  }
  return absl::OkStatus();
}

absl::StatusOr<ChatRequest> ParseChat(const util::Json& json, const ParseLimits& limits) {
  ChatRequest req;
  DI_RETURN_IF_ERROR(ParseMessages(json, &req.messages));
  DI_RETURN_IF_ERROR(ParseCommon(json, limits, &req.params));
  Fields f(json);
  DI_RETURN_IF_ERROR(f.GetBool("logprobs", &req.logprobs));
  std::optional<int64_t> top;
  DI_RETURN_IF_ERROR(f.GetInt("top_logprobs", &top));
  if (top) {
    if (*top < 0 || *top > kMaxChatTopLogprobs) {
      return f.ValueError("top_logprobs",
                          fmt::format("must be between 0 and {}", kMaxChatTopLogprobs));
    }
    if (!req.logprobs) {
      return f.ValueError("top_logprobs", "requires 'logprobs' to be true");
    }
  }
  req.params.sampling.num_top_logprobs = req.logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
  DI_RETURN_IF_ERROR(ParseChatExtras(json, &req));
  DI_ASSIGN_OR_RETURN(req.tool_choice, ParseOpenAiToolChoice(json));
  return req;
}

absl::Status ParsePrompt(const util::Json& json, const ParseLimits& limits,
                         std::vector<CompletionPrompt>* out) {
  auto it = json.find("prompt");
  if (it == json.end() || it->is_null()) {
    return http::RequestError("prompt", util::codes::kMissingField,
                              "'prompt' is a required property.");
  }
  const util::Json& p = *it;
  const char* kShape =
      "'prompt' must be a string, an array of strings, an array of token ids or "
      "an array of token-id arrays.";
  if (p.is_string()) {
    out->push_back({false, p.get<std::string>(), {}});
    return absl::OkStatus();
  }
  if (!p.is_array()) return http::RequestError("prompt", util::codes::kInvalidType, kShape);
  if (p.empty())
    return http::RequestError("prompt", util::codes::kInvalidValue, "'prompt' must not be empty.");
  if (p[0].is_number()) {
    CompletionPrompt prompt{true, "", {}};
    DI_RETURN_IF_ERROR(ParseTokenArray(p, limits, "prompt", &prompt.tokens));
    out->push_back(std::move(prompt));
    return absl::OkStatus();
  }
  if (p.size() > static_cast<size_t>(kMaxPrompts)) {
    return http::RequestError("prompt", util::codes::kInvalidValue,
                              fmt::format("At most {} prompts per request.", kMaxPrompts));
  }
  for (const util::Json& item : p) {
    if (item.is_string()) {
      out->push_back({false, item.get<std::string>(), {}});
    } else if (item.is_array()) {
      CompletionPrompt prompt{true, "", {}};
      DI_RETURN_IF_ERROR(ParseTokenArray(item, limits, "prompt", &prompt.tokens));
      out->push_back(std::move(prompt));
    } else {
      return http::RequestError("prompt", util::codes::kInvalidType, kShape);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CompletionRequest> ParseCompletion(const util::Json& json,
                                                  const ParseLimits& limits) {
  CompletionRequest req;
  DI_RETURN_IF_ERROR(ParsePrompt(json, limits, &req.prompts));
  // Prompt scoring (lm-evaluation-harness's loglikelihood): echo with logprobs may generate
  // nothing. The types are checked below.
  auto is_set = [&json](const char* key) {
    auto it = json.find(key);
    return it != json.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
  };
  const bool scoring = is_set("echo") && is_set("logprobs");
  DI_RETURN_IF_ERROR(ParseCommon(json, limits, &req.params, scoring ? 0 : 1));
  Fields f(json);
  std::optional<int64_t> logprobs;
  DI_RETURN_IF_ERROR(f.GetInt("logprobs", &logprobs));
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxCompletionLogprobs)) {
    return f.ValueError("logprobs",
                        fmt::format("must be between 0 and {}", kMaxCompletionLogprobs));
  }
  req.params.sampling.num_top_logprobs = logprobs ? static_cast<int32_t>(*logprobs) : -1;
  DI_RETURN_IF_ERROR(f.GetBool("echo", &req.echo));
  // Fill-in-the-middle needs a model and template that take a suffix; none here does.
  std::string suffix;
  DI_RETURN_IF_ERROR(f.GetString("suffix", &suffix));
  if (!suffix.empty()) {
    return http::RequestError("suffix", util::codes::kUnsupportedValue,
                              "'suffix' (fill-in-the-middle) is not supported by this server.");
  }
  // best_of = n asks for nothing more; more candidates than answers would need ranking by
  // cumulative logprob, which this server does not do.
  std::optional<int64_t> best_of;
  DI_RETURN_IF_ERROR(f.GetInt("best_of", &best_of));
  if (best_of && *best_of < req.params.n) {
    return f.ValueError("best_of", "must be at least n");
  }
  if (best_of && *best_of > req.params.n) {
    return http::RequestError("best_of", util::codes::kUnsupportedValue,
                              "'best_of' greater than 'n' is not supported; ask for n choices.");
  }
  // Echo with logprobs scores the prompt too (vLLM's prompt_logprobs).
  if (req.echo && logprobs) req.params.prompt_logprobs = static_cast<int32_t>(*logprobs);
  if (req.prompts.size() * req.params.n > static_cast<size_t>(kMaxSequencesPerRequest)) {
    return f.ValueError("n", fmt::format("times the number of prompts must be at most {}",
                                         kMaxSequencesPerRequest));
  }
  return req;
}

}  // namespace

absl::StatusOr<ToolChoice> ParseOpenAiToolChoice(const util::Json& body) {
  Fields f(body);
  ToolChoice choice;
  DI_RETURN_IF_ERROR(f.GetBool("parallel_tool_calls", &choice.parallel));
  const util::Json* v = f.Find("tool_choice");
  if (v == nullptr) return choice;
  if (v->is_string()) {
    const std::string& mode = v->get_ref<const std::string&>();
    if (mode == "none") {
      choice.mode = ToolChoice::Mode::kNone;
    } else if (mode == "required") {
      choice.mode = ToolChoice::Mode::kRequired;
    } else if (mode != "auto") {
      return f.ValueError("tool_choice", "must be none, auto, required or a named function");
    }
    return choice;
  }
  if (!v->is_object()) return f.TypeError("tool_choice", "a string or an object");
  Fields named(*v, "tool_choice.");
  std::string type;
  DI_RETURN_IF_ERROR(named.GetString("type", &type));
  if (type != "function") {
    return http::RequestError("tool_choice.type", util::codes::kUnsupportedValue,
                              "Only {\"type\": \"function\"} tool choices are supported.");
  }
  // Chat completions nest the name ({"function": {"name": ...}}); Responses do not.
  if (const util::Json* function = named.Find("function")) {
    if (!function->is_object()) return named.TypeError("function", "an object");
    DI_RETURN_IF_ERROR(Fields(*function, "tool_choice.function.").GetString("name", &choice.name));
  } else {
    DI_RETURN_IF_ERROR(named.GetString("name", &choice.name));
  }
  if (choice.name.empty()) {
    return http::RequestError("tool_choice.function.name", util::codes::kMissingField,
                              "A named tool choice needs the function's 'name'.");
  }
  choice.mode = ToolChoice::Mode::kNamed;
  return choice;
}

bool IsImagePart(const util::Json& part) {
  if (!part.is_object()) return false;
  auto type = part.find("type");
  return type != part.end() && type->is_string() &&
         (*type == "image_url" || *type == "input_image" || *type == "image");
}

absl::Status SetOutputConstraint(constraint::ConstraintSpec spec, std::string param,
                                 GenerationParams* params) {
  if (params->constraint.has_value()) {
    return http::RequestError(param, util::codes::kInvalidValue,
                              fmt::format("'{}' and '{}' both constrain the output; send one.",
                                          params->constraint_param, param));
  }
  params->constraint = std::move(spec);
  params->constraint_param = std::move(param);
  return absl::OkStatus();
}

void AppendTextPart(std::string_view text, int32_t* num_parts, std::string* joined) {
  if ((*num_parts)++ > 0) joined->push_back('\n');
  joined->append(text);
}

absl::Status ImageUnsupportedError(std::string_view param) {
  return http::RequestError(param, util::codes::kUnsupportedContent,
                            "The served model reads text only (it has no vision tower). Send the "
                            "message without image content.");
}

absl::Status AppendImagePart(const util::Json& part, std::string_view param, int32_t* num_parts,
                             ChatMessage* message) {
  if (message->role != "user" && message->role != "tool") {
    return http::RequestError(param, util::codes::kInvalidValue,
                              fmt::format("Images are allowed in user (and tool) messages only, "
                                          "not in a '{}' message.",
                                          message->role));
  }
  DI_ASSIGN_OR_RETURN(ImageRef ref, ParseImagePart(part, param));
  AppendTextPart(kImagePlaceholder, num_parts, &message->content);
  message->images.push_back(std::move(ref));
  return absl::OkStatus();
}

int32_t CountImages(const std::vector<ChatMessage>& messages) {
  size_t n = 0;
  for (const ChatMessage& m : messages) n += m.images.size();
  return static_cast<int32_t>(n);
}

absl::Status ParseGenerationParams(const util::Json& json, const ParseLimits& limits,
                                   GenerationParams* params) {
  return ParseCommon(json, limits, params);
}

absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, ParseObject(body));
  return ParseChat(json, limits);
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                         const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, ParseObject(body));
  return ParseCompletion(json, limits);
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body,
                                                     const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, ParseObject(body));
  TokenizeRequest req;
  Fields f(json);
  DI_RETURN_IF_ERROR(f.GetString("model", &req.model));
  if (f.Find("messages")) {
    req.has_messages = true;
    DI_RETURN_IF_ERROR(ParseMessages(json, &req.messages));
    DI_RETURN_IF_ERROR(ParseChatExtras(json, &req.extras));
  } else if (f.Find("prompt")) {
    DI_RETURN_IF_ERROR(f.GetString("prompt", &req.prompt));
  } else {
    return http::RequestError("prompt", util::codes::kMissingField,
                              "Either 'prompt' or 'messages' is required.");
  }
  if (f.Find("add_special_tokens")) {
    bool value = false;
    DI_RETURN_IF_ERROR(f.GetBool("add_special_tokens", &value));
    req.add_special_tokens = value;
  }
  DI_RETURN_IF_ERROR(f.GetBool("return_token_strs", &req.return_token_strs));
  return req;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                         const ParseLimits& limits) {
  DI_ASSIGN_OR_RETURN(util::Json json, ParseObject(body));
  DetokenizeRequest req;
  Fields f(json);
  DI_RETURN_IF_ERROR(f.GetString("model", &req.model));
  const util::Json* tokens = f.Find("tokens");
  if (!tokens)
    return http::RequestError("tokens", util::codes::kMissingField,
                              "'tokens' is a required property.");
  DI_RETURN_IF_ERROR(ParseTokenArray(*tokens, limits, "tokens", &req.tokens));
  return req;
}

absl::StatusOr<ChatRequest> ParseChatRequestForCount(std::string_view body,
                                                     const ParseLimits& limits,
                                                     int32_t* num_images) {
  *num_images = 0;
  DI_ASSIGN_OR_RETURN(ChatRequest req, ParseChatRequest(body, limits));
  *num_images = CountImages(req.messages);
  return req;
}

}  // namespace deepinfer::api
