// Orchestration of `deepinfer bench`: probe the server, build prompts with its tokenizer, run
// each concurrency level, print and save the results.

#include "tools/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <set>

#include "fmt/format.h"
#include "tools/bench_dataset.h"
#include "tools/bench_needle.h"
#include "tools/bench_report.h"
#include "tools/bench_runner.h"
#include "tools/bench_server.h"
#include "util/error_codes.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

absl::Status BadFlag(const std::string& message) {
  return InvalidArgumentError(util::codes::kBadFlag, message);
}

std::string UtcNow() { return util::UtcTimestamp(static_cast<double>(std::time(nullptr))); }

// Builds the prompts of one level, with a progress line for long builds.
class PromptMaker {
 public:
  PromptMaker(ServerClient& server, int64_t bos_tokens, bool exact, std::mt19937_64& rng)
      : server_(server), bos_tokens_(bos_tokens), exact_(exact), rng_(rng) {}

  absl::StatusOr<Prompt> Make(int64_t num_tokens) {
    if (exact_) return BuildPrompt(server_, num_tokens, bos_tokens_, rng_);
    // No tokenizer endpoint: one word per token is the best guess (reported as planned).
    return Prompt{RandomWords(rng_, static_cast<int>(num_tokens - bos_tokens_)), num_tokens};
  }

  absl::StatusOr<int64_t> Count(const std::string& text) {
    if (!exact_) return -1;
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, server_.Tokenize(text));
    return static_cast<int64_t>(ids.size());
  }

  std::string Words(int n) { return RandomWords(rng_, n); }

 private:
  ServerClient& server_;
  int64_t bos_tokens_;
  bool exact_;
  std::mt19937_64& rng_;
};

int DefaultNumPrompts(const BenchOptions& o, int concurrency, bool pairs) {
  if (o.num_prompts > 0) return o.num_prompts;
  return pairs ? std::max(4, concurrency) : std::max(8, 4 * concurrency);
}

// Collects distinct error lines (first few) for the report.
void CollectErrors(const std::vector<RequestRecord>& records, std::vector<std::string>* errors) {
  for (const RequestRecord& r : records) {
    if (r.ok || errors->size() >= 10) continue;
    if (std::find(errors->begin(), errors->end(), r.error) == errors->end()) {
      errors->push_back(r.error);
    }
  }
}

struct Context {
  const BenchOptions& o;
  ServerClient& server;
  ClientConfig client;
  bool progress = false;
  std::mt19937_64 rng;
  int64_t bos_tokens = 0;
  bool exact = false;
  std::vector<std::string> errors;
};

// One request of the benchmark: `text` as the completion prompt and as the chat user message.
RequestSpec MakeSpec(const BenchOptions& o, std::string text, int64_t planned_prompt_tokens) {
  RequestSpec spec;
  spec.messages = {{"user", text}};
  spec.prompt = std::move(text);
  spec.planned_prompt_tokens = planned_prompt_tokens;
  spec.max_tokens = o.output_len;
  spec.ignore_eos = o.ignore_eos;
  return spec;
}

// Builds `count` jobs with `make_job` (showing progress), runs them at concurrency `c` and
// collects the errors. `what` names the jobs in the progress lines ("requests", "pairs").
absl::StatusOr<std::vector<RequestRecord>> BuildAndRun(
    Context& ctx, int c, int count, const char* what,
    const std::function<absl::StatusOr<std::vector<RequestSpec>>()>& make_job, double* duration_s) {
  const BenchOptions& o = ctx.o;
  std::vector<std::vector<RequestSpec>> jobs;
  ProgressBar building(fmt::format("prompts  c={:<3}", c), count, ctx.progress);
  for (int i = 0; i < count; ++i) {
    DI_ASSIGN_OR_RETURN(std::vector<RequestSpec> job, make_job());
    jobs.push_back(std::move(job));
    building.Tick(true);
  }
  building.Finish();
  LoadOptions load{c, o.request_rate, o.seed + static_cast<uint64_t>(c), ctx.progress,
                   fmt::format("{:<8} c={:<3}", what, c)};
  std::vector<RequestRecord> records = RunLoad(ctx.client, jobs, load, duration_s);
  CollectErrors(records, &ctx.errors);
  return records;
}

