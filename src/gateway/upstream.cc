#include "gateway/upstream.h"

#include <poll.h>

#include <algorithm>
#include <optional>

#include "boost/asio/error.hpp"
#include "boost/beast/core/string.hpp"
#include "boost/beast/http/error.hpp"
#include "fmt/format.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/response_parser.h"
#include "http/sse.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::gateway {

using http::Clock;
using http::CloseNow;
namespace {

namespace net = boost::asio;
using boost::system::error_code;

// A pooled connection idle for less than this is reused without a liveness poll.
constexpr int kRecheckAfterIdleMs = 2;
// A partial SSE event larger than this is passed on without waiting for its end.
constexpr size_t kMaxHeldEventBytes = 64 * 1024;

// The client's key is the gateway's business only: never forwarded, logged or counted.
bool IsForwarded(std::string_view name) {
  return !http::IsHopByHopHeader(name) && name != "authorization" && name != "x-api-key" &&
         name != "x-request-id";
}

// Built by appending (no format strings, one allocation): it runs once per proxied request.
std::string RequestHeadFor(const BackendAddress& backend, const http::Request& request,
                           std::string_view request_id, bool keep_alive) {
  size_t size_hint = request_id.size() + 16;
  for (const auto& [name, value] : request.headers) size_hint += name.size() + value.size() + 4;
  http::RequestHead head(request.method, request.target, backend.host_port(), size_hint);
  // RFC 9110 section 7.6.1: the fields the client's Connection header names are hop-by-hop.
  const std::string_view connection = request.Header("connection");
  for (const auto& [name, value] : request.headers) {
    if (!IsForwarded(name) || (!connection.empty() && http::ListsToken(connection, name))) continue;
    head.Add(name, value);
  }
  head.Add("x-request-id", request_id);
  // Without a pool, one connection per request.
  return head.Finish(request.body.size(), keep_alive);
}

// Sends `error` to a client that has seen nothing yet.
void RespondError(http::ResponseWriter& writer, const http::Headers& extra,
                  const absl::Status& status) {
  http::ApiError error = GatewayError(status);
  http::Headers headers = extra;
  headers.emplace_back("Content-Type", "application/json");
  writer.Respond(error.http_status, headers, http::ErrorBodyForPath(error, writer.request_path()));
}

// The end of the last complete SSE event in `data` (0 when none).
size_t LastEventEnd(std::string_view data) {
  size_t lf = data.rfind("\n\n");
  size_t crlf = data.rfind("\r\n\r\n");
  size_t end = 0;
  if (lf != std::string_view::npos) end = lf + 2;
  if (crlf != std::string_view::npos) end = std::max(end, crlf + 4);
  return end;
}

// The backend connection's waits: every one ends the moment the client leaves (its socket is
// watched, and its hang-up consulted between slices).
http::ClientOptions ClientOptionsFor(const UpstreamOptions& options, http::ResponseWriter& writer) {
  http::ClientOptions o;
  o.connect_timeout_ms = options.connect_timeout_ms;
  o.write_timeout_ms = options.write_timeout_ms;
  o.header_timeout_ms = options.header_timeout_ms;
  o.idle_timeout_ms = options.idle_timeout_ms;
  o.slice_ms = options.slice_ms;
  o.cancel = [&writer] { return writer.PeerClosed(); };
  o.watch_fd = writer.client_fd();
  return o;
}

// One proxied request (see ProxyRequest): each step either hands on to the next (true) or has
// ended the request, its end recorded in the result (false).
// Threads: the connection thread's. Lifetime: borrows everything it is given.
class Proxy {
 public:
  Proxy(const BackendAddress& backend, const http::Request& request,
        const http::Headers& extra_headers, http::ResponseWriter& writer,
        const UpstreamOptions& options, UpstreamPool* pool)
      : backend_(backend),
        request_(request),
        extra_headers_(extra_headers),
        writer_(writer),
        pool_(pool),
        client_options_(ClientOptionsFor(options, writer)),
        connection_(client_options_) {}

  ProxyResult Run(std::string_view request_id, absl::FunctionRef<void()> on_sent) {
    if (Open() && Send(request_id)) {
      on_sent();
      if (ReadHead() && StartAnswer()) Relay();
    }
    return std::move(result_);
  }

 private:
  bool End(ProxyEnd end) {
    result_.end = end;
    return false;
  }

  // Ends the request with an error answer (the client has seen nothing yet).
  bool Fail(ProxyEnd end, const absl::Status& status) {
    RespondError(writer_, extra_headers_, status);
    result_.status = writer_.status();
    return End(end);
  }

  // A pooled connection, else a new one.
  bool Open() {
    start_ = Clock::now();
    const int pooled = pool_ != nullptr ? pool_->Take(backend_.origin()) : -1;
    if (pooled < 0) return Connect();
    connection_.Adopt(pooled);
    pooled_ = true;
    return true;
  }

