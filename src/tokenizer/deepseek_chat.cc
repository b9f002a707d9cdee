// DeepSeek V3 and V3.1 (ports of their Jinja templates) and the encoder lookup. V3.2, V4 and
// V4.1 are in deepseek_dsml_chat.cc.

#include "tokenizer/deepseek_chat.h"

#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kOutputsBegin = "<｜tool▁outputs▁begin｜>";
constexpr std::string_view kOutputsEnd = "<｜tool▁outputs▁end｜>";
constexpr std::string_view kOutputBegin = "<｜tool▁output▁begin｜>";
constexpr std::string_view kOutputEnd = "<｜tool▁output▁end｜>";

// Fingerprints of the official templates (TemplateFingerprint, one trailing newline dropped).
constexpr uint64_t kV3Fingerprint = 0xebe3604156dc466aULL;   // DeepSeek-V3 tokenizer_config
constexpr uint64_t kV31Fingerprint = 0x28885eb8eebd9c32ULL;  // DeepSeek-V3.1 tokenizer_config

// Both templates gather every system message in front, joined by "\n\n".
std::string SystemPrompt(const std::vector<ChatMessage>& messages) {
  std::string out;
  bool first = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first) out += "\n\n";
    out += m.content;
    first = false;
  }
  return out;
}

// The V3 template's "```json" tool call body.
void AppendV3Call(const ToolCall& call, std::string* out) {
  *out += kCallBegin;
  *out += call.type;
  *out += kSep;
  *out += call.name;
  *out += "\n```json\n";
  *out += call.arguments;
  *out += "\n```";
  *out += kCallEnd;
}

}  // namespace

std::string DeepseekV3Template::Render(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  std::string out(kBos);
  out += SystemPrompt(messages);
  // The template's namespace: is_first is never reset, so only the conversation's first tool
  // call opens the calls block; is_output_first is never reset either.
  bool is_first = false;
  bool is_tool = false;
  bool is_output_first = true;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      is_tool = false;
      out += kUser;
      out += m.content;
    } else if (m.role == "assistant" && !m.has_content) {
      is_tool = false;
      for (const ToolCall& call : m.tool_calls) {
        if (!is_first) {
          out += kAssistant;
          out += kCallsBegin;
          AppendV3Call(call, &out);
          is_first = true;
        } else {
          out += "\n";
          AppendV3Call(call, &out);
          out += kCallsEnd;
          out += kEos;
        }
      }
    } else if (m.role == "assistant") {
      if (is_tool) {
        out += kOutputsEnd;
        is_tool = false;
      } else {
        out += kAssistant;
      }
      out += m.content;
      out += kEos;
    } else if (m.role == "tool") {
      is_tool = true;
      if (is_output_first) {
        out += kOutputsBegin;
        is_output_first = false;
      } else {
        out += "\n";
      }
      out += kOutputBegin;
      out += m.content;
      out += kOutputEnd;
    }
  }
  if (is_tool) out += kOutputsEnd;
  if (add_generation_prompt && !is_tool) out += kAssistant;
  return out;
}

std::string DeepseekV31Template::Render(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  auto out = Render(messages, options);
  return out.ok() ? *std::move(out) : std::string();
}

absl::StatusOr<std::string> DeepseekV31Template::Render(const std::vector<ChatMessage>& messages,
                                                        const ChatOptions& options) const {
  std::string out(kBos);
  out += SystemPrompt(messages);
  bool is_tool = false;
  bool is_last_user = false;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      is_tool = false;
      is_last_user = true;
      out += kUser;
      out += m.content;
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (is_last_user) {
        out += kAssistant;
        out += "</think>";
      }
      is_last_user = false;
      is_tool = false;
      bool first = true;
      for (const ToolCall& call : m.tool_calls) {
        if (first && m.has_content) out += m.content;
        if (first) out += kCallsBegin;
        first = false;
        out += kCallBegin;
        out += call.name;
        out += kSep;
        out += call.arguments;
        out += kCallEnd;
      }
      out += kCallsEnd;
      out += kEos;
    } else if (m.role == "assistant") {
      if (is_last_user) {
        out += kAssistant;
        out += "</think>";  // a prefix (continued) turn would open <think>; not modeled
      }
      is_last_user = false;
      if (is_tool) {
        out += m.content;
        is_tool = false;
      } else {
        const size_t end_think = m.content.find("</think>");
        out += end_think == std::string::npos ? std::string_view(m.content)
                                              : std::string_view(m.content).substr(end_think + 8);
      }
      out += kEos;
    } else if (m.role == "tool") {
      is_last_user = false;
      is_tool = true;
      out += kOutputBegin;
      out += m.content;
      out += kOutputEnd;
    }
  }
  if (options.add_generation_prompt && is_last_user && !is_tool) {
    out += kAssistant;
    out += options.thinking ? "<think>" : "</think>";
  }
  return out;
}

uint64_t TemplateFingerprint(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::unique_ptr<ChatTemplate> CreateDeepseekChatTemplate(std::string_view name) {
  if (name == "deepseek-v3") return std::make_unique<DeepseekV3Template>();
  if (name == "deepseek-v3.1") return std::make_unique<DeepseekV31Template>();
  if (name == "deepseek-v3.2") return std::make_unique<DeepseekV32Template>();
  if (name == "deepseek-v4") return std::make_unique<DeepseekV4Template>(/*v41=*/false);
  if (name == "deepseek-v4.1") return std::make_unique<DeepseekV4Template>(/*v41=*/true);
  return nullptr;
}

std::unique_ptr<ChatTemplate> DeepseekChatTemplateForJinja(std::string_view source) {
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  const uint64_t h = TemplateFingerprint(source);
  if (h == kV3Fingerprint) return std::make_unique<DeepseekV3Template>();
  if (h == kV31Fingerprint) return std::make_unique<DeepseekV31Template>();
  return nullptr;
}

std::unique_ptr<ChatTemplate> DeepseekChatTemplateForArchitecture(std::string_view architecture) {
  if (architecture == "deepseek_v32") return CreateDeepseekChatTemplate("deepseek-v3.2");
  if (architecture == "deepseek_v4") return CreateDeepseekChatTemplate("deepseek-v4");
  if (architecture == "deepseek_v41") return CreateDeepseekChatTemplate("deepseek-v4.1");
  return nullptr;
}

}  // namespace deepinfer::tokenizer
