#include "gateway/request_info.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "boost/beast/core/string.hpp"
#include "fmt/format.h"
#include "gateway/key_store.h"
#include "http/errors.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include "util/error_codes.h"
#include "xxhash.h"

namespace deepinfer::gateway {
namespace {

using SaxJson = nlohmann::json;

constexpr size_t kMaxDepth = 128;
constexpr size_t kOpeningMessages = 8;             // messages looked at for the digest
constexpr size_t kOpeningBytesPerPart = 64 << 10;  // text of each kept for hashing

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsPromptField(std::string_view key) {
  return key == "messages" || key == "prompt" || key == "input" || key == "system" ||
         key == "instructions";
}

// The static name of a max-tokens field, or "".
std::string_view MaxTokensField(std::string_view key) {
  for (std::string_view f : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    if (key == f) return f;
  }
  return {};
}

// The static name of the prompt field a prompt text belongs to ("system" and "instructions"
// belong to the messages or input beside them, which an error asks to shorten).
std::string_view MessagesField(std::string_view key) {
  if (key == "prompt") return "prompt";
  if (key == "input" || key == "instructions") return "input";
  return "messages";
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

// One part of the conversation's opening. Its text goes straight into a hash state: no copy of
// a long system prompt, no allocation.
struct Part {
  std::string role;
  XXH3_state_t text;      // reset when the part is first touched
  size_t text_bytes = 0;  // fed so far, at most kOpeningBytesPerPart
};

// What the body's JSON events mean for routing. Driven by Walk over a simdjson document (the
// request path) or by the nlohmann SAX adapter (the reference for tests); for a valid body both
// deliver the same events in the same order.
class Inspector {
 public:
  explicit Inspector(BodyInfo* info) : info_(info) {}

  void Null() { ArrayElement(); }
  void Boolean(bool v) {
    ArrayElement();
    if (AtTop("stream")) info_->stream = v;
  }
  // `not_an_integer`: the number was beyond int64, or a float serve reads as no integer;
  // passed as INT64_MAX.
  void Integer(int64_t v, bool not_an_integer = false) {
    ArrayElement();
    if (depth_ == 1 && stack_[0].object) {
      const std::string& k = stack_[0].key;
      if (std::string_view field = MaxTokensField(k);
          !field.empty() && (!info_->max_tokens || v > *info_->max_tokens)) {
        info_->max_tokens = v;
        info_->max_tokens_field = field;
        info_->max_tokens_not_an_integer = not_an_integer;
      }
    }
    // A token-id prompt: [1, 2, 3] or [[1, 2], [3]].
    if (depth_ >= 2 && stack_[0].key == "prompt" && !back().object) {
      info_->prompt_token_ids++;
      if (info_->prompt_field.empty()) info_->prompt_field = "prompt";
    }
  }
  // serve reads an integral float up to 9e15 as that integer and refuses any other float in a
  // max-tokens field as no integer.
  void Float(double v) {
    if (depth_ == 1 && stack_[0].object && !MaxTokensField(stack_[0].key).empty()) {
      if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9.0e15) {
        Integer(static_cast<int64_t>(v));
      } else {
        Integer(INT64_MAX, /*not_an_integer=*/true);
      }
      return;
    }
    ArrayElement();
  }
  void String(std::string_view v) {
    ArrayElement();
    if (AtTop("user")) info_->user.assign(v);
    if (AtTop("model")) info_->model.assign(v);
    if (depth_ == 2 && stack_[0].key == "metadata" && stack_[1].object &&
        stack_[1].key == "user_id") {
      info_->metadata_user_id.assign(v);
    }
    if (InPrompt() && !IsDataKey(CurrentKey())) {
      info_->prompt_text_bytes += static_cast<int64_t>(v.size());
      if (info_->prompt_field.empty()) info_->prompt_field = MessagesField(stack_[0].key);
      Append(v);
    }
  }
  bool StartObject() { return Open(true); }
  void Key(std::string_view k) { stack_[depth_ - 1].key.assign(k); }
  void EndObject() { Close(); }
  bool StartArray() { return Open(false); }
  void EndArray() { Close(); }

  // [0] is the system text; then one per opening message. [0, num_parts) are in use.
  std::array<Part, kOpeningMessages + 1> parts;
  size_t num_parts = 0;
  int first_user = -1;  // index into parts

 private:
  bool Open(bool object) {
    ArrayElement();
    if (depth_ >= kMaxDepth) return false;
    // Frames are reused, so that their key strings keep their capacity between requests.
    if (depth_ == stack_.size()) stack_.emplace_back();
    Frame& f = stack_[depth_++];
    f.object = object;
    f.key.clear();
    f.index = -1;
    return true;
  }
  void Close() { --depth_; }

  // `stack_[0]` is the top-level object; its current key names the top-level field.
  bool AtTop(std::string_view key) const {
    return depth_ == 1 && stack_[0].object && stack_[0].key == key;
  }
  bool InPrompt() const { return depth_ > 0 && stack_[0].object && IsPromptField(stack_[0].key); }
  std::string_view CurrentKey() const {
    return depth_ == 0 || !back().object ? std::string_view() : back().key;
  }
  const Frame& back() const { return stack_[depth_ - 1]; }

  // Called as a value or container opens: arrays count their elements.
  void ArrayElement() {
    if (depth_ > 0 && !stack_[depth_ - 1].object) stack_[depth_ - 1].index++;
  }

  // Text for the conversation digest: system/instructions go to part 0, message i of
  // messages/input to part i + 1 (a string input is message 0, from the user); roles are
  // remembered to find the first user message. Only text counts (plain strings, "content" and
  // "text" values), not keys or block types, so that a message hashes alike in each API's shape:
  // a string, text blocks, or Responses items sent back for the next turn.
  void Append(std::string_view text) {
    const std::string& top = stack_[0].key;
    const std::string_view key = CurrentKey();
    size_t part;
    if (top == "system" || top == "instructions") {
      if (depth_ > 1 && key != "text") return;
      part = 0;
    } else if (top == "input" && depth_ == 1) {
      part = 1;
      Touch(part);
      if (parts[part].role.empty()) parts[part].role = "user";
      first_user = 1;
    } else if ((top == "messages" || top == "input") && depth_ >= 3 && !stack_[1].object &&
               stack_[1].index >= 0 && stack_[1].index < static_cast<int64_t>(kOpeningMessages)) {
      part = static_cast<size_t>(stack_[1].index) + 1;
      if (depth_ == 3 && stack_[2].object && key == "role") {
        Touch(part);
        parts[part].role.assign(text);
        if (text == "user" && (first_user < 0 || static_cast<int>(part) < first_user)) {
          first_user = static_cast<int>(part);
        }
        return;
      }
      if (key != "content" && key != "text") return;
    } else {
      return;
    }
    Touch(part);
    Part& out = parts[part];
    if (out.text_bytes >= kOpeningBytesPerPart) return;
    size_t n = std::min(text.size(), kOpeningBytesPerPart - out.text_bytes);
    static constexpr char kEnd = '\x1f';
    XXH3_128bits_update(&out.text, text.data(), n);
    XXH3_128bits_update(&out.text, &kEnd, 1);
    out.text_bytes += n + 1;
  }

  // Parts [num_parts, part] come into use.
  void Touch(size_t part) {
    for (; num_parts <= part; ++num_parts) XXH3_128bits_reset(&parts[num_parts].text);
  }

  // Frames [0, depth_) are live; closed frames stay in stack_ for reuse. Every event arrives
  // inside the top-level object (InspectBody starts only on a '{'), so stack_[0] exists.
  BodyInfo* info_;
  std::vector<Frame> stack_;
  size_t depth_ = 0;
};

// simdjson parsers keep buffers sized for the largest body they have seen, so one per connection
// thread would cost tens of KiB per open connection; a few shared ones, each used for a parse
// and a walk of about a microsecond, serve all threads.
class ParserPool {
 public:
  class Lease {
   public:
    explicit Lease(std::unique_ptr<simdjson::dom::parser> p) : p_(std::move(p)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (p_) ParserPool::Put(std::move(p_));
    }
    simdjson::dom::parser* operator->() { return p_.get(); }

