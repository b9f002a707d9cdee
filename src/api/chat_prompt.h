#pragma once

// A chat request's messages rendered through the model's encoder into prompt tokens, and the
// reading of the model's answer back into reasoning, content and tool calls.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/openai_types.h"
#include "api/reasoning_parser.h"
#include "api/route.h"
#include "api/served_model.h"
#include "api/tool_call_parser.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::api {

// A rendered chat prompt and how to read the model's answer.
struct ChatPrompt {
  std::vector<int32_t> tokens;
  // The encoder can produce reasoning (DeepSeek): split <think>...</think> out of the answer.
  bool parse_reasoning = false;
  // The prompt itself opened the reasoning block, so the answer starts inside it.
  bool starts_in_reasoning = false;
};

// The encoder options a chat request renders with: its tool definitions, thinking mode,
// reasoning effort ("none" means the default effort), add_generation_prompt and
// continue_final_message. Chat, /tokenize and count-tokens share it.
tokenizer::ChatOptions ChatOptionsFor(const ChatExtras& extras);

// Renders `messages` (with tool definitions, thinking mode and a continued final message:
// tokenizer::RenderChat) through the model's encoder and tokenizes the result, exactly as
// generation sees it.
// Errors: InvalidArgument "bad_chat_request" from the encoder (e.g. a malformed tool call).
absl::StatusOr<ChatPrompt> RenderChatPrompt(const ServedModel& model,
                                            const std::vector<ChatMessage>& messages,
                                            const tokenizer::ChatOptions& options);

// Tool calls are read out of an answer only when the request offers tools, does not turn them
// off (`tools_off`: tool_choice "none" in every API), and the model's
// encoder has a tool-call syntax (DeepSeek); else kNone and calls stay text.
ToolCallFormat ToolFormatFor(const ServedModel& model, bool has_tools, bool tools_off);

// Splits one choice's answer, as it streams, into reasoning (DeepSeek <think>...</think>),
// content and tool calls: the reasoning parser runs first, the tool-call parser on what it
// leaves as content. Feeding the whole answer at once gives the same result as any split.
// Threads: one per choice, not thread-safe.
class AnswerSplitter {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;  // may hold text from before and after `calls`
    std::vector<ParsedToolCall> calls;
  };
  AnswerSplitter(const ChatPrompt& prompt, ToolCallFormat tool_format);
  // `last`: the choice finished; text held back (a partial tag) is released.
  Delta Push(std::string_view text, bool last);
  // Tool calls completed so far.
  int num_calls() const { return tools_ ? tools_->num_calls() : 0; }

 private:
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

// A Route whose prompt is a rendered chat (chat completions, Responses, Anthropic messages): its
// Render renders the conversation and decides how tool calls are read out of the answer.
class ChatPromptRoute : public Route {
 public:
  const ChatPrompt& prompt() const { return prompt_; }
  ToolCallFormat tool_format() const { return tool_format_; }

 protected:
  using Route::Route;

  // Step 3 for a chat: RenderChatPrompt of `messages` with `options`; tool calls are parsed when
  // `options` offers tools and `tool_choice` is not none (ToolFormatFor); a required or named
  // tool_choice becomes the output constraint (ToolChoiceConstraint).
  // Errors: those of RenderChatPrompt and ToolChoiceConstraint.
  absl::StatusOr<std::vector<std::vector<int32_t>>> RenderChat(
      const std::vector<ChatMessage>& messages, const tokenizer::ChatOptions& options,
      const ToolChoice& tool_choice);

  // The tool-choice constraint when there is one (it wins over a response_format: the answer is
  // tool calls), else params().constraint; either way a thinking block the prompt opened stays
  // free until "</think>".
  std::optional<OutputConstraint> Constraint() const override;
  // "</think>" when the prompt opened the reasoning block (and the vocabulary has it as one
  // token), else -1.
  int32_t ReasoningEndToken() const override;

 private:
  ChatPrompt prompt_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::optional<constraint::ConstraintSpec> tool_constraint_;
};

}  // namespace deepinfer::api