  bool Connect() {
    const absl::Status status = connection_.Connect(backend_);
    if (status.ok()) return true;
    if (pool_ != nullptr) pool_->Drop(backend_.origin());
    result_.error = std::string(status.message());
    return End(ProxyEnd::kConnectFailed);
  }

  // Head and body, in one send where the socket allows.
  bool Send(std::string_view request_id) {
    result_.phase = "waiting_headers";
    const std::string head = RequestHeadFor(backend_, request_, request_id, pool_ != nullptr);
    bool sent = !connection_.Send(head, request_.body);
    if (!sent && pooled_ && !writer_.PeerClosed()) {
      // The reused connection died while idle (nothing of this request was processed): once more
      // on a fresh connection to the same backend.
      if (!Connect()) return false;
      sent = !connection_.Send(head, request_.body);
    }
    result_.connect_seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (sent) return true;
    if (writer_.PeerClosed()) return End(ProxyEnd::kClientGone);
    result_.error = "cannot send the request to the backend";
    return Fail(
        ProxyEnd::kBackendFailed,
        UnavailableError(util::codes::kBackendError, "The backend did not accept the request."));
  }

  bool ReadHead() {
    headers_.reserve(12);
    const error_code ec = connection_.ReadHead(&headers_, request_.method == "HEAD");
    if (!ec) return true;
    if (ec == net::error::operation_aborted) return End(ProxyEnd::kClientGone);
    result_.error = ec.message();
    if (ec == net::error::timed_out) {
      return Fail(ProxyEnd::kBackendTimeout,
                  MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kBackendTimeout,
                            "The backend did not answer in time."));
    }
    return Fail(ProxyEnd::kBackendFailed,
                UnavailableError(util::codes::kBackendError,
                                 ec == boost::beast::http::error::bad_status
                                     ? "The backend answered with a status the gateway does not "
                                       "pass on."
                                     : "The backend closed the connection without an answer."));
  }

  // Sends the client the backend's status and headers plus the gateway's own.
  bool StartAnswer() {
    const http::ResponseParser& response = connection_.response();
    sse_ = response.sse();
    for (const auto& [name, value] : extra_headers_) {
      if (response.has_request_id() && boost::beast::iequals(name, "x-request-id")) continue;
      headers_.emplace_back(name, value);
    }
    if (sse_) {
      // Tell intermediaries (nginx, Caddy) not to buffer the stream.
      if (!response.has_accel_buffering()) headers_.emplace_back("X-Accel-Buffering", "no");
      if (!response.has_cache_control()) headers_.emplace_back("Cache-Control", "no-cache");
    }
    std::optional<uint64_t> length;
    if (auto cl = response.content_length()) length = *cl;
    if (response.is_done() && !length) length = 0;
    result_.phase = sse_ ? "streaming" : "body";
    result_.status = response.status();
    if (!writer_.BeginBodyHeld(response.status(), headers_, length)) {
      return End(ProxyEnd::kClientGone);
    }
    result_.client_started = true;
    // The head leaves with the first body bytes, or alone as soon as the body would be waited
    // for (an SSE stream's head never waits on its first event).
    connection_.stream().set_before_read_wait([this] { return writer_.Flush(); });
    return true;
  }

  // The body, as it arrives.
  void Relay() {
    char chunk[http::ClientConnection::kBodyChunkBytes];
    while (!connection_.done()) {
      error_code ec;
      const size_t n = connection_.ReadBody(chunk, sizeof(chunk), ec);
      if (!ec) ReturnToPool();
      if (n > 0 && !Forward(std::string_view(chunk, n))) {
        End(ProxyEnd::kClientGone);
        return;
      }
      if (ec) {
        BackendBroke(ec);
        return;
      }
    }
    if (!held_.empty() && !writer_.Write(held_)) {
      End(ProxyEnd::kClientGone);
      return;
    }
    ReturnToPool();
    End(writer_.End() ? ProxyEnd::kDone : ProxyEnd::kClientGone);
  }

  // Passes body bytes on; SSE bodies whole event by whole event. False: the client is gone.
  bool Forward(std::string_view bytes) {
    if (!sse_) return writer_.Write(bytes);
    held_.append(bytes);
    const size_t end = held_.size() > kMaxHeldEventBytes ? held_.size() : LastEventEnd(held_);
    const bool ok = end == 0 || writer_.Write(std::string_view(held_).substr(0, end));
    held_.erase(0, end);
    return ok;
  }

  // A complete answer's connection goes back to the pool before its last bytes go to the
  // client, so that the client's next request finds it there.
  void ReturnToPool() {
    if (returned_ || pool_ == nullptr || !connection_.reusable()) return;
    returned_ = true;
    pool_->Put(backend_.origin(), connection_.Release());
  }