   private:
    std::unique_ptr<simdjson::dom::parser> p_;
  };

  static Lease Get() {
    {
      Shared& shared = GetShared();
      absl::MutexLock lock(&shared.mu);
      if (!shared.idle.empty()) {
        Lease l(std::move(shared.idle.back()));
        shared.idle.pop_back();
        return l;
      }
    }
    return Lease(std::make_unique<simdjson::dom::parser>());
  }

 private:
  // Parsers past this many idle ones are freed (a burst of parallel parses does not pin memory).
  static constexpr size_t kMaxIdle = 8;
  // A parser grown past this by one large body is dropped rather than kept.
  static constexpr size_t kMaxKeptCapacity = size_t{1} << 20;

  struct Shared {
    absl::Mutex mu;
    std::vector<std::unique_ptr<simdjson::dom::parser>> idle ABSL_GUARDED_BY(mu);
  };

  static void Put(std::unique_ptr<simdjson::dom::parser> p) {
    if (p->capacity() > kMaxKeptCapacity) return;
    Shared& shared = GetShared();
    absl::MutexLock lock(&shared.mu);
    if (shared.idle.size() < kMaxIdle) shared.idle.push_back(std::move(p));
  }
  // Never freed: a connection thread may still return a parser during exit.
  static Shared& GetShared() {
    static auto* shared = new Shared();
    return *shared;
  }
};

// Feeds a parsed document to the Inspector in document order (the same events nlohmann's SAX
// parser delivers for a valid body). Returns false where the Inspector refuses to go deeper.
bool Walk(simdjson::dom::element e, Inspector* h) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT: {
      if (!h->StartObject()) return false;
      const simdjson::dom::object object = e.get_object().value_unsafe();
      for (simdjson::dom::key_value_pair field : object) {
        h->Key(field.key);
        if (!Walk(field.value, h)) return false;
      }
      h->EndObject();
      return true;
    }
    case simdjson::dom::element_type::ARRAY: {
      if (!h->StartArray()) return false;
      const simdjson::dom::array array = e.get_array().value_unsafe();
      for (simdjson::dom::element child : array) {
        if (!Walk(child, h)) return false;
      }
      h->EndArray();
      return true;
    }
    case simdjson::dom::element_type::INT64:
      h->Integer(e.get_int64().value_unsafe());
      return true;
    case simdjson::dom::element_type::UINT64: {
      const uint64_t v = e.get_uint64().value_unsafe();
      const bool overflows = v > static_cast<uint64_t>(INT64_MAX);
      h->Integer(overflows ? INT64_MAX : static_cast<int64_t>(v), overflows);
      return true;
    }
    case simdjson::dom::element_type::DOUBLE:
      h->Float(e.get_double().value_unsafe());
      return true;
    case simdjson::dom::element_type::STRING:
      h->String(e.get_string().value_unsafe());
      return true;
    case simdjson::dom::element_type::BOOL:
      h->Boolean(e.get_bool().value_unsafe());
      return true;
    case simdjson::dom::element_type::NULL_VALUE:
      h->Null();
      return true;
  }
  return false;
}