absl::StatusOr<util::Json> RunRandom(Context& ctx, bool* all_ok) {
  const BenchOptions& o = ctx.o;
  PromptMaker maker(ctx.server, ctx.bos_tokens, ctx.exact, ctx.rng);
  std::vector<RandomRun> runs;
  util::Json json_runs = util::Json::array();
  for (int c : o.concurrency) {
    int n = DefaultNumPrompts(o, c, false);
    double duration_s = 0;
    DI_ASSIGN_OR_RETURN(std::vector<RequestRecord> records,
                        BuildAndRun(
                            ctx, c, n, "requests",
                            [&]() -> absl::StatusOr<std::vector<RequestSpec>> {
                              DI_ASSIGN_OR_RETURN(Prompt p, maker.Make(o.input_len));
                              return std::vector<RequestSpec>{MakeSpec(o, p.text, p.num_tokens)};
                            },
                            &duration_s));
    RandomRun run{c, o.request_rate, ComputeRunMetrics(records, duration_s, o.percentiles)};
    if (run.metrics.failed > 0) *all_ok = false;
    util::Json j = util::Json::object();
    j["concurrency"] = c;
    j["request_rate"] =
        std::isfinite(o.request_rate) ? util::Json(o.request_rate) : util::Json("inf");
    j["metrics"] = MetricsJson(run.metrics, o.percentiles);
    json_runs.push_back(std::move(j));
    runs.push_back(std::move(run));
  }
  std::fputs(RandomTable(runs, o.percentiles).c_str(), stdout);
  std::fflush(stdout);
  return json_runs;
}

absl::StatusOr<util::Json> RunSharedPrefix(Context& ctx, bool* all_ok) {
  const BenchOptions& o = ctx.o;
  PromptMaker maker(ctx.server, ctx.bos_tokens, ctx.exact, ctx.rng);
  std::vector<PrefixRun> runs;
  util::Json json_runs = util::Json::array();
  for (int c : o.concurrency) {
    int pairs = DefaultNumPrompts(o, c, true);
    double duration_s = 0;
    DI_ASSIGN_OR_RETURN(
        std::vector<RequestRecord> records,
        BuildAndRun(
            ctx, c, pairs, "pairs",
            [&]() -> absl::StatusOr<std::vector<RequestSpec>> {
              DI_ASSIGN_OR_RETURN(Prompt prefix, maker.Make(o.prefix_len));
              std::vector<RequestSpec> job;
              for (int k = 0; k < 2; ++k) {
                std::string text = prefix.text + " " + maker.Words(o.suffix_len);
                DI_ASSIGN_OR_RETURN(int64_t count, maker.Count(text));
                job.push_back(
                    MakeSpec(o, std::move(text), count >= 0 ? count : o.prefix_len + o.suffix_len));
              }
              return job;
            },
            &duration_s));
    std::vector<RequestRecord> cold, hot;
    for (size_t i = 0; i < records.size(); ++i) (i % 2 == 0 ? cold : hot).push_back(records[i]);
    PrefixRun run;
    run.concurrency = c;
    run.cold = ComputeRunMetrics(cold, duration_s, o.percentiles);
    run.hot = ComputeRunMetrics(hot, duration_s, o.percentiles);
    // The speedup uses the medians, whatever percentiles were asked for.
    std::vector<double> cold_ttft, hot_ttft;
    for (const RequestRecord& r : cold) {
      if (r.ok) cold_ttft.push_back(r.ttft_s);
    }
    for (const RequestRecord& r : hot) {
      if (r.ok) hot_ttft.push_back(r.ttft_s);
    }
    double cold_p50 = Summarize(cold_ttft, {50}, 1000.0).percentiles[0];
    double hot_p50 = Summarize(hot_ttft, {50}, 1000.0).percentiles[0];
    run.ttft_speedup_p50 = hot_p50 > 0 ? cold_p50 / hot_p50 : 0;
    if (run.hot.total_cached_tokens >= 0 && run.hot.completed > 0) {
      run.hot_cached_tokens_mean =
          static_cast<double>(run.hot.total_cached_tokens) / static_cast<double>(run.hot.completed);
    }
    if (run.cold.failed + run.hot.failed > 0) *all_ok = false;
    util::Json j = util::Json::object();
    j["concurrency"] = c;
    j["pairs"] = pairs;
    j["request_rate"] =
        std::isfinite(o.request_rate) ? util::Json(o.request_rate) : util::Json("inf");
    j["ttft_p50_cold_ms"] = cold_p50;
    j["ttft_p50_hot_ms"] = hot_p50;
    j["ttft_speedup_p50"] = run.ttft_speedup_p50;
    j["hot_cached_tokens_mean"] = run.hot_cached_tokens_mean < 0
                                      ? util::Json(nullptr)
                                      : util::Json(run.hot_cached_tokens_mean);
    j["cold"] = MetricsJson(run.cold, o.percentiles);
    j["hot"] = MetricsJson(run.hot, o.percentiles);
    json_runs.push_back(std::move(j));
    runs.push_back(std::move(run));
  }
  std::fputs(PrefixTable(runs, o.percentiles).c_str(), stdout);
  std::fflush(stdout);
  return json_runs;
}

