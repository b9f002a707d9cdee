#pragma once

// A chat request's messages rendered through the model's encoder into prompt tokens, and the
// reading of the model's answer back into reasoning, content and tool calls.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/openai_types.h"
#include "protocol/reasoning_parser.h"
#include "protocol/tool_call_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::api {

// An image token id outside every vocabulary: RenderChatPrompt's image_token_id where images are
// only counted (a model without a vision tower).
inline constexpr int32_t kCountOnlyImageToken = 0x7fffffff;

// A rendered chat prompt and how to read the model's answer.
struct ChatPrompt {
  std::vector<int32_t> tokens;
  // The encoder can produce reasoning (DeepSeek): split <think>...</think> out of the answer.
  bool parse_reasoning = false;
  // The prompt itself opened the reasoning block, so the answer starts inside it.
  bool starts_in_reasoning = false;
  // Where each image's one image_token_id sits in `tokens`, in order (before the spans are
  // expanded: ExpandImageSpans); empty without images.
  std::vector<int32_t> image_positions;
};

// The encoder options a chat request renders with: its tool definitions, thinking mode,
// reasoning effort ("none" means the default effort), add_generation_prompt and
// continue_final_message. Chat, /tokenize and count-tokens share it.
tokenizer::ChatOptions ChatOptionsFor(const ChatExtras& extras);

// Renders `messages` (with tool definitions, thinking mode and a continued final message:
// tokenizer::RenderChat) through the model's encoder and tokenizes the result, exactly as
// generation sees it. With `image_token_id` >= 0 (a vision model), each image's
// kImagePlaceholder in the rendered text becomes exactly one image_token_id (the text between
// them is tokenized piece by piece, as a special token splits it) and image_positions says where;
// the engine knows images by their positions (engine::ImageInput), never by the id. Counting
// without a vision model passes kCountOnlyImageToken.
// Errors: InvalidArgument "bad_chat_request" from the encoder (e.g. a malformed tool call);
//   "invalid_value" (param "messages") when the rendered text holds another number of
//   placeholders than there are images (a text part spelled the placeholder);
//   "unsupported_content" for images with image_token_id < 0.
absl::StatusOr<ChatPrompt> RenderChatPrompt(const tokenizer::Tokenizer& tokenizer,
                                            const tokenizer::ChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages,
                                            const tokenizer::ChatOptions& options,
                                            int32_t image_token_id = -1);

// Tool calls are read out of an answer only when the request offers tools, does not turn them
// off (`tools_off`: tool_choice "none" in every API), and the model's
// encoder (`chat_template`) has a tool-call syntax (DeepSeek); else kNone and calls stay text.
ToolCallFormat ToolFormatFor(const tokenizer::ChatTemplate& chat_template, bool has_tools,
                             bool tools_off);

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

}  // namespace deepinfer::api
