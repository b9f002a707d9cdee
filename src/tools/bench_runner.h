#pragma once

// Sending requests and generating load for `deepinfer bench`: one OpenAI completions or chat
// request measured on the client, and a run of many with a concurrency cap and Poisson arrivals.

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tools/bench_http.h"
#include "tools/bench_stats.h"

namespace deepinfer::tools {

using BenchClock = std::chrono::steady_clock;

enum class Endpoint { kCompletions, kChat };

// Where and how requests go.
struct ClientConfig {
  http::Url base;
  HttpOptions http;
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  double temperature = 0.0;
};

struct ChatTurn {
  std::string role;
  std::string content;
};

// One request. `prompt` is used by the completions endpoint, `messages` by chat.
struct RequestSpec {
  std::string prompt;
  std::vector<ChatTurn> messages;
  int64_t planned_prompt_tokens = 0;  // reported when the server sends no usage
  int max_tokens = 16;
  // Asks for exactly max_tokens: vLLM's `ignore_eos` plus `min_tokens` (llama-cpp-python).
  bool ignore_eos = false;
  bool stream = true;
  bool keep_text = false;
};

// Builds the JSON body of `spec` (stream_options.include_usage on streams: servers that do not
// know it ignore it and the bench counts chunks instead).
std::string RequestBody(const ClientConfig& config, const RequestSpec& spec);

// Sends `spec` and measures it. Never fails as a call: errors land in RequestRecord::error.
// Times are relative to `run_start`.
// Threads: safe from many threads at once.
RequestRecord SendRequest(const ClientConfig& config, const RequestSpec& spec,
                          BenchClock::time_point run_start);

// Reduces the `data:` payloads of one streamed response (without "[DONE]") and their arrival
// times into `record` (TTFT, ITL, output tokens, usage). Exposed for tests.
struct StreamEvent {
  std::string data;
  double time_s = 0;  // since the request was sent
};
void ReduceStream(const std::vector<StreamEvent>& events, bool saw_done, Endpoint endpoint,
                  RequestRecord* record);

// Draws a live progress line on stderr ("label [#####-----] 12/32 ok 12 fail 0 31.2 s").
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled);
  void Tick(bool ok);
  void Finish();

 private:
  void Draw();

  std::string label_;
  int64_t total_;
  bool enabled_;
  int64_t ok_ = 0;
  int64_t failed_ = 0;
  BenchClock::time_point start_;
};

struct LoadOptions {
  int concurrency = 1;                                            // requests in flight at most
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s, Poisson
  uint64_t seed = 0;
  bool progress = false;
  std::string label;
};

// Runs `jobs` (each a list of requests sent one after another on the same worker, so a job can
// be "cold request, then hot request") with `concurrency` workers. Job i arrives at the i-th
// point of a Poisson process of rate request_rate (all at time 0 when infinite) and starts when a
// worker is free. Returns records in job order, flattened; *duration_s is first send to last
// completion.
// Threads: one thread per worker.
std::vector<RequestRecord> RunLoad(const ClientConfig& config,
                                   const std::vector<std::vector<RequestSpec>>& jobs,
                                   const LoadOptions& options, double* duration_s);

}  // namespace deepinfer::tools
