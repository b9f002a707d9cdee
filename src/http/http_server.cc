#include "http/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>

#include "boost/asio/buffer.hpp"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/http_reader.h"
#include "http/socket_io.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

namespace beast_http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr int kPollSliceMs = 200;  // how often blocked I/O looks at the stop flag

class ConnectionWriter : public ResponseWriter {
 public:
  ConnectionWriter(FdStream& stream, const HttpRequest& request, const std::atomic<bool>* stopping)
      : stream_(stream), request_(request), stopping_(stopping) {}

  bool Respond(int status, std::string_view content_type, std::string_view body) override {
    if (started_) return false;
    started_ = true;
    status_ = status;
    keep_alive_ = request_.keep_alive && !stopping_->load();
    try {
      beast_http::response<beast_http::string_body> res{static_cast<beast_http::status>(status),
                                                        request_.version};
      res.set(beast_http::field::server, "deepinfer");
      res.set(beast_http::field::content_type,
              boost::beast::string_view(content_type.data(), content_type.size()));
      res.keep_alive(keep_alive_);
      if (request_.method != "HEAD") res.body().assign(body.data(), body.size());
      res.prepare_payload();
      error_code ec;
      beast_http::write(stream_, res, ec);
      if (ec) keep_alive_ = false;
      return !ec;
    } catch (const std::exception& e) {
      keep_alive_ = false;
      return false;
    }
  }

  bool BeginStream(std::string_view content_type) override {
    if (started_) return false;
    started_ = true;
    status_ = 200;
    chunked_ = request_.version >= 11;
    // Without chunked coding (HTTP/1.0) the end of the body is the end of the connection.
    keep_alive_ = chunked_ && request_.keep_alive;
    std::string head = fmt::format(
        "HTTP/1.{} 200 OK\r\nServer: deepinfer\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n"
        "X-Accel-Buffering: no\r\n{}{}\r\n",
        request_.version >= 11 ? 1 : 0, content_type,
        chunked_ ? "Transfer-Encoding: chunked\r\n" : "",
        keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    return Send(head);
  }

  bool WriteStream(std::string_view data) override {
    if (!started_ || data.empty()) return started_ && !failed_;
    return chunked_ ? Send(HttpChunk(data)) : Send(data);
  }

  bool EndStream() override {
    if (!started_) return false;
    return chunked_ ? Send(kHttpLastChunk) : !failed_;
  }

  bool PeerClosed() override {
    return failed_ || stopping_->load(std::memory_order_acquire) || stream_.PeerClosed();
  }
  bool stopping() const override { return stopping_->load(std::memory_order_acquire); }
  bool started() const override { return started_; }
  int status() const override { return status_; }
  bool keep_alive() const { return keep_alive_ && !failed_; }

 private:
  bool Send(std::string_view data) {
    if (failed_) return false;
    if (!stream_.WriteAll(data)) failed_ = true;
    return !failed_;
  }

  FdStream& stream_;
  const HttpRequest& request_;
  const std::atomic<bool>* stopping_;
  bool started_ = false;
  bool chunked_ = false;
  bool keep_alive_ = false;
  bool failed_ = false;
  int status_ = 0;
};

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

HttpServer::HttpServer(const HttpServerOptions& options, HttpHandler handler, HttpObserver observer)
    : options_(options), handler_(std::move(handler)), observer_(std::move(observer)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler handler,
                                                              HttpObserver observer) {
  std::unique_ptr<HttpServer> server(
      new HttpServer(options, std::move(handler), std::move(observer)));
  TcpServerOptions tcp;
  tcp.host = options.host;
  tcp.port = options.port;
  tcp.max_connections = options.max_connections;
  tcp.thread_stack_bytes = options.thread_stack_bytes;
  std::string body = ErrorBody(ApiErrorFromStatus(
      UnavailableError("too_many_connections", "The server has too many open connections.")));
  tcp.overload_response = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  DI_ASSIGN_OR_RETURN(
      server->tcp_, TcpServer::Start(tcp, [s = server.get()](int fd) { s->ServeConnection(fd); }));
  return server;
}

HttpServer::~HttpServer() {
  Stop();
  tcp_.reset();  // waits for the connection threads
}

bool HttpServer::Stop(int timeout_ms) {
  stopping_.store(true, std::memory_order_release);
  return tcp_ == nullptr || tcp_->Stop(timeout_ms);  // null: Start failed to listen
}

void HttpServer::ServeConnection(int fd) {
  FdStream stream(fd);
  stream.set_slice_ms(kPollSliceMs);
  stream.set_write_timeout_ms(options_.io_timeout_ms);
  stream.set_cancel([this] { return stopping_.load(std::memory_order_acquire); });
  stream.set_cancel_writes(false);  // a response in progress is finished if it can be
  HttpRequestReader reader(
      stream, {options_.max_request_bytes, options_.idle_timeout_ms, options_.io_timeout_ms});
  try {
    while (!stopping_.load(std::memory_order_acquire)) {
      HttpRequest request;
      absl::Status read = reader.Next(&request);
      auto start = Clock::now();
      if (!read.ok()) {
        if (read.code() == absl::StatusCode::kCancelled) return;  // nothing to answer
        ConnectionWriter writer(stream, request, &stopping_);
        writer.log().received = start;
        ApiError error = ApiErrorFromStatus(read);
        writer.log().error = error.code;
        writer.Respond(error.http_status, "application/json",
                       ErrorBodyForPath(error, request.path));
        if (observer_) {
          observer_(request, error.http_status,
                    std::chrono::duration<double>(Clock::now() - start).count(), writer.log());
        }
        ::shutdown(fd, SHUT_WR);
        DrainInput(fd, 2 * options_.max_request_bytes + (1 << 20), 5000);
        return;
      }
      ConnectionWriter writer(stream, request, &stopping_);
      writer.log().received = start;
      handler_(request, writer);
      if (!writer.started()) {
        ApiError error = ApiErrorFromStatus(InternalError("no_response", "No response."));
        writer.Respond(error.http_status, "application/json", ErrorBody(error));
      }
      if (observer_) {
        observer_(request, writer.status(),
                  std::chrono::duration<double>(Clock::now() - start).count(), writer.log());
      }
      if (!writer.keep_alive()) return;
    }
  } catch (const std::exception& e) {
    // Beast and the standard library may throw (allocation); the connection simply ends.
    return;
  }
}

}  // namespace deepinfer::http
