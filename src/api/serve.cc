#include "api/serve.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>
#include <memory>
#include <utility>

#include "api/served_model.h"
#include "api/server.h"
#include "engine/engine.h"
#include "fmt/format.h"
#include "http/client.h"
#include "http/server.h"
#include "http/url.h"
#include "model/model.h"
#include "protocol/warmup_file.h"
#include "spdlog/spdlog.h"
#include "tokenizer/servable.h"
#include "util/error_codes.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

// Logs the failure of a start-up stage as one line and hands it back.
absl::Status Failed(const char* stage, absl::Status status) {
  spdlog::error("{}: {}", stage, OneLineError(status));
  return status;
}

// Waits up to `timeout` for SIGINT or SIGTERM (blocked in every thread). Returns the signal or 0.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>((timeout.count() % 1000) * 1000000)};
  int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// Sends the warm-up requests one after another to this server (host and port it listens on),
// each to every data-parallel rank (X-data-parallel-rank) when there are several, and checks
// each answer: 200, and for a stream the closing [DONE] with no error event before it.
// Errors: InvalidArgument "bad_warmup" naming the request, its line and the server's answer.
absl::Status RunWarmup(const std::vector<WarmupRequest>& requests, const std::string& host,
                       int port, int32_t ranks, std::string_view api_key) {
  // A server listening on every address is reached on loopback.
  const std::string to = host == "0.0.0.0" || host == "::" || host.empty() ? "127.0.0.1" : host;
  const http::Url url(to, port);
  http::FetchOptions fetch;
  fetch.idle_timeout_ms = 0;
  fetch.total_timeout_ms = 30 * 60 * 1000;  // a long generation on a slow machine
  for (size_t k = 0; k < requests.size() * static_cast<size_t>(ranks); ++k) {
    const size_t i = k / static_cast<size_t>(ranks);
    const int32_t rank = static_cast<int32_t>(k % static_cast<size_t>(ranks));
    const WarmupRequest& w = requests[i];
    http::ClientRequest r;
    r.method = "POST";
    r.target = w.path;
    r.body = w.body;
    r.headers.push_back({"Content-Type", "application/json"});
    if (!api_key.empty()) r.headers.push_back({"Authorization", fmt::format("Bearer {}", api_key)});
    if (ranks > 1) r.headers.push_back({"X-data-parallel-rank", std::to_string(rank)});
    auto fail = [&](const std::string& why) {
      return InvalidArgumentError(
          util::codes::kBadWarmup,
          fmt::format("warm-up request {} of {} (line {}, POST {}{}) failed: {}", i + 1,
                      requests.size(), w.line, w.path,
                      ranks > 1 ? fmt::format(", rank {}", rank) : "", why));
    };
    absl::StatusOr<http::ClientResponse> answer = http::Fetch(url, r, fetch);
    if (!answer.ok()) return fail(OneLineError(answer.status()));
    std::string_view body = answer->body;
    if (answer->status != 200) {
      constexpr size_t kShown = 300;
      return fail(fmt::format("HTTP {}: {}", answer->status,
                              body.size() > kShown ? std::string(body.substr(0, kShown)) + "..."
                                                   : std::string(body)));
    }
    const bool sse = answer->Header("Content-Type").find("text/event-stream") != std::string::npos;
    if (sse && (body.find("data: [DONE]") == std::string_view::npos ||
                body.find("\"error\"") != std::string_view::npos)) {
      return fail("the stream ended with an error or without [DONE]");
    }
  }
  return absl::OkStatus();
}

// The revision a checkpoint is tied to when --model-revision is not given: the model's file
// name and size in bytes (for a folder, the sum of the files directly inside it).
std::string DefaultModelRevision(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  uintmax_t bytes = 0;
  if (std::filesystem::is_directory(p, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
      std::error_code e2;
      if (e.is_regular_file(e2)) bytes += e.file_size(e2);
    }
  } else {
    bytes = std::filesystem::file_size(p, ec);
  }
  return fmt::format("{}:{}", p.filename().string(), bytes);
}

