#pragma once

// Process-wide logging (spdlog): one line per event on stderr, UTC timestamps, level names.
// Example: "2026-11-29T16:55:01.123Z info request POST /v1/chat/completions 200 812.4ms ...".
// Threads: spdlog's default logger is thread-safe; InitLogging runs once at start-up, before
// other threads log.

namespace deepinfer::util {

// Makes the default spdlog logger write to stderr with the pattern above. Safe to call again.
void InitLogging();

}  // namespace deepinfer::util
