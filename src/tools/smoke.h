#pragma once

// `deepinfer smoke`: a quick functional check of a running OpenAI-compatible server with
// synthetic prompts only. It proves that an instance answers before it takes traffic; it records
// no timings (that is `deepinfer bench`).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

struct SmokeOptions {
  std::string base_url;  // "http://127.0.0.1:8900/v1"; the server root is this without "/v1"
  std::string api_key;   // sent as "Authorization: Bearer KEY" when not empty
  std::optional<int32_t> dp_rank;        // sent as "X-data-parallel-rank" on chat requests
  std::string model;                     // expected model id; empty: the first one listed
  std::optional<int64_t> expect_window;  // fail unless /v1/models reports this window
  double timeout_s = 120;                // per exchange
};

// One named check and what it found. `detail` is one line, meant for an operator.
struct SmokeCheck {
  std::string name;
  bool ok = false;
  std::string detail;
};

struct SmokeReport {
  std::string base_url;
  std::string model;   // the id used for the chat checks
  int64_t window = 0;  // 0 when unknown
  std::vector<SmokeCheck> checks;

  bool ok() const;
};

// Runs every check in order: health, models, chat, image (a vision model answers a 1x1 PNG, a
// text-only one refuses it with unsupported_content), stream, prefix_cache, over_window, cancel
// (a hung-up stream followed by a successful request). A failed check does not stop the later
// ones, so one run shows everything that is wrong.
// Errors: InvalidArgument "bad_url" only; what the server does wrong is in the report.
// Cost: about 10 requests; the over-window request carries about 2 bytes per token of the window.
absl::StatusOr<SmokeReport> RunSmoke(const SmokeOptions& options);

// A table with one line per check, and a final verdict line.
std::string FormatSmokeReport(const SmokeReport& report);
// {"ok", "base_url", "model", "window", "checks": [{"name", "ok", "detail"}]}.
std::string SmokeReportJson(const SmokeReport& report);

}  // namespace deepinfer::tools
