#pragma once

// The route of every chat-shaped request (chat completions, Responses, Anthropic messages): its
// prompt is the conversation rendered by protocol/chat_prompt.h, its answer is read back with
// the same file's AnswerSplitter.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "api/route.h"
#include "protocol/chat_prompt.h"
#include "protocol/openai_types.h"
#include "protocol/tool_call_parser.h"
#include "tokenizer/chat_template.h"

namespace deepinfer::api {

// A Route whose prompt is a rendered chat (chat completions, Responses, Anthropic messages): its
// Render renders the conversation and decides how tool calls are read out of the answer.
class ChatPromptRoute : public Route {
 public:
  const ChatPrompt& prompt() const { return prompt_; }
  ToolCallFormat tool_format() const { return tool_format_; }
  const std::vector<std::shared_ptr<const engine::ImageInput>>& images() const override {
    return images_;
  }

 protected:
  using Route::Route;

  // Step 3 for a chat: RenderChatPrompt of `messages` with `options`, each image read, decoded,
  // preprocessed and expanded to its span (ExpandChatImages); tool calls are parsed when
  // `options` offers tools and `tool_choice` is not none (ToolFormatFor); a required or named
  // tool_choice becomes the output constraint (ToolChoiceConstraint).
  // Errors: those of RenderChatPrompt, ExpandChatImages and ToolChoiceConstraint.
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
  std::vector<std::shared_ptr<const engine::ImageInput>> images_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::optional<constraint::ConstraintSpec> tool_constraint_;
};

}  // namespace deepinfer::api
