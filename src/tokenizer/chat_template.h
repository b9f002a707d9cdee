#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::tokenizer {

// A tool call made by an assistant turn (OpenAI tool_calls[i]).
struct ToolCall {
  std::string id;
  std::string type = "function";
  std::string name;
  std::string arguments;  // the JSON text the model produced or the client sent back
};

// One turn of a conversation. Two-field aggregate initialization ({"user", "hi"}) still works.
struct ChatMessage {
  std::string role;  // "system", "developer", "user", "assistant", "tool", "latest_reminder"
  std::string content;
  // False for a null or absent content (an assistant turn that only calls tools); templates
  // that tell null from "" (DeepSeek V3 / V3.1) need it.
  bool has_content = true;
  // (The initializers keep -Wmissing-field-initializers quiet for {role, content}.)
  std::string reasoning_content = {};  // an assistant turn's thinking, "" when none
  std::vector<ToolCall> tool_calls = {};
  std::string tool_call_id = {};  // role "tool": the call this result answers
  std::string name = {};          // role "tool": the tool's name, when the client gave it
};

// What shapes a prompt besides the messages.
struct ChatOptions {
  // End with the opening of the assistant's turn. The DeepSeek V3.2 / V4 / V4.1 encodings
  // always end where the model continues and ignore it.
  bool add_generation_prompt = true;
  // Leave the final message open so that the model continues it (an assistant prefill): the
  // prompt ends right after that message's text, without the end of its turn. Used with
  // add_generation_prompt false (RenderChat).
  bool continue_final_message = false;
  // Open the assistant's turn in thinking mode (DeepSeek V3.1 and later).
  bool thinking = false;
  // Tool definitions, each the JSON text of an OpenAI tools[i] object
  // ({"type": "function", "function": {"name", "description", "parameters"}}).
  std::vector<std::string> tools;
  // DeepSeek V4 / V4.1 thinking effort: "low", "high", "xhigh", "max" (minimal, medium and ultra
  // are read as low, high and max); V4.1 also takes an integer "1".."100". "" for the default.
  std::string reasoning_effort;
};

// Renders a conversation into the prompt text a model was trained on. Native C++ encoders
// replace the Jinja templates model files carry; each reproduces its template's output byte for
// byte (tests/golden/chat/ holds Jinja-rendered references).
//
// Threads: Render is const and safe to call concurrently.
class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;

  // Returns the prompt for `messages`; with `add_generation_prompt`, ends with the opening of
  // the assistant's turn. Templates with tools or thinking render them off; a DeepSeek
  // encoder returns "" where the ChatOptions overload fails.
  virtual std::string Render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt) const = 0;
  // Returns the prompt for `messages` with tool definitions, thinking mode and effort. The
  // default ignores everything but options.add_generation_prompt.
  // Errors: InvalidArgument "bad_chat_request" (e.g. a tool definition that is not JSON).
  virtual absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                             const ChatOptions& options) const {
    return Render(messages, options.add_generation_prompt);
  }
  // True when the prompt already starts with the BOS token's text (the DeepSeek encodings):
  // encode it with add_bos = false, as apply_chat_template does, or BOS appears twice.
  virtual bool writes_bos() const { return false; }
  // A short name for logs and /v1/models ("chatml", "plain").
  virtual std::string_view name() const = 0;
};

// Renders through `chat_template` as ChatTemplate::Render(messages, options) does; with
// options.continue_final_message, the prompt ends where the final message's text ends in the
// rendering (the end of its turn and any generation prompt left out), so that the model
// continues that message. Trailing spaces of the message are kept where the template keeps
// them.
// Errors: those of Render; InvalidArgument "bad_chat_request" when continue_final_message has no
//   message to continue or the template drops the final message's text.
// Source: transformers 5.24 render_jinja_template(continue_final_message=True), which vLLM's
//   chat `continue_final_message` calls.
absl::StatusOr<std::string> RenderChat(const ChatTemplate& chat_template,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options);

// ChatML: each message is "<|im_start|>{role}\n{content}<|im_end|>\n"; the generation prompt is
// "<|im_start|>assistant\n". With a default system prompt (SmolLM2), a conversation whose first
// message is not a system message starts with "<|im_start|>system\n{default}<|im_end|>\n".
// Source: HuggingFaceTB/SmolLM2-*-Instruct tokenizer_config.json chat_template.
class ChatMlTemplate final : public ChatTemplate {
 public:
  explicit ChatMlTemplate(std::optional<std::string> default_system = std::nullopt)
      : default_system_(std::move(default_system)) {}
  using ChatTemplate::Render;
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  std::string_view name() const override { return "chatml"; }
  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
};

// llama2.c models have no chat format: the contents are concatenated in order; roles and the
// generation prompt add nothing.
class PlainTemplate final : public ChatTemplate {
 public:
  using ChatTemplate::Render;
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  std::string_view name() const override { return "plain"; }
};

// Picks the encoder for a model: by the Jinja source in tokenizer.chat_template when there is
// one (the SmolLM2 template, plain ChatML, DeepSeek-V3's or DeepSeek-V3.1's), then by
// `architecture` (ModelConfig::architecture, the Hugging Face model_type) for DeepSeek models
// that ship Python encoders instead of a template ("deepseek_v32", "deepseek_v4",
// "deepseek_v41"), PlainTemplate for a llama2.c tokenizer without a template, and ChatML
// (llama.cpp's fallback) for another model without a template.
//
// Errors: Unimplemented "unsupported_chat_template" for a template no encoder reproduces.
absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    const model::TokenizerData& tokenizer, std::string_view architecture = "");

// Returns the encoder called `name`: "chatml", "plain", "deepseek-v3", "deepseek-v3.1",
// "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1".
// Errors: NotFound "unknown_chat_template".
absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplateByName(std::string_view name);

}  // namespace deepinfer::tokenizer
