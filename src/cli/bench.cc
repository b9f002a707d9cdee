// `deepinfer bench`: flag parsing only; the load generator lives in tools/bench.h.

#include "tools/bench.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct BenchFlags {
  tools::BenchOptions options;
  std::string concurrency = "1";
  std::string request_rate = "inf";
  std::string percentiles = "50,90,99";
  std::string needle_depths = "0.1,0.35,0.6,0.85";
  bool no_ignore_eos = false;
  bool progress = false;
  bool no_progress = false;
};

int Fail(const absl::Status& status) { return ReportFailure("bench", status); }

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<BenchFlags>();
  tools::BenchOptions& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Load generator for OpenAI-compatible servers: TTFT, TPOT, ITL, E2E latency and throughput "
      "(vLLM's definitions), concurrency sweeps, shared-prefix cold/hot TTFT, long-context "
      "needle acceptance");
  cmd->add_option("--base", o.base, "server URL (http://host:port, a trailing /v1 is accepted)")
      ->capture_default_str();
  cmd->add_option("--model", o.model, "model id (default: the first one the server lists)");
  cmd->add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
  auto* dataset =
      cmd->add_option("--dataset", o.dataset, "random | shared-prefix")->capture_default_str();
  cmd->add_option("--endpoint", o.endpoint,
                  "completions | chat (default: completions; chat for --needle)");
  cmd->add_option("--input-len", o.input_len, "random: prompt tokens, exact (server's tokenizer)")
      ->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "output tokens per request")->capture_default_str();
  auto* prefix = cmd->add_option("--prefix-len", o.prefix_len,
                                 "shared-prefix: tokens of the shared prefix (default 2000; "
                                 "implies --dataset shared-prefix)");
  cmd->add_option("--suffix-len", o.suffix_len,
                  "shared-prefix: words after the prefix, different per request")
      ->capture_default_str();
  cmd->add_option("--concurrency", flags->concurrency,
                  "requests in flight; a list sweeps levels: 1,4,8,16")
      ->capture_default_str();
  cmd->add_option("--request-rate", flags->request_rate,
                  "requests/s, Poisson arrivals; inf sends all at once (capped by concurrency)")
      ->capture_default_str();
  cmd->add_option("--num-prompts", o.num_prompts,
                  "requests per level (default max(8, 4 x concurrency); shared-prefix: "
                  "max(4, concurrency) pairs)");
  cmd->add_option("--warmup", o.warmup, "short requests sent before measuring")
      ->capture_default_str();
  cmd->add_flag("--no-ignore-eos", flags->no_ignore_eos,
                "let requests stop at end-of-generation (default: ignore_eos + min_tokens)");
  cmd->add_option("--temperature", o.temperature)->capture_default_str();
  cmd->add_option("--percentiles", flags->percentiles, "percentiles to report")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of prompts and arrivals")->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s, "seconds per request")->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len,
                  "the server's window when /v1/models does not say (llama-cpp-python)");
  cmd->add_flag("--needle", o.needle,
                "long-context acceptance: four needles in a haystack filling the window, "
                "four cases, pass/fail each");
  cmd->add_option("--needle-depths", flags->needle_depths, "depths of needles A,B,C,D (0..1)")
      ->capture_default_str();
  cmd->add_option("--needle-fill", o.needle_fill, "fraction of the window the haystack fills")
      ->capture_default_str();
  cmd->add_option("--needle-output-len", o.needle_output_len, "max tokens of each answer")
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "write all results to this JSON file");
  cmd->add_option("--label", o.label, "free text stored in the JSON result");
  auto* progress = cmd->add_flag("--progress", flags->progress, "always draw progress bars");
  auto* no_progress = cmd->add_flag("--no-progress", flags->no_progress, "never draw them");
  progress->excludes(no_progress);

  cmd->callback([flags, exit_code, dataset, prefix] {
    tools::BenchOptions& o = flags->options;
    o.tool_version = DEEPINFER_VERSION;
    o.ignore_eos = !flags->no_ignore_eos;
    o.progress = flags->progress ? 1 : flags->no_progress ? 0 : -1;
    if (prefix->count() > 0 && dataset->count() == 0) o.dataset = "shared-prefix";
    if (o.dataset == "shared-prefix" && prefix->count() == 0) o.prefix_len = 2000;
    auto concurrency = tools::ParsePositiveIntList(flags->concurrency);
    if (!concurrency.ok()) {
      *exit_code = Fail(concurrency.status());
      return;
    }
    o.concurrency = *concurrency;
    if (flags->request_rate == "inf" || flags->request_rate == "infinity") {
      o.request_rate = std::numeric_limits<double>::infinity();
    } else {
      auto rate = tools::ParseDoubleList(flags->request_rate);
      if (!rate.ok() || rate->size() != 1) {
        *exit_code =
            Fail(InvalidArgumentError(util::codes::kBadFlag, "--request-rate: a number or inf"));
        return;
      }
      o.request_rate = (*rate)[0];
    }
    auto percentiles = tools::ParseDoubleList(flags->percentiles);
    if (!percentiles.ok()) {
      *exit_code = Fail(percentiles.status());
      return;
    }
    o.percentiles = *percentiles;
    auto depths = tools::ParseDoubleList(flags->needle_depths);
    if (!depths.ok()) {
      *exit_code = Fail(depths.status());
      return;
    }
    o.needle_depths = *depths;
    *exit_code = tools::RunBench(o);
  });
}

}  // namespace deepinfer::cli