// The same events from nlohmann::json's SAX parser (the reference for tests).
class NlohmannAdapter : public nlohmann::json_sax<SaxJson> {
 public:
  explicit NlohmannAdapter(Inspector* h) : h_(h) {}
  bool null() override {
    h_->Null();
    return true;
  }
  bool boolean(bool v) override {
    h_->Boolean(v);
    return true;
  }
  bool number_integer(number_integer_t v) override {
    h_->Integer(v);
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    const bool overflows = v > static_cast<uint64_t>(INT64_MAX);
    h_->Integer(overflows ? INT64_MAX : static_cast<int64_t>(v), overflows);
    return true;
  }
  bool number_float(number_float_t v, const string_t&) override {
    h_->Float(v);
    return true;
  }
  bool binary(binary_t&) override {
    h_->Null();
    return true;
  }
  bool string(string_t& v) override {
    h_->String(v);
    return true;
  }
  bool start_object(std::size_t) override { return h_->StartObject(); }
  bool key(string_t& k) override {
    h_->Key(k);
    return true;
  }
  bool end_object() override {
    h_->EndObject();
    return true;
  }
  bool start_array(std::size_t) override { return h_->StartArray(); }
  bool end_array() override {
    h_->EndArray();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  Inspector* h_;
};

// Fills in the conversation digest from what the inspector kept.
void FinishDigest(const Inspector& inspector, BodyInfo* info) {
  const auto& parts = inspector.parts;
  const size_t num_parts = inspector.num_parts;
  if (num_parts > 1 || (num_parts == 1 && parts[0].text_bytes > 0)) {
    size_t last =
        inspector.first_user > 0 ? static_cast<size_t>(inspector.first_user) : num_parts - 1;
    // XXH3-128 over each part's role and text hash, in order. Not SHA-256: system prompts run
    // to tens of KiB and this runs per request (0.55 us per KiB for SHA-256 here, about 0.03
    // for XXH3). Engineered collisions only merge the routing of one key's own conversations:
    // the session key mixes in the key id with SHA-256 (ExtractSession).
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    static constexpr char kRoleEnd = '\x1e';
    static constexpr char kPartEnd = '\x1c';
    for (size_t i = 0; i <= last && i < num_parts; ++i) {
      XXH128_canonical_t text;
      XXH128_canonicalFromHash(&text, XXH3_128bits_digest(&parts[i].text));
      XXH3_128bits_update(&state, parts[i].role.data(), parts[i].role.size());
      XXH3_128bits_update(&state, &kRoleEnd, 1);
      XXH3_128bits_update(&state, text.digest, sizeof(text.digest));
      XXH3_128bits_update(&state, &kPartEnd, 1);
    }
    XXH128_canonical_t digest;
    XXH128_canonicalFromHash(&digest, XXH3_128bits_digest(&state));
    info->conversation_digest = ToHex(digest.digest, sizeof(digest.digest));
  }
}

bool StartsWithObject(std::string_view body) {
  size_t first = body.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && body[first] == '{';
}

}  // namespace