// The P/D settings of `o` (reads DEEPINFER_PD_API_KEY into o.pd.api_key).
// Errors: InvalidArgument "bad_option" naming the missing or conflicting setting.
absl::Status CheckPdOptions(ServeOptions& o) {
  auto bad = [](const std::string& why) {
    return InvalidArgumentError(util::codes::kBadOption, why);
  };
  if (o.pd.role == PdRole::kCombined) {
    if (!o.pd_checkpoint_dir.empty() || !o.pd.prefill_url.empty()) {
      return bad("--pd-checkpoint-dir and --pd-prefill-url need --pd-role prefill or decode");
    }
    return absl::OkStatus();
  }
  const std::string role = PdRoleName(o.pd.role);
  if (o.pd_checkpoint_dir.empty()) {
    return bad(fmt::format("--pd-role {} needs --pd-checkpoint-dir (the folder both sides share)",
                           role));
  }
  if (!o.prefix_checkpoint_dir.empty()) {
    return bad(fmt::format("--pd-role {} keeps its checkpoints in --pd-checkpoint-dir; drop "
                           "--prefix-checkpoint-dir",
                           role));
  }
  if (o.engine.model_revision.empty()) {
    return bad(fmt::format("--pd-role {} needs --model-revision (the same on both sides: a "
                           "checkpoint of other weights is refused)",
                           role));
  }
  const char* key = std::getenv(kPdApiKeyEnv);
  if (key == nullptr || *key == '\0') {
    return bad(fmt::format("--pd-role {} needs {} in the environment (the same on both sides)",
                           role, kPdApiKeyEnv));
  }
  for (const char* c = key; *c != '\0'; ++c) {
    if (*c < 0x21 || *c > 0x7e) {  // it travels in a header: visible ASCII only
      return bad(fmt::format("{} must be visible ASCII characters (no spaces or control "
                             "characters)",
                             kPdApiKeyEnv));
    }
  }
  o.pd.api_key = key;
  if (!o.engine.enable_prefix_caching) {
    return bad(fmt::format("--pd-role {} needs the prefix cache (drop --no-prefix-caching): "
                           "restored checkpoints live there",
                           role));
  }
  if (o.pd.role == PdRole::kDecode) {
    if (o.pd.prefill_url.empty()) return bad("--pd-role decode needs --pd-prefill-url");
    absl::StatusOr<http::Url> url = http::ParseUrl(o.pd.prefill_url);
    if (!url.ok()) return bad("--pd-prefill-url: " + std::string(url.status().message()));
  } else if (!o.pd.prefill_url.empty()) {
    return bad("--pd-prefill-url is for --pd-role decode");
  }
  return absl::OkStatus();
}

}  // namespace

std::string EngineStatsLine(const engine::EngineStats& a, const engine::EngineStats& b,
                            double seconds) {
  const int64_t prompt = b.prefill_tokens - a.prefill_tokens;
  const int64_t generated = b.generation_tokens - a.generation_tokens;
  if (seconds <= 0 || (prompt == 0 && generated == 0 && b.num_running == 0 && b.num_waiting == 0)) {
    return "";
  }
  const int64_t queries = b.prefix_cache_queries - a.prefix_cache_queries;
  const int64_t hits = b.prefix_cache_hits - a.prefix_cache_hits;
  std::string line = fmt::format(
      "stats running={} waiting={} kv_cache={:.1f}% prompt_tok_s={:.1f} generation_tok_s={:.1f} "
      "prefix_cache_hit={:.1f}% preemptions={}",
      b.num_running, b.num_waiting, 100.0 * b.kv_cache_usage, prompt / seconds, generated / seconds,
      queries > 0 ? 100.0 * hits / queries : 0.0, b.num_preemptions);
  const int64_t drafts = b.spec_num_draft_tokens - a.spec_num_draft_tokens;
  if (drafts > 0) {
    const double accepted = static_cast<double>(b.spec_num_accepted_tokens -
                                                a.spec_num_accepted_tokens);
    const int64_t steps = std::max<int64_t>(1, b.spec_num_drafts - a.spec_num_drafts);
    line += fmt::format(" spec_acceptance={:.1f}% spec_acceptance_length={:.2f}",
                        100.0 * accepted / static_cast<double>(drafts),
                        1.0 + accepted / static_cast<double>(steps));
  }
  return line;
}

