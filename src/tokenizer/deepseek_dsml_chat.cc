// DeepSeek V3.2, V4 and V4.1: the encodings that write tool calls in DSML (declared in
// deepseek_chat.h).

#include "tokenizer/deepseek_chat.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "fmt/format.h"
#include "tokenizer/python_json.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kSystem = "<｜System｜>";
constexpr std::string_view kReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThink = "<think>";
constexpr std::string_view kEndThink = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";

absl::Status BadRequest(std::string_view message) {
  return InvalidArgumentError(util::codes::kBadChatRequest, message);
}

// V3.2's TOOLS_SYSTEM_TEMPLATE; {0} is the DSML token, {1} the tool schemas.
constexpr std::string_view kV32Tools =
    "## Tools\n"
    "You have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<{0}function_calls>\" block like the following as "
    "part of your reply to the user:\n"
    "<{0}function_calls>\n"
    "<{0}invoke name=\"$FUNCTION_NAME\">\n"
    "<{0}parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{0}parameter>\n"
    "...\n"
    "</{0}invoke>\n"
    "<{0}invoke name=\"$FUNCTION_NAME2\">\n"
    "...\n"
    "</{0}invoke>\n"
    "</{0}function_calls>\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, "
    "while lists and objects should use JSON format. The \"string\" attribute should be set to "
    "\"true\" for string type parameters and \"false\" for other types (numbers, booleans, "
    "arrays, objects).\n"
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    "outputting a thinking block. Here is an example:\n"
    "<{0}function_calls>\n"
    "...\n"
    "</{0}function_calls>\n"
    "<function_results>\n"
    "...\n"
    "</function_results>\n"
    "<think>...thinking about results</think>\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n"
    "{1}\n"
    "</functions>\n";

// V4's and V4.1's tools block; {0} {1} {2} are the DSML tag names of the calls block, an invoke
// and a parameter (each with the DSML token), {3} the tool schemas.
constexpr std::string_view kV4Tools =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<{0}>\" block like the following:\n\n"
    "<{0}>\n"
    "<{1} name=\"$TOOL_NAME\">\n"
    "<{2} name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{2}>\n"
    "...\n"
    "</{1}>\n"
    "<{1} name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</{1}>\n"
    "</{0}>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
    "{3}\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";

constexpr std::string_view kV4EffortHigh =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is "
    "left unchecked.\n\n";
constexpr std::string_view kV4EffortMax =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

// DSML tag names (after the DSML token) of one encoding.
struct DsmlTags {
  std::string_view calls;
  std::string_view invoke;
  std::string_view parameter;
};
constexpr DsmlTags kV32Tags = {"function_calls", "invoke", "parameter"};
constexpr DsmlTags kV4Tags = {"tool_calls", "invoke", "parameter"};
constexpr DsmlTags kV41Tags = {" calls", " invoke", " parameter"};

std::string Tag(std::string_view name) { return fmt::format("{}{}", kDsml, name); }

// A tools[i] object's "function" member.
absl::StatusOr<Json> ToolFunction(const std::string& tool_json) {
  auto tool = ParseOrderedJson(tool_json);
  if (!tool.ok() || !tool->is_object() || !tool->contains("function") ||
      !(*tool)["function"].is_object()) {
    return BadRequest("a tool definition is not a JSON object with a \"function\" object");
  }
  return (*tool)["function"];
}

// One "<tag name="k" string="...">v</tag>" line per member of the arguments object. V3.2
// requires an object; V4 and V4.1 pass anything else as one string parameter "arguments".
absl::StatusOr<std::vector<std::string>> DsmlParameters(const ToolCall& call, const DsmlTags& tags,
                                                        bool lenient, JsonFloatStyle style) {
  std::vector<std::string> out;
  auto args = ParseOrderedJson(call.arguments);
  const std::string tag = Tag(tags.parameter);
  if (!args.ok() || !args->is_object()) {
    if (!lenient) return BadRequest("tool call arguments must be a JSON object");
    out.push_back(
        fmt::format("<{0} name=\"arguments\" string=\"true\">{1}</{0}>", tag, call.arguments));
    return out;
  }
  for (auto it = args->begin(); it != args->end(); ++it) {
    const bool is_string = it.value().is_string();
    const std::string value =
        is_string ? it.value().get<std::string>() : DumpPythonJson(it.value(), style);
    out.push_back(fmt::format("<{0} name=\"{1}\" string=\"{2}\">{3}</{0}>", tag, it.key(),
                              is_string ? "true" : "false", value));
  }
  return out;
}

