#include "http/client.h"

#include <sys/uio.h>

#include <algorithm>
#include <charconv>
#include <exception>

#include "absl/strings/ascii.h"
#include "boost/asio/error.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/read.hpp"
#include "fmt/format.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::http {
namespace {

namespace beast_http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;

// What the response buffer holds before it grows: a small answer in one recv, yet few pages per
// open stream (the gateway keeps one per stream; see the memory row in docs/gateway.md).
constexpr size_t kReadBufferBytes = 4 * 1024;
// 1xx answers skipped before the final one; more is a broken server.
constexpr int kMaxInterimAnswers = 8;
// "No limit" for a connect, which needs one.
constexpr int kLongestConnectMs = 1 << 30;

// Milliseconds left until `deadline`, at least 1 (the next wait then times out).
int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 1, kLongestConnectMs));
}

// `timeout_ms` (<= 0: none) cut to what is left before `deadline`.
int Bounded(int timeout_ms, const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return timeout_ms;
  const int left = MillisLeft(*deadline);
  return timeout_ms > 0 ? std::min(timeout_ms, left) : left;
}

// Beast and Asio throw only on allocation failure or misuse: kept at this boundary.
error_code Failure() { return make_error_code(boost::system::errc::not_enough_memory); }

}  // namespace

RequestHead::RequestHead(std::string_view method, std::string_view target,
                         std::string_view host_port, size_t size_hint)
    : framed_(method == "POST" || method == "PUT" || method == "PATCH") {
  out_.reserve(method.size() + target.size() + host_port.size() + 96 + size_hint);
  out_.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ");
  out_.append(host_port).append("\r\n");
}

void RequestHead::Add(std::string_view name, std::string_view value) {
  out_.append(name).append(": ").append(value).append("\r\n");
}

std::string RequestHead::Finish(size_t body_bytes, bool keep_alive) {
  if (body_bytes > 0 || framed_) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof(digits), body_bytes).ptr;
    out_.append("Content-Length: ").append(digits, end).append("\r\n");
  }
  // Without keep-alive, one connection per request. Either way the end of the connection is the
  // cancel signal while a request is on it.
  out_.append(keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
  return std::move(out_);
}

ClientConnection::~ClientConnection() { CloseNow(fd_); }

absl::Status ClientConnection::Connect(const Url& url) {
  DI_RETURN_IF_ERROR(Connect(url.host(), url.port()));
  return url.tls() ? StartTls(url.host()) : absl::OkStatus();
}

absl::Status ClientConnection::Connect(const std::string& host, int port) {
  const int timeout_ms =
      Bounded(options_.connect_timeout_ms > 0 ? options_.connect_timeout_ms : kLongestConnectMs,
              options_.deadline);
  DI_ASSIGN_OR_RETURN(int fd, ConnectTcp(host, port, timeout_ms));
  Adopt(fd);
  return absl::OkStatus();
}

absl::Status ClientConnection::StartTls(const std::string& host) {
  // The handshake is part of connecting: its reads end within connect_timeout_ms (cut to the
  // deadline) together. Its writes are a few kB into a fresh socket's buffer; each wait of theirs
  // has the same bound.
  const int timeout_ms =
      Bounded(options_.connect_timeout_ms > 0 ? options_.connect_timeout_ms : kLongestConnectMs,
              options_.deadline);
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  stream_.set_read_deadline(options_.deadline ? std::min(*options_.deadline, end) : end);
  stream_.set_read_timeout_ms(timeout_ms);
  stream_.set_write_timeout_ms(timeout_ms);
  tls_ = std::make_unique<TlsStream>(stream_);
  absl::Status status = tls_->Handshake(host);
  stream_.set_read_deadline(options_.deadline);
  stream_.set_write_timeout_ms(options_.write_timeout_ms);
  if (!status.ok()) Adopt(-1);  // no half-open session to send requests on
  return status;
}

void ClientConnection::Adopt(int fd) {
  CloseNow(fd_);
  tls_.reset();
  fd_ = fd;
  parser_.reset();
  buffer_.clear();
  SetUpStream();
}

int ClientConnection::Release() {
  const int fd = fd_;
  fd_ = -1;
  tls_.reset();
  stream_ = FdStream(-1);
  return fd;
}

void ClientConnection::SetUpStream() {
  stream_ = FdStream(fd_);
  stream_.set_slice_ms(options_.slice_ms);
  stream_.set_write_timeout_ms(options_.write_timeout_ms);
  stream_.set_read_deadline(options_.deadline);
  if (options_.cancel) stream_.set_cancel(options_.cancel);
  stream_.set_watch_fd(options_.watch_fd);
}

error_code ClientConnection::Send(std::string_view head, std::string_view body) {
  if (options_.deadline)
    stream_.set_write_timeout_ms(Bounded(options_.write_timeout_ms, options_.deadline));
  iovec iov[2] = {{const_cast<char*>(head.data()), head.size()},
                  {const_cast<char*>(body.data()), body.size()}};
  iovec* next = iov;
  int count = body.empty() ? 1 : 2;
  if (tls_) {
    error_code ec;
    tls_->WriteAll(iov, count, ec);
    return ec;
  }
  while (count > 0) {
    error_code ec;
    size_t n = stream_.Write(next, count, ec);
    if (ec) return ec;
    while (count > 0 && n >= next->iov_len) {
      n -= next->iov_len;
      ++next;
      --count;
    }
    if (count > 0) {
      next->iov_base = static_cast<char*>(next->iov_base) + n;
      next->iov_len -= n;
    }
  }
  return {};
}

