#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::tokenizer {

// One turn of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
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
  // the assistant's turn.
  virtual std::string Render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt) const = 0;
  // A short name for logs and /v1/models ("chatml", "plain").
  virtual std::string_view name() const = 0;
};

// ChatML: each message is "<|im_start|>{role}\n{content}<|im_end|>\n"; the generation prompt is
// "<|im_start|>assistant\n". With a default system prompt (SmolLM2), a conversation whose first
// message is not a system message starts with "<|im_start|>system\n{default}<|im_end|>\n".
// Source: HuggingFaceTB/SmolLM2-*-Instruct tokenizer_config.json chat_template.
class ChatMlTemplate final : public ChatTemplate {
 public:
  explicit ChatMlTemplate(std::optional<std::string> default_system = std::nullopt)
      : default_system_(std::move(default_system)) {}
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
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt) const override;
  std::string_view name() const override { return "plain"; }
};

// Picks the encoder for a model: by the Jinja source in tokenizer.chat_template when there is
// one (the SmolLM2 template, or plain ChatML), PlainTemplate for a llama2.c tokenizer without a
// template, and ChatML (llama.cpp's fallback) for another model without a template.
// `architecture` (ModelConfig::architecture) is where encoders for template-less formats such
// as DeepSeek's will be chosen; today it only enters error messages.
//
// Errors: Unimplemented "unsupported_chat_template" for a template no encoder reproduces.
absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    const model::TokenizerData& tokenizer, std::string_view architecture = "");

// Returns the encoder called `name` ("chatml", "plain").
// Errors: NotFound "unknown_chat_template".
absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplateByName(std::string_view name);

}  // namespace deepinfer::tokenizer
