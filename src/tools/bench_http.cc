#include "tools/bench_http.h"

#include <cmath>

#include "util/status.h"

namespace deepinfer::tools {
namespace {

int Millis(double seconds) { return static_cast<int>(std::lround(seconds * 1000)); }

http::ClientRequest Request(const http::Url& base, const std::string& method,
                            const std::string& path, const std::string& body, bool streaming,
                            const HttpOptions& options) {
  http::ClientRequest request;
  request.method = method == "GET" ? "GET" : "POST";
  request.target = base.path() + path;
  request.headers = {{"User-Agent", "deepinfer-bench"},
                     {"Accept", streaming ? "text/event-stream" : "application/json"}};
  if (!options.api_key.empty()) {
    request.headers.emplace_back("Authorization", "Bearer " + options.api_key);
  }
  if (request.method != "GET") {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = body;
  }
  return request;
}

http::FetchOptions FetchOptionsFor(const HttpOptions& options) {
  http::FetchOptions fetch;
  fetch.idle_timeout_ms = Millis(options.idle_timeout_s);
  fetch.total_timeout_ms = Millis(options.total_timeout_s);
  return fetch;
}

}  // namespace

absl::StatusOr<http::Url> ParseBaseUrl(const std::string& url) {
  DI_ASSIGN_OR_RETURN(http::Url base, http::ParseUrl(url));
  std::string prefix = base.path();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) {
    prefix.resize(prefix.size() - 3);
  }
  return http::Url(base.host(), base.port(), std::move(prefix));
}

absl::StatusOr<http::ClientResponse> HttpFetch(const http::Url& base, const std::string& method,
                                               const std::string& path, const std::string& body,
                                               const HttpOptions& options) {
  return http::Fetch(base, Request(base, method, path, body, /*streaming=*/false, options),
                     FetchOptionsFor(options));
}

absl::StatusOr<http::ClientResponse> HttpPostStreaming(const http::Url& base,
                                                       const std::string& path,
                                                       const std::string& body,
                                                       const HttpOptions& options,
                                                       const http::BodySink& sink) {
  http::FetchOptions fetch = FetchOptionsFor(options);
  fetch.max_body_bytes = 1 << 20;  // bodies read whole here are error bodies
  return http::Fetch(base, Request(base, "POST", path, body, /*streaming=*/true, options), fetch,
                     sink);
}

}  // namespace deepinfer::tools
