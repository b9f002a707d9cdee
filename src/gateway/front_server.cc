#include "gateway/front_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <exception>

#include "api/errors.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "gateway/socket_io.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

namespace http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;

constexpr int kAcceptSliceMs = 200;
constexpr size_t kHeaderLimitBytes = 64 * 1024;
constexpr size_t kReadBufferBytes = 4 * 1024;

std::string_view ReasonPhrase(int status) {
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  if (reason.empty() || reason.front() == '<') return "Status";
  return std::string_view(reason.data(), reason.size());
}

class Writer : public FrontWriter {
 public:
  Writer(FdStream& stream, const FrontRequest& request, const std::atomic<bool>* stopping)
      : stream_(stream), request_(request), stopping_(stopping) {}

  bool Respond(int status, const Headers& headers, std::string_view body) override {
    if (started_) return false;
    bool head = request_.method == "HEAD";
    Head(status, headers, body.size(), request_.keep_alive);
    return Send(head ? std::string_view() : body);
  }

  bool BeginBody(int status, const Headers& headers,
                 std::optional<uint64_t> content_length) override {
    return BeginBodyHeld(status, headers, content_length) && Flush();
  }

  bool BeginBodyHeld(int status, const Headers& headers,
                     std::optional<uint64_t> content_length) override {
    if (started_) return false;
    chunked_ = !content_length && request_.version >= 11 && request_.method != "HEAD";
    // Without a length or chunked coding, the end of the body is the end of the connection.
    bool keep = request_.keep_alive && (content_length || chunked_);
    // A HEAD answer announces the length of a body it never carries.
    remaining_ = request_.method == "HEAD" ? std::nullopt : content_length;
    Head(status, headers, content_length, keep);
    return !failed_;
  }

  bool Flush() override { return pending_.empty() ? !failed_ : Send({}); }

  bool Write(std::string_view data) override {
    if (!started_ || failed_) return false;
    if (data.empty() || request_.method == "HEAD") return true;
    if (remaining_) {
      // Never send more than announced: a backend that over-delivers must not desync keep-alive.
      if (data.size() > *remaining_) {
        failed_ = true;
        return false;
      }
      *remaining_ -= data.size();
    }
    if (!chunked_) return Send(data);
    char size_line[24];
    int len = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
    return Send(std::string_view(size_line, static_cast<size_t>(len)), data, "\r\n");
  }

  bool End() override {
    if (!started_ || failed_) return false;
    if (remaining_ && *remaining_ != 0) {
      failed_ = true;
      return false;
    }
    return chunked_ ? Send("0\r\n\r\n") : Flush();
  }

  void Abort() override {
    // A held head still goes out: the client sees a truncated answer, as without holding.
    if (!failed_) Flush();
    failed_ = true;
    keep_alive_ = false;
  }

  bool PeerClosed() override { return failed_ || stream_.PeerClosed(); }
  bool started() const override { return started_; }
  int status() const override { return status_; }
  int client_fd() const override { return stream_.fd(); }
  std::string_view request_path() const override { return request_.path; }
  bool keep_alive() const { return keep_alive_ && !failed_; }

 private:
  // Builds the head into pending_ (sent with the next Send).
  void Head(int status, const Headers& headers, std::optional<uint64_t> length, bool keep) {
    started_ = true;
    status_ = status;
    keep_alive_ = keep && !stopping_->load();
    std::string& out = pending_;
    out.clear();
    out += request_.version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ";
    char number[24];
    int len = std::snprintf(number, sizeof(number), "%d ", status);
    out.append(number, static_cast<size_t>(len));
    out += ReasonPhrase(status);
    out += "\r\n";
    for (const auto& [name, value] : headers) {
      out += name;
      out += ": ";
      out += value;
      out += "\r\n";
    }
    if (length) {
      len = std::snprintf(number, sizeof(number), "%llu",
                          static_cast<unsigned long long>(*length));
      out += "Content-Length: ";
      out.append(number, static_cast<size_t>(len));
      out += "\r\n";
    } else if (chunked_) {
      out += "Transfer-Encoding: chunked\r\n";
    }
    out += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }

  // Sends the held head (if any) and `a`, `b`, `c` in one send.
  bool Send(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
    if (failed_) return false;
    iovec iov[4] = {{pending_.data(), pending_.size()},
                    {const_cast<char*>(a.data()), a.size()},
                    {const_cast<char*>(b.data()), b.size()},
                    {const_cast<char*>(c.data()), c.size()}};
    if (!stream_.WriteAllV(iov, 4)) failed_ = true;
    pending_.clear();
    return !failed_;
  }

  FdStream& stream_;
  const FrontRequest& request_;
  const std::atomic<bool>* stopping_;
  bool started_ = false;
  bool chunked_ = false;
  bool keep_alive_ = false;
  bool failed_ = false;
  int status_ = 0;
  std::optional<uint64_t> remaining_;
  std::string pending_;  // a held head
};

bool IsQuietClose(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::timed_out ||
         ec == net::error::operation_aborted || ec == net::error::connection_reset ||
         ec == http::error::partial_message;
}

// Reads and drops what the client still sends (bounded), so that closing after an early error
// answer does not reset the connection before the client read the answer.
void DrainInput(int fd, int64_t max_bytes, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  int64_t total = 0;
  while (total < max_bytes) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    total += n;
  }
}