// "\n\n<calls>\n" + invokes joined by "\n" + "\n</calls>". V4 leaves out the blank line an
// invoke without parameters would otherwise get.
absl::StatusOr<std::string> DsmlCalls(const std::vector<ToolCall>& calls, const DsmlTags& tags,
                                      bool lenient, bool skip_blank_line, JsonFloatStyle style) {
  std::string out = fmt::format("\n\n<{}>\n", Tag(tags.calls));
  for (size_t i = 0; i < calls.size(); ++i) {
    DI_ASSIGN_OR_RETURN(const auto params, DsmlParameters(calls[i], tags, lenient, style));
    if (i > 0) out += "\n";
    out += fmt::format("<{} name=\"{}\">\n", Tag(tags.invoke), calls[i].name);
    for (size_t p = 0; p < params.size(); ++p) {
      if (p > 0) out += "\n";
      out += params[p];
    }
    if (!(skip_blank_line && params.empty())) out += "\n";
    out += fmt::format("</{}>", Tag(tags.invoke));
  }
  out += fmt::format("\n</{}>", Tag(tags.calls));
  return out;
}

// ---------------------------------------------------------------------------------------------
// V3.2

struct V32Message {
  const ChatMessage* source;
  std::string role;
  bool drop_reasoning = false;
};

int LastUserIndex(const std::vector<V32Message>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    if (messages[i].role == "user" || messages[i].role == "developer") return i;
  }
  return -1;
}

absl::StatusOr<std::string> V32Tools(const std::vector<std::string>& tools) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    DI_ASSIGN_OR_RETURN(const Json function, ToolFunction(tools[i]));
    if (i > 0) schemas += "\n";
    schemas += DumpPythonJson(function);
  }
  return fmt::format(fmt::runtime(kV32Tools), kDsml, schemas);
}

}  // namespace

std::string DeepseekV32Template::Render(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  auto out = Render(messages, options);
  return out.ok() ? *std::move(out) : std::string();
}

