#include "api/http_server.h"

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

#include "api/errors.h"
#include "api/sse.h"
#include "boost/asio/buffer.hpp"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

namespace http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr int kPollSliceMs = 200;  // how often blocked I/O looks at the stop flag
constexpr size_t kHeaderLimitBytes = 64 * 1024;

// A blocking socket seen through Beast's SyncReadStream/SyncWriteStream concepts, with
// timeouts and a stop flag that Asio's own synchronous sockets do not offer.
class SocketStream {
 public:
  SocketStream(int fd, const std::atomic<bool>* stopping, int io_timeout_ms)
      : fd_(fd), stopping_(stopping), io_timeout_ms_(io_timeout_ms) {}

  int fd() const { return fd_; }
  // The next read may wait this long for its first byte (the keep-alive idle wait).
  void ExpectIdleWait(int timeout_ms) { next_read_timeout_ms_ = timeout_ms; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
      net::mutable_buffer b(*it);
      if (b.size() > 0) return Read(static_cast<char*>(b.data()), b.size(), ec);
    }
    ec = {};
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    error_code ec;  // never used by this file; errors surface as a short read
    return read_some(buffers, ec);
  }

  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    iovec iov[16];
    int count = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && count < 16; ++it) {
      net::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      ++count;
    }
    if (count == 0) {
      ec = {};
      return 0;
    }
    return Write(iov, count, ec);
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    error_code ec;
    return write_some(buffers, ec);
  }

  // Writes all of `data`. Returns false on error or timeout.
  bool WriteAll(std::string_view data) {
    while (!data.empty()) {
      iovec iov{const_cast<char*>(data.data()), data.size()};
      error_code ec;
      size_t n = Write(&iov, 1, ec);
      if (ec) return false;
      data.remove_prefix(n);
    }
    return true;
  }

  bool PeerClosed() const {
    pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
    int r = ::poll(&p, 1, 0);
    if (r <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
      char c;
      ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
  }

 private:
  // Waits until `events` are ready. Returns false (with ec) on timeout, stop or error.
  bool WaitFor(short events, int timeout_ms, error_code& ec) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      if (stopping_->load(std::memory_order_acquire)) {
        ec = net::error::operation_aborted;
        return false;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        ec = net::error::timed_out;
        return false;
      }
      pollfd p{fd_, events, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), kPollSliceMs)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  size_t Read(char* data, size_t size, error_code& ec) {
    int timeout = next_read_timeout_ms_ > 0 ? next_read_timeout_ms_ : io_timeout_ms_;
    while (true) {
      if (!WaitFor(POLLIN, timeout, ec)) return 0;
      ssize_t n = ::recv(fd_, data, size, 0);
      if (n > 0) {
        next_read_timeout_ms_ = 0;
        ec = {};
        return static_cast<size_t>(n);
      }
      if (n == 0) {
        ec = net::error::eof;
        return 0;
      }
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      ec = error_code(errno, boost::system::system_category());
      return 0;
    }
  }

  size_t Write(iovec* iov, int count, error_code& ec) {
    // Writes do not look at the stop flag: a response in progress is finished if it can be.
    auto deadline = Clock::now() + std::chrono::milliseconds(io_timeout_ms_);
    while (true) {
      pollfd p{fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, kPollSliceMs);
      if (r == 0) {
        if (Clock::now() > deadline) {
          ec = net::error::timed_out;
          return 0;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n >= 0) {
        ec = {};
        return static_cast<size_t>(n);
      }
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      ec = error_code(errno, boost::system::system_category());
      return 0;
    }
  }

  int fd_;
  const std::atomic<bool>* stopping_;
  int io_timeout_ms_;
  int next_read_timeout_ms_ = 0;
};

class ConnectionWriter : public ResponseWriter {
 public:
  ConnectionWriter(SocketStream& stream, const HttpRequest& request,
                   const std::atomic<bool>* stopping)
      : stream_(stream), request_(request), stopping_(stopping) {}

