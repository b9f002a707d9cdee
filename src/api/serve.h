#pragma once

// The `deepinfer serve` process: binds the port, loads the model, tokenizer and engine, makes the
// routes live, logs engine stats while busy, and stops cleanly on SIGINT / SIGTERM. The command
// line (cli/serve.cc) only turns flags into ServeOptions.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/image_inputs.h"
#include "api/pd.h"
#include "engine/engine.h"

namespace deepinfer::api {

struct ServeOptions {
  std::string model;              // GGUF, llama2.c or Hugging Face folder; "" = DefaultModelPath()
  std::string tokenizer;          // llama2.c tokenizer; "" = beside the model
  std::string chat_template;      // encoder by name; "" = the model's own
  std::string served_model_name;  // "" = DefaultServedName(model)
  std::string host = "127.0.0.1";
  int port = 8900;                    // 0: any free port
  int32_t max_output_tokens = 32768;  // per choice; capped by the context window
  int64_t max_request_bytes = int64_t{32} << 20;
  int max_connections = 1024;
  bool log_requests = true;
  bool force_include_usage = false;  // every stream carries usage (ParseLimits)
  // API keys (ApiServer::SetApiKeys): --api-key values, the lines of api_key_file and
  // $DEEPINFER_API_KEY together; none: no check, which a host other than loopback refuses
  // unless allow_unauthenticated. /metrics needs a key too unless metrics_without_key.
  std::vector<std::string> api_keys;
  std::string api_key_file;
  bool allow_unauthenticated = false;
  bool metrics_without_key = false;
  double log_stats_interval_s = 10;  // 0: no stats lines
  // Request bodies (protocol/warmup_file.h) run after the model loads, before /health answers 200;
  // "" = none.
  std::string warmup_file;
  // Engine ranks over one copy of the weights (engine::CreateDataParallelEngine); 1: one engine.
  int32_t data_parallel_size = 1;
  // --expert-parallel: this process is one rank of an mpirun job (engine/expert_parallel.h).
  // Rank 0 serves; the others load the same model, run their share of the routed experts and
  // follow rank 0's steps without opening a port; with data_parallel_size > 1, one replay
  // thread per rank-0 engine.
  bool expert_parallel = false;
  // A rank silent this long ends the job (engine::ExpertParallelGroup::Init).
  double expert_parallel_timeout_s = 10;
  // How the ranks share --threads: split between them, or all of them to each rank in turn.
  engine::DataParallelCores data_parallel_cores = engine::DataParallelCores::kSplit;
  // Persistent prefix checkpoints (engine::CheckpointStore): an existing folder, "" = off;
  // the files there take at most checkpoint_max_bytes (oldest removed first). The revision and
  // the least prefix length are engine.model_revision (default: the model's file name and size)
  // and engine.checkpoint_min_tokens.
  std::string prefix_checkpoint_dir;
  int64_t checkpoint_max_bytes = int64_t{16} << 30;
  // Prefill/decode disaggregation (api/pd.h): the role, and for prefill and decode the shared
  // folder (must exist; --prefix-checkpoint-dir is then not allowed) and, on the decode side, the
  // prefill side's URL. pd.api_key is read from DEEPINFER_PD_API_KEY by Serve.
  PdConfig pd;
  std::string pd_checkpoint_dir;
  engine::EngineOptions engine;      // max_model_len 0 = the model's
  // Image inputs: allowed URL sources and caps (api/image_inputs.h); checked before the model
  // loads (CheckMediaOptions, "bad_option").
  MediaOptions media;
};

// The environment variable serve reads one more API key from (never printed or logged).
inline constexpr char kApiKeyEnv[] = "DEEPINFER_API_KEY";

// Serves until SIGINT or SIGTERM (which it blocks in every thread it starts, and waits for).
// Start-up runs in named phases, in an order that matters: every setting and file is checked
// first (nothing slow yet), then the port is bound (a busy port fails in milliseconds, and
// /health answers 503 while the model loads), then the model, tokenizer and engine are created,
// the routes go live, the warm-up requests run, and one "ready" line is logged.
// Errors: every failure is logged first as one line naming its stage ("cannot listen", "cannot
//   load model", ...), then returned: Unavailable "bind_failed", InvalidArgument "bad_address",
//   NotFound "no_model", InvalidArgument "bad_warmup" (the warm-up file is unreadable or
//   malformed, checked before the model loads, or one of its requests failed), InvalidArgument
//   "bad_option" (--prefix-checkpoint-dir or --pd-checkpoint-dir is not an existing folder; a
//   P/D role without its folder, --model-revision, DEEPINFER_PD_API_KEY or, decode side, a valid
//   --pd-prefill-url), and those of
//   tokenizer::LoadServable and engine::Engine::Create.
// Threads: call from the main thread before any other thread is started.
absl::Status Serve(ServeOptions options);

// The model `make serve` runs when none is named: SmolLM2-135M-Instruct.Q4_1.gguf in
// $DEEPINFER_CACHE/models, or ~/.cache/deepinfer/models. Nothing is downloaded here.
// Errors: NotFound "no_model" (saying how to fetch it) when the file is not there.
absl::StatusOr<std::string> DefaultModelPath();

// "models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1"; "model" when empty.
std::string DefaultServedName(const std::string& path);

// One line like vLLM's periodic "Avg prompt throughput ...": rates over the `seconds` between
// `last` and `now`, and the state now. Empty when nothing ran or waited in the interval.
// Units: tokens per second, percent.
std::string EngineStatsLine(const engine::EngineStats& last, const engine::EngineStats& now,
                            double seconds);

}  // namespace deepinfer::api