std::string DefaultServedName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  const size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base.empty() ? "model" : base;
}

absl::StatusOr<std::string> DefaultModelPath() {
  constexpr const char* kName = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string cache;
  if (const char* dir = std::getenv("DEEPINFER_CACHE"); dir != nullptr && *dir != '\0') {
    cache = dir;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    cache = std::string(home) + "/.cache/deepinfer";
  } else {
    return NotFoundError(util::codes::kNoModel,
                         "no --model given, and neither DEEPINFER_CACHE nor HOME is set to find "
                         "the default model; pass --model PATH");
  }
  std::string path = cache + "/models/" + kName;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFoundError(
        util::codes::kNoModel,
        fmt::format("no --model given and the default model ({}) is not in {}/models; "
                    "run `make serve` or scripts/fetch_model.sh to fetch it, or pass "
                    "--model PATH",
                    kName, cache));
  }
  return path;
}

namespace {

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

absl::StatusOr<std::vector<std::string>> LoadApiKeys(const ServeOptions& o) {
  std::vector<std::string> keys;
  auto add = [&keys](std::string_view key, std::string_view from) -> absl::Status {
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) {
      key.remove_suffix(1);
    }
    while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
    if (key.empty()) return absl::OkStatus();
    // The key travels in a header: visible ASCII only, so that it can be typed and compared.
    for (char c : key) {
      if (c < 0x21 || c > 0x7e) {
        return InvalidArgumentError(util::codes::kBadOption,
                                    fmt::format("an API key from {} holds a character other than "
                                                "visible ASCII (the key is not shown)",
                                                from));
      }
    }
    keys.emplace_back(key);
    return absl::OkStatus();
  };
  for (const std::string& key : o.api_keys) DI_RETURN_IF_ERROR(add(key, "--api-key"));
  if (const char* env = std::getenv(kApiKeyEnv); env != nullptr) {
    DI_RETURN_IF_ERROR(add(env, kApiKeyEnv));
  }
  if (!o.api_key_file.empty()) {
    absl::StatusOr<std::string> text = util::ReadFile(o.api_key_file);
    if (!text.ok()) {
      return InvalidArgumentError(util::codes::kBadOption,
                                  fmt::format("cannot read --api-key-file {}: {}", o.api_key_file,
                                              std::string(text.status().message())));
    }
    const size_t before = keys.size();
    for (std::string_view rest = *text; !rest.empty();) {
      const size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      if (!line.empty() && line.front() == '#') continue;
      DI_RETURN_IF_ERROR(add(line, "--api-key-file"));
    }
    if (keys.size() == before) {
      return InvalidArgumentError(
          util::codes::kBadOption,
          fmt::format("--api-key-file {} holds no key (one per line; # starts a comment)",
                      o.api_key_file));
    }
  }
  if (keys.empty() && !IsLoopbackHost(o.host) && !o.allow_unauthenticated) {
    return InvalidArgumentError(
        util::codes::kBadOption,
        fmt::format("--host {} is reachable from other machines and no API key is set: give "
                    "--api-key, --api-key-file or {}, or --allow-unauthenticated to serve anyone "
                    "who can reach it",
                    o.host, kApiKeyEnv));
  }
  return keys;
}

}  // namespace

