#include "protocol/chat_prompt.h"

#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

// OpenAI's message shape to the encoders': "developer" is the new name of "system", and
// assistant tool calls arrive as JSON.
std::vector<tokenizer::ChatMessage> EncoderMessages(const std::vector<ChatMessage>& messages) {
  std::vector<tokenizer::ChatMessage> turns;
  turns.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    tokenizer::ChatMessage t{m.role == "developer" ? "system" : m.role, m.content};
    t.has_content = m.has_content;
    t.tool_call_id = m.tool_call_id;
    t.name = m.name;
    if (!m.tool_calls_json.empty()) {
      util::Json calls = util::Json::parse(m.tool_calls_json, nullptr, /*allow_exceptions=*/false);
      if (calls.is_array()) {
        for (const util::Json& c : calls) {
          if (!c.is_object()) continue;
          tokenizer::ToolCall call;
          call.id = util::StringMember(c, "id").value_or("");
          auto fn = c.find("function");
          if (fn != c.end() && fn->is_object()) {
            call.name = fn->value("name", std::string());
            auto args = fn->find("arguments");
            if (args != fn->end())
              call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
          }
          t.tool_calls.push_back(std::move(call));
        }
      }
    }
    turns.push_back(std::move(t));
  }
  return turns;
}

// Tokenizes `text` with one image_token_id for each kImagePlaceholder, recording where they are.
absl::Status EncodeWithImages(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                              bool add_bos, int32_t num_images, int32_t image_token_id,
                              ChatPrompt* prompt) {
  size_t start = 0;
  bool first = true;
  while (true) {
    const size_t at = text.find(kImagePlaceholder, start);
    const std::string_view piece = text.substr(start, at == std::string_view::npos
                                                          ? std::string_view::npos
                                                          : at - start);
    std::vector<int32_t> ids = tokenizer.Encode(piece, /*parse_special=*/true, first && add_bos);
    prompt->tokens.insert(prompt->tokens.end(), ids.begin(), ids.end());
    first = false;
    if (at == std::string_view::npos) break;
    prompt->image_positions.push_back(static_cast<int32_t>(prompt->tokens.size()));
    prompt->tokens.push_back(image_token_id);
    start = at + kImagePlaceholder.size();
  }
  if (prompt->image_positions.size() != static_cast<size_t>(num_images)) {
    return http::RequestError(
        "messages", util::codes::kInvalidValue,
        fmt::format("The conversation renders {} image placeholders for {} images: a text part "
                    "must not contain the image placeholder '{}'.",
                    prompt->image_positions.size(), num_images, kImagePlaceholder));
  }
  return absl::OkStatus();
}

}  // namespace

tokenizer::ChatOptions ChatOptionsFor(const ChatExtras& extras) {
  tokenizer::ChatOptions options;
  options.add_generation_prompt = extras.add_generation_prompt;
  options.continue_final_message = extras.continue_final_message;
  options.tools = extras.tools;
  options.thinking = extras.thinking;
  options.reasoning_effort = extras.reasoning_effort == "none" ? "" : extras.reasoning_effort;
  return options;
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(const tokenizer::Tokenizer& tokenizer,
                                            const tokenizer::ChatTemplate& chat_template,
                                            const std::vector<ChatMessage>& messages,
                                            const tokenizer::ChatOptions& options,
                                            int32_t image_token_id) {
  const int32_t num_images = CountImages(messages);
  if (num_images > 0 && image_token_id < 0) {
    for (const ChatMessage& m : messages) {
      if (!m.images.empty()) return ImageUnsupportedError(m.images.front().param);
    }
  }
  DI_ASSIGN_OR_RETURN(std::string text,
                      tokenizer::RenderChat(chat_template, EncoderMessages(messages), options));
  ChatPrompt prompt;
  // Templates that write the BOS text themselves (DeepSeek) must not get a second BOS.
  const bool add_bos = tokenizer.add_bos() && !chat_template.writes_bos();
  if (image_token_id >= 0) {
    DI_RETURN_IF_ERROR(
        EncodeWithImages(tokenizer, text, add_bos, num_images, image_token_id, &prompt));
  } else {
    prompt.tokens = tokenizer.Encode(text, /*parse_special=*/true, add_bos);
  }
  prompt.parse_reasoning = chat_template.name().starts_with("deepseek");
  prompt.starts_in_reasoning = prompt.parse_reasoning && PromptOpensReasoning(text);
  return prompt;
}

ToolCallFormat ToolFormatFor(const tokenizer::ChatTemplate& chat_template, bool has_tools,
                             bool tools_off) {
  if (!has_tools || tools_off) return ToolCallFormat::kNone;
  return ToolCallFormatForTemplate(chat_template.name());
}

AnswerSplitter::AnswerSplitter(const ChatPrompt& prompt, ToolCallFormat tool_format) {
  if (prompt.parse_reasoning) reasoning_.emplace(prompt.starts_in_reasoning);
  if (tool_format != ToolCallFormat::kNone) tools_.emplace(tool_format);
}

AnswerSplitter::Delta AnswerSplitter::Push(std::string_view text, bool last) {
  Delta out;
  if (reasoning_) {
    ReasoningParser::Delta split = reasoning_->Push(text);
    if (last) {
      ReasoningParser::Delta rest = reasoning_->Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    out.reasoning = std::move(split.reasoning);
    out.content = std::move(split.content);
  } else {
    out.content = std::string(text);
  }
  if (tools_) {
    ToolCallParser::Delta t = tools_->Push(out.content);
    if (last) {
      ToolCallParser::Delta rest = tools_->Finish();
      t.content += rest.content;
      for (auto& c : rest.calls) t.calls.push_back(std::move(c));
    }
    out.content = std::move(t.content);
    out.calls = std::move(t.calls);
  }
  return out;
}

}  // namespace deepinfer::api
