#pragma once

// `deepinfer bench`: a load generator for OpenAI-compatible servers (deepinfer, vLLM-style,
// llama.cpp's and llama-cpp-python's servers) with vLLM's metric definitions.
//
// Datasets:
//   random         prompts of exactly --input-len tokens (random words, cut with the server's
//                  /tokenize), --output-len tokens each with EOS ignored;
//   shared-prefix  pairs of requests sharing a --prefix-len token prefix: the first is cold, the
//                  second hot (prefix cache); TTFT of both and the speedup;
//   --needle       long-context acceptance (see tools/bench_needle.h), pass/fail per case.
// Each --concurrency level runs its own fresh prompts. Prints a summary table on stdout and a
// progress bar on stderr; --json writes every number.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

struct BenchOptions {
  std::string base = "http://127.0.0.1:8900";
  std::string model;  // empty: the first model the server lists
  std::string api_key;
  std::string dataset = "random";  // "random" | "shared-prefix"
  std::string endpoint;            // "completions" | "chat"; empty: completions (chat: --needle)
  bool needle = false;
  int input_len = 1024;
  int output_len = 256;
  int prefix_len = 0;   // shared-prefix: tokens of the shared prefix (the CLI defaults it to 2000)
  int suffix_len = 32;  // shared-prefix: tokens after the prefix, different per request
  std::vector<int> concurrency = {1};
  double request_rate = std::numeric_limits<double>::infinity();
  int num_prompts = 0;  // per level; 0: max(8, 4 x concurrency), shared-prefix max(4, C) pairs
  int warmup = 1;       // short requests sent first (also proves the server answers)
  bool ignore_eos = true;
  double temperature = 0.0;
  std::vector<double> percentiles = {50, 90, 99};
  uint64_t seed = 0;
  double timeout_s = 600;     // per request
  int64_t max_model_len = 0;  // overrides what /v1/models says (needed for llama-cpp-python)
  std::vector<double> needle_depths = {0.1, 0.35, 0.6, 0.85};
  double needle_fill = 0.9;
  int needle_output_len = 64;
  std::string json_path;
  std::string label;  // free text stored in the JSON ("deepinfer 2 threads", ...)
  std::string tool_version;
  int progress = -1;  // 1 on, 0 off, -1: when stderr is a terminal
};

// Checks flag values that CLI11 cannot (ranges, dataset names).
// Errors: InvalidArgument "bad_flag".
absl::Status ValidateBenchOptions(const BenchOptions& options);

// "1,4,8,16" -> {1, 4, 8, 16}. Errors: InvalidArgument "bad_flag" (empty, non-positive, junk).
absl::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& text);
// "0.1,0.5" -> {0.1, 0.5}. Errors: InvalidArgument "bad_flag".
absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& text);

// Runs the benchmark. Returns the process exit status: 0 every request (every needle case)
// succeeded, 1 failures or an unreachable server, 2 bad flags or a model the server lacks.
// Threads: starts one thread per in-flight request.
int RunBench(const BenchOptions& options);

}  // namespace deepinfer::tools