  bool Respond(int status, std::string_view content_type, std::string_view body) override {
    if (started_) return false;
    started_ = true;
    status_ = status;
    keep_alive_ = request_.keep_alive && !stopping_->load();
    try {
      http::response<http::string_body> res{static_cast<http::status>(status), request_.version};
      res.set(http::field::server, "deepinfer");
      res.set(http::field::content_type,
              boost::beast::string_view(content_type.data(), content_type.size()));
      res.keep_alive(keep_alive_);
      if (request_.method != "HEAD") res.body().assign(body.data(), body.size());
      res.prepare_payload();
      error_code ec;
      http::write(stream_, res, ec);
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

  SocketStream& stream_;
  const HttpRequest& request_;
  const std::atomic<bool>* stopping_;
  bool started_ = false;
  bool chunked_ = false;
  bool keep_alive_ = false;
  bool failed_ = false;
  int status_ = 0;
};

// Reads and throws away what the client is still sending (up to a bound), so that closing the
// socket after an early error answer does not reset the connection before the client read it.
void DrainInput(int fd, int64_t max_bytes, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  int64_t total = 0;
  while (total < max_bytes) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    total += n;
  }
}

bool IsQuietClose(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::timed_out ||
         ec == net::error::operation_aborted || ec == net::error::connection_reset ||
         ec == http::error::partial_message;
}

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
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgumentError("bad_address", fmt::format("Bad port {}.", options.port));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string port = std::to_string(options.port);
  int rc = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), port.c_str(),
                         &hints, &result);
  if (rc != 0) {
    return InvalidArgumentError(
        "bad_address", fmt::format("Cannot resolve host '{}': {}", options.host, gai_strerror(rc)));
  }
  std::unique_ptr<HttpServer> server(
      new HttpServer(options, std::move(handler), std::move(observer)));
  std::string last_error = "no address";
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      server->listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(result);
  if (server->listen_fd_ < 0) {
    return UnavailableError("bind_failed", fmt::format("Cannot listen on {}:{}: {}", options.host,
                                                       options.port, last_error));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  server->port_ = addr.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::~HttpServer() {
  Stop();
  // Connection threads use this object; they end within the I/O timeouts once stopping.
  std::unique_lock<std::mutex> lock(mu_);
  all_closed_.wait(lock, [&] { return num_connections_.load() == 0; });
}

bool HttpServer::Stop(int timeout_ms) {
  stopping_.store(true, std::memory_order_release);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  std::unique_lock<std::mutex> lock(mu_);
  return all_closed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [&] { return num_connections_.load() == 0; });
}

namespace {
struct ConnectionArg {
  HttpServer* server;
  int fd;
};
}  // namespace

void* HttpServer::ConnectionMain(void* arg) {
  auto* a = static_cast<ConnectionArg*>(arg);
  HttpServer* server = a->server;
  int fd = a->fd;
  delete a;
  server->ServeConnection(fd);
  ::close(fd);
  // Notify under the lock: once the count reads 0 the waiter may destroy the server (and this
  // condition variable), so nothing of it may be touched after the lock is released.
  std::lock_guard<std::mutex> lock(server->mu_);
  server->num_connections_.fetch_sub(1);
  server->all_closed_.notify_all();
  return nullptr;
}

void HttpServer::AcceptLoop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, kPollSliceMs);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(50 * 1000);  // let connections close
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (num_connections_.load() >= options_.max_connections) {
      ApiError error = ApiErrorFromStatus(
          UnavailableError("too_many_connections", "The server has too many open connections."));
      std::string body = ErrorBody(error);
      std::string response = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
          body.size(), body);
      ::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    num_connections_.fetch_add(1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, options_.thread_stack_bytes);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    auto* arg = new ConnectionArg{this, fd};
    if (pthread_create(&thread, &attr, &HttpServer::ConnectionMain, arg) != 0) {
      delete arg;
      ::close(fd);
      {
        std::lock_guard<std::mutex> lock(mu_);
        num_connections_.fetch_sub(1);
      }
      all_closed_.notify_all();
    }
    pthread_attr_destroy(&attr);
  }
}

void HttpServer::ServeConnection(int fd) {
  SocketStream stream(fd, &stopping_, options_.io_timeout_ms);
  boost::beast::flat_buffer buffer;
  try {
    while (!stopping_.load(std::memory_order_acquire)) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(kHeaderLimitBytes);
      parser.body_limit(static_cast<uint64_t>(options_.max_request_bytes));
      if (buffer.size() == 0) stream.ExpectIdleWait(options_.idle_timeout_ms);
      error_code ec;
      http::read_header(stream, buffer, parser, ec);
      if (!ec) {
        auto expect = parser.get()[http::field::expect];
        if (boost::beast::iequals(expect, "100-continue")) {
          if (!stream.WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) return;
        }
        http::read(stream, buffer, parser, ec);
      }
      HttpRequest request;
      if (parser.is_header_done()) {
        const auto& header = parser.get();
        request.method = std::string(header.method_string());
        request.target = std::string(header.target());
        request.version = header.version();
        request.keep_alive = header.keep_alive();
      }
      request.path = request.target.substr(0, request.target.find('?'));
      auto start = Clock::now();
      if (ec) {
        // An idle keep-alive connection that ends, or a client gone mid-request: no answer.
        if (IsQuietClose(ec)) return;
        absl::Status status =
            ec == http::error::body_limit
                ? RequestTooLargeError(options_.max_request_bytes)
                : InvalidArgumentError("bad_http_request",
                                       fmt::format("Malformed HTTP request: {}", ec.message()));
        request.keep_alive = false;
        ConnectionWriter writer(stream, request, &stopping_);
        writer.log().received = start;
        ApiError error = ApiErrorFromStatus(status);
        writer.Respond(error.http_status, "application/json", ErrorBody(error));
        if (observer_) {
          observer_(request, error.http_status,
                    std::chrono::duration<double>(Clock::now() - start).count(), writer.log());
        }
        ::shutdown(fd, SHUT_WR);
        DrainInput(fd, 2 * options_.max_request_bytes + (1 << 20), 5000);
        return;
      }
      auto message = parser.release();
      request.body = std::move(message.body());
      for (const auto& field : message) {
        std::string name(field.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        request.headers.emplace_back(std::move(name), std::string(field.value()));
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

}  // namespace deepinfer::api
