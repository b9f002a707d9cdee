// `deepinfer smoke`: flag parsing; the checks live in tools/smoke.h.

#include "tools/smoke.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct SmokeFlags {
  tools::SmokeOptions options;
  int32_t dp_rank = -1;
  int64_t expect_window = 0;
  bool json = false;
};

int Run(SmokeFlags& f) {
  if (f.dp_rank >= 0) f.options.dp_rank = f.dp_rank;
  if (f.expect_window > 0) f.options.expect_window = f.expect_window;
  if (f.options.api_key.empty()) {
    // Keys on command lines show up in `ps`; the environment does not.
    if (const char* key = std::getenv("DEEPINFER_API_KEY")) f.options.api_key = key;
  }
  auto report = tools::RunSmoke(f.options);
  if (!report.ok()) {
    return ReportFailure("smoke", report.status());
  }
  std::string out = f.json ? tools::SmokeReportJson(*report) : tools::FormatSmokeReport(*report);
  std::fputs(out.c_str(), stdout);
  return report->ok() ? 0 : 1;
}

}  // namespace

void RegisterSmoke(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SmokeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "smoke",
      "Functional check of a running server with synthetic prompts: health, models, chat, SSE, "
      "prefix cache, over-window refusal, cancel. Exit 0 only if every check passes.");
  cmd->add_option("--base", flags->options.base_url, "API base URL, e.g. http://127.0.0.1:8900/v1")
      ->required();
  cmd->add_option("--api-key", flags->options.api_key,
                  "sent as 'Authorization: Bearer KEY' (default: $DEEPINFER_API_KEY)");
  cmd->add_option("--dp-rank", flags->dp_rank,
                  "send 'X-data-parallel-rank: N' with the chat requests")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--model", flags->options.model, "model id to use (default: the first listed)");
  cmd->add_option("--expect-window", flags->expect_window,
                  "fail unless /v1/models reports this context window (tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--timeout", flags->options.timeout_s, "seconds per request")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print the report as JSON");
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
