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
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "api/anthropic_types.h"
#include "api/errors.h"
#include "api/http_reader.h"
#include "api/socket_io.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

namespace http = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;

constexpr int kPollSliceMs = 200;
constexpr size_t kHeaderLimitBytes = 64 * 1024;
constexpr size_t kReadBufferBytes = 4 * 1024;

std::string_view ReasonPhrase(int status) {
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  if (reason.empty() || reason.front() == '<') return "Status";
  return std::string_view(reason.data(), reason.size());
}

class Writer : public FrontWriter {
 public:
  Writer(api::FdStream& stream, const FrontRequest& request, const std::atomic<bool>* stopping)
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
      len = std::snprintf(number, sizeof(number), "%llu", static_cast<unsigned long long>(*length));
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

  api::FdStream& stream_;
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

// The error answer's body, in the shape of the API `path` belongs to (OpenAI or Anthropic).
std::string ErrorJson(const absl::Status& status, int* http_status, std::string_view path = {}) {
  api::ApiError error = api::ApiErrorFromStatus(status);
  *http_status = error.http_status;
  return api::ErrorBodyForPath(error, path);
}

}  // namespace

FrontServer::FrontServer(const FrontServerOptions& options, FrontHandler handler)
    : options_(options), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<FrontServer>> FrontServer::Start(const FrontServerOptions& options,
                                                                FrontHandler handler) {
  std::unique_ptr<FrontServer> server(new FrontServer(options, std::move(handler)));
  api::TcpServerOptions tcp;
  tcp.host = options.host;
  tcp.port = options.port;
  tcp.max_connections = options.max_connections;
  tcp.thread_stack_bytes = options.thread_stack_bytes;
  int status = 503;
  std::string body = ErrorJson(
      UnavailableError("too_many_connections", "The gateway has too many open connections."),
      &status);
  tcp.overload_response = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Retry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  DI_ASSIGN_OR_RETURN(server->tcp_, api::TcpServer::Start(tcp, [s = server.get()](int fd) {
                        s->ServeConnection(fd);
                      }));
  return server;
}

FrontServer::~FrontServer() {
  Stop();
  tcp_.reset();  // waits for the connection threads
}

bool FrontServer::Stop(int timeout_ms) {
  stopping_.store(true, std::memory_order_release);
  return tcp_ == nullptr || tcp_->Stop(timeout_ms);  // null: Start failed to listen
}

void FrontServer::ServeConnection(int fd) {
  api::FdStream stream(fd);
  stream.set_slice_ms(kPollSliceMs);
  stream.set_write_timeout_ms(options_.io_timeout_ms);
  stream.set_cancel([this] { return stopping_.load(std::memory_order_acquire); });
  stream.set_cancel_writes(false);
  api::HttpRequestReader reader(
      stream, {options_.max_request_bytes, options_.idle_timeout_ms, options_.io_timeout_ms});
  try {
    while (!stopping_.load(std::memory_order_acquire)) {
      FrontRequest request;
      absl::Status read = reader.Next(&request);
      if (!read.ok()) {
        if (read.code() == absl::StatusCode::kCancelled) return;  // nothing to answer
        Writer writer(stream, request, &stopping_);
        int http_status = 400;
        std::string body = ErrorJson(read, &http_status, request.path);
        writer.Respond(http_status, {{"Content-Type", "application/json"}}, body);
        ::shutdown(fd, SHUT_WR);
        api::DrainInput(fd, 2 * options_.max_request_bytes + (1 << 20), 2000);
        return;
      }
      Writer writer(stream, request, &stopping_);
      handler_(request, writer);
      writer.Flush();  // a head still held by a handler that ended without End
      if (!writer.started()) {
        int http_status = 500;
        std::string body =
            ErrorJson(InternalError("no_response", "No response."), &http_status, request.path);
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
