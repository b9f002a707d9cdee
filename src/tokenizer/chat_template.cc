#include "tokenizer/chat_template.h"

#include <cctype>

#include "fmt/format.h"
#include "tokenizer/deepseek_chat.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

// The SmolLM2 template is this prefix, the default system prompt (a Jinja string literal) and
// this suffix; plain ChatML is kChatMl. Newlines are compared after the Jinja escape "\n" is
// turned into a newline, so either spelling is recognized.
constexpr std::string_view kSmolPrefix =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n";
constexpr std::string_view kSmolSuffix =
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";
constexpr std::string_view kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// Turns the escapes of a single-quoted Jinja string into their characters; nullopt when the
// text holds an unescaped quote (it would not be one literal).
std::optional<std::string> UnescapeJinjaLiteral(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\'') return std::nullopt;
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      default:
        out.push_back('\\');
        out.push_back(c);
        break;
    }
  }
  return out;
}

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\\' && i + 1 < source.size() && source[i + 1] == 'n') {
      out.push_back('\n');
      ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  return out;
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

std::string ChatMlTemplate::Render(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && default_system_.has_value() && messages[0].role != "system") {
      out += "<|im_start|>system\n";
      out += *default_system_;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>";
    out += messages[i].role;
    out += "\n";
    out += messages[i].content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string PlainTemplate::Render(const std::vector<ChatMessage>& messages,
                                  bool /*add_generation_prompt*/) const {
  std::string out;
  for (const ChatMessage& m : messages) out += m.content;
  return out;
}

absl::StatusOr<std::string> RenderChat(const ChatTemplate& chat_template,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options) {
  if (!options.continue_final_message) return chat_template.Render(messages, options);
  if (messages.empty()) {
    return InvalidArgumentError(util::codes::kBadChatRequest,
                                "there is no final message to continue");
  }
  // transformers marks the end of the final message with a tag, renders, and cuts at the tag:
  // whatever the template writes after the message (the end of its turn) is dropped, and
  // spacing is kept where the template keeps it.
  constexpr std::string_view kTag = "CONTINUE_FINAL_MESSAGE_TAG ";
  constexpr std::string_view kTagText = kTag.substr(0, kTag.size() - 1);
  std::vector<ChatMessage> tagged = messages;
  tagged.back().content += kTag;
  tagged.back().has_content = true;
  ChatOptions closed = options;
  closed.continue_final_message = false;
  closed.add_generation_prompt = false;
  DI_ASSIGN_OR_RETURN(std::string prompt, chat_template.Render(tagged, closed));
  const size_t at = prompt.rfind(kTagText);
  if (at == std::string::npos) {
    return InvalidArgumentError(
        util::codes::kBadChatRequest,
        "the final message cannot be continued: the chat template does not reproduce its text");
  }
  const bool spacing_kept = prompt.compare(at, kTag.size(), kTag) == 0;
  prompt.resize(at);
  if (!spacing_kept) {
    // The template trimmed the message: trim what is left of it the same way.
    while (!prompt.empty() && std::isspace(static_cast<unsigned char>(prompt.back()))) {
      prompt.pop_back();
    }
  }
  return prompt;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    const model::TokenizerData& tokenizer, std::string_view architecture) {
  // Jinja drops one trailing newline of a template.
  std::string_view source = tokenizer.chat_template;
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  if (auto deepseek = DeepseekChatTemplateForJinja(source)) return deepseek;
  // DeepSeek V3.2 and later publish Python encoders rather than templates: the native encoder
  // wins over whatever template a converted file carries.
  if (auto deepseek = DeepseekChatTemplateForArchitecture(architecture)) return deepseek;
  if (Trim(source).empty()) {
    if (tokenizer.kind == model::TokenizerData::Kind::kScoreBpe) {
      return std::unique_ptr<ChatTemplate>(new PlainTemplate());
    }
    return std::unique_ptr<ChatTemplate>(new ChatMlTemplate());
  }
  const std::string normalized = NormalizeNewlines(source);
  if (normalized == kChatMl) return std::unique_ptr<ChatTemplate>(new ChatMlTemplate());
  if (normalized.size() > kSmolPrefix.size() + kSmolSuffix.size() &&
      normalized.compare(0, kSmolPrefix.size(), kSmolPrefix) == 0 &&
      normalized.compare(normalized.size() - kSmolSuffix.size(), kSmolSuffix.size(), kSmolSuffix) ==
          0) {
    const std::string_view middle =
        std::string_view(normalized)
            .substr(kSmolPrefix.size(),
                    normalized.size() - kSmolPrefix.size() - kSmolSuffix.size());
    std::optional<std::string> system = UnescapeJinjaLiteral(middle);
    if (system.has_value()) {
      return std::unique_ptr<ChatTemplate>(new ChatMlTemplate(std::move(system)));
    }
  }
  return UnimplementedError(
      util::codes::kUnsupportedChatTemplate,
      fmt::format("no native encoder reproduces the chat template of this {} model",
                  architecture.empty() ? std::string_view("unknown") : architecture));
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplateByName(std::string_view name) {
  if (name == "chatml") return std::unique_ptr<ChatTemplate>(new ChatMlTemplate());
  if (name == "plain") return std::unique_ptr<ChatTemplate>(new PlainTemplate());
  if (auto deepseek = CreateDeepseekChatTemplate(name)) return deepseek;
  return NotFoundError(util::codes::kUnknownChatTemplate,
                       "unknown chat template \"" + std::string(name) + "\"");
}

}  // namespace deepinfer::tokenizer
