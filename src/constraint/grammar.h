#pragma once

// Grammar-constrained decoding: what a request may generate (a JSON schema, any JSON object, a
// regular expression, one of fixed strings, or an EBNF grammar), compiled once per constraint
// against the model's vocabulary, and a matcher per sequence that says which tokens may come
// next (a bitmask over the vocabulary) and follows the tokens sampled.
//
// The backend is xgrammar's C++ core (Apache-2.0; scripts/fetch_xgrammar.sh). Its compiler
// precomputes, for every grammar position, which tokens are accepted outright, rejected outright
// or need a check against the parser's stack, so a mask costs a few microseconds to a
// millisecond per token. Source: xgrammar (Dong et al., "XGrammar: Flexible and Efficient
// Structured Generation Engine for Large Language Models", 2024); the same backend as vLLM's
// and SGLang's structured outputs.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::constraint {

enum class ConstraintKind {
  kJsonObject,  // any JSON object (OpenAI's response_format json_object)
  kJsonSchema,  // text: a JSON schema (json_schema / guided_json / structured_outputs.json)
  kRegex,       // text: a regular expression the whole output matches
  kChoice,      // choices: the output is exactly one of them
  kGrammar,     // text: an EBNF grammar (xgrammar's dialect of GBNF), root rule "root"
  // text: an xgrammar structural tag (JSON, {"type": "structural_tag", "format": ...}): literal
  // markers around JSON-schema arguments, as tool calls are written (vLLM's structural_tag).
  kStructuralTag,
};

// "json_object", "json_schema", "regex", "choice", "grammar", "structural_tag".
const char* ConstraintKindName(ConstraintKind kind);

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // schema, regex or grammar
  std::vector<std::string> choices;  // kChoice: non-empty
  // When set, the output is free text up to and including the first `reasoning_end` (the end of
  // a thinking block the prompt opened, "</think>"), and the constraint applies to what follows,
  // as vLLM's reasoning parsers leave thinking unconstrained.
  std::string reasoning_end;
};

// A constraint compiled for one vocabulary. Immutable; shared by every sequence that uses it.
class CompiledConstraint;

// Compiles constraints for one model's vocabulary, with a cache keyed by the constraint (at most
// 256 MiB of compiled grammars; the least recently used are dropped).
//
// The vocabulary given to xgrammar is each token's decoded bytes (TokenPiece), so byte-level BPE,
// SentencePiece-style and llama2.c vocabularies are handled alike; control tokens (IsSpecial)
// never match grammar text; end-of-generation tokens (IsEog) end a completed grammar. Ids from
// the tokenizer's vocabulary size up to `logits_size` (a model's padded head) are never allowed.
// Threads: Compile is thread-safe (xgrammar's cache locks); compiles run on the caller's thread.
class GrammarCompiler {
 public:
  // `eog_ids`: the tokens the engine ends generation on (model::TokenizerData::eog_ids, from the
  // checkpoint's config), which end a completed grammar beside the tokenizer's own IsEog ones: a
  // checkpoint whose tokenizer files name no end token otherwise completes its grammar with
  // nothing allowed. Ids outside [0, logits_size) are skipped.
  // REQUIRES: logits_size >= tokenizer.vocab_size() > 0. Cost: one pass over the vocabulary
  // (tens of milliseconds for 100K tokens); the tokenizer is not kept.
  static std::unique_ptr<GrammarCompiler> Create(const tokenizer::Tokenizer& tokenizer,
                                                 int32_t logits_size,
                                                 const std::vector<int32_t>& eog_ids = {},
                                                 int num_threads = 1);
  ~GrammarCompiler();

  // Errors: InvalidArgument "invalid_constraint" with the reason: the backend's (a malformed or
  //   unsupported schema, regex or grammar; no choices; an empty choice), or ours for what is
  //   bounded (text over 256 KiB, over 4,096 choices, a schema deeper than 32 levels with $ref
  //   hops or with over 4,096 subschemas and enum values, nesting deeper than util::kMaxJsonDepth),
  //   for schema keywords the backend would ignore (not, if/then/else, dependent*, uniqueItems,
  //   contains, non-local or dangling $ref, uncompilable pattern) and for a constraint that
  //   allows no output.
  // JSON schemas compile in xgrammar's strict mode: only the properties a schema names (and
  //   those additionalProperties / patternProperties allow).
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(const ConstraintSpec& spec);

  int32_t logits_size() const { return logits_size_; }

 private:
  struct Impl;
  GrammarCompiler(std::unique_ptr<Impl> impl, int32_t logits_size);
  std::unique_ptr<Impl> impl_;
  const int32_t logits_size_;
};

// The state of one sequence's constrained output.
//
// Mask layout: MaskWords() 32-bit words; token t is allowed when bit (t % 32) of word t / 32 is
// set (xgrammar's bitmask layout). Threads: one at a time (a sequence's own).
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const CompiledConstraint> compiled);
  ~ConstraintMatcher();
  ConstraintMatcher(ConstraintMatcher&&) noexcept;
  ConstraintMatcher& operator=(ConstraintMatcher&&) noexcept;

  int32_t MaskWords() const;
  // Fills `mask` ([MaskWords()]) with the tokens allowed next; an end-of-generation token is
  // allowed once the grammar is complete. Returns the number of allowed tokens (0 only after
  // the matcher terminated: a compiled grammar never strands a live sequence).
  int32_t FillMask(uint32_t* mask);
  // Advances past `token`. Returns false, changing nothing, when the grammar does not allow it.
  bool Accept(int32_t token);
  // Undoes the last `num_tokens` successful Accept calls (speculative drafts the verification
  // rejected), termination included. REQUIRES: 0 <= num_tokens <= the tokens accepted so far.
  void Rollback(int32_t num_tokens);
  // Advances past the bytes of `text`, whatever tokens spell them (tests; forced text). Returns
  // false, changing nothing, when the grammar does not allow them.
  bool AcceptText(const std::string& text);
  // True once an end-of-generation token was accepted after a complete grammar.
  bool IsTerminated() const;
  // True when the output so far is a complete match (an end-of-generation token may follow).
  bool IsCompleted() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::constraint