namespace {

// What the first phase reads and checks, before anything slow.
struct StartPlan {
  std::string served_name;
  std::vector<std::string> api_keys;
  std::vector<WarmupRequest> warmup;
  std::shared_ptr<engine::CheckpointStore> checkpoints;  // null: none
};

// The model file and the name it is served under.
// Errors: NotFound "no_model" when none is named and the default is not there.
absl::Status ResolveModel(ServeOptions& o, StartPlan* plan) {
  if (o.model.empty()) {
    absl::StatusOr<std::string> path = DefaultModelPath();
    if (!path.ok()) return Failed("cannot start", path.status());
    o.model = *std::move(path);
    spdlog::info("no --model given: serving the default model {}", o.model);
  }
  plan->served_name =
      o.served_model_name.empty() ? DefaultServedName(o.model) : o.served_model_name;
  return absl::OkStatus();
}

// Batch telemetry from the environment: a missing folder or a reused run id stops the start.
// Errors: InvalidArgument "bad_telemetry".
absl::Status CheckTelemetry(ServeOptions& o) {
  absl::StatusOr<engine::TelemetryConfig> telemetry = engine::TelemetryConfigFromEnv();
  if (!telemetry.ok()) return Failed("bad batch telemetry settings", telemetry.status());
  o.engine.telemetry = *telemetry;
  if (!telemetry->enabled()) return absl::OkStatus();
  for (int32_t r = 0; r < o.data_parallel_size; ++r) {
    const std::string path = engine::TelemetryPath(*telemetry, r);
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
      return Failed("bad batch telemetry settings",
                    InvalidArgumentError(util::codes::kBadTelemetry,
                                         fmt::format("{} exists: DEEPINFER_BATCH_TELEMETRY_RUN_ID "
                                                     "{} was used by an earlier run; give each "
                                                     "run a new id",
                                                     path, telemetry->run_id)));
    }
  }
  return absl::OkStatus();
}

// The warm-up file, read and checked so that a typo costs no model load. Empty without one.
// Errors: InvalidArgument "bad_warmup".
absl::StatusOr<std::vector<WarmupRequest>> ReadWarmup(const ServeOptions& o) {
  if (o.warmup_file.empty()) return std::vector<WarmupRequest>();
  absl::StatusOr<std::string> text = util::ReadFile(o.warmup_file);
  if (!text.ok()) {
    return Failed("cannot read --warmup-file",
                  InvalidArgumentError(util::codes::kBadWarmup,
                                       fmt::format("{}: {}", o.warmup_file,
                                                   std::string(text.status().message()))));
  }
  absl::StatusOr<std::vector<WarmupRequest>> parsed = ParseWarmupFile(*text);
  if (!parsed.ok()) return Failed("bad --warmup-file", parsed.status());
  return parsed;
}

// The checkpoint store of a P/D role (--pd-checkpoint-dir) or of --prefix-checkpoint-dir, set
// into o.engine; null when neither is asked for.
// Errors: those of CheckPdOptions and engine::CheckpointStore::Open.
absl::StatusOr<std::shared_ptr<engine::CheckpointStore>> OpenCheckpoints(ServeOptions& o) {
  if (absl::Status st = CheckPdOptions(o); !st.ok()) return Failed("bad P/D settings", st);
  std::shared_ptr<engine::CheckpointStore> checkpoints;
  if (o.pd.role != PdRole::kCombined) {
    // The prefill side's writer queue holds one checkpoint per concurrent prefill call.
    auto store = engine::CheckpointStore::Open(o.pd_checkpoint_dir, o.checkpoint_max_bytes,
                                               kPdPrefillSlots);
    if (!store.ok()) return Failed("bad --pd-checkpoint-dir", store.status());
    checkpoints = std::shared_ptr<engine::CheckpointStore>(*std::move(store));
    o.engine.checkpoint_store = checkpoints;
    // Only the prefill calls write (GenerateRequest::prefill_only): the decode side reads what
    // its prefill side wrote, and the prefill side's queue stays free for the calls.
    o.engine.checkpoint_save = false;
    spdlog::info("P/D {} side: checkpoints in {} ({} MiB of at most {} MiB), revision {}{}",
                 PdRoleName(o.pd.role), o.pd_checkpoint_dir, checkpoints->bytes() >> 20,
                 o.checkpoint_max_bytes >> 20, o.engine.model_revision,
                 o.pd.role == PdRole::kDecode
                     ? fmt::format(", prompts prefilled by {}", o.pd.prefill_url)
                     : std::string(", internal calls on POST /internal/pd/prefill"));
  } else if (!o.prefix_checkpoint_dir.empty()) {
    auto store = engine::CheckpointStore::Open(o.prefix_checkpoint_dir, o.checkpoint_max_bytes);
    if (!store.ok()) return Failed("bad --prefix-checkpoint-dir", store.status());
    checkpoints = std::shared_ptr<engine::CheckpointStore>(*std::move(store));
    if (o.engine.model_revision.empty()) o.engine.model_revision = DefaultModelRevision(o.model);
    o.engine.checkpoint_store = checkpoints;
    // The newest checkpoints go back into the prefix cache at start (up to half of it).
    o.engine.checkpoint_preload_tokens = std::numeric_limits<int64_t>::max();
    spdlog::info("prefix checkpoints in {} ({} MiB of at most {} MiB), revision {}, prefixes of "
                 ">= {} tokens",
                 o.prefix_checkpoint_dir, checkpoints->bytes() >> 20, o.checkpoint_max_bytes >> 20,
                 o.engine.model_revision, o.engine.checkpoint_min_tokens);
  }
  return checkpoints;
}

