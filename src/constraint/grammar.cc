#include "constraint/grammar.h"

#include <algorithm>
#include <bit>
#include <exception>
#include <string_view>
#include <utility>

#include "dlpack/dlpack.h"
#include "fmt/format.h"
#include "util/error_codes.h"
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
      : compiler(info, num_threads, /*cache_enabled=*/true, kCompileCacheBytes) {}
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

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const ConstraintSpec& spec) {
  const char* what = ConstraintKindName(spec.kind);
  try {
    // JSON comes out in one line with ", " and ": " between items: free whitespace would let a
    // small model pad with spaces until max_tokens (a known failure of any-whitespace JSON
    // grammars, vLLM's disable_any_whitespace).
    switch (spec.kind) {
      case ConstraintKind::kJsonObject:
        // Any JSON object: the schema {"type": "object"} rather than the builtin JSON grammar,
        // which also admits arrays and scalars (OpenAI's json_object is an object).
        return std::make_shared<const CompiledConstraint>(
            impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                              std::nullopt, std::nullopt,
                                              /*strict_mode=*/false),
            logits_size_);
      case ConstraintKind::kJsonSchema:
        // strict_mode false: properties the schema does not forbid may appear, as OpenAI's
        // non-strict mode and vLLM's default allow; strict schemas say additionalProperties.
        return std::make_shared<const CompiledConstraint>(
            impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                              std::nullopt, /*strict_mode=*/false),
            logits_size_);
      case ConstraintKind::kRegex:
        return std::make_shared<const CompiledConstraint>(impl_->compiler.CompileRegex(spec.text),
                                                          logits_size_);
      case ConstraintKind::kChoice: {
        if (spec.choices.empty()) return Invalid(what, "the list of choices is empty");
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) {
          if (spec.choices[i].empty()) return Invalid(what, "a choice is empty");
          ebnf += (i > 0 ? " | " : "") + EbnfLiteral(spec.choices[i]);
        }
        return std::make_shared<const CompiledConstraint>(
            impl_->compiler.CompileGrammar(ebnf, "root"), logits_size_);
      }
      case ConstraintKind::kGrammar:
        return std::make_shared<const CompiledConstraint>(
            impl_->compiler.CompileGrammar(spec.text, "root"), logits_size_);
    }
  } catch (const std::exception& e) {
    return Invalid(what, e.what());
  }
  return Invalid(what, "unknown constraint kind");
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

bool ConstraintMatcher::IsTerminated() const { return impl_->matcher.IsTerminated(); }

bool ConstraintMatcher::IsCompleted() const { return impl_->matcher.IsCompleted(); }

}  // namespace deepinfer::constraint
