// `deepinfer count-tokens`: flag parsing; the counting lives in tools/count_tokens.h.

#include "tools/count_tokens.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct CountFlags {
  std::string model;
  std::string tokenizer;
  std::string chat_template;
  std::string request;
  std::string format = "auto";
  std::string profile = "model";
  tools::BudgetFlags budget;
  bool plan = false;
  bool json = false;
};

int Fail(const absl::Status& status) {
  return ReportFailure("count-tokens", status, "cannot count");
}

int Run(CountFlags f) {
  f.budget.profile =
      f.profile == "operator" ? tools::BudgetProfile::kOperator : tools::BudgetProfile::kModel;
  std::string body;
  if (f.request == "-") {
    body.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    auto text = util::ReadFile(f.request);
    if (!text.ok()) return Fail(text.status());
    body = std::move(*text);
  }
  auto counter = tools::RequestCounter::Create(f.model, f.tokenizer, f.chat_template);
  if (!counter.ok()) return Fail(counter.status());
  tools::RequestFormat format = f.format == "openai"      ? tools::RequestFormat::kOpenAi
                                : f.format == "anthropic" ? tools::RequestFormat::kAnthropic
                                                          : tools::RequestFormat::kAuto;
  auto count = (*counter)->Count(body, format, f.budget);
  if (!count.ok()) return Fail(count.status());
  tools::CompactionPlan plan;
  if (f.plan) {
    plan = tools::PlanCompaction(count->messages);
    absl::Status counted = (*counter)->CountPlan(*count, &plan);
    if (!counted.ok()) return Fail(counted);
  }
  const tools::CompactionPlan* plan_ptr = f.plan ? &plan : nullptr;
  std::string out = f.json ? tools::TokenCountJson(*count, plan_ptr, (*counter)->model_window())
                           : tools::FormatTokenCount(*count, plan_ptr);
  std::fputs(out.c_str(), stdout);
  return count->needs_compaction ? 1 : 0;
}

}  // namespace

void RegisterCountTokens(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<CountFlags>();
  CLI::App* cmd = app.add_subcommand(
      "count-tokens",
      "Count a chat request's input tokens exactly as `deepinfer serve` does and check it "
      "against the budget. Exit 0 fits, 1 compaction needed, 2 cannot be counted.");
  cmd->add_option("--model", flags->model,
                  "the model the server runs: GGUF, llama2.c .bin or Hugging Face folder")
      ->required();
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "llama2.c tokenizer (default: beside the model)");
  cmd->add_option("--chat-template", flags->chat_template,
                  "chat encoder by name, as given to `deepinfer serve --chat-template`");
  cmd->add_option("--request", flags->request, "request body (JSON file, or - for stdin)")
      ->required();
  cmd->add_option("--format", flags->format,
                  "openai (chat completions), anthropic (messages) or auto")
      ->check(CLI::IsMember({"auto", "openai", "anthropic"}))
      ->capture_default_str();
  cmd->add_option("--profile", flags->profile,
                  "model: judge as the server does (the model's window, the request's "
                  "max_tokens, no headroom); operator: the operator documents' budget (window "
                  "1,048,576, output 32,768, headroom 16,384)")
      ->check(CLI::IsMember({"model", "operator"}))
      ->capture_default_str();
  cmd->add_option("--window", flags->budget.window,
                  "context window, tokens (model profile: caps the model's window)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--output-tokens", flags->budget.output_tokens,
                  "tokens reserved for the answer (default: the request's max_tokens, 1 without "
                  "one; operator profile: 32,768)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--headroom", flags->budget.headroom_tokens,
                  "tokens kept free (default 0; operator profile: 16,384)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--image-tokens", flags->budget.image_tokens, "tokens reserved per image")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_flag("--plan-compaction", flags->plan,
                "name the message range to summarise (first half of the history, never "
                "splitting a tool call from its result)");
  cmd->add_flag("--json", flags->json, "print the result as JSON");
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
