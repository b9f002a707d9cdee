// libFuzzer target for chat rendering: hostile conversations (any role, tool calls and results,
// reasoning, text that looks like special tokens or DSML, invalid UTF-8, tool definitions that
// are not JSON) rendered by every encoder in tokenizer/ (ChatML with and without a default
// system prompt, plain, DeepSeek V3, V3.1, V3.2, V4 and V4.1), through both Render overloads
// and RenderChat with a continued final message.
// An encoder must return a prompt or an error status, never crash or hang.
//
// Input layout (byte-oriented, so mutations stay meaningful): byte 0 holds the options (bit 0
// add_generation_prompt, bit 1 thinking, bits 4..7 pick reasoning_effort from kEfforts); the
// rest is records separated by 0x1E. The first record is the tool definitions, separated by
// 0x1D; every further record is a message whose fields are separated by 0x1F: role, content
// (a lone NUL byte: null content), reasoning_content, tool_call_id, name, then (id, name,
// arguments) per tool call. Seeds: tests/fuzz/make_seeds.py.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace {

namespace dt = deepinfer::tokenizer;

constexpr std::string_view kBos =
    "<\xef\xbd\x9c"
    "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
constexpr const char* kEfforts[16] = {"",       "low",   "high",  "xhigh", "max", "minimal",
                                      "medium", "ultra", "1",     "100",   "0",   "101",
                                      "50",     "-1",    "high ", "none"};

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

const std::vector<std::unique_ptr<dt::ChatTemplate>>& Templates() {
  static const auto* templates = [] {
    auto* t = new std::vector<std::unique_ptr<dt::ChatTemplate>>;
    for (const char* name : {"chatml", "plain", "deepseek-v3", "deepseek-v3.1", "deepseek-v3.2",
                             "deepseek-v4", "deepseek-v4.1"}) {
      auto made = dt::CreateChatTemplateByName(name);
      if (!made.ok()) __builtin_trap();
      t->push_back(*std::move(made));
    }
    t->push_back(std::make_unique<dt::ChatMlTemplate>("You are a helpful AI assistant."));
    return t;
  }();
  return *templates;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  dt::ChatOptions options;
  options.add_generation_prompt = (data[0] & 1) != 0;
  options.thinking = (data[0] & 2) != 0;
  options.reasoning_effort = kEfforts[data[0] >> 4];
  std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> records = Split(input, '\x1e');
  for (std::string_view tool : Split(records[0], '\x1d')) {
    if (!tool.empty()) options.tools.emplace_back(tool);
  }
  std::vector<dt::ChatMessage> messages;
  for (size_t r = 1; r < records.size(); ++r) {
    std::vector<std::string_view> f = Split(records[r], '\x1f');
    dt::ChatMessage m;
    m.role = std::string(f[0]);
    if (f.size() > 1) {
      m.has_content = f[1] != std::string_view("\0", 1);
      if (m.has_content) m.content = std::string(f[1]);
    }
    if (f.size() > 2) m.reasoning_content = std::string(f[2]);
    if (f.size() > 3) m.tool_call_id = std::string(f[3]);
    if (f.size() > 4) m.name = std::string(f[4]);
    for (size_t i = 5; i < f.size(); i += 3) {
      dt::ToolCall call;
      call.id = std::string(f[i]);
      if (i + 1 < f.size()) call.name = std::string(f[i + 1]);
      if (i + 2 < f.size()) call.arguments = std::string(f[i + 2]);
      m.tool_calls.push_back(std::move(call));
    }
    messages.push_back(std::move(m));
  }

  for (const auto& t : Templates()) {
    std::string plain = t->Render(messages, options.add_generation_prompt);
    auto rendered = t->Render(messages, options);
    if (t->writes_bos()) {
      // The DeepSeek encodings open with BOS; the bool overload gives "" where it fails.
      if (!plain.empty() && plain.compare(0, kBos.size(), kBos) != 0) __builtin_trap();
      if (rendered.ok() && rendered->compare(0, kBos.size(), kBos) != 0) __builtin_trap();
    }
    // A continued final message (assistant prefill): an error or a prompt, and never a prompt
    // for a conversation without a final message.
    dt::ChatOptions open = options;
    open.add_generation_prompt = false;
    open.continue_final_message = true;
    auto continued = dt::RenderChat(*t, messages, open);
    if (continued.ok() && messages.empty()) __builtin_trap();
  }
  return 0;
}