BodyInfo InspectBody(std::string_view body) {
  BodyInfo info;
  if (!StartsWithObject(body)) return info;
  // parse() copies the body into the parser's padded buffer (simdjson reads up to 64 bytes past
  // the end); the document lives in the parser until it goes back to the pool.
  ParserPool::Lease parser = ParserPool::Get();
  simdjson::dom::element doc;
  if (parser->parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS) return info;
  Inspector inspector(&info);
  if (!Walk(doc, &inspector)) return BodyInfo{};  // nested deeper than the inspector follows
  info.json_object = true;
  FinishDigest(inspector, &info);
  return info;
}

BodyInfo InspectBodyWithNlohmann(std::string_view body) {
  BodyInfo info;
  if (!StartsWithObject(body)) return info;
  Inspector inspector(&info);
  NlohmannAdapter adapter(&inspector);
  bool ok = false;
  try {
    ok = SaxJson::sax_parse(body.begin(), body.end(), &adapter);
  } catch (const std::exception&) {
    ok = false;
  }
  info.json_object = ok;
  FinishDigest(inspector, &info);
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
  if (output > std::numeric_limits<int32_t>::max()) {
    // Not a count serve could take: its parser's answer, not a context verdict.
    const std::string_view field = body.max_tokens_field;
    if (field == "max_output_tokens") {
      return http::RequestError(field, util::codes::kInvalidValue,
                                "'max_output_tokens' must be a positive integer.");
    }
    if (body.max_tokens_not_an_integer) {
      return http::RequestError(field, util::codes::kInvalidType,
                                fmt::format("'{}' must be an integer.", field));
    }
    return http::RequestError(field, util::codes::kInvalidValue,
                              fmt::format("'{}' is too large.", field));
  }
  if (output > limit) {
    std::string_view field = body.max_tokens_field.empty() ? "max_tokens" : body.max_tokens_field;
    return http::ContextLengthError(field, prompt, output, limit, /*prompt_is_lower_bound=*/true);
  }
  if (prompt + output > limit) {
    std::string_view field = body.prompt_field.empty() ? "messages" : body.prompt_field;
    return http::ContextLengthError(field, prompt, output, limit, /*prompt_is_lower_bound=*/true);
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::gateway
