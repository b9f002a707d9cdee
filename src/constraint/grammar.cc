#include "constraint/grammar.h"

#include <algorithm>
#include <bit>
#include <exception>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <variant>

#include "dlpack/dlpack.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"
#include "xgrammar/xgrammar.h"

namespace deepinfer::constraint {
namespace {

absl::Status Invalid(std::string_view what, std::string_view why) {
  // xgrammar prefixes its messages with "[hh:mm:ss] /path/to/file.cc:123: ": the reason only.
  if (why.starts_with('[')) {
    if (const size_t end = why.find("] "); end != std::string_view::npos) why.remove_prefix(end + 2);
  }
  if (const size_t colon = why.find(": "); colon != std::string_view::npos) {
    const std::string_view where = why.substr(0, colon);
    if (where.find(".cc:") != std::string_view::npos || where.find(".h:") != std::string_view::npos) {
      why.remove_prefix(colon + 2);
    }
  }
  // The backend's messages can be long (a schema echoed back): one line, bounded.
  std::string reason(why.substr(0, 600));
  for (char& c : reason) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return InvalidArgumentError(util::codes::kInvalidConstraint,
                              fmt::format("invalid {}: {}", what, reason));
}

// `s` as a literal of xgrammar's EBNF: UTF-8 kept, quotes, backslashes and control characters
// escaped as \uXXXX (a fixed width, so that a following hex digit is not swallowed).
std::string EbnfLiteral(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
    case ConstraintKind::kStructuralTag:
      return "structural_tag";
  }
  return "grammar";
}

class CompiledConstraint {
 public:
  CompiledConstraint(xgrammar::CompiledGrammar grammar, int32_t logits_size,
                     std::shared_ptr<const std::vector<bool>> refused)
      : grammar(std::move(grammar)), logits_size(logits_size), refused(std::move(refused)) {}
  const xgrammar::CompiledGrammar grammar;
  const int32_t logits_size;
  // [logits_size]: the control tokens that are not end tokens, which no grammar accepts.
  // ConstraintMatcher::Accept refuses them itself: xgrammar would log a warning for each (a
  // speculative draft can be one).
  const std::shared_ptr<const std::vector<bool>> refused;
};

// Bounds on what a client may ask to compile (compile time grows with size, superlinearly for
// choices: 20,000 take seconds).
constexpr size_t kMaxConstraintBytes = size_t{256} << 10;
constexpr size_t kMaxChoices = 4096;

// The compile cache's bound: clients choose the schemas, so it must not grow without limit (the
// least recently used compiled grammars go first).
constexpr int64_t kCompileCacheBytes = int64_t{256} << 20;

struct GrammarCompiler::Impl {
  Impl(const xgrammar::TokenizerInfo& info, int num_threads,
       std::shared_ptr<const std::vector<bool>> refused)
      : info(info),
        compiler(info, num_threads, /*cache_enabled=*/true, kCompileCacheBytes),
        refused(std::move(refused)) {}
  const xgrammar::TokenizerInfo info;  // structural tags resolve token references through it
  xgrammar::GrammarCompiler compiler;
  const std::shared_ptr<const std::vector<bool>> refused;  // CompiledConstraint::refused
  // Scratch for Compile's first-token probe, one per calling thread.
  static uint32_t* probe_mask(const ConstraintMatcher& m) {
    thread_local std::vector<uint32_t> mask;
    mask.resize(static_cast<size_t>(m.MaskWords()));
    return mask.data();
  }
};

GrammarCompiler::GrammarCompiler(std::unique_ptr<Impl> impl, int32_t logits_size)
    : impl_(std::move(impl)), logits_size_(logits_size) {}

GrammarCompiler::~GrammarCompiler() = default;

std::unique_ptr<GrammarCompiler> GrammarCompiler::Create(const tokenizer::Tokenizer& tokenizer,
                                                         int32_t logits_size,
                                                         const std::vector<int32_t>& eog_ids,
                                                         int num_threads) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> vocab(static_cast<size_t>(logits_size));
  std::vector<int32_t> stop;
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsEog(id)) stop.push_back(id);
    // Control tokens stay empty: xgrammar treats empty entries as special and never lets them
    // match grammar text.
    if (!tokenizer.IsSpecial(id)) vocab[static_cast<size_t>(id)] = tokenizer.TokenPiece(id);
  }
  for (int32_t id : eog_ids) {
    if (id >= 0 && id < logits_size && std::find(stop.begin(), stop.end(), id) == stop.end()) {
      stop.push_back(id);
    }
  }
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, logits_size, stop,
                               /*add_prefix_space=*/false);
  auto refused = std::make_shared<std::vector<bool>>(static_cast<size_t>(logits_size), false);
  for (int32_t id : info.GetSpecialTokenIds()) {
    if (id >= 0 && id < logits_size && std::find(stop.begin(), stop.end(), id) == stop.end()) {
      (*refused)[static_cast<size_t>(id)] = true;
    }
  }
  return std::unique_ptr<GrammarCompiler>(new GrammarCompiler(
      std::make_unique<Impl>(info, std::max(1, num_threads), std::move(refused)), logits_size));
}

