// `deepinfer serve`: the resident HTTP server (OpenAI-compatible API over the engine).
//
// Start-up order matters: the port is bound first (a busy port fails in milliseconds, and
// /health answers 503 while the model loads), then the model, tokenizer and engine are created,
// then the routes go live and one "ready" line is printed. SIGINT/SIGTERM stop it cleanly.

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "api/server.h"
#include "api/serving.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "engine/engine.h"
#include "fmt/format.h"
#include "http/server.h"
#include "model/model.h"
#include "spdlog/spdlog.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_text.h"
#include "tokenizer/tokenizer.h"
#include "util/log.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct ServeFlags {
  std::string model;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8900;
  std::string served_model_name;
  int max_model_len = 0;
  int max_output_tokens = 32768;
  std::string max_request_bytes = "32MiB";
  int max_connections = 1024;
  int prefill_budget = 2048;
  int max_num_seqs = 64;
  int block_size = 16;
  int64_t kv_cache_tokens = 0;
  std::string kv_cache_memory = "2GiB";
  int threads = 0;
  uint64_t seed = 0;
  bool no_prefix_caching = false;
  bool enable_prompt_tokens_details = false;  // accepted for vLLM compatibility; always on
  std::string chat_template;
  int speculative_tokens = 0;
  bool log_requests = true;
  double log_stats_interval_s = 10;
};

// What the periodic stats line compares against.
struct StatsSnapshot {
  std::chrono::steady_clock::time_point at;
  engine::EngineStats stats;
};

// One line like vLLM's periodic "Avg prompt throughput ..." log: rates over the interval since
// `last`, and the state now. Empty when nothing ran or waited during the interval.
std::string StatsLine(const StatsSnapshot& last, const StatsSnapshot& now) {
  const engine::EngineStats& a = last.stats;
  const engine::EngineStats& b = now.stats;
  const double dt = std::chrono::duration<double>(now.at - last.at).count();
  const int64_t prompt = b.prompt_tokens - a.prompt_tokens;
  const int64_t generated = b.generation_tokens - a.generation_tokens;
  if (dt <= 0 || (prompt == 0 && generated == 0 && b.num_running == 0 && b.num_waiting == 0)) {
    return "";
  }
  const int64_t queries = b.prefix_cache_queries - a.prefix_cache_queries;
  const int64_t hits = b.prefix_cache_hits - a.prefix_cache_hits;
  std::string line = fmt::format(
      "stats running={} waiting={} kv_cache={:.1f}% prompt_tok_s={:.1f} generation_tok_s={:.1f} "
      "prefix_cache_hit={:.1f}% preemptions={}",
      b.num_running, b.num_waiting, 100.0 * b.kv_cache_usage, prompt / dt, generated / dt,
      queries > 0 ? 100.0 * hits / queries : 0.0, b.num_preemptions);
  const int64_t drafts = b.spec_num_draft_tokens - a.spec_num_draft_tokens;
  if (drafts > 0) {
    line += fmt::format(" spec_acceptance={:.1f}%",
                        100.0 * (b.spec_num_accepted_tokens - a.spec_num_accepted_tokens) / drafts);
  }
  return line;
}

// Parses "1024", "64KiB", "2GiB", "1.5G", "500MB": binary multiples for K/Ki/KiB (and M, G, T),
// decimal ones for KB/MB/GB/TB.
std::optional<int64_t> ParseBytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return std::nullopt;
  char* end = nullptr;
  std::string number = text.substr(0, i);
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  std::string unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  const char* kPrefixes = "kmgt";
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (const char* p = std::strchr(kPrefixes, unit[0]); p != nullptr && *p != '\0') {
    int power = static_cast<int>(p - kPrefixes) + 1;
    std::string rest = unit.substr(1);
    if (rest.empty() || rest == "i" || rest == "ib") {
      scale = std::pow(1024.0, power);
    } else if (rest == "b") {
      scale = std::pow(1000.0, power);
    }
  }
  if (scale == 0) return std::nullopt;
  double bytes = value * scale;
  if (bytes > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

// "models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1".
std::string DefaultServedName(const std::string& path) {
  std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base.empty() ? "model" : base;
}

void PrintError(const char* what, const absl::Status& status) {
  spdlog::error("{}: {}", what, OneLineError(status));
}

// The model `make serve` runs when no --model is given: the file scripts/fetch_model.sh puts in
// $DEEPINFER_CACHE/models, or ~/.cache/deepinfer/models. A missing file is not fetched here
// (serve does no downloads); the error says how to get it.
absl::StatusOr<std::string> DefaultModelPath() {
  constexpr const char* kName = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string cache;
  if (const char* dir = std::getenv("DEEPINFER_CACHE"); dir != nullptr && *dir != '\0') {
    cache = dir;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    cache = std::string(home) + "/.cache/deepinfer";
  } else {
    return NotFoundError("no_model",
                         "no --model given, and neither DEEPINFER_CACHE nor HOME is set to find "
                         "the default model; pass --model PATH");
  }
  std::string path = cache + "/models/" + kName;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFoundError(
        "no_model", fmt::format("no --model given and the default model ({}) is not in {}/models; "
                                "run `make serve` or scripts/fetch_model.sh to fetch it, or pass "
                                "--model PATH",
                                kName, cache));
  }
  return path;
}