absl::StatusOr<std::string> DeepseekV32Template::Render(const std::vector<ChatMessage>& messages,
                                                        const ChatOptions& options) const {
  static const ChatMessage kEmptySystem{"system", ""};
  std::vector<V32Message> all;
  if (messages.empty() || messages[0].role != "system") all.push_back({&kEmptySystem, "system"});
  for (const ChatMessage& m : messages) all.push_back({&m, m.role});
  const bool thinking = options.thinking;
  std::vector<V32Message> msgs;
  if (thinking) {
    // drop_thinking_messages: reasoning before the last user turn goes; so do other roles
    // there (a developer message), except user, system and tool.
    const int last_user = LastUserIndex(all);
    for (int i = 0; i < static_cast<int>(all.size()); ++i) {
      V32Message m = all[i];
      if (m.role == "user" || m.role == "system" || m.role == "tool" || i >= last_user) {
        msgs.push_back(m);
      } else if (m.role == "assistant") {
        m.drop_reasoning = true;
        msgs.push_back(m);
      }
    }
    // encode_messages still renders as many messages as it was given and fails on the
    // missing ones (SGLang returns that error to the client).
    if (msgs.size() != all.size()) {
      return BadRequest(
          "DeepSeek-V3.2 thinking mode cannot drop a developer or other message before the "
          "last user turn");
    }
  } else {
    msgs = std::move(all);
  }
  const int last_user = LastUserIndex(msgs);
  std::string out(kBos);
  for (int i = 0; i < static_cast<int>(msgs.size()); ++i) {
    const ChatMessage& m = *msgs[i].source;
    const std::string& role = msgs[i].role;
    const bool open_thinking = i == last_user && thinking;
    if (role == "system") {
      out += m.content;
      if (i == 0 && !options.tools.empty()) {
        DI_ASSIGN_OR_RETURN(const std::string tools, V32Tools(options.tools));
        out += "\n\n" + tools;
      }
    } else if (role == "developer") {
      if (m.content.empty()) return BadRequest("a developer message has no content");
      out += kUser;
      out += "\n\n# The user's message is: " + m.content;
      out += kAssistant;
      out += open_thinking ? kThink : kEndThink;
    } else if (role == "user") {
      out += kUser;
      out += m.content;
      out += kAssistant;
      out += open_thinking ? kThink : kEndThink;
    } else if (role == "tool") {
      int prev = i - 1;
      while (prev >= 0 && msgs[prev].role == "tool") --prev;
      if (prev < 0 || msgs[prev].role != "assistant") {
        return BadRequest("a tool message does not follow an assistant message");
      }
      const size_t order = static_cast<size_t>(i - prev);
      const size_t num_calls = msgs[prev].source->tool_calls.size();
      if (num_calls < order) return BadRequest("a tool message has no matching tool call");
      if (order == 1) out += "\n\n<function_results>";
      out += "\n<result>" + m.content + "</result>";
      if (order == num_calls) {
        out += "\n</function_results>\n\n";
        out += i >= last_user && thinking ? kThink : kEndThink;
      }
    } else if (role == "assistant") {
      std::string calls;
      if (!m.tool_calls.empty()) {
        DI_ASSIGN_OR_RETURN(calls, DsmlCalls(m.tool_calls, kV32Tags, /*lenient=*/false,
                                             /*skip_blank_line=*/false, JsonFloatStyle::kPython));
      }
      if (thinking && i > last_user) {
        const std::string reasoning = msgs[i].drop_reasoning ? "" : m.reasoning_content;
        if (reasoning.empty() && m.tool_calls.empty()) {
          return BadRequest(
              "in thinking mode an assistant turn after the last user turn needs reasoning or "
              "tool calls");
        }
        out += reasoning;
        out += kEndThink;
      }
      out += m.content;
      out += calls;
      out += kEos;
    } else {
      return BadRequest("DeepSeek-V3.2 has no role \"" + role + "\"");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// V4 / V4.1

namespace {

struct Block {
  bool is_tool_result;
  std::string text;
  std::string tool_call_id;
};

struct Item {
  enum class Kind { kSystem, kUser, kReminder, kAssistant } kind;
  std::string text = {};           // system, reminder
  std::vector<Block> blocks = {};  // user
  const ChatMessage* assistant = nullptr;
  std::vector<ToolCall> calls = {};  // assistant, in rendering order
};

absl::StatusOr<std::string> V4Effort(std::string_view effort, bool v41) {
  std::string e(effort);
  if (e == "minimal") e = "low";
  if (e == "medium" || e.empty()) e = "high";
  if (e == "ultra") e = "max";
  if (!v41) {
    if (e == "low") return std::string();
    if (e == "high" || e == "xhigh") return std::string(kV4EffortHigh);
    if (e == "max") return std::string(kV4EffortMax);
  } else {
    int level = 0;
    if (e == "low") level = 50;
    if (e == "high" || e == "xhigh") level = 75;
    if (e == "max") level = 100;
    if (level == 0 && !e.empty() && e.size() <= 3 &&
        std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      level = std::stoi(e);
      if (level < 1 || level > 100) level = 0;
    }
    if (level > 0) {
      return fmt::format(
          "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the "
          "reasoning)\n\n",
          level);
    }
  }
  return BadRequest("unknown reasoning effort \"" + std::string(effort) + "\"");
}

// {"name", "description", "parameters"} per tool, one per line.
absl::StatusOr<std::string> V4Tools(const std::vector<std::string>& tools, const DsmlTags& tags,
                                    JsonFloatStyle style) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    DI_ASSIGN_OR_RETURN(const Json function, ToolFunction(tools[i]));
    if (!function.contains("name") || !function["name"].is_string()) {
      return BadRequest("a tool definition has no function.name");
    }
    Json schema = Json::object();
    schema["name"] = function["name"];
    schema["description"] = function.contains("description") && function["description"].is_string()
                                ? function["description"]
                                : Json("");
    schema["parameters"] = function.contains("parameters") && !function["parameters"].is_null()
                               ? function["parameters"]
                               : Json::object();
    if (i > 0) schemas += "\n";
    schemas += DumpPythonJson(schema, style);
  }
  return fmt::format(fmt::runtime(kV4Tools), Tag(tags.calls), Tag(tags.invoke), Tag(tags.parameter),
                     schemas);
}

// Messages as the V4 / V4.1 reference sees them after request conversion and its own merging.
absl::StatusOr<std::vector<Item>> V4Items(const std::vector<ChatMessage>& messages, bool v41,
                                          std::vector<std::string>* v4_systems) {
  std::vector<Item> items;
  std::vector<std::string> last_call_ids;  // the latest tool calls, in call order
  for (const ChatMessage& m : messages) {
    if (m.role == "system" || m.role == "developer") {
      if (m.content.empty()) continue;
      if (!v41) {
        v4_systems->push_back(m.content);
        continue;
      }
      items.push_back({Item::Kind::kSystem, m.content});
    } else if (m.role == "user" || m.role == "tool") {
      const bool tool = m.role == "tool";
      Block block{tool, tool ? "<tool_result>" + m.content + "</tool_result>" : m.content,
                  m.tool_call_id};
      Item* last = items.empty() ? nullptr : &items.back();
      // V4.1 joins any run of user and tool messages; V4 adds a tool result only to a run that
      // ends with tool results.
      const bool join = last != nullptr && last->kind == Item::Kind::kUser &&
                        (v41 || !tool || last->blocks.back().is_tool_result);
      if (join) {
        last->blocks.push_back(std::move(block));
      } else {
        items.push_back({Item::Kind::kUser});
        items.back().blocks.push_back(std::move(block));
      }
    } else if (m.role == "latest_reminder") {
      items.push_back({Item::Kind::kReminder, m.content});
    } else if (m.role == "assistant") {
      Item item{Item::Kind::kAssistant};
      item.assistant = &m;
      item.calls = m.tool_calls;
      if (!v41) {
        std::stable_sort(item.calls.begin(), item.calls.end(),
                         [](const ToolCall& a, const ToolCall& b) { return a.id < b.id; });
      }
      if (!item.calls.empty()) {
        last_call_ids.clear();
        for (const ToolCall& c : item.calls) last_call_ids.push_back(c.id);
      }
      items.push_back(std::move(item));
    } else {
      return BadRequest("DeepSeek-V4 has no role \"" + m.role + "\"");
    }
    // Tool results go in the order of their calls (V4: by id, as its calls).
    Item& last = items.back();
    if (last.kind != Item::Kind::kUser) continue;
    std::vector<Block> results;
    for (const Block& b : last.blocks) {
      if (b.is_tool_result) results.push_back(b);
    }
    auto rank = [&](const Block& b) -> size_t {
      auto it = std::find(last_call_ids.begin(), last_call_ids.end(), b.tool_call_id);
      return it == last_call_ids.end() ? 0 : static_cast<size_t>(it - last_call_ids.begin());
    };
    std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) {
      return v41 ? rank(a) < rank(b) : a.tool_call_id < b.tool_call_id;
    });
    size_t next = 0;
    for (Block& b : last.blocks) {
      if (b.is_tool_result) b = results[next++];
    }
  }
  return items;
}

}  // namespace

