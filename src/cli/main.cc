// deepinfer: one binary, one subcommand per tool (see DESIGN.md).

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  // Debian's abseil is built without NDEBUG, which leaves absl::Mutex's deadlock detection on: each
  // Lock then also updates a process-wide graph of lock order under one global lock (an
  // uncontended Lock and Unlock measured 170 ns instead of 35 ns, and every thread's locks meet
  // at that one lock). The unit tests keep it on, where it checks lock order; the binary turns it
  // off before it starts any thread.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"deepinfer: serve DeepSeek-family and Llama models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("deepinfer ") + DEEPINFER_VERSION);
  int exit_code = 0;
  deepinfer::cli::RegisterGenerate(app, &exit_code);
  deepinfer::cli::RegisterServe(app, &exit_code);
  deepinfer::cli::RegisterGateway(app, &exit_code);
  deepinfer::cli::RegisterBench(app, &exit_code);
  deepinfer::cli::RegisterSmoke(app, &exit_code);
  deepinfer::cli::RegisterVerifyModel(app, &exit_code);
  deepinfer::cli::RegisterRender(app, &exit_code);
  deepinfer::cli::RegisterCountTokens(app, &exit_code);
  deepinfer::cli::RegisterWatch(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // CLI11 returns 0 for --help/--version; every other parse problem is bad input.
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