std::string ErrorJson(const absl::Status& status, int* http_status) {
  api::ApiError error = api::ApiErrorFromStatus(status);
  *http_status = error.http_status;
  return api::ErrorBody(error);
}

struct ConnectionArg {
  FrontServer* server;
  int fd;
};

}  // namespace

std::string_view FrontRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

FrontServer::FrontServer(const FrontServerOptions& options, FrontHandler handler)
    : options_(options), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<FrontServer>> FrontServer::Start(const FrontServerOptions& options,
                                                                FrontHandler handler) {
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
  std::unique_ptr<FrontServer> server(new FrontServer(options, std::move(handler)));
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

FrontServer::~FrontServer() {
  Stop();
  std::unique_lock<std::mutex> lock(mu_);
  all_closed_.wait(lock, [&] { return num_connections_.load() == 0; });
}

bool FrontServer::Stop(int timeout_ms) {
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

void* FrontServer::ConnectionMain(void* arg) {
  auto* a = static_cast<ConnectionArg*>(arg);
  FrontServer* server = a->server;
  int fd = a->fd;
  delete a;
  server->ServeConnection(fd);
  ::close(fd);
  // Notify under the lock: once the count reaches 0 the destructor may free the server, so this
  // thread must not touch it after unlocking.
  std::lock_guard<std::mutex> lock(server->mu_);
  server->num_connections_.fetch_sub(1);
  server->all_closed_.notify_all();
  return nullptr;
}

void FrontServer::AcceptLoop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kAcceptSliceMs) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(50 * 1000);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (num_connections_.load() >= options_.max_connections) {
      int status = 503;
      std::string body = ErrorJson(
          UnavailableError("too_many_connections", "The gateway has too many open connections."),
          &status);
      std::string response = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Retry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
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
    if (pthread_create(&thread, &attr, &FrontServer::ConnectionMain, arg) != 0) {
      delete arg;
      ::close(fd);
      std::lock_guard<std::mutex> lock(mu_);
      num_connections_.fetch_sub(1);
      all_closed_.notify_all();
    }
    pthread_attr_destroy(&attr);
  }
}

void FrontServer::ServeConnection(int fd) {
  FdStream stream(fd);
  stream.set_slice_ms(kAcceptSliceMs);
  stream.set_write_timeout_ms(options_.io_timeout_ms);
  stream.set_cancel([this] { return stopping_.load(std::memory_order_acquire); });
  stream.set_cancel_writes(false);
  boost::beast::flat_buffer buffer;
  // Beast reads at most max(512, free capacity) per recv: without room, a 1 KB request takes
  // three recv calls.
  buffer.reserve(kReadBufferBytes);
  bool first_request = true;
  try {
    while (!stopping_.load(std::memory_order_acquire)) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(kHeaderLimitBytes);
      parser.body_limit(static_cast<uint64_t>(options_.max_request_bytes));
      stream.set_read_timeout_ms(buffer.size() == 0 ? options_.idle_timeout_ms
                                                    : options_.io_timeout_ms);
      // After an answer the client has not sent its next request yet (unless it pipelines:
      // then the buffer holds it, or the first poll returns at once).
      if (buffer.size() == 0 && !first_request) stream.WaitBeforeNextRead();
      first_request = false;
      error_code ec;
      http::read_header(stream, buffer, parser, ec);
      stream.set_read_timeout_ms(options_.io_timeout_ms);
      if (!ec) {
        auto expect = parser.get()[http::field::expect];
        if (boost::beast::iequals(expect, "100-continue")) {
          if (!stream.WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) return;
        }
        http::read(stream, buffer, parser, ec);
      }
      FrontRequest request;
      if (parser.is_header_done()) {
        const auto& header = parser.get();
        request.method = std::string(header.method_string());
        request.target = std::string(header.target());
        request.version = header.version();
        request.keep_alive = header.keep_alive();
      }
      request.path = request.target.substr(0, request.target.find('?'));
      if (ec) {
        if (IsQuietClose(ec)) return;
        absl::Status status =
            ec == http::error::body_limit
                ? api::RequestTooLargeError(options_.max_request_bytes)
                : InvalidArgumentError("bad_http_request",
                                       fmt::format("Malformed HTTP request: {}", ec.message()));
        request.keep_alive = false;
        Writer writer(stream, request, &stopping_);
        int http_status = 400;
        std::string body = ErrorJson(status, &http_status);
        writer.Respond(http_status, {{"Content-Type", "application/json"}}, body);
        ::shutdown(fd, SHUT_WR);
        DrainInput(fd, 2 * options_.max_request_bytes + (1 << 20), 2000);
        return;
      }
      auto message = parser.release();
      request.body = std::move(message.body());
      for (const auto& field : message) {
        std::string name(field.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        request.headers.emplace_back(std::move(name), std::string(field.value()));
      }
      Writer writer(stream, request, &stopping_);
      handler_(request, writer);
      writer.Flush();  // a head still held by a handler that ended without End
      if (!writer.started()) {
        int http_status = 500;
        std::string body = ErrorJson(InternalError("no_response", "No response."), &http_status);
        writer.Respond(http_status, {{"Content-Type", "application/json"}}, body);
      }
      if (!writer.keep_alive()) return;
    }
  } catch (const std::exception& e) {
    // Beast and the standard library may throw (allocation); the connection simply ends.
    return;
  }
}

}  // namespace deepinfer::gateway
