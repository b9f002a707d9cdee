#include "protocol/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "protocol/partial_tag.h"
#include "tokenizer/python_json.h"

namespace deepinfer::api {

constexpr ToolCallSyntax kV3Syntax = {"<｜tool▁calls▁begin｜>",
                                      "<｜tool▁calls▁end｜>",
                                      "<｜tool▁call▁begin｜>",
                                      "<｜tool▁call▁end｜>",
                                      "",
                                      "",
                                      false};
constexpr ToolCallSyntax kV32Syntax = {"<｜DSML｜function_calls>",
                                       "</｜DSML｜function_calls>",
                                       "<｜DSML｜invoke",
                                       "</｜DSML｜invoke>",
                                       "<｜DSML｜parameter",
                                       "</｜DSML｜parameter>",
                                       true};
constexpr ToolCallSyntax kV4Syntax = {"<｜DSML｜tool_calls>",
                                      "</｜DSML｜tool_calls>",
                                      "<｜DSML｜invoke",
                                      "</｜DSML｜invoke>",
                                      "<｜DSML｜parameter",
                                      "</｜DSML｜parameter>",
                                      true};
constexpr ToolCallSyntax kV41Syntax = {"<｜DSML｜ calls>",
                                       "</｜DSML｜ calls>",
                                       "<｜DSML｜ invoke",
                                       "</｜DSML｜ invoke>",
                                       "<｜DSML｜ parameter",
                                       "</｜DSML｜ parameter>",
                                       true};

const ToolCallSyntax& ToolCallSyntaxOf(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kDsmlV32:
      return kV32Syntax;
    case ToolCallFormat::kDsmlV4:
      return kV4Syntax;
    case ToolCallFormat::kDsmlV41:
      return kV41Syntax;
    default:
      return kV3Syntax;
  }
}
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Number of whitespace bytes at the end of `s`.
size_t TrailingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && IsSpace(s[s.size() - 1 - n])) ++n;
  return n;
}


// A cursor over a DSML tag body.
struct Reader {
  std::string_view s;
  size_t pos = 0;

  size_t SkipSpace() {
    const size_t start = pos;
    while (pos < s.size() && IsSpace(s[pos])) ++pos;
    return pos - start;
  }
  bool Eat(std::string_view text) {
    if (s.substr(pos, text.size()) != text) return false;
    pos += text.size();
    return true;
  }
  bool AtEnd() const { return pos >= s.size(); }
  // Reads `attr="value"` (after whitespace) into `value`.
  bool Attribute(std::string_view attr, std::string_view* value) {
    const size_t save = pos;
    if (SkipSpace() == 0 || !Eat(attr) || !Eat("=\"")) {
      pos = save;
      return false;
    }
    const size_t close = s.find('"', pos);
    if (close == std::string_view::npos) return false;
    *value = s.substr(pos, close - pos);
    pos = close + 1;
    return true;
  }
};

// V3: "function<｜tool▁sep｜>{name}\n```json\n{args}\n```"; V3.1: "{name}<｜tool▁sep｜>{args}".
bool ParseSepCall(std::string_view body, bool v3, ParsedToolCall* call) {
  const size_t sep = body.find(kToolSep);
  if (sep == std::string_view::npos) return false;
  std::string_view name;
  std::string_view args;
  if (v3) {
    std::string_view rest = body.substr(sep + kToolSep.size());
    const size_t fence = rest.find("```json");
    if (fence == std::string_view::npos) return false;
    name = Trim(rest.substr(0, fence));
    args = Trim(rest.substr(fence + 7));
    if (args.size() < 3 || args.substr(args.size() - 3) != "```") return false;
    args = Trim(args.substr(0, args.size() - 3));
  } else {
    name = Trim(body.substr(0, sep));
    args = Trim(body.substr(sep + kToolSep.size()));
  }
  if (name.empty() || name.find('\n') != std::string_view::npos ||
      name.find("<｜") != std::string_view::npos) {
    return false;
  }
  call->name = std::string(name);
  call->arguments = args.empty() ? "{}" : std::string(args);
  return true;
}

