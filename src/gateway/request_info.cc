#include "gateway/request_info.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <vector>

#include "api/errors.h"
#include "gateway/key_store.h"
#include "nlohmann/json.hpp"

namespace deepinfer::gateway {
namespace {

using SaxJson = nlohmann::json;

constexpr size_t kMaxDepth = 128;
constexpr size_t kOpeningMessages = 8;             // messages looked at for the digest
constexpr size_t kOpeningBytesPerPart = 64 << 10;  // text of each kept for hashing

bool IEqualsPrefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsPromptField(std::string_view key) {
  return key == "messages" || key == "prompt" || key == "input" || key == "system" ||
         key == "instructions";
}

// Keys whose string values are not prompt text (image and file payloads, URLs).
bool IsDataKey(std::string_view key) {
  return key == "url" || key == "data" || key == "image_url" || key == "b64_json" ||
         key == "file_data" || key == "file_id" || key == "image";
}

// Where each nesting level is: in an object (with the current key) or an array (with an index).
struct Frame {
  bool object = false;
  std::string key;
  int64_t index = -1;
};

struct Part {
  std::string role;
  std::string text;
};

class Handler : public nlohmann::json_sax<SaxJson> {
 public:
  explicit Handler(BodyInfo* info) : info_(info) {}

  bool null() override {
    ArrayElement();
    return true;
  }
  bool boolean(bool v) override {
    ArrayElement();
    if (AtTop("stream")) info_->stream = v;
    return true;
  }
  bool number_integer(number_integer_t v) override {
    ArrayElement();
    Integer(v);
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    ArrayElement();
    Integer(v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v));
    return true;
  }
  bool number_float(number_float_t, const string_t&) override {
    ArrayElement();
    return true;
  }
  bool binary(binary_t&) override {
    ArrayElement();
    return true;
  }
  bool string(string_t& v) override {
    ArrayElement();
    if (AtTop("user")) info_->user = v;
    if (AtTop("model")) info_->model = v;
    if (stack_.size() == 2 && stack_[0].key == "metadata" && stack_[1].object &&
        stack_[1].key == "user_id") {
      info_->metadata_user_id = v;
    }
    if (InPrompt() && !IsDataKey(CurrentKey())) {
      info_->prompt_text_bytes += static_cast<int64_t>(v.size());
      Append(v, /*is_key=*/false);
    }
    return true;
  }
  bool start_object(std::size_t) override {
    ArrayElement();
    if (stack_.size() >= kMaxDepth) return false;
    stack_.push_back(Frame{true, "", -1});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = k;
    if (InPrompt() && stack_.size() > 1) Append(k, /*is_key=*/true);
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    ArrayElement();
    if (stack_.size() >= kMaxDepth) return false;
    stack_.push_back(Frame{false, "", -1});
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  std::vector<Part> parts;  // [0] is the system text; then one per opening message
  int first_user = -1;      // index into parts

 private:
  // `stack_[0]` is the top-level object; its current key names the top-level field.
  bool AtTop(std::string_view key) const {
    return stack_.size() == 1 && stack_[0].object && stack_[0].key == key;
  }
  bool InPrompt() const {
    return !stack_.empty() && stack_[0].object && IsPromptField(stack_[0].key);
  }
  std::string_view CurrentKey() const {
    return stack_.empty() || !stack_.back().object ? std::string_view() : stack_.back().key;
  }

  // Called as a value or container opens: arrays count their elements.
  void ArrayElement() {
    if (!stack_.empty() && !stack_.back().object) stack_.back().index++;
  }

  void Integer(int64_t v) {
    if (stack_.size() == 1 && stack_[0].object) {
      const std::string& k = stack_[0].key;
      if (k == "max_tokens" || k == "max_completion_tokens" || k == "max_output_tokens") {
        info_->max_tokens = std::max(info_->max_tokens.value_or(v), v);
      }
    }
    // A token-id prompt: [1, 2, 3] or [[1, 2], [3]].
    if (stack_.size() >= 2 && stack_[0].key == "prompt" && !stack_.back().object) {
      info_->prompt_token_ids++;
    }
  }

  // Text for the conversation digest: system/instructions go to part 0, message i of
  // messages/input to part i + 1; roles are remembered to find the first user message.
  void Append(const std::string& text, bool is_key) {
    const std::string& top = stack_[0].key;
    size_t part;
    if (top == "system" || top == "instructions") {
      part = 0;
    } else if ((top == "messages" || top == "input") && stack_.size() >= 3 && !stack_[1].object &&
               stack_[1].index >= 0 && stack_[1].index < static_cast<int64_t>(kOpeningMessages)) {
      part = static_cast<size_t>(stack_[1].index) + 1;
      if (!is_key && stack_.size() == 3 && stack_[2].object && stack_[2].key == "role") {
        if (parts.size() <= part) parts.resize(part + 1);
        parts[part].role = text;
        if (text == "user" && (first_user < 0 || static_cast<int>(part) < first_user)) {
          first_user = static_cast<int>(part);
        }
        return;
      }
    } else {
      return;
    }
    if (parts.size() <= part) parts.resize(part + 1);
    std::string& out = parts[part].text;
    if (out.size() >= kOpeningBytesPerPart) return;
    out.append(text, 0, std::min(text.size(), kOpeningBytesPerPart - out.size()));
    out += is_key ? '\x1d' : '\x1f';
  }

  BodyInfo* info_;
  std::vector<Frame> stack_;
};

}  // namespace

std::string_view PresentedKey(std::string_view authorization, std::string_view x_api_key) {
  authorization = Trim(authorization);
  if (!authorization.empty()) {
    if (!IEqualsPrefix(authorization, "bearer ")) return {};
    return Trim(authorization.substr(7));
  }
  return Trim(x_api_key);
}

BodyInfo InspectBody(std::string_view body) {
  BodyInfo info;
  size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || body[first] != '{') return info;
  Handler handler(&info);
  bool ok = false;
  try {
    ok = SaxJson::sax_parse(body.begin(), body.end(), &handler);
  } catch (const std::exception&) {
    ok = false;
  }
  info.json_object = ok;
  const auto& parts = handler.parts;
  if (parts.size() > 1 || (!parts.empty() && !parts[0].text.empty())) {
    size_t last =
        handler.first_user > 0 ? static_cast<size_t>(handler.first_user) : parts.size() - 1;
    std::string opening;
    for (size_t i = 0; i <= last && i < parts.size(); ++i) {
      opening += parts[i].role;
      opening += '\x1e';
      opening += parts[i].text;
      opening += '\x1c';
    }
    Digest d = Sha256(opening);
    info.conversation_digest = ToHex(d.data(), d.size());
  }
  return info;
}