// Phase 1: every setting and file checked before anything slow: the model's path, batch
// telemetry, API keys (a missing key file, or an open non-loopback address, stops the start at
// once), the warm-up file and the P/D and checkpoint settings. Each failure is logged.
absl::StatusOr<StartPlan> CheckSettings(ServeOptions& o) {
  StartPlan plan;
  DI_RETURN_IF_ERROR(ResolveModel(o, &plan));
  DI_RETURN_IF_ERROR(CheckTelemetry(o));
  if (absl::Status media = CheckMediaOptions(o.media); !media.ok()) {
    return Failed("bad image input settings", media);
  }
  absl::StatusOr<std::vector<std::string>> keys = LoadApiKeys(o);
  if (!keys.ok()) return Failed("bad API key settings", keys.status());
  plan.api_keys = *std::move(keys);
  DI_ASSIGN_OR_RETURN(plan.warmup, ReadWarmup(o));
  DI_ASSIGN_OR_RETURN(plan.checkpoints, OpenCheckpoints(o));
  return plan;
}

// Phase 2: SIGINT and SIGTERM blocked; every thread created from here on inherits the mask, so
// only sigtimedwait sees them. SIGPIPE is ignored.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return signals;
}

// Phase 3: the port bound and the routes answering (/health is 503 until a model is served).
// Errors: those of http::Server::Start, logged.
absl::StatusOr<std::unique_ptr<http::Server>> Listen(const ServeOptions& o,
                                                     const StartPlan& plan, ApiServer& routes) {
  routes.set_log_requests(o.log_requests);
  routes.SetApiKeys(http::ApiKeySet(plan.api_keys), o.metrics_without_key);
  http::ServerOptions http_options;
  http_options.host = o.host;
  http_options.port = o.port;
  http_options.max_request_bytes = o.max_request_bytes;
  http_options.max_connections = o.max_connections;
  // A generation parses JSON and renders its chat template on its worker thread.
  http_options.thread_stack_bytes = size_t{1} << 20;
  http_options.server_name = "deepinfer";
  http_options.request_ids = true;
  auto server = http::Server::Start(
      http_options,
      [&routes](const http::Request& r, http::ResponseWriter& w) { routes.Handle(r, w); },
      [&routes](const http::Request& r, int status, double s, const http::RequestLog& log) {
        routes.Observe(r, status, s, log);
      });
  if (!server.ok()) return Failed("cannot listen", server.status());
  routes.SetHttpServer(server->get());
  spdlog::info("listening on http://{}:{}, loading {}", o.host, (*server)->port(), o.model);
  return server;
}

