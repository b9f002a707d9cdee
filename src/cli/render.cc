// PLACEHOLDER until the render tool lands: registers the subcommand so the CLI links.
#include <cstdio>

#include "cli/commands.h"

namespace deepinfer::cli {

void RegisterRender(CLI::App& app, int* exit_code) {
  (void)app;
  (void)exit_code;
}

}  // namespace deepinfer::cli