error_code ClientConnection::ReadHead(Headers* headers, bool head_request) {
  error_code ec;
  try {
    // Room for a whole small answer per recv (Beast reads at most max(512, free capacity)), so
    // that it also reaches a proxy's client in one send.
    if (buffer_.capacity() < kReadBufferBytes) buffer_.reserve(kReadBufferBytes);
    stream_.set_read_timeout_ms(options_.header_timeout_ms);
    stream_.WaitBeforeNextRead();  // the server cannot have answered a request just sent
    // RFC 9110 section 15.2: 1xx answers are interim (100 Continue, 103 Early Hints); the final
    // answer follows on the same connection. Taken as the answer, the final one would be left on
    // the connection for the next request to read as its own.
    for (int interim = 0; !ec; ++interim) {
      headers->clear();
      parser_.emplace(headers);
      parser_->header_limit(kHeaderLimitBytes);
      parser_->body_limit(boost::none);
      if (head_request) parser_->skip(true);
      if (tls_) {
        beast_http::read_header(*tls_, buffer_, *parser_, ec);
      } else {
        beast_http::read_header(stream_, buffer_, *parser_, ec);
      }
      const int code = parser_->status();
      if (ec || code < 100 || code >= 200 || code == 101) break;
      if (interim == kMaxInterimAnswers) ec = beast_http::error::bad_status;
    }
  } catch (const std::exception&) {
    return Failure();
  }
  // Upgrades (101) are not for this client; a status outside 100-599 is no HTTP status.
  const int code = parser_->status();
  if (!ec && (code == 101 || code < 100 || code > 599)) ec = beast_http::error::bad_status;
  stream_.set_read_timeout_ms(options_.idle_timeout_ms);
  return ec;
}

size_t ClientConnection::ReadBody(char* data, size_t size, error_code& ec) {
  ec = {};
  try {
    parser_->set_body_buffer(data, size);
    if (tls_) {
      beast_http::read_some(*tls_, buffer_, *parser_, ec);
    } else {
      beast_http::read_some(stream_, buffer_, *parser_, ec);
    }
  } catch (const std::exception&) {
    ec = Failure();
  }
  if (ec == beast_http::error::need_buffer) ec = {};
  return parser_->body_bytes();
}

std::string_view ClientResponse::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
          return absl::ascii_tolower(a) == absl::ascii_tolower(b);
        })) {
      return value;
    }
  }
  return {};
}

namespace {

// `step` is "write" or "read".
absl::Status ExchangeError(const char* step, const error_code& ec) {
  if (ec == net::error::operation_aborted) {
    return MakeError(absl::StatusCode::kCancelled, util::codes::kClientClosedRequest,
                     fmt::format("{}: cancelled", step));
  }
  if (ec == net::error::timed_out) {
    return MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kTimeout,
                     fmt::format("{}: timed out", step));
  }
  return UnavailableError(util::codes::kIoError, fmt::format("{}: {}", step, ec.message()));
}

}  // namespace

absl::StatusOr<ClientResponse> Fetch(const Url& url, const ClientRequest& request,
                                     const FetchOptions& options, const BodySink& sink) {
  ClientOptions client;
  client.connect_timeout_ms =
      options.connect_timeout_ms > 0 ? options.connect_timeout_ms : options.idle_timeout_ms;
  client.write_timeout_ms = options.idle_timeout_ms;
  client.header_timeout_ms = options.idle_timeout_ms;
  client.idle_timeout_ms = options.idle_timeout_ms;
  if (options.total_timeout_ms > 0) {
    client.deadline = Clock::now() + std::chrono::milliseconds(options.total_timeout_ms);
  }
  client.cancel = options.cancel;
  ClientConnection connection(client);
  DI_RETURN_IF_ERROR(connection.Connect(url));

  size_t size_hint = 0;
  for (const auto& [name, value] : request.headers) size_hint += name.size() + value.size() + 4;
  RequestHead head(request.method, request.target, url.host_port(), size_hint);
  for (const auto& [name, value] : request.headers) head.Add(name, value);
  error_code ec =
      connection.Send(head.Finish(request.body.size(), /*keep_alive=*/false), request.body);
  if (ec) return ExchangeError("write", ec);

  ClientResponse response;
  ec = connection.ReadHead(&response.headers, request.method == "HEAD");
  if (ec) return ExchangeError("read", ec);
  response.status = connection.response().status();
  const bool to_sink = sink != nullptr && response.status >= 200 && response.status < 300;
  char chunk[ClientConnection::kBodyChunkBytes];
  while (!connection.done()) {
    const size_t n = connection.ReadBody(chunk, sizeof(chunk), ec);
    if (n > 0) {
      const std::string_view piece(chunk, n);
      if (to_sink) {
        if (!sink(piece)) {
          response.aborted = true;  // the connection closes on return: the server sees it
          return response;
        }
      } else {
        if (options.max_body_bytes > 0 &&
            response.body.size() + n > static_cast<size_t>(options.max_body_bytes)) {
          return ResourceExhaustedError(
              util::codes::kBodyTooLarge,
              fmt::format("read: the body is longer than {} bytes", options.max_body_bytes));
        }
        response.body.append(piece);
      }
    }
    if (ec) return ExchangeError("read", ec);
  }
  return response;
}

}  // namespace deepinfer::http
