#pragma once

// `deepinfer serve --warmup-file`: request bodies run against the server after the model loads
// and before /health answers 200 (docs/api.md).

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::api {

// One warm-up request: the route it goes to and its body, as the file gave it.
struct WarmupRequest {
  std::string path;  // "/v1/chat/completions" (a body with "messages") or "/v1/completions"
                     // (a body with "prompt")
  std::string body;  // one JSON object
  int line = 1;      // 1-based line of the file where the body starts
};

// Parses a warm-up file: JSON lines (one request body per non-blank line), or the whole file as
// one JSON object (a single pretty-printed body, as the operator tools' host files name it).
// Only the shape is checked here (an object with "messages" or "prompt"); the server validates
// the rest when the request runs.
// Errors: InvalidArgument "bad_warmup" naming the line: not JSON, not an object, neither key,
//   both keys, or no request at all.
// Threads: pure function.
absl::StatusOr<std::vector<WarmupRequest>> ParseWarmupFile(std::string_view text);

}  // namespace deepinfer::api
