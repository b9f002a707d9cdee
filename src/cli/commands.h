#pragma once

#include "CLI/CLI.hpp"

namespace deepinfer::cli {

// Each subcommand registers its flags on `app` and sets a callback that runs it. The callback
// stores the process exit status in *exit_code: 0 success, 1 failure of the work itself,
// 2 bad input (flags, files, requests).
void RegisterGenerate(CLI::App& app, int* exit_code);
void RegisterServe(CLI::App& app, int* exit_code);
void RegisterGateway(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterSmoke(CLI::App& app, int* exit_code);
void RegisterVerifyModel(CLI::App& app, int* exit_code);
void RegisterRender(CLI::App& app, int* exit_code);
void RegisterCountTokens(CLI::App& app, int* exit_code);
void RegisterWatch(CLI::App& app, int* exit_code);

}  // namespace deepinfer::cli
