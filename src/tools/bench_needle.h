#pragma once

// The long-context acceptance mode of `deepinfer bench` (`--needle`): four needles A/B/C/D (secret
// codes) at chosen depths of a synthetic haystack that fills the server's window, asked back in
// four cases: all four at once, the same as a stream, a 3-turn conversation, and one prompt sent
// twice (the second should reuse the cached prefix). Each case passes or fails on its own.
//
// A tiny test model retrieves nothing; the mode reports that as failures, honestly. It exists
// to accept real models.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench_runner.h"
#include "tools/bench_server.h"

namespace deepinfer::tools {

struct NeedleOptions {
  int64_t window = 0;  // the server's max_model_len (prompt + output)
  double fill = 0.9;   // fraction of the room left after outputs and questions
  std::vector<double> depths = {0.1, 0.35, 0.6, 0.85};  // one per needle A, B, C, D
  int output_len = 64;                                  // max_tokens of each answer
  int64_t bos_tokens = 0;
  uint64_t seed = 0;
};

struct NeedleCheck {
  std::string needle;  // "A".."D"
  std::string code;
  bool found = false;
};

struct NeedleCase {
  std::string name;  // "four-needles", "streaming", "multi-turn", "prefix-repeat"
  bool pass = false;
  std::string detail;         // why it failed, or a note
  int64_t prompt_tokens = 0;  // largest prompt of the case, as the server counted it
  std::vector<NeedleCheck> checks;
  std::vector<std::string> answers;    // each answer, cut to 300 bytes
  std::vector<double> ttft_ms;         // per request
  std::vector<int64_t> cached_tokens;  // per request; -1 when not reported
};

// Runs the four cases. Fails only when no case could be set up (window too small, tokenizer
// unreachable); request failures make the case fail instead.
absl::StatusOr<std::vector<NeedleCase>> RunNeedleCases(const ClientConfig& config,
                                                       TokenizerApi& tokenizer,
                                                       const NeedleOptions& options);

// Whether `answer` contains `code` as a whole number (not inside a longer run of digits).
bool ContainsCode(const std::string& answer, const std::string& code);

}  // namespace deepinfer::tools