// `<invoke name="{name}">` + parameters, without the "</invoke>" end marker.
bool ParseDsmlCall(std::string_view body, const ToolCallSyntax& syntax, ParsedToolCall* call) {
  Reader r{body};
  std::string_view name;
  if (!r.Eat(syntax.call_begin) || !r.Attribute("name", &name) || name.empty()) return false;
  r.SkipSpace();
  if (!r.Eat(">")) return false;
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  while (true) {
    r.SkipSpace();
    if (r.AtEnd()) break;
    std::string_view key;
    std::string_view is_string;
    if (!r.Eat(syntax.param_begin) || !r.Attribute("name", &key)) return false;
    const bool has_string = r.Attribute("string", &is_string);
    if (has_string && is_string != "true" && is_string != "false") return false;
    r.SkipSpace();
    if (!r.Eat(">")) return false;
    const size_t close = body.find(syntax.param_end, r.pos);
    if (close == std::string_view::npos) return false;
    const std::string_view value = body.substr(r.pos, close - r.pos);
    r.pos = close + syntax.param_end.size();
    const std::string k(key);
    if (is_string == "true") {
      args[k] = std::string(value);
      continue;
    }
    auto parsed = tokenizer::ParseOrderedJson(value);
    if (parsed.ok()) {
      args[k] = *std::move(parsed);
    } else {
      args[k] = std::string(value);
    }
  }
  call->name = std::string(name);
  call->arguments = tokenizer::DumpPythonJson(args);
  return true;
}

}  // namespace

ToolCallFormat ToolCallFormatForTemplate(std::string_view template_name) {
  if (template_name == "deepseek-v3") return ToolCallFormat::kDeepseekV3;
  if (template_name == "deepseek-v3.1") return ToolCallFormat::kDeepseekV31;
  if (template_name == "deepseek-v3.2") return ToolCallFormat::kDsmlV32;
  if (template_name == "deepseek-v4") return ToolCallFormat::kDsmlV4;
  if (template_name == "deepseek-v4.1") return ToolCallFormat::kDsmlV41;
  return ToolCallFormat::kNone;
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format) {}

ToolCallParser::Delta ToolCallParser::Push(std::string_view text) {
  Delta out;
  pending_.append(text);
  Process(/*final=*/false, &out);
  return out;
}

ToolCallParser::Delta ToolCallParser::Finish() {
  Delta out;
  Process(/*final=*/true, &out);
  if (state_ == State::kBlock) {
    // An unfinished block: whatever is left is content.
    block_raw_ += pending_;
    block_stray_ += pending_;
    pending_.clear();
    searched_ = 0;
    EndBlock(&out);
    state_ = State::kText;
  }
  return out;
}

bool ToolCallParser::ParseCall(std::string_view unit, ParsedToolCall* call) const {
  const ToolCallSyntax& syntax = ToolCallSyntaxOf(format_);
  std::string_view body = unit.substr(0, unit.size() - syntax.call_end.size());
  if (syntax.dsml) return ParseDsmlCall(body, syntax, call);
  body.remove_prefix(syntax.call_begin.size());
  // A second begin marker inside means the first call never ended.
  if (body.find(syntax.call_begin) != std::string_view::npos) return false;
  return ParseSepCall(body, format_ == ToolCallFormat::kDeepseekV3, call);
}

void ToolCallParser::EndBlock(Delta* out) {
  // Without a single valid call the block was not a tool-call block after all: keep it all.
  out->content += block_calls_ == 0 ? block_raw_ : block_stray_;
  block_raw_.clear();
  block_stray_.clear();
  block_calls_ = 0;
}

