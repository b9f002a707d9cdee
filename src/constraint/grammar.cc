#include "constraint/grammar.h"

#include <algorithm>
#include <bit>
#include <exception>
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
  CompiledConstraint(xgrammar::CompiledGrammar grammar, int32_t logits_size)
      : grammar(std::move(grammar)), logits_size(logits_size) {}
  const xgrammar::CompiledGrammar grammar;
  const int32_t logits_size;
};

// The compile cache's bound: clients choose the schemas, so it must not grow without limit (the
// least recently used compiled grammars go first).
constexpr int64_t kCompileCacheBytes = int64_t{256} << 20;

struct GrammarCompiler::Impl {
  explicit Impl(const xgrammar::TokenizerInfo& info, int num_threads)
      : info(info), compiler(info, num_threads, /*cache_enabled=*/true, kCompileCacheBytes) {}
  const xgrammar::TokenizerInfo info;  // structural tags resolve token references through it
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(std::unique_ptr<Impl> impl, int32_t logits_size)
    : impl_(std::move(impl)), logits_size_(logits_size) {}

GrammarCompiler::~GrammarCompiler() = default;

std::unique_ptr<GrammarCompiler> GrammarCompiler::Create(const tokenizer::Tokenizer& tokenizer,
                                                         int32_t logits_size, int num_threads) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> vocab(static_cast<size_t>(logits_size));
  std::vector<int32_t> stop;
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsEog(id)) stop.push_back(id);
    // Control tokens stay empty: xgrammar treats empty entries as special and never lets them
    // match grammar text.
    if (!tokenizer.IsSpecial(id)) vocab[static_cast<size_t>(id)] = tokenizer.TokenPiece(id);
  }
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, logits_size, stop,
                               /*add_prefix_space=*/false);
  return std::unique_ptr<GrammarCompiler>(
      new GrammarCompiler(std::make_unique<Impl>(info, std::max(1, num_threads)), logits_size));
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

// `json` with BoundedStringsAsPatterns applied; unparsable text is returned as it is, for the
// backend to report.
std::string WithBoundedStringPatterns(const std::string& json) {
  util::Json doc = util::Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return json;
  BoundedStringsAsPatterns(doc);
  return util::DumpJson(doc);
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
      // strict_mode false: properties the schema does not forbid may appear, as OpenAI's
      // non-strict mode and vLLM's default allow; strict schemas say additionalProperties.
      return xgrammar::Grammar::FromJSONSchema(WithBoundedStringPatterns(spec.text),
                                               /*any_whitespace=*/false, std::nullopt,
                                               std::nullopt, /*strict_mode=*/false);
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
    case ConstraintKind::kStructuralTag:
      return FromStructuralTag(WithBoundedStringPatterns(spec.text), info);
  }
  throw std::invalid_argument("unknown constraint kind");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const ConstraintSpec& spec) {
  const char* what = ConstraintKindName(spec.kind);
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
    return std::make_shared<const CompiledConstraint>(impl_->compiler.CompileGrammar(grammar),
                                                      logits_size_);
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
  if (token < 0 || token >= impl_->compiled->logits_size || impl_->matcher.IsTerminated()) {
    return false;
  }
  return impl_->matcher.AcceptToken(token);
}

bool ConstraintMatcher::AcceptText(const std::string& text) {
  return !impl_->matcher.IsTerminated() && impl_->matcher.AcceptString(text);
}

bool ConstraintMatcher::IsTerminated() const { return impl_->matcher.IsTerminated(); }

bool ConstraintMatcher::IsCompleted() const { return impl_->matcher.IsCompleted(); }

}  // namespace deepinfer::constraint
