#pragma once

// Native encoders of DeepSeek's chat formats, V3 through V4.1. Each reproduces its reference
// byte for byte on the conversations in tests/golden/deepseek/ (see tests/reference/README.md).
// The prompt starts with "<｜begin▁of▁sentence｜>", so it is tokenized with parse_special and
// without another BOS.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::tokenizer {

// DeepSeek-V3's tokenizer_config.json template, quirks included: system messages are gathered
// in front, joined by "\n\n"; only an assistant turn whose content is null renders its tool
// calls, and only the first tool call of a conversation opens "<｜tool▁calls▁begin｜>" while every
// later one is followed by "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"; "<｜tool▁outputs▁begin｜>"
// appears once per conversation. Tools, thinking and effort are ignored; unknown roles render
// nothing.
// Source: ../shared/models/deepseek-v3-tokenizer/tokenizer_config.json chat_template.
class DeepseekV3Template final : public ChatTemplate {
 public:
  using ChatTemplate::Render;
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  bool writes_bos() const override { return true; }
  std::string_view name() const override { return "deepseek-v3"; }
};

// DeepSeek-V3.1's template: the assistant header carries "</think>" (past turns, non-thinking)
// or "<think>" (a thinking generation prompt); a past turn keeps only the text after its first
// "</think>"; tool calls are
// "<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>" and results
// "<｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜>", after which no generation prompt is
// added. Tool definitions and effort are ignored. Source: deepseek-ai/DeepSeek-V3.1
// tokenizer_config.json chat_template (kwarg `thinking`).
class DeepseekV31Template final : public ChatTemplate {
 public:
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatOptions& options) const override;
  bool writes_bos() const override { return true; }
  std::string_view name() const override { return "deepseek-v3.1"; }
};

// DeepSeek-V3.2's encoding_dsv32.py, with SGLang's request handling: an empty system message is
// put first when the first message is not a system message, the request's tools are rendered
// into it ("## Tools" block with one JSON schema per line), and a null content reads as "".
// Every user turn is followed by "<｜Assistant｜>" and "<think>" (the last user turn in thinking
// mode) or "</think>"; tool calls are DSML ("<｜DSML｜function_calls>"), tool results
// "<function_results>" blocks; in thinking mode reasoning before the last user turn is dropped.
// Errors: InvalidArgument "bad_chat_request" where the reference raises: arguments that are not
//   a JSON object, a tool result without its call, an unknown role, an empty developer message,
//   an assistant turn after the last user turn in thinking mode with neither reasoning nor calls,
//   a message other than user/system/tool/assistant before the last user turn in thinking mode.
// Source: sglang python/sglang/srt/entrypoints/openai/encoding_dsv32.py (PyPI sglang 0.5.23),
//   "adapted from deepseek-ai/DeepSeek-V3.2 encoding/encoding_dsv32.py"; serving_chat.py.
class DeepseekV32Template final : public ChatTemplate {
 public:
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatOptions& options) const override;
  bool writes_bos() const override { return true; }
  std::string_view name() const override { return "deepseek-v3.2"; }
};

// DeepSeek-V4 / V4.1 as DeepSeek's reference encoder renders a converted Chat Completions
// request (PyPI deepseek-recipe 0.2.0, DeepseekV4Encoding / DeepseekV41Encoding):
// - thinking mode: an effort prompt first (V4: none for low, one text for high/xhigh, another
//   for max; V4.1: "Reasoning Effort: N (range 1-100, ...)" with low 50, high/xhigh 75, max
//   100, or the integer given); the assistant turn opens with "<think>", else "</think>";
// - system messages: V4 gathers them in front joined by "\n\n"; V4.1 keeps them in place as
//   "<｜System｜>{content}", the first one sharing "<｜System｜>" with the effort prompt and the
//   tools; empty ones vanish; "developer" counts as "system";
// - tools: "## Tools" block with {"name", "description", "parameters"} per line; past
//   assistant turns show "<think>{reasoning}</think>" only with tools in thinking mode;
// - tool results become "<tool_result>...</tool_result>" blocks of a user turn (joined with
//   "\n\n", as are consecutive user messages), ordered by their calls (V4 orders calls and
//   results by id); tool calls are DSML blocks ("<｜DSML｜tool_calls>" / V4.1 "<｜DSML｜ calls>")
//   whose parameters are the argument object's members (a non-object: one "arguments" string);
// - "latest_reminder" messages render as "<｜latest_reminder｜>{content}".
// The prompt always ends with the assistant header; add_generation_prompt is ignored.
// Errors: InvalidArgument "bad_chat_request" (a tool definition that is not a JSON object with
//   function.name, an unknown role or effort).
class DeepseekV4Template final : public ChatTemplate {
 public:
  explicit DeepseekV4Template(bool v41) : v41_(v41) {}
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatOptions& options) const override;
  bool writes_bos() const override { return true; }
  std::string_view name() const override { return v41_ ? "deepseek-v4.1" : "deepseek-v4"; }

 private:
  bool v41_;
};

// Returns the DeepSeek encoder called `name` ("deepseek-v3", "deepseek-v3.1", "deepseek-v3.2",
// "deepseek-v4", "deepseek-v4.1"), or nullptr.
std::unique_ptr<ChatTemplate> CreateDeepseekChatTemplate(std::string_view name);

// Returns the encoder for a Jinja template that is DeepSeek-V3's or DeepSeek-V3.1's official
// one (compared by fingerprint, after dropping one trailing newline), or nullptr.
std::unique_ptr<ChatTemplate> DeepseekChatTemplateForJinja(std::string_view source);

// Returns the encoder for a DeepSeek model_type that ships no Jinja template ("deepseek_v32",
// "deepseek_v4", "deepseek_v41"), or nullptr.
std::unique_ptr<ChatTemplate> DeepseekChatTemplateForArchitecture(std::string_view architecture);

// FNV-1a 64 of `text`: the fingerprint DeepseekChatTemplateForJinja compares.
uint64_t TemplateFingerprint(std::string_view text);

}  // namespace deepinfer::tokenizer
