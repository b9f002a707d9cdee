// PLACEHOLDER until the smoke tool lands: registers the subcommand so the CLI links.
#include <cstdio>

#include "cli/commands.h"

namespace deepinfer::cli {

void RegisterSmoke(CLI::App& app, int* exit_code) {
  (void)app;
  (void)exit_code;
}

}  // namespace deepinfer::cli
