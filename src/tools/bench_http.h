#pragma once

// A small blocking HTTP/1.1 client for `deepinfer bench` (Boost.Beast underneath): plain JSON
// requests and streamed responses whose body pieces are handed over as they arrive, plus an
// incremental Server-Sent-Events parser.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

// Where a server listens: "http://host:port[/prefix]". A trailing "/v1" is dropped so that both
// OpenAI-style base URLs and server roots work (the bench also calls /tokenize and /health).
struct BaseUrl {
  std::string host;
  std::string port;
  std::string prefix;  // path prefix without a trailing slash, usually empty

  std::string ToString() const;
};

// Errors: InvalidArgument "bad_url" (not http://, no host, bad port).
absl::StatusOr<BaseUrl> ParseBaseUrl(const std::string& url);

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// Options of one exchange.
// Units: idle_timeout_s bounds every single network operation (connect, write, one read), so a
// slow but live stream is never cut; total_timeout_s bounds the whole exchange (0: none).
struct HttpOptions {
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double idle_timeout_s = 600;
  double total_timeout_s = 0;
};

// Sends one request ("GET" or "POST"; a POST body is JSON) and reads the whole response.
// Errors: Unavailable "connect_failed" / "io_error", DeadlineExceeded "timeout".
// Threads: safe to call from many threads at once (each call has its own connection).
absl::StatusOr<HttpResponse> HttpFetch(const BaseUrl& base, const std::string& method,
                                       const std::string& path, const std::string& body,
                                       const HttpOptions& options);

// Called with each piece of the response body as it arrives (chunked encoding already removed).
// Returning false stops reading and closes the connection.
using BodySink = std::function<bool(std::string_view piece)>;

// POSTs `body` (JSON) and streams the response. A 2xx response body goes to `sink` piece by
// piece; any other status is read whole into the returned HttpResponse::body. Returns the
// response head (status, content type).
// Errors: as HttpFetch.
absl::StatusOr<HttpResponse> HttpPostStreaming(const BaseUrl& base, const std::string& path,
                                               const std::string& body, const HttpOptions& options,
                                               const BodySink& sink);

// Splits a byte stream into Server-Sent-Events and returns the `data` of each complete event
// (several data lines joined by "\n"). Accepts "\n", "\r\n" and "\r" line ends and ignores
// comments (": ping") and other fields.
// Source: WHATWG HTML, 9.2 Server-sent events, "event stream interpretation".
class SseParser {
 public:
  // Appends `bytes` and returns the data of the events they completed.
  std::vector<std::string> Feed(std::string_view bytes);

 private:
  void Line(std::string_view line, std::vector<std::string>* out);

  std::string pending_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;  // the previous piece ended in "\r"
};

}  // namespace deepinfer::tools