// The model with its tokenizer, chat encoder, grammar compiler and engine. Members are destroyed
// in reverse order: the engine first.
// The model, its tokenizer and chat encoder as --model, --tokenizer and --chat-template say;
// with expert parallelism, other ranks' FP8 experts left unconverted.
absl::StatusOr<tokenizer::Servable> LoadServableOf(const ServeOptions& o) {
  return tokenizer::LoadServable(
      {.model_path = o.model,
       .tokenizer_path = o.tokenizer,
       .chat_template = o.chat_template,
       .unread_tensors = engine::ExpertParallelUnread(o.engine.expert_parallel.get())});
}

struct LoadedModel {
  tokenizer::Servable servable;
  std::unique_ptr<constraint::GrammarCompiler> grammar;
  std::unique_ptr<engine::Engine> engine;
};

// Phase 4: the servable loaded (the model, its tokenizer and chat encoder, Engram token classes
// attached), one grammar compiler for its vocabulary (structured outputs), and the engine ranks
// started.
// Errors: those of tokenizer::LoadServable and the engine, logged.
absl::StatusOr<LoadedModel> LoadModelAndEngine(const ServeOptions& o) {
  LoadedModel loaded;
  auto servable = LoadServableOf(o);
  if (!servable.ok()) return Failed("cannot load model", servable.status());
  loaded.servable = *std::move(servable);
  const model::Model& model = *loaded.servable.model;
  const tokenizer::Tokenizer& tok = *loaded.servable.tokenizer;
  // The compiler's vocabulary is the model's logits' width; its end tokens include those the
  // engine stops on.
  loaded.grammar = constraint::GrammarCompiler::Create(
      tok, std::max(model.config.vocab, tok.vocab_size()), model.tokenizer.eog_ids);
  auto engine = engine::CreateDataParallelEngine(model, o.engine, o.data_parallel_size,
                                                 o.data_parallel_cores);
  if (!engine.ok()) return Failed("cannot start engine", engine.status());
  loaded.engine = *std::move(engine);
  return loaded;
}

// Phase 5: what every route sees of the loaded model.
ServedModel MakeServedModel(const ServeOptions& o, const StartPlan& plan,
                            const LoadedModel& loaded, ApiServer& routes) {
  ServedModel served;
  served.engine = loaded.engine.get();
  served.tokenizer = loaded.servable.tokenizer.get();
  served.chat_template = loaded.servable.chat_template.get();
  served.served_model_name = plan.served_name;
  served.max_model_len = loaded.engine->max_model_len();
  served.max_output_tokens = std::max(1, std::min(o.max_output_tokens, served.max_model_len));
  served.created_unix = UnixNow();
  served.force_include_usage = o.force_include_usage;
  served.metrics = &routes.metrics();
  served.checkpoints = plan.checkpoints.get();
  served.pd = o.pd.role != PdRole::kCombined ? &o.pd : nullptr;
  served.grammar = loaded.grammar.get();
  const model::ModelConfig& config = loaded.servable.model->config;
  if (config.deepseek_v4.has_value() && config.deepseek_v4->vision.has_value()) {
    served.vision = &*config.deepseek_v4->vision;
  }
  served.media = o.media;
  return served;
}

// Stops the HTTP server; when a connection is stuck in a write to a client that does not read,
// exits at once with `exit_code` instead of waiting for it.
void StopServerOrExit(http::Server& server, int exit_code) {
  if (server.Stop(5000)) return;
  spdlog::warn("{} connection(s) still open; exiting anyway", server.num_connections());
  spdlog::default_logger()->flush();
  std::_Exit(exit_code);
}