SessionId ExtractSession(std::string_view key_id, std::string_view header_value,
                         const BodyInfo& body) {
  SessionId session;
  std::string_view value;
  header_value = Trim(header_value);
  if (!header_value.empty()) {
    session.source = "header";
    value = header_value;
  } else if (!body.user.empty()) {
    session.source = "user";
    value = body.user;
  } else if (!body.metadata_user_id.empty()) {
    session.source = "metadata.user_id";
    value = body.metadata_user_id;
  } else if (!body.conversation_digest.empty()) {
    session.source = "conversation";
    value = body.conversation_digest;
  } else {
    return session;
  }
  std::string material;
  material.reserve(key_id.size() + session.source.size() + value.size() + 2);
  material.append(key_id);
  material += '\n';
  material += session.source;
  material += '\n';
  material.append(value);
  Digest d = Sha256(material);
  session.key = ToHex(d.data(), 16);
  return session;
}

int64_t PromptTokensLowerBound(const BodyInfo& body, const PreCheckLimits& limits) {
  int64_t per = std::max<int64_t>(limits.max_bytes_per_token, 1);
  return body.prompt_text_bytes / per + body.prompt_token_ids;
}

absl::Status PreCheck(const BodyInfo& body, const PreCheckLimits& limits) {
  const int64_t limit = limits.model_context_limit;
  const int64_t prompt = PromptTokensLowerBound(body, limits);
  const int64_t output = std::max<int64_t>(body.max_tokens.value_or(0), 0);
  if (output > limit) return api::ContextLengthError("max_tokens", prompt, output, limit);
  if (prompt + output > limit) {
    bool completion = body.prompt_token_ids > 0 || body.conversation_digest.empty();
    return api::ContextLengthError(completion ? "prompt" : "messages", prompt, output, limit);
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::gateway
