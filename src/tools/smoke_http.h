#pragma once

// The HTTP client of the operator probes (`deepinfer smoke`, `deepinfer watch`): one connection
// per exchange, extra request headers, deadlines on every exchange, and a streamed variant that
// hands body bytes over as they arrive and can hang up mid-stream (to test cancellation).

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

// "http://host:port[/prefix]" split into parts. `prefix` has no trailing slash.
struct ServerUrl {
  std::string host;
  int port = 80;
  std::string prefix;
};

// Errors: InvalidArgument "bad_url" (not http://, no host, a bad port, a query or fragment).
absl::StatusOr<ServerUrl> ParseServerUrl(const std::string& url);

struct ProbeResponse {
  int status = 0;
  std::string content_type;
  std::string body;
  // True when the client hung up before the end of the body (the sink returned false).
  bool aborted = false;
};

struct ProbeRequest {
  std::string method = "GET";
  std::string target;  // path (with prefix) and query
  std::string body;    // sent as application/json when not empty
  std::vector<std::pair<std::string, std::string>> headers;
  double timeout_s = 60;  // the whole exchange
};

// Called with each piece of the body as it arrives (chunked coding removed); returning false
// closes the connection at once.
using ProbeSink = std::function<bool(std::string_view piece)>;

// Sends one request and reads the response. With a sink, the body goes to the sink piece by piece
// and ProbeResponse::body stays empty (non-2xx bodies are always read whole).
// Errors: Unavailable "connect_failed" / "io_error", DeadlineExceeded "timeout".
// Threads: safe to call from many threads at once (each call has its own connection).
absl::StatusOr<ProbeResponse> ProbeFetch(const ServerUrl& server, const ProbeRequest& request,
                                         const ProbeSink& sink = nullptr);

// Splits bytes of a Server-Sent-Events stream into the `data` payloads of complete events.
// Source: WHATWG HTML, 9.2 Server-sent events.
class SseSplitter {
 public:
  std::vector<std::string> Feed(std::string_view bytes);
  // Bytes of an unfinished event (a stream that ends here did not end cleanly).
  bool has_partial() const { return !line_.empty() || has_data_; }

 private:
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;
};

}  // namespace deepinfer::tools