// Phase 6: the warm-up requests, on a thread of their own so that a signal still stops the
// start at once. Returns the signal that stopped it (the server is then stopped), or 0.
// Errors: those of RunWarmup (InvalidArgument "bad_warmup"), logged.
absl::StatusOr<int> WarmUp(const ServeOptions& o, const StartPlan& plan, http::Server& server,
                           const engine::Engine& engine, const sigset_t& signals) {
  spdlog::info("warm-up: {} request(s) from {}{}; /health is 503 warming_up until they finish",
               plan.warmup.size(), o.warmup_file,
               engine.num_ranks() > 1 ? fmt::format(", on each of {} ranks", engine.num_ranks())
                                      : "");
  const auto started = std::chrono::steady_clock::now();
  std::atomic<bool> done{false};
  absl::Status result;
  std::thread runner([&] {
    result = RunWarmup(plan.warmup, o.host, server.port(), engine.num_ranks(),
                       plan.api_keys.empty() ? std::string_view() : plan.api_keys.front());
    done.store(true, std::memory_order_release);
  });
  int sig = 0;
  while (!done.load(std::memory_order_acquire) && sig == 0) {
    sig = WaitForSignal(signals, std::chrono::milliseconds(20));
  }
  if (sig != 0) {
    // Stopping the server ends the runner's request (its connection closes).
    spdlog::info("signal {} during the warm-up, shutting down", sig);
    StopServerOrExit(server, 0);
    runner.join();
    return sig;
  }
  runner.join();
  if (!result.ok()) return Failed("warm-up failed", result);
  spdlog::info("warm-up: done in {:.1f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

// Phase 7: the "ready" line and what the operator needs to know about the running engine.
void LogReady(const ServeOptions& o, const ServedModel& served, const LoadedModel& loaded,
              int port) {
  const engine::Engine& engine = *loaded.engine;
  std::string url = fmt::format("http://{}:{}", o.host, port);
  spdlog::info("serving {} on {} (ready)", served.served_model_name, url);
  spdlog::info("context {} tokens, {} chat template", served.max_model_len,
               loaded.servable.chat_template->name());
  const int64_t per_token = engine.kv_bytes_per_token();
  spdlog::info("KV cache: {} tokens, {} bytes per token ({:.1f} KiB, {}); numerics {}",
               engine.kv_capacity_tokens(), per_token, per_token / 1024.0,
               kernels::KvDtypeName(o.engine.kv_cache_dtype), engine.numerics_name());
  spdlog::info("matmul kernels: {}", engine::MatMulKernelsSummary(*loaded.servable.model));
  if (engine.draft_tokens_per_step() > 0) {
    spdlog::info("speculative decoding: {} drafter, up to {} draft tokens per step",
                 engine.drafter_name(), engine.draft_tokens_per_step());
  }
  if (o.engine.telemetry.enabled()) {
    spdlog::info("batch telemetry: {} (one file per rank)",
                 engine::TelemetryPath(o.engine.telemetry, 0));
  }
  if (const int32_t ranks = engine.num_ranks(); ranks > 1) {
    spdlog::info(
        "data-parallel: {} ranks, each with its own scheduler, KV cache ({} tokens) and prefix "
        "cache, {}; requests pinned by X-data-parallel-rank, else routed to the rank holding "
        "their longest cached prefix, else the least loaded",
        ranks, engine.kv_capacity_tokens() / ranks,
        o.data_parallel_cores == engine::DataParallelCores::kSplit
            ? "the threads split between them"
            : "all threads to each rank in turn");
  }
  if (engine.kv_window_cache_bytes() > 0) {
    spdlog::info(
        "window cache: {:.1f} MiB shared by the running sequences (each keeps the blocks of "
        "its last {} positions and its step's chunk; the rest holds finished windows for "
        "prefix hits)",
        engine.kv_window_cache_bytes() / 1048576.0, engine.kv_window_tokens());
  }
  spdlog::info(
      "try: curl {}/v1/chat/completions -H 'Content-Type: application/json' "
      "-d '{{\"model\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}]}}'",
      url, served.served_model_name);
}

// Phase 8: serving until SIGINT or SIGTERM, with one stats line every log_stats_interval_s (per
// rank, prefixed "rank=K", when there are several). Returns the signal.
int ServeUntilSignal(const ServeOptions& o, const engine::Engine& engine,
                     const sigset_t& signals) {
  const int32_t ranks = engine.num_ranks();
  auto snapshot = [&] {
    std::vector<engine::EngineStats> all;
    for (int32_t r = 0; r < ranks; ++r) all.push_back(engine.RankStats(r));
    return all;
  };
  auto last_at = std::chrono::steady_clock::now();
  std::vector<engine::EngineStats> last = snapshot();
  int sig = 0;
  while (sig == 0) {
    sig = WaitForSignal(signals, std::chrono::milliseconds(1000));
    if (o.log_stats_interval_s <= 0) continue;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_at).count();
    if (seconds < o.log_stats_interval_s) continue;
    std::vector<engine::EngineStats> current = snapshot();
    for (int32_t r = 0; r < ranks; ++r) {
      if (std::string line = EngineStatsLine(last[r], current[r], seconds); !line.empty()) {
        spdlog::info("{}{}", ranks > 1 ? fmt::format("rank={} ", r) : "", line);
      }
    }
    last = std::move(current);
    last_at = now;
  }
  return sig;
}

}  // namespace

