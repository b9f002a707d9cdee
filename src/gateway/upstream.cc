#include "gateway/upstream.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <optional>

#include "absl/strings/ascii.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/response_parser.h"
#include "http/socket_io.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::gateway {

using http::Clock;
using http::CloseNow;
using http::ConnectTcp;
using http::FdStream;
namespace {

namespace beast_http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;

constexpr size_t kHeaderLimitBytes = 64 * 1024;
constexpr size_t kReadChunkBytes = 16 * 1024;
// What the response buffer holds before it grows: a small answer in one recv, yet few pages
// per open stream (every stream keeps its buffer; see the memory row in docs/gateway.md).
constexpr size_t kReadBufferBytes = 4 * 1024;
// A pooled connection idle for less than this is reused without a liveness poll.
constexpr int kRecheckAfterIdleMs = 2;
// A partial SSE event larger than this is passed on without waiting for its end.
constexpr size_t kMaxHeldEventBytes = 64 * 1024;
// 1xx answers skipped before the final one; more is a broken backend.
constexpr int kMaxInterimAnswers = 8;

// Owns the backend socket; closing it is how the backend learns the client is gone.
class UpstreamSocket {
 public:
  explicit UpstreamSocket(int fd) : fd_(fd) {}
  ~UpstreamSocket() { CloseNow(fd_); }
  UpstreamSocket(const UpstreamSocket&) = delete;
  UpstreamSocket& operator=(const UpstreamSocket&) = delete;
  int fd() const { return fd_; }
  // Gives up ownership (the connection goes back to the pool).
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd) {
    CloseNow(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// "host:port" ("[v6]:port"): the normalized URL without its scheme.
std::string_view HostHeader(const BackendAddress& backend) {
  return std::string_view(backend.url).substr(std::string_view("http://").size());
}

// The client's key is the gateway's business only: never forwarded, logged or counted.
bool IsForwarded(std::string_view name) {
  return !http::IsHopByHopHeader(name) && name != "authorization" && name != "x-api-key" &&
         name != "x-request-id";
}

// Built by appending (no format strings, one allocation): it runs once per proxied request.
std::string RequestHead(const BackendAddress& backend, const http::Request& request,
                        std::string_view request_id, bool keep_alive) {
  const std::string_view host = HostHeader(backend);
  size_t size =
      request.method.size() + request.target.size() + host.size() + request_id.size() + 128;
  for (const auto& [name, value] : request.headers) size += name.size() + value.size() + 4;
  std::string out;
  out.reserve(size);
  out.append(request.method).append(" ").append(request.target).append(" HTTP/1.1\r\nHost: ");
  out.append(host).append("\r\n");
  // RFC 9110 section 7.6.1: the fields the client's Connection header names are hop-by-hop.
  const std::string_view connection = request.Header("connection");
  for (const auto& [name, value] : request.headers) {
    if (!IsForwarded(name) || (!connection.empty() && http::ListsToken(connection, name))) continue;
    out.append(name).append(": ").append(value).append("\r\n");
  }
  out.append("x-request-id: ").append(request_id).append("\r\n");
  const std::string& method = request.method;
  const size_t body_size = request.body.size();
  if (body_size > 0 || method == "POST" || method == "PUT" || method == "PATCH") {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof(digits), body_size).ptr;
    out.append("Content-Length: ").append(digits, end).append("\r\n");
  }
  // Without a pool, one connection per request. Either way the end of the connection is the
  // cancel signal while a request is on it.
  out.append(keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
  return out;
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

}  // namespace

http::ApiError GatewayError(const absl::Status& status) {
  http::ApiError error = http::ApiErrorFromStatus(status);
  if (error.code == "backend_error" || error.code == "backend_unavailable") {
    error.http_status = 502;
    error.type = "server_error";
  }
  return error;
}

UpstreamPool::~UpstreamPool() {
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
  ProxyResult result;
  const auto start = Clock::now();
  int pooled = pool != nullptr ? pool->Take(backend.url) : -1;
  auto connect = [&]() -> absl::StatusOr<int> {
    return ConnectTcp(backend.host, backend.port, options.connect_timeout_ms);
  };
  absl::StatusOr<int> fd = pooled >= 0 ? absl::StatusOr<int>(pooled) : connect();
  if (!fd.ok()) {
    if (pool != nullptr) pool->Drop(backend.url);
    result.end = ProxyEnd::kConnectFailed;
    result.error = std::string(fd.status().message());
    return result;
  }
  UpstreamSocket socket(*fd);
  FdStream stream(socket.fd());
  stream.set_slice_ms(options.slice_ms);
  stream.set_write_timeout_ms(options.write_timeout_ms);
  stream.set_cancel([&writer] { return writer.PeerClosed(); });
  stream.set_watch_fd(writer.client_fd());
  result.phase = "waiting_headers";

  std::string head = RequestHead(backend, request, request_id, pool != nullptr);
  // Head and body in one send: a backend that reads the head alone would wait for the body.
  auto send_request = [&] {
    iovec iov[2] = {{head.data(), head.size()},
                    {const_cast<char*>(request.body.data()), request.body.size()}};
    return stream.WriteAllV(iov, 2);
  };
  bool sent = send_request();
  if (!sent && pooled >= 0 && !writer.PeerClosed()) {
    // The reused connection died while idle (nothing of this request was processed): once more
    // on a fresh connection to the same backend.
    fd = connect();
    if (!fd.ok()) {
      pool->Drop(backend.url);
      result.end = ProxyEnd::kConnectFailed;
      result.error = std::string(fd.status().message());
      return result;
    }
    socket.Reset(*fd);
    stream = FdStream(socket.fd());
    stream.set_slice_ms(options.slice_ms);
    stream.set_write_timeout_ms(options.write_timeout_ms);
    stream.set_cancel([&writer] { return writer.PeerClosed(); });
    stream.set_watch_fd(writer.client_fd());
    sent = send_request();
  }
  result.connect_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!sent) {
    if (writer.PeerClosed()) {
      result.end = ProxyEnd::kClientGone;
      return result;
    }
    result.end = ProxyEnd::kBackendFailed;
    result.error = "cannot send the request to the backend";
    RespondError(writer, extra_headers,
                 UnavailableError("backend_error", "The backend did not accept the request."));
    result.status = writer.status();
    return result;
  }
  on_sent();

  try {
    // Holds only what the parser has not consumed (body bytes move to `chunk`): bounded, so
    // that an endless chunk extension or trailer from a backend fails the answer instead of
    // growing without limit.
    boost::beast::flat_buffer buffer(kHeaderLimitBytes + kReadChunkBytes);
    // Room for a whole small answer per recv (Beast reads at most max(512, free capacity)), so
    // that it also reaches the client in one send.
    buffer.reserve(kReadBufferBytes);
    http::Headers headers;  // what the client gets
    headers.reserve(12);
    std::optional<http::ResponseParser> parsed;
    error_code ec;
    stream.set_read_timeout_ms(options.header_timeout_ms);
    stream.WaitBeforeNextRead();  // the backend cannot have answered a request just sent
    // RFC 9110 section 15.2: 1xx answers are interim (100 Continue, 103 Early Hints); the final
    // answer follows on the same connection. Passed on as the answer, the final one would be
    // left on the connection for the next request to read as its own.
    for (int interim = 0; !ec; ++interim) {
      headers.clear();
      parsed.emplace(&headers);
      parsed->header_limit(kHeaderLimitBytes);
      parsed->body_limit(boost::none);
      if (request.method == "HEAD") parsed->skip(true);
      beast_http::read_header(stream, buffer, *parsed, ec);
      const int code = parsed->status();
      if (ec || code < 100 || code >= 200 || code == 101) break;
      if (interim == kMaxInterimAnswers) ec = beast_http::error::bad_status;
    }
    http::ResponseParser& parser = *parsed;
    // Upgrades (101) are not proxied; a status outside 100-599 is no HTTP status.
    const int code = parser.status();
    if (!ec && (code == 101 || code < 100 || code > 599)) ec = beast_http::error::bad_status;
    if (ec) {
      if (ec == net::error::operation_aborted) {
        result.end = ProxyEnd::kClientGone;
        return result;
      }
      bool timeout = ec == net::error::timed_out;
      result.end = timeout ? ProxyEnd::kBackendTimeout : ProxyEnd::kBackendFailed;
      result.error = ec.message();
      RespondError(writer, extra_headers,
                   timeout ? MakeError(absl::StatusCode::kDeadlineExceeded, "backend_timeout",
                                       "The backend did not answer in time.")
                   : ec == beast_http::error::bad_status
                       ? UnavailableError("backend_error",
                                          "The backend answered with a status the gateway does "
                                          "not pass on.")
                       : UnavailableError("backend_error",
                                          "The backend closed the connection without an "
                                          "answer."));
      result.status = writer.status();
      return result;
    }

    const bool sse = parser.sse();
    for (const auto& [name, value] : extra_headers) {
      if (parser.has_request_id() && boost::beast::iequals(name, "x-request-id")) continue;
      headers.emplace_back(name, value);
    }
    if (sse) {
      // Tell intermediaries (nginx, Caddy) not to buffer the stream.
      if (!parser.has_accel_buffering()) headers.emplace_back("X-Accel-Buffering", "no");
      if (!parser.has_cache_control()) headers.emplace_back("Cache-Control", "no-cache");
    }
    std::optional<uint64_t> length;
    if (auto cl = parser.content_length()) length = *cl;
    if (parser.is_done() && !length) length = 0;
    result.phase = sse ? "streaming" : "body";
    result.status = parser.status();
    if (!writer.BeginBodyHeld(parser.status(), headers, length)) {
      result.end = ProxyEnd::kClientGone;
      return result;
    }
    result.client_started = true;
    // The head leaves with the first body bytes, or alone as soon as the body would be waited
    // for (an SSE stream's head never waits on its first event).
    stream.set_before_read_wait([&writer] { return writer.Flush(); });

    stream.set_read_timeout_ms(options.idle_timeout_ms);
    // A complete answer's connection goes back to the pool before its last bytes go to the
    // client, so that the client's next request finds it there.
    bool returned = false;
    auto return_to_pool = [&] {
      if (returned || pool == nullptr || !parser.is_done() || !parser.keep_alive() ||
          buffer.size() != 0) {
        return;
      }
      returned = true;
      pool->Put(backend.url, socket.Release());
    };
    std::string held;  // SSE bytes after the last complete event
    char chunk[kReadChunkBytes];
    while (!parser.is_done()) {
      parser.set_body_buffer(chunk, sizeof(chunk));
      beast_http::read_some(stream, buffer, parser, ec);
      if (ec == beast_http::error::need_buffer) ec = {};
      const size_t n = parser.body_bytes();
      if (!ec) return_to_pool();
      if (n > 0) {
        bool ok;
        if (sse) {
          held.append(chunk, n);
          size_t end = held.size() > kMaxHeldEventBytes ? held.size() : LastEventEnd(held);
          ok = end == 0 || writer.Write(std::string_view(held).substr(0, end));
          held.erase(0, end);
        } else {
          ok = writer.Write(std::string_view(chunk, n));
        }
        if (!ok) {
          result.end = ProxyEnd::kClientGone;
          return result;
        }
      }
      if (ec) {
        if (ec == net::error::operation_aborted) {
          result.end = ProxyEnd::kClientGone;
          return result;
        }
        result.end =
            ec == net::error::timed_out ? ProxyEnd::kBackendTimeout : ProxyEnd::kBackendFailed;
        result.error = ec.message();
        if (sse) {
          // The partial event is dropped: the client gets whole events, then one error event.
          http::ApiError error = http::ApiErrorFromStatus(UnavailableError(
              "backend_disconnected", "The backend failed in the middle of the stream."));
          writer.Write(http::SseErrorForPath(error, writer.request_path()));
          writer.End();
        } else {
          writer.Abort();
        }
        return result;
      }
    }
    if (!held.empty() && !writer.Write(held)) {
      result.end = ProxyEnd::kClientGone;
      return result;
    }
    return_to_pool();
    if (!writer.End()) {
      result.end = ProxyEnd::kClientGone;
      return result;
    }
    result.end = ProxyEnd::kDone;
    return result;
  } catch (const std::exception& e) {
    result.end = ProxyEnd::kBackendFailed;
    result.error = e.what();
    if (!writer.started()) {
      RespondError(writer, extra_headers, InternalError("internal_error", "Proxy failure."));
      result.status = writer.status();
    } else {
      writer.Abort();
    }
    return result;
  }
}

absl::StatusOr<SimpleResponse> HttpGet(const BackendAddress& backend, const std::string& path,
                                       int timeout_ms, int64_t max_body_bytes) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  DI_ASSIGN_OR_RETURN(int fd, ConnectTcp(backend.host, backend.port, timeout_ms));
  UpstreamSocket socket(fd);
  FdStream stream(fd);
  stream.set_write_timeout_ms(timeout_ms);
  stream.set_cancel([deadline] { return Clock::now() >= deadline; });
  std::string head = fmt::format(
      "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n", path,
      HostHeader(backend));
  if (!stream.WriteAll(head)) {
    return UnavailableError("backend_error", "cannot send the request");
  }
  try {
    boost::beast::flat_buffer buffer;
    beast_http::response_parser<beast_http::string_body> parser;
    parser.header_limit(kHeaderLimitBytes);
    parser.body_limit(static_cast<uint64_t>(max_body_bytes));
    stream.set_read_timeout_ms(timeout_ms);
    error_code ec;
    beast_http::read(stream, buffer, parser, ec);
    if (ec == net::error::operation_aborted || ec == net::error::timed_out) {
      return MakeError(absl::StatusCode::kDeadlineExceeded, "backend_timeout",
                       fmt::format("GET {} timed out", path));
    }
    if (ec) {
      return UnavailableError("backend_error", fmt::format("GET {}: {}", path, ec.message()));
    }
    SimpleResponse response;
    response.status = parser.get().result_int();
    response.body = std::move(parser.get().body());
    return response;
  } catch (const std::exception& e) {
    return UnavailableError("backend_error", e.what());
  }
}

}  // namespace deepinfer::gateway
