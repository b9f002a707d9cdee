#pragma once

// Prompts for `deepinfer bench`: random-word prompts cut to an exact token count with the
// server's own tokenizer, and the synthetic haystack of the long-context needle mode.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench_server.h"

namespace deepinfer::tools {

// `num_words` common English words drawn at random, joined by single spaces.
std::string RandomWords(std::mt19937_64& rng, int num_words);

// One filler sentence for a haystack ("The quiet river carries a lantern past the harbor.").
std::string FillerSentence(std::mt19937_64& rng);

struct Prompt {
  std::string text;
  int64_t num_tokens = 0;  // as the server's tokenizer counts `text`
};

// Builds a random-word text that the server tokenizes to exactly `num_tokens` tokens (BOS
// included when the server adds it). Words are drawn until there are enough tokens, the token
// list is cut, detokenized and counted again; a few corrections absorb merges across the cut.
// `bos_tokens` is what the server counts for an empty text.
// Errors: InvalidArgument "input_too_short" (num_tokens <= bos_tokens); tokenizer errors;
//   Internal "inexact_prompt" when no exact cut was found (rare: merges across every cut).
// Cost: a handful of tokenizer calls.
absl::StatusOr<Prompt> BuildPrompt(TokenizerApi& tokenizer, int64_t num_tokens, int64_t bos_tokens,
                                   std::mt19937_64& rng);

// A text of filler sentences that counts about `num_tokens` tokens (never more), with `needles`
// inserted at the fractions `depths` (0 = start, 1 = end) of the haystack.
// Errors: tokenizer errors; InvalidArgument "bad_needles" when needles and depths differ in size.
// Cost: a few tokenizer calls on texts of about num_tokens tokens.
absl::StatusOr<Prompt> BuildHaystack(TokenizerApi& tokenizer, int64_t num_tokens,
                                     const std::vector<std::string>& needles,
                                     const std::vector<double>& depths, std::mt19937_64& rng);

}  // namespace deepinfer::tools