  // The backend failed after the client got the head.
  void BackendBroke(const error_code& ec) {
    if (ec == net::error::operation_aborted) {
      End(ProxyEnd::kClientGone);
      return;
    }
    End(ec == net::error::timed_out ? ProxyEnd::kBackendTimeout : ProxyEnd::kBackendFailed);
    result_.error = ec.message();
    if (!sse_) {
      writer_.Abort();
      return;
    }
    // The partial event is dropped: the client gets whole events, then one error event.
    http::ApiError error = http::ApiErrorFromStatus(UnavailableError(
        util::codes::kBackendDisconnected, "The backend failed in the middle of the stream."));
    writer_.Write(http::SseErrorForPath(error, writer_.request_path()));
    writer_.End();
  }

  const BackendAddress& backend_;
  const http::Request& request_;
  const http::Headers& extra_headers_;
  http::ResponseWriter& writer_;
  UpstreamPool* const pool_;
  const http::ClientOptions client_options_;
  http::ClientConnection connection_;  // closing it is how the backend learns the client left
  Clock::time_point start_;
  bool pooled_ = false;    // the connection came from the pool
  bool sse_ = false;       // the answer is an event stream
  bool returned_ = false;  // the connection went back to the pool
  http::Headers headers_;  // what the client gets
  std::string held_;       // SSE bytes after the last complete event
  ProxyResult result_;
};

}  // namespace

http::ApiError GatewayError(const absl::Status& status) {
  // backend_error and backend_unavailable are answered 502 by their registry entries.
  return http::ApiErrorFromStatus(status);
}

UpstreamPool::~UpstreamPool() {
  absl::MutexLock lock(&mu_);  // no other user is left; the lock is for the analysis
  for (auto& [url, list] : idle_) {
    for (const Idle& idle : list) CloseNow(idle.fd);
  }
}

int UpstreamPool::Take(const std::string& backend_url) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> stale;
  int fd = -1;
  std::chrono::steady_clock::time_point since;
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(backend_url);
    if (it == idle_.end()) return -1;
    std::vector<Idle>& list = it->second;
    while (!list.empty() && fd < 0) {
      Idle idle = list.back();
      list.pop_back();
      if (now - idle.since > std::chrono::milliseconds(max_idle_ms_)) {
        stale.push_back(idle.fd);
      } else {
        fd = idle.fd;
        since = idle.since;
      }
    }
  }
  for (int s : stale) CloseNow(s);
  // A backend that closed an idle connection (restart, its own timeout) is seen here, before
  // a request is written to it. Anything readable on an idle connection means it is unusable.
  // A connection put back moments ago skips the poll (one syscall per request under load): a
  // close within that window is as likely as one just after the poll, which no check can see.
  if (fd >= 0 && now - since >= std::chrono::milliseconds(kRecheckAfterIdleMs)) {
    pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) != 0) {
      CloseNow(fd);
      fd = -1;
    }
  }
  return fd;
}

void UpstreamPool::Put(const std::string& backend_url, int fd) {
  int evicted = -1;
  {
    absl::MutexLock lock(&mu_);
    std::vector<Idle>& list = idle_[backend_url];
    if (list.size() >= max_idle_per_backend_) {
      evicted = list.front().fd;
      list.erase(list.begin());
    }
    list.push_back({fd, std::chrono::steady_clock::now()});
  }
  if (evicted >= 0) CloseNow(evicted);
}

void UpstreamPool::Drop(const std::string& backend_url) {
  std::vector<Idle> list;
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(backend_url);
    if (it == idle_.end()) return;
    list.swap(it->second);
  }
  for (const Idle& idle : list) CloseNow(idle.fd);
}

ProxyResult ProxyRequest(const BackendAddress& backend, const http::Request& request,
                         std::string_view request_id, const http::Headers& extra_headers,
                         http::ResponseWriter& writer, const UpstreamOptions& options,
                         UpstreamPool* pool, absl::FunctionRef<void()> on_sent) {
  return Proxy(backend, request, extra_headers, writer, options, pool).Run(request_id, on_sent);
}

absl::StatusOr<http::ClientResponse> HttpGet(const BackendAddress& backend, const std::string& path,
                                             int timeout_ms, int64_t max_body_bytes) {
  http::ClientRequest request;
  request.target = path;
  request.headers = {{"Accept", "application/json"}};
  http::FetchOptions options;
  options.idle_timeout_ms = timeout_ms;
  options.total_timeout_ms = timeout_ms;
  options.max_body_bytes = max_body_bytes;
  absl::StatusOr<http::ClientResponse> response = http::Fetch(backend, request, options);
  if (response.ok()) return response;
  const std::string code = ErrorCodeOf(response.status());
  if (code == util::codes::kConnectFailed || code == util::codes::kConnectTimeout)
    return response.status();
  if (code == "timeout") {
    return MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kBackendTimeout,
                     fmt::format("GET {} timed out", path));
  }
  return UnavailableError(
      util::codes::kBackendError,
      fmt::format("GET {}: {}", path, std::string(response.status().message())));
}

}  // namespace deepinfer::gateway