// An expert-parallel rank other than 0: the same model loaded the same way (Engram token classes
// included), no port, rank 0's steps replayed until it stops. SIGINT and SIGTERM stay blocked:
// mpirun passes a Ctrl-C to every rank, and this rank ends when rank 0 has shut down.
absl::Status FollowLeader(const ServeOptions& o) {
  auto servable = LoadServableOf(o);
  if (!servable.ok()) return Failed("cannot load model", servable.status());
  spdlog::info("expert parallelism: rank {} of {} runs its share of every MoE layer's routed "
               "experts and follows rank 0's steps",
               o.engine.expert_parallel->rank(), o.engine.expert_parallel->ranks());
  // As many lanes as rank 0 has data-parallel engines, its threads split the same way.
  absl::Status followed = engine::RunExpertParallelFollower(
      *servable->model, *o.engine.expert_parallel, o.engine.num_threads, o.data_parallel_size);
  if (!followed.ok()) return Failed("expert-parallel rank failed", followed);
  spdlog::info("expert parallelism: rank {} done (rank 0 stopped)", o.engine.expert_parallel->rank());
  return absl::OkStatus();
}

absl::Status Serve(ServeOptions o) {
  DI_ASSIGN_OR_RETURN(const StartPlan plan, CheckSettings(o));
  const sigset_t signals = BlockStopSignals();
  if (o.expert_parallel) {
    // After the mask, so MPI's own threads inherit it.
    auto group = engine::ExpertParallelGroup::Init(o.expert_parallel_timeout_s);
    if (!group.ok()) return Failed("cannot start expert parallelism", group.status());
    o.engine.expert_parallel = *std::move(group);
    if (o.engine.expert_parallel->rank() != 0) return FollowLeader(o);
  }
  ApiServer routes;
  DI_ASSIGN_OR_RETURN(std::unique_ptr<http::Server> server, Listen(o, plan, routes));
  DI_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndEngine(o));
  ServedModel served = MakeServedModel(o, plan, loaded, routes);
  routes.set_warming_up(!plan.warmup.empty());
  routes.SetServedModel(&served);
  // The server goes before the engine its handlers use.
  auto shut_down = [&](absl::Status status) {
    server.reset();
    loaded.engine.reset();
    return status;
  };

  int sig = 0;
  while (!loaded.engine->ready() && sig == 0) {
    sig = WaitForSignal(signals, std::chrono::milliseconds(20));
  }
  if (sig == 0 && !plan.warmup.empty()) {
    absl::StatusOr<int> warm = WarmUp(o, plan, *server, *loaded.engine, signals);
    if (!warm.ok()) {
      StopServerOrExit(*server, 2);
      return shut_down(warm.status());
    }
    if (*warm != 0) return shut_down(absl::OkStatus());  // the server is stopped
    routes.set_warming_up(false);
  }
  if (sig == 0) {
    LogReady(o, served, loaded, server->port());
    sig = ServeUntilSignal(o, *loaded.engine, signals);
  }
  spdlog::info("signal {}, shutting down", sig);
  StopServerOrExit(*server, 0);
  return shut_down(absl::OkStatus());
}

}  // namespace deepinfer::api