namespace {

// Message of a structural tag error (a variant of xgrammar's exception types).
std::string ErrorText(const xgrammar::StructuralTagError& error) {
  return std::visit([](const auto& e) { return std::string(e.what()); }, error);
}

xgrammar::Grammar FromStructuralTag(const std::string& json,
                                    const xgrammar::TokenizerInfo& info) {
  auto result = xgrammar::Grammar::FromStructuralTag(json, info);
  if (auto* error = std::get_if<xgrammar::StructuralTagError>(&result)) {
    throw std::invalid_argument(ErrorText(*error));
  }
  return std::get<xgrammar::Grammar>(std::move(result));
}

// xgrammar 0.2.9 writes a length-bounded JSON string (minLength / maxLength without pattern or
// format) as any characters but '"', '\\', CR and LF, so raw control characters, which JSON
// forbids, get through (a small model sampled them). The same bound written as a pattern takes
// xgrammar's JSON-string regex path, which leaves out every character JSON must escape (as the
// bounded rule does with '"' and '\\', escapes stay out). That path unrolls the bound, so only
// bounds up to kMaxRewrittenLength are rewritten; a longer one stays as xgrammar writes it.
constexpr int64_t kMaxRewrittenLength = 256;

void BoundedStringsAsPatterns(util::Json& node) {
  if (node.is_array()) {
    for (util::Json& item : node) BoundedStringsAsPatterns(item);
    return;
  }
  if (!node.is_object()) return;
  auto bound = [&node](const char* key) -> std::optional<int64_t> {
    auto it = node.find(key);
    if (it == node.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  auto type = node.find("type");
  if (type != node.end() && *type == "string" && !node.contains("pattern") &&
      !node.contains("format")) {
    const std::optional<int64_t> lo = bound("minLength");
    const std::optional<int64_t> hi = bound("maxLength");
    const int64_t min = std::max<int64_t>(lo.value_or(0), 0);
    if ((lo || hi) && min <= kMaxRewrittenLength && hi.value_or(0) <= kMaxRewrittenLength &&
        (!hi || *hi >= min)) {
      node["pattern"] = hi ? fmt::format("^.{{{},{}}}$", min, *hi) : fmt::format("^.{{{},}}$", min);
    }
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Values, not schemas: left as the client wrote them.
    if (it.key() == "enum" || it.key() == "const" || it.key() == "default" ||
        it.key() == "examples") {
      continue;
    }
    BoundedStringsAsPatterns(it.value());
  }
}

// Clients write the schemas, and xgrammar's converter recurses through them ($ref hops
// included: a flat chain of 600 references overflows a thread's stack) and takes superlinear
// time in enum sizes (100,000 values: minutes). SchemaCheck bounds both before xgrammar sees a
// schema, and refuses the keywords xgrammar would ignore (the output would then break the
// schema): a 400 rather than a silently wrong answer.
constexpr int kMaxSchemaDepth = 32;       // nesting of subschemas, $ref hops included
constexpr int64_t kMaxSchemaItems = 4096;  // subschemas plus enum values
constexpr const char* kIgnoredKeywords[] = {"not",      "if",          "then",
                                            "else",     "dependentRequired", "dependentSchemas",
                                            "uniqueItems", "contains", "minContains",
                                            "maxContains"};

class SchemaCheck {
 public:
  explicit SchemaCheck(const util::Json& root) : root_(root) {}
  // Throws std::invalid_argument with the reason.
  void Run() { Visit(root_, 0); }

 private:
  [[noreturn]] static void TooDeep() {
    throw std::invalid_argument(fmt::format(
        "the schema nests deeper than {} levels ($ref hops included)", kMaxSchemaDepth));
  }

  // Returns the subtree's height (subschema levels, $ref hops included).
  int Visit(const util::Json& node, int depth) {
    if (depth > kMaxSchemaDepth) TooDeep();
    if (!node.is_object()) return 0;
    Count(1);
    for (const char* keyword : kIgnoredKeywords) {
      if (node.contains(keyword)) {
        throw std::invalid_argument(
            fmt::format("'{}' is not supported by the grammar engine", keyword));
      }
    }
    if (auto e = node.find("enum"); e != node.end() && e->is_array()) Count(e->size());
    if (auto p = node.find("pattern"); p != node.end() && p->is_string()) {
      // xgrammar skips a schema pattern it cannot compile (lookarounds, backreferences) with a
      // warning; compiling it here makes that a 400 with the reason.
      try {
        xgrammar::Grammar::FromRegex(p->get<std::string>());
      } catch (const std::exception& e) {
        throw std::invalid_argument(fmt::format("pattern '{}': {}", p->get<std::string>(), e.what()));
      }
    }
    int height = 0;
    auto child = [&](const util::Json& sub) { height = std::max(height, Visit(sub, depth + 1)); };
    for (const char* map : {"properties", "patternProperties", "$defs", "definitions"}) {
      if (auto m = node.find(map); m != node.end() && m->is_object()) {
        for (const auto& [name, sub] : m->items()) child(sub);
      }
    }
    for (const char* key : {"items", "additionalProperties", "additionalItems", "propertyNames",
                            "unevaluatedProperties", "unevaluatedItems"}) {
      if (auto s = node.find(key); s != node.end()) {
        if (s->is_array()) {
          for (const util::Json& sub : *s) child(sub);
        } else {
          child(*s);
        }
      }
    }
    for (const char* list : {"prefixItems", "allOf", "anyOf", "oneOf"}) {
      if (auto l = node.find(list); l != node.end() && l->is_array()) {
        for (const util::Json& sub : *l) child(sub);
      }
    }
    if (auto r = node.find("$ref"); r != node.end() && r->is_string()) {
      height = std::max(height, Ref(r->get<std::string>(), depth + 1));
    }
    return height + 1;
  }

  // A local reference: each target is checked once (xgrammar builds one rule per target too);
  // a reference to a target being checked is recursion, which xgrammar turns into a rule.
  int Ref(const std::string& ref, int depth) {
    if (ref.empty() || ref[0] != '#') {
      throw std::invalid_argument(
          fmt::format("only local references ('#/...') are supported, not '{}'", ref));
    }
    if (auto done = height_.find(ref); done != height_.end()) {
      if (depth + done->second - 1 > kMaxSchemaDepth) TooDeep();
      return done->second;
    }
    if (std::find(open_.begin(), open_.end(), ref) != open_.end()) return 0;
    const util::Json* target = &root_;
    if (ref.size() > 1) {
      try {
        const util::Json::json_pointer pointer(ref.substr(1));
        if (!root_.contains(pointer)) throw std::invalid_argument("");
        target = &root_.at(pointer);
      } catch (const std::exception&) {
        throw std::invalid_argument(fmt::format("'$ref' '{}' points to nothing", ref));
      }
    }
    open_.push_back(ref);
    const int height = Visit(*target, depth);
    open_.pop_back();
    height_[ref] = height;
    return height;
  }

  void Count(size_t n) {
    items_ += static_cast<int64_t>(n);
    if (items_ > kMaxSchemaItems) {
      throw std::invalid_argument(fmt::format(
          "the schema is too large (more than {} subschemas and enum values)", kMaxSchemaItems));
    }
  }

  const util::Json& root_;
  int64_t items_ = 0;
  std::vector<std::string> open_;        // references being checked, outermost first
  std::map<std::string, int> height_;  // checked references
};

// A schema as xgrammar gets it: parsed (nesting at most util::kMaxJsonDepth), checked
// (SchemaCheck) and with bounded strings as patterns. Throws std::invalid_argument.
util::Json PreparedSchema(util::Json schema) {
  SchemaCheck(schema).Run();
  BoundedStringsAsPatterns(schema);
  return schema;
}

util::Json ParseConstraintJson(const std::string& text) {
  absl::StatusOr<util::Json> doc = util::ParseJson(text);
  if (!doc.ok()) throw std::invalid_argument(std::string(doc.status().message()));
  return *std::move(doc);
}

// A structural tag with every json_schema format's schema prepared (PreparedSchema).
void PrepareTagSchemas(util::Json& node) {
  if (node.is_array()) {
    for (util::Json& item : node) PrepareTagSchemas(item);
    return;
  }
  if (!node.is_object()) return;
  if (auto schema = node.find("json_schema");
      schema != node.end() && node.value("type", util::Json()) == "json_schema") {
    *schema = PreparedSchema(*schema);
    return;
  }
  for (auto& [key, value] : node.items()) PrepareTagSchemas(value);
}

// The grammar of `spec` itself. Throws the backend's exceptions for a malformed constraint.
//
// JSON comes out in one line with ", " and ": " between items: free whitespace would let a small
// model pad with spaces until max_tokens (a known failure of any-whitespace JSON grammars, vLLM's
// disable_any_whitespace).
xgrammar::Grammar GrammarOf(const ConstraintSpec& spec, const xgrammar::TokenizerInfo& info) {
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
      // Any JSON object: the schema {"type": "object"} rather than the builtin JSON grammar,
      // which also admits arrays and scalars (OpenAI's json_object is an object).
      return xgrammar::Grammar::FromJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                               std::nullopt, std::nullopt, /*strict_mode=*/false);
    case ConstraintKind::kJsonSchema:
      // strict_mode (xgrammar's and so vLLM's default): an object has only the properties its
      // schema names unless additionalProperties or patternProperties allow more; without
      // properties at all, any. Free extra properties would let a model repeat a key.
      return xgrammar::Grammar::FromJSONSchema(
          util::DumpJson(PreparedSchema(ParseConstraintJson(spec.text))),
          /*any_whitespace=*/false, std::nullopt, std::nullopt, /*strict_mode=*/true);
    case ConstraintKind::kRegex:
      return xgrammar::Grammar::FromRegex(spec.text);
    case ConstraintKind::kChoice: {
      if (spec.choices.empty()) throw std::invalid_argument("the list of choices is empty");
      std::string ebnf = "root ::= ";
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (spec.choices[i].empty()) throw std::invalid_argument("a choice is empty");
        ebnf += (i > 0 ? " | " : "") + EbnfLiteral(spec.choices[i]);
      }
      return xgrammar::Grammar::FromEBNF(ebnf, "root");
    }
    case ConstraintKind::kGrammar:
      return xgrammar::Grammar::FromEBNF(spec.text, "root");
    case ConstraintKind::kStructuralTag: {
      util::Json tag = ParseConstraintJson(spec.text);
      PrepareTagSchemas(tag);
      return FromStructuralTag(util::DumpJson(tag), info);
    }
  }
  throw std::invalid_argument("unknown constraint kind");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const ConstraintSpec& spec) {
  const char* what = ConstraintKindName(spec.kind);
  if (spec.text.size() > kMaxConstraintBytes) {
    return Invalid(what, fmt::format("larger than {} KiB", kMaxConstraintBytes >> 10));
  }
  if (spec.choices.size() > kMaxChoices) {
    return Invalid(what, fmt::format("more than {} choices", kMaxChoices));
  }
  try {
    xgrammar::Grammar grammar = GrammarOf(spec, impl_->info);
    if (!spec.reasoning_end.empty()) {
      // Free text that never contains the end marker, the marker, then the constraint.
      util::Json prefix = {
          {"type", "structural_tag"},
          {"format",
           {{"type", "sequence"},
            {"elements",
             util::Json::array({{{"type", "any_text"},
                                 {"excludes", util::Json::array({spec.reasoning_end})}},
                                {{"type", "const_string"}, {"value", spec.reasoning_end}}})}}}};
      grammar = xgrammar::Grammar::Concat(
          {FromStructuralTag(util::DumpJson(prefix), impl_->info), grammar});
    }
    // Cached by the grammar's text: a repeated schema is converted again (about a millisecond)
    // but its token tables are computed once.
    auto compiled = std::make_shared<const CompiledConstraint>(
        impl_->compiler.CompileGrammar(grammar), logits_size_, impl_->refused);
    // A grammar that allows no first token ("root ::= root") is refused here rather than
    // failing the request after it started.
    if (ConstraintMatcher probe(compiled); probe.FillMask(impl_->probe_mask(probe)) == 0) {
      return Invalid(what, "the constraint matches no output");
    }
    return compiled;
  } catch (const std::exception& e) {
    return Invalid(what, e.what());
  }
}