absl::StatusOr<util::Json> RunNeedle(Context& ctx, int64_t window, bool* all_ok) {
  NeedleOptions n;
  n.window = window;
  n.fill = ctx.o.needle_fill;
  n.depths = ctx.o.needle_depths;
  n.output_len = ctx.o.needle_output_len;
  n.bos_tokens = ctx.bos_tokens;
  n.seed = ctx.o.seed;
  std::fprintf(stderr, "needle: 4 cases over a window of %lld tokens (fill %.2f)...\n",
               static_cast<long long>(window), n.fill);
  DI_ASSIGN_OR_RETURN(std::vector<NeedleCase> cases, RunNeedleCases(ctx.client, ctx.server, n));
  int passed = 0;
  for (const NeedleCase& c : cases) {
    if (c.pass) {
      ++passed;
    } else {
      *all_ok = false;
    }
  }
  std::fputs(NeedleTable(cases).c_str(), stdout);
  std::fprintf(stdout, "needle: %d of %zu cases passed\n", passed, cases.size());
  std::fflush(stdout);
  util::Json j = util::Json::object();
  j["window"] = window;
  j["fill"] = n.fill;
  j["depths"] = n.depths;
  j["output_len"] = n.output_len;
  j["passed"] = passed;
  j["failed"] = static_cast<int>(cases.size()) - passed;
  j["cases"] = NeedleJson(cases);
  return j;
}