// Waits up to `timeout` for SIGINT or SIGTERM (blocked in every thread). Returns the signal or 0.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>((timeout.count() % 1000) * 1000000)};
  int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

int Run(ServeFlags f) {
  // Every line from here on, start-up errors included, has the request log's timestamp format.
  util::InitLogging();
  auto max_request_bytes = ParseBytes(f.max_request_bytes);
  auto kv_cache_memory = ParseBytes(f.kv_cache_memory);
  if (!max_request_bytes || *max_request_bytes < 1024) {
    spdlog::error("bad_flags: --max-request-bytes '{}' is not a size of at least 1KiB",
                  f.max_request_bytes);
    return 2;
  }
  if (!kv_cache_memory) {
    spdlog::error("bad_flags: --kv-cache-memory '{}' is not a size", f.kv_cache_memory);
    return 2;
  }
  if (f.model.empty()) {
    absl::StatusOr<std::string> path = DefaultModelPath();
    if (!path.ok()) {
      PrintError("cannot start", path.status());
      return ExitCodeFor(path.status());
    }
    f.model = *path;
    spdlog::info("no --model given: serving the default model {}", f.model);
  }
  const std::string served_name =
      f.served_model_name.empty() ? DefaultServedName(f.model) : f.served_model_name;

  // Every thread created from here on inherits the mask, so only sigtimedwait sees the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  api::ApiServer routes;
  routes.set_log_requests(f.log_requests);
  http::ServerOptions http_options;
  http_options.host = f.host;
  http_options.port = f.port;
  http_options.max_request_bytes = *max_request_bytes;
  http_options.max_connections = f.max_connections;
  // A generation parses JSON and renders its chat template on its worker thread.
  http_options.thread_stack_bytes = size_t{1} << 20;
  http_options.server_name = "deepinfer";
  auto server = http::Server::Start(
      http_options,
      [&routes](const http::Request& r, http::ResponseWriter& w) { routes.Handle(r, w); },
      [&routes](const http::Request& r, int status, double s, const http::RequestLog& log) {
        routes.Observe(r, status, s, log);
      });
  if (!server.ok()) {
    PrintError("cannot listen", server.status());
    return 1;
  }
  routes.SetHttpServer(server->get());
  spdlog::info("listening on http://{}:{}, loading {}", f.host, (*server)->port(), f.model);

  auto model = model::LoadModel(f.model, f.tokenizer);
  if (!model.ok()) {
    PrintError("cannot load model", model.status());
    return ExitCodeFor(model.status());
  }
  auto text = tokenizer::LoadModelText(**model, f.chat_template);
  if (!text.ok()) {
    PrintError("cannot build tokenizer or chat template", text.status());
    return ExitCodeFor(text.status());
  }
  std::unique_ptr<tokenizer::Tokenizer>* tokenizer = &text->tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate>* chat_template = &text->chat_template;
  engine::EngineOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.prefill_budget = f.prefill_budget;
  options.block_size = f.block_size;
  options.kv_cache_tokens = f.kv_cache_tokens;
  options.kv_cache_memory_bytes = *kv_cache_memory;
  options.max_model_len = f.max_model_len;
  options.num_threads = f.threads;
  options.enable_prefix_caching = !f.no_prefix_caching;
  options.seed = f.seed;
  options.speculative_tokens = f.speculative_tokens;
  auto engine = engine::Engine::Create(**model, options);
  if (!engine.ok()) {
    PrintError("cannot start engine", engine.status());
    return ExitCodeFor(engine.status());
  }

  api::Backend backend;
  backend.engine = engine->get();
  backend.tokenizer = tokenizer->get();
  backend.chat_template = chat_template->get();
  backend.served_model_name = served_name;
  backend.max_model_len = (*engine)->max_model_len();
  backend.max_output_tokens = std::max(1, std::min(f.max_output_tokens, backend.max_model_len));
  backend.created_unix = api::UnixNow();
  backend.metrics = &routes.metrics();
  routes.SetBackend(&backend);

  int sig = 0;
  while (!(*engine)->ready() && sig == 0) {
    sig = WaitForSignal(signals, std::chrono::milliseconds(20));
  }
  if (sig == 0) {
    std::string url = fmt::format("http://{}:{}", f.host, (*server)->port());
    spdlog::info("serving {} on {} (ready)", served_name, url);
    spdlog::info("context {} tokens, {} chat template", backend.max_model_len,
                 (*chat_template)->name());
    spdlog::info(
        "try: curl {}/v1/chat/completions -H 'Content-Type: application/json' "
        "-d '{{\"model\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}]}}'",
        url, served_name);
  }
  StatsSnapshot last{std::chrono::steady_clock::now(), (*engine)->Stats()};
  while (sig == 0) {
    sig = WaitForSignal(signals, std::chrono::milliseconds(1000));
    if (f.log_stats_interval_s <= 0) continue;
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last.at).count() < f.log_stats_interval_s) continue;
    StatsSnapshot current{now, (*engine)->Stats()};
    if (std::string line = StatsLine(last, current); !line.empty()) spdlog::info("{}", line);
    last = std::move(current);
  }

  spdlog::info("signal {}, shutting down", sig);
  if (!(*server)->Stop(5000)) {
    // A connection is stuck in a write to a client that does not read; do not wait for it.
    spdlog::warn("{} connection(s) still open; exiting anyway", (*server)->num_connections());
    spdlog::default_logger()->flush();
    std::_Exit(0);
  }
  server->reset();
  engine->reset();
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server over the engine");
  cmd->add_option("--model", flags->model,
                  "GGUF file, llama2.c checkpoint (.bin) or Hugging Face checkpoint folder "
                  "(default: models/SmolLM2-135M-Instruct.Q4_1.gguf in $DEEPINFER_CACHE or "
                  "~/.cache/deepinfer, which `make serve` fetches)");
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "llama2.c tokenizer (default: tok*.bin beside the model)");
  cmd->add_option("--chat-template", flags->chat_template,
                  "chat encoder by name instead of the model's own: chatml, plain, deepseek-v3, "
                  "deepseek-v3.1, deepseek-v3.2, deepseek-v4, deepseek-v4.1");
  cmd->add_option("--speculative-tokens", flags->speculative_tokens,
                  "draft tokens per step from the model's MTP layers (greedy requests; 0: off)")
      ->check(CLI::Range(0, 8));
  cmd->add_option("--host", flags->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", flags->port, "TCP port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", flags->served_model_name,
                  "model id clients must send (default: the model file's name without extension)");
  cmd->add_option("--max-model-len", flags->max_model_len,
                  "context window in tokens (default: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--max-output-tokens", flags->max_output_tokens,
                  "most tokens one choice may generate (capped by the window)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--max-request-bytes", flags->max_request_bytes,
                  "largest request body; larger ones get 413 (suffixes KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--max-connections", flags->max_connections,
                  "open connections at once; more get 503")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--prefill-budget", flags->prefill_budget, "tokens per engine step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", flags->max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--block-size", flags->block_size, "tokens per KV-cache block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--kv-cache-tokens", flags->kv_cache_tokens,
                  "KV-cache capacity in tokens (default: from --kv-cache-memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "KV-cache memory in bytes (suffixes KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--seed", flags->seed, "sampling seed for requests without one");
  cmd->add_flag("--no-prefix-caching", flags->no_prefix_caching, "disable the prefix cache");
  cmd->add_flag("--enable-prompt-tokens-details", flags->enable_prompt_tokens_details,
                "accepted for vLLM compatibility; cached_tokens is always reported");
  // Two flags rather than CLI11's "!--no-..." alias, whose help shows the alias default {false}
  // for a switch that is on by default.
  cmd->add_flag("--log-requests", flags->log_requests,
                "one stderr line per answered request: route, status, duration, token counts, "
                "TTFT and TPOT, never the text (default: on; probes of /health and /metrics are "
                "left out)");
  cmd->add_flag_callback(
      "--no-log-requests", [flags] { flags->log_requests = false; }, "turn --log-requests off");
  cmd->add_option("--log-stats-interval", flags->log_stats_interval_s,
                  "seconds between engine stats lines (throughput, queue, KV cache, prefix-cache "
                  "hits) while busy; 0: off")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