std::string DeepseekV4Template::Render(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  auto out = Render(messages, options);
  return out.ok() ? *std::move(out) : std::string();
}

absl::StatusOr<std::string> DeepseekV4Template::Render(const std::vector<ChatMessage>& messages,
                                                       const ChatOptions& options) const {
  const DsmlTags& tags = v41_ ? kV41Tags : kV4Tags;
  const JsonFloatStyle style = v41_ ? JsonFloatStyle::kPython : JsonFloatStyle::kDeepseekV4;
  const bool thinking = options.thinking;
  const bool has_tools = !options.tools.empty();
  std::vector<std::string> v4_systems;
  DI_ASSIGN_OR_RETURN(std::vector<Item> items, V4Items(messages, v41_, &v4_systems));
  std::string effort;
  if (thinking) {
    DI_ASSIGN_OR_RETURN(effort, V4Effort(options.reasoning_effort, v41_));
  }
  std::string tools;
  if (has_tools) {
    DI_ASSIGN_OR_RETURN(tools, V4Tools(options.tools, tags, style));
  }

  std::string out(kBos);
  size_t first = 0;
  if (!v41_) {
    out += effort;
    for (size_t i = 0; i < v4_systems.size(); ++i) {
      if (i > 0) out += "\n\n";
      out += v4_systems[i];
    }
    if (has_tools) out += "\n\n" + tools;
  } else {
    // The first "<｜System｜>" carries the effort prompt, a leading system message and tools.
    const bool leading_system = !items.empty() && items[0].kind == Item::Kind::kSystem;
    if (messages.empty()) effort.clear();
    if (leading_system || !effort.empty() || has_tools) {
      out += kSystem;
      out += effort;
      if (leading_system) out += items[first++].text;
      if (has_tools) out += "\n\n" + tools;
    }
  }
  for (size_t i = first; i < items.size(); ++i) {
    const Item& item = items[i];
    switch (item.kind) {
      case Item::Kind::kSystem:
        out += kSystem;
        out += item.text;
        break;
      case Item::Kind::kReminder:
        out += kReminder;
        out += item.text;
        break;
      case Item::Kind::kUser:
        out += kUser;
        for (size_t b = 0; b < item.blocks.size(); ++b) {
          if (b > 0) out += "\n\n";
          out += item.blocks[b].text;
        }
        break;
      case Item::Kind::kAssistant: {
        const ChatMessage& m = *item.assistant;
        out += kAssistant;
        // Past reasoning is shown only with tools in thinking mode (missing reads as "").
        if (thinking && has_tools) {
          out += kThink;
          out += m.reasoning_content;
        }
        out += kEndThink;
        out += m.content;
        if (!item.calls.empty()) {
          DI_ASSIGN_OR_RETURN(const std::string calls, DsmlCalls(item.calls, tags, /*lenient=*/true,
                                                                 /*skip_blank_line=*/!v41_, style));
          out += calls;
        }
        out += kEos;
        break;
      }
    }
  }
  out += kAssistant;
  out += thinking ? kThink : kEndThink;
  return out;
}

}  // namespace deepinfer::tokenizer