struct ConstraintMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledConstraint> c)
      : compiled(std::move(c)), matcher(compiled->grammar) {}
  std::shared_ptr<const CompiledConstraint> compiled;  // the matcher reads its tables
  xgrammar::GrammarMatcher matcher;
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> compiled)
    : impl_(std::make_unique<Impl>(std::move(compiled))) {}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;

int32_t ConstraintMatcher::MaskWords() const {
  return xgrammar::GetBitmaskSize(impl_->compiled->logits_size);
}

int32_t ConstraintMatcher::FillMask(uint32_t* mask) {
  const int32_t words = MaskWords();
  if (impl_->matcher.IsTerminated()) {
    std::fill(mask, mask + words, 0u);
    return 0;
  }
  int64_t shape[1] = {words};
  DLTensor t{};
  t.data = mask;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
  // Bits past the last token (padding of the last word) never count.
  const int32_t tail = impl_->compiled->logits_size % 32;
  if (tail != 0) mask[words - 1] &= (1u << tail) - 1;
  int32_t allowed = 0;
  for (int32_t w = 0; w < words; ++w) allowed += std::popcount(mask[w]);
  return allowed;
}

bool ConstraintMatcher::Accept(int32_t token) {
  if (token < 0 || token >= impl_->compiled->logits_size || impl_->matcher.IsTerminated() ||
      (*impl_->compiled->refused)[static_cast<size_t>(token)]) {
    return false;
  }
  return impl_->matcher.AcceptToken(token);
}

void ConstraintMatcher::Rollback(int32_t num_tokens) {
  if (num_tokens > 0) impl_->matcher.Rollback(num_tokens);
}

bool ConstraintMatcher::AcceptText(const std::string& text) {
  return !impl_->matcher.IsTerminated() && impl_->matcher.AcceptString(text);
}

bool ConstraintMatcher::IsTerminated() const { return impl_->matcher.IsTerminated(); }

bool ConstraintMatcher::IsCompleted() const { return impl_->matcher.IsCompleted(); }

}  // namespace deepinfer::constraint
