#include "api/chat_route.h"

#include "api/image_inputs.h"
#include "protocol/tool_constraint.h"
#include "util/status.h"

namespace deepinfer::api {

absl::StatusOr<std::vector<std::vector<int32_t>>> ChatPromptRoute::RenderChat(
    const std::vector<ChatMessage>& messages, const tokenizer::ChatOptions& options,
    const ToolChoice& tool_choice) {
  const int32_t image_token_id = model().vision != nullptr ? model().vision->image_token_id : -1;
  DI_ASSIGN_OR_RETURN(prompt_, RenderChatPrompt(*model().tokenizer, *model().chat_template,
                                                messages, options, image_token_id));
  if (!prompt_.image_positions.empty()) {
    DI_RETURN_IF_ERROR(
        ExpandChatImages(messages, *model().vision, model().media, &prompt_, &images_));
  }
  tool_format_ = ToolFormatFor(*model().chat_template, !options.tools.empty(),
                               tool_choice.mode == ToolChoice::Mode::kNone);
  const ToolCallFormat model_format =
      ToolCallFormatForTemplate(model().chat_template->name());
  DI_ASSIGN_OR_RETURN(tool_constraint_,
                      ToolChoiceConstraint(model_format, options.tools, tool_choice));
  return std::vector<std::vector<int32_t>>{prompt_.tokens};
}

int32_t ChatPromptRoute::ReasoningEndToken() const {
  return prompt_.starts_in_reasoning ? model().tokenizer->TokenId("</think>") : -1;
}

std::optional<Route::OutputConstraint> ChatPromptRoute::Constraint() const {
  std::optional<OutputConstraint> out;
  if (tool_constraint_.has_value()) {
    out = OutputConstraint{*tool_constraint_, "tool_choice"};
  } else if (params().constraint.has_value()) {
    out = OutputConstraint{*params().constraint, params().constraint_param};
  }
  if (out.has_value() && prompt_.starts_in_reasoning) out->spec.reasoning_end = "</think>";
  return out;
}

}  // namespace deepinfer::api
