#pragma once

// Reads the tool calls a DeepSeek model writes into its answer, the inverse of the tool-call
// rendering of the encoders in deepseek_chat.h (and of vLLM's deepseek_v3 / deepseek_v31 /
// deepseek_v32 tool parsers):
//
//   V3:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```
//         <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   V3.1:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>...
//         <｜tool▁calls▁end｜>
//   DSML (V3.2 "function_calls", V4 "tool_calls", V4.1 " calls"; V4.1 also writes " invoke" and
//   " parameter"):
//         \n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="{name}">\n
//         <｜DSML｜parameter name="{k}" string="true|false">{v}</｜DSML｜parameter>\n...
//         </｜DSML｜invoke>\n...</｜DSML｜function_calls>
//
// (The V3 and V3.1 lines are wrapped here; the model writes no newline between the markers.)

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::api {

// The tool-call syntax of one chat encoding.
enum class ToolCallFormat {
  kNone,         // the encoding has no tool-call syntax we read
  kDeepseekV3,   // "function<｜tool▁sep｜>{name}\n```json\n{args}\n```"
  kDeepseekV31,  // "{name}<｜tool▁sep｜>{args}"
  kDsmlV32,      // <｜DSML｜function_calls>
  kDsmlV4,       // <｜DSML｜tool_calls>
  kDsmlV41,      // <｜DSML｜ calls>, <｜DSML｜ invoke>, <｜DSML｜ parameter>
};

// The markers of one format. DSML call_begin is the start of the invoke tag (its attributes
// follow).
struct ToolCallSyntax {
  std::string_view calls_begin;
  std::string_view calls_end;
  std::string_view call_begin;
  std::string_view call_end;
  std::string_view param_begin;  // DSML only
  std::string_view param_end;    // DSML only
  bool dsml;
};

// The markers of `format` (kNone, kDeepseekV3 and kDeepseekV31 share the V3 markers).
const ToolCallSyntax& ToolCallSyntaxOf(ToolCallFormat format);

// Between a V3 / V3.1 call's name and its arguments.
inline constexpr std::string_view kToolSep = "<｜tool▁sep｜>";

// The format of the encoder called `template_name` (ChatTemplate::name()): "deepseek-v3",
// "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"; kNone for any other name.
ToolCallFormat ToolCallFormatForTemplate(std::string_view template_name);

// One tool call read from the model's text.
struct ParsedToolCall {
  std::string name;
  // The arguments as JSON text. V3 / V3.1: the model's text as written (trimmed of surrounding
  // whitespace; "{}" when empty), not validated. DSML: a JSON object assembled from the
  // parameters in order, written as Python's json.dumps(ensure_ascii=False) writes it
  // (", " and ": " separators); string="true" values become JSON strings, other values are
  // parsed as JSON and fall back to a string when they are not JSON.
  std::string arguments;
};

// Splits a model's generated text, delta by delta, into content (the text outside tool-call
// blocks) and tool calls.
//
// Content is released as soon as it cannot be the start of a tool-call block: text that could
// be the beginning of the block marker (and, for DSML, the whitespace right before it, which the
// encoders write as a separator) is held back until the next Push or Finish decides it, so a
// partial marker never reaches the content. Inside a block each call is returned once, whole,
// when its end marker arrives. Nothing is dropped except the format's own markup: a call that
// does not parse, stray text inside a block, and a block that ends up with no valid call are
// returned as content, raw; so is an unfinished block at Finish (a generation cut by
// max_tokens). Content that comes out of a block is released when the block ends. Text after a
// block is content again, and a later block is read like the first.
//
// Units: bytes of UTF-8 text; deltas may split anywhere, even inside a character (a split
// character is then split the same way in the output).
// Threads: one parser per generation; not thread-safe.
// Errors: none; malformed input degrades to content.
// Cost: linear in the text (a whitespace run held back before a possible DSML block is rescanned
//   on each Push); holds back at most one call inside a block (until its end marker), plus any
//   stray text of the block, or one marker's length (DSML: plus a whitespace run) outside.
class ToolCallParser {
 public:
  // What one Push or Finish produced. Within one result, `content` may hold text from before
  // and after `calls`; concatenating the content of all results gives the whole content.
  struct Delta {
    std::string content;
    std::vector<ParsedToolCall> calls;  // calls completed by this input, in order
  };

  // With kNone every byte is content.
  explicit ToolCallParser(ToolCallFormat format);

  // Feeds the next generated text.
  Delta Push(std::string_view text);
  // Ends the generation: held-back and unfinished text is released as content.
  Delta Finish();

  // How many calls have been returned so far.
  int num_calls() const { return num_calls_; }

 private:
  enum class State { kText, kBlock };
  void Process(bool final, Delta* out);
  // Reads one call unit (from its begin marker to its end marker, both included).
  bool ParseCall(std::string_view unit, ParsedToolCall* call) const;
  void EndBlock(Delta* out);

  ToolCallFormat format_;
  State state_ = State::kText;
  std::string pending_;      // unread input
  std::string block_raw_;    // everything read of the current block, markers included
  std::string block_stray_;  // content found inside the current block
  size_t searched_ = 0;      // bytes of pending_ already searched for a call's end marker
  int block_calls_ = 0;      // calls read in the current block
  int num_calls_ = 0;
};

// Everything a generation's text holds, read in one go.
struct ToolCallResult {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Runs a ToolCallParser over the whole `text`: the same result as any split into deltas.
ToolCallResult ParseToolCalls(ToolCallFormat format, std::string_view text);

}  // namespace deepinfer::api