void ToolCallParser::Process(bool final, Delta* out) {
  if (format_ == ToolCallFormat::kNone) {
    out->content += pending_;
    pending_.clear();
    return;
  }
  const ToolCallSyntax& syntax = ToolCallSyntaxOf(format_);
  while (!pending_.empty()) {
    if (state_ == State::kText) {
      const size_t begin = pending_.find(syntax.calls_begin);
      if (begin != std::string::npos) {
        // DSML encoders write "\n\n" before the block: that whitespace is markup.
        const size_t ws =
            syntax.dsml ? TrailingSpace(std::string_view(pending_).substr(0, begin)) : 0;
        out->content.append(pending_, 0, begin - ws);
        block_raw_.assign(pending_, begin - ws, ws + syntax.calls_begin.size());
        pending_.erase(0, begin + syntax.calls_begin.size());
        state_ = State::kBlock;
        continue;
      }
      size_t keep = 0;
      if (!final) {
        keep = PartialTagSuffix(pending_, syntax.calls_begin);
        if (syntax.dsml) {
          keep += TrailingSpace(std::string_view(pending_).substr(0, pending_.size() - keep));
        }
      }
      out->content.append(pending_, 0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return;
    }

    // Inside a block: whitespace between calls is markup.
    size_t ws = 0;
    while (ws < pending_.size() && IsSpace(pending_[ws])) ++ws;
    block_raw_.append(pending_, 0, ws);
    pending_.erase(0, ws);
    if (pending_.empty()) return;
    const std::string_view rest = pending_;
    if (rest.starts_with(syntax.calls_end)) {
      block_raw_ += syntax.calls_end;
      pending_.erase(0, syntax.calls_end.size());
      EndBlock(out);
      state_ = State::kText;
      continue;
    }
    if (rest.starts_with(syntax.call_begin)) {
      // Resume the search for the end markers where the last Push left it.
      const size_t overlap = std::max(syntax.call_end.size(), syntax.calls_end.size()) - 1;
      const size_t from =
          std::max(syntax.call_begin.size(), searched_ > overlap ? searched_ - overlap : 0);
      const size_t end = rest.find(syntax.call_end, from);
      const size_t block_end = rest.find(syntax.calls_end, from);
      if (block_end != std::string::npos && (end == std::string::npos || block_end < end)) {
        // The block closes before the call does: the call is stray text.
        block_stray_.append(rest.substr(0, block_end));
        block_raw_.append(rest.substr(0, block_end));
        pending_.erase(0, block_end);
        searched_ = 0;
        continue;
      }
      if (end == std::string::npos) {
        searched_ = rest.size();
        return;  // wait for the end marker (Finish flushes)
      }
      searched_ = 0;
      const size_t unit_size = end + syntax.call_end.size();
      const std::string_view unit = rest.substr(0, unit_size);
      ParsedToolCall call;
      if (ParseCall(unit, &call)) {
        out->calls.push_back(std::move(call));
        ++block_calls_;
        ++num_calls_;
      } else {
        block_stray_.append(unit);
      }
      block_raw_.append(unit);
      pending_.erase(0, unit_size);
      continue;
    }
    if (!final &&
        (IsProperPrefix(rest, syntax.calls_end) || IsProperPrefix(rest, syntax.call_begin))) {
      return;  // could still become a marker
    }
    // Stray text up to the next possible marker.
    size_t next = rest.find('<', 1);
    if (next == std::string::npos) next = rest.size();
    block_stray_.append(rest.substr(0, next));
    block_raw_.append(rest.substr(0, next));
    pending_.erase(0, next);
  }
}

ToolCallResult ParseToolCalls(ToolCallFormat format, std::string_view text) {
  ToolCallParser parser(format);
  ToolCallParser::Delta a = parser.Push(text);
  ToolCallParser::Delta b = parser.Finish();
  ToolCallResult result;
  result.content = std::move(a.content) + b.content;
  result.calls = std::move(a.calls);
  for (ParsedToolCall& c : b.calls) result.calls.push_back(std::move(c));
  return result;
}

}  // namespace deepinfer::api
