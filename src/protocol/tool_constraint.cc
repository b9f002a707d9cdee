#include "protocol/tool_constraint.h"

#include <utility>

#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

using util::Json;

// One gap of whitespace at most between argument tokens: the encoders write one ("\n" between
// DSML parameters, ", " and ": " in json.dumps); free whitespace lets a small model pad forever.
constexpr int kMaxWhitespace = 1;

Json Literal(std::string_view text) {
  return {{"type", "const_string"}, {"value", std::string(text)}};
}
Json Sequence(Json elements) { return {{"type", "sequence"}, {"elements", std::move(elements)}}; }
Json Or(Json elements) {
  return elements.size() == 1 ? elements[0] : Json{{"type", "or"}, {"elements", elements}};
}

struct Tool {
  std::string name;
  Json parameters;
};

// Whether `name` can stand in the markers and be read back (tool names and DSML parameter
// names): not empty, no control characters, nothing that ends an attribute or a tag ('"', '<',
// '>', '`'), and no U+FF5C, the bar of DeepSeek's marker tokens.
bool Carried(std::string_view name) {
  if (name.empty() || name.find("\xEF\xBD\x9C") != std::string_view::npos) return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '"' || c == '<' || c == '>' || c == '`') return false;
  }
  return true;
}

// The tools[i] objects as the encoders read them ({"type": "function", "function": {...}}),
// checked for what the format's markers can carry.
absl::StatusOr<std::vector<Tool>> ReadTools(ToolCallFormat format,
                                            const std::vector<std::string>& tools) {
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    Json tool = Json::parse(tools[i], nullptr, /*allow_exceptions=*/false);
    const Json* function = tool.is_object() && tool.contains("function") ? &tool["function"]
                                                                         : nullptr;
    if (function == nullptr || !function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string()) {
      return http::RequestError(fmt::format("tools[{}]", i), util::codes::kInvalidValue,
                                "A tool must be {\"type\": \"function\", \"function\": {\"name\": "
                                "..., \"parameters\": ...}}.");
    }
    Tool t{(*function)["name"].get<std::string>(), Json::object()};
    if (function->contains("parameters") && !(*function)["parameters"].is_null()) {
      t.parameters = (*function)["parameters"];
    }
    auto refuse = [&](std::string_view field, std::string_view why) {
      return http::RequestError(fmt::format("tools[{}].function.{}", i, field),
                                util::codes::kInvalidValue,
                                fmt::format("tool '{}': {}", t.name.substr(0, 64), why));
    };
    if (!Carried(t.name)) {
      return refuse("name", "a tool call cannot carry this name (empty, or with control "
                            "characters, '\"', '<', '>', '`' or U+FF5C)");
    }
    for (const Tool& earlier : out) {
      if (earlier.name == t.name) return refuse("name", "two tools have this name");
    }
    if (ToolCallSyntaxOf(format).dsml) {
      // DSML writes the arguments as one tag per property of an object.
      const Json& p = t.parameters;
      if (!p.is_object() || (p.contains("type") && p["type"] != "object")) {
        return refuse("parameters", "DSML tool calls pass named arguments, so the parameters "
                                    "must be an object schema");
      }
      if (auto props = p.find("properties"); props != p.end() && props->is_object()) {
        for (const auto& [key, schema] : props->items()) {
          if (!Carried(key)) {
            return refuse("parameters", fmt::format("a DSML parameter cannot be named '{}'", key));
          }
        }
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// One call of `tool` in `format`, exactly as the encoder renders it.
Json Call(ToolCallFormat format, const Tool& tool) {
  const ToolCallSyntax& syntax = ToolCallSyntaxOf(format);
  Json args = {{"type", "json_schema"},
               {"json_schema", tool.parameters},
               {"max_whitespace_cnt", kMaxWhitespace}};
  switch (format) {
    case ToolCallFormat::kDeepseekV3:
      return Sequence(
          {Literal(fmt::format("{}function{}{}\n```json\n", syntax.call_begin, kToolSep,
                               tool.name)),
           args, Literal(fmt::format("\n```{}", syntax.call_end))});
    case ToolCallFormat::kDeepseekV31:
      return Sequence({Literal(fmt::format("{}{}{}", syntax.call_begin, tool.name, kToolSep)),
                       args, Literal(syntax.call_end)});
    default:
      // DSML: <invoke name="N">, one parameter tag per argument (the style writes the
      // whitespace around them), </invoke>.
      args["style"] = format == ToolCallFormat::kDsmlV41 ? "deepseek_v4_1_xml" : "deepseek_xml";
      return Sequence({Literal(fmt::format("{} name=\"{}\">", syntax.call_begin, tool.name)), args,
                       Literal(syntax.call_end)});
  }
}

}  // namespace

absl::StatusOr<std::optional<constraint::ConstraintSpec>> ToolChoiceConstraint(
    ToolCallFormat format, const std::vector<std::string>& tools, const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::kAuto || choice.mode == ToolChoice::Mode::kNone) {
    return std::nullopt;
  }
  if (tools.empty()) {
    return http::RequestError("tool_choice", util::codes::kInvalidValue,
                              "A required or named tool_choice needs 'tools'.");
  }
  DI_ASSIGN_OR_RETURN(std::vector<Tool> offered, ReadTools(format, tools));
  Json calls = Json::array();
  for (const Tool& t : offered) {
    if (choice.mode == ToolChoice::Mode::kRequired || t.name == choice.name) {
      calls.push_back(Call(format, t));
      if (choice.mode == ToolChoice::Mode::kNamed) break;
    }
  }
  if (calls.empty()) {
    return http::RequestError("tool_choice", util::codes::kInvalidValue,
                              fmt::format("The tool '{}' is not one of the request's tools.",
                                          choice.name));
  }
  if (format == ToolCallFormat::kNone) {
    return http::RequestError("tool_choice", util::codes::kUnsupportedValue,
                              "This model's chat template has no tool-call syntax, so a required "
                              "or named tool_choice cannot be enforced; use 'auto'.");
  }
  const Json one_call = Or(calls);
  const bool many = choice.mode == ToolChoice::Mode::kRequired && choice.parallel;
  const ToolCallSyntax& syntax = ToolCallSyntaxOf(format);
  Json block;
  if (syntax.dsml) {
    // "\n\n<calls>\n" + invokes joined by "\n" + "\n</calls>" (DsmlCalls).
    Json body = one_call;
    if (many) {
      body = Sequence({one_call, {{"type", "star"},
                                  {"content", Sequence({Literal("\n"), one_call})}}});
    }
    block = Sequence({Literal(fmt::format("\n\n{}\n", syntax.calls_begin)), body,
                      Literal(fmt::format("\n{}", syntax.calls_end))});
  } else {
    Json body = many ? Json{{"type", "plus"}, {"content", one_call}} : one_call;
    block = Sequence({Literal(syntax.calls_begin), body, Literal(syntax.calls_end)});
  }
  constraint::ConstraintSpec spec;
  spec.kind = constraint::ConstraintKind::kStructuralTag;
  spec.text = util::DumpJson(Json{{"type", "structural_tag"}, {"format", block}});
  return spec;
}

}  // namespace deepinfer::api
