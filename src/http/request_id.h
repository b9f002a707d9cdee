#pragma once

// Request ids: every answer of `serve` and of the gateway carries X-Request-Id (the client's own
// when it sent a usable one, else a new one), so that a client's log, the SDKs' `request_id`,
// the gateway's and the backend's log lines name the same request.
// Source: the de facto X-Request-Id convention (Heroku, nginx $request_id, vLLM); Anthropic's
// API answers with `request-id`.

#include <cstddef>
#include <string>
#include <string_view>

#include "http/request.h"

namespace deepinfer::http {

inline constexpr size_t kMaxRequestIdBytes = 128;

// True for an id a client may choose: 1 to kMaxRequestIdBytes bytes of visible ASCII (no space
// or control character, so it cannot split a header or a log line).
bool UsableRequestId(std::string_view id);

// `prefix` followed by 16 random hex digits, e.g. "req-9f2c61d0a4b7e815".
// Threads: any (a generator per thread).
std::string NewRequestId(std::string_view prefix);

// The id of `request`: its X-Request-Id when usable, else NewRequestId(prefix).
std::string RequestIdFor(const Request& request, std::string_view prefix);

}  // namespace deepinfer::http