int ExitFor(const absl::Status& status) {
  std::fprintf(stderr, "deepinfer bench: %s\n", OneLineError(status).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ||
                 status.code() == absl::StatusCode::kNotFound
             ? 2
             : 1;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long v = item.empty() ? 0 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 1000000) {
      return BadFlag(fmt::format("'{}' is not a list of positive integers", text));
    }
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& text) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    double v = item.empty() ? 0 : std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v)) {
      return BadFlag(fmt::format("'{}' is not a list of numbers", text));
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

absl::Status ValidateBenchOptions(const BenchOptions& o) {
  if (o.dataset != "random" && o.dataset != "shared-prefix") {
    return BadFlag(fmt::format("--dataset '{}': use random or shared-prefix", o.dataset));
  }
  if (!o.endpoint.empty() && o.endpoint != "completions" && o.endpoint != "chat") {
    return BadFlag(fmt::format("--endpoint '{}': use completions or chat", o.endpoint));
  }
  if (o.input_len < 2) return BadFlag("--input-len must be at least 2");
  if (o.output_len < 1) return BadFlag("--output-len must be at least 1");
  if (o.dataset == "shared-prefix" && o.prefix_len < 2) {
    return BadFlag("--prefix-len must be at least 2");
  }
  if (o.suffix_len < 1) return BadFlag("--suffix-len must be at least 1");
  if (o.concurrency.empty()) return BadFlag("--concurrency needs at least one level");
  for (int c : o.concurrency) {
    if (c < 1 || c > 4096) return BadFlag("--concurrency levels must be in 1..4096");
  }
  if (!(o.request_rate > 0)) return BadFlag("--request-rate must be positive (or inf)");
  if (o.num_prompts < 0) return BadFlag("--num-prompts must not be negative");
  if (o.warmup < 0) return BadFlag("--warmup must not be negative");
  if (o.percentiles.empty()) return BadFlag("--percentiles needs at least one value");
  for (double p : o.percentiles) {
    if (p < 0 || p > 100) return BadFlag("--percentiles must be within 0..100");
  }
  if (!(o.timeout_s > 0)) return BadFlag("--timeout must be positive");
  if (o.needle_depths.empty() || o.needle_depths.size() > 4) {
    return BadFlag("--needle-depths needs 1 to 4 values");
  }
  for (double d : o.needle_depths) {
    if (d < 0 || d > 1) return BadFlag("--needle-depths must be within 0..1");
  }
  if (!(o.needle_fill > 0 && o.needle_fill <= 1)) return BadFlag("--needle-fill must be in (0, 1]");
  if (o.needle_output_len < 1) return BadFlag("--needle-output-len must be at least 1");
  if (o.temperature < 0) return BadFlag("--temperature must not be negative");
  return absl::OkStatus();
}

int RunBench(const BenchOptions& o) {
  if (absl::Status s = ValidateBenchOptions(o); !s.ok()) return ExitFor(s);
  auto base = ParseBaseUrl(o.base);
  if (!base.ok()) return ExitFor(base.status());

  HttpOptions http;
  http.api_key = o.api_key;
  http.idle_timeout_s = o.timeout_s;
  http.total_timeout_s = o.timeout_s;
  HttpOptions probe_http = http;
  probe_http.idle_timeout_s = std::min(o.timeout_s, 60.0);
  ServerClient server(*base, probe_http);
  if (absl::Status s = server.Probe(o.model); !s.ok()) return ExitFor(s);
  const ServerInfo& info = server.info();
  int64_t window = o.max_model_len > 0 ? o.max_model_len : info.max_model_len;
  std::fprintf(stderr, "deepinfer bench: %s model '%s' (%s server, window %s, tokenizer %s)\n",
               base->ToString().c_str(), info.model.c_str(), info.kind.c_str(),
               window > 0 ? std::to_string(window).c_str() : "unknown",
               DialectName(info.tokenizer));

  Context ctx{o, server, {}, false, std::mt19937_64(o.seed), 0, false, {}};
  ctx.progress = o.progress < 0 ? isatty(STDERR_FILENO) != 0 : o.progress == 1;
  ctx.client.base = *base;
  ctx.client.http = http;
  ctx.client.model = info.model;
  std::string endpoint = o.endpoint.empty() ? (o.needle ? "chat" : "completions") : o.endpoint;
  ctx.client.endpoint = endpoint == "chat" ? Endpoint::kChat : Endpoint::kCompletions;
  ctx.client.temperature = o.temperature;
  ctx.exact = info.tokenizer != TokenizerDialect::kNone;
  if (ctx.exact) {
    auto empty = server.Tokenize("");
    if (!empty.ok()) return ExitFor(empty.status());
    ctx.bos_tokens = static_cast<int64_t>(empty->size());
  } else {
    std::fprintf(stderr,
                 "deepinfer bench: warning: the server has no tokenize endpoint; input lengths "
                 "are approximate (one word per token)\n");
  }

  // Requests that cannot fit the window would only measure the server's 400s.
  int64_t longest = o.dataset == "shared-prefix"
                        ? static_cast<int64_t>(o.prefix_len) + o.suffix_len * 2 + o.output_len
                        : static_cast<int64_t>(o.input_len) + o.output_len;
  if (!o.needle && window > 0 && longest > window) {
    return ExitFor(BadFlag(fmt::format(
        "prompt + output ({} tokens) exceed the server's window of {} tokens", longest, window)));
  }
  if (o.needle && window <= 0) {
    return ExitFor(
        BadFlag("--needle needs the window: the server does not report "
                "max_model_len, pass --max-model-len"));
  }

  // Warm-up: a few short requests, which also prove that generation works at all.
  if (o.warmup > 0) {
    std::vector<std::vector<RequestSpec>> jobs;
    for (int i = 0; i < o.warmup; ++i) {
      RequestSpec spec;
      spec.prompt = RandomWords(ctx.rng, 8);
      spec.messages = {{"user", spec.prompt}};
      spec.max_tokens = 4;
      jobs.push_back({spec});
    }
    double duration_s = 0;
    std::vector<RequestRecord> records = RunLoad(
        ctx.client, jobs,
        LoadOptions{1, std::numeric_limits<double>::infinity(), 0, false, "warmup"}, &duration_s);
    for (const RequestRecord& r : records) {
      if (!r.ok) {
        std::fprintf(stderr, "deepinfer bench: warm-up request failed: %s\n", r.error.c_str());
        return 1;
      }
    }
  }

  bool all_ok = true;
  util::Json result = util::Json::object();
  result["tool"] = "deepinfer bench";
  result["version"] = o.tool_version;
  result["date"] = UtcNow();
  result["label"] = o.label;
  result["base_url"] = base->ToString();
  result["server"] =
      util::Json{{"kind", info.kind},
                 {"model", info.model},
                 {"max_model_len", window > 0 ? util::Json(window) : util::Json(nullptr)},
                 {"tokenizer", DialectName(info.tokenizer)}};
  std::string dataset = o.needle ? "needle" : o.dataset;
  result["config"] =
      util::Json{{"dataset", dataset},
                 {"endpoint", endpoint},
                 {"input_len", o.input_len},
                 {"output_len", o.output_len},
                 {"prefix_len", o.prefix_len},
                 {"suffix_len", o.suffix_len},
                 {"concurrency", o.concurrency},
                 {"num_prompts", o.num_prompts},
                 {"request_rate",
                  std::isfinite(o.request_rate) ? util::Json(o.request_rate) : util::Json("inf")},
                 {"ignore_eos", o.ignore_eos},
                 {"temperature", o.temperature},
                 {"percentiles", o.percentiles},
                 {"seed", o.seed},
                 {"timeout_s", o.timeout_s},
                 {"exact_input_lengths", ctx.exact},
                 {"bos_tokens", ctx.bos_tokens}};
  absl::StatusOr<util::Json> section;
  if (o.needle) {
    section = RunNeedle(ctx, window, &all_ok);
    if (section.ok()) result["needle"] = *section;
  } else if (o.dataset == "shared-prefix") {
    section = RunSharedPrefix(ctx, &all_ok);
    if (section.ok()) result["runs"] = *section;
  } else {
    section = RunRandom(ctx, &all_ok);
    if (section.ok()) result["runs"] = *section;
  }
  if (!section.ok()) return ExitFor(section.status());
  result["errors"] = ctx.errors;
  result["ok"] = all_ok;
  for (const std::string& e : ctx.errors) std::fprintf(stderr, "error: %s\n", e.c_str());

  if (!o.json_path.empty()) {
    absl::Status s = util::WriteFileAtomically(o.json_path, util::DumpJson(result, 2) + "\n");
    if (!s.ok()) {
      std::fprintf(stderr, "deepinfer bench: --json: %s\n", OneLineError(s).c_str());
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace deepinfer::tools
