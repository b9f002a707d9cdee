#pragma once

// Process-wide logging (spdlog): one line per event on stderr, UTC timestamps, level names.
// Example: "2026-11-29T16:55:01.123Z info request POST /v1/chat/completions 200 812.4ms ...".
// Threads: spdlog's default logger is thread-safe; InitLogging runs once at start-up, before
// other threads log.

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::util {

// Client-sent text for a log line: at most `max_bytes` bytes, anything but printable ASCII (and
// the space) replaced by '?', so a client cannot forge or split lines.
std::string PrintableForLog(std::string_view text, size_t max_bytes = 128);

// `unix_seconds` as an RFC 3339 UTC time, "2026-12-05T12:00:00Z" (whole seconds, truncated).
std::string UtcTimestamp(double unix_seconds);

// Makes the default spdlog logger write to stderr with the pattern above. Safe to call again.
void InitLogging();

}  // namespace deepinfer::util
