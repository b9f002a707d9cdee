#pragma once

// The arithmetic of `deepinfer bench`: per-request records and the run metrics computed from
// them, with vLLM's definitions so numbers compare across tools.
//
// Source: vLLM benchmarks/serve (`vllm bench serve`): TTFT, TPOT, ITL, E2EL and throughput;
//   percentiles as numpy.percentile (linear interpolation), std as numpy.std (population).

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::tools {

// What one request of a run measured on the client. Times are seconds on a steady clock.
struct RequestRecord {
  bool ok = false;
  std::string error;            // first error line when !ok
  int64_t prompt_tokens = 0;    // server's usage when reported, else the planned length
  int64_t output_tokens = 0;    // server's usage when reported, else content chunks
  int64_t cached_tokens = -1;   // usage.prompt_tokens_details.cached_tokens; -1 unknown
  bool usage_reported = false;  // output_tokens came from the server's usage
  double start_s = 0;           // request sent, relative to the run start
  double ttft_s = 0;            // send -> first chunk with output text
  double e2el_s = 0;            // send -> last byte of the response
  std::vector<double> itl_s;    // gaps between consecutive chunks with output text
  std::string finish_reason;
  std::string text;  // generated text (kept only when asked)
};

// Distribution of one metric over a run.
// Units: the caller's (bench reports milliseconds).
struct Distribution {
  int64_t count = 0;
  double mean = 0;
  double std = 0;  // population standard deviation (numpy's default, ddof = 0)
  double min = 0;
  double max = 0;
  std::vector<double> percentiles;  // one per requested percentile, same order
};

// Returns the p-th percentile (0..100) of `sorted` (ascending) with linear interpolation between
// closest ranks, as numpy.percentile's default. Returns 0 for an empty input.
double Percentile(const std::vector<double>& sorted, double p);

// Summarizes `values`, multiplied by `scale` (1000 turns seconds into milliseconds), at the
// given percentiles (each in [0, 100]).
// Cost: O(n log n).
Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles,
                       double scale = 1.0);

// The metrics of one run (one concurrency level), vLLM's definitions:
//   TTFT per successful request; TPOT = (e2el - ttft) / (output_tokens - 1) for requests with
//   more than one output token; ITL pooled over every request; E2EL per request;
//   throughputs over `duration_s` (first send to last completion).
// Units: latencies in milliseconds, throughputs per second.
struct RunMetrics {
  int64_t num_requests = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  int64_t total_cached_tokens = -1;  // -1 when no request reported it
  double request_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  double peak_output_throughput = 0;  // most output tokens within one whole second of the run
  double mean_concurrency = 0;        // sum of request latencies / duration
  bool usage_reported = true;         // every completed request's counts came from usage
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution itl_ms;
  Distribution e2el_ms;
};

RunMetrics ComputeRunMetrics(const std::vector<RequestRecord>& records, double duration_s,
                             const std::vector<double>& percentiles);

}  // namespace deepinfer::tools
