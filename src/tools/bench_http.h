#pragma once

// How `deepinfer bench` talks to a server, over http::Fetch: its base URL (a trailing "/v1"
// dropped), its request headers and its timeouts.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "http/client.h"
#include "http/url.h"

namespace deepinfer::tools {

// Where a server listens: "http://host:port[/prefix]" as http::ParseUrl reads it. A trailing
// "/v1" is dropped so that both OpenAI-style base URLs and server roots work (the bench also
// calls /tokenize and /health); the path left is the prefix of every request.
// Errors: InvalidArgument "bad_url" (see http::ParseUrl).
absl::StatusOr<http::Url> ParseBaseUrl(const std::string& url);

// Options of one exchange.
// Units: idle_timeout_s bounds every single network operation (connect, write, one read), so a
// slow but live stream is never cut; total_timeout_s bounds the whole exchange (0: none).
struct HttpOptions {
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double idle_timeout_s = 600;
  double total_timeout_s = 0;
};

// Sends one request ("GET" or "POST"; a POST body is JSON) to base.path() + `path` and reads the
// whole response.
// Errors: http::Fetch's: Unavailable "connect_failed" / "io_error", DeadlineExceeded
//   "connect_timeout" / "timeout".
// Threads: safe to call from many threads at once (each call has its own connection).
absl::StatusOr<http::ClientResponse> HttpFetch(const http::Url& base, const std::string& method,
                                               const std::string& path, const std::string& body,
                                               const HttpOptions& options);

// POSTs `body` (JSON) and streams the response. A 2xx response body goes to `sink` piece by
// piece (false stops reading and closes the connection); any other status is read whole (up to
// 1 MiB: an error body is short, and a misbehaving server must not make the client hoard memory)
// into the returned body.
// Errors: as HttpFetch, and ResourceExhausted "body_too_large".
absl::StatusOr<http::ClientResponse> HttpPostStreaming(const http::Url& base,
                                                       const std::string& path,
                                                       const std::string& body,
                                                       const HttpOptions& options,
                                                       const http::BodySink& sink);

}  // namespace deepinfer::tools
